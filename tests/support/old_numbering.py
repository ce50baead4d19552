"""A store as schema version 11 and before wrote it: steps counted from 0 (step files, catalog rows, watermarks,
segment bounds) and the evaluation before training at step -1. Built from a current store by SQL and by rewriting its
step files the way a v11 writer wrote them (format-2 manifests), so the upgrade to v12 can be tested on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from unittest import mock

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pc_pipelines.store import STEP_TABLES, steplog
from pc_pipelines.store.schema import shift_keyed_steps
from pc_pipelines.store.steplog import MANIFEST, StepLogWriter, list_step_dirs

COUNTED_FROM_ZERO_SQL = [
    *(f"UPDATE compacted_{t} SET step = step - 1" + (", born = born - 1" if t == "buffer_state" else "")
      for t in STEP_TABLES),
    *shift_keyed_steps("eval_results", -1),
    *shift_keyed_steps("checkpoints", -1),
    "UPDATE runs SET compacted_through = compacted_through - 1 WHERE compacted_through IS NOT NULL",
    "UPDATE segments SET first_step = first_step - 1, last_step = last_step - 1",
]


def catalog_from_zero(con: duckdb.DuckDBPyConnection) -> None:
    """Every step number of the catalog open on ``con`` one less (as v11 and before stored them)."""
    for sql in COUNTED_FROM_ZERO_SQL:
        con.execute(sql)


def files_from_zero(runs_root: Path | str) -> None:
    """Every run's step directories under ``runs_root`` as a v11 writer left them: ``step-<k>`` becomes
    ``step-<k-1>`` holding rows of step k - 1 (``born`` one less too), with a format-2 manifest."""
    with mock.patch.object(steplog, "FIRST_STEP", 0):  # a v11 writer wrote step 0
        for run_dir in sorted(p for p in Path(runs_root).iterdir() if p.is_dir() and not p.name.startswith(".")):
            _from_zero(StepLogWriter(run_dir))


def _from_zero(writer: StepLogWriter) -> None:
    for n, d in list_step_dirs(writer.run_dir):  # lowest first: step-<n-1> is free by then
        tables = {}
        for t, schema in STEP_TABLES.items():
            table = pq.read_table(d / f"{t}.parquet", schema=schema).replace_schema_metadata(None)
            table = table.set_column(table.schema.get_field_index("step"), "step",
                                     pa.array([n - 1] * table.num_rows, pa.int64()))
            if t == "buffer_state":
                table = table.set_column(table.schema.get_field_index("born"), "born", pc.subtract(table["born"], 1))
            tables[t] = table
        old = writer.write_step(n - 1, tables)
        manifest = json.loads((old / MANIFEST).read_text())
        manifest["format"] = 2  # what a v11 writer wrote (steps from 0)
        (old / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        shutil.rmtree(d)


def count_from_zero(catalog: Path | str, runs_root: Path | str, version: int = 11) -> None:
    """Turn the current store at ``catalog`` (step files under ``runs_root``) into what a v``version`` writer left
    (:func:`catalog_from_zero`, :func:`files_from_zero`), the catalog's version set to ``version`` (its tables
    unchanged: call with a catalog already shaped as that version)."""
    con = duckdb.connect(str(catalog))
    try:
        con.execute("BEGIN")
        catalog_from_zero(con)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
        con.execute("COMMIT")
    finally:
        con.close()
    files_from_zero(runs_root)
