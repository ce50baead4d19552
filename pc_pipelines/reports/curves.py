"""What a report reads from the store: per-run curves (:func:`load_curves`) and their per-method summary
(:func:`summarize`).

Curves are read from the store's views, for the run the store compares for each (family, method, seed) (view
``compared_runs``: the finished one with the most steps, ties: the newest), exactly the runs ``rollouts_to_target``
compares:

* eval accuracy (mean over the run's benchmarks, view ``eval_curve``) vs cumulative sampled rollouts and vs steps;
* per step (view ``steps``): mean reward std of the trained groups and the informative share (trained groups whose
  rewards are not all equal).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import shell_command
from ..store import Store, StoreError
from .style import method_key


class ReportError(StoreError):
    """Nothing to report (no runs or no eval results yet); the message says what to run first."""


@dataclass(frozen=True)
class RunCurves:
    """One run's curves as the store has them. Per-step values the store holds as NULL are NaN."""

    run_id: str
    family: str
    method: str
    seed: int
    eval_step: tuple[int, ...]  # steps (from 1), 0 = before training
    eval_rollouts: tuple[int, ...]  # cumulative sampled rollouts through that step (0 before training)
    eval_accuracy: tuple[float, ...]  # mean over the run's benchmarks
    step: tuple[int, ...]  # steps (from 1)
    cumulative_sampled: tuple[int, ...]
    cumulative_trained: tuple[int, ...]
    reward_std: tuple[float, ...]  # mean reward std of the step's trained groups
    informative_share: tuple[float, ...]

    @property
    def steps(self) -> int:
        return len(self.step)

    @property
    def total_sampled(self) -> int:
        return self.cumulative_sampled[-1] if self.cumulative_sampled else 0

    @property
    def total_trained(self) -> int:
        return self.cumulative_trained[-1] if self.cumulative_trained else 0

    @property
    def final_accuracy(self) -> float | None:
        return self.eval_accuracy[-1] if self.eval_accuracy else None

    @property
    def peak_accuracy(self) -> float | None:
        return max(self.eval_accuracy) if self.eval_accuracy else None


def _float(v: Any) -> float:
    return math.nan if v is None else float(v)


def load_curves(store: Store, family: str | None = None, latest_only: bool = True) -> list[RunCurves]:
    """The curves of every run (of ``family``, or all) that has steps or evals, ordered by family, method
    (grpo, dapo, pc, others), seed. ``latest_only``: only the run compared for each (family, method, seed) (view
    ``compared_runs``), the runs ``rollouts_to_target`` compares."""
    runs = store.query("SELECT * FROM runs WHERE ? IS NULL OR family = ?", [family, family])
    if latest_only:  # the store's rule (view compared_runs), so the curves are the runs the table compares
        chosen = {r["run_id"] for r in store.query(
            "SELECT run_id FROM compared_runs WHERE ? IS NULL OR family = ?", [family, family])}
        runs = [r for r in runs if r["run_id"] in chosen]
    # the store's order of registration (runs.seq, v7), never a wall clock; a store not upgraded yet: creation time
    order = {r["run_id"]: i for i, r in enumerate(sorted(
        runs, key=lambda r: (r.get("seq") is not None, r.get("seq") or 0, r["created_at"], r["run_id"])))}
    if not runs:
        return []
    ids = [r["run_id"] for r in runs]
    evals: dict[str, list[dict]] = {}
    for r in store.query(
        "SELECT run_id, step, accuracy, cumulative_sampled FROM eval_curve WHERE list_contains(?, run_id) "
        "ORDER BY run_id, step",
        [ids],
    ):
        evals.setdefault(r["run_id"], []).append(r)
    steps: dict[str, list[dict]] = {}
    for r in store.query(
        """SELECT run_id, step, mean_reward_std, informative_share,
                  sum(sampled_rollouts) OVER w AS cumulative_sampled, sum(trained_rollouts) OVER w AS cumulative_trained
           FROM steps WHERE list_contains(?, run_id)
           WINDOW w AS (PARTITION BY run_id ORDER BY step ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
           ORDER BY run_id, step""",
        [ids],
    ):
        steps.setdefault(r["run_id"], []).append(r)
    out = []
    for r in runs:
        ev, st = evals.get(r["run_id"], []), steps.get(r["run_id"], [])
        if not ev and not st:
            continue  # registered, nothing written yet
        out.append(
            RunCurves(
                run_id=r["run_id"],
                family=r["family"],
                method=r["method"],
                seed=int(r["seed"]),
                eval_step=tuple(int(e["step"]) for e in ev),
                eval_rollouts=tuple(int(e["cumulative_sampled"]) for e in ev),
                eval_accuracy=tuple(float(e["accuracy"]) for e in ev),
                step=tuple(int(s["step"]) for s in st),
                cumulative_sampled=tuple(int(s["cumulative_sampled"] or 0) for s in st),
                cumulative_trained=tuple(int(s["cumulative_trained"] or 0) for s in st),
                reward_std=tuple(_float(s["mean_reward_std"]) for s in st),
                informative_share=tuple(_float(s["informative_share"]) for s in st),
            )
        )
    out.sort(key=lambda c: (c.family, method_key(c.method), c.seed, order[c.run_id], c.run_id))
    return out


