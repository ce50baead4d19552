"""The local training loop: allocator -> rollout engine -> rewards -> trainer -> store, one step at a time.

``run_segment(run, store, steps)`` advances a run by ``steps`` training steps from its latest checkpoint (or from
the base policy), for GRPO, DAPO and PC alike: the allocator decides what each engine call generates, the loop
only executes. A step is:

1. ``allocator.begin_step()``; for every engine call the allocator asks for: generate all its requests in ONE
   engine call (seed derived from (run seed, step, call index)), grade every rollout (math-verify, truncated
   responses score ``overlong_reward``), keep the payloads (token ids) in the **sidecar** by rollout id, hand the
   rewards back to the allocator;
2. ``finish()`` gives the trained groups; their rollouts (pilots from earlier steps included, from the sidecar)
   form one :class:`RolloutBatch`, one GRPO group per trained group; the trainer updates the policy;
3. the sidecar drops every payload the allocator no longer references (it keeps only the buffer's pilots);
4. the step's rows go to the store (atomic step directory), metrics to TensorBoard; every ``eval_every`` steps the
   held-out sets are evaluated (mean@k) into ``eval_results``; every ``checkpoint_every`` steps and at the end of
   the segment a checkpoint is written.

**Checkpoints** (``<run_dir>/checkpoints/step-NNNNNNNN``, named by the last completed step) hold the policy as a
normal HF directory, the optimizer state, the allocator state (stream, buffer, RNG), the sidecar (Parquet), all
global RNG states and the cumulative ledger. They are written to a temporary directory and renamed into place, so
a killed write leaves the previous checkpoint intact; the newest ``keep_checkpoints`` are kept.

**Checkpoints verify themselves.** The last file written (atomically, after every other file is synced) is
``manifest.json``: every file's name, size and sha256. A checkpoint is intact only when its files match it
(:func:`verify_checkpoint`). Resuming restores the newest intact checkpoint: a damaged newer one (an emptied
``meta.json``, truncated weights, a lost optimizer or allocator file, ...) is named in a warning and moved aside to
``damaged-step-NNNNNNNN`` (kept for inspection, invisible to the loop). Everything is loaded before the run is
touched, so a resume that fails (every checkpoint damaged, another config, a bad ``--policy``) leaves the run's
status and rows as they were.

**One writer, honest ends.** :func:`run_segment` holds the run's writer lock (:mod:`.store.runlock`) on the
store's run directory and on the run directory while it trains, so a second writer is refused. A stop request
(``stop``, set by SIGTERM / Ctrl-C in the CLI) ends the segment at the next step boundary with a checkpoint and
status ``stopped``; any error ends it ``failed`` with the reason (a full disk says so, with the fix).

**Resume is exact**: every random draw of a step is seeded from (run seed, step[, call]) and the policy, optimizer
and allocator state are restored bit for bit, so a run killed anywhere (even with SIGKILL mid-step) and resumed
from its last checkpoint produces the same parameters and ledger as the uninterrupted run with the same seed and
``torch_threads``. The store forgets whatever was written after the checkpoint (``Store.reopen_after``) and
TensorBoard purges its events after it (``purge_step``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .allocation import Allocator, EngineCall, StepOutcome
from .config import RunConfig
from .data.task import TaskData
from .evaluation import eval_seed, evaluate_sets
from .rewards import MathGrader
from .rollout import RolloutEngine, RolloutRequest, SamplingParams, TransformersEngine, derive_seed
from .stopping import SpaceReserve, StopFlag, StopRequested, run_outcome
from .store import RunRecord, Store, hold_run, remove_run, run_has_data, step_tables
from .store.runlock import holds
from .training import PolicyTrainer, RolloutBatch

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 2  # 2: manifest.json (files, sizes, sha256) written last; 1: meta.json last, no manifest
READABLE_FORMATS = (1, 2)
MANIFEST = "manifest.json"
# What every checkpoint holds besides the weights (policy/*.safetensors or *.bin).
REQUIRED_FILES = ("meta.json", "trainer.pt", "allocator.json", "sidecar.parquet", "rng.pt", "policy/config.json")
_CALL_SALT = 0x6E6E


class LoopError(RuntimeError):
    """The loop cannot go on as asked; the message says why and how to fix it."""


# ---- run -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingRun:
    """A training run: its id, resolved config, directory (checkpoints, TensorBoard) and base policy."""

    run_id: str
    config: RunConfig
    run_dir: Path
    policy_path: Path
    task: TaskData
    lineage: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.run_dir / "tensorboard"

    def record(self) -> RunRecord:
        lineage = {"policy": str(self.policy_path), "run_dir": str(self.run_dir), **self.lineage}
        return RunRecord.for_config(self.config, self.run_id, "train", lineage)


# ---- sidecar ---------------------------------------------------------------------------------------------------
class Sidecar:
    """Rollout payloads by rollout id (the allocator only holds ids, DESIGN.md section 3)."""

    def __init__(self) -> None:
        self.prompt: dict[int, list[int]] = {}
        self.response: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self.response)

    def put(self, rollout_id: int, prompt_ids: list[int], response_ids: list[int]) -> None:
        self.prompt[rollout_id] = prompt_ids
        self.response[rollout_id] = response_ids

    def keep_only(self, live: np.ndarray) -> None:
        keep = set(live.tolist())
        for rid in [r for r in self.response if r not in keep]:
            del self.response[rid]
            del self.prompt[rid]

    def save(self, path: Path) -> None:
        ids = sorted(self.response)
        table = pa.table(
            {
                "rollout_id": pa.array(ids, pa.int64()),
                "prompt_ids": pa.array([self.prompt[i] for i in ids], pa.list_(pa.int32())),
                "response_ids": pa.array([self.response[i] for i in ids], pa.list_(pa.int32())),
            }
        )
        pq.write_table(table, path)

    @classmethod
    def load(cls, path: Path) -> Sidecar:
        side = cls()
        t = pq.read_table(path).to_pydict()
        for rid, p, r in zip(t["rollout_id"], t["prompt_ids"], t["response_ids"]):
            side.put(int(rid), list(p), list(r))
        return side


# ---- checkpoints -----------------------------------------------------------------------------------------------
def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints (``step-N`` directories with a ``manifest.json`` or, format 1, a ``meta.json``), oldest first.
    Cheap: it does not verify them (:func:`verify_checkpoint`, :func:`newest_intact_checkpoint` do)."""
    out = []
    if checkpoint_dir.is_dir():
        for p in checkpoint_dir.iterdir():
            if p.name.startswith("step-") and ((p / MANIFEST).exists() or (p / "meta.json").exists()):
                try:
                    out.append((int(p.name[5:]), p))
                except ValueError:
                    continue
    return sorted(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path) -> dict[str, Any]:
    """Sync every file of a checkpoint being written, then write its manifest (name, size, sha256 of each file)
    atomically: the last file of the checkpoint."""
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name not in (MANIFEST, MANIFEST + ".tmp"):
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            files[p.relative_to(directory).as_posix()] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    manifest = {"format": CHECKPOINT_FORMAT, "files": files}
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST)
    return manifest


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path.name} is missing") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path.name} is not valid JSON ({exc})") from None


