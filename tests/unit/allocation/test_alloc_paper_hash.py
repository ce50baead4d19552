"""The paper's allocator, bit for bit: outcomes of several configs over 25 steps hash to the values they had before
the history prior (``screen_strategy``) existed, so its default (``none``) changes nothing a paper run produces.

The hash covers every step's trained groups (prompt, rollout spans, rewards, lag), the observation columns, the
ledger fields and the evictions / expiries / replacements, and the allocator's state after the last step (its
config section aside: a checkpoint names every setting, including ones added later). Rewards are a pure function
of the rollout id (``alloc_fakes.bernoulli_rule``), so the hashes depend on nothing but the allocator.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from pc_pipelines.allocation import Allocator, AllocatorConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alloc_fakes import FakeEngine, bernoulli_rule, pooled_observations, run_steps

STEPS = 25
POOL = 300

OBS_FIELDS = ("prompt_id", "round", "call", "stage", "n", "n_correct", "decision", "evicted", "lag", "wave", "rule",
              "returned")
LEDGER_FIELDS = ("step", "epoch", "rounds", "engine_calls", "pilot_rollouts", "commit_rollouts", "full_rollouts",
                 "trained_rollouts", "trained_prompts", "prompts_consumed", "kept", "skipped_easy", "deferred_hard",
                 "surplus", "evicted", "buffer_adds", "buffer_pops", "buffer_expired", "buffer_replaced",
                 "buffer_size", "shortfall", "band_lower", "band_upper", "widened", "early_decided",
                 "pilot_rollouts_saved", "survival", "returned", "mean_reward_std", "informative_share", "mean_lag",
                 "max_lag", "lags")

CONFIGS = {
    "paper_pc": dict(method="pc", train_batch=8, n=16, seed=3),
    "paper_pc_unbound": dict(method="pc", train_batch=8, n=16, seed=4, binding=False),
    "bench_pc": dict(method="pc", train_batch=16, n=64, n_pilot=16, band_strategy="adaptive",
                     sampling_strategy="survival", pilot_strategy="sequential", pilot_wave=4,
                     commit_strategy="variance", commit_mean=16, seed=5),
    "easy_pool_pc": dict(method="pc", train_batch=8, n=16, eviction_strategy="easy_pool", seed=6),
    "grpo": dict(method="grpo", train_batch=16, n=16, seed=7),
    "dapo": dict(method="dapo", train_batch=16, n=16, seed=8),
}

# Computed on the allocator before the history prior was added (commit 25c2060).
EXPECTED = {
    "bench_pc": "5fcdba709175ebc57caf6b729864dbb1852cd91b16fd3a2a76cfbbe2bf70b65a",
    "dapo": "e49fd907830141a3a3201014eb8203ac11d710a93ee0b4ab3ab83bb365f2a38f",
    "easy_pool_pc": "f3413e2ffdc68250a748724408858722ac7e80478ec525f99e16f4ab79f28c79",
    "grpo": "e1a4ecc7bf7d696f6c2a0fb8ee347ba4b3da3a0d4cdfd08be38bde184a90b42f",
    "paper_pc": "e41aa72460441ce8b27ee89521e03813f993befe160412d0ac00a65dd91456b1",
    "paper_pc_unbound": "94b7ecbec6e6ca1c6096a9f19515ae5c4eb22c5a867f635c46e103234e2cd6de",
}


def outcome_hash(cfg: dict) -> str:
    rates = np.random.default_rng(11).beta(0.6, 0.6, POOL)
    alloc = Allocator(AllocatorConfig(**cfg), POOL)
    engine = FakeEngine(bernoulli_rule(rates, seed=cfg["seed"]))
    h = hashlib.sha256()
    for out in run_steps(alloc, engine, STEPS):
        for g in out.groups:
            h.update(json.dumps([g.prompt_id, g.spans, g.born, g.lag, g.n_pilot, g.n_commit]).encode())
            h.update(g.rewards.tobytes())
        for f in OBS_FIELDS:
            h.update(np.ascontiguousarray(getattr(pooled_observations(out.observations), f)).tobytes())
        led = out.ledger.to_dict()
        h.update(json.dumps([led[f] for f in LEDGER_FIELDS]).encode())
        h.update(json.dumps([out.expired, out.evicted_prompts, out.evicted_epochs.tolist(), out.replaced]).encode())
    state = alloc.state_dict()
    state.pop("config")
    h.update(json.dumps(state, sort_keys=True).encode())
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_paper_allocator_is_bit_for_bit_unchanged(name):
    assert outcome_hash(CONFIGS[name]) == EXPECTED[name]
