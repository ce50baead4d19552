"""Where a training segment stands after each step: step k of N in the segment, the run's step of its total, the
step's rewards and rollouts, seconds a step and the time left. One :class:`SegmentProgress` per segment; each
:class:`StepProgress` it returns is both the console's step line and the Dagster UI's per-step observation, so the
two always show the same numbers (rounded for reading: 3 decimals, whole seconds above a minute).

Seconds a step is the segment's wall time so far over its steps (evaluations included, as the time left will
include them); the first step also loads the policy and the engine, so early estimates run high.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..steps import segment_name
from .records import StepRecord


def duration(seconds: float | None) -> str:
    """``seconds`` for reading: ``42 s``, ``3 min 05 s``, ``2 h 07 min`` (``-`` when unknown)."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass(frozen=True)
class StepProgress:
    """One step as the UI and the console show it."""

    run_id: str
    step: int  # the run's step (from 1, as stored and on every screen)
    segment: int  # this segment's number in its partition key seg-NNNN (from 0; screens show seg-NNNN)
    segments: int  # the run's number of segments
    segment_step: int  # 1..segment_steps: how far into this segment
    segment_steps: int
    run_step: int  # 1..run_steps: how far into the run (the step itself)
    run_steps: int
    mean_reward: float  # of the step's trained batch (its pass rate with 0/1 rewards); None-free: 0 when none trained
    reward_std: float  # mean over trained groups of the group's reward std
    informative_share: float  # share of trained groups whose rewards are not all equal
    step_rollouts: int  # rollouts sampled this step (pilots, commits, full groups)
    cumulative_rollouts: int
    seconds_per_step: float
    eta_s: float  # time left in this segment at seconds_per_step
    eval_accuracy: float | None = None  # held-out accuracy when this step was evaluated
    screened_by_prior: int = 0  # drawn prompts the history prior skipped without a rollout (screen_strategy)
    prior_rollouts_saved: int = 0  # the first rollouts those prompts would have cost

    def line(self) -> str:
        """The console's step line."""
        text = (f"step {self.segment_step}/{self.segment_steps} of segment "
                f"{segment_name(self.segment)} of {self.segments} "
                f"(run step {self.run_step}/{self.run_steps}): mean reward {self.mean_reward:.3f}, "
                f"reward std {self.reward_std:.3f}, informative {self.informative_share:.2f}, "
                f"rollouts {self.step_rollouts:,} (cumulative {self.cumulative_rollouts:,}), "
                f"{self.seconds_per_step:.1f} s/step, ETA {duration(self.eta_s)}")
        if self.screened_by_prior:
            text += f", skipped by prior {self.screened_by_prior:,} (pilots saved {self.prior_rollouts_saved:,} rollouts)"
        if self.eval_accuracy is not None:
            text += f", held-out accuracy {self.eval_accuracy:.3f}"
        return text

    def metadata(self) -> dict[str, Any]:
        """The observation's fields, rounded for reading (plain JSON values): the progress in words (naming the run:
        the asset's overview shows any run's latest) and the ETA first (the UI lists them in this order); ``step`` as
        stored, ``segment`` by its partition key as in the words (:mod:`pc_pipelines.steps`)."""
        out: dict[str, Any] = {
            "progress": (f"{self.run_id}: segment {segment_name(self.segment)} of {self.segments}, step {self.segment_step} of "
                         f"{self.segment_steps}; run step {self.run_step} of {self.run_steps}"),
            "eta": duration(self.eta_s),
        }
        out.update(asdict(self))
        out["segment"] = segment_name(self.segment)
        for k in ("mean_reward", "reward_std", "informative_share", "eval_accuracy"):
            if out[k] is not None:
                out[k] = round(float(out[k]), 3)
        out["seconds_per_step"] = round(self.seconds_per_step, 1)
        out["eta_s"] = round(self.eta_s)
        if out["eval_accuracy"] is None:
            del out["eval_accuracy"]
        if not self.screened_by_prior:  # the history prior off (or idle this step): the paper's fields only
            del out["screened_by_prior"], out["prior_rollouts_saved"]
        return out


class SegmentProgress:
    """Counts one segment's steps (``first_step..last_step`` of a run of ``run_steps`` in ``segments`` segments);
    a resumed attempt's time a step counts only the steps it trained."""

    def __init__(self, run_id: str, segment: int, segments: int, first_step: int, last_step: int, run_steps: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= first_step <= last_step <= run_steps:
            raise ValueError(f"segment steps {first_step}..{last_step} do not fit a run of {run_steps} steps")
        self.run_id, self.segment, self.segments = run_id, segment, segments
        self.first_step, self.last_step, self.run_steps = first_step, last_step, run_steps
        self.clock = clock
        self.started = clock()
        self.trained = 0

    def observe(self, rec: StepRecord) -> StepProgress:
        """The progress after ``rec``'s step."""
        self.trained += 1
        per_step = (self.clock() - self.started) / self.trained
        led = rec.ledger
        return StepProgress(
            run_id=self.run_id, step=rec.step, segment=self.segment, segments=self.segments,
            segment_step=rec.step - self.first_step + 1, segment_steps=self.last_step - self.first_step + 1,
            run_step=rec.step, run_steps=self.run_steps,
            mean_reward=float(rec.mean_reward) if led.get("trained_rollouts", 1) else 0.0,
            reward_std=float(rec.reward_std), informative_share=float(led.get("informative_share", 0.0)),
            step_rollouts=int(led.get("sampled_rollouts", 0)), cumulative_rollouts=int(rec.cumulative_rollouts),
            seconds_per_step=per_step, eta_s=per_step * max(0, self.last_step - rec.step),
            eval_accuracy=None if rec.eval_accuracy is None else float(rec.eval_accuracy),
            screened_by_prior=int(led.get("screened_by_prior") or 0),
            prior_rollouts_saved=int(led.get("prior_rollouts_saved") or 0),
        )
