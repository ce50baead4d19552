"""The fault suite's `pilot-commit` driver (tests/integration/faults): the CLI as a subprocess (``pilot_cli``), a small
training run and a small simulated one, and what the tests read back (steps, the run's row and rows, stderr without
tracebacks or progress bars, the sha256 of a folder's files)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pilot_cli import MODULE, run_cli

from pc_pipelines.run.checkpoints import verify_checkpoint
from pc_pipelines.store import Store

EXE = list(MODULE)
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
TRAIN = ["--set", "allocator.train_batch=8", "--set", "allocator.n=8", "--set", "allocator.n_pilot=2",
         "--set", "allocator.pilot_wave=1", "--set", "allocator.commit_mean=6", "--set", "task.num_prompts=100",
         "--set", "training.ppo_minibatch=4", "--set", "training.eval_every=2", "--set", "training.eval_samples=1",
         "--set", "training.checkpoint_every=1", "--set", "training.keep_checkpoints=10",
         "--set", "task.heldout_per_length=5"]
"""A small PC run; its held-out evaluations read 5 prompts a digit length (at the default 100 they were a quarter of a
4-step run's time, and no fault case reads their accuracy)."""
SIM = ["--method", "pc", "--prompts", "3000", "--train-batch", "16", "--n", "8"]


def cli(*args, timeout=600, check_rc=None, stdin_text=None, env=None):
    return run_cli(*args, exe=EXE, timeout=timeout, check_rc=check_rc, stdin_text=stdin_text, env=env or ENV)


def train_recipe(name: str, policy: Path, steps: int, *extra: str) -> list[str]:
    """``train``'s arguments but ``--out``: what shapes the run (the key of a shared run, tests/support/shared_runs.py)."""
    return ["train", "--method", "pc", "--steps", str(steps), "--run-name", name, "--policy", str(policy), "--json",
            "--quiet", "--seed", "3", *TRAIN, *extra]


def train(out: Path, name: str, policy: Path, steps: int, *extra: str, **kw):
    return cli(*train_recipe(name, policy, steps, *extra), "--out", str(out), **kw)


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


def tree_digest(folder: Path, *, symlinks: bool = True) -> dict[str, str]:
    """sha256 of every file under ``folder``, by its path below it; ``symlinks=False``: links left out."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and (symlinks or not p.is_symlink())}


def stored_rows(store: Path, run: str = "t") -> dict[str, list[dict]]:
    """Every row of ``run`` in ``steps`` and ``eval_results``: what a refused command must leave as it was."""
    s = Store(store)
    return {t: s.query(f"SELECT * FROM {t} WHERE run_id = ? ORDER BY ALL", [run]) for t in ("steps", "eval_results")}


def simulate(store: Path, name: str, steps: int, *extra: str, **kw):
    """A small simulated PC run into ``store``, its steps printed as JSON lines."""
    return cli("simulate", "--store", str(store), "--run-name", name, "--steps", str(steps), "--json", *SIM, *extra,
               **kw)
