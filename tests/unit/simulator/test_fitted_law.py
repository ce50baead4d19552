"""The simulator's ``fitted`` learning law (:mod:`pc_pipelines.simulator.model`): saturating in informative groups,
less noise with larger groups, zero-variance groups inert, deterministic under a seed; the linear law untouched."""

import numpy as np
import pytest

from pc_pipelines.allocation import AllocatorConfig
from pc_pipelines.config import SimConfig
from pc_pipelines.errors import ConfigError
from pc_pipelines.simulator import PromptPopulation, Simulation

LAW = dict(law="fitted", law_rate=0.05, law_noise_scale=8.0, law_noise_power=1.0)


def gain(k: int, n: int, **kw) -> float:
    pop = PromptPopulation(SimConfig(num_prompts=10, **{**LAW, **kw}))
    return pop.fitted_gain(np.full(k, 0.4), np.full(k, float(n)))


def test_more_informative_groups_more_progress_saturating():
    g = [gain(k, 16) for k in (1, 2, 4, 8, 16, 64)]
    assert all(b > a for a, b in zip(g, g[1:]))  # more groups, more progress
    assert g[-1] < LAW["law_rate"]  # never above the saturation level
    steps = np.diff(g)
    assert all(b < a for a, b in zip(steps, steps[1:]))  # each doubling buys less
    # the closed form of k alike groups: rate * sqrt(k / (k + v / n))
    assert g[2] == pytest.approx(0.05 * np.sqrt(4 / (4 + 8.0 / 16)))


def test_zero_variance_groups_change_nothing():
    pop = PromptPopulation(SimConfig(num_prompts=10, **LAW))
    with_zeros = pop.fitted_gain(np.array([0.4, 0.4, 0.0, 0.0]), np.array([16.0, 16, 16, 16]))
    assert with_zeros == pytest.approx(gain(2, 16))
    assert pop.fitted_gain(np.zeros(3), np.full(3, 8.0)) == 0.0


def test_larger_groups_less_noise():
    def spread(n: int) -> float:
        pop = PromptPopulation(SimConfig(num_prompts=10, seed=3, law_step_noise=1.0, **LAW))
        return float(np.std([pop.fitted_gain(np.full(4, 0.4), np.full(4, float(n))) for _ in range(400)]))

    assert spread(64) < 0.5 * spread(4)
    # no noise asked, none drawn: every step gains its mean
    pop = PromptPopulation(SimConfig(num_prompts=10, **LAW))
    assert len({pop.fitted_gain(np.full(4, 0.4), np.full(4, 4.0)) for _ in range(5)}) == 1


def test_larger_groups_learn_more_per_step():
    assert gain(4, 64) > gain(4, 16) > gain(4, 4)


def test_skill_cap_stops_gains():
    pop = PromptPopulation(SimConfig(num_prompts=10, law_skill_cap=0.5, **LAW))
    free = pop.fitted_gain(np.full(4, 0.4), np.full(4, 16.0))
    pop.skill = 0.25
    assert pop.fitted_gain(np.full(4, 0.4), np.full(4, 16.0)) == pytest.approx(free / 2)
    pop.skill = 0.5
    assert pop.fitted_gain(np.full(4, 0.4), np.full(4, 16.0)) == 0.0


def _run(seed: int, law: dict) -> list[tuple]:
    cfg = AllocatorConfig(method="grpo", train_batch=8, n=8, seed=seed)
    sim = Simulation(cfg, SimConfig(num_prompts=300, seed=seed, **law))
    return [(s.cumulative_sampled, round(s.accuracy, 12)) for s in sim.run(20)]


def test_fitted_law_deterministic_under_a_seed():
    law = {**LAW, "law_step_noise": 0.5, "eval_noise": 0.01}
    assert _run(4, law) == _run(4, law)
    assert _run(4, law) != _run(5, law)
    assert _run(4, law) != _run(4, {})  # the law changes the run


def test_group_sizes_reach_the_law():
    """A Simulation passes each trained group's size: GRPO at n = 4 gains less per step than at n = 32."""
    def skill(n: int) -> float:
        sim = Simulation(AllocatorConfig(method="grpo", train_batch=16, n=n, seed=0),
                         SimConfig(num_prompts=2000, seed=0, difficulty_mean=0.0, difficulty_spread=0.5,
                                   **{**LAW, "law_noise_scale": 200.0}))
        for _ in sim.run(10):
            pass
        return sim.population.skill

    assert skill(32) > 1.3 * skill(4)


def test_default_is_the_linear_law_and_its_draws():
    """The added fields at their defaults leave the population and its draws as they were."""
    pop = PromptPopulation(SimConfig(num_prompts=50, eval_prompts=30, seed=2))
    rng = np.random.default_rng([2, 0x5111])
    assert np.array_equal(pop.difficulty, rng.normal(-1.5, 2.5, 50))
    assert np.array_equal(pop.eval_difficulty, rng.normal(-1.5, 2.5, 30))
    assert SimConfig().law == "linear"


def test_mixture_and_eval_mix_draw_as_documented():
    pop = PromptPopulation(SimConfig(num_prompts=20000, seed=1, difficulty_mean=3.0, difficulty_spread=0.5,
                                     difficulty_mix_weight=0.3, difficulty_mean_2=-3.0, difficulty_spread_2=0.5,
                                     eval_difficulty_mean=-1.0, eval_difficulty_spread=0.2))
    assert np.mean(pop.difficulty > 0) == pytest.approx(0.3, abs=0.02)  # second component: logits around +3
    assert np.mean(pop.eval_difficulty) == pytest.approx(1.0, abs=0.02)
    assert np.std(pop.eval_difficulty) == pytest.approx(0.2, abs=0.02)


@pytest.mark.parametrize("field,value", [("law", "quadratic"), ("law_rate", -1.0), ("law_skill_cap", 0.0),
                                         ("difficulty_mix_weight", 1.0), ("law_noise_power", -0.5)])
def test_bad_law_config_names_field(field, value):
    with pytest.raises(ConfigError, match=field):
        SimConfig(**{field: value})
