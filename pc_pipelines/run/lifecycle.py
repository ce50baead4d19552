"""How a writer of a run opens the run and records its end: ONE copy for every writer (the segment driver,
:mod:`.driver`; the simulator, :mod:`pc_pipelines.simulator.runs`).

* :func:`writing_run` opens a run for writing: with ``overwrite``, a run directory that is a symbolic link is
  refused before the lock (nothing is written through the link, not even the lock file); the run's writer lock is
  held until the block ends (:func:`~pc_pipelines.store.hold_run`: a second writer gets
  :class:`~pc_pipelines.store.RunBusyError`); with ``overwrite`` the run's rows and files are deleted under the
  lock; and a :class:`~.stopping.SpaceReserve` is set aside for recording the run's end on a full disk.
* :func:`record_end` records the end of a run that stopped with an exception (a stop, an interrupt, an error), in
  this order: the step writer's leftovers of a write cut short are swept (their space given back first: a full
  disk), the reserve is released, then the writer's pending eval rows and the run's status and reason are recorded,
  each on its own. A record that fails is logged, never raised: the original error is what the caller re-raises.

* :func:`record_segment_attempt` records one attempt at a Dagster segment around its training, by whoever trains
  it (the ``training_segment`` asset in process, or a launched ``pilot-commit train-segment``), under the run's
  lock: its start, then done, stopped or failed, and the run ``finished`` once every segment is done.

The status and reason come from :func:`~.stopping.run_outcome`, which the caller calls with its own ``where`` and
``then`` (what to do once the disk is fixed: resume a training run, record a simulation again).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..errors import RunError
from ..store import StepLogWriter, Store, hold_run, refuse_symlinked, remove_run
from ..store.runlock import holds
from .stopping import SpaceReserve, StopRequested

T = TypeVar("T")

log = logging.getLogger(__name__)


@contextlib.contextmanager
def writing_run(store: Store, run_id: str, *directories: str | Path, command: str | None, overwrite: bool = False,
                check: Callable[[], bool] | None = None, lock_held: bool = False) -> Iterator[SpaceReserve]:
    """Hold ``run_id`` for writing while the block runs (see the module docstring); yields the run's space reserve,
    set aside in the first of ``directories`` (the run's directory in the store) and released when the block ends.

    ``check`` runs under the lock, before anything is deleted: it refuses (raises) what may not be written and
    returns whether there is a run to delete when overwriting (None: there always is). ``lock_held``: the caller
    already holds the run's writer lock on ``directories`` (it recorded a segment's start under it): it is not
    taken again (:class:`RunError` when this process does not hold it)."""
    if overwrite:
        refuse_symlinked(run_id, *directories)  # before the lock: nothing is written through the link either
    if lock_held:
        missing = [str(d) for d in directories if not holds(d)]
        if missing:
            raise RunError(f"run {run_id}: the caller does not hold the run's writer lock on {missing[0]}. Fix: take "
                           "it with hold_run() around the call, or let the call take it (lock_held=False).")
    with contextlib.nullcontext() if lock_held else hold_run(run_id, *directories, command=command):
        there = check() if check is not None else True
        if overwrite and there:
            remove_run(store, run_id, *directories)  # logs what it deleted
        reserve = SpaceReserve(directories[0])  # room to record the end even on a full disk
        try:
            yield reserve
        finally:
            reserve.release()


def record_end(store: Store, run_id: str, status: str, reason: str, writer: StepLogWriter, reserve: SpaceReserve,
               eval_rows: Sequence[dict[str, Any]] = ()) -> None:
    """Record the end of ``run_id`` after an exception: ``status`` and ``reason`` (and ``eval_rows`` not yet
    written before them), once ``writer``'s leftovers and ``reserve`` have given their space back. Call it in the
    ``except`` block and re-raise: nothing here raises."""
    with contextlib.suppress(Exception):
        writer.sweep()  # a step write cut short leaves a temporary directory (a full disk): give its space back first
    reserve.release()
    records = ([lambda: store.add_eval_results(eval_rows)] if eval_rows else []) + [
        lambda: store.set_status(run_id, status, reason)]
    for record in records:
        try:
            record()
        except Exception as rec_exc:  # the original error matters more (a full disk may refuse these too)
            log.error("could not record the end of run %s (%s: %s): %s", run_id, status, reason, rec_exc)


def record_finished(store: Store, run_id: str, complete: bool) -> bool:
    """The one place a run becomes ``finished``: when it has every step it was asked for (``complete``: the CLI's
    ``--steps`` reached, a simulation's steps all written, every segment of a Dagster run done), whatever an
    earlier attempt left as its status (a ``pilot-commit train`` that failed or stopped, say). A run not complete
    keeps its status. Returns whether the run is finished."""
    if not complete:
        return False
    if (store.get_run(run_id) or {}).get("status") != "finished":
        store.set_status(run_id, "finished")
    return True


def segments_finished(store: Store, run_id: str) -> bool:
    """A segmented run whose segments are all done is ``finished`` (:func:`record_finished`); whether it is."""
    return record_finished(store, run_id, complete=all(r["status"] == "done" for r in store.segments(run_id)))


def check_segment_request(store: Store, run_id: str, segment: int | None, from_step: int | None, until_step: int,
                          attempt: str | None) -> None:
    """Refuse (:class:`RunError`, nothing recorded, nothing trained) a request to train steps ``from_step + 1 ..
    until_step`` of ``run_id`` (``from_step`` None: from the newest checkpoint) that does not fit the run's segment
    plan in the store (steps count from 1): ``segment`` must be a segment of the plan, ``until_step`` its last step and ``from_step``
    the step before its first or a checkpoint inside it; without ``segment``, the steps must lie within the plan (when
    the run has one); ``attempt`` goes with a ``segment`` (issue 54: ``--segment 1`` with ``--until-step 0`` trained
    step 0 and recorded segment 1 done). Store step numbers, as the flags take them."""
    def flags(f: int | None, u: int) -> str:
        return (f"--from-step {f} " if f is not None else "") + f"--until-step {u}"

    if attempt is not None and segment is None:
        raise RunError(f"--attempt {attempt[:80]!r} names an attempt at a segment, but no --segment is given. Fix: "
                       "pass the segment it attempts (--segment K), or drop --attempt.")
    if attempt is not None and not attempt.strip():
        raise RunError("--attempt is empty. Fix: pass the Dagster run making the attempt, or drop --attempt.")
    if from_step is not None and from_step < 0:
        raise RunError(f"--from-step {from_step}: must be >= 0 (0: the base policy). Fix: pass 0 or a step "
                       "whose checkpoint exists.")
    if from_step is not None and until_step <= from_step:
        raise RunError(f"{flags(from_step, until_step)} trains no step (steps from_step + 1 .. until_step). Fix: "
                       "pass an --until-step after --from-step.")
    plan = store.segments(run_id)
    if segment is None:
        if plan and until_step > max(int(r["last_step"]) for r in plan):
            last = max(int(r["last_step"]) for r in plan)
            raise RunError(f"--until-step {until_step} is past run {run_id}'s plan, which ends at step {last}. Fix: "
                           f"pass --until-step {last} or less.")
        return
    row = next((r for r in plan if int(r["segment"]) == segment), None)
    if row is None:
        have = (f"its plan has segments 0..{len(plan) - 1}" if plan else "it has no segment plan (not a run "
                "registered by the start_run job)")
        raise RunError(f"--segment {segment}: run {run_id} has no such segment; {have}. Fix: pass a segment of the "
                       "plan (`pilot-commit sql ... \"SELECT * FROM segments\"` lists them), or drop --segment.")
    first, last = int(row["first_step"]), int(row["last_step"])
    ok_from = from_step is None or first - 1 <= from_step < last
    if until_step != last or not ok_from:
        resume = "" if first == last else f" (or --from-step S with S from {first - 1} to {last - 1}: resume after step S)"
        would = (f"steps {from_step + 1}..{until_step}" if from_step is not None else
                 f"from the newest checkpoint through step {until_step}")
        raise RunError(f"--segment {segment} of run {run_id} is steps {first}..{last}, but {flags(from_step, until_step)} "
                       f"would train {would}; nothing was trained or recorded. Fix: pass {flags(first - 1, last)}"
                       f"{resume}.")


def missing_segment_steps(store: Store, run_id: str, first: int, last: int) -> list[int]:
    """The steps ``first..last`` of ``run_id`` that the store does not hold (none: the segment is whole)."""
    have = {r["step"] for r in store.query("SELECT DISTINCT step FROM steps WHERE run_id = ? AND step BETWEEN ? AND ?",
                                          [run_id, first, last])}
    return [n for n in range(first, last + 1) if n not in have]


def record_segment_attempt(store: Store, run_id: str, segment: int, attempt: str | None, train: Callable[[], T],
                           totals: Callable[[T], tuple[int, float | None, float | None]]) -> T:
    """``train()`` as one attempt at ``segment`` of ``run_id`` (``attempt``: the Dagster run making it); the caller
    holds the run's writer lock. Recorded: the start (:meth:`~pc_pipelines.store.Store.segment_started`; a done
    segment stays done), then ``done`` with ``totals(result)`` (cumulative rollouts, eval accuracy, mean reward
    std), ``stopped`` on a stop request at a step boundary (resumed from its checkpoint), or ``failed`` with the
    error; the run is settled after (:func:`segments_finished`). A replay of a ``done`` segment that stops or
    fails leaves its earlier result standing: the segment stays done (the store keeps the error for the record) and
    the run's status and reason are put back as they were before the attempt (the driver recorded the run
    ``stopped`` or ``failed``). The exception is re-raised; a failing record of a failure is logged, never raised
    over it."""
    before = store.segment_started(run_id, segment, attempt)
    run_before = store.get_run(run_id) if before["status"] == "done" else None

    def earlier_result_stands() -> None:
        if run_before is not None:
            store.set_status(run_id, run_before["status"], run_before["status_reason"])

    try:
        result = train()
    except StopRequested as exc:
        why = exc.reason.split("; resume it with --resume")[0]  # the CLI's hint; a segment resumes by itself
        _logged(lambda: store.segment_stopped(run_id, segment, why[:2000], orchestrator_run_id=attempt), run_id)
        _logged(earlier_result_stands, run_id)
        raise
    except BaseException as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        _logged(lambda: store.segment_failed(run_id, segment, reason[:2000], orchestrator_run_id=attempt), run_id)
        _logged(earlier_result_stands, run_id)
        _logged(lambda: segments_finished(store, run_id), run_id)
        raise
    row = next((r for r in store.segments(run_id) if int(r["segment"]) == segment), None)
    missing = [] if row is None else missing_segment_steps(store, run_id, int(row["first_step"]), int(row["last_step"]))
    if missing:  # done only when every step of the segment is in the store (issue 54)
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        reason = (f"segment {segment} of run {run_id} (steps {row['first_step']}..{row['last_step']}) ended without "
                  f"step(s) {shown} in the store; it is not recorded done. Fix: train it again (re-materialize its "
                  "partition, or `pilot-commit train-segment` with its own --from-step and --until-step).")
        _logged(lambda: store.segment_failed(run_id, segment, reason[:2000], orchestrator_run_id=attempt), run_id)
        _logged(earlier_result_stands, run_id)
        raise RunError(reason)
    store.segment_done(run_id, segment, *totals(result))
    segments_finished(store, run_id)
    return result


def _logged(record: Callable[[], Any], run_id: str) -> None:
    try:
        record()
    except Exception as exc:  # the original error matters more (a full disk may refuse this too)
        log.error("run %s: could not record the end of a segment attempt: %s", run_id, exc)
