"""A training run killed with SIGKILL mid-step and resumed reproduces the uninterrupted run exactly: the same
parameters, allocator state, ledger rows and evaluations (real processes through the CLI)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = 7
SETTINGS = [
    "allocator.train_batch=8", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
    "allocator.commit_mean=6", "task.num_prompts=200",
    "training.ppo_minibatch=4", "training.checkpoint_every=2", "training.eval_every=3", "training.eval_samples=1",
]
LEDGER = ("step", "rounds", "engine_calls", "pilot_rollouts", "commit_rollouts", "trained_rollouts", "kept",
          "skipped_easy", "deferred_hard", "evicted", "buffer_size", "buffer_expired", "mean_reward_std", "loss",
          "mean_reward")


def train_cmd(out: Path, name: str, policy: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "pc_pipelines.cli", "train", "--method", "pc", "--steps", str(STEPS), "--out",
           str(out), "--run-name", name, "--policy", str(policy), "--json", "--quiet", "--seed", "3"]
    for s in SETTINGS:
        cmd += ["--set", s]
    return cmd + list(extra)


def final_state(out: Path, name: str) -> dict:
    ckpt = out / name / "checkpoints" / f"step-{STEPS - 1:08d}"
    store = Store(out / "pc.duckdb")
    cols = ", ".join(LEDGER)
    return {
        "weights": (ckpt / "policy" / "model.safetensors").read_bytes(),
        "allocator": json.loads((ckpt / "allocator.json").read_text()),
        "steps": store.query(f"SELECT {cols} FROM steps WHERE run_id = ? ORDER BY step", [name]),
        "evals": store.query("SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = ? ORDER BY ALL", [name]),
        "observations": store.query(
            "SELECT step, round, prompt_id, stage, n_correct, decision FROM prompt_observations WHERE run_id = ? "
            "ORDER BY ALL", [name]),
    }


def test_sigkill_mid_step_then_resume_equals_uninterrupted(base_policy, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    full = subprocess.run(train_cmd(tmp_path / "a", "run", base_policy), capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert full.returncode == 0, full.stderr[-2000:]
    assert len(full.stdout.splitlines()) == STEPS

    # Kill the second attempt at a random moment after its 4th step (checkpoints exist at steps 1 and 3).
    proc = subprocess.Popen(train_cmd(tmp_path / "b", "run", base_policy), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    seen = 0
    while seen < 4:
        line = proc.stdout.readline()
        assert line, "the run ended before it could be killed"
        seen += 1
    time.sleep(random.Random(0).uniform(0.05, 0.6))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    ckpts = sorted(p.name for p in (tmp_path / "b" / "run" / "checkpoints").iterdir() if p.name.startswith("step-"))
    assert ckpts and ckpts[-1] < f"step-{STEPS:08d}"  # it really died before the end

    # Without --resume the run is refused (nothing is overwritten by accident) ...
    refused = subprocess.run(train_cmd(tmp_path / "b", "run", base_policy), capture_output=True, text=True, env=env,
                             check=False)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    # ... with it, the run continues from its last checkpoint to the end.
    resumed = subprocess.run(train_cmd(tmp_path / "b", "run", base_policy, "--resume"), capture_output=True, text=True,
                             env=env, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    first_resumed = json.loads(resumed.stdout.splitlines()[0])["step"]
    assert 2 <= first_resumed <= 6

    a, b = final_state(tmp_path / "a", "run"), final_state(tmp_path / "b", "run")
    assert [r["step"] for r in b["steps"]] == list(range(1, STEPS + 1))
    assert a["steps"] == b["steps"]
    assert a["evals"] == b["evals"]
    assert a["observations"] == b["observations"]
    assert a["allocator"] == b["allocator"]
    assert a["weights"] == b["weights"]
