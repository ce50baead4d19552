"""What the training loop needs from a dataset: templated prompts with gold answers, and evaluation sets.

The loop never sees where prompts come from. ``embedded_task`` builds the embedded default's synthetic addition
task; real datasets (DeepMath, Polaris, the benchmarks) produce the same :class:`TaskData` in the Dagster data
assets.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.task import ArithTaskConfig
from .arith import build_splits


@dataclass(frozen=True)
class EvalSet:
    name: str  # the store's eval_results.benchmark
    prompts: list[str]  # templated
    golds: list[str]
    k: int | None = None
    """Samples per prompt for this set (mean@k); None: the run's ``training.eval_samples``. The small competition
    sets (AIME24/25, AMC23: 30-40 prompts) use 32 so that one eval's noise is comparable to MATH-500's at k = 4
    (docs/DESIGN.md section 6)."""

    def __post_init__(self) -> None:
        if self.k is not None and self.k < 1:
            raise ValueError(f"eval set {self.name!r}: k={self.k}; mean@k needs k >= 1 (or None for the run's "
                             "training.eval_samples)")


@dataclass(frozen=True)
class TaskData:
    prompts: list[str]  # templated training prompts; the allocator's prompt id is the index
    golds: list[str]
    eval_sets: list[EvalSet]
    groups: tuple[int, ...] | None = None
    """An attribute the dataset declares per training prompt (a group id >= 0: the digit length here; a difficulty
    or level in DeepMath or MATH), which pools the history prior's prior (``allocator.screen_strategy``); None: one
    group."""

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.golds):
            raise ValueError(f"{len(self.prompts)} prompts but {len(self.golds)} gold answers: they must align")
        if self.groups is not None and (len(self.groups) != len(self.prompts) or min(self.groups, default=0) < 0):
            raise ValueError(f"{len(self.groups)} prompt groups for {len(self.prompts)} prompts: give one group id "
                             ">= 0 per prompt, or none")
        if not self.prompts:
            raise ValueError("the training set is empty. Fix: point the task at a non-empty dataset.")


def arith_eval_name(digits: int) -> str:
    return f"arith_d{digits}"


def embedded_task(task: ArithTaskConfig, template: str) -> TaskData:
    """The synthetic addition task: RL pool and one held-out eval set per digit length (``arith_d1`` ...)."""
    splits = build_splits(task)
    prompts = [template.format(question=q) for q in splits.train.questions()]
    held = splits.heldout
    evals = []
    for d in range(1, task.max_digits + 1):
        sub = held.subset((held.digits == d).nonzero()[0])
        evals.append(EvalSet(arith_eval_name(d), [template.format(question=q) for q in sub.questions()], sub.golds()))
    return TaskData(prompts=prompts, golds=splits.train.golds(), eval_sets=evals,
                    groups=tuple(int(d) for d in splits.train.digits))
