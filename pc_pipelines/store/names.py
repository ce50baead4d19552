"""Run ids: the one place that says which names a run may have.

A run id names a directory under ``<store>.runs/`` and appears in Dagster partition keys, so it is held to a small
character set: a letter or digit first, then letters, digits, ``.``, ``_`` and ``-``; at most 128 characters. No
path separators, no glob or shell metacharacters, no spaces, never ``.``/``..``/a hidden name, always a legal file
name. Every entry point calls :func:`validate_run_id`: the Store API (``register_run``, ``writer``), the CLI
(``--run-name``) and the Dagster ``start_run`` job. Default run ids (``<family>-<method>-s<seed>-<hash>``) are valid
for every family made of the same characters.
"""

from __future__ import annotations

import re

RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
RUN_ID_MAX_LEN = 128
RUN_ID_RULE = (
    "a run id is 1 to 128 characters: letters, digits, '.', '_' and '-', starting with a letter or a digit "
    f"(regex {RUN_ID_PATTERN})"
)
_RUN_ID = re.compile(RUN_ID_PATTERN)


class RunIdError(ValueError):
    """A run id outside the allowed set; the message states the set and the fix."""


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
    """``run_id`` itself when valid, else :class:`RunIdError` naming ``field``, the allowed set and the fix."""
    problem = run_id_problem(run_id)
    if problem is None:
        return run_id  # type: ignore[return-value]
    shown = run_id if not isinstance(run_id, str) or len(run_id) <= 80 else run_id[:77] + "..."
    raise RunIdError(
        f"{field} {shown!r} {problem}: {RUN_ID_RULE}. Fix: choose a name like 'pc-seed0-try2' (for the default "
        "<family>-<method>-s<seed>-<hash>, a family made of the same characters)."
    )
