"""Rollouts to target (the paper's Table 2), the one rule every copy uses: the store's ``rollouts_to_target`` view
(its SQL condition is :func:`reached_sql`), ``pilot-commit simulate-demo`` and the research studies
(``research/study.py``) call :func:`target_accuracy` and :func:`first_reaching`.

* target = min(baseline peak, PC peak) of one seed (:func:`target_accuracy`);
* a method's cost = cumulative sampled rollouts at its first eval at or above the target, an accuracy within
  ``TOLERANCE`` below it counting as reached (:func:`first_reaching`; None = never);
* over seeds, the median of the per-seed ratios, seeds without a ratio left out (:func:`median`).

The view takes the smallest cumulative count among the evals that reach the target; cumulative counts never fall
from one eval to the next, so that is the first one's. tests/integration/store/test_rollouts_to_target_rule.py
checks the view, these functions and ``simulate-demo`` against one another on runs recorded by the simulator.

Worked example: GRPO evals ``[(0, .70), (10240, .80), (20480, .84), (30720, .83)]`` peak at .84, PC's
``[(0, .70), (15360, .82), (30720, .86)]`` at .86; target = .84; GRPO first reaches it at 20480, PC at 30720.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

TOLERANCE = 1e-12
"""An eval this much below the target still reaches it (the target is one of the compared peaks, recomputed)."""


def target_accuracy(baseline_peak: float | None, pc_peak: float | None) -> float | None:
    """min(baseline peak, PC peak); None when either run has no eval."""
    if baseline_peak is None or pc_peak is None:
        return None
    return min(baseline_peak, pc_peak)


def first_reaching(rollouts: Iterable[int], accuracy: Iterable[float], target: float) -> int | None:
    """Cumulative sampled rollouts at the first eval (in order) whose accuracy reaches ``target``; None: never."""
    for n, acc in zip(rollouts, accuracy):
        if acc >= target - TOLERANCE:
            return int(n)
    return None


def reached_sql(accuracy: str, target: str) -> str:
    """The condition of :func:`first_reaching` in SQL, on two column expressions."""
    return f"{accuracy} >= {target} - {TOLERANCE!r}"


def median(vals: Sequence[float | None]) -> float | None:
    """Median of the values that are not None (None when there are none): the store's ``summary`` and the studies
    summarize per-seed ratios with it."""
    present = [v for v in vals if v is not None]
    return statistics.median(present) if present else None
