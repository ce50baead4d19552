"""The scale simulator's typed configuration: its prompt population and how training moves pass rates.

The model these numbers drive is documented in :mod:`pc_pipelines.simulator.model`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import check_finite, field_error


@dataclass(frozen=True)
class SimConfig:
    num_prompts: int = 85_000
    """Training prompt pool size (DeepMath-103K without binary questions has about 85K)."""
    difficulty_mean: float = 1.5
    """Mean difficulty logit: the average prompt starts at pass rate sigmoid(-difficulty_mean)."""
    difficulty_spread: float = 2.5
    """Std of the difficulty logits: the spread of initial pass rates (0 = all alike)."""
    local_rate: float = 0.5
    """Per-prompt logit gain per unit of trained group reward std."""
    global_rate: float = 1e-4
    """Shared-skill logit gain per unit of trained group reward std (transfer to every prompt)."""
    eval_prompts: int = 2_000
    """Held-out population for the accuracy curve."""
    seed: int = 0
    """Seeds the population and the reward draws (the allocator has its own seed in AllocatorConfig)."""

    def __post_init__(self) -> None:
        check_finite(self)
        for name in ("num_prompts", "eval_prompts"):
            if getattr(self, name) < 1:
                raise field_error(self, name, "must be >= 1", f"set {name} >= 1")
        for name in ("difficulty_spread", "local_rate", "global_rate"):
            if getattr(self, name) < 0:
                raise field_error(self, name, "must be >= 0", "use a value >= 0")

    def to_dict(self) -> dict:
        return asdict(self)
