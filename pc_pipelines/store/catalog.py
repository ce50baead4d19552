"""The DuckDB catalog: runs, checkpoints and eval results in short transactions, views over the step logs.

Its class :class:`Store` is what users open (``pilot-commit sql --store FILE``, the Dagster store resource): the
catalog file plus the step logs beside it (``<name>.runs/``, :mod:`.steplog`), read together in one session. The
module is named for the file it manages; ``pc_pipelines.store`` exports the class.

DuckDB lets one process hold a database file for writing and then no other process may open it, not even
read-only (docs/DESIGN.md section 5). So every connection here is short: open, do one thing, close. Writers and readers
that find the file locked retry with backoff until ``lock_timeout_s`` (``PC_PIPELINES_STORE_LOCK_WAIT_S``, default
60 s); the step logs themselves never touch the catalog, so SQL works while any number of runs write steps.

User-supplied values (run names, families, prompt ids) reach SQL only as bound parameters, and paths never reach
DuckDB as patterns: a reading session (:meth:`Store.connect`) lists the step directories, verifies each against its
manifest, and registers the verified files as Arrow datasets behind TEMP views; it then switches DuckDB's external
access off and locks the configuration, so nothing in a session can write or read any other file.

:class:`Store` is put together from its parts, one module a role: :mod:`.session` (connections, the reading
session, the integrity scan, the catalog's creation and upgrade), :mod:`.run_tables` (runs, eval results,
checkpoints, segments), :mod:`.compaction` (compaction, a replay's swap, the writer's vacuum) and :mod:`.reading`
(queries, the run list, the report); :mod:`.errors` and :mod:`.records` hold its errors and records. Their names
are exported here and from ``pc_pipelines.store`` as before.
"""

from __future__ import annotations

from .compaction import StepCatalog
from .errors import MissingStore, StoreError
from .reading import StoreReading
from .records import PROBLEM_SCHEMA, RunRecord, StepProblem, StoreScan
from .run_tables import RunTables
from .session import StoreSession

__all__ = ["PROBLEM_SCHEMA", "MissingStore", "RunRecord", "StepProblem", "Store", "StoreError", "StoreScan"]


class Store(StoreReading, RunTables, StepCatalog, StoreSession):
    """A store at ``path`` (the catalog file); step logs live in ``<path>.runs/``."""
