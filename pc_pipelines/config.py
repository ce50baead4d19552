"""Run configuration: presets (versioned YAML files) + ``--set key=value`` overrides -> a resolved, hashed config.

A run is (family, method, preset + overrides, seed). Resolution order: dataclass defaults, then the preset file,
then the overrides (dotted keys, e.g. ``allocator.p_upper=0.9375``), then the run's method and seed. The result is
validated by the typed configs (:class:`AllocatorConfig`, :class:`SimConfig`, :class:`TrainingConfig`), stored
with the run, and hashed: the hash covers everything that changes behaviour (allocator, simulator, training, seed)
and not labels (preset name, family), so the same behaviour reached through two presets has one hash.

The ``paper`` preset is frozen: it spells out every field (a test checks none is left to defaults and pins its
hash), so later changes of our defaults never rewrite what "paper" meant.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import typing
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from typing import Any

import yaml

from .allocation import AllocatorConfig, ConfigError, check_finite, field_error
from .data.arith import ArithTaskConfig
from .policy import PolicyConfig
from .simulate import SimConfig

PRESET_FORMAT_VERSION = 1
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
    """Evaluate every this many training steps."""
    prompt_template: str = "{question} Let's think step by step and output the final answer within \\boxed{{}}."
    """Prompt template; {question} is the dataset question."""
    torch_threads: int = 1
    """Torch intra-op threads of the local loop. Part of the behaviour: float reductions, hence exact results,
    depend on it. One is fastest for tiny models on a shared CPU."""
    eval_samples: int = 4
    """Samples per held-out prompt at each evaluation (accuracy is mean@k)."""
    checkpoint_every: int = 10
    """Checkpoint every this many steps (and at the end of every segment). Does not change results."""
    keep_checkpoints: int = 3
    """Checkpoints kept per run (the newest); older ones are deleted. Does not change results."""
    keep_every: int = 0
    """Also keep every checkpoint whose step count (step + 1) is a multiple of this (0: none). Training segments
    set it to their length, so every segment boundary stays re-materializable. Does not change results."""

    def __post_init__(self) -> None:
        check_finite(self)
        for name in ("ppo_minibatch", "max_response_length", "eval_every", "torch_threads", "eval_samples",
                     "checkpoint_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise field_error(self, name, "must be >= 1", f"set {name} to a positive count")
        for name in ("lr", "weight_decay", "grad_clip", "clip_low", "clip_high", "kl_coef", "warmup_steps", "keep_every"):
            if getattr(self, name) < 0:
                raise field_error(self, name, "must be >= 0", f"set {name} >= 0")
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
        if "{question}" not in self.prompt_template:
            raise field_error(self, "prompt_template", "has no {question} placeholder", "include {question} where the problem goes")


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
            defaults = SECTIONS[section]()
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
    "training": ("torch_threads", "eval_samples"),
    "allocator": (
        "band_strategy", "sampling_strategy", "survival_margin", "pilot_strategy", "pilot_wave",
        "commit_strategy", "commit_mean", "commit_min", "commit_max",
    ),
}


def available_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("pc_pipelines.presets").iterdir() if p.name.endswith(".yaml"))


def load_preset(name: str) -> dict[str, Any]:
    path = resources.files("pc_pipelines.presets").joinpath(f"{name}.yaml")
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}. Fix: use one of {available_presets()}.")
    data = yaml.safe_load(path.read_text()) or {}
    if data.get("version") != PRESET_FORMAT_VERSION:
        raise ConfigError(
            f"preset {name!r} has format version {data.get('version')!r}, this code reads {PRESET_FORMAT_VERSION}. "
            "Fix: update the preset file's `version` and fields."
        )
    unknown = sorted(set(data) - {"version", "description", "family", *ALL_SECTIONS})
    if unknown:
        raise ConfigError(f"preset {name!r} has unknown top-level keys {unknown}. Fix: use {sorted(ALL_SECTIONS)}.")
    return data


def _coerce(section: str, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Check each value against the field's declared type (``int``, ``float``, ``bool``, ``str``, ``X | None``).

    YAML reads ``1e-5`` as a string (YAML 1.1 wants ``1.0e-5``), so numeric strings become numbers for float
    fields; anything else of the wrong type is a ConfigError naming the field, never a TypeError deep inside.
    """
    hints = typing.get_type_hints(cls)
    out = dict(values)
    for key, value in values.items():
        hint = hints.get(key)
        if hint is None:
            continue
        args = typing.get_args(hint)
        optional = type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if args else hint
        if value is None:
            if optional:
                continue
            ok = False
        elif base is float:
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    value = float(value)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif base is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif base is bool:
            ok = isinstance(value, bool)
        elif base is str:
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            raise ConfigError(
                f"{section}.{key}={value!r} is not a valid {getattr(base, '__name__', base)}. Fix: give {section}.{key} "
                f"a {getattr(base, '__name__', base)} value (e.g. --set {section}.{key}=...)."
            )
        out[key] = value
    return out


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["allocator.p_upper=0.9", "training.lr=1e-5"]`` -> {"allocator.p_upper": 0.9, ...}; values parse as YAML."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} is not key=value. Fix: e.g. --set allocator.p_upper=0.9375")
        value = yaml.safe_load(raw) if raw.strip() else None
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string; a number was meant
            with contextlib.suppress(ValueError):
                value = float(value) if any(c in value.lower() for c in ".e") else int(value)
        out[key.strip()] = value
    return out


