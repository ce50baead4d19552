"""The verl recipe: Pilot-Commit on verl 0.9's ``RayPPOTrainer`` with vLLM rollouts and FSDP updates.

Its config (:func:`compose_recipe_config`, :class:`PCSettings`, :func:`run_overrides`) is tested on CPU. The trainer
(:func:`trainer_class`) is a thin subclass (verl 0.9 removed the synchronous rollout the paper's 0.5-era recipe,
a copy of ``RayPPOTrainer.fit``, called) that the run layer's verl backend (:mod:`pc_pipelines.run.verl`) drives:
one ``generate_sequences`` call per engine call of OUR allocator, the replicas put to sleep after a step's last round,
verl's own pieces for the update (``_compute_old_log_prob`` for the whole batch, lagged pilots included, as the
paper's recipe; GRPO advantages over ``uid``; ``_update_actor``), weight syncs, its actor checkpoint.
**Experimental**: the trainer has not run on a GPU cluster yet.

Departures from the paper's recipe: no commit-batch trimming to the GPU count (verl's uneven chunking instead);
binary 1/0 rewards with overlong = 0 instead of the 1.5B script's +/-1 with an overlong penalty (docs/DESIGN.md
section 3); the stream, band, eviction and lag rules are the allocator's (tested on CPU), not a re-implementation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import AllocatorConfig
from ..errors import ConfigError, field_error

if TYPE_CHECKING:
    from ..config import RunConfig

log = logging.getLogger(__name__)

CONFIG_MODULE = "pc_pipelines.training.verl_conf"
CONFIG_NAME = "pc_recipe"


def compose_recipe_config(overrides: Sequence[str] = ()):
    """The recipe's Hydra config (``verl_conf/pc_recipe.yaml`` on verl's ``ppo_trainer``) with ``overrides``."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        return compose(CONFIG_NAME, overrides=list(overrides))


@dataclass(frozen=True)
class PCSettings:
    """The allocation settings the recipe reads from its config, checked against verl's batch settings."""

    train_batch: int
    """b_t: prompts per training step (``data.train_batch_size``)."""
    ppo_minibatch: int
    """Prompts per PPO minibatch (``actor_rollout_ref.actor.ppo_mini_batch_size``); must divide b_t."""
    n_pilot: int
    """Pilot rollouts per fresh prompt (``pc.n_pilot``)."""
    n_commit: int
    """Commit rollouts per buffered prompt (``pc.n_commit``); a trained group has n_pilot + n_commit rows."""
    oversample: float
    """b_g / b_t (``pc.oversample``)."""
    p_lower: float
    """Keep band lower bound on the pilot pass rate."""
    p_upper: float
    """Keep band upper bound."""
    p_solve: float
    """Pass rate at which a prompt is evicted from later epochs."""
    max_age: int
    """d: the largest lag (steps) between a pilot and its commit."""
    max_rounds: int
    """Generation rounds per step before a shortfall (>= 2 for PC)."""
    binding: bool
    """One engine call per round (pilots and commits together)."""
    selection: str
    """Replay-buffer selection order."""
    data_parallel: int
    """GPUs the actor trains on (``trainer.nnodes * trainer.n_gpus_per_node``)."""

    def __post_init__(self) -> None:
        for name in ("train_batch", "ppo_minibatch", "n_pilot", "n_commit", "max_age", "data_parallel"):
            if getattr(self, name) < 1:
                raise field_error(self, name, "must be >= 1", f"set {name} to a positive count")
        if self.train_batch % self.ppo_minibatch:
            raise field_error(self, "ppo_minibatch", f"does not divide train_batch={self.train_batch}",
                              "use a divisor of data.train_batch_size (paper: 128 / 32)")
        n = self.n_pilot + self.n_commit
        if n % self.data_parallel:
            raise field_error(self, "n_commit", f"n_pilot + n_commit = {n} is not a multiple of the "
                              f"{self.data_parallel} training GPUs (verl splits the batch evenly across them)",
                              "pick a pc.setting whose n is a multiple of trainer.nnodes * trainer.n_gpus_per_node")
        if self.max_rounds < 2:
            raise field_error(self, "max_rounds", "must be >= 2 for PC (step 0 pilots, then commits)", "use 10")

    @classmethod
    def from_config(cls, cfg) -> PCSettings:
        pc = cfg.pc
        return cls(
            train_batch=int(cfg.data.train_batch_size), ppo_minibatch=int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
            n_pilot=int(pc.n_pilot), n_commit=int(pc.n_commit), oversample=float(pc.oversample),
            p_lower=float(pc.p_lower), p_upper=float(pc.p_upper), p_solve=float(pc.p_solve), max_age=int(pc.max_age),
            max_rounds=int(pc.max_rounds), binding=bool(pc.binding), selection=str(pc.selection),
            data_parallel=int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node),
        )

    def allocator_config(self, seed: int) -> AllocatorConfig:
        """The allocator these settings describe (the band and its rules are validated there too)."""
        return AllocatorConfig(method="pc", train_batch=self.train_batch, n=self.n_pilot + self.n_commit,
                               n_pilot=self.n_pilot, oversample=self.oversample, p_lower=self.p_lower,
                               p_upper=self.p_upper, p_solve=self.p_solve, max_age=self.max_age,
                               max_rounds=self.max_rounds, binding=self.binding, selection=self.selection, seed=seed)


