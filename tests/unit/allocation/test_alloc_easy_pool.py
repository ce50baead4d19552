"""Eviction that does not starve (issue 30, point 3): the ``easy_pool`` eviction strategy and the stream's un-eviction.

The stream and the strategy are driven directly (a real :class:`PromptStream` inside a real :class:`StepContext`) for
the rules of ``allocation/strategies.py``'s "Easy-pool eviction" section: the rate (a carried credit, at most
``ceil(k * return_share)`` a round), eligibility (solved in an earlier epoch), FIFO order, re-solved prompts back to
the end of the pool, un-eviction from the next epoch, never short while the pool has prompts; then through the
allocator: strict eviction unchanged bit for bit, checkpoint round trips, config errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloc_fakes import (
    FakeEngine,
    bernoulli_rule,
    constant_rule,
    drive_step,
    make_rates,
    outcome_key,
    pc_config,
    pooled_observations,
)

from pc_pipelines.allocation import (
    SELECTION_STRATEGIES,
    STRATEGIES,
    Allocator,
    AllocatorConfig,
    CallResult,
    PromptStream,
    ReplayBuffer,
    Stage,
    StepContext,
)
from pc_pipelines.allocation.step import IdCounters
from pc_pipelines.allocation.strategies import EasyPoolEviction, StrictEviction
from pc_pipelines.config import resolve
from pc_pipelines.errors import ConfigError


class Harness:
    """The easy-pool strategy around a real stream, as PC's plan_step and screen use it."""

    def __init__(self, pool: int, share: float, seed: int = 0) -> None:
        self.cfg = pc_config(eviction_strategy="easy_pool", return_share=share)
        self.stream = PromptStream(pool, seed)
        self.strat = EasyPoolEviction(self.cfg)
        self.ids = IdCounters()

    def ctx(self) -> StepContext:
        return StepContext(self.cfg, 0, (self.cfg.p_lower, self.cfg.p_upper), stream=self.stream,
                           buffer=ReplayBuffer(4), selection=SELECTION_STRATEGIES["max_variance"](),
                           rng=np.random.default_rng(0), ids=self.ids)

    def draw(self, k: int):
        ctx = self.ctx()
        ids, epochs, returned = self.strat.draw(ctx, k)
        assert ids.shape == epochs.shape == returned.shape and returned.dtype == bool
        return ctx, ids, epochs, returned

    def decide(self, ctx: StepContext, ids, epochs, returned, solved) -> None:
        """What PC's screen does about eviction: evict the solved pilots, then the strategy settles the rows."""
        solved = np.asarray(solved, bool)
        result = CallResult(ctx.make_call([(ids, 1, Stage.PILOT)]), solved.astype(np.float64))
        rows = np.arange(ids.shape[0])
        ctx.evict(result, rows[solved], epochs[solved])
        self.strat.settle(ctx, result, rows, epochs, solved, returned)


def mask(n: int, rows) -> np.ndarray:
    m = np.zeros(n, bool)
    m[list(rows)] = True
    return m


# ---- the stream's un-eviction --------------------------------------------------------------------------------------
def test_unevicted_prompt_is_streamed_again_from_the_epoch_after_its_return_only():
    s = PromptStream(10, seed=3)
    s.evict(np.array([4, 7]), np.array([0, 0]))  # solved in epoch 0: out from epoch 1
    s.unevict(np.array([4]), np.array([2]))  # drawn back in epoch 2, not solved again: streamed from epoch 3
    assert [s.live_count(e) for e in range(5)] == [10, 8, 8, 9, 9]
    assert not s.is_evicted(4) and s.is_evicted(7) and s.evicted_count == 1
    assert (int(s.evicted_from[4]), int(s.back_from[4])) == (1, 3)
    seen = {}
    while s.epoch < 5:
        ids, eps = s.take(3)
        for p, e in zip(ids.tolist(), eps.tolist()):
            seen.setdefault(e, []).append(p)
    assert [4 in seen[e] for e in range(4)] == [True, False, False, True]
    assert all(7 not in seen[e] for e in range(1, 5))
    # solved again once back: a new exclusion from the epoch after, and back_from is cleared
    s.evict(np.array([4]), np.array([3]))
    assert (int(s.evicted_from[4]), int(s.back_from[4])) == (4, np.iinfo(np.int64).max)
    assert s.live_count(4) == 8 and s.is_evicted(4)


