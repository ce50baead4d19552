"""The policy update's and the local loop's typed configuration: PPO settings, sampling, evaluation, checkpoints."""

from __future__ import annotations

import string
from dataclasses import dataclass

from ..errors import brief, check_finite, field_error

DTYPES = ("float32", "float64")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class TrainingConfig:
    ppo_minibatch: int = 32
    """Prompts per PPO minibatch: train_batch / ppo_minibatch optimizer updates per step (128 / 32 = 4)."""
    lr: float = 1e-6
    """AdamW learning rate after warmup."""
    warmup_steps: int = 10
    """Linear LR warmup, counted in training steps."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global gradient norm."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (1 - clip_low)."""
    clip_high: float = 0.28
    """PPO ratio clip above 1 (1 + clip_high), DAPO's clip-higher."""
    dual_clip_c: float = 10.0
    """Dual-clip constant c for negative advantages (verl's clip_ratio_c)."""
    kl_coef: float = 0.0
    """KL penalty coefficient (none in the paper)."""
    loss_agg_mode: str = "token-mean"
    """verl loss aggregation: token-mean (recipe) or seq-mean-token-mean (the paper's eq. 1)."""
    temperature: float = 1.0
    """Training rollout temperature."""
    top_p: float = 1.0
    """Training rollout nucleus sampling."""
    eval_temperature: float = 0.7
    """Evaluation temperature (paper text 0.7)."""
    eval_top_p: float = 1.0
    """Evaluation nucleus sampling."""
    max_response_length: int = 8192
    """Max new tokens per rollout; an overlong (truncated) response scores overlong_reward."""
    overlong_reward: float = 0.0
    """Reward of a truncated response."""
    eval_every: int = 5
    """Evaluate every this many training steps (unless ``eval_every_rollouts`` is set)."""
    eval_every_rollouts: int = 0
    """Evaluate after each step whose sampled rollouts cross a multiple of this count (0: off, ``eval_every`` steps
    decide). Runs whose steps sample different counts (PC against GRPO, groups of 4 against 64) are then evaluated
    at the same cadence in what they spend, so "first evaluation at or above the target" charges every arm the same
    granularity. Replaces ``eval_every`` when set."""
    prompt_template: str = "{question} Let's think step by step and output the final answer within \\boxed{{}}."
    """Prompt template; {question} is the dataset question."""
    torch_threads: int = 1
    """Torch intra-op threads of the local loop. Part of the behaviour: float reductions, hence exact results,
    depend on it. One is fastest for tiny models on a shared CPU."""
    dtype: str = "float32"
    """Parameter and compute dtype of the local loop's policy (rollouts, updates, evaluation): float32 or float64.
    float32 results depend on the CPU's kernels (PyTorch picks AVX-512, AVX2 or scalar code at run time and they
    round differently), and a sampled run amplifies the last-bit differences into another trajectory after tens of
    steps. In float64 those differences are ~1e-16 and never flip a sampled token in a benchmark-length run, so a
    seed gives the same run on any x86 CPU, at about 1.5x the step time. The warm start is stored in float32 and
    cast up exactly. The verl backend trains in its own precision and refuses float64."""
    eval_samples: int = 4
    """Samples per held-out prompt at each evaluation (accuracy is mean@k)."""
    checkpoint_every: int = 10
    """Checkpoint every this many steps (and at the end of every segment). Does not change results."""
    keep_checkpoints: int = 3
    """Checkpoints kept per run (the newest); older ones are deleted. Does not change results."""
    keep_every: int = 0
    """Also keep every checkpoint whose step (steps count from 1) is a multiple of this (0: none). Training segments
    set it to their length, so every segment boundary stays re-materializable. Does not change results."""

    def __post_init__(self) -> None:
        check_finite(self)
        for name in ("ppo_minibatch", "max_response_length", "eval_every", "torch_threads", "eval_samples",
                     "checkpoint_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise field_error(self, name, "must be >= 1", f"set {name} to a positive count")
        for name in ("lr", "weight_decay", "grad_clip", "clip_low", "clip_high", "kl_coef", "warmup_steps", "keep_every",
                     "eval_every_rollouts"):
            if getattr(self, name) < 0:
                raise field_error(self, name, "must be >= 0", f"set {name} >= 0")
        if self.dtype not in DTYPES:
            raise field_error(self, "dtype", f"is {self.dtype!r}, not one of {', '.join(DTYPES)}",
                              "use float32 (fast) or float64 (the same run on every CPU)")
        if self.lr > 1:
            raise field_error(self, "lr", "is above 1, which diverges at once", "use e.g. 1e-6 (paper) or 1e-4 (embedded)")
        if self.clip_low >= 1:
            raise field_error(self, "clip_low", "must be < 1 (the ratio's lower clip is 1 - clip_low > 0)",
                              "use 0.2 as in the paper")
        if not -1 <= self.overlong_reward <= 1:
            raise field_error(self, "overlong_reward", "must lie in [-1, 1] (rewards are 1 correct / 0 wrong)",
                              "use 0.0 (ours) or -1.0 (the recipe's +-1 rewards)")
        if self.dual_clip_c <= 1:
            raise field_error(self, "dual_clip_c", "must be > 1 (verl's dual clip)", "use 3 or 10 as in the recipe")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise field_error(self, "loss_agg_mode", "unknown aggregation", f"use one of {LOSS_AGG_MODES}")
        for name in ("temperature", "eval_temperature"):
            if getattr(self, name) <= 0:
                raise field_error(self, name, "must be > 0", "use 1.0 for training, 0.7 for evaluation")
        for name in ("top_p", "eval_top_p"):
            if not 0 < getattr(self, name) <= 1:
                raise field_error(self, name, "must lie in (0, 1]", "use 1.0 to disable nucleus sampling")
        self._check_prompt_template()

    def evaluates_after(self, step: int, rollouts_before: int, rollouts_after: int) -> bool:
        """Whether the schedule evaluates after ``step`` (steps count from 1), which took the run's cumulative sampled rollouts
        from ``rollouts_before`` to ``rollouts_after``: every ``eval_every_rollouts`` sampled rollouts when set,
        else every ``eval_every`` steps. One rule for the driver and the simulator."""
        k = self.eval_every_rollouts
        if k:
            return rollouts_after // k > rollouts_before // k
        return step % self.eval_every == 0

    def _check_prompt_template(self) -> None:
        """The template is formatted with ``question=`` only: any other placeholder (``{x}``, ``{}``, ``{0}``,
        ``{question.upper}``) or a lone brace would fail mid-run, so it is refused here naming what is wrong."""
        literal_fix = "write {{ and }} for a literal brace (e.g. \\boxed{{}})"
        template = self.prompt_template
        if not isinstance(template, str):
            raise field_error(self, "prompt_template", "must be text", "give a template with {question} in it")
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        except ValueError as exc:
            raise field_error(self, "prompt_template", f"has a brace that does not pair ({exc})",
                              f"{literal_fix}; the only placeholder is {{question}}") from None
        other = next((name for name in names if name != "question"), None)
        if other is not None:
            raise field_error(self, "prompt_template",
                              f"has the placeholder {brief('{' + other + '}')}, but only {{question}} is filled in",
                              f"drop it, or {literal_fix}")
        if not names:
            raise field_error(self, "prompt_template", "has no {question} placeholder",
                              "include {question} where the problem goes")
        try:
            template.format(question="")
        except (ValueError, KeyError, IndexError, AttributeError) as exc:
            raise field_error(self, "prompt_template", f"does not format with a question ({type(exc).__name__}: "
                              f"{brief(str(exc))})", f"use {{question}} plainly, and {literal_fix}") from None
