"""One attempt at one segment of a registered run, wherever it trains: the ``training_segment`` asset in process,
or ``pilot-commit train-segment`` in a subprocess, a pod or a Ray job (issue 56).

* :class:`SegmentRequest`: what every launcher hands down (the run, the steps, the segment and the attempt, where
  the store, the run directories and the prepared data are); its run id is checked once, when it is made.
* :func:`open_store`: the process's one store session for it (opened once, never vacuuming: only a run's writer
  deletes its compacted files, :meth:`~pc_pipelines.store.Store.init`).
* :func:`train_requested_segment`: the one place the request is checked against the run's plan, the run's writer
  lock is taken and the attempt is recorded (:func:`~.lifecycle.record_segment_attempt`) around the training.
* :func:`record_failed_launch`: the orchestrator's record of a launched attempt that never recorded its own end.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import RunError
from ..store import RunBusyError, Store, hold_run
from ..store.names import RunIdError, shown_path, validate_run_id
from .lifecycle import check_segment_request, record_segment_attempt
from .records import SegmentResult
from .training_run import RunSpec, TrainingRun, load_run_spec, run_dir_of


@dataclass(frozen=True)
class SegmentRequest:
    """Train steps ``from_step + 1 .. until_step`` of the registered run ``run_id`` (``from_step`` None: from its
    newest checkpoint), as attempt ``attempt`` (the Dagster run) at its segment ``segment``. The run's config is
    its row in the store at ``store`` (registered by ``start_run``); its directory is ``<runs_root>/<run_id>``.
    Paths as the process that trains sees them (:meth:`seen_from` for a pod's own mount)."""

    store: str
    run_id: str
    until_step: int
    from_step: int | None = None
    segment: int | None = None
    attempt: str | None = None
    runs_root: str = "runs"
    data_dir: str = "runs/data"

    def __post_init__(self) -> None:
        try:  # the one run-id check of the process (a RunId already checked, by argparse say, passes as it is)
            object.__setattr__(self, "run_id", validate_run_id(self.run_id, field="--run-id"))
        except RunIdError as exc:
            raise RunError(str(exc)) from None

    def seen_from(self, store: str | None = None, runs_root: str | None = None,
                  data_dir: str | None = None) -> SegmentRequest:
        """The same request with the paths another process sees (None: as they are)."""
        return dataclasses.replace(self, store=store or self.store, runs_root=runs_root or self.runs_root,
                                   data_dir=data_dir or self.data_dir)

    def run_dir(self) -> Path:
        return run_dir_of(self.runs_root, self.run_id)


def open_store(path: str | Path) -> Store:
    """The process's store session for a registered run: an existing store, opened once (created or upgraded, never
    vacuumed: a segment's session deletes no run's files, its writer does at compaction)."""
    store = Store(path)
    if not store.path.exists():
        raise RunError(f"no store at {shown_path(store.path)}. Fix: pass the store the run was registered in (--store).")
    return store.init(vacuum=False)


def load_requested_run(store: Store, request: SegmentRequest) -> RunSpec:
    """The :class:`RunSpec` of the run ``request`` names (``RunError`` with the fix when it is not registered)."""
    row = store.get_run(request.run_id)
    if row is None:
        raise RunError(f"run {request.run_id!r} is not in the store {shown_path(store.path)}. Fix: register it with "
                       "the start_run job (or pass the right --store).")
    return load_run_spec({**row, "run_id": request.run_id}, request.runs_root)  # the checked id, not the row's text


def train_requested_segment(store: Store, request: SegmentRequest, run: RunSpec | TrainingRun,
                            train: Callable[[], SegmentResult], command: str,
                            on_refused: Callable[[RunBusyError], None] | None = None) -> SegmentResult:
    """``train()`` as the attempt ``request`` describes, in this process: the request is checked against the run's
    plan (:func:`~.lifecycle.check_segment_request`: nothing recorded or trained when it does not fit), the run's
    writer lock is taken (refused: ``on_refused(exc)``, then :class:`~pc_pipelines.store.RunBusyError`; nothing
    recorded), and with a ``segment`` its start and end are recorded around ``train()``
    (:func:`~.lifecycle.record_segment_attempt`). ``train`` runs under the lock (``run_segment(..., lock_held=True)``)."""
    check_segment_request(store, request.run_id, request.segment, request.from_step, request.until_step,
                          request.attempt)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold_run(request.run_id, store.run_dir(request.run_id), run.run_dir, command=command))
        except RunBusyError as exc:
            if on_refused is not None:
                on_refused(exc)
            raise
        if request.segment is None:
            return train()
        return record_segment_attempt(store, request.run_id, request.segment, request.attempt, train, lambda r: (
            r.cumulative_rollouts, r.last_eval_accuracy, r.mean_reward_std))


def record_failed_launch(store: Store, request: SegmentRequest, exc: BaseException, command: str,
                         stopped_by_launcher: bool = False) -> None:
    """After a launched process failed: it records its own end; one that never recorded this attempt (it did not
    start: a bad volume, a missing image) or that was killed before its end (still ``running``) is recorded
    failed here, so the attempt counts towards the sensor's pause limit. ``request``'s paths are this process's.
    ``stopped_by_launcher``: the launcher itself stopped the process (a Ray job past ``job_timeout_s``): failed even
    when the process recorded the stop as ``stopped`` (which the sensor resumes without counting a failure: a
    segment that always runs past the limit would be retried for ever)."""
    run_id, k, attempt = request.run_id, request.segment, request.attempt
    if k is None:
        return
    row = next((r for r in store.segments(run_id) if int(r["segment"]) == k), None)
    if row is None:
        return
    reason = f"the launched process failed: {type(exc).__name__}: {exc}"[:2000]
    if row["orchestrator_run_id"] == attempt:
        store.segment_failed(run_id, k, reason, orchestrator_run_id=attempt, only_running=not stopped_by_launcher)
        return
    try:
        with hold_run(run_id, store.run_dir(run_id), request.run_dir(), command=command):
            store.segment_started(run_id, k, attempt)
            store.segment_failed(run_id, k, reason, orchestrator_run_id=attempt)
    except RunBusyError:  # another process writes the run now: it is not this attempt's to record
        pass
