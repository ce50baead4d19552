"""Reading the store: SQL over the catalog and the step logs (:meth:`StoreReading.query`), with retries when a step file
vanishes under a read, the run list and the per-family report."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from .rollouts_to_target import median

log = logging.getLogger(__name__)


_VANISHED = ("no such file", "errno 2", "does not exist", "not found")


def _vanished_step_file(exc: BaseException, runs_root: Path) -> bool:
    """Whether a DuckDB error is about one of the store's step files having vanished (a retryable race)."""
    msg = str(exc)
    return str(runs_root) in msg and any(k in msg.lower() for k in _VANISHED)


class StoreReading:
    """Queries over a store (mixed into :class:`~.catalog.Store`)."""

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
