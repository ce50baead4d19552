"""Step and segment numbers as people read them. The store counts from 0 (the ``step`` column, checkpoint names,
segment indices and partition keys ``seg-NNNN``); every screen counts from 1: **store step k is step k+1 on every
screen** (console, Dagster UI, plots, TensorBoard, reports), and the evaluation before training (store step -1) is
step 0. Segment k (partition ``seg-000k``) is segment k+1. These functions are the one place that converts."""

from __future__ import annotations

BEFORE_TRAINING = -1
"""The store's step of the evaluation before training (step 0 on screens)."""


def display_step(store_step: int) -> int:
    """The step a person reads for the store's ``store_step``: ``k`` -> ``k + 1``; -1 (before training) -> 0."""
    return int(store_step) + 1


def display_segment(segment: int) -> int:
    """The segment a person reads for the store's segment index (partition ``seg-NNNN``): ``k`` -> ``k + 1``."""
    return int(segment) + 1


def step_label(store_step: int) -> str:
    """``start`` for the evaluation before training, else ``step N`` (N from :func:`display_step`)."""
    return "start" if store_step <= BEFORE_TRAINING else f"step {display_step(store_step)}"


def step_range(first: int, last: int) -> str:
    """Store steps ``first..last`` as people read them: ``1..5`` for store steps 0..4."""
    return f"{display_step(first)}..{display_step(last)}"
