"""One rollouts-to-target rule: the store's ``rollouts_to_target`` view, the Python functions the CLI and the studies
call (``pc_pipelines/store/rollouts_to_target.py``) and ``pilot-commit simulate-demo``'s table agree on runs that
``pilot-commit simulate`` and ``simulate-demo`` recorded in a store. (``research/study.py``'s ``versus`` is checked
against the view in tests/research/test_study.py; ``pilot-commit report`` and the report asset read the view.)"""

from __future__ import annotations

import contextlib
import io

import pytest

from pc_pipelines.cli import main as cli
from pc_pipelines.reports import load_curves
from pc_pipelines.store import Store
from pc_pipelines.store.rollouts_to_target import TOLERANCE, first_reaching, reached_sql, target_accuracy

pytestmark = pytest.mark.integration

METHODS = ("grpo", "dapo", "pc")
SMALL = ("--prompts", "2000", "--train-batch", "16")


def run_cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli(list(argv)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Family ``coarse``: `simulate` runs (evals every 5 steps) of every method on seeds 0 and 1, seed 1's DAPO
    stopped after 5 steps (it never reaches the target); family ``nopc``: GRPO and DAPO only (no target); family
    ``demo``: `simulate-demo` on seeds 2 and 3, an eval after every step."""
    path = str(tmp_path_factory.mktemp("rtt") / "s.duckdb")
    for seed in ("0", "1"):
        for m in METHODS:
            steps = "5" if (m, seed) == ("dapo", "1") else "20"
            run_cli("simulate", "--store", path, "--family", "coarse", "--method", m, "--seed", seed, "--steps", steps,
                    "--set", "training.eval_every=5", *SMALL)
    for m in ("grpo", "dapo"):
        run_cli("simulate", "--store", path, "--family", "nopc", "--method", m, "--steps", "10", *SMALL)
    demo = {seed: run_cli("simulate-demo", "--store", path, "--family", "demo", "--seed", str(seed), "--steps", "20",
                          "--set", "training.eval_every=1", *SMALL) for seed in (2, 3)}
    return Store(path), demo


def view(store: Store) -> dict[tuple[str, int], dict]:
    return {(r["family"], r["seed"]): r for r in store.query("SELECT * FROM rollouts_to_target")}


def test_the_functions_give_the_views_targets_and_rollouts(recorded):
    store, _ = recorded
    rows = view(store)
    curves = {(c.family, c.seed, c.method): c for c in load_curves(store)}  # the latest run of each, as the view
    pairs = {(f, s) for f, s, m in curves if m == "pc" and (f, s, "grpo") in curves}
    assert set(rows) == pairs == {("coarse", 0), ("coarse", 1), ("demo", 2), ("demo", 3)}  # nopc has no target
    for (family, seed), row in rows.items():
        target = target_accuracy(curves[family, seed, "grpo"].peak_accuracy, curves[family, seed, "pc"].peak_accuracy)
        assert row["target"] == target
        got = {m: first_reaching(c.eval_rollouts, c.eval_accuracy, target)
               for m in METHODS if (c := curves.get((family, seed, m))) is not None}
        assert {m: row[m] for m in METHODS} == {m: got.get(m) for m in METHODS}
        assert row["grpo"] is not None and row["pc"] is not None  # each reaches its own peak or the lower one
        assert row["grpo_over_pc"] == row["grpo"] / row["pc"]
        assert row["dapo_over_pc"] == (row["dapo"] / row["pc"] if row["dapo"] is not None else None)
    assert rows["coarse", 1]["dapo"] is None and rows["coarse", 1]["dapo_over_pc"] is None  # 5 steps: never


def test_simulate_demos_table_is_the_views_row(recorded):
    """simulate-demo compares per-step accuracies; with an eval after every step the store's curve is the same points
    plus the eval before training, which is below every target here, so the rows must agree."""
    store, demo = recorded
    rows = view(store)
    for seed, text in demo.items():
        row = rows["demo", seed]
        printed = float(text.split("target accuracy = min(GRPO peak, PC peak) = ")[1].split()[0])
        assert printed == pytest.approx(row["target"], abs=5e-4)
        table = {line.split()[0]: line.split()[7] for line in text.splitlines() if line.split()[:1] in (["grpo"],
                                                                                                       ["dapo"], ["pc"])}
        assert {m: None if v == "never" else int(v.replace(",", "")) for m, v in table.items()} == {
            m: row[m] for m in METHODS}
        first = store.query("SELECT accuracy FROM eval_curve WHERE family = 'demo' AND seed = ? AND step = -1", [seed])
        assert all(r["accuracy"] < row["target"] - TOLERANCE for r in first)


def test_the_views_condition_is_the_functions():
    assert reached_sql("c.accuracy", "t.target") == "c.accuracy >= t.target - 1e-12"
    assert first_reaching([0, 10, 20], [0.5, 0.8 - TOLERANCE / 2, 0.9], 0.8) == 10  # within the tolerance: reached
    assert first_reaching([0, 10], [0.5, 0.6], 0.8) is None
    assert target_accuracy(0.7, 0.8) == 0.7 and target_accuracy(None, 0.8) is None
