"""Presets (versioned YAML files in ``pc_pipelines/presets``) and ``--set key=value`` overrides -> a :class:`RunConfig`.

Resolution order: dataclass defaults, then the preset file, then the overrides (dotted keys, e.g.
``allocator.p_upper=0.9375``), then the run's method and seed. The ``paper`` preset is frozen: it spells out every
field (a test checks none is left to defaults and pins its hash), so later changes of our defaults never rewrite
what "paper" meant.
"""

from __future__ import annotations

import contextlib
import copy
import typing
from dataclasses import fields
from importlib import resources
from typing import Any

from ..errors import ConfigError
from .allocator import AllocatorConfig
from .run import ALL_SECTIONS, OPTIONAL_SECTIONS, SECTIONS, RunConfig

PRESET_FORMAT_VERSION = 1


def available_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("pc_pipelines.presets").iterdir() if p.name.endswith(".yaml"))


def load_preset(name: str) -> dict[str, Any]:
    path = resources.files("pc_pipelines.presets").joinpath(f"{name}.yaml")
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}. Fix: use one of {available_presets()}.")
    import yaml  # here, not at the top: the allocator (numpy only) imports the config layer

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
    import yaml

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
