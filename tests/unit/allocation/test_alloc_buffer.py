"""Replay buffer R: selection strategies are total orders as documented; age limit; entry round trip.

Acceptance criterion 11 of the allocator issue (buffer.py module docstring).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloc_fakes import FakeEngine, drive_step, pc_config

from pc_pipelines.allocation import SELECTION_STRATEGIES, Allocator, BufferEntry, ReplayBuffer, Stage

# The docstring's worked example: A (std .5, born 3, tb .7), B (.5, 4, .9), C (.43, 4, .1), D (.5, 4, .2)
NAMES = ["A", "B", "C", "D"]
STD = np.array([0.5, 0.5, 0.43, 0.5])
BORN = np.array([3, 4, 4, 4])
TB = np.array([0.7, 0.9, 0.1, 0.2])


def strategy(name):
    return SELECTION_STRATEGIES[name]()


def test_max_variance_worked_example():
    order = strategy("max_variance").order(STD, BORN, TB, np.random.default_rng(0))
    assert [NAMES[i] for i in order] == ["D", "B", "A", "C"]


def test_most_recent_worked_example():
    order = strategy("most_recent").order(STD, BORN, TB, np.random.default_rng(0))
    assert [NAMES[i] for i in order] == ["C", "D", "B", "A"]  # born 4 by tie-break, then born 3


def test_random_selection_is_a_seeded_permutation():
    s = strategy("random")
    a = s.order(STD, BORN, TB, np.random.default_rng(5))
    b = s.order(STD, BORN, TB, np.random.default_rng(5))
    assert sorted(a.tolist()) == [0, 1, 2, 3] and a.tolist() == b.tolist()
    seen = {tuple(s.order(STD, BORN, TB, np.random.default_rng(k)).tolist()) for k in range(40)}
    assert len(seen) > 5


def entry(i, std, born, tb, n=4):
    """Hand-built entry through the public dict form (the constructor's cached fields are internal)."""
    return BufferEntry.from_dict(
        {"entry_id": i, "prompt_id": 100 + i, "born": born, "rollout_start": 10 * i, "rewards": [0.0] * n, "std": std, "tiebreak": tb}
    )


def test_buffer_pop_follows_the_order_and_removes():
    buf = ReplayBuffer(max_age=4)
    buf.add([entry(i, float(STD[i]), int(BORN[i]), float(TB[i])) for i in range(4)])
    rng = np.random.default_rng(0)
    first = buf.pop(2, strategy("max_variance"), rng, step=5)
    assert [NAMES[e.entry_id] for e in first] == ["D", "B"]
    assert sorted(NAMES[e.entry_id] for e in buf.entries) == ["A", "C"]
    rest = buf.pop(10, strategy("max_variance"), rng, step=5)
    assert [NAMES[e.entry_id] for e in rest] == ["A", "C"] and len(buf) == 0
    assert buf.pop(3, strategy("max_variance"), rng, step=5) == []


def test_buffer_expire_keeps_only_entries_trainable_next_step():
    buf = ReplayBuffer(max_age=2)
    buf.add([entry(i, 0.5, born, 0.1 * i) for i, born in enumerate([0, 1, 2, 3])])
    expired = buf.expire(step=2)  # next step 3: lag 3 - born <= 2 keeps born >= 1
    assert [e.born for e in expired] == [0]
    assert sorted(e.born for e in buf.entries) == [1, 2, 3]
    assert [e.born for e in buf.expire(step=3)] == [1]
    zero = ReplayBuffer(max_age=0)
    zero.add([entry(0, 0.5, 7, 0.3)])
    assert len(zero.expire(step=7)) == 1 and len(zero) == 0


def test_buffer_entry_json_round_trip():
    e = BufferEntry.from_dict(
        {"entry_id": 3, "prompt_id": 9, "born": 2, "rollout_start": 40, "rewards": [1.0, 0, 0, 1], "std": 0.5, "tiebreak": 0.123456789012345}
    )
    back = BufferEntry.from_dict(json.loads(json.dumps(e.to_dict())))
    assert (back.entry_id, back.prompt_id, back.born, back.rollout_start, back.std, back.tiebreak) == (3, 9, 2, 40, 0.5, e.tiebreak)
    np.testing.assert_array_equal(back.rewards, e.rewards)
    assert back.n == 4


KEYS = {
    "max_variance": lambda s, b, t: (-s, -b, t),
    "most_recent": lambda s, b, t: (-b, t),
}


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(sorted(KEYS)),
    rows=st.lists(
        st.tuples(st.sampled_from([0.0, 0.25, 0.433012701892, 0.5]), st.integers(0, 4), st.floats(0, 1, exclude_max=True)),
        min_size=1, max_size=40, unique_by=lambda r: r[2],
    ),
    shuffle_seed=st.integers(0, 1000),
)
def test_selection_is_a_total_order_independent_of_insertion_order(name, rows, shuffle_seed):
    std = np.array([r[0] for r in rows])
    born = np.array([r[1] for r in rows], np.int64)
    tb = np.array([r[2] for r in rows])
    key = KEYS[name]
    order = strategy(name).order(std, born, tb, np.random.default_rng(0))
    assert sorted(order.tolist()) == list(range(len(rows)))
    keys = [key(std[i], born[i], tb[i]) for i in order]
    assert keys == sorted(keys)
    # insertion order does not matter: a shuffled buffer yields the same entries in the same order
    p = np.random.default_rng(shuffle_seed).permutation(len(rows))
    order2 = strategy(name).order(std[p], born[p], tb[p], np.random.default_rng(1))
    assert [rows[i] for i in order] == [rows[p[i]] for i in order2]


def test_equal_pass_rates_tie_exactly_in_the_allocator_buffer():
    """CallResult rounds the pilot std so that every k-of-n pilot has the identical std (ties are real ties)."""

    def rule(call, prompts, stages, ids, within):
        # pilots of 16: prompt p gets (4 + p % 3) correct, placed at varying offsets
        k = 4 + prompts % 3
        pos = (within + prompts) % np.repeat(call.n, call.n)
        return np.where(stages == Stage.PILOT, pos < k, within < 1).astype(np.float64)

    cfg = pc_config(train_batch=2, n=20, n_pilot=16, oversample=8.0, max_rounds=2, p_upper=1.0)
    alloc = Allocator(cfg, num_prompts=200)
    drive_step(alloc, FakeEngine(rule))
    by_k = {}
    for e in alloc.buffer.entries:
        by_k.setdefault(int(e.rewards.sum()), set()).add(e.std)
    assert set(by_k) == {4, 5, 6}
    for k, stds in by_k.items():
        assert len(stds) == 1
        p = k / 16
        assert abs(next(iter(stds)) - np.sqrt(p * (1 - p))) < 1e-12
