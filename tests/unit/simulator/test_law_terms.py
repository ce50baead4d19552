"""Issue 57's law terms (:mod:`pc_pipelines.simulator.fit`, :mod:`pc_pipelines.simulator.model`): a plateau per
method and per history prior, a free noise floor, the update's saturation. Each is recovered by the fit from runs the
simulator made with it, and dropped by the criterion (AIC lower by more than AIC_MARGIN) from runs made without it;
the simulator applies the same term; the new fields refuse bad values with the fix."""

import numpy as np
import pytest

from pc_pipelines.allocation import AllocatorConfig
from pc_pipelines.config import SimConfig
from pc_pipelines.errors import ConfigError
from pc_pipelines.simulator import PromptPopulation, Simulation
from pc_pipelines.simulator.fit import (
    AIC_MARGIN,
    RunObservations,
    candidate_terms,
    fit_law,
    predicted_accuracy,
    select_terms,
)
from pc_pipelines.simulator.model import saturate
from tests.support import simulated_observations

EVAL = dict(eval_difficulty_mean=-0.5, eval_difficulty_spread=1.0, eval_prompts=50_000, eval_noise=0.004)
LAW = dict(law="fitted", law_rate=0.02, law_noise_scale=30.0, law_noise_power=1.5, **EVAL)


def observe(alloc: AllocatorConfig, sim_cfg: SimConfig, steps: int, run_id: str) -> RunObservations:
    return simulated_observations.observe(alloc, sim_cfg, steps, run_id, eval_every=4)


def runs_of(steps: int = 96, **law) -> list[RunObservations]:
    sim_cfg = SimConfig(num_prompts=3000, difficulty_mean=0.5, difficulty_spread=1.5, seed=0, **{**LAW, **law})
    allocs = [AllocatorConfig(method="grpo", train_batch=16, n=n, seed=0) for n in (2, 4, 16, 64)]
    allocs += [AllocatorConfig(method="pc", train_batch=16, n=16, n_pilot=4, seed=0),
               AllocatorConfig(method="grpo", train_batch=16, n=8, seed=1, screen_strategy="posterior")]
    return [observe(a, sim_cfg, steps, f"{a.method}-n{a.n}-{a.screen_strategy}") for a in allocs]


def select(runs: list[RunObservations], term: str, form: str = "snr"):
    base = fit_law(runs, -0.5, 1.0, form)
    return base, *select_terms(runs, base, -0.5, 1.0, [term])


@pytest.mark.parametrize("term, value, law, form", [
    ("law_cap_pc", 2.0, dict(law_skill_cap=0.8), "snr"),
    ("law_cap_prior", 0.5, dict(law_skill_cap=0.8), "snr"),
    ("law_noise_floor", 20.0, dict(), "snr"),
    # the normalized step is itself a saturation: under snr this term is nearly a rescaling of rate and v (fit.py)
    ("law_gain_max", 0.01, dict(law="linear", global_rate=0.002), "linear"),
])
def test_fit_recovers_a_term_the_runs_were_made_with_and_drops_it_otherwise(term, value, law, form):
    base, fit, log = select(runs_of(**{**law, term: value}), term, form)
    assert fit.terms == (term,) and log[0]["kept"] and log[0]["aic_drop"] > AIC_MARGIN
    assert fit.params[term] == pytest.approx(value, rel=0.35)
    assert max(r["rmse"] for r in fit.per_run) < 0.01
    # the same runs made without it: the criterion drops it
    base, fit, log = select(runs_of(**law), term, form)
    assert fit.terms == () and not log[0]["kept"] and log[0]["aic_drop"] <= AIC_MARGIN
    assert fit.params[term] == ({"law_noise_floor": 0.0, "law_gain_max": None}.get(term, 1.0))


def test_plateau_terms_need_both_sides_of_the_runs():
    runs = runs_of(steps=8)
    assert candidate_terms(runs, "snr") == ["law_cap_pc", "law_cap_prior", "law_noise_floor", "law_gain_max"]
    grpo = [r for r in runs if r.method == "grpo" and r.screen_strategy == "none"]
    assert candidate_terms(grpo, "linear") == ["law_gain_max"]  # no PC run, no prior run; no floor without noise


def test_simulator_applies_the_terms_the_fit_replays():
    cfg = SimConfig(num_prompts=10, law_skill_cap=0.5, law_cap_pc=2.0, law_cap_prior=0.5, **LAW)
    pc = Simulation(AllocatorConfig(method="pc", train_batch=4, n=8, seed=0), cfg).population
    grpo = Simulation(AllocatorConfig(method="grpo", train_batch=4, n=8, seed=0), cfg).population
    prior = Simulation(AllocatorConfig(method="grpo", train_batch=4, n=8, seed=0, screen_strategy="posterior"),
                       cfg).population
    assert (pc.cap, grpo.cap, prior.cap) == (1.0, 0.5, 0.25)
    free = PromptPopulation(SimConfig(num_prompts=10, **LAW)).fitted_gain(np.full(4, 0.4), np.full(4, 16.0))
    capped = PromptPopulation(SimConfig(num_prompts=10, law_gain_max=0.01, **LAW))
    assert capped.fitted_gain(np.full(4, 0.4), np.full(4, 16.0)) == pytest.approx(free / (1 + free / 0.01))
    assert float(saturate(free, None)) == free
    # the fit's replay of a run equals the simulator's noiseless path with the same terms
    law = {**LAW, "eval_noise": 0.0, "law_gain_max": 0.01, "law_skill_cap": 0.8, "law_cap_pc": 2.0}
    run = runs_of(steps=24, **law)[4]
    params = {k: law.get(k, v) for k, v in dict(law_rate=0, law_skill_cap=None, law_noise_floor=0.0,
                                                 law_noise_scale=0, law_noise_power=0, law_cap_pc=1.0,
                                                 law_cap_prior=1.0, law_gain_max=None).items()}
    predicted = predicted_accuracy(run, "snr", params, -0.5, 1.0)
    assert run.method == "pc" and np.abs(predicted - run.eval_accuracy).max() < 3e-3


@pytest.mark.parametrize("field, value", [("law_cap_pc", 0.0), ("law_cap_prior", -1.0), ("law_gain_max", 0.0)])
def test_new_fields_refuse_values_out_of_bounds(field, value):
    with pytest.raises(ConfigError, match=rf"SimConfig\.{field}=.*must be > 0\. Fix: "):
        SimConfig(**{field: value})
