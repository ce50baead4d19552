"""Bounded waits for tests that count things another process starts or stops (processes from /proc, engine cores,
actors). A count taken at one moment assumes the thing has already started or already ended, which a busy machine
breaks; these helpers poll what they count until it is what the test expects or a generous deadline passes, then fail
with what they saw. A slow machine makes a test slower, never red.

Processes are told apart by (pid, start time), so a pid the kernel gave to a new process after ours exited does not
read as ours still running."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import cli_forkserver

T = TypeVar("T")

DEADLINE_S = 180.0
"""The default bound of every wait: far above what a wait takes on an idle machine (seconds), so that only a thing
that never happens runs into it."""

START_S = 600.0
"""The bound tests give a Ray engine's actors to start (``start_timeout_s``; the engine's own default, 120 s, is
what a user waits on an idle cluster): workers started on a busy 2-core machine took over 120 s."""

HANG_S = 3600.0
"""The bound of a whole command a test waits to finish (a demo, a study part): only a hang reaches it. Measured under
a 1-minute load average of ~8 on 2 cores: the demo-graph test's two demo runs 942 s, a study part over 900 s."""

_SHOWN = 80


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state is [0], ppid [1], start time [19]); None: no such
    process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when it has exited (a zombie has exited: its parent
    has not reaped it yet)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int, started: int | None = None) -> bool:
    """``pid`` is running (and, given ``started``, is still the process that started then)."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def cmdline(pid: int) -> str:
    """The process's command line, cut to ~80 characters (for messages)."""
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _is_resource_tracker(pid: int) -> bool:
    try:
        return b"multiprocessing.resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def descendants(pid: int | None = None) -> set[int]:
    """Live descendants of ``pid`` (default: this process), from /proc, but the CLI fork server of this process
    (tests/support/cli_forkserver.py: started on first use, it lives as long as the test process; the commands it
    forks are its children, so they count). Python's multiprocessing resource tracker is
    left out: one per interpreter, started by the first ``spawn`` (vLLM's engine core) and shared by every later one,
    it exits with the interpreter, not with the engine that happened to start it."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            fields = _stat_fields(int(d.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = set(), [pid or os.getpid()]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out and alive(c):
                out.add(c)
                todo.append(c)
    server = cli_forkserver.server_pid()  # it outlives the tests that first used it, by design; its children count
    return {p for p in out if p != server and not _is_resource_tracker(p)}


def with_cmdline(pids: Iterable[int]) -> dict[int, str]:
    return {p: cmdline(p) for p in sorted(pids)}


def wait_until(probe: Callable[[], T], done: Callable[[T], bool], what: str, timeout: float = DEADLINE_S,
               interval: float = 0.25) -> T:
    """Call ``probe`` until ``done`` holds for what it returns (returned) or ``timeout`` seconds pass: then an
    AssertionError names ``what`` was awaited, how long, and the last value seen. ``probe`` runs at least once and
    once more at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if done(seen):
            return seen
        if time.monotonic() >= deadline:
            shown = repr(seen)
            shown = shown if len(shown) <= 4 * _SHOWN else shown[: 4 * _SHOWN - 3] + "..."
            raise AssertionError(f"waited {timeout:g} s for {what}; last seen: {shown}")
        time.sleep(interval)


def wait_count(probe: Callable[[], int], expected: int, what: str, timeout: float = DEADLINE_S) -> int:
    """Wait until ``probe()`` returns ``expected`` (e.g. engine cores up once actors have started them)."""
    return wait_until(probe, lambda n: n == expected, f"{what} to be {expected}", timeout)


def wait_started(before: set[int], what: str, pid: int | None = None, timeout: float = DEADLINE_S) -> set[int]:
    """Wait until ``pid``'s descendants (default: this process's) include some not in ``before``; returns them."""
    return wait_until(lambda: descendants(pid) - before, bool, f"{what} (new processes)", timeout)


def wait_gone(pids: Iterable[int], timeout: float = 30.0) -> set[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for all of them to exit (those already gone when
    called count as gone; a pid reused meanwhile by another process counts as gone)."""
    watched = {p: t for p in pids if (t := start_time(p)) is not None}
    deadline = time.monotonic() + timeout
    while True:
        left = {p for p, t in watched.items() if alive(p, t)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def assert_none_left(before: set[int], what: str, pid: int | None = None, timeout: float = DEADLINE_S,
                     also: Iterable[tuple[int, int]] = ()) -> None:
    """Nothing left running: wait until every process that is, or becomes while waiting, a descendant of ``pid``
    (default: this process) and is not in ``before`` has exited, and every (pid, start time) in ``also`` (processes
    found another way, taken while they ran: they need not be descendants). A process seen once is followed by (pid,
    start time) even after it leaves the tree (an orphan re-parented to init still counts as left running). On
    timeout an AssertionError names ``what`` and lists what is left, pid and command line."""
    watched: set[tuple[int, int]] = set(also)
    deadline = time.monotonic() + timeout
    while True:
        for p in descendants(pid) - before:
            if (t := start_time(p)) is not None:
                watched.add((p, t))
        left = {p for p, t in watched if alive(p, t)}
        if not left:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: {len(left)} process(es) still running after {timeout:g} s: "
                                 f"{with_cmdline(left)}")
        time.sleep(0.2)
