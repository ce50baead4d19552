"""Run ids and store paths: the one place that says which names a run may have, and which paths a store may.

A run id names a directory under ``<store>.runs/`` and appears in Dagster partition keys, so it is held to a small
character set: a letter or digit first, then letters, digits, ``.``, ``_`` and ``-``; at most 128 characters. No
path separators, no glob or shell metacharacters, no spaces, never ``.``/``..``/a hidden name, always a legal file
name. Every entry point calls :func:`validate_run_id`: the Store API (``register_run``, ``writer``), the CLI
(``--run-name``, ``--run-id``), a ``SegmentRequest`` and the Dagster ``start_run`` job; it returns a :class:`RunId`,
which later checks (``Store.run_dir``, ``Store.writer``) take as it is: one check where the id enters. Default run
ids (``<family>-<method>-s<seed>-<hash>``) are valid for every family made of the same characters.

A store path (``--store``) is checked by :func:`store_path_problem` before DuckDB opens it: a name too long for the
file system, a directory, a device such as ``/dev/null``, no permission each get their own message and fix.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ..errors import shell_word

RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
RUN_ID_MAX_LEN = 128
RUN_ID_RULE = (
    "a run id is 1 to 128 characters: letters, digits, '.', '_' and '-', starting with a letter or a digit "
    f"(regex {RUN_ID_PATTERN})"
)
_RUN_ID = re.compile(RUN_ID_PATTERN)


class RunIdError(ValueError):
    """A run id outside the allowed set; the message states the set and the fix."""


class RunId(str):
    """A run id that passed :func:`validate_run_id`: later checks in the same process take it as it is (one check,
    where the id enters: a command line flag, a partition key, a ``SegmentRequest``). Text made from it (an
    f-string, ``str()``, a store row) is a plain ``str`` again and would be checked again."""

    __slots__ = ()


def run_id_problem(run_id: object) -> str | None:
    """Why ``run_id`` is not a valid run id, or None when it is."""
    if not isinstance(run_id, str):
        return f"is a {type(run_id).__name__}, not a string"
    if not run_id:
        return "is empty"
    if len(run_id) > RUN_ID_MAX_LEN:
        return f"is {len(run_id)} characters long (at most {RUN_ID_MAX_LEN})"
    if _RUN_ID.fullmatch(run_id) is None:
        bad = sorted({c for c in run_id if not (c.isascii() and (c.isalnum() or c in "._-"))})
        if bad:
            return "contains " + ", ".join(repr(c) for c in bad)
        return f"starts with {run_id[0]!r}"
    return None


def validate_run_id(run_id: object, field: str = "run id") -> str:
    """``run_id`` as a :class:`RunId` when valid (one already checked passes as it is), else :class:`RunIdError`
    naming ``field``, the allowed set and the fix."""
    if type(run_id) is RunId:
        return run_id
    problem = run_id_problem(run_id)
    if problem is None:
        return RunId(run_id)
    shown = run_id if not isinstance(run_id, str) or len(run_id) <= 80 else run_id[:77] + "..."
    raise RunIdError(
        f"{field} {shown!r} {problem}: {RUN_ID_RULE}. Fix: choose a name like 'pc-seed0-try2' (for the default "
        "<family>-<method>-s<seed>-<hash>, a family made of the same characters)."
    )



def run_id_for(default_run_id: str, run_name: str | None, field: str = "--run-name") -> str:
    """A new run's id, the one rule of every writer (the CLI, the ``start_run`` job): ``run_name`` when given
    (checked, the error naming ``field``), else ``default_run_id`` (``<family>-<method>-s<seed>-<hash>``, refused
    when the family is something an id cannot carry, a space or a '/', saying how to name the run instead).
    Raises :class:`RunIdError`."""
    if run_name is not None:
        return validate_run_id(run_name, field=field)
    try:
        return validate_run_id(default_run_id, field="the default run id (<family>-<method>-s<seed>-<hash>)")
    except RunIdError as exc:
        raise RunIdError(f"{exc} Or name the run with {field}.") from None

# ---- store paths -----------------------------------------------------------------------------------------------
# A store is its catalog file (``--store``) with ``<name>.runs/`` (step logs) and DuckDB's ``<name>.wal`` beside it,
# so the catalog's name must leave room for the longest suffix within the file system's limit on one name.
STORE_SIBLING_SUFFIX = ".runs"
# What goes below ``<name>.runs/``: a run id (at most 128 characters) and a step directory with its files.
STORE_DEPTH_BYTES = 1 + RUN_ID_MAX_LEN + 128
_FILE_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISSOCK, "a socket"))
_STORE_IS = ("a store is a DuckDB file of its own (the catalog), with its step logs in <name>.runs/ beside it")


def shown_path(path: object, limit: int = 160) -> str:
    """A path for a message: whole up to ``limit`` characters, else its start and end with its length."""
    text = str(path)
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...{text[-limit // 4:]} ({len(text):,} characters)"


def store_example(directory: object, limit: int = 100) -> str:
    """``--store <directory>/pc.duckdb`` for a Fix text, quoted for the shell (:func:`shell_word`); a directory
    longer than ``limit`` characters is shown cut (:func:`shown_path`, the cut marked), to be typed, not pasted."""
    text = str(directory)
    if len(text) <= limit:
        return f"--store {shell_word(os.path.join(text, 'pc.duckdb'))}"
    return f"--store {shown_path(text, limit)}/pc.duckdb"


def _limit(directory: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(directory, name))
    except (OSError, ValueError):
        return default


def store_path_problem(path: Path, writing: bool) -> str | None:
    """Why the store's catalog at ``path`` (absolute) cannot be opened, as a message with its fix; None when
    nothing is wrong that can be seen before opening it. Looks only (``os.stat``): nothing is created or changed.

    Each cause has its own fix: a name too long for the file system (with room for ``.runs``), a path too long for
    the step files below it, a directory, a device (``/dev/null``, ``/dev/full``), FIFO or socket, a parent that is
    a file, no permission. A missing file is not a problem here (a writer creates it; a reader says there is no
    store). Whether the file is a DuckDB catalog, and whether another process holds it, only opening tells."""
    shown = shown_path(path)
    anchor = next((p for p in (path.parent, *path.parent.parents) if _exists_quietly(p)), Path(path.anchor or "/"))
    name_max = _limit(anchor, "PC_NAME_MAX", 255)
    for part in path.parts[1:]:
        if len(os.fsencode(part)) > name_max:
            what = "the store's file name" if part == path.name else f"the directory name {shown_path(part, 60)!r}"
            return (f"store path {shown}: {what} is {len(os.fsencode(part)):,} bytes long, past this file system's "
                    f"limit of {name_max} bytes for one name. Fix: choose a shorter name (e.g. "
                    f"{store_example(path.parent, 60)}).")
    if len(os.fsencode(path.name)) + len(STORE_SIBLING_SUFFIX) > name_max:
        return (f"store path {shown}: the store's file name is {len(os.fsencode(path.name)):,} bytes long; its step "
                f"logs go in {path.name[:20]}...{STORE_SIBLING_SUFFIX}/ beside it, past this file system's limit of "
                f"{name_max} bytes for one name. Fix: choose a file name of at most "
                f"{name_max - len(STORE_SIBLING_SUFFIX)} bytes (e.g. {store_example(path.parent, 60)}).")
    path_max = _limit(anchor, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(path))) + len(STORE_SIBLING_SUFFIX) + STORE_DEPTH_BYTES > path_max:
        return (f"store path {shown} is {len(os.fsencode(str(path))):,} bytes long; the step files below "
                f"{STORE_SIBLING_SUFFIX}/ would pass this system's limit of {path_max} bytes for a path. Fix: "
                "choose a store in a less deeply nested directory.")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _missing_store_problem(path, anchor, writing)
    except NotADirectoryError:
        return _missing_store_problem(path, anchor, writing)
    except PermissionError:
        return (f"store path {shown}: permission denied looking at it (a directory on the way is not searchable). "
                "Fix: give yourself access to its directory (chmod/chown), or choose a store path of your own.")
    except OSError as exc:
        return (f"store path {shown}: cannot look at it ({exc.strerror or exc}). Fix: check the --store path and "
                "that its file system is mounted and healthy.")
    if stat.S_ISDIR(st.st_mode):
        return (f"store path {shown} is a directory, and {_STORE_IS}. Fix: name the catalog file, e.g. "
                f"{store_example(path)}.")
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _FILE_KINDS if test(st.st_mode)), "not a regular file")
        return (f"store path {shown} is {kind}, not a regular file, and {_STORE_IS}; nothing can be stored there. "
                "Fix: give the path of a file of your own, e.g. --store ./pc.duckdb.")
    if not os.access(path, os.R_OK | (os.W_OK if writing else 0)):
        need = "read and write" if writing else "read"
        return (f"store path {shown}: permission denied (this user may not {need} it). Fix: give yourself "
                f"{need} access (chmod/chown), or choose a store path of your own.")
    return None


def _exists_quietly(p: Path) -> bool:
    try:
        return p.exists()
    except OSError:
        return False


def _missing_store_problem(path: Path, anchor: Path, writing: bool) -> str | None:
    """No file at ``path``: fine for a reader (it says there is no store) and for a writer whose nearest existing
    ancestor is a writable directory (the writer creates the rest)."""
    if not writing:
        return None
    if not anchor.is_dir():
        return (f"store path {shown_path(path)}: {shown_path(anchor, 100)} is a file, not a directory, so no store "
                "can be made below it. Fix: choose a store path in a directory.")
    if not os.access(anchor, os.W_OK | os.X_OK):
        return (f"store path {shown_path(path)}: permission denied creating it in {shown_path(anchor, 100)}. Fix: "
                "give yourself write access to that directory, or choose a store path of your own.")
    return None


def nearby_stores(path: object, limit: int = 3) -> list[str]:
    """The DuckDB stores near a store path that does not exist (a typo: ``run/pc.duckdb`` for ``runs/pc.duckdb``),
    most alike first, as a person types them (relative to the working folder when under it): the ``.duckdb`` files
    of the working folder and its subfolders, and of the path's nearest existing folder. Reads folder listings only."""
    import difflib

    p = Path(os.path.abspath(os.fspath(path)))
    anchor = p.parent
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    found: set[Path] = set()
    for folder in {Path.cwd(), anchor}:
        try:
            found.update(f for pattern in ("*.duckdb", "*/*.duckdb") for f in folder.glob(pattern) if f.is_file())
        except OSError:
            continue
    shown = {}
    for f in found:
        try:
            shown[str(f.relative_to(Path.cwd()))] = f
        except ValueError:
            shown[str(f)] = f
    typed = os.fspath(path)
    return sorted(shown, key=lambda s: (-difflib.SequenceMatcher(None, typed, s).ratio(), s))[:limit]
