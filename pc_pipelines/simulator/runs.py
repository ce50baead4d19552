"""Simulated runs recorded in the store, exactly as real training runs will be: a ``runs`` row with the resolved
config, one atomic step directory per step, eval results (the simulator's expected held-out accuracy, benchmark
``sim_heldout``) before training, on the ``training`` schedule (``evaluates_after``) and at the last step. A finished run is
compacted into the catalog (see ``store.schema``), so queries over it open no step files.

Eval rows go to the catalog in short transactions, batched at most every ``flush_every_s`` seconds so a
1000-step simulation does not open the catalog a thousand times; step logs never touch the catalog.

One writer per run (:mod:`pc_pipelines.store.runlock`): the run's lock is held from before the run is looked up
until its status is final, so a second writer of the same run is refused (:class:`~pc_pipelines.store.RunBusyError`)
instead of interleaving its steps. A run that already has steps is never replaced silently: it is refused unless
``overwrite`` (``--overwrite``), which deletes its rows and files first. A stop request (``stop``, set by SIGTERM
or Ctrl-C) ends the run at the next step boundary with status ``stopped``; errors end it ``failed`` with the reason
(a full disk says so, with the fix). The run is opened and its end recorded as a training run's are
(:mod:`pc_pipelines.run.lifecycle`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..config import RunConfig
from ..run.lifecycle import record_end, record_finished, writing_run
from ..run.stopping import SpaceReserve, StopFlag, StopRequested, run_outcome
from ..steps import BEFORE_TRAINING, step_number
from ..store import RunRecord, Store, StoreError, run_has_data, step_tables
from .model import SimStep, Simulation

SIM_BENCHMARK = "sim_heldout"
_AGAIN = "record it again with --overwrite (a simulation does not resume)"


@dataclass(frozen=True)
class RecordedStep:
    sim_step: SimStep
    write_seconds: float
    evaluated: bool


def record_simulation(
    config: RunConfig,
    store: Store,
    steps: int,
    run_id: str | None = None,
    flush_every_s: float = 2.0,
    compact_every: int | None = 250,
    on_step: Callable[[RecordedStep], None] | None = None,
    overwrite: bool = False,
    stop: StopFlag | None = None,
) -> Iterator[RecordedStep]:
    """Run ``steps`` simulated steps of ``config`` into ``store``; yields each step as it is written.

    Every ``compact_every`` steps and at the end the written steps are compacted into the catalog (None: never),
    which bounds how many step files a query over a running run has to open. A run ``run_id`` that already has
    steps is refused (:class:`StoreError`) unless ``overwrite``; another process writing it is refused
    (:class:`~pc_pipelines.store.RunBusyError`). Nothing is checked or locked before the first step is asked for.
    """
    run_id = run_id or config.default_run_id()
    store.init()

    def check() -> bool:  # under the lock: refuse to replace a run silently; whether there is one to delete
        existing = store.get_run(run_id)
        if existing is not None and not overwrite:
            have = run_has_data(store, run_id)
            if existing["config_hash"] != config.config_hash:
                raise StoreError(
                    f"run {run_id!r} already exists with a different config (hash {existing['config_hash']} != "
                    f"{config.config_hash}) and {have} steps. Fix: pick another --run-name, or pass --overwrite to "
                    "delete it and record this one."
                )
            if have:
                raise StoreError(
                    f"run {run_id!r} already exists in {store.path} with {have} steps (status {existing['status']}); "
                    "it is not replaced silently. Fix: pick another --run-name, or pass --overwrite to delete it and "
                    "record it again."
                )
        return existing is not None

    with writing_run(store, run_id, store.run_dir(run_id), command="pilot-commit simulate", overwrite=overwrite,
                     check=check) as reserve:
        yield from _record(config, store, steps, run_id, flush_every_s, compact_every, on_step, stop, reserve)


def _record(config: RunConfig, store: Store, steps: int, run_id: str, flush_every_s: float,
            compact_every: int | None, on_step: Callable[[RecordedStep], None] | None,
            stop: StopFlag | None, reserve: SpaceReserve) -> Iterator[RecordedStep]:
    sim = Simulation(config.allocator, config.sim)  # checks the config: refused before the run is registered
    # lineage ``steps``: how many it was asked for, so a fix that records it again asks for as many
    store.register_run(RunRecord.for_config(config, run_id, "simulate", {"steps": int(steps)}))
    # A simulated run always starts afresh: forget whatever an earlier attempt of the same id wrote.
    store.reopen_after(run_id, -1)
    writer = store.writer(run_id)
    schedule = config.training
    sampled = 0
    pending = [_eval_row(run_id, BEFORE_TRAINING, sim.population.accuracy(), config)]
    last_flush = time.monotonic()
    done = 0
    try:
        for i in range(steps):
            if stop is not None:
                stop.check()
            st = sim.step()
            t0 = time.perf_counter()
            step = step_number(st.outcome.step)  # the run's step number, as stored and shown
            writer.write_step(step, step_tables(run_id, st.outcome))
            dt = time.perf_counter() - t0
            done = i + 1
            before, sampled = sampled, sampled + st.outcome.ledger.sampled_rollouts
            evaluated = schedule.evaluates_after(step, before, sampled) or i == steps - 1
            if evaluated:
                pending.append(_eval_row(run_id, step, st.accuracy, config))
            if pending and (time.monotonic() - last_flush > flush_every_s or i == steps - 1):
                store.add_eval_results(pending)
                pending, last_flush = [], time.monotonic()
            if compact_every and (i + 1) % compact_every == 0 and i != steps - 1:
                store.compact(run_id)
            rec = RecordedStep(st, dt, evaluated)
            if on_step:
                on_step(rec)
            yield rec
        store.add_eval_results(pending)
        if compact_every:
            store.compact(run_id)
        reserve.release()
        record_finished(store, run_id, complete=True)
    except BaseException as exc:
        if isinstance(exc, GeneratorExit):  # the consumer stopped asking for steps
            status, reason = "failed", "interrupted"
        else:
            status, reason = run_outcome(exc, where=str(store.run_dir(run_id)), then=_AGAIN)
            if isinstance(exc, (StopRequested, KeyboardInterrupt)):
                reason += (f": {done} of {steps} steps written. A simulation does not resume: record it again with "
                           "--overwrite")
        record_end(store, run_id, status, reason, writer, reserve, eval_rows=pending)
        raise


def _eval_row(run_id: str, step: int, accuracy: float, config: RunConfig) -> dict:
    return {
        "run_id": run_id,
        "step": step,
        "benchmark": SIM_BENCHMARK,
        "k": 1,
        "temperature": config.training.eval_temperature,
        "accuracy": accuracy,
        "n_prompts": config.sim.eval_prompts,
    }