def run_overrides(config: RunConfig, policy_path: str | Path | None = None, nnodes: int | None = None,
                  gpus_per_node: int | None = None) -> list[str]:
    """Hydra overrides that make the recipe train exactly the run's resolved config (allocator + PPO settings),
    so the store's ``runs.config_json`` stays the one record of a run. Methods other than PC keep verl's own
    ``rollout.n`` (n) and the allocator decides the requests all the same."""
    a, t = config.allocator, config.training
    if t.dtype != "float32":
        raise field_error(t, "dtype", "the verl recipe trains in its own precision (FSDP mixed "
                          "precision on GPUs), so the run would not be what its config says",
                          "set training.dtype=float32 for verl runs (float64 is for the embedded CPU loop)")
    n_pilot = a.pilot_n if a.method == "pc" else 0
    out = [
        f"data.train_batch_size={a.train_batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={t.ppo_minibatch}",
        f"actor_rollout_ref.actor.clip_ratio_low={t.clip_low}",
        f"actor_rollout_ref.actor.clip_ratio_high={t.clip_high}",
        f"actor_rollout_ref.actor.clip_ratio_c={t.dual_clip_c}",
        f"actor_rollout_ref.actor.use_kl_loss={str(t.kl_coef > 0).lower()}",
        f"actor_rollout_ref.actor.kl_loss_coef={t.kl_coef}",
        f"actor_rollout_ref.actor.grad_clip={t.grad_clip}",
        f"actor_rollout_ref.actor.loss_agg_mode={t.loss_agg_mode}",
        f"actor_rollout_ref.actor.optim.lr={t.lr}",
        f"actor_rollout_ref.actor.optim.lr_warmup_steps={t.warmup_steps}",
        f"actor_rollout_ref.actor.optim.weight_decay={t.weight_decay}",
        f"actor_rollout_ref.rollout.temperature={t.temperature}",
        f"actor_rollout_ref.rollout.top_p={t.top_p}",
        f"data.max_response_length={t.max_response_length}",
        f"+pc.settings.run={{n_pilot: {n_pilot}, n_commit: {a.n - n_pilot}}}",
        "pc.setting=run",
        f"pc.oversample={a.oversample}", f"pc.p_lower={a.p_lower}", f"pc.p_upper={a.p_upper}",
        f"pc.p_solve={a.p_solve}", f"pc.max_age={a.max_age}", f"pc.max_rounds={a.max_rounds}",
        f"pc.binding={str(a.binding).lower()}", f"pc.selection={a.selection}",
    ]
    if policy_path is not None:
        out.append(f"actor_rollout_ref.model.path={policy_path}")
    if nnodes is not None:
        out.append(f"trainer.nnodes={nnodes}")
    if gpus_per_node is not None:
        out.append(f"trainer.n_gpus_per_node={gpus_per_node}")
    return out


REWARD_OVERRIDES = (
    # "pkg://": verl imports the module by name. Given this file's path it would load it as a loose file, whose
    # relative imports fail in every reward-loop worker (found on CPU with verl's real trainer).
    "reward.custom_reward_function.path=pkg://pc_pipelines.training.verl_recipe",
    "reward.custom_reward_function.name=null_score",
)
"""The recipe's reward hook for verl's reward loop: :func:`null_score`."""


