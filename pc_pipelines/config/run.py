"""A run's resolved configuration: every section, validated, with the hash of what changes behaviour.

A run is (family, method, preset + overrides, seed). The hash covers everything that changes behaviour
(allocator, simulator, training, task, policy, seed) and not labels (preset name, family), so the same behaviour
reached through two presets has one hash. Presets and ``--set`` overrides become a :class:`RunConfig` in
:mod:`.presets`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ConfigError, brief
from .allocator import AllocatorConfig
from .policy import PolicyConfig
from .sim import SimConfig
from .task import ArithTaskConfig
from .training import TrainingConfig


@dataclass(frozen=True)
class RunConfig:
    preset: str
    """Name of the preset file this config was resolved from."""
    family: str
    """Run family: runs compared in one rollouts-to-target table share it."""
    seed: int
    """Fixes data order, sampling and init; copied into allocator.seed and sim.seed."""
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    task: ArithTaskConfig | None = None
    """The embedded synthetic task (None for runs on real datasets or in the simulator)."""
    policy: PolicyConfig | None = None
    """The embedded base policy's recipe (None when the policy is a given model directory)."""

    def __post_init__(self) -> None:
        if not isinstance(self.family, str) or not self.family:
            raise ConfigError(
                f"RunConfig.family={brief(self.family)}: a run's family is a non-empty name. Fix: give the run a family "
                "(--family NAME or --set family=NAME), or keep the preset's."
            )
        if self.task is not None and self.task.num_prompts < self.allocator.train_batch:
            raise ConfigError(
                f"task.num_prompts={self.task.num_prompts} is below allocator.train_batch={self.allocator.train_batch}. "
                "Fix: raise task.num_prompts or lower allocator.train_batch."
            )
        if self.task is not None and self.training.max_response_length < self.task.width + 3:
            raise ConfigError(
                f"training.max_response_length={self.training.max_response_length} cannot hold the embedded task's "
                f"answer (\\boxed{{}} + {self.task.width + 1} digits + end token = {self.task.width + 4} tokens). "
                f"Fix: set training.max_response_length >= {self.task.width + 4}."
            )

    @property
    def num_prompts(self) -> int:
        """The training pool the allocator draws from: the embedded task's, else the simulator's."""
        return self.task.num_prompts if self.task is not None else self.sim.num_prompts

    @property
    def method(self) -> str:
        return self.allocator.method

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "family": self.family,
            "seed": self.seed,
            "allocator": self.allocator.to_dict(),
            "sim": self.sim.to_dict(),
            "training": asdict(self.training),
            **({"task": self.task.to_dict()} if self.task is not None else {}),
            **({"policy": self.policy.to_dict()} if self.policy is not None else {}),
        }

    def behaviour(self) -> dict[str, Any]:
        """What the hash covers. Labels (preset, family) and operational settings (NOT_BEHAVIOUR) are left out;
        fields added after a section's first version (ADDED_FIELDS) are left out while they hold their default,
        so adding a field never changes the hash of an existing config (the frozen ``paper`` preset's included)."""
        d = self.to_dict()
        d.pop("preset")
        d.pop("family")
        for section, names in NOT_BEHAVIOUR.items():
            for name in names:
                d.get(section, {}).pop(name, None)
        for section, names in ADDED_FIELDS.items():
            defaults = ALL_SECTIONS[section]()
            for name in names:
                if section in d and d[section].get(name) == getattr(defaults, name):
                    d[section].pop(name)
        return d

    @property
    def config_hash(self) -> str:
        canon = json.dumps(self.behaviour(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:12]

    def default_run_id(self) -> str:
        return f"{self.family}-{self.method}-s{self.seed}-{self.config_hash[:8]}"


SECTIONS = {"allocator": AllocatorConfig, "sim": SimConfig, "training": TrainingConfig}
OPTIONAL_SECTIONS = {"task": ArithTaskConfig, "policy": PolicyConfig}  # present only when the preset uses them
ALL_SECTIONS = {**SECTIONS, **OPTIONAL_SECTIONS}
# Fields that never change results: excluded from the config hash.
NOT_BEHAVIOUR = {"training": ("checkpoint_every", "keep_checkpoints", "keep_every")}
# Fields added after the config format's first version: hashed only when they differ from their default.
ADDED_FIELDS = {
    "training": ("torch_threads", "eval_samples", "dtype", "eval_every_rollouts"),
    "task": ("length_weights",),
    "sim": (
        "law", "law_rate", "law_noise_floor", "law_noise_scale", "law_noise_power", "law_step_noise", "law_skill_cap",
        "difficulty_mix_weight", "difficulty_mean_2", "difficulty_spread_2", "eval_difficulty_mean",
        "eval_difficulty_spread", "eval_noise", "law_cap_pc", "law_cap_prior", "law_gain_max",
    ),
    "allocator": (
        "band_strategy", "sampling_strategy", "survival_margin", "pilot_strategy", "pilot_wave",
        "commit_strategy", "commit_mean", "commit_min", "commit_max", "eviction_strategy", "return_share",
        "screen_strategy", "screen_discount", "screen_threshold", "screen_min_evidence", "screen_max_skips",
        "screen_explore", "screen_prior_strength", "screen_draw_cap", "screen_max_unseen", "screen_early_wave",
        "screen_early_threshold", "train_pilots",
    ),
}


def from_dict(d: dict[str, Any]) -> RunConfig:
    """Rebuild a stored resolved config (the store's ``runs.config_json``)."""
    return RunConfig(
        preset=d["preset"],
        family=d["family"],
        seed=int(d["seed"]),
        allocator=AllocatorConfig.from_dict(d["allocator"]),
        sim=SimConfig(**d["sim"]),
        training=TrainingConfig(**d["training"]),
        task=ArithTaskConfig(**d["task"]) if d.get("task") is not None else None,
        policy=PolicyConfig(**d["policy"]) if d.get("policy") is not None else None,
    )
