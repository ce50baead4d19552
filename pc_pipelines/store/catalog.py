"""The DuckDB catalog: runs, checkpoints and eval results in short transactions, views over the step logs.

DuckDB lets one process hold a database file for writing and then no other process may open it, not even
read-only (DESIGN.md section 5). So every connection here is short: open, do one thing, close. Writers and readers
that find the file locked retry with backoff until ``lock_timeout_s``; the step logs themselves never touch the
catalog, so SQL works while any number of runs write steps.

User-supplied values (run names, families, prompt ids) reach SQL only as bound parameters.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from .schema import DDL, MIGRATIONS, SCHEMA_VERSION, STEP_TABLES, view_sql
from .steplog import StepLogWriter, empty_tables, list_step_dirs

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why and how to fix it."""


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


class Store:
    """A store at ``path`` (the catalog file); step logs live in ``<path>.runs/``."""

    def __init__(self, path: str | Path, lock_timeout_s: float = 60.0) -> None:
        self.path = Path(path).resolve()
        self.runs_root = self.path.with_name(self.path.name + ".runs")
        self.lock_timeout_s = lock_timeout_s
        if any(c in str(self.runs_root) for c in "[]"):
            raise StoreError(
                f"store path {self.path} contains '[' or ']', which DuckDB's file globs read as a character class, so "
                "the views could never find the step files. Fix: put the store in a directory without brackets."
            )

    # ---- connections ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def connect(self, read_only: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
        if read_only and not self.path.exists():
            raise StoreError(
                f"no store at {self.path}. Fix: write one first (e.g. `pilot-commit simulate --store {self.path}`) "
                "or check the --store path."
            )
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.01
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                break
            except duckdb.IOException as exc:  # "Could not set lock on file": another process holds it
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise StoreError(
                        f"could not open {self.path} ({'read' if read_only else 'write'}): {exc}. Fix: close the other "
                        "process holding the catalog for writing (a long `duckdb` shell session, say) and retry."
                    ) from exc
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
        try:
            yield con
        finally:
            con.close()

    def init(self, vacuum: bool = True) -> Store:
        """Create or upgrade the catalog, refresh its views. Idempotent; safe while runs write step logs.

        ``vacuum`` also deletes step files already compacted; processes that only look (sensors, reports) pass
        False, so they never race a segment that is replaying compacted steps into fresh step files."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not (self.runs_root / "_schema" / "step-empty").exists():
            StepLogWriter(self.runs_root / "_schema").write_dir("step-empty", empty_tables())
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            if "meta" in tables:
                version = int(con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
            else:
                version = None
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
            for sql in view_sql(str(self.runs_root)):
                con.execute(sql)
            con.execute("COMMIT")
        if vacuum:
            self.vacuum()  # step files of earlier runs that compaction left for later
        return self

    def schema_version(self) -> int:
        with self.connect() as con:
            return int(con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    # ---- runs -----------------------------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith((".", "_")):
            raise StoreError(f"run id {run_id!r} cannot name a directory. Fix: use letters, digits, '-' and '_'.")
        return self.runs_root / run_id

    def register_run(self, run: RunRecord) -> Path:
        """Insert the run, or mark an existing run with the same id as running again (resume / replay)."""
        run_dir = self.run_dir(run.run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        now = _now()
        with self.connect(read_only=False) as con:
            existing = con.execute("SELECT config_hash FROM runs WHERE run_id = ?", [run.run_id]).fetchone()
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
            else:
                con.execute(
                    "INSERT INTO runs (run_id, family, method, preset, seed, config_json, config_hash, lineage_json, "
                    "kind, status, status_reason, compacted_through, run_dir, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL, ?, ?, ?)",
                    [
                        run.run_id,
                        run.family,
                        run.method,
                        run.preset,
                        run.seed,
                        json.dumps(run.config, sort_keys=True),
                        run.config_hash,
                        json.dumps(run.lineage) if run.lineage is not None else None,
                        run.kind,
                        str(run_dir),
                        now,
                        now,
                    ],
                )
        return run_dir

    def set_status(self, run_id: str, status: str, reason: str | None = None) -> None:
        if status not in {"running", "finished", "failed", "paused"}:
            raise StoreError(f"unknown run status {status!r}. Fix: use running, finished, failed or paused.")
        with self.connect(read_only=False) as con:
            con.execute(
                "UPDATE runs SET status = ?, status_reason = ?, updated_at = ? WHERE run_id = ?",
                [status, reason, _now(), run_id],
            )

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def writer(self, run_id: str) -> StepLogWriter:
        return StepLogWriter(self.run_dir(run_id))

    # ---- compaction --------------------------------------------------------------------------------------------
    def compact(self, run_id: str, through: int | None = None) -> int:
        """Move the run's steps ``<= through`` (default: all written) into the catalog; returns steps moved.

        One transaction inserts the rows and raises the watermark, so readers switch from the files to the
        catalog rows atomically; the step directories are deleted afterwards (cleanup only).
        """
        step_dirs = list_step_dirs(self.run_dir(run_id))
        if through is None:
            through = max((n for n, _ in step_dirs), default=-1)
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            low = self._watermark(con, run_id)
            todo = [d for n, d in step_dirs if low < n <= through]
            _insert_step_files(con, todo)
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
            if todo:
                steps = [n for n, _ in todo]
                for table in STEP_TABLES:
                    con.execute(f"DELETE FROM compacted_{table} WHERE run_id = ? AND list_contains(?, step)",
                                [run_id, steps])
                _insert_step_files(con, [d for _, d in todo])
            con.execute("COMMIT")
        return len(todo)

    def _watermark(self, con: duckdb.DuckDBPyConnection, run_id: str) -> int:
        """The run's compaction watermark (-1: nothing compacted), inside a caller's open transaction."""
        row = con.execute("SELECT compacted_through FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            con.execute("ROLLBACK")
            raise StoreError(f"no run {run_id!r} in {self.path}. Fix: check the run id (`pilot-commit runs`).")
        return -1 if row[0] is None else int(row[0])

    def vacuum(self, run_id: str | None = None) -> int:
        """Delete step directories already compacted into the catalog (all runs, or one). Returns how many."""
        runs = self.query(
            "SELECT run_id, compacted_through FROM runs WHERE compacted_through IS NOT NULL AND (? IS NULL OR run_id = ?)",
            [run_id, run_id],
        )
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
                [step, None if step < 0 else step, run_id],
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

    def _update_segment(self, run_id: str, segment: int, sql: str, params: list[Any]) -> None:
        with self.connect(read_only=False) as con:
            con.execute("BEGIN")
            if con.execute("SELECT 1 FROM segments WHERE run_id = ? AND segment = ?", [run_id, segment]).fetchone() is None:
                con.execute("ROLLBACK")
                raise StoreError(f"run {run_id!r} has no segment {segment}. Fix: start the run with the start_run job.")
            con.execute(f"UPDATE segments SET {sql}, updated_at = ? WHERE run_id = ? AND segment = ?",
                        [*params, _now(), run_id, segment])
            con.execute("COMMIT")

    def segment_started(self, run_id: str, segment: int, orchestrator_run_id: str | None = None) -> None:
        self._update_segment(run_id, segment, "status = 'running', attempts = attempts + 1, orchestrator_run_id = ?",
                             [orchestrator_run_id])

    def segment_done(self, run_id: str, segment: int, cumulative_rollouts: int, eval_accuracy: float | None,
                     mean_reward_std: float | None) -> None:
        self._update_segment(
            run_id, segment,
            "status = 'done', consecutive_failures = 0, error = NULL, cumulative_rollouts = ?, eval_accuracy = ?, "
            "mean_reward_std = ?",
            [int(cumulative_rollouts), eval_accuracy, mean_reward_std],
        )

    def segment_failed(self, run_id: str, segment: int, error: str) -> None:
        self._update_segment(run_id, segment,
                             "status = 'failed', consecutive_failures = consecutive_failures + 1, error = ?", [error])

    # ---- reading ----------------------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        cols, rows = self.query_table(sql, params)
        return [dict(zip(cols, row)) for row in rows]

    def query_table(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple]]:
        """Run a read-only query. A step file that vanished between the views' glob and its open (a replayed step
        renamed aside, a compacted step deleted) is a moment's race, not an error: the query is retried."""
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                with self.connect(read_only=True) as con:
                    cur = con.execute(sql, params or [])
                    return [d[0] for d in cur.description], cur.fetchall()
            except duckdb.IOException as exc:
                # Each retry re-globs, so it converges as soon as the deleting or replaying writer is done.
                if str(self.runs_root) not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005 + 0.02 * random.random())

    def list_runs(self) -> list[dict[str, Any]]:
        return self.query(
            """SELECT r.run_id, r.family, r.method, r.preset, r.seed, r.kind, r.status,
                      coalesce(s.steps, 0) AS steps, coalesce(s.sampled, 0) AS cumulative_sampled,
                      coalesce(s.trained, 0) AS cumulative_trained, r.config_hash, r.status_reason
               FROM runs r LEFT JOIN (
                   SELECT run_id, count(*) AS steps, sum(sampled_rollouts) AS sampled, sum(trained_rollouts) AS trained
                   FROM steps GROUP BY run_id) s USING (run_id)
               ORDER BY r.family, r.method, r.seed, r.created_at"""
        )

    def report(self, family: str | None = None) -> dict[str, Any]:
        """Rollouts-to-target per family and seed plus median ratios (paper Table 2)."""
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
                }
            )
        for fam in out.values():
            for key in ("grpo_over_pc", "dapo_over_pc"):
                vals = sorted(s[key] for s in fam["seeds"] if s[key] is not None)
                fam[f"median_{key}"] = _median(vals)
        return out


def _insert_step_files(con: duckdb.DuckDBPyConnection, step_dirs: Sequence[Path]) -> None:
    """Append the rows of these step directories to the ``compacted_*`` tables (inside an open transaction)."""
    if not step_dirs:
        return
    for table in STEP_TABLES:
        files = [str(d / f"{table}.parquet") for d in step_dirs]
        con.execute(f"INSERT INTO compacted_{table} BY NAME SELECT * FROM read_parquet(?, union_by_name=true)", [files])


def _median(vals: list[float]) -> float | None:
    if not vals:
        return None
    m = len(vals) // 2
    return vals[m] if len(vals) % 2 else (vals[m - 1] + vals[m]) / 2