def null_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """verl's reward hook for the agent loop: the recipe grades in the driver (overlong needs the finish reason,
    which a score function does not see), so the workers score nothing."""
    return 0.0


PLAIN_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
"""A chat template that returns the prompt as it is: the run's prompts are already templated (the task's own
format), and verl applies the tokenizer's chat template to every prompt (its dataset and its agent loop)."""


def _trust_keys(cfg) -> list[str]:
    """Every ``trust_remote_code`` key of a composed config, dotted."""
    from omegaconf import OmegaConf

    def walk(node, prefix: str):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "trust_remote_code":
                    yield f"{prefix}{key}"
                else:
                    yield from walk(value, f"{prefix}{key}.")

    return list(walk(OmegaConf.to_container(cfg, resolve=False), ""))


def no_remote_code(cfg) -> list[str]:
    """Refuse a recipe config that asks verl to run a model's own Python code (any ``trust_remote_code`` true:
    ``actor_rollout_ref.model``, ``critic.model``, ``reward_model.model``, ``data``) and a policy or tokenizer
    directory that needs it (an ``auto_map``, :func:`~pc_pipelines.training.base_policy.refuse_custom_code`); pin
    every such key to false (verl's workers read them). Returns the keys pinned."""
    from omegaconf import OmegaConf, open_dict

    keys = _trust_keys(cfg)
    values = {k: OmegaConf.select(cfg, k, default=None, throw_on_resolution_failure=False) for k in keys}
    asked = [k for k, v in values.items() if v and str(v).lower() not in ("false", "0", "none", "null")]
    if asked:
        raise ConfigError(
            f"{', '.join(f'{k}={values[k]}' for k in asked)}: pc-pipelines runs no Python code that "
            "comes with a model or tokenizer. Fix: drop the override (--recipe-set) and use a model whose "
            "architecture transformers ships (qwen2, llama, ...)."
        )
    with open_dict(cfg):
        for k in keys:
            OmegaConf.update(cfg, k, False)
    from .base_policy import refuse_custom_code  # torch: verl's driver has it

    model = cfg.actor_rollout_ref.model
    for what, path in (("the policy", model.get("path")), ("the tokenizer", model.get("tokenizer_path"))):
        if path and Path(str(path)).is_dir():
            refuse_custom_code(str(path), what)
    return keys


def plain_chat_template(cfg) -> bool:
    """Give a policy whose tokenizer has no chat template (the embedded task's) :data:`PLAIN_CHAT_TEMPLATE`, through
    verl's ``actor_rollout_ref.model.custom_chat_template`` (the tokenizer itself is not changed). A template set
    there already, or the tokenizer's own, is kept. Returns whether it set one. The tokenizer loads with
    ``trust_remote_code=False`` whatever the config says (:func:`no_remote_code` refuses one asking otherwise)."""
    from omegaconf import open_dict
    from transformers import AutoTokenizer

    model = cfg.actor_rollout_ref.model
    if model.get("custom_chat_template") is not None:
        return False
    tok = AutoTokenizer.from_pretrained(str(model.get("tokenizer_path") or model.path), trust_remote_code=False)
    if getattr(tok, "chat_template", None):
        return False
    with open_dict(cfg):
        model.custom_chat_template = PLAIN_CHAT_TEMPLATE
    return True


