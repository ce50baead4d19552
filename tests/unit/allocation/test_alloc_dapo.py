"""DAPO: dynamic sampling trains the first b_t informative groups in stream order; the rest is surplus.

Acceptance criterion 13 of the allocator issue (docs/DESIGN.md section 3, DAPO).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloc_fakes import FakeEngine, bernoulli_rule, drive_step, scenarios

from pc_pipelines.allocation import Allocator, AllocatorConfig, Decision, Stage


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(methods=("dapo",)), st.sampled_from(["list", "flat", "2d"]))
def test_dapo_trains_first_informative_groups_in_stream_order(scenario, fmt):
    cfg, pool, rates, steps = scenario
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=cfg.seed + 2), fmt=fmt)
    b_t, b_g = cfg.train_batch, cfg.sampling_batch
    for t in range(steps):
        out = drive_step(alloc, engine)
        led = out.ledger
        calls = engine.calls_of_step(t)
        # FULL requests of this step in call order, with what the engine returned
        requests = []
        for r in calls:
            assert (r.stages == Stage.FULL).all() and len(r.prompt_ids) == b_g and (r.n == cfg.n).all()
            for p, start, rew in zip(r.prompt_ids.tolist(), r.rollout_starts.tolist(), r.rewards):
                requests.append((p, start, bool(rew.max() > rew.min()), float(rew.mean())))
        informative = [q for q in requests if q[2]]
        expected = informative[:b_t]
        assert [(g.prompt_id, g.spans[0][0]) for g in out.groups] == [(p, s) for p, s, _, _ in expected]
        assert led.trained_prompts == len(expected) == min(b_t, len(informative))
        assert led.surplus == len(informative) - len(expected)
        assert led.kept == len(informative)

        # decisions, per request in call order
        obs = out.observations
        assert obs.prompt_id.tolist() == [p for p, _, _, _ in requests]
        want = []
        trained_starts = {s for _, s, _, _ in expected}
        for _p, s, inf, mean in requests:
            if s in trained_starts:
                want.append(Decision.TRAINED)
            elif inf:
                want.append(Decision.SURPLUS)
            else:
                want.append(Decision.SKIPPED_EASY if mean >= 0.5 else Decision.DEFERRED_HARD)
        assert obs.decision.tolist() == [int(d) for d in want]

        # rounds stop as soon as b_t are kept, or at max_rounds (then the step is a flagged shortfall)
        per_round = [sum(1 for rew in r.rewards if rew.max() > rew.min()) for r in calls]
        assert led.rounds == len(calls)
        if len(informative) >= b_t:
            assert sum(per_round[:-1]) < b_t and not led.shortfall
        else:
            assert led.rounds == cfg.max_rounds and led.shortfall
        # every round is full (the stream never runs dry without eviction): cost = rounds * b_g * n
        assert led.sampled_rollouts == led.full_rollouts == led.rounds * b_g * cfg.n
        assert led.trained_rollouts == len(expected) * cfg.n


def test_dapo_scripted_surplus():
    """Informative groups only on even prompt ids (odd prompts are all correct): the first b_t = 2 even prompts of
    the stream are trained, later even prompts of the same rounds are surplus, odd ones skipped as easy."""

    def rule(call, prompts, stages, ids, within):
        informative = prompts % 2 == 0
        return np.where(informative, within % 2, 1).astype(np.float64)

    cfg = AllocatorConfig(method="dapo", train_batch=2, n=4, oversample=3.0, max_rounds=5)
    alloc = Allocator(cfg, num_prompts=60)
    engine = FakeEngine(rule)
    out = drive_step(alloc, engine)
    drawn = np.concatenate([r.prompt_ids for r in engine.calls_of_step(0)]).tolist()
    even = [p for p in drawn if p % 2 == 0]
    assert len(even) >= 2
    assert [g.prompt_id for g in out.groups] == even[:2]
    assert out.ledger.surplus == len(even) - 2
    assert out.ledger.skipped_easy == len(drawn) - len(even)
    assert out.ledger.sampled_rollouts == out.ledger.rounds * 6 * 4
