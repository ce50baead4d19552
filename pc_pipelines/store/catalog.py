"""The DuckDB catalog: runs, checkpoints and eval results in short transactions, views over the step logs.

Its class :class:`Store` is what users open (``pilot-commit sql --store FILE``, the Dagster store resource): the
catalog file plus the step logs beside it (``<name>.runs/``, :mod:`.steplog`), read together in one session. The
module is named for the file it manages; ``pc_pipelines.store`` exports the class.

DuckDB lets one process hold a database file for writing and then no other process may open it, not even
read-only (docs/DESIGN.md section 5). So every connection here is short: open, do one thing, close. Writers and readers
that find the file locked retry with backoff until ``lock_timeout_s``; the step logs themselves never touch the
catalog, so SQL works while any number of runs write steps.

User-supplied values (run names, families, prompt ids) reach SQL only as bound parameters, and paths never reach
DuckDB as patterns: a reading session (:meth:`Store.connect`) lists the step directories, verifies each against its
manifest, and registers the verified files as Arrow datasets behind TEMP views; it then switches DuckDB's external
access off and locks the configuration, so nothing in a session can write or read any other file.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..errors import brief, inodes_fix, no_free_inodes, shell_command, sql_string
from .again import again_fix
from .held import holds
from .names import RunId, RunIdError, nearby_stores, shown_path, store_example, store_path_problem, validate_run_id
from .rollouts_to_target import median
from .schema import DDL, MIGRATIONS, SCHEMA_VERSION, STEP_TABLES, schema_problem, view_sql
from .steplog import (
    QUARANTINE,
    StepLogWriter,
    list_step_dirs,
    quarantine_step_dir,
    renumber_step_dirs,
    verify_step_dir,
)

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why and how to fix it."""


class MissingStore(StoreError):
    """A store path read where no store is; ``nearby``: the stores near it (a typo's likely meaning), most alike
    first, as :func:`.names.nearby_stores` shows them."""

    def __init__(self, nearby: list[str], message: str) -> None:
        super().__init__(message)
        self.nearby = nearby


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    family: str
    method: str
    preset: str
    seed: int
    config: dict[str, Any]
    config_hash: str
    kind: str
    lineage: dict[str, Any] | None = None

    @classmethod
    def for_config(cls, config: Any, run_id: str, kind: str, lineage: dict[str, Any] | None = None) -> RunRecord:
        """The record of a run of a resolved ``RunConfig`` (typed loosely: the store does not import the config)."""
        return cls(
            run_id=run_id,
            family=config.family,
            method=config.method,
            preset=config.preset,
            seed=config.seed,
            config=config.to_dict(),
            config_hash=config.config_hash,
            kind=kind,
            lineage=lineage,
        )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass(frozen=True)
class StepProblem:
    """A step the store should have and cannot serve: ``damaged`` (its directory fails its manifest; left out of
    every query), ``missing`` (no directory and no catalog rows: a gap in the run's step numbers)."""

    run_id: str
    step: int
    kind: str
    detail: str
    path: str | None
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "kind": self.kind, "detail": self.detail,
                "path": self.path, "fix": self.fix}


PROBLEM_SCHEMA = pa.schema([("run_id", pa.string()), ("step", pa.int64()), ("kind", pa.string()),
                            ("detail", pa.string()), ("path", pa.string()), ("fix", pa.string())])


@dataclass
class StoreScan:
    """What one reading session found: the verified step files per table, and the problems."""

    files: dict[str, list[str]]
    problems: list[StepProblem]
    runs: int
    steps_checked: int


_VANISHED = ("no such file", "errno 2", "does not exist", "not found")


def _vanished_step_file(exc: BaseException, runs_root: Path) -> bool:
    """Whether a DuckDB error is about one of the store's step files having vanished (a retryable race)."""
    msg = str(exc)
    return str(runs_root) in msg and any(k in msg.lower() for k in _VANISHED)


def _one_directory(run_id: str) -> None:
    """Refuse a run id that cannot name one directory under the store's ``.runs/``. Runs registered before run ids
    were validated keep their directory as long as it is one path component; new runs go through
    :meth:`Store.register_run` (:func:`~.names.validate_run_id`)."""
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith((".", "_")):
        raise StoreError(
            f"run id {run_id!r} cannot name a directory. Fix: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or a digit)."
        )


