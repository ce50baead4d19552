"""A scale simulator: a prompt population with latent pass rates standing in for the policy.

It drives the real allocator at the paper's scale (85K prompts, b_t = 128, n = 128) in seconds, so the
allocation logic, its costs and its store can be studied without a model. It is a test and study harness, not a
claim about accuracy.

The model (deliberately simple, every term documented):

* Prompt ``i`` has a fixed difficulty logit ``a_i ~ Normal(-difficulty_mean, difficulty_spread)`` and a learned
  bonus ``b_i`` (starts at 0). The policy's shared skill is ``s`` (starts at 0). The pass rate is
  ``p_i = sigmoid(s + a_i + b_i)``; each rollout's reward is an independent Bernoulli(p_i) draw.
* Training on a group of prompt ``i`` with reward std ``sigma`` (population std of the group's rewards) moves
  ``b_i += local_rate * sigma`` and ``s += global_rate * sigma``. For binary rewards ``sigma`` is exactly the
  per-group gradient scale of the paper's Proposition 1 (``|S_+^A| / G = sqrt(p (1 - p))``): zero-variance
  groups teach nothing, groups near p = 0.5 teach most. Lagged pilots are taken at face value (no correction),
  as in the paper.
* Accuracy is the expected pass rate ``mean_j sigmoid(s + a_j)`` over a held-out population drawn from the same
  difficulty distribution (no per-prompt bonus: held-out prompts only gain through shared skill). It has no
  sampling noise, so "rollouts to target" comparisons are not blurred by evaluation noise.

``difficulty_spread`` is the knob for how spread out the pass rates are: small puts every prompt near the same
pass rate, large gives the U-shape (many unsolvable, many solved) where filtering pays most.

The ``oracle`` method (:class:`~pc_pipelines.allocation.methods.Oracle`) runs only here: the simulation hands it
every prompt's true pass rate, and it spends n rollouts on each of the b_t prompts nearest 0.5 with no pilot cost,
the limit any allocator can reach, against which PC's overhead is measured.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..allocation import Allocator, AllocatorConfig, StepOutcome
from ..allocation.methods import Oracle
from ..config.sim import SimConfig
from ..run.step_loop import allocator_step

log = logging.getLogger(__name__)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class PromptPopulation:
    """Latent pass rates that rise as prompts are trained on."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        rng = np.random.default_rng([config.seed, 0x5111])
        self.difficulty = rng.normal(-config.difficulty_mean, config.difficulty_spread, config.num_prompts)
        self.eval_difficulty = rng.normal(-config.difficulty_mean, config.difficulty_spread, config.eval_prompts)
        self.bonus = np.zeros(config.num_prompts)
        self.skill = 0.0
        self.reward_rng = np.random.default_rng([config.seed, 0x7E3D])

    def pass_rates(self, prompt_ids: np.ndarray | None = None) -> np.ndarray:
        if prompt_ids is None:
            return _sigmoid(self.skill + self.difficulty + self.bonus)
        return _sigmoid(self.skill + self.difficulty[prompt_ids] + self.bonus[prompt_ids])

    def sample(self, call) -> np.ndarray:
        """The engine: one Bernoulli reward per requested rollout, flat, in request order."""
        p = np.repeat(self.pass_rates(call.prompt_ids), call.n)
        return (self.reward_rng.random(p.shape[0]) < p).astype(np.float64)

    def train(self, outcome: StepOutcome) -> None:
        if not outcome.groups:
            return
        ids = np.fromiter((g.prompt_id for g in outcome.groups), np.int64, len(outcome.groups))
        sigma = np.fromiter((g.reward_std for g in outcome.groups), np.float64, len(outcome.groups))
        np.add.at(self.bonus, ids, self.config.local_rate * sigma)
        self.skill += self.config.global_rate * float(sigma.sum())

    def accuracy(self) -> float:
        return float(_sigmoid(self.skill + self.eval_difficulty).mean())


@dataclass(frozen=True)
class SimStep:
    outcome: StepOutcome
    accuracy: float
    cumulative_sampled: int
    cumulative_trained: int

    def record(self) -> dict:
        """The per-step JSON object of ``pilot-commit simulate --json``."""
        led = self.outcome.ledger.to_dict()
        led.pop("lags")
        led["accuracy"] = self.accuracy
        led["cumulative_sampled"] = self.cumulative_sampled
        led["cumulative_trained"] = self.cumulative_trained
        return led


class Simulation:
    """One allocator against one prompt population."""

    def __init__(self, alloc_config: AllocatorConfig, sim_config: SimConfig) -> None:
        self.alloc_config = alloc_config
        self.sim_config = sim_config
        self.population = PromptPopulation(sim_config)
        self.allocator = Allocator(alloc_config, sim_config.num_prompts)
        if isinstance(self.allocator.method, Oracle):
            self.allocator.method.pass_rates = self.population.pass_rates
        self.cumulative_sampled = 0
        self.cumulative_trained = 0

    def step(self) -> SimStep:
        outcome = allocator_step(self.allocator, self.population.sample)
        self.population.train(outcome)
        self.cumulative_sampled += outcome.ledger.sampled_rollouts
        self.cumulative_trained += outcome.ledger.trained_rollouts
        return SimStep(outcome, self.population.accuracy(), self.cumulative_sampled, self.cumulative_trained)

    def run(self, steps: int) -> Iterator[SimStep]:
        for _ in range(steps):
            yield self.step()
