"""Dagster assets: thin wrappers that load inputs, call the ``pc_pipelines`` library and attach metadata.

No algorithm lives here (DESIGN.md section 2). Filled by the Dagster code-location issue.
"""
