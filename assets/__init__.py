"""Dagster assets: thin wrappers that load inputs, call the ``pc_pipelines`` library and attach metadata.

No algorithm lives here (DESIGN.md section 2): the embedded task and base policy (``embedded.py``), the real
datasets and benchmarks (``data.py``), training runs, segments and their evaluation (``training.py``), reports
(``reports.py``); ``pc_pipelines/definitions.py`` gathers them.
"""

from .embedded import EmbeddedConfig, arith_task, base_policy

__all__ = ["EmbeddedConfig", "arith_task", "base_policy"]