def test_unevicting_before_the_exclusion_starts_clears_it_and_state_round_trips():
    s = PromptStream(6, seed=1)
    s.evict(np.array([2, 5]), np.array([1, 0]))  # 2 out from epoch 2, 5 from epoch 1
    s.unevict(np.array([2]), np.array([1]))  # back from epoch 2 = its exclusion's start: never excluded at all
    assert int(s.evicted_from[2]) == int(s.back_from[2]) == np.iinfo(np.int64).max
    assert json.loads(json.dumps(s.state_dict())) == {"epoch": 0, "pos": 0, "evicted_prompts": [5],
                                                      "evicted_from": [1]}  # no un-eviction left: strict's shape
    s.unevict(np.array([5]), np.array([3]))
    state = json.loads(json.dumps(s.state_dict()))
    assert state["back_prompts"] == [5] and state["back_from"] == [4]
    r = PromptStream(6, seed=1)
    r.load_state_dict(state)
    np.testing.assert_array_equal(r.evicted_from, s.evicted_from)
    np.testing.assert_array_equal(r.back_from, s.back_from)
    r.load_state_dict({"epoch": 0, "pos": 0, "evicted_prompts": [], "evicted_from": []})  # a pre-easy-pool state
    assert r.live_count(9) == 6


# ---- the strategy --------------------------------------------------------------------------------------------------
def test_solved_prompts_wait_fifo_and_return_only_once_the_epoch_has_moved_on():
    h = Harness(pool=40, share=0.5)
    ctx, a, ea, ra = h.draw(10)  # empty pool: all fresh
    assert not ra.any() and ctx.ledger.returned == 0 and ctx.ledger.prompts_consumed == 10
    h.decide(ctx, a, ea, ra, mask(10, [7, 1, 3]))
    assert h.strat.pool.tolist() == [a[1], a[3], a[7]] and h.strat.pool_epochs.tolist() == [0, 0, 0]

    ctx, b, eb, rb = h.draw(31)  # credit 15.5 but every pool prompt was solved in this epoch: none is eligible
    assert not rb.any() and h.stream.epoch == 1 and eb.tolist() == [0] * 30 + [1]
    assert h.strat.credit == 0.5  # the unused quota is dropped, not saved up into a burst
    h.decide(ctx, b, eb, rb, np.zeros(31, bool))

    ctx, c, ec, rc = h.draw(4)  # epoch 1: credit 0.5 + 2 -> 2 come back, the oldest first, after 2 fresh
    assert rc.tolist() == [False, False, True, True] and c[2:].tolist() == [a[1], a[3]]
    assert ec.tolist() == [1, 1, 1, 1] and ctx.ledger.returned == 2 and ctx.ledger.prompts_consumed == 2
    assert h.strat.pool.tolist() == [a[7]]
    h.decide(ctx, c, ec, rc, mask(4, [2]))  # a[1] solved again: to the END of the pool, solved in epoch 1
    assert h.strat.pool.tolist() == [a[7], a[1]] and h.strat.pool_epochs.tolist() == [0, 1]
    assert ctx.ledger.evicted == 1 and h.stream.is_evicted(int(a[1]))
    assert not h.stream.is_evicted(int(a[3])) and int(h.stream.back_from[a[3]]) == 2  # back from epoch 2

    ctx, d, ed, rd = h.draw(4)  # credit 0.5 + 2: quota 2, but only a[7] is eligible (a[1] was solved in epoch 1)
    assert d[rd].tolist() == [a[7]] and rd.sum() == 1 and ctx.ledger.returned == 1
    assert h.strat.pool.tolist() == [a[1]]


def test_a_returned_prompt_not_solved_again_rejoins_the_stream_from_the_next_epoch():
    h = Harness(pool=30, share=0.5)
    ctx, a, ea, ra = h.draw(30)  # all of epoch 0
    h.decide(ctx, a, ea, ra, mask(30, range(30)))  # everything solved: the stream is dry
    assert h.stream.live_count(1) == 0 and h.strat.pool.tolist() == a.tolist()
    ctx, b, eb, rb = h.draw(3)  # nothing eligible, no fresh prompt: the whole draw from the pool, oldest first
    assert rb.all() and b.tolist() == a[:3].tolist() and ctx.ledger.prompts_consumed == 0
    assert eb.tolist() == [1, 1, 1]  # drawn where the stream stands after the draw (the dry take moved it on)
    h.decide(ctx, b, eb, rb, mask(3, [0, 2]))  # a[1] fails to re-solve
    assert not h.stream.is_evicted(int(a[1])) and int(a[1]) not in h.strat.pool.tolist()
    assert h.strat.pool.tolist() == [*a[3:].tolist(), a[0], a[2]]
    assert h.strat.pool_epochs.tolist() == [0] * 27 + [1, 1]
    assert int(h.stream.back_from[a[1]]) == 2 and h.stream.live_count(1) == 0 and h.stream.live_count(2) == 1
    ctx, c, ec, rc = h.draw(2)  # credit 0.5 + 1: one back from the pool; the stream streams a[1] again in epoch 2
    assert c.tolist() == [a[1], a[3]] and rc.tolist() == [False, True] and ec.tolist() == [2, 2]
    assert ctx.ledger.prompts_consumed == 1 and ctx.ledger.returned == 1


