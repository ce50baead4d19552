"""One writer per run: an OS-level lock on a run directory, with the holder's pid and host for the message.

Every process that writes a run (``pilot-commit simulate``, ``pilot-commit train``, a Dagster training segment in
process, the in-pod ``pilot-commit train-segment``) holds :func:`hold_run` on the run's directories for as long as
it writes. A second writer is refused with :class:`RunBusyError`, whose message names the holder (pid, host,
command, since when) and the fix.

**How.** The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<run dir>/.writer.lock``. The kernel drops a flock
when its holder dies (even by SIGKILL), so a crashed writer never leaves a lock behind on a local disk, and flock
works across NFS clients (Linux emulates it with POSIX locks there). The file's content is the holder's record (a
JSON line: pid, host, command, start time); it is only read for messages, except in one case: a lock still held
whose record names a **dead pid on this host** is stale (a process that inherited the descriptor across a bare
``fork()`` outlives its parent). Such a lock is broken under a second flock on the directory itself: a fresh lock
file is renamed over the old one, so the orphan keeps a lock nobody looks at any more. Every acquirer checks, once
it holds its flock, that the path still names the file it locked; if not, the lock was broken meanwhile and it
retries.

A process may hold the same run's lock more than once (``pilot-commit train`` holds it while it decides, and
:func:`pc_pipelines.run.run_segment` takes it again): the lock is counted per process and released with the last
holder.

:func:`remove_run` deletes a run's rows from the catalog and its files (``--overwrite``); call it while holding
the lock, which it keeps.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import shell_command
from ..steps import segment_name
from .again import again_fix
from .catalog import Store, StoreError
from .held import GUARD, HELD, Held, holds
from .schema import STEP_TABLES

log = logging.getLogger(__name__)

LOCK_NAME = ".writer.lock"


class RunBusyError(StoreError):
    """Another live process writes this run; the message names it and the fix."""

    def __init__(self, run_id: str, lock_path: Path, holder: dict[str, Any] | None) -> None:
        self.run_id, self.lock_path, self.holder = run_id, lock_path, holder
        super().__init__(
            f"run {run_id!r} is being written by {describe(holder)} (lock {lock_path}). Two writers of one run would "
            f"lose steps. Fix: wait for it to finish, stop it ({_stop_hint(holder)}), or choose another --run-name."
        )


def describe(holder: dict[str, Any] | None) -> str:
    """``pid 123 on host h (pilot-commit simulate ..., since 2026-...)`` from a lock record."""
    if not holder:
        return "another process (its record is not readable yet)"
    what = f"pid {holder.get('pid')} on host {holder.get('host')}"
    extra = [x for x in (holder.get("command"), f"since {holder['since']}" if holder.get("since") else None) if x]
    return what + (f" ({', '.join(extra)})" if extra else "")


def _stop_hint(holder: dict[str, Any] | None) -> str:
    if holder and holder.get("host") == socket.gethostname() and holder.get("pid"):
        return f"`{shell_command('kill', holder['pid'])}` stops it cleanly at a step boundary"
    if holder and holder.get("host"):
        return f"on host {holder['host']}"
    return "find it with `lsof` on the lock file"


# ---- liveness -----------------------------------------------------------------------------------------------------
def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid from the holder."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None  # field 22 of proc(5); fields[0] is field 3


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def pid_alive(pid: int, start: str | None = None) -> bool:
    """Whether ``pid`` (started at ``start``, when known) is a live process on this host; a zombie is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _proc_state(pid) == "Z":
        return False
    now = _proc_start(pid)
    return not (start and now and now != start)


def is_stale(holder: dict[str, Any] | None) -> bool:
    """A record of a dead process on this host (a lock still held by an orphan that inherited it is stale)."""
    if not holder or holder.get("host") != socket.gethostname():
        return False
    try:
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    return not pid_alive(pid, holder.get("start"))


