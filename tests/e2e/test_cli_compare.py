"""`pilot-commit compare` as a user runs it: the installed entry point on a store recorded by `pilot-commit simulate`
(a PC and a GRPO run of one family, a DAPO run of another), real processes, the PNG on disk, what it prints (the runs
drawn, the SQL behind the plot, which returns the rows drawn, and the TensorBoard line) and its refusals."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from pilot_cli import run_cli, sql

from pc_pipelines.errors import installed_command

pytestmark = pytest.mark.e2e

EXE = str(Path(sys.executable).parent / "pilot-commit")
SMALL = ["--prompts", "200", "--steps", "8", "--train-batch", "16", "--n", "8"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


run = partial(run_cli, check_rc=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("cli-compare") / "runs.duckdb")
    run("simulate", "--store", path, "--method", "pc", "--run-name", "pc-run", "--family", "f1", *SMALL)
    run("simulate", "--store", path, "--method", "grpo", "--run-name", "grpo-run", "--family", "f1", *SMALL)
    run("simulate", "--store", path, "--method", "dapo", "--run-name", "dapo-run", "--family", "f2", *SMALL)
    return path


def test_compare_a_family_writes_the_png_and_prints_its_sql(store, tmp_path):
    out = tmp_path / "figs" / "f1.png"
    res = run("compare", "--store", store, "--family", "f1", "--out", str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC and res.stderr == ""
    lines = res.stdout.splitlines()
    totals = {r["run_id"]: r["n"] for r in sql(store, "SELECT run_id, sum(sampled_rollouts) AS n FROM steps "
                                                      "GROUP BY run_id")}
    assert lines[:3] == [f"wrote {out.resolve()}: 2 runs by step and by cumulative rollouts",
                         f"  grpo-run (GRPO): 8 steps, {totals['grpo-run']:,} rollouts",
                         f"  pc-run (PC): 8 steps, {totals['pc-run']:,} rollouts"]
    # The printed command is pasteable and returns the rows drawn: steps 1..8 of each run, after step 0's evaluation.
    printed = shlex.split(lines[3].removeprefix("the plot's rows: "))
    assert printed[:4] == [installed_command("pilot-commit"), "sql", "--store", store]
    rows = sql(store, printed[4])
    assert [(r["run_id"], r["step"]) for r in rows] == [(rid, s) for rid in ("grpo-run", "pc-run") for s in range(9)]
    assert sql(store, "SELECT DISTINCT step FROM steps ORDER BY step") == [{"step": s} for s in range(1, 9)]  # as drawn
    assert [r["cumulative_rollouts"] for r in rows if r["step"] == 8] == [totals["grpo-run"], totals["pc-run"]]
    assert lines[4] == "in TensorBoard: none of these runs has TensorBoard logs (simulated runs write none)"


def test_compare_named_runs_across_families(store, tmp_path):
    out = tmp_path / "two.png"
    res = run("compare", "--store", store, "--runs", "dapo-run", "pc-run", "--out", str(out))
    assert res.stdout.splitlines()[1:3] == [
        f"  dapo-run (DAPO): 8 steps, {sql(store, 'SELECT sum(sampled_rollouts) AS n FROM steps WHERE run_id = ' + repr('dapo-run'))[0]['n']:,} rollouts",
        f"  pc-run (PC): 8 steps, {sql(store, 'SELECT sum(sampled_rollouts) AS n FROM steps WHERE run_id = ' + repr('pc-run'))[0]['n']:,} rollouts"]
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_compare_refuses_unknown_runs_in_one_line_and_writes_nothing(store, tmp_path):
    out = tmp_path / "nope.png"
    res = run("compare", "--store", store, "--runs", "pc-run", "no-such-run", "--out", str(out), check_rc=None)
    assert res.returncode == 2 and res.stdout == "" and not out.exists()
    assert res.stderr == (f"pilot-commit compare: no run 'no-such-run' in the store {store}. Fix: name runs that "
                          f"`{installed_command('pilot-commit')} runs --store {store}` lists.\n")
    res = run("compare", "--store", store, "--family", "f9", "--out", str(out), check_rc=None)
    assert res.returncode == 2 and "Traceback" not in res.stderr and not out.exists()
    assert res.stderr.startswith("pilot-commit compare: family 'f9' in the store ") and "Fix:" in res.stderr


def test_the_printed_commands_run_as_printed_without_the_venv_on_path(store, tmp_path):
    """Issue 41 point 8: a shell whose PATH lacks the virtual environment (the README's `.venv/bin/pilot-commit`)
    gets the scripts by their path, and the printed query runs as printed there."""
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    res = subprocess.run([EXE, "compare", "--store", store, "--family", "f1", "--out", str(tmp_path / "f1.png")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=True)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("the plot's rows: "))
    assert shlex.split(line.removeprefix("the plot's rows: "))[0] == EXE  # not a bare `pilot-commit`, which this shell would not find
    again = subprocess.run(["bash", "-c", line.removeprefix("the plot's rows: ") + " --json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {r["run_id"] for r in json.loads(again.stdout)} == {"grpo-run", "pc-run"}
