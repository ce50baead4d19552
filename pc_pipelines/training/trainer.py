"""The GRPO policy update, built on verl's own advantage and policy-loss functions (docs/DESIGN.md section 3).

:meth:`PolicyTrainer.train_step` trains one training step's batch of groups: group-normalized advantages (verl's
``compute_grpo_outcome_advantage``), old log-probs recomputed for the whole batch under the current policy, PPO
minibatches of whole groups, verl's clipped policy loss, AdamW at the step's learning rate (:func:`lr_at_step`).
Each choice, and where it departs from the paper's text (the unbiased std, as verl and the paper's runs use):
docs/TRAINING.md, "The policy update".
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ..config import TrainingConfig
from ..errors import ConfigError
from ..steps import step_number

logger = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1
STATE_MAX_DEPTH = 32
"""How deep a trainer state's values may nest (the optimizer's own: 5 levels)."""
ADV_EPSILON = 1e-6
_SHUFFLE_SALT = 0x50C0  # separates the trainer's (seed, step) streams from other users of the run seed


@dataclass(frozen=True)
class RolloutBatch:
    """The trained batch, one row per rollout (flattened groups; group members contiguous or not)."""

    prompt_ids: list[list[int]]
    """Prompt token ids per rollout, no padding, at least one token."""
    response_ids: list[list[int]]
    """Response token ids per rollout (includes the eos token when the response finished)."""
    rewards: np.ndarray
    """float [N]: outcome reward per rollout."""
    group_index: np.ndarray
    """int64 [N]: GRPO group id per rollout (rollouts with equal id are normalized together)."""

    def __post_init__(self) -> None:
        n = len(self.prompt_ids)
        rewards = np.asarray(self.rewards, dtype=np.float64).reshape(-1)
        groups = np.asarray(self.group_index).reshape(-1)
        if len(self.response_ids) != n or rewards.shape[0] != n or groups.shape[0] != n:
            raise ValueError(
                f"RolloutBatch: prompt_ids ({n}), response_ids ({len(self.response_ids)}), rewards "
                f"({rewards.shape[0]}) and group_index ({groups.shape[0]}) must have one entry per rollout"
            )
        if not np.all(np.isfinite(rewards)):
            raise ValueError("RolloutBatch: rewards must be finite")
        for i, p in enumerate(self.prompt_ids):
            if len(p) == 0:
                raise ValueError(f"RolloutBatch: rollout {i} has an empty prompt (need >= 1 token to condition on)")
        object.__setattr__(self, "rewards", rewards)
        object.__setattr__(self, "group_index", groups)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_groups(self) -> int:
        return int(np.unique(self.group_index).size) if len(self) else 0


@dataclass(frozen=True)
class TrainStats:
    """What one training step did. Means are over the step; 0.0 where nothing was measured (no rollouts)."""

    loss: float
    """Policy loss, mean over the step's minibatches (each minibatch's loss as verl aggregates it)."""
    pg_clipfrac: float
    """Fraction of response tokens whose ratio was clipped (token-weighted over the step)."""
    pg_clipfrac_lower: float
    """Fraction of tokens hit by the dual clip (negative advantages, ratio > c)."""
    ppo_kl: float
    """Token-weighted mean of log(old) - log(new) over the step: how far the updates moved the policy."""
    grad_norm: float
    """Mean over the updates of the pre-clipping global gradient norm."""
    lr: float
    """Learning rate of this training step (:func:`lr_at_step`)."""
    updates: int
    """Optimizer updates taken (ceil(groups / ppo_minibatch) unless some were skipped)."""
    skipped_updates: int
    """Minibatches whose gradient norm was not finite: no update (as verl)."""
    adv_abs_mean: float
    """Mean |advantage| over rollouts."""
    entropy: float
    """Token-mean entropy of the pre-update policy (at the training temperature); 0.0 if not computed."""
    tokens: int
    """Response tokens trained on."""
    rollouts: int
    groups: int
    zero_adv_groups: int
    """Groups whose advantage is zero (all rewards equal, or one member)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lr_at_step(config: TrainingConfig, step: int) -> float:
    """Learning rate of training step ``step`` (0-based): verl's constant schedule with linear warmup.

    verl builds ``LambdaLR(lambda s: s / warmup if s < warmup else 1)`` and steps it once after each training
    step, so step ``t`` trains at ``lr * t / warmup_steps`` while ``t < warmup_steps`` (step 0 at LR 0), then ``lr``.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if step < config.warmup_steps:
        return config.lr * float(step) / float(max(1, config.warmup_steps))
    return config.lr


# ----------------------------------------------------------------------------------------------------------------
# Advantage


def _response_mask(lengths: Sequence[int], width: int, device: torch.device | str = "cpu") -> torch.Tensor:
    lens = torch.as_tensor(list(lengths), dtype=torch.long, device=device)
    return (torch.arange(width, device=device)[None, :] < lens[:, None]).to(torch.float32)


def grpo_token_advantages(
    rewards: np.ndarray,
    group_index: np.ndarray,
    response_mask: torch.Tensor,
    epsilon: float = ADV_EPSILON,
) -> tuple[torch.Tensor, np.ndarray]:
    """Per-token GRPO advantages [N, R] via verl's ``compute_grpo_outcome_advantage``.

    The reward of rollout i is placed on its last valid response token (column 0 if the response is empty: the
    group statistics still see it, its masked advantage row is all zero). Returns the advantages (zero outside the
    mask) and a bool [N] array marking rollouts whose group is degenerate (one member, or all rewards equal), which
    get exactly zero advantage (see the module docstring).
    """
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    group_index = np.asarray(group_index).reshape(-1)
    n = rewards.shape[0]
    if response_mask.ndim != 2 or response_mask.shape[0] != n:
        raise ValueError(f"response_mask must be [N={n}, R], got {tuple(response_mask.shape)}")
    if n == 0:
        return torch.zeros_like(response_mask, dtype=torch.float32), np.zeros(0, dtype=bool)
    mask = response_mask.to(torch.float32)
    width = max(1, mask.shape[1])
    if mask.shape[1] == 0:
        mask = torch.zeros(n, 1, dtype=torch.float32, device=response_mask.device)
    lengths = mask.sum(dim=-1).to(torch.long)
    last = (lengths - 1).clamp(min=0)
    token_rewards = torch.zeros(n, width, dtype=torch.float32, device=mask.device)
    token_rewards[torch.arange(n, device=mask.device), last] = torch.as_tensor(
        rewards, dtype=torch.float32, device=mask.device
    )
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=group_index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=True,
    )
    _, inverse, counts = np.unique(group_index, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    group_min = np.full(counts.size, np.inf)
    group_max = np.full(counts.size, -np.inf)
    np.minimum.at(group_min, inverse, rewards)
    np.maximum.at(group_max, inverse, rewards)
    degenerate = ((counts == 1) | (group_min == group_max))[inverse]
    if degenerate.any():
        advantages = advantages.clone()
        advantages[torch.as_tensor(degenerate, device=advantages.device)] = 0.0
    return advantages[:, : response_mask.shape[1]], degenerate


def grpo_advantages(rewards: np.ndarray, group_index: np.ndarray, epsilon: float = ADV_EPSILON) -> np.ndarray:
    """Per-rollout GRPO advantage (float64 [N]): :func:`grpo_token_advantages` on one-token responses."""
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    adv, _ = grpo_token_advantages(rewards, group_index, torch.ones(rewards.shape[0], 1), epsilon)
    return adv[:, 0].double().numpy()


# ----------------------------------------------------------------------------------------------------------------
# Policy loss


def make_actor_config(config: TrainingConfig) -> Any:
    """verl's ``ActorConfig`` carrying exactly what its ``vanilla`` policy loss reads.

    ``compute_policy_loss_vanilla`` reads ``clip_ratio``, ``clip_ratio_low``, ``clip_ratio_high``,
    ``clip_ratio_c`` and ``global_batch_info`` (passed to ``agg_loss``); ``strategy``, ``rollout_n`` and
    ``ppo_micro_batch_size_per_gpu`` are required by the dataclass's validation and are labels only here.
    """
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_mini_batch_size=config.ppo_minibatch,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=config.clip_low,
        clip_ratio_low=config.clip_low,
        clip_ratio_high=config.clip_high,
        clip_ratio_c=config.dual_clip_c,
        loss_agg_mode=config.loss_agg_mode,
        loss_scale_factor=config.max_response_length,
        use_kl_loss=False,
        use_torch_compile=False,
    )


def clipped_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: TrainingConfig,
    *,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    actor_config: Any | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's ``vanilla`` clipped PPO loss with the run's clip settings and ``loss_agg_mode``.

    ``batch_num_tokens`` / ``global_batch_size`` are the minibatch's valid-token and non-empty-sequence counts when
    this call sees only a micro-batch of it (default: this call's own counts), so that summing micro-batch losses
    gives the minibatch loss. Returns ``(loss, metrics)`` with verl's metric names.
    """
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    cfg = actor_config if actor_config is not None else make_actor_config(config)
    mask = response_mask.to(log_prob.dtype)
    if batch_num_tokens is None:
        batch_num_tokens = int(mask.sum().item())
    if global_batch_size is None:
        global_batch_size = int((mask.sum(dim=-1) > 0).sum().item())
    cfg.global_batch_info.clear()
    cfg.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=max(1, int(batch_num_tokens)),
        global_batch_size=max(1, int(global_batch_size)),
        loss_scale_factor=config.max_response_length,
    )
    loss_fn = get_policy_loss_fn("vanilla")
    return loss_fn(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=cfg,
    )


