"""Regression tests: focused reproductions of allocator bugs found while writing the allocation test suite.

Each test states the contract it checks. All four failed on the allocator as first reviewed (aliased flat reward
arrays, a phantom round on an exhausted pool, finish() twice, buffered pilot sums recomputed on load) and pass
once fixed. They are deliberately minimal: one allocator, a scripted engine, one assertion that matters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloc_fakes import FakeEngine, constant_rule, drive_step

from pc_pipelines.allocation import Allocator, AllocatorConfig, AllocatorError, Stage
from pc_pipelines.run.step_loop import allocator_step


def test_engine_reusing_its_flat_reward_array_does_not_corrupt_buffered_pilots():
    """Contract (types.py, docs/DESIGN.md 3): a trained group's rewards are the rewards the engine returned for its ids.

    An engine that hands back the same preallocated float64 array every call (a common pooling pattern) must not
    change rewards the allocator already observed. The bug: CallResult kept ``rewards.astype(float64, copy=False)``
    (a view of the caller's array) and BufferEntry.rewards / TrainedGroup.reward_parts were slices of it.
    """
    cfg = AllocatorConfig(method="pc", train_batch=2, n=4, n_pilot=2, oversample=1.0, seed=0)
    alloc = Allocator(cfg, num_prompts=20)
    pool = np.zeros(64)  # the engine's reusable output buffer
    returned = {}

    def engine(call):
        out = pool[: call.total_rollouts]
        k = 0
        for req in call:
            vals = [1.0, 0.0] if req.stage == Stage.PILOT else [1.0] * req.n  # pilots in band, commits all correct
            out[k : k + req.n] = vals
            returned.update(zip(req.rollout_ids.tolist(), vals))
            k += req.n
        return out

    out = allocator_step(alloc, engine)  # round 1 pilots, round 2 commits (overwrites `pool`) + more pilots
    assert out.groups
    for g in out.groups:
        assert g.rewards.tolist() == [returned[i] for i in g.rollout_ids.tolist()]


def test_rounds_equal_engine_calls_when_the_pool_is_exhausted():
    """Contract (StepLedger.rounds, docs/DESIGN.md 3): with binding on a round is exactly one engine call.

    The bug: when eviction had emptied the pool, PC/DAPO/GRPO called ``ctx.begin_round()`` before discovering that
    the stream had nothing left and stopped without a call, so the ledger counted a round that generated nothing.
    """
    cfg = AllocatorConfig(method="pc", train_batch=2, n=4, n_pilot=2, oversample=1.0, seed=0)
    alloc = Allocator(cfg, num_prompts=4)
    engine = FakeEngine(constant_rule(1.0))  # every pilot solved: the whole pool is evicted during step 0
    ledgers = [drive_step(alloc, engine).ledger for _ in range(3)]
    assert alloc.stream.live_count() == 0
    assert [(led.rounds, led.engine_calls) for led in ledgers] == [(led.engine_calls, led.engine_calls) for led in ledgers]


def test_finish_twice_does_not_advance_the_step_twice():
    """Contract (StepSession): one session is one step. The bug: a second finish() on the same session re-ran
    the buffer expiry and advanced ``allocator.step`` again; it must raise AllocatorError instead."""
    alloc = Allocator(AllocatorConfig(method="grpo", train_batch=2, n=2), num_prompts=4)
    session = alloc.begin_step()
    while (call := session.next_call()) is not None:
        session.observe([np.ones(k) for k in call.n])
    session.finish()
    assert alloc.step == 1
    with pytest.raises(AllocatorError):
        session.finish()
    assert alloc.step == 1


def test_checkpoint_keeps_buffered_pilot_statistics_bit_for_bit():
    """Contract (allocator.py docstring, criterion 7): state round-trips and the run continues identically.

    The bug: admit() cached BufferEntry.reward_sum / reward_sq from CallResult (np.add.reduceat: sequential sums),
    but BufferEntry.from_dict recomputed them with rewards.sum() / np.dot (pairwise / BLAS order). With
    partial-credit rewards the two differ in the last bit, so the restored allocator's ledger.mean_reward_std
    differed from the original's.
    """
    pilot = np.array([0.6, 0.3, 0.0, 0.0, 0.8, 0.9, 0.6, 0.7])  # p_hat 0.4875, in band; sum of squares differs
    assert np.add.reduceat(pilot * pilot, [0])[0] != float(np.dot(pilot, pilot))

    def engine(call):
        return [pilot.copy() if s == Stage.PILOT else np.full(k, 0.5) for s, k in zip(call.stages, call.n)]

    cfg = AllocatorConfig(method="pc", train_batch=2, n=12, n_pilot=8, oversample=2.0, seed=0)
    original = Allocator(cfg, num_prompts=50)
    allocator_step(original, engine)
    assert len(original.buffer) > 0
    restored = Allocator.from_state_dict(json.loads(json.dumps(original.state_dict())))
    a, b = allocator_step(original, engine).ledger, allocator_step(restored, engine).ledger
    assert a.mean_reward_std == b.mean_reward_std