def test_never_short_of_prompts_while_the_pool_has_any():
    h = Harness(pool=20, share=0.125)
    ctx, a, ea, ra = h.draw(20)
    h.decide(ctx, a, ea, ra, np.ones(20, bool))
    order = a.tolist()
    for i in range(5):  # re-solved every time: they cycle through the pool in FIFO order, 8 a round
        ctx, b, eb, rb = h.draw(8)
        assert rb.all() and b.shape[0] == 8 and ctx.ledger.returned == 8
        assert b.tolist() == [order[(8 * i + j) % 20] for j in range(8)]
        h.decide(ctx, b, eb, rb, np.ones(8, bool))
    ctx, b, eb, rb = h.draw(50)  # more than the pool holds: all of it, each prompt once
    assert sorted(b.tolist()) == sorted(order) and rb.all()
    h.decide(ctx, b, eb, rb, np.zeros(20, bool))  # none solved again: the pool is empty, the stream live again
    assert h.strat.pool.shape[0] == 0 and h.stream.evicted_count == 0
    ctx, c, ec, rc = h.draw(20)
    assert not rc.any() and sorted(c.tolist()) == sorted(order)


def test_returns_follow_the_carried_credit_and_never_exceed_the_share():
    """Over 300 rounds of random sizes: each round returns min(floor(credit + k * share), eligible) prompts, the
    credit keeps the fraction, and in total returns <= ceil(share * drawn); exact to 1 while the supply lasts."""
    share = 0.15
    h = Harness(pool=400, share=share, seed=5)
    rng = np.random.default_rng(11)
    credit, drawn, returned, rounds_met, lost = 0.0, 0, 0, 0, 0
    for r in range(300):
        k = int(rng.integers(1, 25))
        eligible = int(np.count_nonzero(h.strat.pool_epochs < h.stream.epoch))
        want = math.floor(credit + k * share)
        credit = credit + k * share - want
        lost += max(0, want - eligible)
        ctx, ids, eps, ret = h.draw(k)
        assert ids.shape[0] == k
        assert int(ret.sum()) == min(want, eligible) == ctx.ledger.returned
        assert int(ret.sum()) <= math.ceil(k * share)
        assert h.strat.credit == pytest.approx(credit, abs=1e-12)
        rounds_met += want <= eligible
        drawn += k
        returned += int(ret.sum())
        assert returned <= math.ceil(share * drawn)
        # the first 30 rounds solve 40% of their fresh prompts; every returned prompt is solved again (the pool
        # stays large, the stream live)
        solved = ret | ((rng.random(k) < 0.4) & (r < 30))
        h.decide(ctx, ids, eps, ret, solved)
    assert h.stream.live_count() > 0 and returned > 200
    assert rounds_met > 250  # the supply lasted for most rounds, so the share was really exercised
    # every pilot's share is accounted for: returned, dropped for want of eligible prompts, or still in the credit
    assert returned + lost + h.strat.credit == pytest.approx(share * drawn, abs=1e-9)


def test_strategy_state_round_trips_and_continues_identically():
    h = Harness(pool=50, share=0.3, seed=2)
    rng = np.random.default_rng(0)
    for _ in range(12):
        ctx, ids, eps, ret = h.draw(int(rng.integers(3, 12)))
        h.decide(ctx, ids, eps, ret, rng.random(ids.shape[0]) < 0.5)
    state = json.loads(json.dumps({"strat": h.strat.state_dict(), "stream": h.stream.state_dict()}))
    assert state["strat"]["pool"] and 0 < state["strat"]["credit"] < 1 and state["stream"].get("back_prompts")
    g = Harness(pool=50, share=0.3, seed=2)
    g.strat.load_state_dict(state["strat"])
    g.stream.load_state_dict(state["stream"])
    for _ in range(10):
        k = int(rng.integers(3, 12))
        solved = rng.random(k) < 0.5
        outs = []
        for x in (h, g):
            ctx, ids, eps, ret = x.draw(k)
            x.decide(ctx, ids, eps, ret, solved[: ids.shape[0]])
            outs.append((ids.tolist(), eps.tolist(), ret.tolist()))
        assert outs[0] == outs[1]
    assert h.strat.state_dict() == g.strat.state_dict() and h.stream.state_dict() == g.stream.state_dict()


