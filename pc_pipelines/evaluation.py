"""Evaluation: mean@k accuracy of a policy on evaluation sets, graded by the same verifier as training.

The one home of evaluation, below both its users: this module scores a policy (an engine) it is given; loading a
run's saved checkpoint to score it is :mod:`pc_pipelines.run.checkpoint_eval`, in the run layer.

One function (:func:`evaluate_sets`) serves the segment driver's periodic evaluation and the evaluation of a saved
checkpoint (:func:`pc_pipelines.run.checkpoint_eval.evaluate_checkpoint`, the Dagster ``segment_eval`` asset). Both draw
their samples with the seed :func:`eval_seed` derives from (run seed, step), so evaluating the same checkpoint
twice gives the same numbers: a segment's last step scores what the driver's own evaluation there gave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from .data.task import EvalSet
from .rewards import MathGrader
from .rollout.base import RolloutEngine, RolloutRequest, SamplingParams, derive_seed

_EVAL_SALT = 0xE7A1


def eval_seed(run_seed: int, step: int) -> int:
    """The sampling seed of the evaluation after ``step`` (0: before training) of a run seeded ``run_seed``. Derived
    from ``step - 1`` (the step's number when steps counted from 0, before store v12): the same seeds as before."""
    return derive_seed(run_seed, _EVAL_SALT, step - 1)


@dataclass(frozen=True)
class EvalResult:
    """Mean@k accuracy per set (``accuracy``) with what produced it."""

    accuracy: dict[str, float]
    n_prompts: dict[str, int]
    k: int
    """The run's default samples per prompt (``training.eval_samples``)."""
    temperature: float
    k_per_set: dict[str, int]
    """Samples per prompt actually used per set (a set's own ``EvalSet.k``, else ``k``)."""

    def k_of(self, name: str) -> int:
        return self.k_per_set[name]

    @property
    def mean(self) -> float:
        """Average accuracy: the unweighted mean over sets (docs/DESIGN.md section 6)."""
        return float(np.mean(list(self.accuracy.values()))) if self.accuracy else 0.0

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (what an evaluation launched elsewhere reports through Dagster Pipes)."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EvalResult:
        """The inverse of ``to_json``; a missing field names itself."""
        missing = [f.name for f in fields(cls) if f.name not in d]
        if missing:
            raise ValueError(f"an evaluation report without {missing}: the launched `pilot-commit eval-segment` is "
                             "older or newer than this code. Fix: run the same pc-pipelines version in both places.")
        return cls({k: float(v) for k, v in d["accuracy"].items()}, {k: int(v) for k, v in d["n_prompts"].items()},
                   int(d["k"]), float(d["temperature"]), {k: int(v) for k, v in d["k_per_set"].items()})

    def rows(self, run_id: str, step: int) -> list[dict]:
        """``eval_results`` rows for the store."""
        return [
            {"run_id": run_id, "step": step, "benchmark": name, "k": self.k_of(name), "temperature": self.temperature,
             "accuracy": acc, "n_prompts": self.n_prompts[name]}
            for name, acc in self.accuracy.items()
        ]


def evaluate_sets(
    engine: RolloutEngine,
    grader: MathGrader,
    sets: Sequence[EvalSet],
    k: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
) -> EvalResult:
    """Generate samples for every set in ONE engine call, grade them, average per set.

    A set's own ``EvalSet.k`` wins over ``k`` (the run's ``training.eval_samples``): AIME at mean@32 beside
    MATH-500 at mean@4 is one call with 32 and 4 samples per request."""
    if k < 1:
        raise ValueError(f"k={k}: mean@k needs k >= 1 samples per prompt")
    ks = {s.name: s.k if s.k is not None else k for s in sets}
    reqs = [RolloutRequest(p, ks[s.name]) for s in sets for p in s.prompts]
    golds = [g for s in sets for g in s.golds for _ in range(ks[s.name])]
    outputs = engine.generate(reqs, SamplingParams(temperature, top_p, max_new_tokens, seed)) if reqs else []
    rolls = [r for o in outputs for r in o.rollouts]
    rewards = grader.rewards([r.text for r in rolls], golds, [r.truncated for r in rolls]) if rolls else np.zeros(0)
    acc: dict[str, float] = {}
    pos = 0
    for s in sets:
        m = len(s.prompts) * ks[s.name]
        acc[s.name] = float(rewards[pos : pos + m].mean()) if m else 0.0
        pos += m
    return EvalResult(acc, {s.name: len(s.prompts) for s in sets}, k, temperature, ks)