# ----------------------------------------------------------------------------------------------------------------
# Trainer


@dataclass
class _MicroBatch:
    """One forward/backward's rows, padded; all tensors on the CPU."""

    rows: np.ndarray  # indices into the step's batch
    input_ids: torch.Tensor  # [b, P + R]
    attention_mask: torch.Tensor  # [b, P + R]
    position_ids: torch.Tensor  # [b, P + R]
    response_ids: torch.Tensor  # [b, R]
    response_mask: torch.Tensor  # [b, R] float
    advantages: torch.Tensor  # [b, R]
    old_log_prob: torch.Tensor | None = None  # [b, R]

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum().item())


class PolicyTrainer:
    """GRPO/PPO updates of a causal LM from flattened rollout groups (see the module docstring).

    ``micro_batch_size`` (rows) or ``micro_batch_tokens`` (padded prompt+response tokens, at least one row) bound
    the memory of one forward/backward; neither means one micro-batch per minibatch. ``train_batch`` is the
    run's groups-per-step ceiling (b_t): a batch with more groups is refused, and ``ppo_minibatch`` may not exceed
    it. The model is moved to ``device`` (``nn.Module.to``, in place).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: TrainingConfig,
        pad_token_id: int,
        train_batch: int,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        micro_batch_size: int | None = None,
        micro_batch_tokens: int | None = None,
        compute_entropy: bool = True,
    ) -> None:
        if config.kl_coef > 0:
            raise ConfigError(
                f"TrainingConfig.kl_coef={config.kl_coef!r}: the embedded trainer has no KL term (the paper and its "
                "recipe use none; there is no reference model here). Fix: set training.kl_coef=0."
            )
        if train_batch < 1:
            raise ConfigError(f"train_batch={train_batch!r} must be >= 1. Fix: pass the run's b_t.")
        if config.ppo_minibatch > train_batch:
            raise ConfigError(
                f"TrainingConfig.ppo_minibatch={config.ppo_minibatch} exceeds train_batch={train_batch} (verl refuses "
                "this too). Fix: set training.ppo_minibatch <= the train batch."
            )
        if micro_batch_size is not None and micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1 or None, got {micro_batch_size}")
        if micro_batch_tokens is not None and micro_batch_tokens < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1 or None, got {micro_batch_tokens}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.config = config
        self.pad_token_id = int(pad_token_id)
        self.train_batch = int(train_batch)
        self.seed = int(seed)
        self.device = torch.device(device)
        self.micro_batch_size = micro_batch_size
        self.micro_batch_tokens = micro_batch_tokens
        self.compute_entropy = compute_entropy
        self.model = model.to(self.device)
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            self._params,
            lr=lr_at_step(config, 0),
            betas=(0.9, 0.999),
            eps=1e-8,
            weight_decay=config.weight_decay,
        )
        self._actor_config = make_actor_config(config)
        try:
            fwd_params = inspect.signature(self.model.forward).parameters
        except (TypeError, ValueError):
            fwd_params = {}
        self._forward_kwargs: dict[str, Any] = {}
        if "use_cache" in fwd_params:
            self._forward_kwargs["use_cache"] = False
        self._logits_to_keep = "logits_to_keep" in fwd_params
        self.last_step: int | None = None

    # -- public API -------------------------------------------------------------------------------------------

    def train_step(self, batch: RolloutBatch, step: int) -> TrainStats:
        """Train on one step's batch: old log-probs for the whole batch, then one AdamW update per PPO minibatch."""
        lr = lr_at_step(self.config, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n_groups = batch.num_groups
        if n_groups > self.train_batch:
            raise ValueError(
                f"batch has {n_groups} groups, more than train_batch={self.train_batch}. Fix: train at most b_t groups "
                "per step (or construct the trainer with the run's train batch)."
            )
        self.last_step = int(step)
        if len(batch) == 0:
            logger.info("step %d: empty batch, no update (lr %.3g)", step_number(step), lr)
            return TrainStats(
                loss=0.0, pg_clipfrac=0.0, pg_clipfrac_lower=0.0, ppo_kl=0.0, grad_norm=0.0, lr=lr, updates=0,
                skipped_updates=0, adv_abs_mean=0.0, entropy=0.0, tokens=0, rollouts=0, groups=0, zero_adv_groups=0,
            )

        with self._step_rng(step):
            minibatches, adv_scalar, degenerate = self._plan(batch, step)
            entropy_sum, tokens = self._compute_old_log_probs(minibatches)
            losses, grad_norms = [], []
            clip_sum = clip_lower_sum = kl_sum = 0.0
            updates = skipped = 0
            self.model.train()
            for micro_batches in minibatches:
                self.optimizer.zero_grad(set_to_none=True)
                loss, metrics = self._backward_minibatch(micro_batches)
                clip_sum += metrics["clip"]
                clip_lower_sum += metrics["clip_lower"]
                kl_sum += metrics["kl"]
                losses.append(loss)
                grad_norm = self._clip_gradients()
                grad_norms.append(grad_norm)
                if math.isfinite(grad_norm):
                    self.optimizer.step()
                    updates += 1
                else:
                    logger.warning("step %d: gradient norm %s is not finite, update skipped", step_number(step), grad_norm)
                    skipped += 1
                self.optimizer.zero_grad(set_to_none=True)

        n_zero_groups = int(np.unique(batch.group_index[degenerate]).size)
        finite_norms = [g for g in grad_norms if math.isfinite(g)]
        stats = TrainStats(
            loss=float(np.mean(losses)),
            pg_clipfrac=clip_sum / max(1, tokens),
            pg_clipfrac_lower=clip_lower_sum / max(1, tokens),
            ppo_kl=kl_sum / max(1, tokens),
            grad_norm=float(np.mean(finite_norms)) if finite_norms else float("nan"),
            lr=lr,
            updates=updates,
            skipped_updates=skipped,
            adv_abs_mean=float(np.mean(np.abs(adv_scalar))),
            entropy=entropy_sum / max(1, tokens) if self.compute_entropy else 0.0,
            tokens=tokens,
            rollouts=len(batch),
            groups=n_groups,
            zero_adv_groups=n_zero_groups,
        )
        logger.info(
            "step %d: %d groups, %d rollouts, %d tokens, %d updates, loss %.4g, clipfrac %.3g, kl %.3g, "
            "grad_norm %.3g, lr %.3g",
            step_number(step), n_groups, len(batch), tokens, updates, stats.loss, stats.pg_clipfrac, stats.ppo_kl,
            stats.grad_norm, lr,
        )  # fmt: skip
        return stats

    def accumulate_gradient(self, batch: RolloutBatch, step: int = 0) -> tuple[float, int]:
        """Diagnostics: the gradient of the whole batch taken as ONE minibatch, left in the parameters' ``.grad``.

        Recomputes old log-probs as :meth:`train_step` does, uses this trainer's micro-batching, takes no optimizer
        step and no clipping. Returns ``(loss, tokens)``. Call ``trainer.optimizer.zero_grad()`` afterwards to free.
        """
        if len(batch) == 0:
            return 0.0, 0
        with self._step_rng(step):
            micro_batches, _, _ = self._plan(batch, step, one_minibatch=True)
            _, tokens = self._compute_old_log_probs(micro_batches)
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            loss, _ = self._backward_minibatch(micro_batches[0])
        return loss, tokens

    @torch.no_grad()
    def sequence_logprobs(self, batch: RolloutBatch) -> list[torch.Tensor]:
        """Per-token log-probs (float32, CPU) of each rollout's response under the current policy (eval mode)."""
        if len(batch) == 0:
            return []
        rows = np.arange(len(batch))
        zeros = torch.zeros(len(batch))
        out: list[torch.Tensor] = [torch.empty(0)] * len(batch)
        self.model.eval()
        for mb in self._micro_batches(batch, rows, zeros):
            logp, _ = self._forward(mb, with_entropy=False)
            logp = logp.float().cpu()
            for j, i in enumerate(mb.rows):
                out[int(i)] = logp[j, : len(batch.response_ids[int(i)])].clone()
        return out

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state plus what a resume checks. The LR is a function of the step, so there is no scheduler."""
        return {
            "format": STATE_FORMAT_VERSION,
            "optimizer": self.optimizer.state_dict(),
            "last_step": self.last_step,
            "seed": self.seed,
        }

    def state_problem(self, state: Any) -> str | None:
        """None when ``state`` is a trainer state this trainer can load (what :meth:`state_dict` writes: its format,
        plain values nested at most :data:`STATE_MAX_DEPTH` deep, and per parameter of the optimizer tensors of its
        shape, saved whole: no stride 0), else what is wrong with it, one line. Runs nothing of the state, recurses
        into nothing (a value nested 100,000 deep is found without a RecursionError)."""
        deep = _nesting_problem(state, STATE_MAX_DEPTH)
        if deep:
            return deep
        if not isinstance(state, dict):
            return f"it holds a {type(state).__name__}, not a trainer state"
        if state.get("format") != STATE_FORMAT_VERSION:
            return f"its format is {_short(state.get('format'))}, this version reads {STATE_FORMAT_VERSION}"
        for key in ("last_step", "seed"):
            value = state.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                return f"its {key} is {_short(value)}, not a whole number"
        opt = state.get("optimizer")
        if not isinstance(opt, dict) or not isinstance(opt.get("state"), dict) or not isinstance(
                opt.get("param_groups"), list):
            return "its optimizer state is not a dict of state and param_groups"
        live_groups = self.optimizer.state_dict()["param_groups"]
        if len(opt["param_groups"]) != len(live_groups):
            return f"it has {len(opt['param_groups'])} optimizer parameter groups, this trainer {len(live_groups)}"
        for i, (group, live) in enumerate(zip(opt["param_groups"], live_groups)):
            if not isinstance(group, dict) or group.get("params") != live["params"]:
                return f"optimizer parameter group {i} does not list parameters {_short(live['params'])}"
            for key, value in group.items():
                if key != "params" and not _flat_value(value):
                    return f"optimizer parameter group {i}: {_short(key)} is {_short(value)}, not a number or flag"
        params = dict(enumerate(self._params))
        for index, per_param in opt["state"].items():
            if index not in params:
                return f"its optimizer state is for parameter {_short(index)}, this model has 0..{len(params) - 1}"
            if not isinstance(per_param, dict):
                return f"optimizer state of parameter {index} is a {type(per_param).__name__}, not a dict"
            param = params[index]
            for name, value in per_param.items():
                if not isinstance(value, torch.Tensor):
                    if _flat_value(value):
                        continue
                    return f"optimizer state of parameter {index}: {_short(name)} is {_short(value)}, not a tensor"
                what = f"optimizer state of parameter {index}: {name if isinstance(name, str) else _short(name)}"
                if value.layout != torch.strided or not value.is_floating_point():
                    return f"{what} is a {value.dtype} {value.layout} tensor, not a floating point one"
                if not value.is_contiguous():
                    return (f"{what} has stride {tuple(value.stride())} for shape {list(value.shape)}: not a tensor "
                            "saved whole (stride 0 repeats one value)")
                want = [] if name == "step" else list(param.shape)
                if list(value.shape) != want:
                    return f"{what} has shape {list(value.shape)}, its parameter {list(param.shape)}"
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        problem = self.state_problem(state)
        if problem is not None:
            raise ValueError(f"trainer state: {problem}")
        if state.get("seed") != self.seed:
            logger.warning(
                "trainer state was saved with seed %s, this trainer has seed %s: minibatch order will differ",
                state.get("seed"), self.seed,
            )  # fmt: skip
        self.optimizer.load_state_dict(state["optimizer"])
        self.last_step = state.get("last_step")

    # -- internals --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _step_rng(self, step: int) -> Iterator[None]:
        """Fork the torch RNG and seed it from (seed, step): dropout (if any) is reproducible and resumable."""
        devices = []
        if self.device.type == "cuda":
            devices = [self.device.index if self.device.index is not None else torch.cuda.current_device()]
        with torch.random.fork_rng(devices=devices):
            derived = np.random.SeedSequence([self.seed, int(step), _SHUFFLE_SALT, 1]).generate_state(1)[0]
            torch.manual_seed(int(derived))
            yield

    def _group_order(self, group_index: np.ndarray, step: int) -> list[np.ndarray]:
        """Rows of each group, groups in this step's shuffled order."""
        ids, inverse, counts = np.unique(group_index, return_inverse=True, return_counts=True)
        by_group = np.split(np.argsort(inverse.reshape(-1), kind="stable"), np.cumsum(counts)[:-1])
        rng = np.random.default_rng([self.seed, int(step), _SHUFFLE_SALT])
        return [by_group[g] for g in rng.permutation(ids.size)]

    def _plan(
        self, batch: RolloutBatch, step: int, one_minibatch: bool = False
    ) -> tuple[list[list[_MicroBatch]], np.ndarray, np.ndarray]:
        lengths = [len(r) for r in batch.response_ids]
        width = max(1, max(lengths))
        # On CPU: verl's GRPO advantage loops over rollouts in Python (many tiny kernels on a GPU).
        mask = _response_mask(lengths, width)
        advantages, degenerate = grpo_token_advantages(batch.rewards, batch.group_index, mask)
        last = torch.as_tensor([max(0, n - 1) for n in lengths])
        adv_scalar = advantages[torch.arange(len(batch)), last] * (mask.sum(-1) > 0)
        del advantages, mask  # verl's output is adv_scalar broadcast over the mask: rebuilt per micro-batch
        groups = self._group_order(batch.group_index, step)
        size = len(groups) if one_minibatch else self.config.ppo_minibatch
        minibatches = []
        for start in range(0, len(groups), size):
            rows = np.concatenate(groups[start : start + size])
            minibatches.append(self._micro_batches(batch, rows, adv_scalar))
        return minibatches, adv_scalar.double().numpy(), degenerate

    def _split_rows(self, batch: RolloutBatch, rows: np.ndarray) -> list[np.ndarray]:
        if self.micro_batch_size is None and self.micro_batch_tokens is None:
            return [rows]
        chunks: list[np.ndarray] = []
        current: list[int] = []
        max_p = max_r = 0
        for i in rows:
            p, r = len(batch.prompt_ids[i]), max(1, len(batch.response_ids[i]))
            new_p, new_r = max(max_p, p), max(max_r, r)
            too_many = self.micro_batch_size is not None and len(current) + 1 > self.micro_batch_size
            budget = self.micro_batch_tokens
            too_long = budget is not None and (len(current) + 1) * (new_p + new_r) > budget
            if current and (too_many or too_long):
                chunks.append(np.asarray(current))
                current, new_p, new_r = [], p, r
            current.append(int(i))
            max_p, max_r = new_p, new_r
        if current:
            chunks.append(np.asarray(current))
        return chunks

    def _micro_batches(self, batch: RolloutBatch, rows: np.ndarray, adv_scalar: torch.Tensor) -> list[_MicroBatch]:
        """Padded micro-batches of ``rows``, kept on the CPU (moved to the device one at a time when used)."""
        out = []
        for chunk in self._split_rows(batch, rows):
            prompts = [batch.prompt_ids[i] for i in chunk]
            responses = [batch.response_ids[i] for i in chunk]
            p_len = max(len(p) for p in prompts)
            r_len = max(1, max(len(r) for r in responses))
            b = len(chunk)
            ids = torch.full((b, p_len + r_len), self.pad_token_id, dtype=torch.long)
            attn = torch.zeros((b, p_len + r_len), dtype=torch.long)
            for j, (p, r) in enumerate(zip(prompts, responses, strict=True)):
                ids[j, p_len - len(p) : p_len] = torch.as_tensor(p, dtype=torch.long)
                attn[j, p_len - len(p) : p_len] = 1
                if r:
                    ids[j, p_len : p_len + len(r)] = torch.as_tensor(r, dtype=torch.long)
                    attn[j, p_len : p_len + len(r)] = 1
            position_ids = (attn.cumsum(dim=-1) - 1).clamp(min=0)
            resp_mask = _response_mask([len(r) for r in responses], r_len)
            adv = adv_scalar.index_select(0, torch.as_tensor(chunk, dtype=torch.long)).to(torch.float32)[:, None]
            out.append(
                _MicroBatch(
                    rows=chunk,
                    input_ids=ids,
                    attention_mask=attn,
                    position_ids=position_ids,
                    response_ids=ids[:, p_len:],
                    response_mask=resp_mask,
                    advantages=adv * resp_mask,
                )
            )
        return out

    def _forward(self, mb: _MicroBatch, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Response log-probs [b, R] (and entropies) at the training temperature."""
        import verl.utils.torch_functional as verl_F

        r_len = mb.response_ids.shape[1]
        kwargs = dict(self._forward_kwargs)
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = r_len + 1
        dev = self.device
        out = self.model(
            input_ids=mb.input_ids.to(dev),
            attention_mask=mb.attention_mask.to(dev),
            position_ids=mb.position_ids.to(dev),
            **kwargs,
        )
        logits = out.logits if hasattr(out, "logits") else out[0]
        # logits at position k predict token k + 1: responses start at column P, predicted from P - 1 ... P + R - 2.
        logits = logits[:, -(r_len + 1) : -1, :]
        if logits.dtype not in (torch.float32, torch.float64):  # half precision: log-probs in float32
            logits = logits.float()
        logits = logits / self.config.temperature
        log_prob = verl_F.logprobs_from_logits(logits, mb.response_ids.to(dev))
        entropy = verl_F.entropy_from_logits(logits) if with_entropy else None
        return log_prob, entropy

    @torch.no_grad()
    def _compute_old_log_probs(self, minibatches: list[list[_MicroBatch]]) -> tuple[float, int]:
        """Old log-probs of the whole batch under the current policy, before any update.

        Returns (entropy sum over response tokens, response tokens)."""
        self.model.eval()
        entropy_sum, tokens = 0.0, 0
        for micro_batches in minibatches:
            for mb in micro_batches:
                logp, entropy = self._forward(mb, with_entropy=self.compute_entropy)
                mb.old_log_prob = logp.detach().cpu()
                tokens += mb.num_tokens
                if entropy is not None:
                    entropy_sum += float((entropy.cpu() * mb.response_mask).sum().item())
        return entropy_sum, tokens

    def _backward_minibatch(self, micro_batches: list[_MicroBatch]) -> tuple[float, dict[str, float]]:
        """Accumulate the minibatch's gradient over its micro-batches; returns (loss, token-weighted metric sums)."""
        num_tokens = sum(mb.num_tokens for mb in micro_batches)
        num_seqs = sum(int((mb.response_mask.sum(-1) > 0).sum().item()) for mb in micro_batches)
        loss_total = 0.0
        sums = {"clip": 0.0, "clip_lower": 0.0, "kl": 0.0}
        for mb in micro_batches:
            log_prob, _ = self._forward(mb, with_entropy=False)
            assert mb.old_log_prob is not None
            dev = self.device
            loss, metrics = clipped_policy_loss(
                mb.old_log_prob.to(dev),
                log_prob,
                mb.advantages.to(dev),
                mb.response_mask.to(dev),
                self.config,
                batch_num_tokens=num_tokens,
                global_batch_size=num_seqs,
                actor_config=self._actor_config,
            )
            loss.backward()
            loss_total += float(loss.detach().item())
            n = mb.num_tokens
            sums["clip"] += metrics["actor/pg_clipfrac"] * n
            sums["clip_lower"] += metrics["actor/pg_clipfrac_lower"] * n
            sums["kl"] += metrics["actor/ppo_kl"] * n
        return loss_total, sums

    def _clip_gradients(self) -> float:
        max_norm = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self._params, max_norm=max_norm)
        return float(norm.item())


def _short(value: Any) -> str:
    """``repr(value)`` cut to 80 characters (a value echoed in an error)."""
    text = repr(value) if not isinstance(value, (list, tuple, dict)) or len(value) < 100 else \
        f"a {type(value).__name__} of {len(value)}"
    return text if len(text) <= 80 else text[:77] + "..."


def _flat_value(value: Any) -> bool:
    """A value of an optimizer's parameter group or per-parameter state: None, a number, a flag, a name, or a short
    tuple of numbers (Adam's betas)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, torch.Tensor):  # a learning rate kept as a tensor (capturable optimizers)
        return value.numel() <= 1
    return isinstance(value, (tuple, list)) and len(value) <= 8 and all(
        isinstance(v, (bool, int, float)) for v in value)


def _nesting_problem(obj: Any, limit: int) -> str | None:
    """None when the dicts, lists and tuples of ``obj`` nest at most ``limit`` deep, else which top-level key's
    value nests deeper. Walked with a stack, not recursion."""
    stack: list[tuple[Any, int, Any]] = [(obj, 0, None)]
    while stack:
        value, depth, top = stack.pop()
        if depth > limit:
            what = "it" if top is None else top if isinstance(top, str) else _short(top)
            return f"{what} is nested deeper than {limit} levels"
        if isinstance(value, dict):
            stack.extend((v, depth + 1, k if depth == 0 else top) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1, top) for v in value)
    return None

