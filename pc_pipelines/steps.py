"""Step numbers, one numbering everywhere: the store, SQL, checkpoints and every screen count a run's training steps
from 1 (step N is the run's N-th update; a checkpoint ``step-N`` holds the run after N steps) and the evaluation
before training is step 0. Segments are named by their partition key (``seg-0000`` ...) on every screen. The
allocator numbers its steps from 0 internally; :func:`step_number` is the one place that converts, where its
outcome becomes a stored row or a record."""

from __future__ import annotations

BEFORE_TRAINING = 0
"""The step of the evaluation before training (and of a checkpoint-less run: no step done)."""


def step_number(allocator_step: int) -> int:
    """The run's step number of the allocator's 0-based step index (``Allocator.step``, ``StepOutcome.step``,
    a buffer entry's ``born``): ``i`` -> ``i + 1``."""
    return int(allocator_step) + 1


def step_label(step: int) -> str:
    """``start`` for the evaluation before training (step 0), else ``step N``."""
    return "start" if step <= BEFORE_TRAINING else f"step {step}"


def segment_name(segment: int) -> str:
    """A segment as every screen names it: its partition key's part, ``seg-NNNN``."""
    return f"seg-{int(segment):04d}"
