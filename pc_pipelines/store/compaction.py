"""Compaction: step files folded into the catalog's tables (:meth:`StepCatalog.compact`), a replay's swap
(:meth:`StepCatalog.replace_steps`) and the vacuum of compacted files, by the run's writer only."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..errors import brief
from .errors import StoreError
from .held import holds
from .names import shown_path
from .schema import STEP_TABLES
from .steplog import list_step_dirs, quarantine_step_dir, verify_step_dir

log = logging.getLogger(__name__)


class StepCatalog:
    """The step logs' side of the catalog (mixed into :class:`~.catalog.Store`)."""

    # ---- compaction --------------------------------------------------------------------------------------------
    def compact(self, run_id: str, through: int | None = None) -> int:
        """Move the run's steps ``<= through`` (default: all written) into the catalog; returns steps moved.

        One transaction inserts the rows and raises the watermark, so readers switch from the files to the
        catalog rows atomically; the step directories are deleted afterwards (cleanup only).
        """
        step_dirs = list_step_dirs(self.run_dir(run_id))
        if through is None:
            through = max((n for n, _ in step_dirs), default=0)
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            low = self._watermark(con, run_id)
            todo = _insert_step_files(con, [d for n, d in step_dirs if low < n <= through])
            if through > low:
                con.execute("UPDATE runs SET compacted_through = ? WHERE run_id = ?", [through, run_id])
            con.execute("COMMIT")
        # Delete only what an EARLIER compaction made invisible: a reader may have globbed the directories we just
        # compacted a moment ago and still be opening them. The latest batch goes at the next compaction or vacuum.
        for n, d in step_dirs:
            if n <= low:
                shutil.rmtree(d, ignore_errors=True)
        return len(todo)

    def replace_steps(self, run_id: str, first: int, last: int) -> int:
        """After a replay of steps ``first..last`` that kept the later steps: swap the compacted rows of the
        replayed steps at or below the watermark for their new step files, in ONE transaction (readers see the old
        rows or the new, never a mix). Steps above the watermark need nothing: their files were replaced in place
        and the next :meth:`compact` moves them. The swapped files are now invisible (at or below the watermark),
        so the next compaction or vacuum deletes them. Returns the steps swapped."""
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            mark = self._watermark(con, run_id)
            todo = [(n, d) for n, d in list_step_dirs(self.run_dir(run_id)) if first <= n <= min(last, mark)]
            good = set(_verified(todo))
            todo = [(n, d) for n, d in todo if d in good]
            if todo:
                steps = [n for n, _ in todo]
                for table in STEP_TABLES:
                    con.execute(f"DELETE FROM compacted_{table} WHERE run_id = ? AND list_contains(?, step)",
                                [run_id, steps])
                _insert_step_files(con, [d for _, d in todo], verify=False)
            con.execute("COMMIT")
        return len(todo)

    def _watermark(self, con: duckdb.DuckDBPyConnection, run_id: str) -> int:
        """The run's compaction watermark (0: nothing compacted), inside a caller's open transaction."""
        rows = con.execute("SELECT compacted_through FROM runs WHERE run_id = ?", [run_id]).fetchall()
        row = rows[0] if rows else None
        if row is None:
            con.execute("ROLLBACK")
            raise StoreError(f"no run {brief(run_id)} in {shown_path(self.path)}. Fix: check the run id (`pilot-commit runs`).")
        return 0 if row[0] is None else int(row[0])

    def vacuum(self, run_id: str) -> int:
        """Delete ``run_id``'s step directories already compacted into the catalog; returns how many. Only the
        process holding the run's writer lock may (:func:`~.runlock.hold_run`; :class:`StoreError` otherwise): a
        replay writes fresh files at or below the watermark and swaps them in at its end (:meth:`replace_steps`),
        and any other process deleting them meanwhile lost the replayed steps (issue 54)."""
        if not holds(self.run_dir(run_id)):
            raise StoreError(f"vacuum({brief(run_id)}): this process does not hold the run's writer lock, and its "
                             "writer may be replaying compacted steps into fresh files. Fix: call it inside "
                             "hold_run(run_id, store.run_dir(run_id)), or leave it to the run's writer.")
        runs = self.query(
            "SELECT run_id, compacted_through FROM runs WHERE compacted_through IS NOT NULL AND run_id = ?", [run_id])
        removed = 0
        for r in runs:
            for n, d in list_step_dirs(self.run_dir(r["run_id"])):
                if n <= r["compacted_through"]:
                    shutil.rmtree(d, ignore_errors=True)
                    removed += 1
        return removed

    def reopen_after(self, run_id: str, step: int) -> None:
        """Before replaying the steps after ``step``: forget their compacted rows, evals and files."""
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            for table in STEP_TABLES:
                con.execute(f"DELETE FROM compacted_{table} WHERE run_id = ? AND step > ?", [run_id, step])
            con.execute(
                "UPDATE runs SET compacted_through = CASE WHEN compacted_through > ? THEN ? ELSE compacted_through END "
                "WHERE run_id = ?",
                [step, None if step < 1 else step, run_id],
            )
            con.execute("DELETE FROM eval_results WHERE run_id = ? AND step > ?", [run_id, step])
            con.execute("COMMIT")
        self.writer(run_id).truncate_after(step)


def _verified(step_dirs: Sequence[tuple[int, Path]]) -> list[Path]:
    """The step directories that pass their manifest; each damaged one is moved into its run's ``.quarantine/``
    (it never enters the catalog) and logged. Called by compaction, i.e. by the run's own writer."""
    good = []
    for _, d in step_dirs:
        problem = verify_step_dir(d)
        if problem is None:
            good.append(d)
            continue
        try:
            dest = quarantine_step_dir(d)
        except OSError as exc:  # e.g. a read-only volume: the reads leave it out anyway
            log.warning("step %s is damaged (%s) and could not be quarantined: %s", d, problem, exc)
        else:
            log.warning("step %s is damaged (%s): quarantined in %s; `pilot-commit check` says how to repair it",
                        d, problem, dest)
    return good


def _insert_step_files(con: duckdb.DuckDBPyConnection, step_dirs: Sequence[Path], verify: bool = True) -> list[Path]:
    """Append the rows of the intact ones of these step directories to the ``compacted_*`` tables (inside an open
    transaction); returns the directories inserted. Files are read by pyarrow at their exact paths."""
    if verify:
        step_dirs = _verified([(0, d) for d in step_dirs])
    if not step_dirs:
        return []
    fs = pafs.LocalFileSystem()
    for table, schema in STEP_TABLES.items():
        files = [str(d / f"{table}.parquet") for d in step_dirs]
        rows = pads.FileSystemDataset.from_paths(files, schema=schema, format=pads.ParquetFileFormat(),
                                                 filesystem=fs).to_table()
        name = f"_compact_{table}"
        con.register(name, rows)
        try:
            con.execute(f"INSERT INTO compacted_{table} BY NAME SELECT * FROM {name}")
        finally:
            con.unregister(name)
    return step_dirs
