"""``pilot-commit sim-fit`` and ``plan`` end to end on a store the test builds with ``pilot-commit simulate --store``.
``sim-fit`` reads the runs (read-only: the store's files are unchanged), recovers the population the runs were
simulated with, writes the fit and its residuals as JSON, and refuses a run the store lacks in one line with the fix
(exit 2); ``plan`` ranks the candidate budgets with their intervals over refits on resampled steps, draws them, and prints the
train command of the best."""

import hashlib
import json
import shutil
import subprocess

import pytest
from pilot_cli import run_cli

from pc_pipelines.errors import installed_command
from pc_pipelines.simulator.fit import LAW_FORMS

POP = ("--set", "sim.num_prompts=400", "--set", "sim.difficulty_mean=0.5", "--set", "sim.difficulty_spread=1.2",
       "--set", "training.eval_every=5")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("simfit") / "s.duckdb"
    for name, n in (("g4", 4), ("g16", 16)):
        run_cli("simulate", "--store", str(path), "--run-name", name, "--method", "grpo", "--steps", "30",
                "--set", f"allocator.n={n}", "--set", "allocator.train_batch=16", *POP, check_rc=0)
    return path


def _digest(path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.parent.rglob("*")) if p.is_file()}


def test_sim_fit_fits_and_writes_residuals(store, tmp_path):
    before = _digest(store)
    out = tmp_path / "fit.json"
    res = run_cli("sim-fit", "--store", str(store), "--runs", "g4", "g16", "--out", str(out), check_rc=0)
    assert _digest(store) == before  # read-only
    fit = json.loads(out.read_text())
    assert fit["runs"] == ["g4", "g16"] and fit["chosen_form"] in LAW_FORMS
    assert set(fit["laws"]) == set(LAW_FORMS)
    per_run = fit["laws"][fit["chosen_form"]]["per_run"]
    assert [r["run_id"] for r in per_run] == ["g4", "g16"]
    assert all(r["evaluations"] == 6 and r["rmse"] < 0.01 for r in per_run)
    sim = fit["sim"]
    assert sim["num_prompts"] == 400
    # first visits of the first 20 steps (320 prompts x 2 runs) recover the simulated population
    assert sim["difficulty_mix_weight"] == 0.0
    assert sim["difficulty_mean"] == pytest.approx(0.5, abs=0.25)
    assert sim["difficulty_spread"] == pytest.approx(1.2, abs=0.25)
    assert fit["mix"]["observations"] == 2 * 320
    assert "sim-fit: 2 runs" in res.stdout and "g16" in res.stdout
    assert "law terms kept (AIC lower by): " in res.stdout  # which terms forward selection kept, by how much AIC
    assert fit["kept_terms"] == [t["term"] for t in fit["term_log"] if t["kept"]]


def test_sim_fit_refuses_a_missing_run(store, tmp_path):
    out = tmp_path / "fit.json"
    res = run_cli("sim-fit", "--store", str(store), "--runs", "g4", "nope", "--out", str(out), check_rc=2)
    err = res.stderr.strip()
    assert "'nope'" in err and "Fix:" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_sim_fit_refuses_an_out_folder_that_does_not_exist(store, tmp_path):
    out = tmp_path / "missing" / "fit.json"
    res = run_cli("sim-fit", "--store", str(store), "--runs", "g4", "--out", str(out), check_rc=2)
    assert "its folder does not exist" in res.stderr and "Fix:" in res.stderr and "Traceback" not in res.stderr
    assert not out.parent.exists()