def read_holder(lock_path: Path) -> dict[str, Any] | None:
    try:
        text = Path(lock_path).read_text().strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def _record(command: str | None) -> dict[str, Any]:
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]]) if sys.argv else command,
        "start": _proc_start(pid),
        "since": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


# ---- the lock -----------------------------------------------------------------------------------------------------
_HELD, _GUARD, _Held = HELD, GUARD, Held  # the registry lives below the catalog (.held), which consults it to vacuum


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _write_record(fd: int, record: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def _acquire(run_id: str, directory: Path, command: str | None) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    for _ in range(20):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if _try_flock(fd):
            if not _same_file(fd, path):  # broken (replaced) between our open and our flock: look again
                os.close(fd)
                continue
            previous = read_holder(path)
            if previous and previous.get("pid") is not None and (previous.get("pid"), previous.get("host")) != (
                    os.getpid(), socket.gethostname()):
                log.warning("run %s: the previous writer, %s, did not release its lock (it died); taking over",
                            run_id, describe(previous))
            _write_record(fd, _record(command))
            return fd
        holder = read_holder(path)
        os.close(fd)
        if not is_stale(holder):
            raise RunBusyError(run_id, path, holder)
        if _break_stale(run_id, directory, path, holder):
            continue
    raise RunBusyError(run_id, path, read_holder(path))


def _break_stale(run_id: str, directory: Path, path: Path, holder: dict[str, Any] | None) -> bool:
    """Replace a lock file held by an orphan of a dead holder (see the module docstring). True: look again."""
    dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)  # breakers take turns; held for microseconds
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if _try_flock(fd):
                return True  # released meanwhile: the normal path takes it
            if read_holder(path) != holder:
                return True  # someone else broke it and holds it now: the normal path reports them
        finally:
            os.close(fd)
        tmp = directory / f"{LOCK_NAME}.{os.getpid()}.tmp"
        tmp.write_text("")
        os.replace(tmp, path)
        log.warning("run %s: broke the stale lock of %s (a dead process on this host; a child of it still held the "
                    "lock file)", run_id, describe(holder))
        return True
    finally:
        os.close(dfd)


def _release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextlib.contextmanager
def hold_run(run_id: str, *directories: str | Path, command: str | None = None) -> Iterator[None]:
    """Hold the writer lock of ``run_id`` on each of ``directories`` (created if missing; the same directory twice,
    or a lock this process already holds, counts once more). Raises :class:`RunBusyError` when another live process
    holds one of them; nothing stays taken then."""
    keys = []
    for d in directories:
        key = str(Path(d).resolve())
        if key not in keys:
            keys.append(key)
    taken: list[str] = []
    try:
        for key in keys:
            with _GUARD:
                held = _HELD.get(key)
                if held is not None:
                    held.count += 1
                else:
                    _HELD[key] = _Held(_acquire(run_id, Path(key), command), 1)
            taken.append(key)
        yield
    finally:
        for key in reversed(taken):
            with _GUARD:
                held = _HELD[key]
                held.count -= 1
                if held.count == 0:
                    del _HELD[key]
                    _release(held.fd)



# ---- honest status --------------------------------------------------------------------------------------------
def lock_state(lock: Path) -> tuple[str, dict[str, Any] | None]:
    """Whether a run's lock file has a writer: ``("free", None)`` (never taken, or released: a holder clears its
    record), ``("live", holder)`` or ``("gone", holder)`` (a record its dead holder left). A holder on this host is
    judged by its pid and start time; one on another host by the lock itself: a shared, non-blocking flock taken
    and released at once (NFS clients share flocks through the server). That probe is the only moment a reader
    holds the lock; a writer starting in that instant is refused once (RunBusyError) and records nothing."""
    holder = read_holder(lock)
    if not holder:
        return "free", None
    if holder.get("host") == socket.gethostname():
        return ("gone" if is_stale(holder) else "live"), holder
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "live", holder  # cannot look: assume it writes
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return "live", holder  # held (EWOULDBLOCK), or locks unsupported here: assume it writes
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "gone", holder
    finally:
        os.close(fd)


