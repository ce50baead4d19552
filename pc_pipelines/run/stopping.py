"""Clean stops and honest statuses: what a writer of a run does on SIGTERM / Ctrl-C, and what status and reason a
run ends with when it does not finish.

* :func:`stop_on_signals` (the CLI's writers: ``simulate``, ``train``, ``train-segment``) turns the first SIGINT or
  SIGTERM into a request, which the loops honour at the next step boundary (training also writes a checkpoint
  there, so nothing is lost); a second signal abandons the step at once. Either way :class:`StopRequested` ends the
  run with status ``stopped``, and the command exits with 128 + the signal number (130 for Ctrl-C, 143 for
  SIGTERM) after one line on stderr, never a traceback.
* :func:`run_outcome` maps the exception a run ended with to its status and reason: ``stopped`` for a stop or an
  interrupt, ``failed`` otherwise, with a disk full (ENOSPC, also when a library wraps it, as safetensors does, or
  hides it, as torch's zip writer does: :func:`disk_full_error`) or another I/O error spelled out with the fix.
* :class:`SpaceReserve`: recording that a disk filled up needs a little room on that disk (the catalog's status
  update). A writer sets a small file aside when it starts and gives that room back before it records its end.

No signal handler is installed at import time, and none outside the main thread (Dagster's run workers handle
their own signals; an interrupt reaches the loop there as ``KeyboardInterrupt``). A process that drives Dagster in
itself (``make demo``: ``execute_in_process``) holds :func:`stop_on_signals` around it; Dagster swaps its own handlers
in while it executes, so its assets take the process's flag back (:func:`active_stop_flag`) around their work.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from ..errors import inodes_fix, no_free_inodes

log = logging.getLogger(__name__)


class StopRequested(BaseException):
    """A signal asked the run to stop (a BaseException, like KeyboardInterrupt: ``except Exception`` lets it by)."""

    def __init__(self, signum: int, abandoned: bool = False, detail: str = "") -> None:
        self.signum, self.abandoned, self.detail = signum, abandoned, detail
        super().__init__(self.reason)

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def reason(self) -> str:
        how = "abandoning the step in progress" if self.abandoned else "at a step boundary"
        return f"stopped by {self.signal_name} ({how}){': ' + self.detail if self.detail else ''}"

    def with_detail(self, detail: str) -> StopRequested:
        return StopRequested(self.signum, self.abandoned, detail)


class StopFlag:
    """Set by the first signal; the loops call :meth:`check` at every step boundary."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise StopRequested(self.signum)


_ACTIVE: list[StopFlag] = []  # the flags of the stop_on_signals blocks open in this process, innermost last


def active_stop_flag() -> StopFlag | None:
    """The flag of the innermost :func:`stop_on_signals` block open in this process (None outside any)."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def stop_on_signals(flag: StopFlag | None = None) -> Iterator[StopFlag]:
    """SIGINT and SIGTERM set ``flag`` (the first) or raise :class:`StopRequested` (the second) while the block
    runs; the previous handlers come back afterwards. Outside the main thread this installs nothing."""
    flag = flag or StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame) -> None:
        if flag.requested:
            raise StopRequested(signum, abandoned=True)
        flag.request(signum)
        log.info("%s received: stopping at the end of the current step (send it again to abandon the step)",
                    signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _ACTIVE.append(flag)
    try:
        yield flag
    finally:
        _ACTIVE.pop()
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def process_stop() -> Iterator[StopFlag | None]:
    """Around an asset's work in a process that stops on signals (``make demo`` holds :func:`stop_on_signals` around
    ``execute_in_process``, which swaps Dagster's handlers in: they would raise inside the step): SIGTERM / Ctrl-C set
    that process's flag again, so the step in progress finishes and the loop stops at its boundary. Elsewhere (a
    Dagster run worker, a test) nothing is installed and the block gets None."""
    flag = active_stop_flag()
    if flag is None:
        yield None
        return
    with stop_on_signals(flag) as f:
        yield f


# ---- statuses -------------------------------------------------------------------------------------------------
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXT = ("no space left on device", "disk quota exceeded")


def io_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc`` (itself, its cause or context), or one made from a library's wrapped message
    (safetensors reports a full disk as ``SafetensorError: ... No space left on device (os error 28)``, pyarrow as
    an OSError that may carry no errno). torch's zip writer on a path says only ``unexpected pos``: the writers
    avoid that (:func:`~pc_pipelines.run.checkpoints.save_torch`) or ask :func:`disk_full_error`."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).lower()
        if isinstance(e, OSError) and (e.errno is not None or not any(t in text for t in _DISK_FULL_TEXT)):
            return e
        if any(t in text for t in _DISK_FULL_TEXT):
            return OSError(errno.ENOSPC, f"No space left on device ({type(e).__name__}: {str(e)[:300]})",
                           *([e.filename] if isinstance(e, OSError) and e.filename else []))
        e = e.__cause__ or e.__context__
    return None


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still write on the filesystem holding ``path`` (or its nearest existing
    parent); None when it cannot be told."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def disk_full_error(exc: BaseException, path: str | Path, margin: int = 1 << 20) -> OSError | None:
    """An ``OSError(ENOSPC)`` naming ``path`` when ``exc`` (an error of a write into ``path``) is a full disk that
    its library did not call one, else None. torch's zip writer given a path reports ENOSPC as
    ``RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos``, and verl's workers save with it: a
    write that failed while the filesystem holding ``path`` has less than ``margin`` bytes left failed on the full
    disk. None for an error that already is an I/O error (:func:`io_error` describes it), a stop, or a disk with room.
    Ask before the partial write's space is given back."""
    if not isinstance(exc, Exception) or io_error(exc) is not None:
        return None
    free = free_bytes(path)
    if free is None or free >= margin:
        return None
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return OSError(errno.ENOSPC, f"No space left on device ({free} bytes left; the write failed with "
                                 f"{type(exc).__name__}: {first})", str(path))


