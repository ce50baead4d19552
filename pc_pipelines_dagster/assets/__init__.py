"""Dagster assets: thin wrappers that load inputs, call the ``pc_pipelines`` library and attach metadata.

No algorithm lives here. Assets per group: the embedded task and its warm start (``embedded.py``: ``data``,
``policy``), the real datasets and benchmarks with their checks (``data.py``), training segments (``training.py``),
their evaluation (``evaluation.py``), reports (``reports.py``). What launches them (jobs, the sensor, the window
schedule) is beside this folder, in ``automation/``; ``pc_pipelines_dagster/definitions.py`` assembles
them.
"""

from .embedded import EmbeddedConfig, arith_task, base_policy

__all__ = ["EmbeddedConfig", "arith_task", "base_policy"]
