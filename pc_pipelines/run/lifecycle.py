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

The status and reason come from :func:`~.stopping.run_outcome`, which the caller calls with its own ``where`` and
``then`` (what to do once the disk is fixed: resume a training run, record a simulation again).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..store import StepLogWriter, Store, hold_run, refuse_symlinked, remove_run
from .stopping import SpaceReserve

log = logging.getLogger(__name__)


@contextlib.contextmanager
def writing_run(store: Store, run_id: str, *directories: str | Path, command: str | None, overwrite: bool = False,
                check: Callable[[], bool] | None = None) -> Iterator[SpaceReserve]:
    """Hold ``run_id`` for writing while the block runs (see the module docstring); yields the run's space reserve,
    set aside in the first of ``directories`` (the run's directory in the store) and released when the block ends.

    ``check`` runs under the lock, before anything is deleted: it refuses (raises) what may not be written and
    returns whether there is a run to delete when overwriting (None: there always is)."""
    if overwrite:
        refuse_symlinked(run_id, *directories)  # before the lock: nothing is written through the link either
    with hold_run(run_id, *directories, command=command):
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
    earlier attempt left as its status (a failed replay of a done segment leaves ``failed``). A run not complete
    keeps its status. Returns whether the run is finished."""
    if not complete:
        return False
    if (store.get_run(run_id) or {}).get("status") != "finished":
        store.set_status(run_id, "finished")
    return True
