"""The errors every layer raises for a setting that cannot work, the one "Fix:" message format of a bad field, and
the one way a message writes a command for a person to paste (:func:`shell_command`).

The bottom of the package: it imports nothing of it, so any module may use it.
"""

from __future__ import annotations

import math
import os
import re
import reprlib
from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    """A configuration that cannot work. The message names the field and the fix."""


def field_error(config: Any, name: str, why: str, fix: str) -> ConfigError:
    """The one message format of a bad config field, for every typed config: class, field, value, why, fix."""
    return ConfigError(f"{type(config).__name__}.{name}={brief(getattr(config, name))}: {why}. Fix: {fix}.")


def seconds_from_env(name: str, default: float, low: float, high: float, what: str, *, whole: bool = False,
                     env: Any = None) -> float:
    """Seconds set by the environment variable ``name`` (in ``env``, default ``os.environ``; unset or blank:
    ``default``): a number (a whole one with ``whole``) from ``low`` to ``high``; anything else is a
    :class:`ConfigError` naming the variable, the bounds, ``what`` the setting does, and the fix."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN fails both
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name}={brief(raw)}: must be {kind} of seconds from {low:,g} to {high:,g} ({what}). Fix: "
                          f"set it to e.g. {default:g}, or unset it for the default ({default:g}).")
    return value


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


# ---- commands a person pastes -------------------------------------------------------------------------------------
_SHELL_BARE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)
_SPECIAL_IN_DOUBLE_QUOTES = frozenset('"$`\\!')
_ANSI_C_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "`": "\\x60", "!": "\\x21"}


def shell_word(arg: object, multiline: bool = False) -> str:
    """``str(arg)`` as one word of a POSIX shell (bash, zsh, ksh) command line, read back exactly as it is.

    Plain words stay bare (``--store``, ``/tmp/s.duckdb``); other text is single-quoted (``'/tmp/my runs/s'``), or
    double-quoted when it holds a single quote and nothing a double quote leaves special (``"WHERE stage = 'pilot'"``,
    ``"/tmp/Bob's runs"``). Text holding a backtick or a character that is not printable (a newline, an escape)
    is written as ``$'...'`` with those characters escaped (a backtick as ``\\x60``, other bytes as ``\\xHH``), so
    the command stays on one line, inside a Markdown code span, and sends nothing to the terminal that it would
    act on; bash, zsh and ksh read it (POSIX sh since its 2024 edition). ``multiline``: newlines stay newlines
    inside the single or double quotes (a shell reads them back exactly), for a long SQL query a Dagster page
    shows on several short lines in a code block."""
    text = str(arg)
    if _SHELL_BARE.fullmatch(text):
        return text
    if "`" not in text and (text.replace("\n", "") if multiline else text).isprintable():
        if "'" not in text:
            return f"'{text}'"
        if not _SPECIAL_IN_DOUBLE_QUOTES.intersection(text):
            return f'"{text}"'
    out = []
    for ch in text:
        if ch in _ANSI_C_ESCAPES:
            out.append(_ANSI_C_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:  # a lone surrogate \udc80-\udcff is a byte of a file name that is not UTF-8 (os.fsdecode)
            try:
                raw = ch.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raw = ch.encode("utf-8", "surrogatepass")
            out.extend(f"\\x{b:02x}" for b in raw)
    return "$'" + "".join(out) + "'"


def shell_command(*argv: object, multiline: bool = False) -> str:
    """A command for a person to paste into a shell, each argument quoted by :func:`shell_word`: every command a
    message, hint or Dagster metadata value shows is built here, so a path holding a quote, a space, ``$(...)``, a
    backtick or a newline is one argument when pasted, and runs nothing. Placeholders such as ``...`` stay bare.
    A command whose first word is one of this install's console scripts (``pilot-commit``, ``tensorboard``) gets the
    form this shell reaches it by (:func:`installed_command`: ``.venv/bin/pilot-commit`` after ``make demo``, as the
    README types it): the one place every printed command's program name is decided. ``multiline``: see
    :func:`shell_word`."""
    if argv and argv[0] in CONSOLE_SCRIPTS:
        argv = (installed_command(str(argv[0])), *argv[1:])
    return " ".join(shell_word(a, multiline) for a in argv)


CONSOLE_SCRIPTS = ("pilot-commit", "tensorboard")
"""The console scripts a printed command may start with by name (:func:`shell_command` writes them as
:func:`installed_command` does)."""


def sql_string(text: object) -> str:
    """``str(text)`` as a SQL string literal (single quotes, a quote inside doubled), for a query a message shows."""
    return "'" + str(text).replace("'", "''") + "'"


def brief_text(text: str, limit: int = MESSAGE_VALUE_CHARS, total: int = 8 * MESSAGE_VALUE_CHARS) -> str:
    """A message that quotes what a user typed inside its own words (argparse's ``unrecognized arguments: ...``,
    ``invalid choice: ...``), made one short line: control characters escaped, each word (a run without spaces)
    over twice ``limit`` characters (longer than what :func:`brief` leaves) cut to ``limit`` and ``... (N characters)``, and the whole cut at ``total``."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
    short = re.sub(rf"\S{{{2 * limit + 1},}}", lambda m: f"{m.group()[:limit]}... ({len(m.group()):,} characters)", text)
    return short if len(short) <= total else f"{short[:total]}... ({len(text):,} characters)"


def installed_command(name: str, from_cwd: bool = True) -> str:
    """How to type this install's console script ``name`` (``pilot-commit``, ``tensorboard``) in a shell, for the
    commands printed for a person to paste: the bare name when the shell's PATH finds this install's script, else
    the script beside the running interpreter (``.venv/bin/pilot-commit`` when it lies under the current directory,
    its absolute path otherwise), NOT quoted: pass it to :func:`shell_command` as the command's first word.
    A name this install lacks is left bare. ``from_cwd=False``: always the absolute path, for a command read away
    from this process's directory (the Dagster UI's metadata is pasted into any terminal)."""
    import contextlib
    import shutil
    import sys
    from pathlib import Path

    here = Path(sys.executable).parent / name  # not resolved: a venv's python is a link to the system's
    if not here.exists():
        return name
    found = shutil.which(name)
    if found is not None and Path(found).absolute() == here.absolute():
        return name
    shown = here.absolute()
    if from_cwd:
        with contextlib.suppress(ValueError):  # outside the current directory: the absolute path
            shown = shown.relative_to(Path.cwd())
    return str(shown)


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
