"""The endless prompt stream and common random numbers across methods.

Acceptance criteria 6 and 12 of the allocator issue (docs/DESIGN.md section 3 "Prompt stream"; stream.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloc_fakes import FakeEngine, bernoulli_rule, drive_step, make_rates

from pc_pipelines.allocation import Allocator, AllocatorConfig, PromptStream, Stage


def perm(seed: int, epoch: int, m: int) -> np.ndarray:
    """The documented epoch permutation (stream.py module docstring)."""
    return np.random.default_rng([seed, epoch]).permutation(m)


# ---- 12. the stream ---------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 60),
    seed=st.integers(0, 2**20),
    k=st.integers(1, 4),
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=40),
)
def test_batches_spanning_epochs_drop_nothing(m, seed, k, sizes):
    s = PromptStream(m, seed)
    total = k * m
    ids, epochs = [], []
    i = 0
    while sum(x.shape[0] for x in ids) < total:
        want = min(sizes[i % len(sizes)], total - sum(x.shape[0] for x in ids))
        got, ep = s.take(want)
        assert got.shape[0] == want and ep.shape[0] == want  # nothing evicted: always a full batch
        ids.append(got)
        epochs.append(ep)
        i += 1
    ids, epochs = np.concatenate(ids), np.concatenate(epochs)
    expected = np.concatenate([perm(seed, e, m) for e in range(k)])
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_array_equal(epochs, np.repeat(np.arange(k), m))
    assert np.bincount(ids, minlength=m).tolist() == [k] * m
    assert (s.epoch, s.pos) == (k - 1, m)


def test_docstring_worked_example_straddles_epochs():
    m, seed = 5, 123
    p0, p1 = perm(seed, 0, m), perm(seed, 1, m)
    s = PromptStream(m, seed)
    a, ea = s.take(3)
    assert a.tolist() == p0[:3].tolist() and ea.tolist() == [0, 0, 0] and (s.epoch, s.pos) == (0, 3)
    b, eb = s.take(3)
    assert b.tolist() == [*p0[3:].tolist(), p1[0]] and eb.tolist() == [0, 0, 1] and (s.epoch, s.pos) == (1, 1)


def test_permutation_differs_per_epoch_and_seed():
    m = 50
    s = PromptStream(m, 7)
    perms = [s.permutation(e).copy() for e in range(6)]
    for e, p in enumerate(perms):
        assert sorted(p.tolist()) == list(range(m))
        np.testing.assert_array_equal(p, perm(7, e, m))
    for a in range(6):
        for b in range(a + 1, 6):
            assert not np.array_equal(perms[a], perms[b])
    assert not np.array_equal(PromptStream(m, 8).permutation(0), perms[0])


def test_eviction_applies_from_the_next_epoch():
    m, seed = 12, 3
    s = PromptStream(m, seed)
    first, ep = s.take(4)
    victims = first[:2]
    s.evict(victims, ep[:2])  # decided in epoch 0: still in epoch 0 (already drawn), gone from epoch 1
    rest, _ = s.take(m - 4)
    np.testing.assert_array_equal(np.concatenate([first, rest]), perm(seed, 0, m))
    nxt, ep1 = s.take(m - 2)
    expected = [p for p in perm(seed, 1, m).tolist() if p not in victims.tolist()]
    assert nxt.tolist() == expected and set(ep1.tolist()) == {1}
    assert s.live_count() == m - 2 and s.evicted_count == 2
    assert all(s.is_evicted(int(v)) for v in victims)


def test_late_eviction_skips_the_prompt_in_the_epoch_already_running():
    """Decision lands after the stream crossed into e + 1: the prompt is skipped when its turn comes."""
    m, seed = 10, 11
    s = PromptStream(m, seed)
    p1 = perm(seed, 1, m)
    s.take(m + 1)  # all of epoch 0 and the first prompt of epoch 1
    assert (s.epoch, s.pos) == (1, 1)
    late = int(p1[-1])  # drawn in epoch 0; its epoch-1 turn is still ahead
    s.evict(np.array([late]), np.array([0]))
    rest, eps = s.take(m - 2)
    assert rest.tolist() == p1[1:-1].tolist() and set(eps.tolist()) == {1}
    nxt, eps2 = s.take(m)
    assert late not in nxt.tolist() and set(eps2.tolist()) == {2, 3}
    assert nxt.tolist()[: m - 1] == [p for p in perm(seed, 2, m).tolist() if p != late]


def test_whole_pool_evicted_returns_empty_without_hanging():
    s = PromptStream(6, 0)
    ids, ep = s.take(6)
    s.evict(ids, ep)
    got, _ = s.take(4)
    assert got.shape[0] == 0
    assert s.live_count() == 0
    got, _ = s.take(10)  # and again
    assert got.shape[0] == 0


@settings(max_examples=50, deadline=None)
@given(
    m=st.integers(2, 80),
    seed=st.integers(0, 2**20),
    takes=st.lists(st.integers(0, 30), min_size=1, max_size=12),
    evict_every=st.integers(2, 7),
    more=st.lists(st.integers(1, 30), min_size=1, max_size=10),
)
def test_stream_state_round_trip(m, seed, takes, evict_every, more):
    s = PromptStream(m, seed)
    for k in takes:
        ids, ep = s.take(k)
        s.evict(ids[::evict_every], ep[::evict_every])
    state = json.loads(json.dumps(s.state_dict()))
    r = PromptStream(m, seed)
    r.load_state_dict(state)
    assert (r.epoch, r.pos, r.evicted_count) == (s.epoch, s.pos, s.evicted_count)
    np.testing.assert_array_equal(r.evicted_from, s.evicted_from)
    for k in more:
        a, ea = s.take(k)
        b, eb = r.take(k)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ea, eb)


# ---- 6. same seed, same stream for every method ------------------------------------------------------------------
def fresh_prompts(engine: FakeEngine) -> list[int]:
    """Fresh prompts in call order: FULL requests (GRPO/DAPO) or PILOT requests (PC)."""
    out = []
    for r in engine.records:
        fresh = (r.stages == Stage.FULL) | (r.stages == Stage.PILOT)
        out.extend(r.prompt_ids[fresh].tolist())
    return out


def stream_of(method, seed, m, rates, steps, evict=False, **kw):
    extra = dict(n_pilot=2, evict=evict) if method == "pc" else {}
    cfg = AllocatorConfig(method=method, seed=seed, n=6, **kw, **extra)
    alloc = Allocator(cfg, num_prompts=m)
    engine = FakeEngine(bernoulli_rule(rates, seed=seed + 99))
    for _ in range(steps):
        drive_step(alloc, engine)
    return fresh_prompts(engine)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    m=st.integers(20, 200),
    b_t=st.integers(1, 12),
    oversample=st.sampled_from([1.0, 2.0, 3.0]),
    max_rounds=st.integers(2, 5),
    steps=st.integers(1, 8),
    rates_seed=st.integers(0, 1000),
)
def test_same_seed_gives_every_method_the_same_stream(seed, m, b_t, oversample, max_rounds, steps, rates_seed):
    rates = make_rates(m, rates_seed, 0.2, 0.2)
    kw = dict(train_batch=b_t, oversample=oversample, max_rounds=max_rounds)
    seqs = {meth: stream_of(meth, seed, m, rates, steps, **kw) for meth in ("grpo", "dapo", "pc")}
    common = min(len(s) for s in seqs.values())
    assert common >= b_t
    assert seqs["grpo"][:common] == seqs["dapo"][:common] == seqs["pc"][:common]
    longest = max(seqs.values(), key=len)
    epochs = len(longest) // m + 1
    documented = np.concatenate([perm(seed, e, m) for e in range(epochs + 1)]).tolist()
    assert longest == documented[: len(longest)]

    # with PC eviction on, the first epoch (before any eviction applies) is still the common stream
    pc_evict = stream_of("pc", seed, m, rates, steps, evict=True, **kw)
    first = min(m, len(pc_evict), len(seqs["grpo"]))
    assert pc_evict[:first] == seqs["grpo"][:first]


@pytest.mark.parametrize("method", ["grpo", "dapo", "pc"])
def test_different_seed_gives_a_different_stream(method):
    m = 100
    rates = np.full(m, 0.5)
    kw = dict(train_batch=8, oversample=2.0, max_rounds=3)
    a = stream_of(method, 1, m, rates, 4, **kw)
    b = stream_of(method, 2, m, rates, 4, **kw)
    c = stream_of(method, 1, m, rates, 4, **kw)
    common = min(len(a), len(b))
    assert common >= 8
    assert a[:common] != b[:common]
    assert a == c