def live_writer(store: Store, run_id: str) -> str | None:
    """The live process writing ``run_id`` (:func:`lock_state`), in words; None when there is none."""
    try:
        lock = store.run_dir(run_id) / LOCK_NAME
    except StoreError:
        return None
    state, holder = lock_state(lock)
    return describe(holder) if state == "live" else None


def writer_gone(store: Store, run_id: str) -> str | None:
    """Why a run recorded as ``running`` has no writer any more (its lock released with no end recorded, or held
    in the name of a dead process: a SIGKILL, a crash, a store moved mid-write), in words; None while its writer is
    alive (:func:`lock_state`)."""
    try:
        lock = store.run_dir(run_id) / LOCK_NAME
    except StoreError:
        return None
    if not lock.exists():
        return "no process holds its writer lock (none was ever taken in this store)"
    state, holder = lock_state(lock)
    if state == "free":
        return "no process holds its writer lock (its writer ended without recording how)"
    if state == "gone":
        return f"its writer, {describe(holder)}, is gone (killed or crashed before it could record its end)"
    return None


def between_segments(segments: list[dict[str, Any]], note: str | None = None) -> str | None:
    """Why a run of Dagster segments (its ``segments`` rows) that no process writes is not crashed, in words: it is
    waiting for its next segment (or for a retry of a failed one, or for its end to be recorded); ``note`` is what
    the advancing sensor or schedule last recorded for it (``requested by ...``, ``deferred: ...``). None when it
    has no segments or one is recorded as running: its writer died mid-segment."""
    if not segments or any(s["status"] == "running" for s in segments):
        return None
    rows = sorted(segments, key=lambda s: s["segment"])
    total = len(rows)
    nxt = next((s for s in rows if s["status"] != "done"), None)
    if nxt is None:
        return (f"all {total} segments done; the advance_runs sensor records it finished at its next tick "
                "(nothing is training it)")
    where = f"segment {segment_name(nxt['segment'])} of {total} (steps {nxt['first_step']}..{nxt['last_step']})"
    if nxt["status"] == "failed":
        error = str(nxt.get("error") or "no reason recorded")
        error = error if len(error) <= 80 else error[:77] + "..."
        text = (f"waiting to retry {where}, which failed {nxt['consecutive_failures']} time(s) in a row (last: "
                f"{error}); the advance_runs sensor retries it, then pauses the run")
    else:
        text = f"waiting for its next segment, {where}"
    return text + (f": {note}" if note else "; not requested yet (the advance_runs sensor or the "
                   "advance_runs_in_window schedule requests it)")


def _segments_by_run(store: Store) -> dict[str, list[dict[str, Any]]]:
    import duckdb

    try:
        rows = store.segments()
    except duckdb.CatalogException:  # a store from before segments (schema v3)
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["run_id"], []).append(row)
    return out


