"""`pilot-commit report` on a store holding two runs of one (family, method, seed) of different lengths: it compares
the finished run with the most steps (not the newest), names the run it took for each method and the rule, says
when the compared runs differ in length, reads ``no run`` for a method without one, and rounds the numbers."""

from __future__ import annotations

import json
import re
from functools import partial

import pytest
from pilot_cli import run_cli

pytestmark = pytest.mark.e2e

SMALL = ["--prompts", "2000", "--train-batch", "32", "--n", "16"]


cli = partial(run_cli, check_rc=0, timeout=600)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """Family ``fam``. Seed 0: GRPO 12 steps, PC 12 steps, then a newer PC run of 6 steps (a shorter re-run).
    Seed 1: GRPO 12 steps and PC 6 steps only. No DAPO run at all."""
    path = str(tmp_path_factory.mktemp("compared") / "s.duckdb")
    for name, method, seed, steps in (("g0", "grpo", 0, 12), ("p0-long", "pc", 0, 12), ("p0-short", "pc", 0, 6),
                                      ("g1", "grpo", 1, 12), ("p1-short", "pc", 1, 6)):
        cli("simulate", "--store", path, "--family", "fam", "--method", method, "--seed", str(seed), "--steps",
            str(steps), "--run-name", name, *SMALL)
    return path


def test_report_json_names_the_runs_compared_by_the_rule(store):
    rep = json.loads(cli("report", "--store", store, "--json").stdout)["fam"]
    s0, s1 = rep["seeds"]
    # the newest PC run of seed 0 has 6 steps: the 12-step one is compared, as long as GRPO's
    assert s0["runs"] == {"grpo": "g0", "dapo": None, "pc": "p0-long"}
    assert s0["steps"] == {"grpo": 12, "dapo": None, "pc": 12}
    assert s1["runs"] == {"grpo": "g1", "dapo": None, "pc": "p1-short"}
    assert s1["steps"] == {"grpo": 12, "dapo": None, "pc": 6}
    # the view computes the target on the compared runs: PC's peak is the long run's
    evals = json.loads(cli("sql", "--store", store, "--json",
                           "SELECT run_id, max(accuracy) AS peak FROM eval_curve GROUP BY run_id").stdout)
    peak = {r["run_id"]: r["peak"] for r in evals}
    assert s0["target"] == pytest.approx(min(peak["g0"], peak["p0-long"]))
    assert s1["target"] == pytest.approx(min(peak["g1"], peak["p1-short"]))


def test_report_table_says_which_runs_why_and_when_lengths_differ(store):
    out = cli("report", "--store", store).stdout
    assert "runs compared (the finished run with the most steps for each family, method and seed" in out
    assert "  seed 0: GRPO g0 (12 steps), DAPO no run, PC p0-long (12 steps)\n" in out
    assert "  seed 1: GRPO g1 (12 steps), DAPO no run, PC p1-short (6 steps)\n" in out
    assert "seed 1: note: runs of different lengths (GRPO 12, PC 6 steps)" in out
    assert "seed 0: note" not in out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if re.match(r"^[01] ", ln)}
    for seed in ("0", "1"):
        cells = rows[seed]
        assert re.fullmatch(r"0\.\d{4}|1\.0000", cells[1])  # the target, 4 decimals
        assert cells[3:5] == ["no", "run"]  # DAPO: no run (not "never")
        assert re.fullmatch(r"\d+\.\d\dx", cells[-2]) and cells[-1] == "-"


def test_report_markdown_lists_the_runs_compared(store, tmp_path):
    from pc_pipelines.reports import rollouts_to_target_markdown
    from pc_pipelines.store import Store

    md = rollouts_to_target_markdown(Store(store).report())
    assert "- seed 0: GRPO g0 (12 steps), DAPO no run, PC p0-long (12 steps)" in md
    assert re.search(r"^\| 0 \| 0\.\d{4} \| (?:[\d,]+|never) \| no run \| ", md, flags=re.M)
    assert "*no run*" in md
