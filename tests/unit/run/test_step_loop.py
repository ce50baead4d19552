"""The step loop exists once (``run/step_loop.py``): no other module of the package, the Dagster code or the
benchmarks opens, aborts or walks an allocator step, and no backend reaches the allocator; the loop aborts a step
whose engine call fails, so the allocator can be stepped again after a restore."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from pc_pipelines.allocation import Allocator, AllocatorConfig
from pc_pipelines.run.step_loop import allocator_step

ROOT = Path(__file__).resolve().parents[3]
STEP_CALLS = {"begin_step", "next_call", "abort_step", "finish"}


def step_calls(path: Path) -> list[str]:
    """``x.begin_step()`` / ``x.next_call()`` / ``x.abort_step()`` / ``session.finish()`` calls in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STEP_CALLS
                and (node.func.attr != "finish" or "session" in ast.unparse(node.func.value))):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.attr}")
    return found


def test_only_the_step_loop_walks_an_allocator_step():
    sources = [p for d in ("pc_pipelines", "pc_pipelines_dagster", "benchmarks", "research") for p in (ROOT / d).rglob("*.py")]
    walkers = sorted({c.split(":")[0] for p in sources for c in step_calls(p)})
    assert walkers == ["pc_pipelines/run/step_loop.py"]


@pytest.mark.parametrize("module", ["local.py", "verl.py", "backend.py"])
def test_a_backend_never_calls_the_allocator(module):
    tree = ast.parse((ROOT / "pc_pipelines" / "run" / module).read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"Allocator", "allocator", "session"}
    assert not attributes & {"live_rollout_ids", "begin_step", "abort_step", "next_call", "observe"}


def test_a_failed_engine_call_aborts_the_step_and_the_allocator_steps_again():
    cfg = AllocatorConfig(method="pc", train_batch=4, n=8, n_pilot=2, seed=3)
    alloc, fresh = Allocator(cfg, 40), Allocator(cfg, 40)
    state = alloc.state_dict()

    def broken(call):
        raise OSError("engine died")

    with pytest.raises(OSError, match="engine died"):
        allocator_step(alloc, broken)
    again = Allocator.from_state_dict(state)  # a restore after the failure: the same step as a fresh allocator's

    def engine(call):
        return [np.ones(int(n)) * (p % 2) for p, n in zip(call.prompt_ids.tolist(), call.n.tolist())]

    timings = {"bookkeeping": 0.0}
    a, b = allocator_step(again, engine, timings), allocator_step(fresh, engine)
    assert a.ledger.to_dict() == b.ledger.to_dict() and a.step == b.step == 0
    assert timings["bookkeeping"] > 0.0
    assert allocator_step(alloc, engine).step == 0  # the aborted allocator is not left with a step open
