"""The errors every layer raises for a setting that cannot work, and the one "Fix:" message format of a bad field.

The bottom of the package: it imports nothing of it, so any module may use it.
"""

from __future__ import annotations

import math
import os
import reprlib
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


MESSAGE_VALUE_CHARS = 80
"""How much of a value a message quotes; a longer one is cut, with its full length (see :func:`brief`)."""


def brief(value: Any, limit: int = MESSAGE_VALUE_CHARS) -> str:
    """``repr(value)`` for an error message, at most about ``limit`` characters: a long string is cut to its first
    ``limit`` characters and ``... (N characters)``; a huge integer is described by its digit count (``str()`` of
    one past 4,300 digits raises); containers are shown a few levels and items deep (an alias bomb's shared lists
    would otherwise take exponential time to print). Use it wherever a message quotes what a user typed."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"<{'a negative' if value < 0 else 'an'} integer of about {digits:,} digits>"
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 4, 4, 4, 4
    r.maxstring, r.maxlong, r.maxother = limit, limit, limit
    text = r.repr(value)
    return text if len(text) <= limit + 20 else text[:limit] + "..."


def mount_point(path: Any) -> str:
    """The mount point of the filesystem holding ``path`` (or its nearest existing parent)."""
    p = os.path.abspath(os.fspath(path))
    while not os.path.exists(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    while not os.path.ismount(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return p


def no_free_inodes(path: Any, slack: int = 64, room: int = 1 << 20) -> str | None:
    """Why a write into ``path`` that failed with ENOSPC failed, when the cause is inodes, not space: the
    filesystem holding it has fewer than ``slack`` inodes free (a failed write gives back the few it took) and more
    than ``room`` bytes free, so ``df -h`` shows room. ``"no free inodes on MOUNT (N files and directories, its
    limit ...)"``, else None (space is short too, the filesystem counts no inodes, or it cannot be told)."""
    p = os.path.abspath(os.fspath(path))
    while not os.path.exists(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if not getattr(st, "f_files", 0) or st.f_favail >= slack or free <= room:  # 0: it keeps no inode count
        return None
    used = st.f_files - st.f_ffree
    return (f"no free inodes on {mount_point(p)} ({used:,} of its {st.f_files:,} files and directories used, see "
            f"`df -i`; `df -h` shows {free / (1 << 20):,.1f} MiB still free)")


def inodes_fix(path: Any, then: str) -> str:
    """The fix of a write refused for want of inodes on the filesystem holding ``path``."""
    return (f"Fix: delete files you no longer need on {mount_point(path)} (old runs' step directories, other "
            f"programs' files), or choose a filesystem with more inodes, then {then}.")
