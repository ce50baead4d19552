"""Simulated runs recorded in the store, exactly as real training runs will be: a ``runs`` row with the resolved
config, one atomic step directory per step, eval results (the simulator's expected held-out accuracy, benchmark
``sim_heldout``) before training and every ``training.eval_every`` steps and at the last step. A finished run is
compacted into the catalog (see ``store.schema``), so queries over it open no step files.

Eval rows go to the catalog in short transactions, batched at most every ``flush_every_s`` seconds so a
1000-step simulation does not open the catalog a thousand times; step logs never touch the catalog.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .config import RunConfig
from .simulate import SimStep, Simulation
from .store import RunRecord, Store, step_tables

log = logging.getLogger(__name__)

SIM_BENCHMARK = "sim_heldout"


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
) -> Iterator[RecordedStep]:
    """Run ``steps`` simulated steps of ``config`` into ``store``; yields each step as it is written.

    Every ``compact_every`` steps and at the end the written steps are compacted into the catalog (None: never),
    which bounds how many step files a query over a running run has to open.
    """
    run_id = run_id or config.default_run_id()
    store.init()
    store.register_run(RunRecord.for_config(config, run_id, "simulate"))
    # A simulated run always starts from step 0: forget whatever an earlier run of the same id wrote.
    store.reopen_after(run_id, -2)
    writer = store.writer(run_id)
    sim = Simulation(config.allocator, config.sim)
    every = config.training.eval_every
    pending = [_eval_row(run_id, -1, sim.population.accuracy(), config)]
    last_flush = time.monotonic()
    try:
        for i in range(steps):
            st = sim.step()
            t0 = time.perf_counter()
            writer.write_step(st.outcome.step, step_tables(run_id, st.outcome, sim.allocator))
            dt = time.perf_counter() - t0
            evaluated = (st.outcome.step + 1) % every == 0 or i == steps - 1
            if evaluated:
                pending.append(_eval_row(run_id, st.outcome.step, st.accuracy, config))
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
        store.set_status(run_id, "finished")
    except BaseException as exc:
        store.add_eval_results(pending)
        reason = "interrupted" if isinstance(exc, (GeneratorExit, KeyboardInterrupt)) else f"{type(exc).__name__}: {exc}"
        store.set_status(run_id, "failed", reason)
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