def test_plan_ranks_budgets_and_prints_the_best_command(store, tmp_path):
    before = _digest(store)
    plot = tmp_path / "plan.png"
    res = run_cli("plan", "--store", str(store), "--runs", "g4", "g16", "--fit-steps", "20", "--horizon", "30",
                  "--seeds", "1", "--preset", "simulator", "--resamples", "3", "--plot", str(plot), check_rc=0)
    assert _digest(store) == before
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {plot}" in res.stdout
    assert res.stderr.count("plan: resampled fit ") == 3  # progress, one line per refit
    lines = res.stdout.splitlines()
    table = [line for line in lines if line[:4].strip().isdigit()]
    assert [int(line.split()[0]) for line in table] == list(range(1, 11))  # 10 candidates, ranked
    names = {" ".join(line.split()[1:3]) for line in table}
    assert {"GRPO n=8", "GRPO n=64", "PC p2+6/c8"} <= names
    best = next(line for line in lines if line.startswith("best: "))
    first = " ".join(table[0].split()[1:3])
    assert "train --preset simulator --method" in best
    assert ("--method grpo" in best) == first.startswith("GRPO")
    # each row: its 10-90% interval over the refits ('-': reached in under half of them), 'first in k/3' and how
    # it stands against the best: a row whose interval overlaps the best's is not ranked against it
    firsts = [int(line.split()[-3].split("/")[0]) for line in table]
    assert all(line.split()[-3].endswith("/3") for line in table)
    assert 1 <= max(firsts) <= 3  # every refit ranks a first (a tie counts for each)
    intervals = []
    for line in table:
        interval = line.split()[-4]
        assert interval == "-" or float(interval.split("-")[0].replace(",", "")) <= float(
            interval.split("-")[1].replace(",", ""))
        intervals.append(None if interval == "-" else [float(x.replace(",", "")) for x in interval.split("-")])
    verdicts = [line.split()[-1] for line in table]
    assert verdicts[0] == "best" and set(verdicts[1:]) <= {"indistinguishable", "worse", "never", "-"}
    for iv, verdict in zip(intervals[1:], verdicts[1:]):
        if iv is not None and intervals[0] is not None:
            overlaps = iv[0] <= intervals[0][1] and intervals[0][0] <= iv[1]
            assert verdict == ("indistinguishable" if overlaps else "worse"), (iv, intervals[0], verdict)
    (trust,) = [line for line in lines if line.startswith("validated (regret: ")]  # how far to trust it, in words
    assert "median regret" in trust and "docs/STUDIES.md, planner-validation" in trust
    (ranking,) = [line for line in lines if line.startswith("ranking: ")]
    tied = [" ".join(line.split()[1:3]) for line, v in zip(table, verdicts) if v == "indistinguishable"]
    assert all(name in ranking for name in tied) and (("indistinguishable from" in ranking) == bool(tied))


def test_plan_refuses_bad_steps(store):
    res = run_cli("plan", "--store", str(store), "--runs", "g4", "--fit-steps", "0", check_rc=2)
    assert "--fit-steps 0" in res.stderr and "Fix:" in res.stderr and "Traceback" not in res.stderr


def test_sim_fit_names_a_missing_store_briefly_and_a_missing_runs_fix_pastes(store, tmp_path):
    deep = tmp_path / ("d" * 200) / ("e" * 200) / "none.duckdb"
    res = run_cli("sim-fit", "--store", str(deep), "--runs", "g4", check_rc=2)
    err = res.stderr.strip()
    assert err.count("no store at") == 1 and "characters)" in err and "Traceback" not in err
    assert "d" * 200 not in err.split("Fix:")[0]  # the path is cut in the message; whole only in the command to paste
    assert not deep.parent.exists()
    # a run the store lacks: the fix is a command that runs as printed (the store path is quoted for the shell)
    odd = tmp_path / "it's $(x) here"
    shutil.copytree(store.parent, odd)
    copy = odd / store.name
    res = run_cli("sim-fit", "--store", str(copy), "--runs", "nope", check_rc=2)
    fix = res.stderr.split("`")[1]
    # the program as this install reaches it from where the command ran (.venv/bin/pilot-commit in a checkout)
    assert fix.startswith(f"{installed_command('pilot-commit')} runs --store ")
    pasted = subprocess.run(["bash", "-c", fix], capture_output=True, text=True, timeout=300, check=True)  # same cwd
    assert {"g4", "g16"} <= set(pasted.stdout.split())


def test_plan_refuses_fit_steps_beyond_the_runs(store):
    before = _digest(store)
    res = run_cli("plan", "--store", str(store), "--runs", "g4", "--fit-steps", "50", check_rc=2)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in res.stderr
    assert "run 'g4' has only 30 steps" in err and "Fix: fit on 30 steps or fewer (`plan --fit-steps`" in err
    assert _digest(store) == before


def test_plan_refuses_a_plot_path_that_is_a_folder_before_fitting(store, tmp_path):
    res = run_cli("plan", "--store", str(store), "--runs", "g4", "--plot", str(tmp_path), check_rc=2)
    assert "is a folder" in res.stderr and "Fix: name a PNG file" in res.stderr and "Traceback" not in res.stderr
    assert "plan: fitted" not in res.stderr  # refused before any fitting
