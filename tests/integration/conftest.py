"""Fixtures shared by the integration tests: ``procs``, this process's descendants read from /proc (a test that
starts processes, a Ray cluster say, checks that every one of them is gone after it)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited (its parent has not reaped it yet)


def descendants(pid: int | None = None) -> set[int]:
    """Live descendants of ``pid`` (default: this process), from /proc."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid or os.getpid()]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out and _alive(c):
                out.add(c)
                todo.append(c)
    return out


def wait_gone(pids: set[int], timeout: float = 30.0) -> set[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for all of them to exit."""
    deadline = time.monotonic() + timeout
    while True:
        left = {p for p in pids if _alive(p)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def procs():
    """The /proc helpers, as a fixture (test modules are not importable from each other)."""
    return SimpleNamespace(descendants=descendants, wait_gone=wait_gone)
