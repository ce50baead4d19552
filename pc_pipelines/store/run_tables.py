"""The store's small tables: runs (registration, status, directories), eval results, checkpoints and the training
segments of a Dagster run."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import StoreError
from .names import RunId, RunIdError, validate_run_id
from .records import RunRecord
from .steplog import StepLogWriter

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _one_directory(run_id: str) -> None:
    """Refuse a run id that cannot name one directory under the store's ``.runs/``. Runs registered before run ids
    were validated keep their directory as long as it is one path component; new runs go through
    :meth:`Store.register_run` (:func:`~.names.validate_run_id`)."""
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith((".", "_")):
        raise StoreError(
            f"run id {run_id!r} cannot name a directory. Fix: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or a digit)."
        )


class RunTables:
    """The ``runs``, ``eval_results``, ``checkpoints`` and ``segments`` tables of a store (mixed into
    :class:`~.catalog.Store`)."""

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
