"""A real `pilot-commit train` and a simulated run with ``training.eval_every_rollouts`` (issue 52: every arm of a
study evaluated at the same cadence in sampled rollouts): evaluations land after exactly the steps whose cumulative
sampled rollouts cross a multiple of the cadence, read back from the store."""

from __future__ import annotations

import contextlib
import io

import pytest

from pc_pipelines.cli import main
from pc_pipelines.store import Store

pytestmark = pytest.mark.slow

SMALL = [a for s in ("allocator.train_batch=4", "allocator.n=4", "task.num_prompts=40", "training.ppo_minibatch=4",
                     "training.eval_every=1000", "training.eval_samples=1") for a in ("--set", s)]


def crossing_steps(store: Store, run_id: str, k: int) -> tuple[list[int], list[int]]:
    steps = store.query("SELECT step, sum(sampled_rollouts) OVER (ORDER BY step) AS cum FROM steps "
                        "WHERE run_id = ? ORDER BY step", [run_id])
    want, before = [], 0
    for r in steps:
        if int(r["cum"]) // k > before // k:
            want.append(int(r["step"]))
        before = int(r["cum"])
    got = [int(r["step"]) for r in store.query("SELECT DISTINCT step FROM eval_results WHERE run_id = ? AND step >= 1 "
                                               "ORDER BY step", [run_id])]
    return want, got


@pytest.mark.parametrize("method, k", [("grpo", 40), ("pc", 150)])  # GRPO samples 16 a step, PC ~40-100
def test_train_evaluates_every_k_sampled_rollouts(base_policy, tmp_path, method, k):
    args = ["train", "--method", method, "--quiet", "--json", "--no-final-eval", "--steps", "5", *SMALL,
            "--set", f"training.eval_every_rollouts={k}",
            "--out", str(tmp_path), "--policy", str(base_policy), "--run-name", "k",
            *(["--set", "allocator.n_pilot=2", "--set", "allocator.pilot_strategy=single"] if method == "pc" else [])]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(args) == 0
    want, got = crossing_steps(Store(tmp_path / "pc.duckdb"), "k", k)
    assert got == want and 0 < len(got) < 5


def test_simulation_evaluates_every_k_sampled_rollouts(tmp_path):
    store = tmp_path / "sim.duckdb"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["simulate", "--preset", "simulator", "--method", "grpo", "--steps", "12", "--store", str(store),
                     "--run-name", "s", "--set", "allocator.train_batch=4", "--set", "allocator.n=4",
                     "--set", "training.eval_every_rollouts=40", "--set", "training.eval_every=1000"]) == 0
    want, got = crossing_steps(Store(store), "s", 40)
    assert len(want) >= 3
    assert got == sorted({*want, 12})  # and the run's last step, as every simulation
