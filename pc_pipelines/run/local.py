"""The local backend: one process trains the policy with a rollout engine (transformers on CPU/GPU, or vLLM) and the
embedded policy update (:class:`~pc_pipelines.training.PolicyTrainer`), for GRPO, DAPO and PC alike.

A step (the driver's loop, :mod:`.step_loop`): for every engine call the allocator asks for,
:meth:`LocalBackend.generate` generates all its requests in ONE engine call (seed derived from (run seed, step, call
index)), grades every rollout (math-verify; a truncated response scores ``overlong_reward``), keeps the payloads
(token ids) in the :class:`PayloadSidecar` by rollout id and hands the rewards back; :meth:`LocalBackend.update`
turns the trained groups (buffered pilots from earlier steps included) into one
:class:`~pc_pipelines.training.RolloutBatch`, one GRPO group each, for one update; :meth:`LocalBackend.keep_live`
then drops every payload the allocator no longer references. Its checkpoint files: ``policy/`` (an HF directory,
safetensors), ``trainer.pt`` (the optimizer: tensors and plain data, read back with ``weights_only=True``) and
``sidecar.parquet`` (the buffer's pilots).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ..allocation import EngineCall, StepOutcome
from ..errors import RunError
from ..evaluation import EvalResult, eval_seed, evaluate_sets
from ..rewards import MathGrader
from ..rollout import (
    DEFAULT_ENGINE,
    EngineFactory,
    RolloutRequest,
    SamplingParams,
    close_engine,
    derive_seed,
    get_engine,
    sampling_plan,
)
from ..training import PolicyTrainer, RolloutBatch
from .backend import Update
from .checkpoint_data import refuse_damaged_weights, refused
from .checkpoints import load_plain, save_torch, unreadable
from .training_run import SAMPLING_PLAN, TrainingRun

_CALL_SALT = 0x6E6E

class PayloadSidecar:
    """Rollout payloads (prompt and response token ids) by rollout id: the allocator holds ids only (docs/DESIGN.md
    section 3), the buffered pilots' payloads live here between steps and in checkpoints."""

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
    def load(cls, path: Path) -> PayloadSidecar:
        side = cls()
        t = pq.read_table(path).to_pydict()
        for rid, p, r in zip(t["rollout_id"], t["prompt_ids"], t["response_ids"]):
            side.put(int(rid), list(p), list(r))
        return side


def load_model(path: Path, device: str, dtype: str, what: str = "the base policy"):
    """The model (in ``dtype``) and tokenizer at ``path``; a directory that does not hold a loadable causal LM is a
    :class:`RunError` naming it and the fix (before anything of the run changes)."""
    from ..training.base_policy import load_policy

    try:
        return load_policy(path, device, dtype, what=what)
    except RunError:  # a policy refused for what it would run (custom code, pickled objects): says why and the fix
        raise
    except FileNotFoundError as exc:
        raise RunError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(
            f"{what} at {path} cannot be loaded ({type(exc).__name__}: {first}). Fix: pass --policy a directory "
            "written by `pilot-commit base-policy --out DIR` or any `save_pretrained` causal LM with a valid "
            "config.json, weights and tokenizer."
        ) from None


def keep_sampling_plan(run_dir: Path, plan: dict | None) -> None:
    """A run draws its rollouts with one sampling plan (:func:`~pc_pipelines.rollout.sampling_plan`) from start
    to end: the first segment writes it to ``run_dir/sampling_plan.json``, every later one must match it, or a resume
    would not reproduce the uninterrupted run (another chunk size draws other rollouts from the same seed)."""
    if plan is None:
        return
    path = run_dir / SAMPLING_PLAN
    if not path.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(plan, sort_keys=True) + "\n")
        os.replace(tmp, path)
        return
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunError(f"{run_dir.name}: {path} is unreadable ({exc}). Fix: write the engine settings the run started "
                       f"with into it, e.g. {json.dumps(plan, sort_keys=True)}, if they are those.") from None
    if recorded != plan:
        raise RunError(f"{run_dir.name}: its rollouts were drawn with {json.dumps(recorded, sort_keys=True)}, this "
                       f"engine draws with {json.dumps(plan, sort_keys=True)}: continuing would not reproduce the "
                       "run. Fix: use the run's engine settings (max_batch_sequences of TransformersEngineResource / "
                       "RayRolloutEngineResource, PC_ROLLOUT_CHUNK), or start a new run.")


