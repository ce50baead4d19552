"""Shared fixtures. ``procs``: this process's descendants read from /proc (a test that starts processes, a Ray
cluster or a vLLM engine say, checks that every one of them is gone after it). The embedded base policy is the canonical warm start shipped with the package
(``pc_pipelines/warm_starts/``), exactly what ``pilot-commit train`` uses: the same weights on every machine, so no
test depends on which CPU kernels (AVX2 or AVX-512) built it. Builds of other recipes (tests that shrink the SFT)
go to a temporary cache, never the user's ``~/.cache``.

``PC_PIPELINES_TEST_CACHE=DIR`` reuses that cache across sessions while developing (CI leaves it unset)."""

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


def _is_resource_tracker(pid: int) -> bool:
    try:
        return b"multiprocessing.resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


def descendants(pid: int | None = None) -> set[int]:
    """Live descendants of ``pid`` (default: this process), from /proc. Python's multiprocessing resource tracker is
    left out: one per interpreter, started by the first ``spawn`` (vLLM's engine core) and shared by every later one,
    it exits with the interpreter, not with the engine that happened to start it."""
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
    return {p for p in out if not _is_resource_tracker(p)}


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


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    reuse = os.environ.get("PC_PIPELINES_TEST_CACHE")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("policy-cache")


@pytest.fixture(scope="session")
def base_policy(policy_cache) -> Path:
    """The embedded default's SFT warm start: the shipped one (verified against its SHA256SUMS)."""
    from pc_pipelines.config import resolve
    from pc_pipelines.training.base_policy import ensure_base_policy

    cfg = resolve("embedded", method="grpo")
    return ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template, cache_dir=policy_cache)


@pytest.fixture(autouse=True)
def no_leaked_dagster_instance(monkeypatch):
    """No test sees a "current" Dagster definitions-state storage whose instance is gone. Dagster keeps the storage
    of the instance last entered in a context variable, and in a busy CI test worker building a ``Definitions``
    failed now and then with "Attempted to resolve undefined DagsterInstance weakref" (13 tests in one clean-clone
    run; after the variable was cleared before each test, one set-up in another run, so the stale value can also
    arrive during a test; its source was not found). So the variable is cleared before each test, and a storage
    whose instance was collected reads as none, which is what Dagster sees once that instance has been exited. A
    live storage is returned as it is."""
    import sys

    if "dagster" in sys.modules:
        from dagster._core.storage.defs_state import base

        base._current_storage.set(None)
        current = base.DefsStateStorage.get.__func__

        def live_only(cls):
            storage = current(cls)
            ref = getattr(storage, "_instance_weakref", None)
            if storage is not None and ref is not None and ref() is None:
                base._current_storage.set(None)
                return None
            return storage

        monkeypatch.setattr(base.DefsStateStorage, "get", classmethod(live_only))
    yield
