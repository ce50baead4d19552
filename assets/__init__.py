"""Dagster assets: thin wrappers that load inputs, call the ``pc_pipelines`` library and attach metadata.

No algorithm lives here (DESIGN.md section 2). So far: the embedded task and base policy (``embedded.py``); the
real datasets, training segments, evaluation and reports follow (issue 5).
"""

from .embedded import EmbeddedConfig, arith_task, base_policy

__all__ = ["EmbeddedConfig", "arith_task", "base_policy"]