def verify_checkpoint(path: Path) -> str | None:
    """None when the checkpoint at ``path`` is intact, else what is wrong with it (one line).

    A checkpoint of format 2 is intact when every file its manifest lists has the listed size and sha256 and the
    manifest lists the files every checkpoint needs; one of format 1 (no manifest, written before checkpoints
    verified themselves) when its required files are there and not empty."""
    path = Path(path)
    try:
        step = int(path.name.split("-", 1)[1])
    except (IndexError, ValueError):
        return f"{path.name} is not named step-<N>"
    if (path / MANIFEST).exists():
        try:
            manifest = _read_json(path / MANIFEST)
            files = manifest["files"]
            assert isinstance(files, dict)
        except (ValueError, KeyError, TypeError, AssertionError):
            return f"{MANIFEST} is not a valid manifest"
        for rel, want in files.items():
            f = path / rel
            if not f.is_file():
                return f"{rel} is missing"
            size = f.stat().st_size
            if size != want.get("size"):
                return f"{rel} has {size} bytes, its manifest says {want.get('size')} (truncated or replaced)"
        for rel, want in files.items():
            if _sha256(path / rel) != want.get("sha256"):
                return f"{rel} does not match its sha256 in the manifest (corrupted)"
        lacking = [r for r in REQUIRED_FILES if r not in files]
        if lacking or not any(r.startswith("policy/") and r.endswith((".safetensors", ".bin")) for r in files):
            return f"its manifest lists no {', '.join(lacking) or 'policy weights'}"
    else:
        try:
            meta = _read_json(path / "meta.json")
        except ValueError as exc:
            return str(exc)
        if not isinstance(meta, dict) or meta.get("format", 1) != 1:
            return f"{MANIFEST} is missing (a checkpoint of format {CHECKPOINT_FORMAT} writes it last)"
        for rel in REQUIRED_FILES:
            f = path / rel
            if not f.is_file() or f.stat().st_size == 0:
                return f"{rel} is {'empty' if f.is_file() else 'missing'}"
        if not [p for p in (path / "policy").iterdir() if p.suffix in (".safetensors", ".bin") and p.stat().st_size]:
            return "policy/ has no weights"
    try:
        meta = _read_json(path / "meta.json")
    except ValueError as exc:
        return str(exc)
    if not isinstance(meta, dict) or meta.get("step") != step or "totals" not in meta:
        return f"meta.json does not describe step {step}"
    return None


