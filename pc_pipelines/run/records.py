"""What a training segment reports: one :class:`StepRecord` per step, one :class:`SegmentResult` per segment, and
their JSON, the form they take through Dagster Pipes (a segment run in a pod reports each step as a custom message
and the segment as its materialization; :meth:`SegmentResult.from_summary` rebuilds the result from them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..allocation import StepOutcome

REFUSED = "refused"
"""The key of the Pipes custom message a launched ``train-segment`` sends when the run's writer lock refuses it
(another process writes the run): ``{"refused": {"message": ..., "holder": {...}}}``; it then exits 2 having
recorded nothing. The orchestrator reads this message, never the error's class name."""

# The per-step columns a Pipes segment's ``pipes_steps`` metadata keeps (of the step JSON, :meth:`StepRecord.to_json`).
STEP_KEYS = ("step", "sampled_rollouts", "trained_rollouts", "pilot_rollouts", "commit_rollouts", "full_rollouts",
             "rounds", "kept", "buffer_size", "loss", "mean_reward", "reward_std", "cumulative_rollouts")


@dataclass
class Totals:
    """The run's cumulative ledger, carried in checkpoints."""

    steps: int = 0
    sampled_rollouts: int = 0
    trained_rollouts: int = 0
    engine_calls: int = 0

    def add(self, outcome: StepOutcome) -> None:
        led = outcome.ledger
        self.steps += 1
        self.sampled_rollouts += led.sampled_rollouts
        self.trained_rollouts += led.trained_rollouts
        self.engine_calls += led.engine_calls


@dataclass
class StepRecord:
    """One trained step: its ledger (the allocator's), the update's loss, rewards, cost so far and timings."""

    step: int
    ledger: dict[str, Any]
    loss: float | None
    mean_reward: float
    reward_std: float
    cumulative_rollouts: int
    timings: dict[str, float]
    eval_accuracy: float | None = None
    eval_by_set: dict[str, float] | None = None
    train_stats: dict[str, Any] | None = None

    _TOP = ("loss", "mean_reward", "reward_std", "cumulative_rollouts", "eval_accuracy", "eval")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRecord:
        """The record back from :meth:`to_json` (what a remote segment reports per step through Dagster Pipes):
        ``time_<name>_s`` keys become timings, the rest of the non-record keys the ledger (without ``lags``)."""
        ledger = {k: v for k, v in d.items() if k not in cls._TOP and not (k.startswith("time_") and k.endswith("_s"))}
        timings = {k[5:-2]: float(v) for k, v in d.items() if k.startswith("time_") and k.endswith("_s")}
        return cls(step=int(d["step"]), ledger=ledger, loss=d.get("loss"), mean_reward=float(d["mean_reward"]),
                   reward_std=float(d["reward_std"]), cumulative_rollouts=int(d["cumulative_rollouts"]),
                   timings=timings, eval_accuracy=d.get("eval_accuracy"), eval_by_set=d.get("eval"))

    def to_json(self) -> dict[str, Any]:
        out = dict(self.ledger)
        out.pop("lags", None)
        out.update(
            loss=self.loss,
            mean_reward=self.mean_reward,
            reward_std=self.reward_std,
            cumulative_rollouts=self.cumulative_rollouts,
            **{f"time_{k}_s": round(v, 4) for k, v in self.timings.items()},
        )
        if self.eval_accuracy is not None:
            out["eval_accuracy"] = self.eval_accuracy
            out["eval"] = self.eval_by_set
        return out


@dataclass(frozen=True)
class SegmentResult:
    """One segment of a run: the steps it trained, its cost, its last evaluation and the checkpoint it ended on."""

    run_id: str
    first_step: int
    last_step: int  # the last step done (steps count from 1; 0: the run has no completed step)
    steps_run: int
    cumulative_rollouts: int
    last_eval_accuracy: float | None
    mean_reward_std: float | None
    checkpoint: Path | None
    tensorboard_dir: Path
    records: list[StepRecord]
    reported: dict[str, Any] = field(default_factory=dict)
    """What a segment run outside this process (a Pipes subprocess, a Kubernetes pod, a RayJob) reported back:
    its materialization metadata and ``pipes_steps``, one row per step (empty for in-process segments)."""

    def summary(self) -> dict[str, Any]:
        """The segment's materialization metadata, as plain JSON values."""
        return {
            "first_step": self.first_step,
            "last_step": self.last_step,
            "steps_run": self.steps_run,
            "cumulative_rollouts": self.cumulative_rollouts,
            "segment_rollouts": int(sum(r.ledger["sampled_rollouts"] for r in self.records)),
            "eval_accuracy": self.last_eval_accuracy,
            "mean_reward_std": self.mean_reward_std,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "tensorboard": str(self.tensorboard_dir),
        }

    @classmethod
    def from_summary(cls, run_id: str, summary: dict[str, Any], records: list[StepRecord], tensorboard_dir: Path,
                     reported: dict[str, Any] | None = None) -> SegmentResult:
        """The result of a segment that ran elsewhere, from its :meth:`summary` and its step records."""
        checkpoint = summary.get("checkpoint")
        return cls(
            run_id=run_id,
            first_step=int(summary["first_step"]),
            last_step=int(summary["last_step"]),
            steps_run=int(summary["steps_run"]),
            cumulative_rollouts=int(summary["cumulative_rollouts"]),
            last_eval_accuracy=summary.get("eval_accuracy"),
            mean_reward_std=summary.get("mean_reward_std"),
            checkpoint=Path(checkpoint) if checkpoint else None,
            tensorboard_dir=tensorboard_dir,
            records=records,
            reported=reported or {},
        )
