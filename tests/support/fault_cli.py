"""The fault suite's `pilot-commit` driver (tests/integration/faults): the CLI as a subprocess, a small training run,
and what the tests read back (steps, the run's row, stderr without tracebacks or progress bars)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from pc_pipelines.run.checkpoints import verify_checkpoint
from pc_pipelines.store import Store

EXE = [sys.executable, "-m", "pc_pipelines.cli"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
TRAIN = ["--set", "allocator.train_batch=8", "--set", "allocator.n=8", "--set", "allocator.n_pilot=2",
         "--set", "allocator.pilot_wave=1", "--set", "allocator.commit_mean=6", "--set", "task.num_prompts=100",
         "--set", "training.ppo_minibatch=4", "--set", "training.eval_every=2", "--set", "training.eval_samples=1",
         "--set", "training.checkpoint_every=1", "--set", "training.keep_checkpoints=10"]


def cli(*args, timeout=600, check_rc=None, stdin_text=None, env=None):
    r = subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=timeout, env=env or ENV, check=False,
                       input=stdin_text)
    if check_rc is not None:
        assert r.returncode == check_rc, (r.returncode, r.stderr[-3000:])
    return r


def train(out: Path, name: str, policy: Path, steps: int, *extra: str, **kw):
    return cli("train", "--method", "pc", "--steps", str(steps), "--out", str(out), "--run-name", name, "--policy",
               str(policy), "--json", "--quiet", "--seed", "3", *TRAIN, *extra, **kw)


def steps_of(store: Path, run: str) -> list[int]:
    return [r["step"] for r in Store(store).query("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [run])]


def run_row(store: Path, run: str) -> dict | None:
    return Store(store).get_run(run)


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text[-3000:]


def messages(err: str) -> list[str]:
    """stderr without transformers' own progress bars ("Loading weights", "Writing model shards": they ignore
    --quiet)."""
    return [ln for ln in err.splitlines() if ln.strip() and "%|" not in ln]


def rewrite_manifest(ck: Path, rel: str) -> None:
    """Give ``rel`` its new size and sha256 in the checkpoint's manifest: the checkpoint verifies as intact."""
    manifest = json.loads((ck / "manifest.json").read_text())
    data = (ck / rel).read_bytes()
    manifest["files"][rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ck / "manifest.json").write_text(json.dumps(manifest, indent=1))
    assert verify_checkpoint(ck) is None