def quarantine_checkpoint(path: Path) -> Path:
    """Move a damaged checkpoint aside to ``damaged-step-NNNNNNNN[-k]`` (kept for inspection; no listing sees it)."""
    for k in range(1000):
        target = path.with_name(f"damaged-{path.name}" + (f"-{k}" if k else ""))
        if not target.exists():
            os.rename(path, target)
            return target
    raise LoopError(f"cannot move the damaged checkpoint {path} aside: too many damaged copies. Fix: delete them.")


def newest_intact_checkpoint(
    checkpoint_dir: Path, at_most: int | None = None
) -> tuple[tuple[int, Path] | None, list[tuple[Path, str]]]:
    """The newest intact checkpoint (taken after a step ``<= at_most``, when given) and the damaged ones newer
    than it, each with what is wrong with it."""
    damaged: list[tuple[Path, str]] = []
    for step, path in reversed(list_checkpoints(checkpoint_dir)):
        if at_most is not None and step > at_most:
            continue
        problem = verify_checkpoint(path)
        if problem is None:
            return (step, path), damaged
        damaged.append((path, problem))
    return None, damaged


def latest_checkpoint(checkpoint_dir: Path) -> tuple[int, Path] | None:
    ckpts = list_checkpoints(checkpoint_dir)
    return ckpts[-1] if ckpts else None


def checkpoint_at(checkpoint_dir: Path, step: int) -> Path | None:
    """The complete checkpoint taken after ``step``, if any."""
    return next((p for s, p in list_checkpoints(checkpoint_dir) if s == step), None)


def stale_checkpoints(ckpts: list[tuple[int, Path]], keep_last: int, keep_every: int) -> list[tuple[int, Path]]:
    """The checkpoints retention deletes: all but the newest ``keep_last`` and those after a multiple of
    ``keep_every`` steps. Example: steps 4, 9, 14, 19, 24 with keep_last 2 and keep_every 10 keep 9 (10 steps),
    19 (20 steps, also among the newest two) and 24, and delete 4 and 14."""
    newest = ckpts[-keep_last:] if keep_last > 0 else []
    return [
        (s, p) for s, p in ckpts
        if (s, p) not in newest and not (keep_every > 0 and (s + 1) % keep_every == 0)
    ]


@dataclass
class Totals:
    """The run's cumulative ledger, carried in checkpoints."""

    steps: int = 0
    sampled_rollouts: int = 0
    trained_rollouts: int = 0
    engine_calls: int = 0

    def add(self, outcome: StepOutcome) -> None:
        led = outcome.ledger
        self.steps += 1
        self.sampled_rollouts += led.sampled_rollouts
        self.trained_rollouts += led.trained_rollouts
        self.engine_calls += led.engine_calls


# ---- per-step record -------------------------------------------------------------------------------------------
@dataclass
class StepRecord:
    step: int
    ledger: dict[str, Any]
    loss: float | None
    mean_reward: float
    reward_std: float
    cumulative_rollouts: int
    timings: dict[str, float]
    eval_accuracy: float | None = None
    eval_by_set: dict[str, float] | None = None
    train_stats: dict[str, Any] | None = None

    _TOP = ("loss", "mean_reward", "reward_std", "cumulative_rollouts", "eval_accuracy", "eval")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepRecord:
        """The record back from :meth:`to_json` (what a remote segment reports per step through Dagster Pipes):
        ``time_<name>_s`` keys become timings, the rest of the non-record keys the ledger (without ``lags``)."""
        ledger = {k: v for k, v in d.items() if k not in cls._TOP and not (k.startswith("time_") and k.endswith("_s"))}
        timings = {k[5:-2]: float(v) for k, v in d.items() if k.startswith("time_") and k.endswith("_s")}
        return cls(step=int(d["step"]), ledger=ledger, loss=d.get("loss"), mean_reward=float(d["mean_reward"]),
                   reward_std=float(d["reward_std"]), cumulative_rollouts=int(d["cumulative_rollouts"]),
                   timings=timings, eval_accuracy=d.get("eval_accuracy"), eval_by_set=d.get("eval"))

    def to_json(self) -> dict[str, Any]:
        out = dict(self.ledger)
        out.pop("lags", None)
        out.update(
            loss=self.loss,
            mean_reward=self.mean_reward,
            reward_std=self.reward_std,
            cumulative_rollouts=self.cumulative_rollouts,
            **{f"time_{k}_s": round(v, 4) for k, v in self.timings.items()},
        )
        if self.eval_accuracy is not None:
            out["eval_accuracy"] = self.eval_accuracy
            out["eval"] = self.eval_by_set
        return out


@dataclass(frozen=True)
class SegmentResult:
    run_id: str
    first_step: int
    last_step: int  # -1 if the run has no completed step
    steps_run: int
    cumulative_rollouts: int
    last_eval_accuracy: float | None
    mean_reward_std: float | None
    checkpoint: Path | None
    tensorboard_dir: Path
    records: list[StepRecord]
    reported: dict[str, Any] = field(default_factory=dict)
    """What a segment run outside this process (a Pipes subprocess, a Kubernetes pod, a RayJob) reported back:
    its materialization metadata and ``pipes_steps``, one row per step (empty for in-process segments)."""


