"""`pilot-commit simulate` and `pilot-commit simulate-demo` as a user runs them: the installed entry point, real output."""

import json
from functools import partial

import pytest
from pilot_cli import run_cli

pytestmark = pytest.mark.e2e

REQUIRED = {
    "step",
    "rounds",
    "sampled_rollouts",
    "trained_rollouts",
    "pilot_rollouts",
    "commit_rollouts",
    "buffer_size",
    "evicted",
    "skipped_easy",
    "deferred_hard",
    "trained_prompts",
}


run = partial(run_cli, check_rc=0)


def test_simulate_json_one_object_per_step_with_paper_costs():
    out = run(
        "simulate", "--method", "pc", "--train-batch", "128", "--n-pilot", "32", "--n-commit", "96",
        "--oversample", "3", "--steps", "6", "--prompts", "20000", "--seed", "1", "--json",
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7))  # steps count from 1
    for r in rows:
        assert REQUIRED <= r.keys()
        assert r["sampled_rollouts"] == r["pilot_rollouts"] + r["commit_rollouts"]
    # Step 1 has an empty buffer: two rounds. Steady state (one round, full batch): 384*32 + 128*96 = 24,576.
    assert rows[0]["rounds"] >= 2
    steady = [r for r in rows[1:] if r["rounds"] == 1 and r["trained_prompts"] == 128]
    assert steady, rows
    for r in steady:
        assert r["sampled_rollouts"] == 24_576 and r["trained_rollouts"] == 16_384


@pytest.mark.parametrize("method,sampled", [("grpo", 128 * 64), ("dapo", 384 * 64)])
def test_simulate_json_baseline_costs(method, sampled):
    rows = [json.loads(x) for x in run("simulate", "--method", method, "--steps", "3", "--prompts", "5000", "--json").stdout.splitlines()]
    assert all(r["sampled_rollouts"] % sampled == 0 and r["trained_rollouts"] == 128 * 64 for r in rows)
    assert rows[0]["sampled_rollouts"] == sampled * rows[0]["rounds"]


def test_simulate_table_and_progress_bar():
    proc = run("simulate", "--method", "pc", "--steps", "40", "--prompts", "5000", "--train-batch", "32", "--n", "16")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("simulate pc: b_t=32 b_g=96 n=16 (4+12)")
    assert lines[1].split()[:4] == ["step", "rnd", "sampled", "trained"]
    assert lines[-1].startswith("done: ") and "rollouts sampled" in lines[-1]
    assert "step" in proc.stderr  # tqdm's bar unit on stderr


def test_bad_config_is_a_clear_error_not_a_traceback():
    proc = run("simulate", "--method", "pc", "--p-lower", "0.9", "--p-upper", "0.5", "--steps", "1", check_rc=None)
    assert proc.returncode == 2
    assert "p_lower" in proc.stderr and "Fix:" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("simulate", "--n", "10", "--n-pilot", "4", "--n-commit", "4", "--steps", "1", check_rc=None)
    assert proc.returncode == 2 and "--n-pilot 4 + --n-commit 4 = 8" in proc.stderr


def summary_table(out: str) -> dict[str, list[str]]:
    """The side-by-side summary's rows by method."""
    return {line.split()[0]: line.split() for line in out.splitlines()
            if line.split()[:1] in (["grpo"], ["dapo"], ["pc"], ["oracle"])}


def test_simulate_demo_prints_side_by_side_summary():
    out = run("simulate-demo", "--steps", "60", "--prompts", "20000").stdout
    table = summary_table(out)
    assert set(table) == {"grpo", "dapo", "pc", "oracle"}
    sampled = {m: int(row[1].replace(",", "")) for m, row in table.items()}
    # Cost order of the paper: GRPO < PC < DAPO (GRPO 128*64 per step, DAPO 3x that, PC in between).
    assert sampled["grpo"] == 60 * 128 * 64 and sampled["dapo"] == 3 * sampled["grpo"]
    assert sampled["grpo"] < sampled["pc"] < sampled["dapo"]
    assert "target accuracy" in out and "rounds>1" in out


def test_the_old_demo_name_warns_once_and_prints_the_same_table():
    args = ("--steps", "5", "--prompts", "2000")
    new, old = run("simulate-demo", *args), run("demo", *args)
    warnings = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert warnings == ["pilot-commit: `demo` is deprecated; use `pilot-commit simulate-demo` (the same simulator "
                        "comparison). `make demo` runs the Dagster graph."]
    assert "deprecated" not in new.stderr
    assert summary_table(old.stdout) == summary_table(new.stdout) and len(summary_table(new.stdout)) == 4


def test_simulate_demo_applies_the_pc_split_to_its_pc_run_only():
    out = run("simulate-demo", "--steps", "3", "--prompts", "2000", "--n-pilot", "4", "--n-commit", "12").stdout
    assert "n=16 (PC 4+12)" in out
    sampled = {m: int(row[1].replace(",", "")) for m, row in summary_table(out).items()}
    assert sampled["grpo"] == 3 * 128 * 16 and sampled["dapo"] == 3 * sampled["grpo"]  # GRPO/DAPO: n = 4 + 12
