"""PC's strategies beyond the paper (issue 7): adaptive band, survival sampling, sequential pilots, variance commits.

Each strategy's invariants as properties over random small configs, driven through the real allocator with the
fake engine (whose books are independent of the allocator's): ledger sums, bounds, determinism, state round-trip.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloc_fakes import (
    FakeEngine,
    bernoulli_rule,
    drive_step,
    fraction_rule,
    make_rates,
    outcome_key,
    pc_config,
    scenarios,
)

from pc_pipelines.allocation import (
    STRATEGIES,
    Allocator,
    AllocatorConfig,
    Decision,
    Rule,
    Stage,
    proportional_sizes,
)
from pc_pipelines.allocation.reasons import observation_reason
from pc_pipelines.allocation.strategies import AdaptiveBand, SurvivalSampling
from pc_pipelines.errors import ConfigError

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def all_on(**kw) -> AllocatorConfig:
    base = dict(band_strategy="adaptive", sampling_strategy="survival", pilot_strategy="sequential",
                commit_strategy="variance", train_batch=6, n=16, n_pilot=8, pilot_wave=2, commit_mean=6,
                commit_min=2, commit_max=12, max_age=2)
    base.update(kw)
    return pc_config(**base)


# ---- variance-proportional sizes ----------------------------------------------------------------------------------
def test_proportional_sizes_worked_example():
    assert proportional_sizes(np.array([0.5, 0.25, 0.0]), 24, 4, 16).tolist() == [12, 8, 4]
    # a capped item gives its excess back to the others
    assert proportional_sizes(np.array([1.0, 0.1, 0.1]), 30, 2, 12).tolist() == [12, 9, 9]
    assert proportional_sizes(np.zeros(3), 10, 1, 8).tolist() == [4, 3, 3]  # no signal: even, earlier first


@FAST
@given(
    w=st.lists(st.floats(0, 0.5), min_size=1, max_size=40),
    floor=st.integers(1, 8),
    extra=st.integers(0, 40),
    mean_extra=st.integers(0, 40),
)
def test_proportional_sizes_sum_bounds_and_order(w, floor, extra, mean_extra):
    weight = np.array(w)
    cap = floor + extra
    mean = floor + min(mean_extra, extra)
    budget = len(w) * mean
    sizes = proportional_sizes(weight, budget, floor, cap)
    assert sizes.dtype == np.int64 and sizes.sum() == budget
    assert sizes.min() >= floor and sizes.max() <= cap
    # monotone: a larger weight never gets fewer rollouts (up to one from integer rounding)
    order = np.argsort(weight, kind="stable")
    assert np.all(np.diff(sizes[order]) >= -1)
    np.testing.assert_array_equal(sizes, proportional_sizes(weight.copy(), budget, floor, cap))


# ---- adaptive band --------------------------------------------------------------------------------------------------
def test_adaptive_band_worked_example():
    band = AdaptiveBand(pc_config(band_strategy="adaptive", p_lower=0.125, p_upper=0.75))
    p = np.array([0.5, 0.0, 0.0625, 0.8125, 0.875, 1.0])
    kept, widened, (lo, hi) = band.keep(p, need=3)
    assert kept.tolist() == [True, False, False, True, True, False]
    assert widened.tolist() == [False, False, False, True, True, False]
    assert (lo, hi) == (0.125, 0.875)


@FAST
@given(
    k=st.lists(st.integers(0, 16), min_size=0, max_size=60),
    need=st.integers(0, 70),
    lo=st.sampled_from([0.0, 0.125, 0.25]),
    hi=st.sampled_from([0.5, 0.75, 1.0]),
)
def test_adaptive_band_bounds(k, need, lo, hi):
    p = np.array(k, dtype=np.float64) / 16
    cfg = pc_config(band_strategy="adaptive", n=32, n_pilot=16, p_lower=lo, p_upper=hi)
    static, _, _ = STRATEGIES["band"]["static"](cfg).keep(p, need)
    kept, widened, (blo, bhi) = AdaptiveBand(cfg).keep(p, need)
    assert np.all(kept[static]), "a prompt the static band keeps is never dropped"
    assert blo <= lo and bhi >= hi, "the adaptive band contains the static band"
    assert not np.any(widened & ((p == 0) | (p == 1))), "the widening never keeps p_hat of exactly 0 or 1"
    assert np.array_equal(widened, kept & ~static)
    in_band = (p >= blo - 1e-9) & (p <= bhi + 1e-9)
    assert np.all(in_band[kept]), "everything kept lies in the band recorded"
    candidates = int(((p > 0) & (p < 1) & ~static).sum())
    if static.sum() >= need:
        assert not widened.any(), "no widening when the static band fills the need"
    else:  # short: widened until filled, or everything with signal is kept
        assert kept.sum() >= min(need, int(static.sum()) + candidates)
        if widened.any():  # a band: nothing with signal inside it is left out
            left_out = ~kept & (p > 0) & (p < 1)
            assert not np.any(left_out & in_band)


def test_adaptive_band_fills_batches_the_static_band_leaves_short():
    """Every pilot at p_hat 7/8 (outside the paper band): static PC trains nothing, adaptive fills b_t."""
    rule = fraction_rule(7 / 8)
    out = {}
    for band in ("static", "adaptive"):
        alloc = Allocator(pc_config(band_strategy=band, n=16, n_pilot=8, p_solve=1.0), num_prompts=200)
        engine = FakeEngine(rule)
        outs = [drive_step(alloc, engine) for _ in range(3)]
        out[band] = outs
    assert all(o.ledger.trained_prompts == 0 for o in out["static"])
    adaptive = out["adaptive"]
    assert all(o.ledger.trained_prompts == 4 for o in adaptive[1:])
    # widened exactly to the pilots' 7/8 when short (step 0); static again once the buffer holds enough
    assert adaptive[0].ledger.band_upper == 0.875 and adaptive[0].ledger.band_lower == 0.125
    assert all(o.ledger.band_upper in (0.75, 0.875) for o in adaptive)
    assert sum(o.ledger.widened for o in adaptive) > 0
    obs = adaptive[0].observations
    pilots = obs.stage == Stage.PILOT
    assert np.all(obs.rule[pilots & (obs.decision == Decision.KEPT)] == Rule.ADAPTIVE_BAND)
    assert "widened band [0.125, 0.875]" in observation_reason(obs, int(np.flatnonzero(pilots)[0]))


# ---- survival sampling ----------------------------------------------------------------------------------------------
def test_survival_sampling_worked_example_and_bounds():
    cfg = pc_config(sampling_strategy="survival", train_batch=16, oversample=3.0, survival_margin=1.25)
    s = SurvivalSampling(cfg)
    assert s.survival == pytest.approx(16 / 48)
    s.survival = 0.40
    assert s.pilots(10) == 32
    assert s.pilots(0) == 0 and s.pilots(-3) == 0
    assert s.pilots(1000) == cfg.sampling_batch  # never more than b_g
    s.update(10, 0)
    assert s.survival == pytest.approx(0.20)
    s.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert s.survival == pytest.approx(0.20)


def test_survival_sampling_pilots_fewer_prompts_when_most_survive():
    rule = fraction_rule(0.5)  # every pilot in band: survival 1
    spent = {}
    for sampling in ("fixed", "survival"):
        alloc = Allocator(pc_config(sampling_strategy=sampling, train_batch=8, n=16, n_pilot=4), num_prompts=2000)
        engine = FakeEngine(rule)
        outs = [drive_step(alloc, engine) for _ in range(20)]
        assert all(o.ledger.trained_prompts == 8 for o in outs[1:])
        spent[sampling] = sum(o.ledger.prompts_consumed for o in outs)
        if sampling == "survival":
            assert outs[-1].ledger.survival == pytest.approx(1.0, abs=1e-3)
    assert spent["survival"] < spent["fixed"] / 2


# ---- sequential pilots ----------------------------------------------------------------------------------------------
def test_sequential_pilots_decide_flat_first_waves_early():
    """Half the pool always right, half always wrong, the rest 50%: flat first waves are decided early."""
    rates = np.where(np.arange(300) % 3 == 0, 1.0, np.where(np.arange(300) % 3 == 1, 0.0, 0.5))
    cfg = pc_config(pilot_strategy="sequential", pilot_wave=2, n=16, n_pilot=8, train_batch=4)
    alloc = Allocator(cfg, num_prompts=300)
    engine = FakeEngine(bernoulli_rule(rates, seed=5))
    out = drive_step(alloc, engine)
    obs = out.observations
    early = obs.rule == Rule.EARLY_WAVE
    assert early.sum() == out.ledger.early_decided > 0
    assert np.all(obs.n[early] == 2) and np.all(obs.wave[early] == 0)
    assert np.all(obs.decision[early & (obs.p_hat == 1)] == Decision.SKIPPED_EASY)
    assert np.all(obs.decision[early & (obs.p_hat == 0)] == Decision.DEFERRED_HARD)
    assert not obs.evicted[early].any(), "an early decision never evicts"
    assert out.ledger.pilot_rollouts_saved == early.sum() * 6
    # every always-right / always-wrong prompt piloted was decided early (its wave is always flat)
    certain = np.isin(obs.prompt_id, np.flatnonzero(rates != 0.5)) & (obs.stage == Stage.PILOT)
    assert np.all(early[certain])
    # every other first wave has its own row (continued), then its later wave's row holds the decision over both
    went_on = obs.decision == Decision.CONTINUED
    late = (obs.stage == Stage.PILOT) & ~early & ~went_on
    assert went_on.sum() == late.sum() > 0
    assert np.all(obs.n[went_on] == 2) and np.all(obs.wave[went_on] == 0)
    assert np.all(obs.n[late] == 6) and np.all(obs.evidence_n[late] == 8) and np.all(obs.wave[late] == 1)
    assert sorted(obs.prompt_id[went_on]) == sorted(obs.prompt_id[late])
    both = {p: obs.n_correct[went_on][obs.prompt_id[went_on] == p].sum() for p in obs.prompt_id[late]}
    np.testing.assert_allclose(obs.evidence_correct[late], [both[p] + c for p, c in
                                                            zip(obs.prompt_id[late], obs.n_correct[late])])
    assert "sent on to the later wave" in observation_reason(obs, int(np.flatnonzero(went_on)[0]))
    # every first wave's row holds exactly what the engine returned for that wave (n and the number correct)
    first_waves = (obs.stage == Stage.PILOT) & (obs.wave == 0)
    assert first_waves.sum() == out.ledger.prompts_consumed
    calls = {r.index: r for r in engine.calls_of_step(out.step)}
    for i in np.flatnonzero(first_waves):
        rec = calls[int(obs.call[i])]
        j = int(np.flatnonzero((rec.prompt_ids == obs.prompt_id[i]) & (rec.stages == Stage.PILOT))[0])
        assert (obs.n[i], obs.n_correct[i]) == (rec.n[j], rec.rewards[j].sum()) == (2, rec.rewards[j].sum())
    assert "first pilot wave all correct" in observation_reason(obs, int(np.flatnonzero(early & (obs.p_hat == 1))[0]))


# ---- the generic invariants with every strategy drawn -----------------------------------------------------------------
@FAST
@given(scenarios(methods=("pc",), strategies=True, max_steps=8), st.sampled_from(["list", "flat"]))
def test_ledger_and_groups_with_strategies(scenario, fmt):
    cfg, pool, rates, steps = scenario
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=cfg.seed + 3), fmt=fmt)
    waves = (cfg.pilot_wave, cfg.pilot_n - cfg.pilot_wave) if cfg.pilot_strategy == "sequential" else (cfg.pilot_n,)
    trained: list[np.ndarray] = []
    next_id = 0
    for t in range(steps):
        out = drive_step(alloc, engine)
        led, obs = out.ledger, out.observations
        by_stage = engine.rollouts_by_stage(t)
        assert led.pilot_rollouts == by_stage[Stage.PILOT] and led.commit_rollouts == by_stage[Stage.COMMIT]
        # every fresh prompt drawn got the whole pilot, or its first wave and an early decision
        assert led.pilot_rollouts + led.pilot_rollouts_saved == led.prompts_consumed * cfg.pilot_n
        assert led.pilot_rollouts_saved == led.early_decided * sum(waves[1:])
        pilots = obs.stage == Stage.PILOT
        went_on = obs.decision == Decision.CONTINUED
        assert (pilots & ~went_on).sum() == led.prompts_consumed, "one decision row per piloted prompt"
        assert (pilots & (obs.wave == 0)).sum() == led.prompts_consumed, "every first wave has its own row"
        assert obs.n[pilots].sum() == led.pilot_rollouts, "each pilot rollout in exactly one row"
        if cfg.pilot_strategy == "single":
            assert not went_on.any()
        assert led.kept + led.skipped_easy + led.deferred_hard == led.prompts_consumed
        assert led.buffer_adds == led.kept
        assert led.widened == int((obs.rule == Rule.ADAPTIVE_BAND).sum()) <= led.kept
        if cfg.band_strategy == "static":
            assert led.widened == 0 and (led.band_lower, led.band_upper) == (cfg.p_lower, cfg.p_upper)
        assert led.band_lower <= cfg.p_lower and led.band_upper >= cfg.p_upper
        kept_p = obs.p_hat[pilots & (obs.decision == Decision.KEPT)]
        assert np.all((kept_p >= led.band_lower - 1e-9) & (kept_p <= led.band_upper + 1e-9))
        if cfg.sampling_strategy == "fixed":
            assert led.survival is None
        else:
            assert 0.0 <= led.survival <= 1.0
        assert led.rounds <= cfg.max_rounds and led.trained_prompts <= cfg.train_batch
        for call in engine.calls_of_step(t):  # one rollout-id counter, contiguous blocks
            assert call.rollout_starts[0] == next_id if len(call.rollout_starts) else True
            next_id += int(call.n.sum())
            commit = call.stages == Stage.COMMIT
            if commit.any() and cfg.commit_strategy == "variance":
                assert call.n[commit].min() >= cfg.commit_min and call.n[commit].max() <= cfg.commit_max_n
                assert call.n[commit].sum() == commit.sum() * cfg.commit_mean_n  # the round's budget, all spent
            elif commit.any():
                assert np.all(call.n[commit] == cfg.commit_n)
        for g in out.groups:  # real rollouts: the pilot's waves then the commit, all of this prompt
            ids = g.rollout_ids
            found, call_no, stage, prompt, reward = engine.lookup(ids)
            assert found.all() and (prompt == g.prompt_id).all()
            assert g.n_pilot == cfg.pilot_n and g.size == g.n_pilot + g.n_commit
            assert (stage[: g.n_pilot] == Stage.PILOT).all() and (stage[g.n_pilot :] == Stage.COMMIT).all()
            np.testing.assert_array_equal(g.rewards, reward)
            assert 0 <= g.lag <= cfg.max_age
            trained.append(ids)
        assert alloc.next_rollout_id == next_id
    if trained:
        ids = np.concatenate(trained)
        assert np.unique(ids).shape[0] == ids.shape[0], "a rollout was trained twice"


@FAST
@given(scenarios(methods=("pc",), strategies=True, max_steps=1), st.integers(0, 6), st.integers(1, 5))
def test_strategies_round_trip_mid_run_and_are_deterministic(scenario, k, m):
    cfg, pool, rates, _ = scenario
    rule = bernoulli_rule(rates, seed=cfg.seed + 13)
    original = Allocator(cfg, num_prompts=pool)
    twin = Allocator(cfg, num_prompts=pool)
    for _ in range(k):
        a, b = drive_step(original, FakeEngine(rule)), drive_step(twin, FakeEngine(rule))
        assert outcome_key(a) == outcome_key(b), "same config and rewards, different decisions"
    state = json.loads(json.dumps(original.state_dict(), allow_nan=False))
    restored = Allocator.from_state_dict(state)
    assert json.loads(json.dumps(restored.state_dict())) == state
    np.testing.assert_array_equal(restored.live_rollout_ids(), original.live_rollout_ids())
    for _ in range(m):
        a, b = drive_step(original, FakeEngine(rule)), drive_step(restored, FakeEngine(rule))
        assert outcome_key(a) == outcome_key(b), "restored allocator diverged"


def test_all_strategies_together_state_carries_survival_and_wave_spans():
    rates = make_rates(400, 3, p_zero=0.3, p_one=0.3)
    alloc = Allocator(all_on(), num_prompts=400)
    engine = FakeEngine(bernoulli_rule(rates, seed=9))
    outs = [drive_step(alloc, engine) for _ in range(6)]
    state = alloc.state_dict()
    assert "survival" in state["method"]["sampling"]
    assert any(len(e["spans"]) == 2 for e in state["buffer"]), "sequential pilots leave two-wave entries"
    sizes = {g.n_commit for o in outs for g in o.groups}
    assert len(sizes) > 1, "variance commits give groups of different sizes"
    assert sum(o.ledger.early_decided for o in outs) > 0


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(band_strategy="wide"), "band_strategy"),
        (dict(sampling_strategy="greedy"), "sampling_strategy"),
        (dict(pilot_strategy="sequential", n_pilot=4, pilot_wave=4), "pilot_wave"),
        (dict(pilot_wave=0), "pilot_wave"),
        (dict(commit_strategy="variance", commit_mean=2, commit_min=4), "commit_mean"),
        (dict(commit_strategy="variance", commit_mean=8, commit_max=6), "commit_mean"),
        (dict(commit_min=0), "commit_min"),
        (dict(survival_margin=0.5), "survival_margin"),
    ],
)
def test_bad_strategy_settings_name_the_field_and_the_fix(kwargs, field):
    with pytest.raises(ConfigError, match=rf"{field}=.*Fix: "):
        Allocator(pc_config(**kwargs), 100)  # names are checked against the registries where it is built
