"""Presets (versioned YAML files in ``pc_pipelines/presets``) and ``--set key=value`` overrides -> a :class:`RunConfig`.

Resolution order: dataclass defaults, then the preset file, then the overrides (dotted keys, e.g.
``allocator.p_upper=0.9375``), then the run's method and seed. The ``paper`` preset is frozen: it spells out every
field (a test checks none is left to defaults and pins its hash), so later changes of our defaults never rewrite
what "paper" meant.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import hashlib
import re
import typing
from dataclasses import MISSING, fields
from importlib import resources
from typing import Any

from ..errors import MESSAGE_VALUE_CHARS, ConfigError, brief
from .allocator import PC_ONLY_FIELDS, AllocatorConfig
from .run import ALL_SECTIONS, OPTIONAL_SECTIONS, SECTIONS, RunConfig

PRESET_FORMAT_VERSION = 1

# Limits on a ``--set KEY=VALUE`` (and a Dagster ``overrides`` entry): every setting is one scalar, so a value
# longer than this is a mistake (a pasted file, a runaway shell expansion), refused before YAML reads it.
SET_VALUE_MAX_CHARS = 1024
SET_KEY_MAX_CHARS = 100
# Integers fit a signed 64-bit integer (NumPy, DuckDB and torch take them): at most 19 digits.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# A run family is a label of a few words (it starts the default run id, which is at most 128 characters).
FAMILY_MAX_CHARS = 64
_INTEGER = re.compile(r"[-+]?[0-9][0-9_]*")
_SCALAR_ONLY = "and every setting is one value (a number, true/false or a string)"
_ONE_VALUE = "give {key} one plain value; quote a string that YAML would read otherwise (--set {key}='\"a, [b]\"')"


def available_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("pc_pipelines.presets").iterdir() if p.name.endswith(".yaml"))


def presets_state() -> tuple[tuple[str, str], ...]:
    """Each preset file's name and the sha256 of its contents: what a config resolved from them depends on (a cache
    of resolved configs keys on it)."""
    files = resources.files("pc_pipelines.presets").iterdir()
    return tuple(sorted((p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in files if p.name.endswith(".yaml")))


def load_preset(name: str) -> dict[str, Any]:
    if not isinstance(name, str) or name not in available_presets():  # never a path: '../x' or 300 characters
        raise ConfigError(f"unknown preset {brief(name)}. Fix: use one of {available_presets()}.")
    path = resources.files("pc_pipelines.presets").joinpath(f"{name}.yaml")
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


def _type_name(base: Any) -> str:
    return getattr(base, "__name__", str(base))


def _example(cls: type, key: str, base: Any) -> str:
    """An example value for a field in a Fix: its default where it has one."""
    f = next((f for f in fields(cls) if f.name == key), None)
    if f is not None and f.default is not MISSING and f.default is not None:
        return str(f.default).lower() if isinstance(f.default, bool) else str(f.default)
    return {float: "1.0", int: "1", bool: "true", str: "text"}.get(base, "...")


def _coerce(section: str, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Check each value against the field's declared type (``int``, ``float``, ``bool``, ``str``, ``X | None``).

    YAML reads ``1e-5`` as a string (YAML 1.1 wants ``1.0e-5``), so numeric strings become numbers for float
    fields; anything else of the wrong type is a ConfigError naming the field, never a TypeError deep inside:
    null for a field that needs a value, a list or mapping for a scalar field (every field is one), an integer
    outside the signed 64-bit range. Messages quote values shortened (:func:`~pc_pipelines.errors.brief`).
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
        name, field = _type_name(base), f"{section}.{key}"
        fix = f"give {field} a {name} value (e.g. --set {field}={_example(cls, key, base)})"
        if value is None:
            if optional:
                continue
            raise ConfigError(
                f"{field} is null (YAML ~, null or an empty value) but needs a {name}. Fix: {fix}, or drop the "
                "setting to keep the preset's value."
            )
        if isinstance(value, (list, tuple, dict, set)):
            raise ConfigError(
                f"{field}={brief(value)} is a {'mapping' if isinstance(value, dict) else 'list'}, not a {name}, "
                f"{_SCALAR_ONLY}. Fix: {fix}."
            )
        if base is float:
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    value = float(value)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok and isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
                ok = False  # float() of a huge int overflows or loses it
            value = float(value) if ok else value
        elif base is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
            if ok and not INT_MIN <= value <= INT_MAX:
                raise ConfigError(
                    f"{field}={brief(value)} is out of range: an integer setting fits in 64 bits (at most 19 "
                    f"digits, {INT_MAX:,}). Fix: {fix}."
                )
        elif base is bool:
            ok = isinstance(value, bool)
        elif base is str:
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            raise ConfigError(f"{field}={brief(value)} is not a valid {name}. Fix: {fix}.")
        out[key] = value
    return out


def _text(value: Any) -> str:
    """A value as typed (no quotes), shortened like :func:`~pc_pipelines.errors.brief`."""
    if isinstance(value, str):
        return value if len(value) <= MESSAGE_VALUE_CHARS else f"{value[:MESSAGE_VALUE_CHARS]}... ({len(value):,} characters)"
    return brief(value)


def _set_error(key: str, why: str, fix: str = "") -> ConfigError:
    fix = fix or "give one value, e.g. --set allocator.p_upper=0.9375 or --set family=my-study"
    return ConfigError(f"--set {_shown_key(key)}: {why}. Fix: {fix}.")


def _shown_key(key: str) -> str:
    return key if len(key) <= MESSAGE_VALUE_CHARS else f"{key[:MESSAGE_VALUE_CHARS]}... ({len(key):,} characters)"


_TOKEN_PROBLEMS = {
    "TagToken": "a YAML tag (!! or !), which --set never reads: values are plain numbers, booleans and strings",
    "AnchorToken": "a YAML anchor (&), which --set never reads: a setting is one value",
    "AliasToken": "a YAML alias (*), which --set never reads: a setting is one value",
    "FlowSequenceStartToken": "a list", "BlockSequenceStartToken": "a list", "BlockEntryToken": "a list",
    "FlowMappingStartToken": "a mapping", "BlockMappingStartToken": "a mapping", "KeyToken": "a mapping",
    "ValueToken": "a mapping",
}


def _parse_value(key: str, raw: str) -> Any:
    """One ``--set`` value: YAML, limited to a single plain scalar of at most SET_VALUE_MAX_CHARS characters.

    Checked on YAML's tokens before anything is built: a tag (``!!python/object/apply:...``: safe_load refuses
    those too, with a traceback), an anchor or alias (an alias bomb expands exponentially) or a collection is
    refused naming the key; an integer must fit in 64 bits (Python refuses to convert one of more than 4,300
    digits at all, with a ValueError)."""
    import yaml

    text = raw.strip()
    if _INTEGER.fullmatch(text) and len(text.replace("_", "").lstrip("+-")) > 19:
        digits = len(text.replace("_", "").lstrip("+-"))
        raise _set_error(key, f"the integer {text[:20]}... has {digits:,} digits; an integer setting fits in "
                         f"64 bits (at most 19 digits, {INT_MAX:,})", f"give {_shown_key(key)} a smaller value")
    if len(raw) > SET_VALUE_MAX_CHARS:
        raise _set_error(key, f"the value {brief(raw)} is too long: at most {SET_VALUE_MAX_CHARS:,} characters",
                         f"give {_shown_key(key)} a single short value")
    try:
        scalars = 0
        for token in yaml.scan(raw, Loader=yaml.SafeLoader):
            kind = type(token).__name__
            if kind in ("StreamStartToken", "StreamEndToken"):
                continue
            if kind == "ScalarToken" and not scalars:
                scalars += 1
                continue
            why = _TOKEN_PROBLEMS.get(kind, "more than one YAML value")
            if why in ("a list", "a mapping"):
                why = f"{why}, {_SCALAR_ONLY}"
            raise _set_error(key, f"the value {brief(raw)} is {why}", _ONE_VALUE.format(key=_shown_key(key)))
        value = yaml.safe_load(raw)
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as exc:
        if isinstance(exc, ConfigError):
            raise
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _set_error(key, f"the value {brief(raw)} is not a valid YAML value ({_text(problem)})",
                         _ONE_VALUE.format(key=_shown_key(key))) from None
    if isinstance(value, (dt.date, dt.datetime)):  # YAML reads 2024-01-01 as a date; no setting is one: the text
        value = text
    if isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string; a number was meant
        with contextlib.suppress(ValueError):
            value = float(value) if any(c in value.lower() for c in ".e") else int(value)
    if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        raise _set_error(key, f"the integer {brief(value)} is out of range: an integer setting fits in 64 bits "
                         f"(at most 19 digits, {INT_MAX:,})", f"give {_shown_key(key)} a smaller value")
    return value


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["allocator.p_upper=0.9", "training.lr=1e-5"]`` -> {"allocator.p_upper": 0.9, ...}; values parse as YAML.

    Each value is one plain YAML scalar (see :func:`_parse_value`): tags, anchors, aliases, lists and mappings,
    values over SET_VALUE_MAX_CHARS characters and integers over 64 bits are refused as a ConfigError naming the
    key, with long values shortened in the message. An empty value is null (None): accepted for the fields that
    may be None, refused naming the field for the others (in :func:`resolve`)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if not isinstance(item, str):
            raise ConfigError(f"--set {brief(item)} is not a KEY=VALUE string. Fix: e.g. --set allocator.p_upper=0.9375")
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {brief(item)} is not key=value. Fix: e.g. --set allocator.p_upper=0.9375")
        key = key.strip()
        if len(key) > SET_KEY_MAX_CHARS or not key.isprintable():
            raise _set_error(key, f"no setting is named like that ({len(key):,} characters{'' if key.isprintable() else ', with control characters'})",
                             "use family, seed, or section.field (`pilot-commit presets --show NAME` lists them)")
        out[key] = _parse_value(key, raw) if raw.strip() else None
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
                raise ConfigError(f"--set {_shown_key(key)}: {head} has no field {brief(rest)}. Fix: use one of {sorted(known)}.")
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
                f"--set {_shown_key(key)}: unknown key. Fix: use family, seed, or section.field with a section in "
                f"{sorted(ALL_SECTIONS)}."
            )
    given = overrides or {}
    for key, flag, value in (("family", "--family", family), ("seed", "--seed", seed),
                             ("allocator.method", "--method", method)):
        if value is not None and key in given and given[key] != value:
            raise ConfigError(
                f"--set {key}={brief(given[key])} conflicts with {flag} {_text(value)} (the command's "
                f"{key.split('.')[-1]}); one of them would be ignored. Fix: give it once, either {flag} "
                f"{_text(given[key])} or --set {key}={_text(value)}."
            )
    if family is not None:
        top["family"] = family
    if seed is not None:
        top["seed"] = seed
    if method is not None:
        sections["allocator"]["method"] = method
    top["family"] = check_family(top["family"], "--family" if family is not None else "family")
    if top["seed"] is None:
        raise ConfigError("seed is null (YAML ~, null or an empty value) but needs an integer >= 0. Fix: pass "
                          "--seed 0 or another (or --set seed=0).")
    if isinstance(top["seed"], bool) or not isinstance(top["seed"], int) or top["seed"] < 0 or top["seed"] > INT_MAX:
        raise ConfigError(f"seed={brief(top['seed'])}: must be an integer from 0 to {INT_MAX:,}. Fix: pass --seed 0 "
                          "or another.")
    for name in ("allocator", "sim"):
        if "seed" in sections[name] and sections[name]["seed"] != top["seed"]:
            raise ConfigError(f"{name}.seed is set apart from the run seed. Fix: set the run's seed (--seed) only.")
        sections[name]["seed"] = top["seed"]
    method_name = sections["allocator"].get("method", AllocatorConfig.method)
    _check_pc_only(given, method_name, sections["allocator"])
    if method_name != "pc":  # the preset's PC settings; GRPO/DAPO train n per prompt and evict nothing
        for name in PC_ONLY_FIELDS:
            sections["allocator"].pop(name, None)
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
    return RunConfig(preset=preset, family=top["family"], seed=int(top["seed"]), **built)


def _check_pc_only(given: dict[str, Any], method: str, allocator: dict[str, Any]) -> None:
    """Refuse an explicit setting the run would ignore: a PC-only one (:data:`PC_ONLY_FIELDS`) for another method,
    or ``return_share`` (the easy pool's) with strict eviction. Preset values are not refused (presets spell out
    every default)."""
    asked = {name: given[f"allocator.{name}"] for name in PC_ONLY_FIELDS if given.get(f"allocator.{name}") is not None}
    if method != "pc" and asked:
        name, value = next(iter(asked.items()))
        flags = " (or --n-pilot / --n-commit)" if name == "n_pilot" else ""
        raise ConfigError(
            f"--set allocator.{name}={brief(value)}{flags} is a PC setting: a {_text(method)} run trains allocator.n "
            "rollouts per prompt, draws no pilots and evicts nothing, so it would ignore it. Fix: drop it, or use "
            "--method pc."
        )
    strategy = allocator.get("eviction_strategy", AllocatorConfig.eviction_strategy)
    if "return_share" in asked and strategy != "easy_pool":
        raise ConfigError(
            f"--set allocator.return_share={brief(asked['return_share'])} is an easy_pool setting, but "
            f"allocator.eviction_strategy={brief(strategy)}: no solved prompt comes back, so it would be ignored. "
            "Fix: drop it, or add --set allocator.eviction_strategy=easy_pool."
        )


def check_family(value: Any, field: str = "family") -> str:
    """A run family (``--set family=...``, ``--family``, a preset's ``family:``) as its string, or a ConfigError
    naming ``field``: null, a boolean (YAML reads ``yes`` / ``no`` / ``on`` as one), a list or mapping, an empty
    name, control characters and names over FAMILY_MAX_CHARS characters are refused (it is a label, printed in
    tables and starting the default run id). Numbers are kept as their text (``family=2024``)."""
    fix = "name it with a short label, e.g. --set family=my-study (or drop it to keep the preset's family)"
    if value is None:
        raise ConfigError(f"{field} is null (YAML ~, null or an empty value) but a run needs a family. Fix: {fix}.")
    if isinstance(value, bool):
        raise ConfigError(f"{field}={value!r}: YAML read the family as a boolean (yes/no/on/off/true/false). Fix: "
                          f"quote the word (--set family='\"yes\"' for the text yes), or {fix}.")
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        kind = "mapping" if isinstance(value, dict) else "list" if isinstance(value, (list, tuple)) else \
            type(value).__name__
        raise ConfigError(f"{field}={brief(value)} is a {kind}, not a name, {_SCALAR_ONLY}. Fix: {fix}.")
    if not value.strip():
        raise ConfigError(f"{field}={brief(value)} is empty. Fix: {fix}.")
    if len(value) > FAMILY_MAX_CHARS:
        raise ConfigError(f"{field}={brief(value)} is too long: at most {FAMILY_MAX_CHARS} characters. Fix: {fix}.")
    if not value.isprintable():
        raise ConfigError(f"{field}={brief(value)} contains control characters (a newline, a tab, ...). Fix: {fix}.")
    return value
