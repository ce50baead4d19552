"""The prompt-statistics store: per-step Parquet logs under the run directory and a DuckDB catalog with views.

Writing never blocks reading (DESIGN.md section 5). See :mod:`.schema` for the layout and the tables,
:mod:`.steplog` for the atomic step writes, :mod:`.catalog` for the catalog and its short transactions.
"""

from .catalog import RunRecord, Store, StoreError
from .schema import SCHEMA_VERSION, STEP_TABLES
from .steplog import StepLogWriter, step_tables

__all__ = ["RunRecord", "SCHEMA_VERSION", "STEP_TABLES", "Store", "StoreError", "StepLogWriter", "step_tables"]