def is_disk_full(err: OSError) -> bool:
    return err.errno in _DISK_FULL


def failed_write(exc: BaseException) -> bool:
    """Whether a command should end on ``exc`` with :func:`run_outcome`'s one line: an OSError, or a full disk a
    library wrapped in its own error (safetensors' ``SafetensorError: ... No space left on device``); not a refusal
    whose own one line says it (a :class:`~pc_pipelines.store.StoreError` about a full disk)."""
    from ..store import StoreError

    if isinstance(exc, OSError):
        return True
    if isinstance(exc, StoreError):
        return False
    err = io_error(exc)
    return err is not None and is_disk_full(err)


def describe_io_error(err: OSError, where: str | None = None, then: str = "resume the run") -> str:
    """A one-line reason with the fix for a failed write; ``where`` names the directory that was written, ``then``
    what to do once the disk is fixed."""
    place = where or (str(err.filename) if err.filename else "the run's directories and the store")
    if is_disk_full(err):
        written = err.filename or where
        inodes = no_free_inodes(written) if written else None
        if inodes:  # ENOSPC with space left: `df -h` would show room, so the fix must not say "free space"
            return f"disk full: {inodes}. {inodes_fix(written, then)}"
        return (f"disk full: {err.strerror or err}{' (' + str(err.filename) + ')' if err.filename else ''}. Fix: free "
                f"space on the disk holding {place} (or point --out/--store at a bigger one), then {then}.")
    return (f"I/O error: {err}. Fix: check that {place} is writable and its disk healthy (`dmesg`, `df -h`), then "
            f"{then}.")


def run_outcome(exc: BaseException, where: str | None = None, then: str = "resume the run") -> tuple[str, str]:
    """(status, reason) of a run that ended with ``exc``; ``where`` and ``then`` complete an I/O error's fix."""
    if isinstance(exc, StopRequested):
        return "stopped", exc.reason
    if isinstance(exc, KeyboardInterrupt):
        return "stopped", "interrupted (SIGINT / Ctrl-C)"
    err = io_error(exc)
    if err is not None:
        return "failed", describe_io_error(err, where, then)
    return "failed", f"{type(exc).__name__}: {exc}"


class SpaceReserve:
    """``nbytes`` set aside in ``directory`` (``.space-reserve``) while a run writes, given back by :meth:`release`
    (before recording the run's end, so a full disk still lets the status be written). Creating it on a disk that
    is already full raises the OSError, before the run is touched."""

    NAME = ".space-reserve"

    def __init__(self, directory: str | Path, nbytes: int = 2 << 20) -> None:
        self.path = Path(directory) / self.NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.path, "wb") as f:
                f.write(b"\0" * nbytes)  # real blocks (a sparse file or a lazy fallocate would reserve nothing)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            self.release()
            raise

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