# ---- the loop --------------------------------------------------------------------------------------------------
EngineFactory = Callable[[Any, Any], RolloutEngine]  # (model, tokenizer) -> engine bound to that policy


class Trainer:
    """One run's live state: policy, engine, grader, trainer, allocator, sidecar. Built by :func:`open_run`."""

    def __init__(
        self,
        run: TrainingRun,
        store: Store,
        model,
        tokenizer,
        allocator: Allocator,
        sidecar: Sidecar,
        totals: Totals,
        engine_factory: EngineFactory | None = None,
        device: str = "cpu",
    ) -> None:
        cfg = run.config.training
        self.run = run
        self.store = store
        self.model = model
        self.tokenizer = tokenizer
        self.allocator = allocator
        self.sidecar = sidecar
        self.totals = totals
        if engine_factory is not None:
            self.engine = engine_factory(model, tokenizer)
        else:
            self.engine = TransformersEngine(model, tokenizer, device=device)
        self.grader = MathGrader(overlong_reward=cfg.overlong_reward)
        self.trainer = PolicyTrainer(
            model, cfg, tokenizer.pad_token_id, run.config.allocator.train_batch, run.config.seed, device=device
        )
        self.writer = store.writer(run.run_id)
        self._tb = None
        self.restored_from: Path | None = None  # the checkpoint open_run restored, if any

    # -- generation + grading --------------------------------------------------------------------------------------
    def _execute(self, call: EngineCall, timings: dict[str, float]) -> list[np.ndarray]:
        cfg = self.run.config.training
        task = self.run.task
        reqs = [RolloutRequest(task.prompts[p], int(n)) for p, n in zip(call.prompt_ids.tolist(), call.n.tolist())]
        params = SamplingParams(
            cfg.temperature, cfg.top_p, cfg.max_response_length, derive_seed(self.run.config.seed, _CALL_SALT, call.step, call.index)
        )
        t0 = time.perf_counter()
        outputs = self.engine.generate(reqs, params)
        t1 = time.perf_counter()
        texts, golds, truncated = [], [], []
        for p, out in zip(call.prompt_ids.tolist(), outputs):
            for r in out.rollouts:
                texts.append(r.text)
                golds.append(task.golds[p])
                truncated.append(r.truncated)
        flat = self.grader.rewards(texts, golds, truncated)
        t2 = time.perf_counter()
        rewards, pos = [], 0
        for start, out in zip(call.rollout_starts.tolist(), outputs):
            for j, r in enumerate(out.rollouts):
                self.sidecar.put(start + j, out.prompt_ids, r.token_ids)
            rewards.append(flat[pos : pos + len(out.rollouts)])
            pos += len(out.rollouts)
        timings["generate"] += t1 - t0
        timings["reward"] += t2 - t1
        return rewards

    def _batch(self, outcome: StepOutcome) -> RolloutBatch:
        prompts, responses, rewards, groups = [], [], [], []
        for g, group in enumerate(outcome.groups):
            ids = group.rollout_ids.tolist()
            try:
                prompts.extend(self.sidecar.prompt[i] for i in ids)
                responses.extend(self.sidecar.response[i] for i in ids)
            except KeyError as exc:
                raise LoopError(
                    f"step {outcome.step}: rollout {exc} of prompt {group.prompt_id} has no payload in the sidecar. "
                    "Fix: resume from a checkpoint written by this version (the sidecar must hold the buffer's pilots)."
                ) from None
            rewards.append(group.rewards)
            groups.append(np.full(len(ids), g, np.int64))
        if not groups:
            return RolloutBatch([], [], np.zeros(0), np.zeros(0, np.int64))
        return RolloutBatch(prompts, responses, np.concatenate(rewards), np.concatenate(groups))

    # -- one step ----------------------------------------------------------------------------------------------
    def step(self) -> StepRecord:
        timings = {"generate": 0.0, "reward": 0.0, "update": 0.0, "bookkeeping": 0.0, "store": 0.0}
        t = time.perf_counter()
        session = self.allocator.begin_step()
        timings["bookkeeping"] += time.perf_counter() - t
        try:
            while True:
                t = time.perf_counter()
                call = session.next_call()
                timings["bookkeeping"] += time.perf_counter() - t
                if call is None:
                    break
                rewards = self._execute(call, timings)
                t = time.perf_counter()
                session.observe(rewards)
                timings["bookkeeping"] += time.perf_counter() - t
            t = time.perf_counter()
            outcome = session.finish()
            timings["bookkeeping"] += time.perf_counter() - t
        except BaseException:
            self.allocator.abort_step()
            raise
        batch = self._batch(outcome)
        t = time.perf_counter()
        stats = self.trainer.train_step(batch, outcome.step)
        timings["update"] += time.perf_counter() - t
        t = time.perf_counter()
        self.sidecar.keep_only(self.allocator.live_rollout_ids())
        self.totals.add(outcome)
        timings["bookkeeping"] += time.perf_counter() - t
        mean_reward = float(batch.rewards.mean()) if len(batch) else 0.0
        loss = stats.loss if stats.updates else None
        t = time.perf_counter()
        extra = {
            "loss": loss,
            "mean_reward": mean_reward,
            "time_generate_s": timings["generate"],
            "time_reward_s": timings["reward"],
            "time_update_s": timings["update"],
            "time_bookkeeping_s": timings["bookkeeping"],
        }
        self.writer.write_step(outcome.step, step_tables(self.run.run_id, outcome, self.allocator, extra))
        timings["store"] += time.perf_counter() - t
        return StepRecord(
            step=outcome.step,
            ledger=outcome.ledger.to_dict(),
            loss=loss,
            mean_reward=mean_reward,
            reward_std=outcome.ledger.mean_reward_std,
            cumulative_rollouts=self.totals.sampled_rollouts,
            timings=timings,
            train_stats=stats.to_dict(),
        )

    # -- evaluation --------------------------------------------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        """Mean@k accuracy of each eval set after ``step`` (-1: before training); rows go to ``eval_results``."""
        cfg = self.run.config.training
        result = evaluate_sets(self.engine, self.grader, self.run.task.eval_sets, cfg.eval_samples, cfg.eval_temperature,
                               cfg.eval_top_p, cfg.max_response_length, eval_seed(self.run.config.seed, step))
        self.store.add_eval_results(result.rows(self.run.run_id, step))
        return result.accuracy

    # -- TensorBoard ---------------------------------------------------------------------------------------------
    def tensorboard(self, purge_step: int | None):
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run.tensorboard_dir), purge_step=purge_step)
        return self._tb

    def log_tensorboard(self, rec: StepRecord) -> None:
        tb = self.tensorboard(None)
        s = rec.step
        led = rec.ledger
        for key in ("sampled_rollouts", "trained_rollouts", "rounds", "kept", "skipped_easy", "deferred_hard",
                    "buffer_size", "evicted", "informative_share", "mean_reward_std", "mean_lag"):
            tb.add_scalar(f"ledger/{key}", led[key], s)
        tb.add_scalar("ledger/cumulative_rollouts", rec.cumulative_rollouts, s)
        tb.add_scalar("train/mean_reward", rec.mean_reward, s)
        if rec.loss is not None:
            tb.add_scalar("train/loss", rec.loss, s)
        for key in ("pg_clipfrac", "ppo_kl", "grad_norm", "lr", "entropy"):
            if rec.train_stats and key in rec.train_stats:
                tb.add_scalar(f"train/{key}", rec.train_stats[key], s)
        for key, v in rec.timings.items():
            tb.add_scalar(f"time/{key}_s", v, s)
        if rec.eval_by_set:
            tb.add_scalar("eval/accuracy", rec.eval_accuracy, s)
            for name, a in rec.eval_by_set.items():
                tb.add_scalar(f"eval/{name}", a, s)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        self.grader.close()

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        step = self.allocator.step - 1
        root = self.run.checkpoint_dir
        root.mkdir(parents=True, exist_ok=True)
        final = root / checkpoint_name(step)
        tmp = root / f".tmp-{checkpoint_name(step)}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            self.model.save_pretrained(tmp / "policy")
            self.tokenizer.save_pretrained(tmp / "policy")
            torch.save(self.trainer.state_dict(), tmp / "trainer.pt")
            (tmp / "allocator.json").write_text(json.dumps(self.allocator.state_dict()))
            self.sidecar.save(tmp / "sidecar.parquet")
            torch.save(
                {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
                tmp / "rng.pt",
            )
            meta = {
                "format": CHECKPOINT_FORMAT,
                "run_id": self.run.run_id,
                "config_hash": self.run.config.config_hash,
                "step": step,
                "totals": self.totals.__dict__,
            }
            (tmp / "meta.json").write_text(json.dumps(meta))
            write_manifest(tmp)  # last: a checkpoint is intact when its files match its manifest
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk gets the partial checkpoint's space back
            raise
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        self.store.add_checkpoint(self.run.run_id, step, str(final))
        cfg = self.run.config.training
        for _, old in stale_checkpoints(list_checkpoints(root), cfg.keep_checkpoints, cfg.keep_every):
            shutil.rmtree(old, ignore_errors=True)
        for junk in root.glob(".tmp-*"):
            shutil.rmtree(junk, ignore_errors=True)
        return final


def prepare_run(
    config: RunConfig,
    out_dir: str | Path,
    run_name: str | None = None,
    policy_path: str | Path | None = None,
    cache_dir: str | Path | None = None,
    progress: Callable[[int, float], None] | None = None,
    task: TaskData | None = None,
) -> TrainingRun:
    """A :class:`TrainingRun` for ``config`` in ``<out_dir>/<run_name>``.

    Without ``task``: the embedded task's data and base policy (built and cached on first use unless
    ``policy_path`` names an HF model directory). With ``task`` (a real dataset prepared by the Dagster data
    assets, see ``pc_pipelines.data.datasets.load_prepared_task``): that task and the HF model at ``policy_path``."""
    from .data.task import embedded_task

    template = config.training.prompt_template
    # The CPU kernels PyTorch picked (AVX512 / AVX2 / DEFAULT, ATEN_CPU_CAPABILITY overrides): float results differ
    # between them, so a run says which it used (the benchmark's reproducibility row compares two).
    lineage: dict[str, Any] = {"cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if task is None:
        if config.task is None:
            raise LoopError(
                f"preset {config.preset!r} has no embedded task section: without a prepared dataset the local loop "
                "trains the embedded task only (real datasets come through the Dagster data assets and the start_run "
                "job's `dataset`). Fix: use --preset embedded."
            )
        task = embedded_task(config.task, template)
    elif policy_path is None:
        raise LoopError("a run on a prepared dataset needs policy_path: a local Hugging Face causal LM directory.")
    if policy_path is None:
        from .training.base_policy import ensure_base_policy, read_meta

        if config.policy is None:
            raise LoopError("no policy given and the preset has no policy section. Fix: pass --policy DIR.")
        policy_path = ensure_base_policy(config.task, config.policy, template, cache_dir=cache_dir, progress=progress)
        lineage["base_policy_recipe"] = read_meta(policy_path).get("recipe_hash")
    run_id = run_name or config.default_run_id()
    return TrainingRun(
        run_id=run_id,
        config=config,
        run_dir=Path(out_dir).resolve() / run_id,
        policy_path=Path(policy_path).resolve(),
        task=task,
        lineage=lineage,
    )


def _load_model(path: Path, device: str, what: str = "the base policy"):
    """The model and tokenizer at ``path``; a directory that does not hold a loadable causal LM is a
    :class:`LoopError` naming it and the fix (before anything of the run changes)."""
    from .training.base_policy import load_policy

    try:
        return load_policy(path, device)
    except FileNotFoundError as exc:
        raise LoopError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LoopError(
            f"{what} at {path} cannot be loaded ({type(exc).__name__}: {first}). Fix: pass --policy a directory "
            "written by `pilot-commit base-policy --out DIR` or any `save_pretrained` causal LM with a valid "
            "config.json, weights and tokenizer."
        ) from None


def _restore(run: TrainingRun, store: Store, path: Path, device: str, engine_factory: EngineFactory | None) -> Trainer:
    """A trainer with the checkpoint at ``path`` loaded; changes nothing of the run (its rows, its status)."""
    try:
        meta = _read_json(path / "meta.json")
    except ValueError as exc:
        raise LoopError(f"checkpoint {path}: {exc}. Fix: resume from an earlier checkpoint.") from None
    if meta.get("format") not in READABLE_FORMATS:
        raise LoopError(f"checkpoint {path} has format {meta.get('format')}, this version reads {READABLE_FORMATS}.")
    if meta.get("config_hash") != run.config.config_hash:
        raise LoopError(
            f"checkpoint {path} belongs to config {meta.get('config_hash')}, not {run.config.config_hash}. Fix: resume "
            "with the run's original preset and --set overrides, or start a new --run-name."
        )
    model, tok = _load_model(path / "policy", device, what=f"the policy of checkpoint {path.name}")
    try:
        allocator = Allocator.from_state_dict(json.loads((path / "allocator.json").read_text()))
        sidecar = Sidecar.load(path / "sidecar.parquet")
        trainer_state = torch.load(path / "trainer.pt", weights_only=False)
        rng = torch.load(path / "rng.pt", weights_only=False)
    except Exception as exc:  # an unverifiable (format 1) checkpoint can still be unreadable
        raise LoopError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}). Fix: move it aside "
                        "(e.g. to damaged-" + path.name + ") to resume from the one before it.") from None
    trainer = Trainer(run, store, model, tok, allocator, sidecar, Totals(**meta["totals"]), engine_factory, device)
    trainer.trainer.load_state_dict(trainer_state)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    trainer.restored_from = path
    return trainer


