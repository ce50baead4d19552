"""A store's session: its short DuckDB connections with retries, the reading session over verified step files, the
integrity scan (``pilot-commit check``) and the catalog's creation and upgrade (:meth:`StoreSession.init`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import random
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..errors import inodes_fix, no_free_inodes, seconds_from_env, shell_command, sql_string
from .again import again_fix
from .errors import MissingStore, StoreError
from .held import holds
from .names import nearby_stores, shown_path, store_example, store_path_problem
from .records import PROBLEM_SCHEMA, StepProblem, StoreScan
from .schema import DDL, MIGRATIONS, SCHEMA_VERSION, STEP_TABLES, schema_problem, view_sql
from .steplog import QUARANTINE, list_step_dirs, renumber_step_dirs, verify_step_dir

log = logging.getLogger(__name__)

ENV_LOCK_WAIT = "PC_PIPELINES_STORE_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 60.0
MAX_LOCK_WAIT_S = 86_400.0


def lock_wait_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds a command waits for a catalog another process holds before it gives up: ``PC_PIPELINES_STORE_LOCK_WAIT_S``
    (default 60; 0 gives up at once; :func:`~pc_pipelines.errors.seconds_from_env`)."""
    return seconds_from_env(ENV_LOCK_WAIT, DEFAULT_LOCK_WAIT_S, 0, MAX_LOCK_WAIT_S,
                            "how long a command waits for a store another process holds", env=env)


class StoreSession:
    """A store at ``path`` (the catalog file); step logs live in ``<path>.runs/``: its connections, reading
    sessions, integrity scan and the catalog's creation and upgrade (:meth:`init`). ``lock_timeout_s``: how long
    opening the catalog waits while another process holds it (default :func:`lock_wait_s`, read when the store is
    made)."""

    def __init__(self, path: str | Path, lock_timeout_s: float | None = None) -> None:
        self.path = Path(path).resolve()
        self.runs_root = self.path.with_name(self.path.name + ".runs")
        self.lock_timeout_s = lock_wait_s() if lock_timeout_s is None else lock_timeout_s
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
                    "holding the catalog for writing (a long `duckdb` shell session, say) and retry (or wait longer: "
                    f"{ENV_LOCK_WAIT}, default {DEFAULT_LOCK_WAIT_S:g}).")
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

    def init(self, vacuum: bool = True) -> Self:
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