def minibatch_rows(rows: int, groups: int, groups_per_minibatch: int) -> int:
    """Rows per PPO minibatch of one update. verl cuts the batch into minibatches of ``ppo_mini_batch_size *
    rollout.n`` rows and asserts they divide it, but the recipe's groups have n_pilot + n_commit rows (rollout.n is
    n_commit), PC's commit strategies give groups of different sizes, and a shortfall step trains fewer groups than
    b_t. So: as many equal minibatches as the configured ``groups / groups_per_minibatch`` (b_t / ppo_mini_batch_size
    for a full step), or the nearest smaller count that divides the rows (found when verl's real trainer asserted
    ``24 % 16 != 0`` on a step of 3 groups of 8 rows)."""
    if rows < 1 or groups < 1 or groups_per_minibatch < 1:
        raise ValueError(f"minibatch_rows({rows}, {groups}, {groups_per_minibatch}): every count must be >= 1.")
    want = max(1, groups // groups_per_minibatch)
    count = max(k for k in range(1, min(want, rows) + 1) if rows % k == 0)
    return rows // count


# ---- needs Ray workers (GPUs, or CPUs with the test platform of tests/support/verl_cpu_platform.py) ---------------
def trainer_class():
    """``PCRayTrainer``, a :class:`verl.trainer.ppo.ray_trainer.RayPPOTrainer` with what the verl backend
    (:class:`pc_pipelines.run.verl.VerlBackend`) asks of it: generation calls, one PPO update on a batch of trained
    groups, weight syncs, its actor checkpoint and an HF export. Built lazily (importing verl's Ray trainer pulls in
    Ray and its workers). Runs in CI on CPU (tests/integration/run/test_verl_backend_cpu.py); not yet on GPUs."""
    import contextlib

    import torch
    from verl.trainer.ppo.ray_trainer import AdvantageEstimator, RayPPOTrainer, compute_advantage, compute_response_mask
    from verl.utils.metric import reduce_metrics

    class PCRayTrainer(RayPPOTrainer):
        """Experimental. ``init_workers`` first; the backend drives the rest."""

        weight_version = 0

        @property
        def eos_token_id(self):
            return self.tokenizer.eos_token_id

        def decode(self, token_ids):
            return self.tokenizer.decode(token_ids, skip_special_tokens=True)

        def generate_sequences(self, batch):
            out = self.async_rollout_manager.generate_sequences(batch)
            out.meta_info.pop("timing", None)
            return out

        def sleep_replicas(self) -> None:
            self.checkpoint_manager.sleep_replicas()

        def update_policy(self, batch) -> dict[str, float]:
            """verl's own pieces on the trained groups: response mask, balance, old log-probs (recomputed for the
            whole batch, lagged pilots included, as the paper's recipe does), GRPO advantages over ``uid``, the
            actor update."""
            metrics: dict[str, float] = {}
            batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
            if "response_mask" not in batch.batch.keys():  # noqa: SIM118 - a TensorDict, as in verl's ray_trainer
                batch.batch["response_mask"] = compute_response_mask(batch)
            if self.config.trainer.balance_batch:
                self._balance_batch(batch, metrics=metrics)
            batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
            old_log_prob, _ = self._compute_old_log_prob(batch)
            old_log_prob.batch.pop("entropys", None)
            batch = batch.union(old_log_prob)
            batch = compute_advantage(batch, adv_estimator=AdvantageEstimator.GRPO,
                                      norm_adv_by_std_in_grpo=self.config.algorithm.norm_adv_by_std_in_grpo,
                                      config=self.config.algorithm)
            rows = minibatch_rows(len(batch), len(set(batch.non_tensor_batch["uid"].tolist())),
                                  int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size))
            with self._minibatch_config(1, rows):
                actor_output = self._update_actor(batch)
            metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
            return metrics

        @contextlib.contextmanager
        def _minibatch_config(self, per_minibatch: int, rows: int):
            """verl's ``_update_actor`` reads its minibatch rows from ``ppo_mini_batch_size * rollout.n`` in the
            driver's config: set them to (``per_minibatch``, ``rows``) for this update only."""
            from omegaconf import open_dict

            arr = self.config.actor_rollout_ref
            saved = arr.actor.ppo_mini_batch_size, arr.rollout.n
            with open_dict(self.config):
                arr.actor.ppo_mini_batch_size, arr.rollout.n = per_minibatch, rows
            try:
                yield
            finally:
                with open_dict(self.config):
                    arr.actor.ppo_mini_batch_size, arr.rollout.n = saved

        def sync_weights(self) -> None:
            self.checkpoint_manager.update_weights(self.weight_version)
            self.weight_version += 1

        def save_actor(self, directory) -> None:
            self.actor_rollout_wg.save_checkpoint(str(directory), None, self.weight_version, max_ckpt_to_keep=None)

        def load_actor(self, directory) -> None:
            self.actor_rollout_wg.load_checkpoint(str(directory), del_local_after_load=False)

        def export_hf(self, directory):
            """The actor's weights as an HF directory: its checkpoint with ``hf_model`` among verl's
            ``checkpoint.save_contents`` (the recipe's config), read from ``huggingface/``."""
            self.save_actor(directory)
            return directory / "huggingface"

    return PCRayTrainer