def with_live_status(store: Store, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``runs`` rows (``Store.list_runs``) with each ``running`` run whose writer is gone shown as ``waiting`` when it
    is a Dagster run between segments (:func:`between_segments`), else as ``stopped``, the reason naming the writer
    and the fix (the catalog is not changed: its writer, or a resume, records the end)."""
    out = []
    segments: dict[str, list[dict[str, Any]]] | None = None
    for r in runs:
        if r.get("status") == "finished" and r.get("missing_steps"):  # never "finished" with a step missing
            r = {**r, "status": "damaged", "status_reason": damaged_reason(store, r)}
        if r.get("status") == "running":
            why = writer_gone(store, r["run_id"])
            if why is not None:
                if segments is None:
                    segments = _segments_by_run(store)
                waiting = between_segments(segments.get(r["run_id"], []), r.get("status_reason"))
                if waiting is not None:
                    out.append({**r, "status": "waiting", "status_reason": waiting})
                    continue
                # the whole command: the store, the run folder, the run and its flags (issue 54: a fix without
                # them, pasted elsewhere, started a new run in ./runs/pc.duckdb)
                again = again_fix(store.path, {**r, **(store.get_run(r["run_id"]) or {})})
                fix = (f"{again} (or re-materialize its Dagster segment) continues it" if r.get("kind") != "simulate"
                       else f"re-record it with {again}")
                r = {**r, "status": "stopped", "status_reason": f"recorded as running, but {why}. Fix: {fix}."}
        out.append(r)
    return out


def damaged_reason(store: Store, run: dict[str, Any]) -> str:
    """Why a run recorded ``finished`` is shown ``damaged``: the steps it lacks (``Store.list_runs``' ``problems``,
    or how many) and the fix (issue 54: a segment recorded done without its step left the run "finished")."""
    what = run.get("problems") or f"{run.get('missing_steps')} step(s)"
    return (f"recorded finished, but the store lacks {what}; its figures are lower bounds. Fix: "
            f"`{shell_command('pilot-commit', 'check', '--store', store.path)}` says how to repair each step.")


# ---- overwrite ----------------------------------------------------------------------------------------------------
RUN_TABLES = ("runs", "checkpoints", "eval_results", "segments", *(f"compacted_{t}" for t in STEP_TABLES))


def run_has_data(store: Store, run_id: str) -> int:
    """How many steps the store holds for ``run_id`` (0: none, or no such run)."""
    if not store.path.exists():
        return 0
    row = store.query("SELECT count(*) AS n FROM steps WHERE run_id = ?", [run_id])
    return int(row[0]["n"]) if row else 0


def refuse_symlinked(run_id: str, *directories: str | Path) -> None:
    """Refuse (:class:`StoreError`, nothing touched) to overwrite a run whose directory is a symbolic link: deleting
    its contents would delete the files of the folder it points to."""
    for d in directories:
        d = Path(d)
        if d.is_symlink():
            raise StoreError(
                f"run {run_id!r}: its directory {d} is a symbolic link to {d.resolve()}; overwriting the run would delete "
                f"the files there, so nothing was deleted. Fix: remove the link (`{shell_command('rm', d)}`: the "
                "folder it points to is kept) and run again, or choose another --run-name."
            )


def remove_run(store: Store, run_id: str, *directories: str | Path) -> str:
    """Delete ``run_id``'s rows (every catalog table, one transaction) and everything in ``directories`` but the
    lock file; returns what was deleted, in words. The caller holds the run's lock on each directory (a writer
    would otherwise recreate files). A directory that is a symbolic link is refused before anything is deleted
    (:func:`refuse_symlinked`); a link inside a directory is removed, never followed."""
    refuse_symlinked(run_id, *directories)
    for d in directories:
        if Path(d).exists() and not holds(d):
            raise StoreError(f"remove_run({run_id!r}): this process does not hold the lock of {d}. Fix: call it "
                             "inside hold_run(run_id, ...).")
    rows = 0
    if store.path.exists():
        with store.connect(read_only=False) as con:
            tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            con.execute("BEGIN")
            for t in RUN_TABLES:
                if t in tables:
                    rows += con.execute(f"DELETE FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0]
            con.execute("COMMIT")
    removed = []
    for d in directories:
        d = Path(d)
        if not d.is_dir():
            continue
        n = 0
        for p in d.iterdir():
            if p.name == LOCK_NAME:
                continue
            if p.is_dir() and not p.is_symlink():
                n += sum(1 for q in p.rglob("*") if not q.is_dir() or q.is_symlink()) + 1
                shutil.rmtree(p)
            else:
                n += 1
                p.unlink()
        removed.append(f"{n} entries in {d}")
    what = f"deleted {rows} catalog rows" + (f" and {', '.join(removed)}" if removed else "")
    log.warning("run %s overwritten: %s", run_id, what)
    return what