class LocalBackend:
    """The policy, its rollout engine, the grader, the policy update and the payload sidecar of one run, in this
    process. :meth:`start` or :meth:`restore` loads them; the driver (:func:`~.driver.run_segment`) then steps."""

    name = "local"

    def __init__(self, run: TrainingRun, device: str = "cpu", engine_factory: EngineFactory | None = None) -> None:
        self.run = run
        self.device = device
        self.engine_factory = engine_factory
        self.model = self.tokenizer = self.engine = self.grader = self.trainer = None
        self.sidecar = PayloadSidecar()

    # -- loading -----------------------------------------------------------------------------------------------------
    def _build(self, model, tokenizer) -> None:
        cfg = self.run.config.training
        self.model, self.tokenizer = model, tokenizer
        if self.engine_factory is not None:
            self.engine = self.engine_factory(model, tokenizer)
        else:  # the registry's default engine (transformers) on this backend's device
            self.engine = get_engine(DEFAULT_ENGINE).build(model, tokenizer, self.device)
        keep_sampling_plan(self.run.run_dir, sampling_plan(self.engine))
        self.grader = MathGrader(overlong_reward=cfg.overlong_reward)
        self.trainer = PolicyTrainer(model, cfg, tokenizer.pad_token_id, self.run.config.allocator.train_batch,
                                     self.run.config.seed, device=self.device)

    def start(self) -> None:
        torch.set_num_threads(self.run.config.training.torch_threads)
        self._build(*load_model(self.run.policy_path, self.device, self.run.config.training.dtype))

    def restore(self, checkpoint: Path) -> None:
        torch.set_num_threads(self.run.config.training.torch_threads)
        trainer_state = load_plain(checkpoint, "trainer.pt")  # tensors and plain data only, or refused
        refuse_damaged_weights(checkpoint)  # safetensors' layout, read before the loader trusts it
        model, tok = load_model(checkpoint / "policy", self.device, self.run.config.training.dtype,
                                what=f"the policy of checkpoint {checkpoint.name}")
        try:
            sidecar = PayloadSidecar.load(checkpoint / "sidecar.parquet")
        except Exception as exc:  # an unverifiable (format 1) checkpoint can still be unreadable
            raise unreadable(checkpoint, exc) from None
        self._build(model, tok)
        problem = self.trainer.state_problem(trainer_state)  # against the live optimizer, before it takes any of it
        if problem is not None:
            raise refused(checkpoint, "trainer.pt", problem)
        self.sidecar = sidecar
        self.trainer.load_state_dict(trainer_state)

    def save(self, directory: Path) -> list[str]:
        self.model.save_pretrained(directory / "policy")
        self.tokenizer.save_pretrained(directory / "policy")
        save_torch(self.trainer.state_dict(), directory / "trainer.pt")  # a full disk is ENOSPC, not "unexpected pos"
        self.sidecar.save(directory / "sidecar.parquet")
        weights = [f"policy/{p.name}" for p in (directory / "policy").iterdir() if p.suffix in (".safetensors", ".bin")]
        return ["policy/config.json", "trainer.pt", "sidecar.parquet", *weights]

    # -- one step ----------------------------------------------------------------------------------------------------
    def generate(self, call: EngineCall, timings: dict[str, float]) -> list[np.ndarray]:
        cfg = self.run.config.training
        task = self.run.task
        reqs = [RolloutRequest(task.prompts[p], int(n)) for p, n in zip(call.prompt_ids.tolist(), call.n.tolist())]
        params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_response_length,
                                derive_seed(self.run.config.seed, _CALL_SALT, call.step, call.index))
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
                raise RunError(
                    f"step {outcome.step}: rollout {exc} of prompt {group.prompt_id} has no payload in the sidecar. "
                    "Fix: resume from a checkpoint written by this version (the sidecar must hold the buffer's pilots)."
                ) from None
            rewards.append(group.rewards)
            groups.append(np.full(len(ids), g, np.int64))
        if not groups:
            return RolloutBatch([], [], np.zeros(0), np.zeros(0, np.int64))
        return RolloutBatch(prompts, responses, np.concatenate(rewards), np.concatenate(groups))

    def update(self, outcome: StepOutcome) -> Update:
        batch = self._batch(outcome)
        stats = self.trainer.train_step(batch, outcome.step)
        return Update(loss=stats.loss if stats.updates else None,
                      mean_reward=float(batch.rewards.mean()) if len(batch) else 0.0, train_stats=stats.to_dict())

    def keep_live(self, rollout_ids: np.ndarray) -> None:
        self.sidecar.keep_only(rollout_ids)

    # -- evaluation ----------------------------------------------------------------------------------------------------
    def evaluate(self, step: int) -> EvalResult:
        """Mean@k accuracy of each eval set with the current policy, after ``step`` (0: before training)."""
        cfg = self.run.config.training
        return evaluate_sets(self.engine, self.grader, self.run.task.eval_sets, cfg.eval_samples, cfg.eval_temperature,
                             cfg.eval_top_p, cfg.max_response_length, eval_seed(self.run.config.seed, step))

    def close(self) -> None:
        if self.grader is not None:
            self.grader.close()
        close_engine(self.engine)  # an engine that holds processes (Ray actors, a local Ray) lets them go
