"""The tiny policy learns: a few GRPO steps through the real loop change the parameters and raise the mean reward
on a fixed prompt set (like TRL's test_train), and the run's rows land in the store."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from pc_pipelines.config import resolve
from pc_pipelines.rewards import MathGrader
from pc_pipelines.rollout import RolloutRequest, SamplingParams
from pc_pipelines.rollout.transformers_engine import TransformersEngine
from pc_pipelines.run import prepare_run, run_segment
from pc_pipelines.store import Store
from pc_pipelines.training.base_policy import load_policy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = 6


def mean_reward(policy_dir, task, samples=64) -> float:
    model, tok = load_policy(policy_dir)
    engine = TransformersEngine(model, tok)
    outs = engine.generate([RolloutRequest(p, samples) for p in task.prompts], SamplingParams(1.0, 1.0, 12, seed=99))
    rolls = [r for o in outs for r in o.rollouts]
    golds = [g for g in task.golds for _ in range(samples)]
    with MathGrader() as grader:
        return float(grader.rewards([r.text for r in rolls], golds, [r.truncated for r in rolls]).mean())


def test_grpo_steps_change_parameters_and_raise_reward(base_policy, policy_cache, tmp_path):
    # A fixed set of 16 long (4-6 digit) prompts, all trained every step: the reward on them must rise.
    cfg = resolve(
        "embedded",
        {
            "task.num_prompts": 16,
            "task.min_digits": 4,
            "allocator.train_batch": 16,
            "allocator.n": 16,
            "training.ppo_minibatch": 4,
            "training.lr": 3e-4,
            "training.warmup_steps": 0,
            "training.eval_every": 100,
            "training.eval_samples": 1,
        },
        method="grpo",
        seed=0,
    )
    run = prepare_run(cfg, tmp_path / "runs", run_name="learn", cache_dir=policy_cache)
    assert run.policy_path == base_policy  # the same cached warm start, built once per recipe
    store = Store(tmp_path / "pc.duckdb")
    before = mean_reward(base_policy, run.task)
    res = run_segment(run, store, STEPS)
    after = mean_reward(res.checkpoint / "policy", run.task)

    w0 = load_file(str(base_policy / "model.safetensors"))
    w1 = load_file(str(res.checkpoint / "policy" / "model.safetensors"))
    changed = sum(not torch.equal(w0[k], w1[k]) for k in w0)
    assert changed == len(w0)  # every tensor moved
    assert after > before + 0.04, (before, after)  # measured: 0.476 -> 0.571

    rows = store.query("SELECT step, trained_prompts, sampled_rollouts, loss, mean_reward FROM steps WHERE run_id = 'learn' ORDER BY step")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["trained_prompts"] == 16 and r["sampled_rollouts"] == 256 for r in rows)
    assert all(r["loss"] is not None and np.isfinite(r["loss"]) for r in rows)
    assert res.cumulative_rollouts == STEPS * 256
    assert store.query("SELECT count(*) AS n FROM eval_results WHERE run_id = 'learn' AND step = 0")[0]["n"] == 6