def resolve(
    preset: str,
    overrides: dict[str, Any] | None = None,
    method: str | None = None,
    seed: int | None = None,
    family: str | None = None,
) -> RunConfig:
    """The preset, then ``overrides`` (``--set``), then ``method`` / ``seed`` / ``family`` (the command's flags).

    Every override key is honoured or refused, never ignored: ``seed``, ``family`` and ``allocator.method`` may be
    given by ``--set`` or by the explicit argument; both at once with different values is a ConfigError naming
    both (before, ``--seed``'s default silently won over ``--set seed=5``). ``allocator.seed`` / ``sim.seed`` are
    always the run's seed."""
    data = copy.deepcopy(load_preset(preset))
    sections: dict[str, dict[str, Any]] = {name: dict(data.get(name) or {}) for name in SECTIONS}
    optional: dict[str, dict[str, Any]] = {name: dict(data[name] or {}) for name in OPTIONAL_SECTIONS if name in data}
    top: dict[str, Any] = {"family": data.get("family", preset), "seed": 0}
    for key, value in (overrides or {}).items():
        head, _, rest = key.partition(".")
        if head in ALL_SECTIONS and rest:
            known = {f.name for f in fields(ALL_SECTIONS[head])}
            if rest not in known:
                raise ConfigError(f"--set {key}: {head} has no field {rest!r}. Fix: use one of {sorted(known)}.")
            if head in OPTIONAL_SECTIONS and head not in optional:
                raise ConfigError(
                    f"--set {key}: preset {preset!r} has no {head} section (it is for the embedded task). "
                    "Fix: use --preset embedded, or drop this override."
                )
            (sections if head in SECTIONS else optional)[head][rest] = value
        elif key in ("family", "seed"):
            top[key] = value
        else:
            raise ConfigError(
                f"--set {key}: unknown key. Fix: use family, seed, or section.field with a section in "
                f"{sorted(ALL_SECTIONS)}."
            )
    given = overrides or {}
    for key, flag, value in (("family", "--family", family), ("seed", "--seed", seed),
                             ("allocator.method", "--method", method)):
        if value is not None and key in given and given[key] != value:
            raise ConfigError(
                f"--set {key}={given[key]!r} conflicts with {flag} {value} (the command's {key.split('.')[-1]}); "
                f"one of them would be ignored. Fix: give it once, either {flag} {given[key]} or --set {key}={value}."
            )
    if family is not None:
        top["family"] = family
    if seed is not None:
        top["seed"] = seed
    if method is not None:
        sections["allocator"]["method"] = method
    if isinstance(top["seed"], bool) or not isinstance(top["seed"], int) or top["seed"] < 0:
        raise ConfigError(f"seed={top['seed']!r}: must be an integer >= 0. Fix: pass --seed 0 or another.")
    for name in ("allocator", "sim"):
        if "seed" in sections[name] and sections[name]["seed"] != top["seed"]:
            raise ConfigError(f"{name}.seed is set apart from the run seed. Fix: set the run's seed (--seed) only.")
        sections[name]["seed"] = top["seed"]
    method_name = sections["allocator"].get("method", AllocatorConfig.method)
    if method_name != "pc":
        if given.get("allocator.n_pilot") is not None:  # asked for explicitly: it would be ignored, so refuse
            raise ConfigError(
                f"--set allocator.n_pilot={given['allocator.n_pilot']} (or --n-pilot / --n-commit) is a PC setting: a "
                f"{method_name} run trains allocator.n rollouts per prompt and would ignore it. Fix: drop it, or use "
                "--method pc."
            )
        sections["allocator"].pop("n_pilot", None)  # the preset's PC default; GRPO/DAPO train n per prompt
    built = {}
    for name, cls in SECTIONS.items():
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(sections[name]) - known)
        if unknown:
            raise ConfigError(f"preset {preset!r}: {name} has unknown fields {unknown}. Fix: use {sorted(known)}.")
        built[name] = cls(**_coerce(name, cls, sections[name]))
    for name, values in optional.items():
        cls = OPTIONAL_SECTIONS[name]
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"preset {preset!r}: {name} has unknown fields {unknown}. Fix: use {sorted(known)}.")
        built[name] = cls(**_coerce(name, cls, values))
    return RunConfig(preset=preset, family=str(top["family"]), seed=int(top["seed"]), **built)


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
