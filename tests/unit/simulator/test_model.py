"""The scale simulator: its documented model, the oracle bound, determinism."""

import numpy as np
import pytest

from pc_pipelines.allocation import AllocatorConfig, Stage
from pc_pipelines.config import SimConfig
from pc_pipelines.errors import ConfigError
from pc_pipelines.simulator import PromptPopulation, Simulation


def test_pass_rate_follows_documented_model():
    pop = PromptPopulation(SimConfig(num_prompts=50, seed=3))
    pop.skill = 0.4
    pop.bonus[7] = 1.1
    expected = 1 / (1 + np.exp(-(0.4 + pop.difficulty[7] + 1.1)))
    assert pop.pass_rates(np.array([7]))[0] == pytest.approx(expected)
    assert pop.accuracy() == pytest.approx(np.mean(1 / (1 + np.exp(-(0.4 + pop.eval_difficulty)))))


def test_training_raises_pass_rates_by_reward_std():
    sim = Simulation(AllocatorConfig(method="grpo", train_batch=16, n=8, seed=1), SimConfig(num_prompts=200, seed=1))
    before = sim.population.pass_rates().copy()
    skill0 = sim.population.skill
    st = sim.step()
    sigma = np.array([g.reward_std for g in st.outcome.groups])
    # Shared skill moves by global_rate * sum of group stds; a trained prompt's bonus by local_rate * its std.
    assert sim.population.skill - skill0 == pytest.approx(sim.sim_config.global_rate * sigma.sum())
    g = next(g for g in st.outcome.groups if g.reward_std > 0)
    assert sim.population.bonus[g.prompt_id] >= sim.sim_config.local_rate * g.reward_std - 1e-12
    assert np.all(sim.population.pass_rates() >= before)


def test_oracle_trains_prompts_nearest_one_half_without_pilots():
    sim = Simulation(AllocatorConfig(method="oracle", train_batch=10, n=4, seed=0), SimConfig(num_prompts=500, seed=2))
    p = sim.population.pass_rates()
    st = sim.step()
    chosen = sorted(g.prompt_id for g in st.outcome.groups)
    nearest = sorted(np.argsort(np.abs(p - 0.5), kind="stable")[:10].tolist())
    assert chosen == nearest
    assert st.outcome.ledger.pilot_rollouts == 0 and st.outcome.ledger.sampled_rollouts == 40


def test_oracle_outside_simulation_is_refused():
    from pc_pipelines.allocation import Allocator
    from pc_pipelines.run.step_loop import allocator_step

    alloc = Allocator(AllocatorConfig(method="oracle", train_batch=2, n=2), 10)
    with pytest.raises(ConfigError, match="only runs inside Simulation"):
        allocator_step(alloc, lambda call: np.zeros(call.total_rollouts))


def test_simulation_is_deterministic_and_seed_sensitive():
    def run(seed):
        sim = Simulation(
            AllocatorConfig(method="pc", train_batch=8, n=8, n_pilot=4, seed=seed), SimConfig(num_prompts=300, seed=seed)
        )
        return [(s.cumulative_sampled, round(s.accuracy, 12), s.outcome.ledger.evicted) for s in sim.run(15)]

    assert run(4) == run(4)
    assert run(4) != run(5)


def test_pc_beats_grpo_on_reward_std_of_trained_groups():
    """PC's purpose: trained groups carry more reward variance than GRPO's uniform sample."""
    stds = {}
    for m in ("grpo", "pc"):
        cfg = AllocatorConfig(method=m, train_batch=32, n=16, n_pilot=4 if m == "pc" else None, seed=0)
        sim = Simulation(cfg, SimConfig(num_prompts=5000, seed=0))
        stds[m] = np.mean([s.outcome.ledger.mean_reward_std for s in sim.run(20)])
    assert stds["pc"] > stds["grpo"] + 0.05


def test_engine_returns_one_reward_per_requested_rollout():
    pop = PromptPopulation(SimConfig(num_prompts=20, seed=0))
    from pc_pipelines.allocation import Allocator

    alloc = Allocator(AllocatorConfig(method="pc", train_batch=4, n=8, n_pilot=2), 20)
    session = alloc.begin_step()
    call = session.next_call()
    r = pop.sample(call)
    assert r.shape == (call.total_rollouts,) and set(np.unique(r)) <= {0.0, 1.0}
    assert all(req.stage is Stage.PILOT for req in call)


@pytest.mark.parametrize("field,value", [("num_prompts", 0), ("difficulty_spread", -1.0), ("global_rate", -0.1)])
def test_bad_sim_config_names_field(field, value):
    with pytest.raises(ConfigError, match=field):
        SimConfig(**{field: value})
