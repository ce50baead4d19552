"""Easy-pool eviction (issue 30, point 3) in the simulator: the paper's PC on a small pool of mostly easy prompts.

Strict eviction (the paper's) drains the pool and the batch runs short; ``easy_pool`` keeps every batch full. And a
simulated easy-pool run checkpointed mid-way and resumed is the uninterrupted run, bit for bit.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from pc_pipelines.allocation import Allocator
from pc_pipelines.config import resolve
from pc_pipelines.simulator import Simulation

# 200 prompts of fixed pass rates (no learning), most of them easy: sigmoid(2 + N(0, 1)); b_t 16, b_g 48, 8 pilots.
SMALL_EASY_POOL = {"allocator.train_batch": 16, "allocator.n": 32, "allocator.n_pilot": 8, "sim.num_prompts": 200,
                   "sim.difficulty_mean": -2.0, "sim.difficulty_spread": 1.0, "sim.local_rate": 0.0,
                   "sim.global_rate": 0.0}


def simulate(strategy: str, steps: int = 40) -> tuple[Simulation, list]:
    cfg = resolve("simulator", {**SMALL_EASY_POOL, "allocator.eviction_strategy": strategy}, method="pc", seed=1)
    sim = Simulation(cfg.allocator, cfg.sim)
    return sim, [s.outcome.ledger for s in sim.run(steps)]


def test_strict_eviction_starves_a_small_pool_and_easy_pool_keeps_every_batch_full():
    strict_sim, strict = simulate("strict")
    easy_sim, easy = simulate("easy_pool")
    b_t = 16
    # strict: every prompt ends up evicted; from then on steps are short, some after max_rounds rounds, the last
    # with no prompt to pilot at all
    assert strict_sim.allocator.stream.live_count() == 0 and strict_sim.allocator.stream.evicted_count == 200
    assert sum(led.shortfall for led in strict) >= 15
    assert max(led.rounds for led in strict) == strict_sim.alloc_config.max_rounds
    assert [led.trained_prompts for led in strict[-5:]] == [0] * 5
    assert all(led.returned == 0 for led in strict)
    # easy_pool: the same run never lacks a prompt, trains b_t groups every step, in about one round
    assert [led.trained_prompts for led in easy] == [b_t] * 40 and not any(led.shortfall for led in easy)
    assert np.mean([led.rounds for led in easy]) < 1.2
    assert sum(led.returned for led in easy) > 100 and easy_sim.allocator.stream.live_count() > 0
    # returns are bounded by the share while the stream has live prompts: at most ceil(b_g * share) a round
    share = easy_sim.alloc_config.return_share
    assert all(led.returned <= led.rounds * np.ceil(48 * share) for led in easy)


def step_key(step) -> tuple:
    o = step.outcome
    led = o.ledger.to_dict()
    obs = {f: getattr(o.observations, f).tolist() for f in ("prompt_id", "round", "stage", "n", "n_correct",
                                                            "decision", "evicted", "returned", "lag", "rule")}
    groups = [(g.prompt_id, g.rollout_ids.tolist(), g.rewards.tolist()) for g in o.groups]
    return (json.dumps(led, sort_keys=True), obs, groups, o.evicted_prompts, o.evicted_epochs.tolist(),
            step.accuracy, step.cumulative_sampled)


@pytest.mark.parametrize("k", [3, 11])
def test_a_resumed_easy_pool_simulation_is_the_uninterrupted_one(k):
    cfg = resolve("simulator", {**SMALL_EASY_POOL, "allocator.eviction_strategy": "easy_pool",
                                "allocator.return_share": 0.2}, method="pc", seed=4)
    whole = Simulation(cfg.allocator, cfg.sim)
    ref = [step_key(s) for s in whole.run(24)]

    first = Simulation(cfg.allocator, cfg.sim)
    list(first.run(k))
    state = json.loads(json.dumps(first.allocator.state_dict(), allow_nan=False))  # what a checkpoint holds
    assert state["method"]["eviction"]["pool"]
    resumed = Simulation(cfg.allocator, cfg.sim)
    resumed.allocator = Allocator.from_state_dict(state)
    resumed.population = copy.deepcopy(first.population)  # the simulator's own state (the "policy")
    resumed.cumulative_sampled, resumed.cumulative_trained = first.cumulative_sampled, first.cumulative_trained
    later = [step_key(s) for s in resumed.run(24 - k)]
    assert later == ref[k:]
    assert json.dumps(resumed.allocator.state_dict()) == json.dumps(whole.allocator.state_dict())
    assert sum(json.loads(r[0])["returned"] for r in ref[k:]) > 0


def test_a_config_the_allocator_refuses_leaves_no_run_behind(tmp_path):
    """An allocator setting only the allocator checks (a first pilot wave as large as all pilots) is refused before
    the run is registered: no half-made `running` run, and the same name records once the setting is fixed."""
    from pc_pipelines.config import resolve
    from pc_pipelines.errors import ConfigError
    from pc_pipelines.simulator.runs import record_simulation
    from pc_pipelines.store import Store

    store = Store(tmp_path / "s.duckdb")
    bad = resolve("embedded", {"allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 16}, method="pc", seed=0)
    with pytest.raises(ConfigError, match="pilot_wave=16: leaves no second wave"):
        list(record_simulation(bad, store, 3, run_id="x"))
    assert store.query("SELECT run_id FROM runs") == []
    good = resolve("embedded", {"allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 4}, method="pc", seed=0)
    assert len(list(record_simulation(good, store, 3, run_id="x"))) == 3
    assert store.query("SELECT run_id, status FROM runs") == [{"run_id": "x", "status": "finished"}]
