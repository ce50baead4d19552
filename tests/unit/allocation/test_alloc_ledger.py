"""Ledger, trained groups, lag and shortfall of the allocator, checked against a recording fake engine.

Acceptance criteria 1, 2, 4, 8, 9 and 14 of the allocator issue (docs/DESIGN.md section 3).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # alloc_fakes.py sits next to this file (no __init__.py)

from alloc_fakes import (
    FakeEngine,
    bernoulli_rule,
    constant_rule,
    drive_step,
    fraction_rule,
    outcome_key,
    pc_config,
    scenarios,
)

from pc_pipelines.allocation import Allocator, AllocatorConfig, Decision, Stage

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- 1. the ledger equals what the engine returned ------------------------------------------------------------
@FAST
@given(scenarios(), st.sampled_from(["list", "flat", "2d"]), st.booleans())
def test_ledger_equals_what_the_engine_returned(scenario, fmt, use_session):
    cfg, pool, rates, steps = scenario
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=cfg.seed + 1), fmt=fmt)
    next_id = 0
    for t in range(steps):
        out = drive_step(alloc, engine, use_session=use_session)
        led = out.ledger
        assert out.step == led.step == t
        assert alloc.step == t + 1
        calls = engine.calls_of_step(t)
        by_stage = engine.rollouts_by_stage(t)

        assert led.pilot_rollouts == by_stage[Stage.PILOT]
        assert led.commit_rollouts == by_stage[Stage.COMMIT]
        assert led.full_rollouts == by_stage[Stage.FULL]
        assert led.sampled_rollouts == sum(by_stage.values())
        assert led.to_dict()["sampled_rollouts"] == led.sampled_rollouts
        assert led.engine_calls == len(calls)
        assert [c.index for c in calls] == list(range(len(calls)))

        assert led.trained_rollouts == sum(g.size for g in out.groups) == sum(len(g.rewards) for g in out.groups)
        assert led.trained_prompts == len(out.groups)
        assert led.shortfall == (len(out.groups) < cfg.train_batch)
        if out.groups:  # the ledger's group statistics agree with the groups' own rewards
            stds = [float(g.rewards.std()) for g in out.groups]
            assert abs(led.mean_reward_std - float(np.mean(stds))) < 1e-9
            assert led.informative_share == float(np.mean([g.rewards.max() > g.rewards.min() for g in out.groups]))
            assert led.mean_lag == float(np.mean([g.lag for g in out.groups]))
        assert 0 <= led.rounds <= cfg.max_rounds
        exhausted = alloc.stream.live_count() == 0  # pool fully evicted: a step may then have no round at all
        if not exhausted:
            assert led.rounds >= 1
        if calls:
            assert [c.round for c in calls] == sorted(c.round for c in calls)
            assert max(c.round for c in calls) <= led.rounds

        if cfg.method == "grpo":
            assert led.rounds == 1
        if cfg.method == "pc":
            assert led.full_rollouts == 0
            if cfg.binding:
                assert led.rounds == led.engine_calls
            else:
                assert led.rounds <= led.engine_calls <= 2 * led.rounds
        else:
            assert led.pilot_rollouts == 0 and led.commit_rollouts == 0
            assert led.rounds == led.engine_calls

        # one rollout-id counter: every call owns the next contiguous block of ids
        for c in calls:
            starts = c.rollout_starts
            assert starts[0] == next_id if len(starts) else True
            assert np.array_equal(starts[1:], (starts + c.n)[:-1])
            next_id += int(c.n.sum())
        assert alloc.next_rollout_id == next_id


# ---- 2. trained PC groups are pilot + commit rollouts the engine really returned ------------------------------------
@FAST
@given(scenarios(methods=("pc",)), st.sampled_from(["list", "flat"]))
def test_pc_groups_are_real_pilot_plus_commit_rollouts(scenario, fmt):
    cfg, pool, rates, steps = scenario
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=cfg.seed + 7), fmt=fmt)
    trained_ids: list[np.ndarray] = []
    for _ in range(steps):
        out = drive_step(alloc, engine)
        step_calls = {r.global_index for r in engine.calls_of_step(out.step)}
        for g in out.groups:
            assert g.size == cfg.pilot_n + cfg.commit_n == cfg.n
            assert (g.n_pilot, g.n_commit) == (cfg.pilot_n, cfg.commit_n)
            ids = g.rollout_ids
            assert ids.shape[0] == cfg.n and np.unique(ids).shape[0] == cfg.n
            found, call_no, stage, prompt, reward = engine.lookup(ids)
            assert found.all(), "trained a rollout id the engine was never asked for"
            assert (prompt == g.prompt_id).all()
            pilot, commit = slice(0, cfg.pilot_n), slice(cfg.pilot_n, None)
            assert (stage[pilot] == Stage.PILOT).all() and (stage[commit] == Stage.COMMIT).all()
            assert np.unique(call_no[pilot]).shape[0] == 1 and np.unique(call_no[commit]).shape[0] == 1
            assert call_no[0] < call_no[-1], "the pilot must come from an earlier engine call than the commit"
            assert int(call_no[-1]) in step_calls, "commit rollouts come from this step's calls"
            assert engine.records[int(call_no[0])].step == g.born
            np.testing.assert_array_equal(g.rewards, reward)
            trained_ids.append(ids)
    if trained_ids:
        all_ids = np.concatenate(trained_ids)
        assert np.unique(all_ids).shape[0] == all_ids.shape[0], "a rollout was trained twice"


@FAST
@given(scenarios(methods=("grpo", "dapo")))
def test_full_groups_are_one_full_request_each(scenario):
    cfg, pool, rates, steps = scenario
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=3))
    for _ in range(steps):
        out = drive_step(alloc, engine)
        for g in out.groups:
            assert g.size == cfg.n and (g.n_pilot, g.n_commit) == (0, 0) and g.lag == 0 and g.born == out.step
            found, call_no, stage, prompt, reward = engine.lookup(g.rollout_ids)
            assert found.all() and (stage == Stage.FULL).all() and (prompt == g.prompt_id).all()
            assert np.unique(call_no).shape[0] == 1 and engine.records[int(call_no[0])].step == out.step
            np.testing.assert_array_equal(g.rewards, reward)
        if cfg.method == "grpo":
            assert len(out.groups) == cfg.train_batch


# ---- 4. nothing older than d is ever trained -------------------------------------------------------------------
@FAST
@given(scenarios(methods=("pc",), max_steps=12))
def test_no_entry_older_than_max_age_is_trained_or_kept(scenario):
    cfg, pool, rates, steps = scenario
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=11))
    d = cfg.max_age
    for _ in range(steps):
        out = drive_step(alloc, engine)
        for g in out.groups:
            assert 0 <= g.lag <= d
            assert g.lag == out.step - g.born
        assert out.ledger.lags == [g.lag for g in out.groups]
        if out.groups:
            assert out.ledger.max_lag == max(g.lag for g in out.groups)
        assert alloc.step == out.step + 1
        for e in alloc.buffer.entries:
            assert alloc.step - e.born <= d, f"entry born {e.born} survives into step {alloc.step} with d={d}"
        for _, born in out.expired:
            assert out.step + 1 - born > d
        assert out.ledger.buffer_expired == len(out.expired)
        assert out.ledger.buffer_size == len(alloc.buffer)
        obs = out.observations
        trained = obs.decision == Decision.TRAINED
        assert sorted(obs.lag[trained].tolist()) == sorted(g.lag for g in out.groups)


# ---- 8. shortfall never raises ---------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["pc", "dapo"])
@pytest.mark.parametrize("binding", [True, False])
def test_all_wrong_rewards_give_flagged_empty_steps(method, binding):
    extra = dict(n_pilot=4) if method == "pc" else {}
    cfg = AllocatorConfig(method=method, train_batch=4, n=8, oversample=2.0, max_rounds=3, binding=binding, **extra)
    alloc = Allocator(cfg, num_prompts=200)
    engine = FakeEngine(constant_rule(0.0))
    for t in range(5):
        out = drive_step(alloc, engine)
        led = out.ledger
        assert out.step == t and alloc.step == t + 1
        assert led.shortfall is True
        assert led.trained_prompts == 0 and out.groups == [] and led.trained_rollouts == 0
        assert led.rounds == cfg.max_rounds
        assert led.deferred_hard == cfg.max_rounds * cfg.sampling_batch
        assert led.sampled_rollouts == cfg.max_rounds * cfg.sampling_batch * (cfg.pilot_n if method == "pc" else cfg.n)
        assert len(alloc.buffer) == 0


@pytest.mark.parametrize("max_age", [0, 1, 4])
def test_zero_group_step_still_advances_buffer_ages(max_age):
    """Step 0 keeps pilots only in its last round, so it trains nothing; step 1 then trains them with lag 1."""
    cfg = pc_config(train_batch=4, n=8, n_pilot=4, oversample=2.0, max_rounds=3, max_age=max_age)

    def rule(call, prompts, stages, ids, within):
        in_band = (call.step == 0 and call.round == cfg.max_rounds) or call.step >= 1
        return ((within < 2) if in_band else np.zeros(ids.shape[0], bool)).astype(np.float64)

    alloc = Allocator(cfg, num_prompts=500)
    engine = FakeEngine(rule)
    out0 = drive_step(alloc, engine)
    assert out0.groups == [] and out0.ledger.shortfall and out0.ledger.rounds == cfg.max_rounds
    assert alloc.step == 1
    if max_age == 0:
        assert len(alloc.buffer) == 0 and out0.ledger.buffer_expired == cfg.sampling_batch
        assert sorted(b for _, b in out0.expired) == [0] * cfg.sampling_batch
    else:
        assert len(alloc.buffer) == cfg.sampling_batch and all(e.born == 0 for e in alloc.buffer.entries)
    out1 = drive_step(alloc, engine)
    from_step0 = [g for g in out1.groups if g.born == 0]
    if max_age == 0:
        assert from_step0 == []
    else:
        assert len(from_step0) == cfg.train_batch and all(g.lag == 1 for g in from_step0)


@pytest.mark.parametrize("binding", [True, False])
def test_whole_pool_evicted_does_not_loop(binding):
    cfg = pc_config(train_batch=4, n=8, n_pilot=4, oversample=3.0, max_rounds=10, binding=binding)
    alloc = Allocator(cfg, num_prompts=20)
    engine = FakeEngine(constant_rule(1.0))
    for t in range(6):
        out = drive_step(alloc, engine)
        assert out.step == t and alloc.step == t + 1
        assert out.groups == [] and out.ledger.shortfall
        assert out.ledger.rounds <= cfg.max_rounds
        if binding:
            assert out.ledger.rounds == out.ledger.engine_calls
        else:
            assert out.ledger.rounds <= out.ledger.engine_calls <= 2 * out.ledger.rounds
    assert alloc.stream.evicted_count == 20 and alloc.stream.live_count() == 0
    piloted = {int(p) for r in engine.records for p in r.prompt_ids}
    assert piloted == set(range(20))
    assert sum(r.n.sum() for r in engine.records) == sum(  # nothing after the pool ran dry
        len(r.prompt_ids) * cfg.pilot_n for r in engine.records
    )
    # after the call that evicted a prompt, it is never piloted again (it may appear twice within one call
    # when that call straddles an epoch boundary: the decision had not landed yet)
    first_call = {}
    for r in engine.records:
        for p in set(r.prompt_ids.tolist()):
            first_call.setdefault(p, r.global_index)
    for r in engine.records:
        for p in r.prompt_ids.tolist():
            assert r.global_index == first_call[p]


# ---- 9. the paper's steady-state costs ---------------------------------------------------------------------------
PAPER = [(128, 32), (64, 16), (16, 8)]  # (n, n_pilot): 32+96, 16+48, 8+8


@pytest.mark.parametrize("n,n_pilot", PAPER)
def test_paper_steady_state_costs(n, n_pilot):
    b_t, s = 128, 3.0
    b_g = 384
    pool = 20000
    half = fraction_rule(0.5)  # every pilot at p_hat = 0.5: inside [0.125, 0.75]
    steps = 5

    pc = Allocator(AllocatorConfig(method="pc", train_batch=b_t, n=n, n_pilot=n_pilot, oversample=s), num_prompts=pool)
    pc_engine = FakeEngine(half, fmt="flat")
    n_commit = n - n_pilot
    expected_pc = {128: 24_576, 64: 12_288, 16: 4_096}[n]
    assert b_g * n_pilot + b_t * n_commit == expected_pc
    for t in range(steps):
        led = drive_step(pc, pc_engine).ledger
        by = pc_engine.rollouts_by_stage(t)
        assert led.trained_rollouts == b_t * n and led.trained_prompts == b_t and not led.shortfall
        if t == 0:
            assert led.rounds == 2 and led.engine_calls == 2
            assert by[Stage.PILOT] == 2 * b_g * n_pilot and by[Stage.COMMIT] == b_t * n_commit
        else:
            assert led.rounds == 1 and led.engine_calls == 1
            assert by[Stage.PILOT] == led.pilot_rollouts == b_g * n_pilot
            assert by[Stage.COMMIT] == led.commit_rollouts == b_t * n_commit
            assert led.sampled_rollouts == expected_pc
            assert sum(by.values()) == expected_pc

    grpo = Allocator(AllocatorConfig(method="grpo", train_batch=b_t, n=n, oversample=s), num_prompts=pool)
    dapo = Allocator(AllocatorConfig(method="dapo", train_batch=b_t, n=n, oversample=s), num_prompts=pool)
    g_engine, d_engine = FakeEngine(half, fmt="flat"), FakeEngine(half, fmt="flat")
    for t in range(steps):
        g = drive_step(grpo, g_engine).ledger
        d = drive_step(dapo, d_engine).ledger
        assert g.sampled_rollouts == sum(g_engine.rollouts_by_stage(t).values()) == b_t * n
        assert g.trained_rollouts == b_t * n
        assert d.sampled_rollouts == sum(d_engine.rollouts_by_stage(t).values()) == b_g * n
        assert d.trained_rollouts == b_t * n and d.rounds == 1 and d.surplus == b_g - b_t
    if n == 128:  # the paper's headline numbers (docs/DESIGN.md section 3)
        assert (g.sampled_rollouts, g.trained_rollouts) == (16_384, 16_384)
        assert (d.sampled_rollouts, d.trained_rollouts) == (49_152, 16_384)


# ---- 14. determinism ---------------------------------------------------------------------------------------------
@FAST
@given(scenarios(max_steps=6), st.sampled_from(["list", "flat"]))
def test_same_config_and_engine_give_identical_outcomes(scenario, fmt):
    cfg, pool, rates, steps = scenario
    a, b = Allocator(cfg, num_prompts=pool), Allocator(cfg, num_prompts=pool)
    ea, eb = FakeEngine(bernoulli_rule(rates, seed=5), fmt=fmt), FakeEngine(bernoulli_rule(rates, seed=5), fmt="list")
    for _ in range(steps):
        assert outcome_key(drive_step(a, ea)) == outcome_key(drive_step(b, eb, use_session=False))
    assert a.state_dict() == b.state_dict()