class Store:
    """A store at ``path`` (the catalog file); step logs live in ``<path>.runs/``."""

    def __init__(self, path: str | Path, lock_timeout_s: float = 60.0) -> None:
        self.path = Path(path).resolve()
        self.runs_root = self.path.with_name(self.path.name + ".runs")
        self.lock_timeout_s = lock_timeout_s
        self.last_scan: StoreScan | None = None
        self.opened = False  # init() ran: the catalog is created or upgraded for this session
        # Glob characters ('*', '[', ']') are fine: no path is ever a pattern. DuckDB itself cannot open a database
        # file whose path holds '?' (it takes the rest for URI parameters) or a backslash (a separator to it).
        bad = sorted({c for c in str(self.path) if c in "?\\"})
        if bad:
            raise StoreError(
                f"store path {self.path} contains {' and '.join(repr(c) for c in bad)}, which DuckDB cannot use in a "
                "database file's path. Fix: choose a store path without '?' or '\\' (e.g. rename that directory)."
            )

    # ---- connections ----------------------------------------------------------------------------------------------
    def check_path(self, read_only: bool) -> None:
        """Refuse a store path that cannot work before anything is opened, created or written (a StoreError whose
        fix fits the cause: a device such as /dev/null, a directory, a name too long, no permission; see
        :func:`.names.store_path_problem`). Commands that do other work before opening the store call it first."""
        problem = store_path_problem(self.path, writing=not read_only)
        if problem is not None:
            raise StoreError(problem)

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        self.check_path(read_only)
        if read_only and not self.path.exists():
            near = nearby_stores(self.path)
            raise MissingStore(near,
                f"no store at {shown_path(self.path)}. Fix: check the --store path"
                + (f" (stores near it: {', '.join(near)})" if near else "")
                + "; a store is made by the first run recorded into it (`train --store`, `simulate --store`)."
            )
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.Error as exc:  # only a lock held by another process is worth waiting for
                if not self._lock_conflict(exc) or time.monotonic() > deadline:
                    raise StoreError(self._open_failure(exc, read_only)) from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)

    @staticmethod
    def _lock_conflict(exc: BaseException) -> bool:
        """DuckDB's "Could not set lock on file ...: Conflicting lock is held in <program> (PID n)"."""
        text = str(exc).lower()
        return isinstance(exc, duckdb.IOException) and ("could not set lock" in text or "conflicting lock" in text)

    def _open_failure(self, exc: BaseException, read_only: bool) -> str:
        """The message for a catalog DuckDB would not open, with the fix for its cause (DuckDB's text tells it)."""
        import re

        text = str(exc)
        low = text.lower()
        path, mode = shown_path(self.path), "reading" if read_only else "writing"
        detail = text if len(text) <= 240 else text[:240] + "..."
        head = f"could not open the store {path} for {mode}"
        if self._lock_conflict(exc):
            held = re.search(r"conflicting lock is held in (.+?) \(PID (\d+)\)", text, flags=re.I)
            who = f" ({shown_path(held.group(1), 60)}, PID {held.group(2)})" if held else ""
            return (f"{head}: another process{who} holds the catalog, and DuckDB lets no other process open it "
                    f"meanwhile, not even to read (waited {self.lock_timeout_s:g} s). Fix: close the other process "
                    "holding the catalog for writing (a long `duckdb` shell session, say) and retry.")
        if "no space left" in low:
            inodes = no_free_inodes(self.path)
            if inodes:  # space is left, so `df -h` shows room: the fix must say inodes
                return f"{head}: {inodes}. {inodes_fix(self.path, 'retry')}"
            return (f"{head}: the disk holding it is full (DuckDB: {detail}). Fix: free space on that disk (`df -h`) "
                    "or choose a store on another disk, then retry.")
        if "permission denied" in low or "read-only file system" in low:
            return (f"{head}: permission denied (DuckDB: {detail}). Fix: give yourself read and write access to "
                    "the file and its directory (chmod/chown), or choose a store path on a writable disk of your own.")
        if "file name too long" in low:
            return (f"{head}: a name in the path is too long for the file system. Fix: choose a shorter store path "
                    "(e.g. --store ./pc.duckdb).")
        if "is a directory" in low:
            return f"{head}: it is a directory. Fix: name the catalog file, e.g. {store_example(self.path)}."
        if "not a valid duckdb database" in low:
            return (f"{head}: the file is not a DuckDB database, so it is no store's catalog (nothing was changed). "
                    "Fix: check the --store path: give a store's .duckdb file, or a new path to start a store.")
        if "corrupt" in low or "checksum" in low or "could not read enough bytes" in low:
            return (f"{head}: the catalog file is damaged (DuckDB: {detail}); nothing was changed. Fix: restore it "
                    "from a backup, or move it aside and record the runs again into a new store.")
        if "version" in low and ("storage" in low or "database file" in low or "serializ" in low):
            return (f"{head}: it was written by another DuckDB release (DuckDB: {detail}). Fix: use the DuckDB "
                    f"release this pc-pipelines pins ({duckdb.__version__} here), or export it with the release "
                    "that wrote it.")
        return (f"{head} (DuckDB: {detail}). Fix: check that --store names a store's .duckdb file and that its "
                "disk is healthy (`dmesg`, `df -h`), then retry.")

    @contextlib.contextmanager
    def connect(self, read_only: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the catalog. Read-only (the default) is a *reading session*: the catalog opened
        read-only, the step files verified and registered behind TEMP views (see :mod:`.schema`), then DuckDB's
        external access switched off and its configuration locked: no statement in the session can write a file,
        read a file outside the verified step files, attach a database or install an extension."""
        con = self._open(read_only)
        if read_only and self._counts_from_zero(con):
            con.close()
            self._upgrade_for_reading()
            con = self._open(read_only)
        try:
            if read_only:
                self.last_scan = self._prepare_session(con)
            yield con
        finally:
            con.close()

    def _counts_from_zero(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Whether the catalog is of a sound version before 12, whose steps count from 0 (read only after its
        upgrade, so that every reader sees one step numbering). An unsound one is refused as it is, unchanged."""
        try:
            rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.Error:
            return False
        text = rows[0][0] if rows else None
        old = bool(text and text.isascii() and text.isdigit() and 1 <= int(text) < 12)
        return old and self._schema_refusal(con) is None

    def _upgrade_for_reading(self) -> None:
        """Upgrade a catalog read before it is read (:meth:`_counts_from_zero`); a store that cannot be written is
        refused with the fix."""
        try:
            self._init_catalog()
        except StoreError as exc:
            raise StoreError(f"the store {shown_path(self.path)} counts steps from 0 (written before schema version "
                             f"12) and could not be upgraded to read it: {exc}") from None

    def _schema_refusal(self, con: duckdb.DuckDBPyConnection) -> str | None:
        """The one-line refusal of a catalog whose schema version is not a whole number, is missing, or does not
        match its tables and columns (see :func:`.schema.schema_problem`), with the fix; None when it is sound."""
        import shlex

        columns: dict[str, set[str]] = {}
        for table, column in con.execute(
                "SELECT c.table_name, c.column_name FROM duckdb_columns() c JOIN duckdb_tables() t "  # base tables
                "USING (database_name, schema_name, table_name) "
                "WHERE t.database_name = current_database() AND t.schema_name = 'main'"
        ).fetchall():
            columns.setdefault(table, set()).add(column)
        versions = None if "meta" not in columns else [r[0] for r in con.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'").fetchall()]
        found = schema_problem(versions, columns)
        if found is None:
            return None
        what, match = found
        path = shown_path(self.path)
        if match is None:
            fix = ("restore the catalog from a backup (its tables match no version pc-pipelines wrote), or record "
                   "the runs again into a new store")
        else:
            sql = (f"UPDATE meta SET value = '{match}' WHERE key = 'schema_version'" if versions
                   else f"INSERT INTO meta VALUES ('schema_version', '{match}')" if versions is not None
                   else "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR); "
                        f"INSERT INTO meta VALUES ('schema_version', '{match}')")
            fix = (f"restore the catalog from a backup; or, if only its version was altered, set it to the version "
                   f"its tables match ({match}): `duckdb {shlex.quote(path)} \"{sql}\"`")
        return f"the store {path} was not opened: {what}; nothing was changed. Fix: {fix}."

    def _prepare_session(self, con: duckdb.DuckDBPyConnection) -> StoreScan:
        refusal = self._schema_refusal(con)
        if refusal is not None:
            raise StoreError(refusal)
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'").fetchall()}
        run_cols = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'").fetchall()}
        compacted = all(f"compacted_{t}" in tables for t in STEP_TABLES)
        watermark = "compacted_through" in run_cols
        scan = self._scan(con, tables, watermark, compacted, checksums=True)
        fs = pafs.LocalFileSystem()
        names = {}
        for t, schema in STEP_TABLES.items():
            name = f"_step_files_{t}"
            # exact paths, read by pyarrow: nothing here is ever a glob pattern
            ds = pads.FileSystemDataset.from_paths(scan.files[t], schema=schema, format=pads.ParquetFileFormat(),
                                                   filesystem=fs)
            con.register(name, ds)
            names[t] = name
        con.register("_step_problems", pa.Table.from_pylist([p.to_dict() for p in scan.problems],
                                                            schema=PROBLEM_SCHEMA))
        if "runs" in tables:
            # the scan already took each run's files above its watermark only: no per-row watermark test needed
            # (which would also keep DuckDB from pushing filters down into the file scans)
            for sql in view_sql(names, compacted=compacted, watermark=False, sequence="seq" in run_cols):
                con.execute(sql)
        con.execute("CREATE OR REPLACE TEMP VIEW damaged_steps AS SELECT * FROM _step_problems")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        return scan

    # ---- integrity ----------------------------------------------------------------------------------------------
    def _run_dirs(self) -> list[Path]:
        if not self.runs_root.is_dir():
            return []
        return sorted(p for p in self.runs_root.iterdir()
                      if p.is_dir() and not p.name.startswith((".", "_")))

    def _scan(self, con: duckdb.DuckDBPyConnection, tables: set[str], watermark: bool, compacted: bool,
              checksums: bool) -> StoreScan:
        """List and verify every step directory above its run's watermark; find the gaps in each run's steps."""
        runs: dict[str, dict[str, Any]] = {}
        if "runs" in tables:
            cols = "run_id, kind, config_json, lineage_json" + (", compacted_through" if watermark else ", NULL")
            for run_id, kind, config_json, lineage_json, mark in con.execute(f"SELECT {cols} FROM runs").fetchall():
                runs[run_id] = {"kind": kind, "mark": 0 if mark is None else int(mark),
                                "row": {"run_id": run_id, "kind": kind, "config_json": config_json,
                                        "lineage_json": lineage_json}}
        present: dict[str, set[int]] = {}
        if compacted:
            for run_id, n, lo, hi in con.execute(
                    "SELECT run_id, count(DISTINCT step), min(step), max(step) FROM compacted_steps GROUP BY run_id"
            ).fetchall():
                if n == hi and lo == 1:
                    present[run_id] = set(range(1, n + 1))
                else:
                    present[run_id] = {r[0] for r in con.execute(
                        "SELECT DISTINCT step FROM compacted_steps WHERE run_id = ?", [run_id]).fetchall()}
        expected_last: dict[str, int] = {}
        if "eval_results" in tables:
            for run_id, hi in con.execute("SELECT run_id, max(step) FROM eval_results GROUP BY run_id").fetchall():
                expected_last[run_id] = max(expected_last.get(run_id, 0), int(hi))
        if "segments" in tables:
            for run_id, hi in con.execute(
                    "SELECT run_id, max(last_step) FROM segments WHERE status = 'done' GROUP BY run_id").fetchall():
                expected_last[run_id] = max(expected_last.get(run_id, 0), int(hi))

        files: dict[str, list[str]] = {t: [] for t in STEP_TABLES}
        problems: list[StepProblem] = []
        damaged: dict[str, dict[int, tuple[str, Path]]] = {}
        run_dirs = {d.name: d for d in self._run_dirs()}
        todo = []
        for run_id, run_dir in run_dirs.items():
            mark = runs.get(run_id, {}).get("mark", 0)
            present.setdefault(run_id, set())
            # at or below the watermark the catalog rows are the step; such files are leftovers for vacuum
            todo += [(run_id, n, d) for n, d in list_step_dirs(run_dir) if n > mark]
        checked = len(todo)
        # hashing releases the GIL: a few threads verify many small step directories faster than one
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            verdicts = list(pool.map(lambda item: verify_step_dir(item[2], checksums=checksums), todo))
        for (run_id, n, d), problem in zip(todo, verdicts):
            if problem is not None:
                damaged.setdefault(run_id, {})[n] = (problem, d)
                continue
            present[run_id].add(n)
            for t in STEP_TABLES:
                files[t].append(os.path.join(d, f"{t}.parquet"))
        for run_id in sorted(set(present) | set(damaged)):
            seen = present.get(run_id, set())
            bad = damaged.get(run_id, {})
            last = max([*seen, *bad, expected_last.get(run_id, 0)], default=0)
            quarantined = self._quarantined(run_dirs.get(run_id))
            for n in range(1, last + 1):  # steps count from 1
                if n in seen:
                    continue
                if n in bad:
                    detail, d = bad[n]
                    problems.append(StepProblem(run_id, n, "damaged", f"{detail}; left out of every query",
                                                str(d), self._fix(run_id, n, runs.get(run_id), d)))
                else:
                    q = quarantined.get(n)
                    detail = ("no step directory and no catalog rows"
                              + (f"; a damaged copy was quarantined in {q}" if q else ""))
                    fix = self._fix(run_id, n, runs.get(run_id), None)
                    if q:
                        fix += ("; the quarantined copy is kept for inspection only: "
                                f"`{shell_command('rm', '-r', q)}` deletes it")
                    problems.append(StepProblem(run_id, n, "missing", detail, str(q) if q else None, fix))
        return StoreScan(files=files, problems=problems, runs=len(set(runs) | set(run_dirs)), steps_checked=checked)

    @staticmethod
    def _quarantined(run_dir: Path | None) -> dict[int, Path]:
        out: dict[int, Path] = {}
        if run_dir is None or not (run_dir / QUARANTINE).is_dir():
            return out
        for p in sorted((run_dir / QUARANTINE).iterdir()):
            try:
                out[int(p.name.split(".", 1)[0].split("-", 1)[1])] = p
            except (IndexError, ValueError):
                continue
        return out

    def _fix(self, run_id: str, step: int, run: dict[str, Any] | None, step_dir: Path | None) -> str:
        # the whole command (store, run folder, run, flags): pasted anywhere it acts on this run (issue 54)
        row = (run or {}).get("row") or {"run_id": run_id}
        again = again_fix(self.path, row)
        if (run or {}).get("kind") == "simulate":
            redo = f"re-record the run (a simulation replays every step): {again}"
        else:
            redo = (f"replay it from a checkpoint before step {step}: re-materialize the run's Dagster segment "
                    f"partition that holds step {step}, or {again} when the run's "
                    f"latest checkpoint is before step {step} (`SELECT step FROM checkpoints WHERE run_id = "
                    f"{sql_string(run_id)}`)")
        if step_dir is not None:
            return (f"{redo}; or give the step up: `{shell_command('rm', '-r', step_dir)}` (queries already skip "
                    "it; the run's cumulative figures report it in missing_steps)")
        return f"{redo}; or accept the gap (cumulative figures report it in missing_steps)"

    def check(self, with_running: bool = False) -> Any:
        """Every damaged or missing step of every run, with full checksums (``pilot-commit check``); with
        ``with_running`` also the runs recorded as running (run_id, kind, status, status_reason), read in the same
        session: ``(scan, runs)``."""
        running: list[dict[str, Any]] = []
        with self.connect(read_only=True) as con:
            scan = self.last_scan
            if with_running and con.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs'").fetchone()[0]:
                cur = con.execute("SELECT run_id, kind, status, status_reason FROM runs WHERE status = 'running'")
                running = [dict(zip([d[0] for d in cur.description], row)) for row in cur.fetchall()]
        assert scan is not None
        return (scan, running) if with_running else scan

    def init(self, vacuum: bool = True) -> Store:
        """Create or upgrade the catalog, refresh its views. Idempotent; safe while runs write step logs.

        ``vacuum`` also deletes the compacted step files of the runs whose writer lock THIS process holds
        (:meth:`vacuum`), never another run's: a session opened for one run (a Dagster asset's, a writer's) used to
        delete every run's files at or below its watermark, among them the fresh files of a segment replaying
        compacted steps before :meth:`replace_steps` swapped them in (issue 54)."""
        try:
            self._init_catalog()
        except (duckdb.Error, OSError) as exc:  # a disk that fills under the upgrade or the views' commit
            if "no space left" not in str(exc).lower() and "disk quota" not in str(exc).lower():
                raise
            raise StoreError(self._open_failure(exc, read_only=False)) from None
        self.opened = True
        if vacuum:
            for run_dir in self._run_dirs():  # the runs this process writes; their writers vacuum the others
                if holds(run_dir):
                    self.vacuum(run_dir.name)
        return self

    def _init_catalog(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            refusal = self._schema_refusal(con)  # before any migration: a version its tables do not match
            if refusal is not None:
                con.execute("ROLLBACK")
                raise StoreError(refusal)
            tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            if "meta" in tables:
                version = int(con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
            else:
                version = None
            if version is not None and version < 12:  # steps counted from 0: the step files first (idempotent)
                for run_dir in self._run_dirs():
                    moved, damaged = renumber_step_dirs(run_dir)
                    if moved or damaged:
                        log.info("%s: renumbered %d step directories from 1 (%d damaged ones moved into %s)",
                                 run_dir, moved, damaged, QUARANTINE)
            if version is None:
                for sql in DDL:
                    con.execute(sql)
                con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            elif version > SCHEMA_VERSION:
                con.execute("ROLLBACK")
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this pc-pipelines ({SCHEMA_VERSION}). "
                    "Fix: upgrade pc-pipelines to read it (nothing was changed)."
                )
            else:
                while version < SCHEMA_VERSION:
                    if version not in MIGRATIONS:
                        con.execute("ROLLBACK")
                        raise StoreError(f"no upgrade path from schema version {version}. Fix: rebuild the store.")
                    for sql in MIGRATIONS[version]:
                        con.execute(sql)
                    version += 1
                    log.info("upgraded %s to schema version %d", self.path, version)
                con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
            for sql in view_sql():  # the catalog's views name no file (see schema.view_sql)
                con.execute(sql)
            con.execute("COMMIT")

    def schema_version(self) -> int:
        with self.connect() as con:
            return int(con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    def own_paths(self) -> list[tuple[Path, str]]:
        """What a command reading this store must never write over (``reads`` of
        :func:`pc_pipelines.durable.check_user_output`), as ``(path, what it is)``: the catalog, its write-ahead log,
        the step logs (``<catalog>.runs/``) and the folders of the checkpoints the catalog lists (read when the
        catalog opens; a catalog that does not is refused by the command's own read)."""
        own = [(self.path, "the store's catalog"), (self.path.with_name(self.path.name + ".wal"),
                                                    "the store's write-ahead log"),
               (self.runs_root, "the store's step logs")]
        try:
            con = self._open(True)
        except (duckdb.Error, StoreError, OSError):
            return own
        try:
            rows = con.execute("SELECT run_id, path FROM checkpoints ORDER BY run_id, step").fetchall()
        except duckdb.Error:
            rows = []
        finally:
            con.close()
        folders: dict[Path, str] = {}
        for run_id, path in rows:  # a run's checkpoints sit side by side: their folder is the run's checkpoint tree
            folders.setdefault(Path(path).parent, f"the checkpoints of run {run_id}")
        return own + list(folders.items())

    # ---- runs -----------------------------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        """The step-log directory of an existing run. A run id already checked (:class:`~.names.RunId`) is taken as
        it is; any other must at least name one directory (:func:`_one_directory`)."""
        if type(run_id) is not RunId:
            _one_directory(run_id)
        return self.runs_root / run_id

    @staticmethod
    def validate_run_id(run_id: str) -> str:
        try:
            return validate_run_id(run_id)
        except RunIdError as exc:
            raise StoreError(str(exc)) from None

    def register_run(self, run: RunRecord, planned_steps: int | None = None) -> Path:
        """Insert the run, or mark an existing run with the same id as running again (resume / replay).

        ``planned_steps``: the run's total as its command asked for it (``train --steps N``; a resume may change
        it), kept in ``lineage_json`` as ``planned_steps`` (``list_runs`` shows it where the run has no segment
        plan); None leaves what the run has."""
        run_dir = self.run_dir(self.validate_run_id(run.run_id))
        run_dir.mkdir(parents=True, exist_ok=True)
        now = _now()
        lineage = run.lineage
        if planned_steps is not None:
            lineage = {**(lineage or {}), "planned_steps": int(planned_steps)}
        with self.connect(read_only=False) as con:
            existing = con.execute("SELECT config_hash, lineage_json FROM runs WHERE run_id = ?",
                                   [run.run_id]).fetchone()
            if existing and existing[0] != run.config_hash:
                raise StoreError(
                    f"run {run.run_id!r} already exists with a different config (hash {existing[0]} != "
                    f"{run.config_hash}). Fix: pick another --run-name, or drop the old run's rows."
                )
            if existing:
                con.execute(
                    "UPDATE runs SET status = 'running', status_reason = NULL, updated_at = ? WHERE run_id = ?",
                    [now, run.run_id],
                )
                if planned_steps is not None:  # the rest of the lineage stays the first registration's
                    kept = json.loads(existing[1]) if existing[1] else {}
                    con.execute("UPDATE runs SET lineage_json = ? WHERE run_id = ?",
                                [json.dumps({**kept, "planned_steps": int(planned_steps)}), run.run_id])
            else:
                con.execute(
                    "INSERT INTO runs (run_id, family, method, preset, seed, config_json, config_hash, lineage_json, "
                    "kind, status, status_reason, compacted_through, run_dir, created_at, updated_at, seq) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL, ?, ?, ?, "
                    "(SELECT coalesce(max(seq), 0) + 1 FROM runs))",
                    [
                        run.run_id,
                        run.family,
                        run.method,
                        run.preset,
                        run.seed,
                        json.dumps(run.config, sort_keys=True),
                        run.config_hash,
                        json.dumps(lineage) if lineage is not None else None,
                        run.kind,
                        str(run_dir),
                        now,
                        now,
                    ],
                )
        return run_dir

    def set_status(self, run_id: str, status: str, reason: str | None = None) -> None:
        if status not in {"running", "finished", "failed", "paused", "stopped"}:
            raise StoreError(f"unknown run status {status!r}. Fix: use running, finished, failed, paused or stopped.")
        with self.connect(read_only=False) as con:
            con.execute(
                "UPDATE runs SET status = ?, status_reason = ?, updated_at = ? WHERE run_id = ?",
                [status, reason, _now(), run_id],
            )

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def writer(self, run_id: str) -> StepLogWriter:
        return StepLogWriter(self.run_dir(self.validate_run_id(run_id)))

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

    # ---- small tables -------------------------------------------------------------------------------------------
    def add_eval_results(self, rows: Sequence[dict[str, Any]]) -> None:
        """Upsert eval rows: (run_id, step, benchmark, k, temperature, accuracy[, n_prompts])."""
        if not rows:
            return
        now = _now()
        with self.connect(read_only=False) as con:
            con.executemany(
                "INSERT OR REPLACE INTO eval_results (run_id, step, benchmark, k, temperature, accuracy, n_prompts, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [r["run_id"], int(r["step"]), r["benchmark"], int(r.get("k", 1)), float(r.get("temperature", 0.0)),
                     float(r["accuracy"]), r.get("n_prompts"), now]
                    for r in rows
                ],
            )

    def add_checkpoint(self, run_id: str, step: int, path: str) -> None:
        with self.connect(read_only=False) as con:
            con.execute(
                "INSERT OR REPLACE INTO checkpoints (run_id, step, path, created_at) VALUES (?, ?, ?, ?)",
                [run_id, step, path, _now()],
            )

    # ---- training segments (the Dagster partitions of a run) -----------------------------------------------------
    def plan_segments(self, run_id: str, bounds: Sequence[tuple[int, int]]) -> None:
        """Record a run's segments as (first_step, last_step) pairs. Idempotent for the same plan; a different plan
        for a run that already has one is refused (its checkpoints and partitions follow the first plan)."""
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            have = con.execute("SELECT segment, first_step, last_step FROM segments WHERE run_id = ? ORDER BY segment",
                               [run_id]).fetchall()
            want = [(k, int(a), int(b)) for k, (a, b) in enumerate(bounds)]
            if have and have != want:
                con.execute("ROLLBACK")
                raise StoreError(
                    f"run {run_id!r} already has a segment plan of {len(have)} segments ({have[0][2] - have[0][1] + 1} "
                    f"steps each), not this one. Fix: start it with its original segment length and total steps, or "
                    "choose another run name."
                )
            if not have:
                now = _now()
                con.executemany(
                    "INSERT INTO segments (run_id, segment, first_step, last_step, status, attempts, "
                    "consecutive_failures, updated_at) VALUES (?, ?, ?, ?, 'planned', 0, 0, ?)",
                    [[run_id, k, a, b, now] for k, a, b in want],
                )
            con.execute("COMMIT")

    def segments(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Segment rows of one run (or all), in order."""
        return self.query(
            "SELECT * FROM segments WHERE ? IS NULL OR run_id = ? ORDER BY run_id, segment", [run_id, run_id]
        )

    def _update_segment(self, run_id: str, segment: int, sql: str, params: list[Any], where: str = "TRUE",
                        where_params: Sequence[Any] = (), touch: bool = True) -> tuple[dict[str, Any], bool]:
        """Update one segment row in one transaction when ``where`` holds for it (``touch``: and set its
        ``updated_at``); the row as it was before, and whether it was updated."""
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            cur = con.execute("SELECT * FROM segments WHERE run_id = ? AND segment = ?", [run_id, segment])
            row = cur.fetchone()
            if row is None:
                con.execute("ROLLBACK")
                raise StoreError(f"run {run_id!r} has no segment {segment}. Fix: start the run with the start_run job.")
            before = dict(zip([d[0] for d in cur.description], row))
            stamp, stamped = (", updated_at = ?", [_now()]) if touch else ("", [])
            n = con.execute(f"UPDATE segments SET {sql}{stamp} WHERE run_id = ? AND segment = ? AND ({where}) "
                            "RETURNING segment", [*params, *stamped, run_id, segment, *where_params]).fetchall()
            con.execute("COMMIT")
        return before, bool(n)

    def segment_started(self, run_id: str, segment: int, orchestrator_run_id: str | None = None) -> dict[str, Any]:
        """Record an attempt at the segment (``orchestrator_run_id``: the Dagster run making it); the caller holds
        the run's writer lock, so no other process is training it. A ``done`` segment stays done while it is
        re-materialized (its rows and checkpoints stay valid until the replay replaces them at its end); any other
        becomes ``running``. Returns the row as it was."""
        before, _ = self._update_segment(
            run_id, segment, "status = CASE WHEN status = 'done' THEN 'done' ELSE 'running' END, "
            "attempts = attempts + 1, orchestrator_run_id = ?", [orchestrator_run_id])
        return before

    def segment_done(self, run_id: str, segment: int, cumulative_rollouts: int, eval_accuracy: float | None,
                     mean_reward_std: float | None) -> None:
        self._update_segment(
            run_id, segment,
            "status = 'done', consecutive_failures = 0, error = NULL, cumulative_rollouts = ?, eval_accuracy = ?, "
            "mean_reward_std = ?",
            [int(cumulative_rollouts), eval_accuracy, mean_reward_std],
        )

    def segment_stopped(self, run_id: str, segment: int, reason: str, orchestrator_run_id: str | None = None) -> None:
        """Record an attempt a stop request ended (SIGTERM, Ctrl-C) at a step boundary: ``stopped`` with ``reason``
        in ``error``, no failure counted (the sensor resumes it from its checkpoint). A ``done`` segment stays done."""
        where, params = ("orchestrator_run_id = ?", [orchestrator_run_id]) if orchestrator_run_id else ("TRUE", [])
        self._update_segment(run_id, segment, "status = CASE WHEN status = 'done' THEN 'done' ELSE 'stopped' END, "
                             "error = ?", [reason], where=where, where_params=params)

    def segment_failed(self, run_id: str, segment: int, error: str, orchestrator_run_id: str | None = None,
                       only_running: bool = False) -> bool:
        """Record a failed attempt: ``failed``, one more consecutive failure, ``error``. A ``done`` segment stays
        done (a failed re-materialization leaves the previous rows and checkpoints in place) and keeps the error
        for the record. ``orchestrator_run_id``: only while the row is still that Dagster run's attempt;
        ``only_running``: only while it is ``running``. Returns whether it was recorded."""
        where, params = ["TRUE"], []
        if orchestrator_run_id is not None:
            where.append("orchestrator_run_id = ?")
            params.append(orchestrator_run_id)
        if only_running:
            where.append("status = 'running'")
        _, done = self._update_segment(
            run_id, segment, "status = CASE WHEN status = 'done' THEN 'done' ELSE 'failed' END, "
            "consecutive_failures = consecutive_failures + 1, error = ?", [error],
            where=" AND ".join(where), where_params=params)
        return done

    # ---- reading ----------------------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        cols, rows = self.query_table(sql, params)
        return [dict(zip(cols, row)) for row in rows]

    def query_table(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple]]:
        """Run a read-only query. A step file that vanished between the views' glob and its open (a replayed step
        renamed aside, a compacted step deleted) is a moment's race, not an error: the query is retried. Any other
        error (a statement refused by the session's settings, which may also name a step file) is raised at once."""
        def run(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[tuple]]:
            cur = con.execute(sql, params or [])
            return [d[0] for d in cur.description], cur.fetchall()

        return self.reading(run)

    def reading(self, work: Any) -> Any:
        """``work(con)`` in a reading session, retried as :meth:`query_table` says."""
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                with self.connect(read_only=True) as con:
                    return work(con)
            except duckdb.Error as exc:
                # Each retry lists the step directories again, so it converges as soon as the deleting or replaying
                # writer is done. (Only errors about the store's own step files are retried.)
                if not _vanished_step_file(exc, self.runs_root) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005 + 0.02 * random.random())

    def list_runs(self) -> list[dict[str, Any]]:
        """Each run with its steps and cumulative rollouts. ``planned_steps``: the total its Dagster segment plan
        asks for, else the total its command asked for (``train --steps N``: lineage ``planned_steps``), else None. ``missing_steps``: steps it should have and the store cannot serve
        (damaged or gone; its cumulative figures are then lower bounds), ``damaged_steps`` those of them whose
        directory is there but fails its manifest, ``problems`` both in words (``pilot-commit check`` says how to
        repair them)."""
        def run(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
            has_segments = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'segments'").fetchone()[0]
            planned = ("(SELECT run_id, max(last_step) AS planned FROM segments GROUP BY run_id)" if has_segments
                       else "(SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS planned WHERE false)")
            cur = con.execute(
                f"""SELECT r.run_id, r.family, r.method, r.preset, r.seed, r.kind, r.status,
                          coalesce(s.steps, 0) AS steps, coalesce(p.planned, TRY_CAST(json_extract_string(
                              r.lineage_json, '$.planned_steps') AS BIGINT)) AS planned_steps,
                          coalesce(s.sampled, 0) AS cumulative_sampled,
                          coalesce(s.trained, 0) AS cumulative_trained, r.config_hash, r.status_reason,
                          coalesce(d.missing, 0) AS missing_steps, coalesce(d.damaged, 0) AS damaged_steps,
                          d.problems
                   FROM runs r LEFT JOIN (
                       SELECT run_id, count(*) AS steps, sum(sampled_rollouts) AS sampled,
                              sum(trained_rollouts) AS trained
                       FROM steps GROUP BY run_id) s USING (run_id)
                   LEFT JOIN {planned} p USING (run_id)
                   LEFT JOIN (
                       SELECT run_id, count(*) AS missing, count(*) FILTER (WHERE kind = 'damaged') AS damaged,
                              string_agg(format('step {{}} {{}}', step, kind), ', ' ORDER BY step) AS problems
                       FROM damaged_steps GROUP BY run_id) d USING (run_id)
                   ORDER BY r.family, r.method, r.seed, r.created_at"""
            )
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

        return self.reading(run)

    def report(self, family: str | None = None) -> dict[str, Any]:
        """Rollouts-to-target per family and seed plus median ratios (paper Table 2), with the run compared for each
        method (view ``compared_runs``: :data:`.schema.COMPARED_RUN_RULE`) and its steps."""
        rows = self.query(
            "SELECT * FROM rollouts_to_target WHERE ? IS NULL OR family = ? ORDER BY family, seed", [family, family]
        )
        out: dict[str, Any] = {}
        for r in rows:
            fam = out.setdefault(r["family"], {"seeds": []})
            fam["seeds"].append(
                {
                    "seed": r["seed"],
                    "target": r["target"],
                    "rollouts": {"grpo": r["grpo"], "dapo": r["dapo"], "pc": r["pc"]},
                    "grpo_over_pc": r["grpo_over_pc"],
                    "dapo_over_pc": r["dapo_over_pc"],
                    # > 0: a compared run lacks steps, so its rollout counts are lower bounds (`pilot-commit check`)
                    "missing_steps": r["missing_steps"],
                    # the run compared for each method (COMPARED_RUN_RULE; None: the method has no run) and its steps
                    "runs": {m: r[f"{m}_run"] for m in ("grpo", "dapo", "pc")},
                    "steps": {m: r[f"{m}_steps"] for m in ("grpo", "dapo", "pc")},
                }
            )
        for fam in out.values():
            for key in ("grpo_over_pc", "dapo_over_pc"):
                fam[f"median_{key}"] = median([s[key] for s in fam["seeds"]])
        return out


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
