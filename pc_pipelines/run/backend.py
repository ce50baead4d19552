"""The small protocol a way of training implements for the segment driver (:func:`~.driver.run_segment`).

The driver owns what every backend shares: the allocator, the cumulative ledger, the store's rows, evaluation
rows, TensorBoard, checkpoints' run state and the run's lifecycle (lock, stop, status). A backend owns the policy:
it loads it (:meth:`Backend.start` from the base policy, :meth:`Backend.restore` from a checkpoint), runs the
allocator's next step on it (:meth:`Backend.step`), writes its part of a checkpoint (:meth:`Backend.save`) and
evaluates it (:meth:`Backend.evaluate`). Implementations: :class:`~.local.LocalBackend`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..allocation import Allocator, StepOutcome
from ..evaluation import EvalResult


@dataclass
class StepResult:
    """What a backend's step produced: the allocator's outcome and the update's numbers."""

    outcome: StepOutcome
    loss: float | None
    """The update's loss; None when the step made no update (no trained group)."""
    mean_reward: float
    """Mean reward over the trained rollouts (0 when none)."""
    timings: dict[str, float]
    """Seconds by phase (generate, reward, update, bookkeeping; the driver adds store)."""
    train_stats: dict[str, Any] | None = None


class Backend(Protocol):
    name: str

    def start(self) -> None:
        """Load the run's base policy and build what trains it. Changes nothing of the run."""

    def restore(self, checkpoint: Path) -> None:
        """Load the backend's part of the checkpoint at ``checkpoint`` (policy, optimizer, payloads); a file that
        cannot be read is a :class:`~pc_pipelines.errors.RunError`. Changes nothing of the run."""

    def step(self, allocator: Allocator) -> StepResult:
        """Run the allocator's next step: generate and grade its engine calls, then update the policy."""

    def save(self, directory: Path) -> list[str]:
        """Write the backend's part of a checkpoint into ``directory`` (the driver adds the run's state); returns
        the files (relative paths) the checkpoint cannot do without, for its manifest."""

    def evaluate(self, step: int) -> EvalResult:
        """Mean@k of the current policy on the run's eval sets, seeded for ``step`` (-1: before training)."""

    def close(self) -> None:
        """Release what the backend holds (grader workers, engines)."""