def _set_aside(run: TrainingRun, damaged: list[tuple[Path, str]], using: str) -> None:
    """Warn about each damaged checkpoint skipped, and move it aside when this process holds the run's lock."""
    for path, problem in damaged:
        moved = quarantine_checkpoint(path) if holds(run.run_dir) else None
        log.warning("run %s: checkpoint %s is damaged: %s; %s; resuming from %s", run.run_id, path.name, problem,
                    f"moved it aside to {moved.name} (delete it once inspected)" if moved else "ignored it", using)


def open_run(
    run: TrainingRun,
    store: Store,
    resume: bool = True,
    device: str = "cpu",
    engine_factory: EngineFactory | None = None,
    from_step: int | None = None,
) -> tuple[Trainer, bool]:
    """Restore the run from a checkpoint or start it from the base policy.

    ``from_step`` None: the newest intact checkpoint (``resume``) or the base policy; the store forgets every row
    after the restored step (a crashed run's tail). Without ``resume`` a run that has checkpoints or steps is
    refused. ``from_step`` k: the checkpoint after step k (-1: the base policy), keeping the rows of later steps: a
    training segment replayed in the middle of a run rewrites only its own steps (see :func:`run_segment`). A
    damaged checkpoint is skipped for the newest intact one before it (or, for ``from_step``, the base policy),
    with a warning naming it; see the module docstring. Everything is loaded before the run's status or rows
    change, so a refusal changes nothing. Returns the trainer and whether a checkpoint was restored.
    """
    torch.set_num_threads(run.config.training.torch_threads)
    store.init(vacuum=False)  # vacuuming other runs could race their replays (Store.replace_steps)
    chosen: tuple[int, Path] | None = None
    damaged: list[tuple[Path, str]] = []
    if from_step is None:
        if not resume:
            if list_checkpoints(run.checkpoint_dir):
                raise LoopError(
                    f"run {run.run_id!r} already has checkpoints in {run.checkpoint_dir}. Fix: pass --resume to "
                    "continue it, --overwrite to delete it and start over, or choose another --run-name."
                )
            have = run_has_data(store, run.run_id)
            if have:
                raise LoopError(
                    f"run {run.run_id!r} already has {have} steps in {store.path} (no checkpoint yet). Fix: pass "
                    "--resume to continue it, --overwrite to delete it and start over, or choose another --run-name."
                )
        else:
            chosen, damaged = newest_intact_checkpoint(run.checkpoint_dir)
            if chosen is None and damaged:
                listing = "; ".join(f"{p.name}: {why}" for p, why in damaged)
                raise LoopError(
                    f"run {run.run_id!r} has no intact checkpoint to resume from ({listing}). Nothing was changed. "
                    "Fix: restore a checkpoint from a backup, or pass --overwrite (instead of --resume) to start the "
                    "run over from the base policy."
                )
    elif from_step >= 0:
        if checkpoint_at(run.checkpoint_dir, from_step) is None:
            have = [s for s, _ in list_checkpoints(run.checkpoint_dir)]
            raise LoopError(
                f"run {run.run_id!r} has no checkpoint after step {from_step} in {run.checkpoint_dir} (it has "
                f"{have or 'none'}). Fix: train the steps up to {from_step} first."
            )
        chosen, damaged = newest_intact_checkpoint(run.checkpoint_dir, at_most=from_step)
    if chosen is None:
        model, tok = _load_model(run.policy_path, device)
        trainer = Trainer(run, store, model, tok, Allocator(run.config.allocator, len(run.task.prompts)), Sidecar(),
                          Totals(), engine_factory, device)
    else:
        trainer = _restore(run, store, chosen[1], device, engine_factory)
    # Loaded: from here on the run changes.
    _set_aside(run, damaged, chosen[1].name if chosen else "the base policy")
    store.register_run(run.record())
    store.vacuum(run.run_id)
    if chosen is None:
        if from_step is None:
            store.reopen_after(run.run_id, -2)  # a fresh start forgets any earlier attempt's rows
            shutil.rmtree(run.tensorboard_dir, ignore_errors=True)
        return trainer, False
    if from_step is None:
        store.reopen_after(run.run_id, chosen[0])
    log.info("resumed run %s from %s (step %d)", run.run_id, chosen[1], chosen[0])
    return trainer, True


