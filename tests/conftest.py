"""Fixtures shared by the tiers: ``grader`` (a math grader per module), ``new_store`` (an empty store in the test's
tmp_path), ``base_policy`` (below) and ``procs``: this process's descendants read from /proc and bounded waits on them
(``tests/support/proc_waits.py``: a test that starts processes, a Ray cluster or a vLLM engine say, waits for what
it counts and checks that every one of them is gone after it). The embedded base policy is the canonical warm start
shipped with the package (``pc_pipelines/warm_starts/``), exactly what ``pilot-commit train`` uses: the same weights
on every machine, so no test depends on which CPU kernels (AVX2 or AVX-512) built it. Builds of other recipes (tests
that shrink the SFT) go to a temporary cache, never the user's ``~/.cache``.

``shared_runs`` (``tests/support/shared_runs.py``): trained runs several files read, built once per session for every
xdist worker under a file lock, in a folder keyed by a hash of the code and the recipe that shape them.

``PC_PIPELINES_TEST_CACHE=DIR`` reuses those caches across sessions while developing (CI leaves it unset)."""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import proc_waits
import pytest
import slow_files
from shared_runs import SharedRuns

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def procs():
    """The /proc helpers and bounded waits of ``tests/support/proc_waits.py``, as a fixture."""
    return SimpleNamespace(descendants=proc_waits.descendants, wait_gone=proc_waits.wait_gone,
                           wait_started=proc_waits.wait_started, assert_none_left=proc_waits.assert_none_left,
                           wait_count=proc_waits.wait_count, wait_until=proc_waits.wait_until,
                           alive=proc_waits.alive, start_time=proc_waits.start_time, with_cmdline=proc_waits.with_cmdline)


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    reuse = os.environ.get("PC_PIPELINES_TEST_CACHE")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("policy-cache")


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory):
    """Trained runs built once per session and read by every worker (``SharedRuns.get``); a test copies one before it
    changes it. At the session's end, every shared run this worker read must be as its builder left it."""
    reuse = os.environ.get("PC_PIPELINES_TEST_CACHE")
    base = tmp_path_factory.getbasetemp()
    if reuse:
        root = Path(reuse) / "runs"
    else:  # an xdist worker's base is <session>/popen-gwN: its parent is the session's, shared by every worker
        root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"
    runs = SharedRuns(root)
    yield runs
    assert runs.changed() == {}, "a test wrote into a shared run: copy it first (shared_runs.copy_of)"


@pytest.fixture(scope="session")
def base_policy(policy_cache) -> Path:
    """The embedded default's SFT warm start: the shipped one (verified against its SHA256SUMS)."""
    from pc_pipelines.config import resolve
    from pc_pipelines.training.base_policy import ensure_base_policy

    cfg = resolve("embedded", method="grpo")
    return ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template, cache_dir=policy_cache)


@pytest.fixture(scope="module")
def grader(request):
    """A ``MathGrader`` shared by a module's tests and closed after them. A module sets its per-answer timeout with
    ``GRADER_TIMEOUT_S = ...`` (default: the grader's own)."""
    from pc_pipelines.rewards import MathGrader

    timeout = getattr(request.module, "GRADER_TIMEOUT_S", None)
    with MathGrader(**({} if timeout is None else {"timeout_s": timeout})) as g:
        yield g


@pytest.fixture
def new_store(tmp_path):
    """An empty store, initialised, at ``tmp_path / "s.duckdb"``."""
    from pc_pipelines.store import Store

    return Store(tmp_path / "s.duckdb").init()


@pytest.fixture(autouse=True)
def no_leaked_dagster_instance():
    """No test leaves a Dagster instance entered behind it. Entering an instance makes its definitions-state storage
    Dagster's "current" one (a context variable) until the instance is exited; one never exited stays current after
    it is collected, and the next ``Definitions`` built in that worker fails with "Attempted to resolve undefined
    DagsterInstance weakref". Dagster enters one where a test may not see it: a schedule context built on a
    persistent instance opens its own copy from the instance's ref when its resources are built, exited only when
    the context is closed (``with build_schedule_context(...) as ctx``). So each test is checked as it ends, and the
    one that leaks fails, naming the fix."""
    yield
    if "dagster" in sys.modules:
        from dagster import UPathDefsStateStorage

        leaked = UPathDefsStateStorage.get()
        assert leaked is None, (
            f"this test left a Dagster instance entered (its {type(leaked).__name__} is still the current "
            "definitions-state storage). Fix: close what entered it: `with DagsterInstance...`, `with "
            "build_schedule_context(...) as ctx`, `with build_op_context(...) as ctx`.")


def pytest_collection_modifyitems(config, items):
    """In `make test`'s workers (xdist), the slowest files first (``tests/support/slow_files.py``), so that no long
    file starts last and sets the end; a stable sort: every file keeps its tests' order, the others their places."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: slow_files.order(item.path.relative_to(REPO).as_posix()))


_SESSION = []  # the finished session, for pytest_unconfigure


def pytest_sessionfinish(session, exitstatus):
    _SESSION[:] = [session]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave a process that imported Ray without the interpreter's native teardown, once the session has reported.

    Ray 2.60's C++ log sink can outlive ``ray.shutdown()`` and crash that teardown: CI's ``make test-scale`` of
    2026-11-27 reported "7 passed", then "[ray_log_sink] Failed writing to file .../python-core-driver-*.log: Bad
    file descriptor" and a segmentation fault, so make failed with every test passed. Every test has already checked
    that its Ray processes are gone (``procs``); what is skipped here is only the exit of this process, and its
    status stays pytest's own. xdist workers exit through xdist (never here)."""
    if "ray" in sys.modules and _SESSION and not hasattr(config, "workerinput"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(_SESSION[0].exitstatus))