@dataclass(frozen=True)
class MethodSummary:
    """One method of one family over its seeds; the numbers are means over the seeds' runs (exact with one seed)."""

    family: str
    method: str
    seeds: tuple[int, ...]
    run_ids: tuple[str, ...]
    steps: float
    total_sampled_rollouts: float
    total_trained_rollouts: float
    final_accuracy: float | None  # the last eval's mean accuracy
    peak_accuracy: float | None  # the best eval's mean accuracy

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"], d["run_ids"] = list(self.seeds), list(self.run_ids)
        return d


def _mean(vals: Sequence[float | None]) -> float | None:
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def summarize(curves: Iterable[RunCurves]) -> list[MethodSummary]:
    groups: dict[tuple[str, str], list[RunCurves]] = {}
    for c in curves:
        groups.setdefault((c.family, c.method), []).append(c)
    out = []
    for (family, method), cs in sorted(groups.items(), key=lambda kv: (kv[0][0], method_key(kv[0][1]))):
        out.append(
            MethodSummary(
                family=family,
                method=method,
                seeds=tuple(c.seed for c in cs),
                run_ids=tuple(c.run_id for c in cs),
                steps=_mean([c.steps for c in cs]),
                total_sampled_rollouts=_mean([c.total_sampled for c in cs]),
                total_trained_rollouts=_mean([c.total_trained for c in cs]),
                final_accuracy=_mean([c.final_accuracy for c in cs]),
                peak_accuracy=_mean([c.peak_accuracy for c in cs]),
            )
        )
    return out


def _no_data_message(store: Store, family: str | None, what: str) -> str:
    scope = f" for family {family!r}" if family else ""
    store_arg = ("--store", store.path)
    return (
        f"no {what} in {store.path}{scope} yet, so there is nothing to report. Fix: record runs into it first "
        f"(`{shell_command('pilot-commit', 'train', *store_arg, '--method', 'grpo')}`, then dapo and pc; "
        f"`{shell_command('pilot-commit', 'simulate-demo')}` shows a report of simulated runs without writing any "
        f"store); see `{shell_command('pilot-commit', 'runs', *store_arg)}`."
    )


def check_curves(store: Store, curves: Sequence[RunCurves], family: str | None) -> None:
    """Raise :class:`ReportError` (saying what to run first) when there are no runs or no eval results."""
    if not curves:
        raise ReportError(_no_data_message(store, family, "runs"))
    if not any(c.eval_step for c in curves):
        raise ReportError(_no_data_message(store, family, "eval results"))