def test_the_strategies_are_registered():
    assert STRATEGIES["eviction"] == {"strict": StrictEviction, "easy_pool": EasyPoolEviction}


# ---- through the allocator -----------------------------------------------------------------------------------------
OBS = ("prompt_id", "round", "call", "stage", "n", "n_correct", "decision", "evicted", "lag", "wave", "rule")
# Digests of 30 steps of the paper's PC (strict eviction) as the allocator computed them BEFORE easy_pool existed:
# engine calls, ledgers, observations, evictions and the final state (less the newer ledger columns and the config).
STRICT_BEFORE = {"binding": "bcc7417615fc8a1a", "unbound_seq": "07f600e8e29a868c"}
STRICT_CASES = {
    "binding": dict(method="pc", train_batch=6, n=8, n_pilot=4, oversample=3.0, max_rounds=6, seed=4),
    "unbound_seq": dict(method="pc", train_batch=6, n=8, n_pilot=4, oversample=2.0, max_rounds=6, seed=9,
                        binding=False, pilot_strategy="sequential", pilot_wave=2, p_solve=0.75),
}


@pytest.mark.parametrize("case", sorted(STRICT_CASES))
def test_strict_eviction_is_bit_for_bit_what_it_was(case):
    cfg = AllocatorConfig(**STRICT_CASES[case])
    assert cfg.eviction_strategy == "strict"
    rates = make_rates(90, 11, p_zero=0.2, p_one=0.4)
    alloc = Allocator(cfg, num_prompts=90)
    eng = FakeEngine(bernoulli_rule(rates, seed=3))
    h = hashlib.sha256()
    evicted = 0
    for _ in range(30):
        out = drive_step(alloc, eng)
        led = out.ledger.to_dict()
        assert led.pop("returned") == 0 and not out.observations.returned.any()
        assert led.pop("screened_by_prior") == 0 and led.pop("prior_rollouts_saved") == 0  # the prior is off
        assert led.pop("prior_continued") == 0 and led.pop("prior_draw_capped") == 0
        pooled = pooled_observations(out.observations)  # the layout these digests were taken in (before v10)
        obs = {k: getattr(pooled, k).tolist() for k in OBS}
        h.update(json.dumps([led, obs, out.evicted_prompts, out.evicted_epochs.tolist()], sort_keys=True).encode())
        evicted += len(out.evicted_prompts)
    for r in eng.records:
        h.update(json.dumps([r.prompt_ids.tolist(), r.n.tolist(), r.stages.tolist(),
                             r.rollout_starts.tolist()]).encode())
    state = alloc.state_dict()
    assert "back_prompts" not in state["stream"] and "eviction" not in state["method"]  # no new state for strict
    state.pop("config")
    h.update(json.dumps(state, sort_keys=True).encode())
    assert evicted > 20  # eviction really happened
    assert h.hexdigest()[:16] == STRICT_BEFORE[case]


def easy_cfg(**kw) -> AllocatorConfig:
    base = dict(eviction_strategy="easy_pool", return_share=0.25, train_batch=4, n=8, n_pilot=4, max_rounds=6,
                max_age=2, seed=3)
    base.update(kw)
    return pc_config(**base)


@pytest.mark.parametrize("extra", [{}, dict(binding=False),
                                   dict(pilot_strategy="sequential", pilot_wave=2, p_solve=0.75),
                                   dict(return_share=0.1, sampling_strategy="survival", band_strategy="adaptive")])
