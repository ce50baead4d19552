"""The simulator's fits (:mod:`pc_pipelines.simulator.fit`) recover known parameters from observations the simulator
itself made: the pass-rate mix from first visits, the held-out mix, the learning law from what runs trained."""

import math

import numpy as np
import pytest

from pc_pipelines.allocation import AllocatorConfig
from pc_pipelines.config import SimConfig
from pc_pipelines.simulator import PromptPopulation
from pc_pipelines.simulator.fit import (
    RunObservations,
    fit_eval_mix,
    fit_law,
    fit_mix,
    fit_simulator,
    nelder_mead,
)
from pc_pipelines.store import StoreError
from tests.support import simulated_observations


def first_visit_draws(sim: SimConfig, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    p = PromptPopulation(sim).pass_rates()
    k = np.random.default_rng(seed).binomial(n, p)
    return np.full(p.size, n), k


def test_nelder_mead_finds_a_known_minimum():
    x, f = nelder_mead(lambda t: (t[0] - 1.5) ** 2 + 3 * (t[1] + 0.5) ** 2, [0.0, 0.0])
    assert x == pytest.approx([1.5, -0.5], abs=1e-4) and f < 1e-8


def test_mix_fit_recovers_one_normal():
    n, k = first_visit_draws(SimConfig(num_prompts=4000, difficulty_mean=1.0, difficulty_spread=1.5, seed=1), 16)
    mix = fit_mix(n, k)
    assert mix.difficulty_mean == pytest.approx(1.0, abs=0.15)
    assert mix.difficulty_spread == pytest.approx(1.5, abs=0.15)
    assert mix.difficulty_mix_weight == 0.0  # the second component is not asked for by these data
    obs = {r["k"]: r for r in mix.residuals}
    assert sum(r["predicted"] for r in obs.values()) == pytest.approx(1.0, abs=1e-6)
    assert max(abs(r["observed"] - r["predicted"]) for r in obs.values()) < 0.03


def test_mix_fit_recovers_two_components():
    sim = SimConfig(num_prompts=6000, difficulty_mean=3.0, difficulty_spread=0.7, difficulty_mix_weight=0.35,
                    difficulty_mean_2=-2.5, difficulty_spread_2=0.7, seed=2)
    n, k = first_visit_draws(sim, 16)
    mix = fit_mix(n, k)
    assert mix.aic < mix.aic_one_normal - 10
    assert mix.difficulty_mix_weight == pytest.approx(0.35, abs=0.05)
    assert mix.difficulty_mean == pytest.approx(3.0, abs=0.3)
    assert mix.difficulty_mean_2 == pytest.approx(-2.5, abs=0.3)


def test_mix_fit_refuses_bad_rows():
    with pytest.raises(StoreError, match="Fix:"):
        fit_mix(np.array([4, 4]), np.array([5, 1]))


def test_eval_mix_matches_the_first_accuracy():
    mean, spread = fit_eval_mix([0.99, 0.9, 0.6, 0.2])
    logits = np.log(np.array([0.99, 0.9, 0.6, 0.2]) / (1 - np.array([0.99, 0.9, 0.6, 0.2])))
    assert spread == pytest.approx(logits.std())
    draws = np.random.default_rng(0).normal(-mean, spread, 400_000)
    assert np.mean(1 / (1 + np.exp(-draws))) == pytest.approx(np.mean([0.99, 0.9, 0.6, 0.2]), abs=2e-3)


LAW = dict(law="fitted", law_rate=0.02, law_noise_scale=30.0, law_noise_power=1.5, eval_difficulty_mean=-0.5,
           eval_difficulty_spread=1.0, eval_prompts=50_000)


def observe(alloc: AllocatorConfig, sim_cfg: SimConfig, steps: int, run_id: str) -> RunObservations:
    return simulated_observations.observe(alloc, sim_cfg, steps, run_id, eval_every=5)


def test_law_fit_recovers_a_known_law():
    sim_cfg = SimConfig(num_prompts=3000, difficulty_mean=0.5, difficulty_spread=1.5, seed=0, **LAW)
    runs = [observe(AllocatorConfig(method="grpo", train_batch=16, n=n, seed=0), sim_cfg, 60, f"grpo-n{n}")
            for n in (2, 4, 16)]
    runs.append(observe(AllocatorConfig(method="pc", train_batch=16, n=16, n_pilot=4, seed=0), sim_cfg, 60, "pc"))
    fit = fit_law(runs, eval_mean=-0.5, eval_spread=1.0, form="snr")
    p = fit.params
    assert p["law_noise_power"] == pytest.approx(1.5, abs=0.25)
    assert p["law_rate"] / math.sqrt(p["law_noise_scale"]) == pytest.approx(0.02 / math.sqrt(30.0), rel=0.2)
    assert max(r["rmse"] for r in fit.per_run) < 2e-3
    # the hand-set form cannot tell group sizes apart: it fits these runs worse
    assert fit_law(runs, -0.5, 1.0, "linear").sse > 5 * fit.sse


def test_fit_simulator_refuses_runs_without_evaluations():
    sim_cfg = SimConfig(num_prompts=200, seed=0)
    run = observe(AllocatorConfig(method="grpo", train_batch=4, n=4, seed=0), sim_cfg, 3, "short")
    with pytest.raises(StoreError, match="short.*Fix:"):
        fit_simulator([run])
