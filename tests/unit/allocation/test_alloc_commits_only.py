"""PC with ``train_pilots=False`` (issue 52's commits-only ablation): the pilots screen, only the commits train.

Checked against the recording fake engine: each trained group is exactly one commit request's rollouts, the ledger's
trained rollouts and group statistics count the commits alone, and the same seed with pilots trained samples the very
same rollouts (the switch changes what trains, never what is sampled or kept).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # alloc_fakes.py sits next to this file

from alloc_fakes import FakeEngine, bernoulli_rule, drive_step, pc_config

from pc_pipelines.allocation import Allocator, Stage
from pc_pipelines.errors import ConfigError


def _run(cfg, steps=6, pool=200, seed=3):
    rates = np.random.default_rng(seed).uniform(0, 1, pool)
    alloc = Allocator(cfg, num_prompts=pool)
    engine = FakeEngine(bernoulli_rule(rates, seed=seed))
    return [drive_step(alloc, engine) for _ in range(steps)], engine


@pytest.mark.parametrize("pilots", [dict(pilot_strategy="single"), dict(pilot_strategy="sequential", pilot_wave=2)])
def test_commits_only_groups_are_one_commit_request_each(pilots):
    cfg = pc_config(train_pilots=False, **pilots)
    outs, engine = _run(cfg)
    trained = 0
    for out in outs:
        for g in out.groups:
            assert (g.n_pilot, g.n_commit) == (0, cfg.commit_n)
            ids = g.rollout_ids
            assert ids.shape[0] == cfg.commit_n
            found, call_no, stage, prompt, reward = engine.lookup(ids)
            assert found.all() and (prompt == g.prompt_id).all()
            assert (stage == Stage.COMMIT).all(), "a pilot rollout was trained"
            assert np.unique(call_no).shape[0] == 1
            np.testing.assert_array_equal(g.rewards, reward)
            trained += ids.shape[0]
        led = out.ledger
        assert led.trained_rollouts == sum(g.n_commit for g in out.groups)
        if out.groups:
            std = np.mean([np.std(g.rewards) for g in out.groups])
            assert led.mean_reward_std == pytest.approx(std)
    assert trained > 0


def test_commits_only_samples_exactly_what_the_paper_samples():
    paper, _ = _run(pc_config())
    ablation, _ = _run(pc_config(train_pilots=False))
    for a, b in zip(paper, ablation):
        assert a.ledger.sampled_rollouts == b.ledger.sampled_rollouts
        assert [g.prompt_id for g in a.groups] == [g.prompt_id for g in b.groups]
        assert [g.rollout_ids[-g.n_commit:].tolist() for g in a.groups] == [g.rollout_ids.tolist() for g in b.groups]
        assert a.ledger.trained_rollouts == b.ledger.trained_rollouts + sum(g.n_pilot for g in a.groups)


@pytest.mark.parametrize("kw, field", [(dict(n=5, n_pilot=4), "n"),
                                       (dict(commit_strategy="variance", commit_min=1, commit_mean=4), "commit_min")])
def test_commits_only_refuses_a_commit_of_one(kw, field):
    with pytest.raises(ConfigError) as err:
        pc_config(train_pilots=False, **kw)
    msg = str(err.value)
    assert "train_pilots" in msg and field in msg and "Fix:" in msg and "at least 2 rollouts" in msg
