"""Behaviour fingerprint: one sha256 per allocator configuration over everything a run stores, so a refactor that
must change no behaviour can show it changed none (the same hashes before and after).

Run: ``.venv/bin/python reliability/behaviour_hashes.py`` (about two minutes on one core; ``--sim-only`` skips the
embedded engine). Two kinds of runs, each in a fresh temporary store:

* the simulator's recording path (``record_simulation``, what ``pilot-commit simulate --store`` runs): every
  configuration in :data:`SIM_CONFIGS` (PC with its strategies, the history prior, GRPO, DAPO, several budgets)
  for :data:`SIM_STEPS` steps;
* the embedded engine (``pilot-commit train`` in this process, the shipped warm start, a tiny task), each
  configuration in :data:`TRAIN_CONFIGS` for :data:`TRAIN_STEPS` steps, with its checkpoints.

A configuration's hash covers its rows of ``steps``, ``prompt_observations`` (the decisions), ``buffer_state``,
``evictions`` and ``eval_results`` (ordered, without wall-clock columns: ``time_*_s``, ``written_at``,
``created_at``) and, for training runs, each checkpoint's deterministic files (``allocator.json``, the policy's
safetensors, ``sidecar.parquet``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

SIM_STEPS = 25
TRAIN_STEPS = 3

_PC = {"method": "pc", "n": 16, "n_pilot": 4}
_PRIOR = {"screen_strategy": "posterior", "screen_discount": 1.0, "screen_min_evidence": 2, "screen_explore": 0,
          "screen_prior_strength": 0.5, "screen_threshold": 0.3}
SIM_CONFIGS: dict[str, dict] = {
    "grpo-n16": {"method": "grpo", "n": 16},
    "grpo-n8": {"method": "grpo", "n": 8},
    "grpo-n32-b32": {"method": "grpo", "n": 32, "train_batch": 32},
    "dapo-n16": {"method": "dapo", "n": 16},
    "dapo-n8": {"method": "dapo", "n": 8},
    "dapo-n32-b32": {"method": "dapo", "n": 32, "train_batch": 32},
    "pc-strict": {**_PC, "eviction_strategy": "strict"},
    "pc-no-evict": {**_PC, "evict": False},
    "pc-easy-pool": {**_PC, "eviction_strategy": "easy_pool", "return_share": 0.25},
    "pc-adaptive-band": {**_PC, "band_strategy": "adaptive"},
    "pc-sequential": {**_PC, "pilot_strategy": "sequential", "pilot_wave": 2},
    "pc-survival": {**_PC, "sampling_strategy": "survival"},
    "pc-variance-commit": {**_PC, "commit_strategy": "variance"},
    "pc-n8-2-6": {"method": "pc", "n": 8, "n_pilot": 2},
    "pc-n32-8-24": {"method": "pc", "n": 32, "n_pilot": 8},
    "pc-n64-16-48-b32": {"method": "pc", "n": 64, "n_pilot": 16, "train_batch": 32},
    "pc-posterior": {**_PC, **_PRIOR},
    "pc-posterior-sequential": {**_PC, **_PRIOR, "pilot_strategy": "sequential", "pilot_wave": 2,
                                "screen_early_wave": True},
    "grpo-posterior": {"method": "grpo", "n": 16, **_PRIOR},
    "dapo-posterior": {"method": "dapo", "n": 16, **_PRIOR},
    "pc-easy-pool-posterior": {**_PC, **_PRIOR, "eviction_strategy": "easy_pool", "return_share": 0.25},
    "pc-seed7": {**_PC, "seed": 7},
}
SIM_SETTINGS = {"allocator.train_batch": 16, "sim.num_prompts": 600, "sim.eval_prompts": 200,
                "training.eval_every": 5}

TRAIN_SETTINGS = ["allocator.train_batch=8", "allocator.n=8", "allocator.pilot_wave=1", "allocator.commit_mean=6",
                  "task.num_prompts=100", "training.ppo_minibatch=4", "training.eval_every=2",
                  "training.eval_samples=1", "training.checkpoint_every=2"]
TRAIN_CONFIGS: dict[str, list[str]] = {
    "train-grpo": ["--method", "grpo"],
    "train-dapo": ["--method", "dapo"],
    "train-pc": ["--method", "pc", "--set", "allocator.n_pilot=2"],
    "train-pc-posterior": ["--method", "pc", "--set", "allocator.n_pilot=2",
                           *[a for k, v in _PRIOR.items() for a in ("--set", f"allocator.{k}={v}")]],
}

WALL_CLOCK = ("time_generate_s", "time_reward_s", "time_update_s", "time_bookkeeping_s", "written_at", "created_at",
              "updated_at")
TABLES = ("steps", "prompt_observations", "buffer_state", "evictions", "eval_results")
CHECKPOINT_FILES = ("allocator.json", "sidecar.parquet")


def store_digest(store, run_id: str, digest) -> None:
    """Every stored row of ``run_id`` (the tables of :data:`TABLES`), wall-clock columns left out, in order."""
    for table in TABLES:
        cols = [c for c in store.query_table(f"SELECT * FROM {table} LIMIT 0")[0] if c not in WALL_CLOCK]
        rows = store.query(f"SELECT {', '.join(cols)} FROM {table} WHERE run_id = ? ORDER BY ALL", [run_id])
        digest.update(table.encode())
        digest.update(json.dumps(rows, sort_keys=True, default=repr).encode())


def sim_hash(name: str, settings: dict, root: Path) -> str:
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator.runs import record_simulation
    from pc_pipelines.store import Store

    overrides = {**SIM_SETTINGS, **{(k if k == "seed" else f"allocator.{k}"): v for k, v in settings.items()}}
    cfg = resolve("simulator", overrides=overrides)
    store = Store(root / name / "pc.duckdb")
    for _ in record_simulation(cfg, store, SIM_STEPS, run_id=name):
        pass
    digest = hashlib.sha256()
    store_digest(store, name, digest)
    return digest.hexdigest()


def train_hash(name: str, flags: list[str], root: Path, policy: Path) -> str:
    from pc_pipelines.cli import main
    from pc_pipelines.store import Store

    out = root / name
    argv = ["train", "--steps", str(TRAIN_STEPS), "--run-name", name, "--out", str(out), "--policy", str(policy),
            "--quiet", "--json", "--seed", "3", *flags, *[a for s in TRAIN_SETTINGS for a in ("--set", s)]]
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"{name}: pilot-commit train exited {code}")
    digest = hashlib.sha256()
    store_digest(Store(out / "pc.duckdb"), name, digest)
    for ckpt in sorted((out / name / "checkpoints").iterdir()):
        files = [ckpt / f for f in CHECKPOINT_FILES] + sorted((ckpt / "policy").glob("*.safetensors"))
        for f in files:
            digest.update(f"{ckpt.name}/{f.relative_to(ckpt)}".encode())
            digest.update(hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sim-only", action="store_true", help="skip the embedded engine's runs")
    args = parser.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, settings in SIM_CONFIGS.items():
            print(f"sim   {name:<26} {sim_hash(name, settings, root)}", flush=True)
        if not args.sim_only:
            from pc_pipelines.config import resolve
            from pc_pipelines.training.base_policy import ensure_base_policy

            cfg = resolve("embedded", method="grpo")
            policy = ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template)
            for name, flags in TRAIN_CONFIGS.items():
                print(f"train {name:<26} {train_hash(name, flags, root, policy)}", flush=True)
    print(f"# {len(SIM_CONFIGS)} simulator configs x {SIM_STEPS} steps, "
          f"{0 if args.sim_only else len(TRAIN_CONFIGS)} embedded configs x {TRAIN_STEPS} steps; "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
