"""The prompt-statistics store: per-step Parquet logs under the run directory and a DuckDB catalog with views.

Writing never blocks reading (docs/DESIGN.md section 5). See :mod:`.schema` for the layout and the tables,
:mod:`.steplog` for the atomic step writes, :mod:`.catalog` for the catalog and its short transactions,
:mod:`.runlock` for the one-writer-per-run lock.
"""

from .catalog import RunRecord, Store, StoreError
from .runlock import RunBusyError, hold_run, refuse_symlinked, remove_run, run_has_data
from .schema import SCHEMA_VERSION, STEP_TABLES
from .steplog import StepLogWriter, step_tables

__all__ = ["RunBusyError", "RunRecord", "SCHEMA_VERSION", "STEP_TABLES", "Store", "StoreError", "StepLogWriter",
           "hold_run", "refuse_symlinked", "remove_run", "run_has_data", "step_tables"]