def test_easy_pool_checkpoint_resume_is_bit_identical(extra):
    """Save the allocator's state at step 7, restore it into a fresh allocator and go on: every later step (ledger,
    trained groups, observations with ``returned``, evictions) and the final state equal the uninterrupted run's."""
    cfg = easy_cfg(**extra)
    pool = 60
    rule = bernoulli_rule(make_rates(pool, 4, p_zero=0.1, p_one=0.3) * 0.2 + 0.8, seed=9)  # mostly easy prompts
    whole = Allocator(cfg, pool)
    eng = FakeEngine(rule)
    ref = [drive_step(whole, eng) for _ in range(18)]

    first = Allocator(cfg, pool)
    eng = FakeEngine(rule)
    for _ in range(7):
        drive_step(first, eng)
    state = json.loads(json.dumps(first.state_dict(), allow_nan=False))
    assert state["method"]["eviction"]["pool"], "the checkpoint carries a non-empty easy pool"
    resumed = Allocator.from_state_dict(state)
    assert json.loads(json.dumps(resumed.state_dict())) == state
    eng = FakeEngine(rule)
    later = [drive_step(resumed, eng) for _ in range(11)]
    for a, b in zip(ref[7:], later):
        assert outcome_key(a) == outcome_key(b)
        assert a.observations.returned.tolist() == b.observations.returned.tolist()
    assert json.dumps(whole.state_dict()) == json.dumps(resumed.state_dict())
    returned = sum(o.ledger.returned for o in ref[7:])
    rejoined = sum(int((o.observations.returned & ~o.observations.evicted).sum()) for o in ref[7:])
    assert returned > 0 and rejoined > 0  # returns, re-solves and un-evictions happened after the checkpoint
    assert returned == sum(int(o.observations.returned.sum()) for o in ref[7:])  # one pilot row per return


def test_easy_pool_pc_pilots_from_the_pool_once_every_prompt_is_solved():
    """Every rollout correct: strict PC runs out of prompts after one epoch (steps with no round at all); easy_pool
    PC draws every round's b_g pilots from the easy pool, each re-solved and queued again."""
    pool = 24
    outs = {}
    for strategy in ("strict", "easy_pool"):
        share = {} if strategy == "easy_pool" else {"return_share": AllocatorConfig.return_share}  # strict: unset
        cfg = easy_cfg(eviction_strategy=strategy, max_rounds=3, **share)
        alloc = Allocator(cfg, pool)
        eng = FakeEngine(constant_rule(1.0))
        outs[strategy] = [drive_step(alloc, eng) for _ in range(8)]
    b_g = easy_cfg().sampling_batch
    strict, easy = outs["strict"], outs["easy_pool"]
    assert [o.ledger.rounds for o in strict[3:]] == [0] * 5 and all(o.ledger.shortfall for o in strict)
    for o in easy[2:]:
        pilots = o.observations.stage == Stage.PILOT
        assert o.ledger.rounds == 3 and int(pilots.sum()) == 3 * b_g
        assert o.observations.returned[pilots].all() and o.observations.evicted[pilots].all()
        assert o.ledger.returned == 3 * b_g and o.ledger.prompts_consumed == 0 and o.ledger.evicted == 3 * b_g


# ---- config ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.5, math.nan, math.inf, True, "0.1", None])
def test_return_share_outside_zero_one_is_refused_with_a_fix(value):
    with pytest.raises(ConfigError, match=r"AllocatorConfig\.return_share=.*Fix: "):
        AllocatorConfig(return_share=value)


def test_return_share_bounds_are_inclusive_of_one():
    assert AllocatorConfig(return_share=1.0).return_share == 1.0
    assert AllocatorConfig(return_share=1e-6, eviction_strategy="easy_pool").eviction_strategy == "easy_pool"


def test_unknown_eviction_strategy_and_easy_pool_without_eviction_are_refused_where_the_allocator_is_built():
    with pytest.raises(ConfigError, match=r"eviction_strategy='lenient': unknown eviction strategy.*easy_pool"):
        Allocator(pc_config(eviction_strategy="lenient"), 50)
    with pytest.raises(ConfigError, match=r"eviction_strategy='easy_pool': needs eviction on.*Fix: set evict=true"):
        Allocator(pc_config(eviction_strategy="easy_pool", evict=False), 50)
    Allocator(pc_config(eviction_strategy="strict", evict=False), 50)  # the eviction-off ablation is unchanged


def test_new_fields_leave_existing_config_hashes_and_run_ids_alone():
    """ADDED_FIELDS: hashed only when they differ from their default (hashes from before the fields existed)."""
    before = {"bench": "01cc7eced01f", "paper": "26112b7609d8", "embedded": "c436916856c2"}
    for preset, digest in before.items():
        cfg = resolve(preset, {}, method="pc", seed=0)
        assert cfg.config_hash == digest
        assert "eviction_strategy" not in cfg.behaviour()["allocator"]
    easy = resolve("bench", {"allocator.eviction_strategy": "easy_pool"}, method="pc", seed=0)
    share = resolve("bench", {"allocator.eviction_strategy": "easy_pool", "allocator.return_share": 0.25},
                    method="pc", seed=0)
    assert len({easy.config_hash, share.config_hash, before["bench"]}) == 3
    assert easy.behaviour()["allocator"]["eviction_strategy"] == "easy_pool"