def run_segment(
    run: TrainingRun,
    store: Store,
    steps: int | None = None,
    resume: bool = True,
    on_step: Callable[[StepRecord], None] | None = None,
    device: str = "cpu",
    engine_factory: EngineFactory | None = None,
    from_step: int | None = None,
    until_step: int | None = None,
    overwrite: bool = False,
    stop: StopFlag | None = None,
) -> SegmentResult:
    """Advance ``run`` by ``steps`` training steps, or through step ``until_step`` (see the module docstring);
    checkpoint at the end.

    ``from_step`` restores exactly the checkpoint after that step (-1: the base policy) instead of the latest one
    and keeps the rows of later steps: the steps replayed replace their own rows only, atomically at the end
    (``Store.replace_steps``), so re-materializing a Dagster segment in the middle of a run leaves the segments
    after it intact (with the same seed the replay reproduces them bit for bit). ``engine_factory`` builds the
    rollout engine for the loaded policy (default: :class:`TransformersEngine`).

    The run's writer lock is held throughout (a second writer gets :class:`~.store.RunBusyError`). ``overwrite``
    deletes the run's rows and files first and starts it over. ``stop`` (a :class:`~.stopping.StopFlag`) is looked
    at between steps: once set, the segment checkpoints and ends with :class:`~.stopping.StopRequested`, the run
    ``stopped``."""
    if (steps is None) == (until_step is None):
        raise LoopError("run_segment needs exactly one of steps (a count) or until_step (the last step to train).")
    if steps is not None and steps < 0:
        raise LoopError(f"steps={steps}: must be >= 0.")
    with hold_run(run.run_id, store.run_dir(run.run_id), run.run_dir, command=_command()):
        if overwrite:
            if from_step is not None:
                raise LoopError("overwrite starts a run over: it cannot be combined with from_step.")
            store.init(vacuum=False)
            remove_run(store, run.run_id, store.run_dir(run.run_id), run.run_dir)
            resume = False
        reserve = SpaceReserve(store.run_dir(run.run_id))  # room to record the end even on a full disk
        try:
            trainer, _ = open_run(run, store, resume=resume, device=device, engine_factory=engine_factory,
                                  from_step=from_step)
            return _train_segment(run, store, trainer, steps, until_step, from_step, on_step, stop, reserve)
        finally:
            reserve.release()


