"""The embedded policy's recipe: architecture and SFT warm-start settings (a config only; no torch here, so the
run config can import it cheaply). The code that builds the policy is :mod:`pc_pipelines.training.base_policy`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .allocation import check_finite, field_error

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
    """Optimizer steps of the SFT warm start."""
    sft_batch: int = 256
    """Sequences per SFT step."""
    sft_lr: float = 3e-3
    """Peak SFT learning rate (AdamW, linear warmup 100 steps, cosine decay to 10%)."""
    init_seed: int = 0
    """Fixes the initialization and the SFT data order. Not the run seed: the runs of a study share one warm start."""
    torch_threads: int = 1
    """Torch intra-op threads while building (results depend on it in the last bits). One is fastest for a model
    this small: measured here, a second OpenMP thread made small matmuls up to 20x slower on a busy 2-core box."""

    def __post_init__(self) -> None:
        check_finite(self)
        if self.arch not in ARCHS:
            raise field_error(self, "arch", "unknown architecture", f"use one of {ARCHS}")
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "sft_steps", "sft_batch", "torch_threads"):
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

    def to_dict(self) -> dict:
        return asdict(self)
