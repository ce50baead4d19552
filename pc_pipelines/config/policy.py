"""The embedded policy's recipe: architecture and SFT warm-start settings (a config only: no torch here).

The code that builds the policy is :mod:`pc_pipelines.training.base_policy`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import check_finite, field_error

ARCHS = ("qwen2", "llama")


@dataclass(frozen=True)
class PolicyConfig:
    arch: str = "qwen2"
    """Hugging Face architecture of the from-scratch policy: qwen2 or llama."""
    hidden_size: int = 64
    """Model width d."""
    num_layers: int = 3
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads (hidden_size must divide by it)."""
    intermediate_size: int = 256
    """MLP width."""
    sft_steps: int = 800
    """Without ``sft_target``: the warm start's optimizer steps (linear warmup, then a cosine decay of the learning
    rate to ``sft_hold_lr`` times its peak). With it: sets only the warmup, min(100, sft_steps / 10) steps."""
    sft_batch: int = 256
    """Sequences per SFT step."""
    sft_lr: float = 3e-3
    """Peak SFT learning rate (AdamW)."""
    sft_hold_lr: float = 0.1
    """The learning rate the schedule decays to, as a share of the peak (then held)."""
    sft_target: float | None = None
    """The stop rule (recipe v2). None: a fixed schedule of ``sft_steps``. A pass rate: the learning rate stays at
    its peak until the probe (``sft_probe_prompts`` problems of the lengths SFT barely covers, ``sft_probe_samples``
    samples each at T = 1, every ``sft_probe_every`` steps) reaches ``sft_onset``, then decays over
    ``sft_decay_steps`` to ``sft_hold_lr`` and is held; SFT stops at the first probe that reaches this pass rate
    (keeping that probe's weights or the one's before, whichever is nearer), at most ``sft_max_steps`` steps. The
    long lengths are learned at a speed that CPU kernels (AVX2 vs AVX-512) and the init seed change, along one
    path: triggering the schedule and the stop on the path's coordinate, at a low learning rate where the path is
    slow, lands every build near one point of it (docs/STUDIES.md, "Warm start: the same everywhere")."""
    sft_onset: float = 0.05
    """Probe pass rate at which the long lengths have started to be learned: the learning rate starts to decay."""
    sft_decay_steps: int = 100
    """Steps of the cosine decay from the peak to ``sft_hold_lr`` after the onset."""
    sft_max_steps: int = 3000
    """The stop rule's budget: SFT ends here (with a warning) if the probe never reached ``sft_target``."""
    sft_probe_every: int = 25
    """Optimizer steps between two probes of the stop rule."""
    sft_probe_prompts: int = 256
    """Probe problems (drawn apart from the RL pool, the held-out split and the SFT set)."""
    sft_probe_samples: int = 16
    """Samples per probe problem."""
    init_seed: int = 0
    """Fixes the initialization and the SFT data order. Not the run seed: the runs of a study share one warm start."""
    torch_threads: int = 1
    """Torch intra-op threads while building (results depend on it in the last bits). One is fastest for a model
    this small: measured here, a second OpenMP thread made small matmuls up to 20x slower on a busy 2-core box."""

    def __post_init__(self) -> None:
        check_finite(self)
        if self.arch not in ARCHS:
            raise field_error(self, "arch", "unknown architecture", f"use one of {ARCHS}")
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "sft_steps", "sft_batch", "torch_threads",
                     "sft_max_steps", "sft_decay_steps", "sft_probe_every", "sft_probe_prompts", "sft_probe_samples"):
            if getattr(self, name) < 1:
                raise field_error(self, name, "must be >= 1", f"set {name} to a positive count")
        if self.hidden_size % self.num_heads:
            raise field_error(self, "num_heads", f"must divide hidden_size={self.hidden_size}", "e.g. hidden_size 64 with 4 heads")
        if (self.hidden_size // self.num_heads) % 2:
            raise field_error(self, "num_heads", "head dim hidden_size/num_heads must be even (rotary embeddings)", "e.g. 64 / 4 = 16")
        if self.init_seed < 0:
            raise field_error(self, "init_seed", "must be >= 0", "e.g. 0")
        if not self.sft_lr > 0:
            raise field_error(self, "sft_lr", "must be > 0", "e.g. 3e-3")
        if self.sft_target is not None and not 0.0 < self.sft_target < 1.0:
            raise field_error(self, "sft_target", "must lie in (0, 1) (a mean pass rate) or be null", "e.g. 0.3, or null for a fixed schedule")
        if self.sft_target is not None and not 0.0 <= self.sft_onset < self.sft_target:
            raise field_error(self, "sft_onset", f"must lie in [0, sft_target={self.sft_target})",
                              "e.g. sft_onset=0.05 with sft_target=0.3")
        if not 0.0 < self.sft_hold_lr <= 1.0:
            raise field_error(self, "sft_hold_lr", "must lie in (0, 1] (a share of sft_lr)", "e.g. 0.1")
        if self.sft_target is not None and self.sft_max_steps <= self.sft_warmup_steps:
            raise field_error(self, "sft_max_steps", "must exceed the warmup (the stop rule's budget)", "e.g. 3000")

    @property
    def sft_warmup_steps(self) -> int:
        """Linear warmup of the SFT learning rate (derived): min(100, sft_steps / 10 + 1) steps."""
        return min(100, self.sft_steps // 10 + 1)

    def to_dict(self) -> dict:
        return asdict(self)
