"""The errors every layer raises for a setting that cannot work, and the one "Fix:" message format of a bad field.

The bottom of the package: it imports nothing of it, so any module may use it.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    """A configuration that cannot work. The message names the field and the fix."""


def field_error(config: Any, name: str, why: str, fix: str) -> ConfigError:
    """The one message format of a bad config field, for every typed config: class, field, value, why, fix."""
    return ConfigError(f"{type(config).__name__}.{name}={getattr(config, name)!r}: {why}. Fix: {fix}.")


_FLOAT_TYPES = ("float", "float | None", "Optional[float]")


def check_finite(config: Any) -> None:
    """Refuse NaN and +-inf in every ``float`` field of a typed config (dataclass), naming the field.

    Range checks written as ``value < 0`` or ``value <= 0`` let NaN through (every comparison with NaN is False),
    and a NaN learning rate or temperature makes a run that "succeeds" having trained nothing. So each typed
    config calls this first in its ``__post_init__``; its own range checks then see finite numbers only."""
    for f in fields(config):
        value = getattr(config, f.name)
        if f.type not in _FLOAT_TYPES and not isinstance(value, float):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            default = f.default if isinstance(f.default, (int, float)) else None
            raise field_error(
                config, f.name, "must be a finite number (NaN and infinity are never valid settings)",
                f"give {f.name} a finite value" + (f" (default {default!r})" if default is not None else ""),
            )


class RunError(RuntimeError):
    """A run cannot go on as asked (no such checkpoint, another config, a policy that does not load, ...); the
    message says why and how to fix it. Nothing of the run was changed when it is raised before training starts."""