def _command() -> str:
    return " ".join(["pilot-commit" if sys.argv and sys.argv[0].endswith(("cli.py", "pilot-commit")) else
                     os.path.basename(sys.argv[0] if sys.argv else "python"), *sys.argv[1:2]])


def _train_segment(run: TrainingRun, store: Store, trainer: Trainer, steps: int | None, until_step: int | None,
                   from_step: int | None, on_step: Callable[[StepRecord], None] | None,
                   stop: StopFlag | None, reserve: SpaceReserve) -> SegmentResult:
    cfg = run.config.training
    first = trainer.allocator.step
    if until_step is not None:
        steps = max(0, until_step - first + 1)
    later = [s for s, _ in list_checkpoints(run.checkpoint_dir) if s >= first + steps]
    records: list[StepRecord] = []
    last_ckpt: Path | None = None
    saved_at: int | None = None
    try:
        # Purging TensorBoard events from `first` on would also drop the later segments a mid-run replay keeps.
        tb = trainer.tensorboard(purge_step=None if later else first)
        if stop is not None:
            stop.check()
        if first == 0:
            acc = trainer.evaluate(-1)
            tb.add_scalar("eval/accuracy", float(np.mean(list(acc.values()))), -1)
        for _ in range(steps):
            if stop is not None:
                stop.check()
            rec = trainer.step()
            if (rec.step + 1) % cfg.eval_every == 0:
                acc = trainer.evaluate(rec.step)
                rec.eval_by_set = acc
                rec.eval_accuracy = float(np.mean(list(acc.values())))
            trainer.log_tensorboard(rec)
            records.append(rec)
            if on_step:
                on_step(rec)
            if (rec.step + 1) % cfg.checkpoint_every == 0:
                last_ckpt, saved_at = trainer.save_checkpoint(), rec.step
            if stop is not None and stop.requested and records:
                if saved_at != rec.step:  # nothing done is lost: the stop boundary gets its checkpoint
                    last_ckpt, saved_at = trainer.save_checkpoint(), rec.step
                raise StopRequested(stop.signum, detail=f"after step {rec.step} (checkpoint {last_ckpt.name}); "
                                                        "resume it with --resume")
        if records and saved_at != records[-1].step:
            last_ckpt = trainer.save_checkpoint()
        elif not records:
            last_ckpt = trainer.restored_from
        if from_step is not None and records:
            store.replace_steps(run.run_id, records[0].step, records[-1].step)
        store.compact(run.run_id)
        store.set_status(run.run_id, "running")
    except BaseException as exc:
        if isinstance(exc, StopRequested) and not exc.detail:
            done = f"after step {records[-1].step}" if records else "before its first step"
            exc = exc.with_detail(f"{done}; resume it with --resume (from its last checkpoint)")
        status, reason = run_outcome(exc, where=f"{run.run_dir} and {store.runs_root}",
                                     then="resume it with --resume (from its last checkpoint)")
        with contextlib.suppress(Exception):
            trainer.writer.sweep()  # a step write cut short (a full disk): give its space back first
        reserve.release()
        try:
            store.set_status(run.run_id, status, reason)
        except Exception as rec_exc:  # the original error matters more (a full disk may refuse this too)
            log.error("could not record the end of run %s (%s: %s): %s", run.run_id, status, reason, rec_exc)
        if exc is not sys.exc_info()[1]:
            raise exc from None
        raise
    finally:
        trainer.close()
    evals = [r for r in records if r.eval_accuracy is not None]
    return SegmentResult(
        run_id=run.run_id,
        first_step=first,
        last_step=trainer.allocator.step - 1,
        steps_run=len(records),
        cumulative_rollouts=trainer.totals.sampled_rollouts,
        last_eval_accuracy=evals[-1].eval_accuracy if evals else None,
        mean_reward_std=float(np.mean([r.reward_std for r in records])) if records else None,
        checkpoint=last_ckpt,
        tensorboard_dir=run.tensorboard_dir,
        records=records,
    )
