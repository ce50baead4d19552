"""The history prior (issue 42) in the simulator, at the bench preset's PC settings on a U-shaped pool of 500 prompts
that learn: over a long run it pilots a larger share of in-band prompts for fewer rollouts a step, no prompt is
skipped more than ``screen_max_skips`` times in a row, and a run checkpointed mid-way and resumed is the
uninterrupted run, bit for bit."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from pc_pipelines.allocation import Allocator, Decision
from pc_pipelines.config import resolve
from pc_pipelines.simulator import Simulation

BENCH_PC = {"allocator.train_batch": 16, "allocator.n": 64, "allocator.n_pilot": 16,
            "allocator.band_strategy": "adaptive", "allocator.sampling_strategy": "survival",
            "allocator.pilot_strategy": "sequential", "allocator.pilot_wave": 4,
            "allocator.commit_strategy": "variance", "allocator.commit_mean": 16,
            "sim.num_prompts": 500, "sim.difficulty_mean": -2.0, "sim.difficulty_spread": 6.0}
PRIOR = {"allocator.screen_strategy": "posterior", "allocator.screen_discount": 1.0,
         "allocator.screen_prior_strength": 0.5, "allocator.screen_threshold": 0.2, "allocator.screen_max_skips": 4}


def simulation(prior: bool) -> Simulation:
    cfg = resolve("simulator", {**BENCH_PC, **(PRIOR if prior else {})}, method="pc", seed=100)
    return Simulation(cfg.allocator, cfg.sim)


def test_the_prior_pilots_more_in_band_for_fewer_rollouts_and_never_starves_a_prompt():
    stats = {}
    for prior in (False, True):
        sim = simulation(prior)
        outs = [s.outcome for s in sim.run(100)]
        led = [o.ledger for o in outs[20:]]
        piloted = sum(x.kept + x.skipped_easy + x.deferred_hard for x in led)
        stats[prior] = (sum(x.kept for x in led) / piloted, np.mean([x.sampled_rollouts for x in led]),
                        sum(x.screened_by_prior for x in led))
        run: dict[int, int] = {}
        for o in outs:  # consecutive skips, from the rows: a prompt sampled in a step restarts its run
            obs = o.observations
            sampled = set(obs.prompt_id[obs.n > 0].tolist())
            for p in obs.prompt_id[obs.decision == Decision.SCREENED_BY_PRIOR].tolist():
                run[p] = 0 if p in sampled else run.get(p, 0) + 1
                assert run[p] <= 4
            for p in sampled:
                run[p] = 0
        if prior:
            assert int(sim.allocator.screen.skips.max(initial=0)) <= 4
    (share0, cost0, skipped0), (share1, cost1, skipped1) = stats[False], stats[True]
    assert skipped0 == 0 and skipped1 > 2000
    assert share1 > share0 + 0.04 and cost1 < 0.95 * cost0


@pytest.mark.parametrize("k", [7, 30])
def test_a_resumed_simulation_with_the_prior_is_the_uninterrupted_one(k):
    whole = simulation(True)
    full = [(s.outcome.ledger.to_dict(), s.outcome.observations.prompt_id.tolist(),
             s.outcome.observations.decision.tolist()) for s in whole.run(40)]
    first = simulation(True)
    for _ in first.run(k):
        pass
    state = json.loads(json.dumps(first.allocator.state_dict(), allow_nan=False))  # what a checkpoint holds
    assert state["screen"]["prompts"]
    resumed = simulation(True)
    resumed.allocator = Allocator.from_state_dict(state)
    resumed.population = copy.deepcopy(first.population)  # the simulator's own state (the "policy")
    later = [(s.outcome.ledger.to_dict(), s.outcome.observations.prompt_id.tolist(),
              s.outcome.observations.decision.tolist()) for s in resumed.run(40 - k)]
    assert later == full[k:]
    assert json.dumps(resumed.allocator.state_dict()) == json.dumps(whole.allocator.state_dict())
