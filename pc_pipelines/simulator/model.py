"""A scale simulator: a prompt population with latent pass rates standing in for the policy.

It drives the real allocator at the paper's scale (85K prompts, b_t = 128, n = 128) in seconds, so the
allocation logic, its costs and its store can be studied without a model. It is a test and study harness; only the
``fitted`` law below is meant to predict a benchmark's rollout counts, and only as far as its validation says.

The model (deliberately simple, every term documented):

* Prompt ``i`` has a fixed difficulty logit ``a_i ~ Normal(-difficulty_mean, difficulty_spread)`` (or, with
  ``difficulty_mix_weight`` w > 0, that Normal for a share 1 - w of the prompts and ``Normal(-difficulty_mean_2,
  difficulty_spread_2)`` for the rest) and a learned bonus ``b_i`` (starts at 0). The policy's shared skill is ``s``
  (starts at 0). The pass rate is ``p_i = sigmoid(s + a_i + b_i)``; each rollout's reward is an independent
  Bernoulli(p_i) draw.
* Training on a group of prompt ``i`` with reward std ``sigma`` (population std of the group's rewards) moves
  ``b_i += local_rate * sigma``. For binary rewards ``sigma`` is exactly the per-group gradient scale of the paper's
  Proposition 1 (``|S_+^A| / G = sqrt(p (1 - p))``): zero-variance groups teach nothing, groups near p = 0.5 teach
  most. Lagged pilots are taken at face value (no correction), as in the paper. Shared skill moves by one of two laws
  (``SimConfig.law``):

  - ``linear`` (the default, set by hand): ``s += global_rate * sum(sigma)``: learning per step is linear in the
    trained groups' reward std, whatever their size; no gradient noise.
  - ``fitted`` (fitted by :mod:`.fit` from real runs): a step's update is a normalized gradient (the trainer clips
    every update, so its size is set by the learning rate, not by how many groups carry signal) whose share along
    the shared-skill direction is its signal-to-noise. Over the step's trained groups, signal ``S = sum(sigma_i)``
    and noise ``V = sum(sigma_i^2 * (law_noise_floor + law_noise_scale / n_i ** law_noise_power))`` (``n_i`` the
    group's size: a bigger group averages its rollouts' noise away), and ``s += law_rate * (S + law_step_noise *
    sqrt(V) * z) / sqrt(S^2 + V) * (1 - s / law_skill_cap)`` with ``z ~ Normal(0, 1)``. For k alike groups of size n
    the mean gain is ``law_rate * sqrt(k / (k + c + v / n^gamma))``: it grows with the informative groups and
    saturates (nearly flat once k is well above ``c + v / n^gamma``), zero-variance groups change nothing, and the
    step's noise falls with group size. Why this form, from the data: :mod:`.fit`.
* Three terms both laws take (issue 57; their defaults leave a law as it was): the skill cap is scaled by
  ``law_cap_pc`` in a PC run and by ``law_cap_prior`` in a run with the history prior (``screen_strategy=posterior``):
  a method's plateau may differ (:func:`cap_factor`); and the mean gain ``g`` of a step saturates as ``g / (1 + g /
  law_gain_max)`` (:func:`saturate`: the trainer clips every update, so a step's size has a ceiling), the step's noise
  scaled alike.
* Accuracy is the expected pass rate ``mean_j sigmoid(s + e_j)`` over a held-out population: by default drawn from the
  same difficulty distribution as the training prompts, or ``Normal(-eval_difficulty_mean, eval_difficulty_spread)``
  (a benchmark's held-out mix, which can differ from the training pool's). Held-out prompts get no per-prompt bonus:
  they only gain through shared skill. With ``eval_noise`` 0 it has no sampling noise, so "rollouts to target"
  comparisons are not blurred by evaluation noise; ``eval_noise`` > 0 adds Normal noise of that std to each reported
  accuracy, as a measured evaluation has.

It is not a model of a policy: one shared skill and a bonus per prompt stand in for the weights, transfer between
prompts is uniform, and nothing forgets. The ``fitted`` law predicts rollout counts only as far as its validation
against measured runs says (docs/STUDIES.md, "The simulator's fitted law against the measured benchmark").

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
from ..steps import step_number

log = logging.getLogger(__name__)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def step_signal(sigma: np.ndarray, sizes: np.ndarray, noise_floor: float, noise_scale: float,
                noise_power: float) -> tuple[float, float]:
    """The ``fitted`` law's signal ``S`` and noise ``V`` of one step's trained groups (reward stds, group sizes)."""
    sigma = np.asarray(sigma, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)
    noise = noise_floor + noise_scale / np.maximum(sizes, 1.0) ** noise_power
    return float(sigma.sum()), float((sigma * sigma * noise).sum())


def signal_share(signal: np.ndarray | float, noise: np.ndarray | float) -> np.ndarray:
    """``S / sqrt(S^2 + V)`` (0 where a step trained no signal): the mean share of a normalized step along skill."""
    signal = np.asarray(signal, dtype=np.float64)
    norm = np.sqrt(signal * signal + np.asarray(noise, dtype=np.float64))
    return np.divide(signal, norm, out=np.zeros_like(norm), where=norm > 0)


def cap_factor(law_cap_pc: float, law_cap_prior: float, method: str, screen_strategy: str) -> float:
    """The skill cap's multiplier for a run of ``method`` with ``screen_strategy``: ``law_cap_pc`` for PC times
    ``law_cap_prior`` for the history prior (``posterior``)."""
    return (law_cap_pc if method == "pc" else 1.0) * (law_cap_prior if screen_strategy == "posterior" else 1.0)


def saturate(gain: np.ndarray | float, gain_max: float | None) -> np.ndarray:
    """``gain / (1 + gain / gain_max)``: a step's mean gain under the update's ceiling (``gain`` itself without one)."""
    gain = np.asarray(gain, dtype=np.float64)
    if gain_max is None:
        return gain
    return gain / (1.0 + np.maximum(gain, 0.0) / gain_max)


def heldout_accuracy(skill: float | np.ndarray, eval_difficulty: np.ndarray) -> np.ndarray:
    """``mean_j sigmoid(skill + e_j)``, for one skill or an array of them."""
    s = np.asarray(skill, dtype=np.float64)
    return _sigmoid(s[..., None] + eval_difficulty).mean(axis=-1)


class PromptPopulation:
    """Latent pass rates that rise as prompts are trained on."""

    def __init__(self, config: SimConfig, cap_scale: float = 1.0) -> None:
        self.config = config
        self.cap = None if config.law_skill_cap is None else config.law_skill_cap * cap_scale
        rng = np.random.default_rng([config.seed, 0x5111])
        self.difficulty = rng.normal(-config.difficulty_mean, config.difficulty_spread, config.num_prompts)
        eval_mean = config.difficulty_mean if config.eval_difficulty_mean is None else config.eval_difficulty_mean
        eval_spread = (config.difficulty_spread if config.eval_difficulty_spread is None
                       else config.eval_difficulty_spread)
        self.eval_difficulty = rng.normal(-eval_mean, eval_spread, config.eval_prompts)
        if config.difficulty_mix_weight > 0:  # its own stream: the one-Normal draws above stay what they were
            mix_rng = np.random.default_rng([config.seed, 0x3A1B])
            self._second_component(mix_rng, self.difficulty)
            if config.eval_difficulty_mean is None and config.eval_difficulty_spread is None:
                self._second_component(mix_rng, self.eval_difficulty)
        self.bonus = np.zeros(config.num_prompts)
        self.skill = 0.0
        self.reward_rng = np.random.default_rng([config.seed, 0x7E3D])
        self.law_rng = np.random.default_rng([config.seed, 0x1A3E])
        self.eval_rng = np.random.default_rng([config.seed, 0xE7A1])

    def _second_component(self, rng: np.random.Generator, logits: np.ndarray) -> None:
        c = self.config
        second = rng.random(logits.shape[0]) < c.difficulty_mix_weight
        logits[second] = rng.normal(-c.difficulty_mean_2, c.difficulty_spread_2, int(second.sum()))

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
        if self.config.law == "linear":
            self.skill += float(saturate(self.config.global_rate * float(sigma.sum()), self.config.law_gain_max)) \
                * self._room()
            return
        sizes = np.fromiter((sum(c for _, c in g.spans) for g in outcome.groups), np.float64, len(outcome.groups))
        self.skill += self.fitted_gain(sigma, sizes)

    def fitted_gain(self, sigma: np.ndarray, sizes: np.ndarray) -> float:
        """The ``fitted`` law's skill change for one step's trained groups (draws its noise when law_step_noise > 0)."""
        c = self.config
        signal, noise = step_signal(sigma, sizes, c.law_noise_floor, c.law_noise_scale, c.law_noise_power)
        if signal <= 0:
            return 0.0
        norm = float(np.sqrt(signal * signal + noise))
        drift = signal + (c.law_step_noise * np.sqrt(noise) * float(self.law_rng.standard_normal())
                          if c.law_step_noise > 0 else 0.0)
        mean = c.law_rate * signal / norm
        ceiling = float(saturate(mean, c.law_gain_max)) / mean  # the mean's saturation, the noise scaled alike
        return c.law_rate * drift / norm * ceiling * self._room()

    def _room(self) -> float:
        """``1 - skill / cap`` (at least 0; the cap scaled for the run's method and prior), 1 without a cap."""
        cap = self.cap
        return 1.0 if cap is None else max(0.0, 1.0 - self.skill / cap)

    def accuracy(self) -> float:
        exact = float(_sigmoid(self.skill + self.eval_difficulty).mean())
        if self.config.eval_noise > 0:
            return exact + self.config.eval_noise * float(self.eval_rng.standard_normal())
        return exact


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
        led["step"] = step_number(self.outcome.step)  # as stored and shown (steps count from 1)
        led["accuracy"] = self.accuracy
        led["cumulative_sampled"] = self.cumulative_sampled
        led["cumulative_trained"] = self.cumulative_trained
        return led


class Simulation:
    """One allocator against one prompt population."""

    def __init__(self, alloc_config: AllocatorConfig, sim_config: SimConfig) -> None:
        self.alloc_config = alloc_config
        self.sim_config = sim_config
        self.population = PromptPopulation(sim_config, cap_factor(sim_config.law_cap_pc, sim_config.law_cap_prior,
                                                                  alloc_config.method, alloc_config.screen_strategy))
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
