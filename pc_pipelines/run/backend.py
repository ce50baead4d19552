"""The small protocol a way of training implements for the segment driver (:func:`~.driver.run_segment`).

The driver owns what every backend shares: the allocator and its step loop (:mod:`.step_loop`), the cumulative
ledger, the store's rows, evaluation rows, TensorBoard, timings, checkpoints' run state and the run's lifecycle
(lock, stop, status). A backend owns the policy and offers only what it alone can do: load it (:meth:`Backend.start`
from the base policy, :meth:`Backend.restore` from a checkpoint), generate and grade one engine call
(:meth:`Backend.generate`), update the policy on a step's outcome (:meth:`Backend.update`), keep the payloads of the
rollouts still live (:meth:`Backend.keep_live`), write its part of a checkpoint (:meth:`Backend.save`) and evaluate
the policy (:meth:`Backend.evaluate`). It never calls the allocator. Implementations: :class:`~.local.LocalBackend`,
:class:`~.verl.VerlBackend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..allocation import EngineCall, StepOutcome
from ..evaluation import EvalResult


@dataclass
class Update:
    """What a backend's policy update on one step's outcome produced."""

    loss: float | None
    """The update's loss; None when the step made no update (no trained group)."""
    mean_reward: float
    """Mean reward over the trained rollouts (0 when none)."""
    train_stats: dict[str, Any] | None = None


class Backend(Protocol):
    name: str

    def start(self) -> None:
        """Load the run's base policy and build what trains it. Changes nothing of the run."""

    def restore(self, checkpoint: Path) -> None:
        """Load the backend's part of the checkpoint at ``checkpoint`` (policy, optimizer, payloads); a file that
        cannot be read is a :class:`~pc_pipelines.errors.RunError`. Changes nothing of the run."""

    def generate(self, call: EngineCall, timings: dict[str, float]) -> Sequence[np.ndarray]:
        """Generate and grade one engine call: one reward array per request, in request order; the rollouts'
        payloads are kept by rollout id. Adds its seconds to ``timings["generate"]`` and ``timings["reward"]``."""

    def update(self, outcome: StepOutcome) -> Update:
        """Update the policy on the step's trained groups (``outcome.groups``; possibly none)."""

    def keep_live(self, rollout_ids: np.ndarray) -> None:
        """Drop the payload of every rollout not in ``rollout_ids`` (the ones the allocator still references)."""

    def save(self, directory: Path) -> list[str]:
        """Write the backend's part of a checkpoint into ``directory`` (the driver adds the run's state); returns
        the files (relative paths) the checkpoint cannot do without, for its manifest."""

    def evaluate(self, step: int) -> EvalResult:
        """Mean@k of the current policy on the run's eval sets, seeded for ``step`` (0: before training)."""

    def close(self) -> None:
        """Release what the backend holds (grader workers, engines)."""
