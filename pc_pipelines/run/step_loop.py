"""The step loop, written once: how one allocator step is driven through an engine.

    session = allocator.begin_step()
    for each engine call the method asks for: session.observe(engine(call))
    session.finish() -> StepOutcome            (any error: allocator.abort_step(), then re-raised)

Every path that steps an allocator goes through :func:`allocator_step`: the segment driver for every backend
(:meth:`~.driver.OpenRun.step`: the engine is the backend's ``generate``, one call generated and graded), the
simulator (:class:`~pc_pipelines.simulator.model.Simulation`, the engine is the prompt population) and the
benchmarks. A backend never calls the allocator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..allocation import Allocator, EngineCall, StepOutcome

Engine = Callable[[EngineCall], Sequence[np.ndarray] | np.ndarray]
"""One engine call's rewards: one array per request, in request order (or one flat array)."""


def allocator_step(allocator: Allocator, engine: Engine, timings: dict[str, float] | None = None) -> StepOutcome:
    """Run ``allocator``'s next step against ``engine``; returns its outcome. Seconds spent in the allocator itself
    (opening the step, planning each call, observing, finishing) are added to ``timings["bookkeeping"]``; the
    engine's own seconds are the engine's to count. An error anywhere (the engine's, the allocator's) aborts the
    open step before it is re-raised: the allocator is then mid-step, and a checkpoint restores it."""
    spent = 0.0
    t = time.perf_counter()
    session = allocator.begin_step()
    try:
        while True:
            call = session.next_call()
            spent += time.perf_counter() - t
            if call is None:
                break
            rewards = engine(call)
            t = time.perf_counter()
            session.observe(rewards)
        t = time.perf_counter()
        outcome = session.finish()
        spent += time.perf_counter() - t
    except BaseException:
        allocator.abort_step()
        raise
    if timings is not None:
        timings["bookkeeping"] = timings.get("bookkeeping", 0.0) + spent
    return outcome
