"""`make demo`'s driver (python -m pc_pipelines_dagster.demo) at a small size: the whole graph, headless, in a
real Dagster instance; it prints Table 2 and the plots' location, `pilot-commit plan` ranks budgets from its store,
and a second run finds every segment done."""

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter, SkipReason, build_sensor_context
from proc_waits import HANG_S

from pc_pipelines.cli import main
from pc_pipelines.reports import study_headline
from pc_pipelines_dagster.automation.sensors import build_advance_runs_sensor
from pc_pipelines_dagster.resources import StoreResource

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
# Held-out evaluations are most of a segment's time (600 prompts each): one sample a prompt, and every other step
# (each segment's last step, plus the start), so each run still has an evaluation per segment to plot. Steps of 4
# prompts (issue 53: the same graph, tables and plots on half the rollouts).
SMALL = ["allocator.train_batch=4", "allocator.n=16", "allocator.n_pilot=4", "allocator.pilot_wave=2",
         "allocator.commit_mean=12", "training.ppo_minibatch=4",
         "training.eval_every=2", "training.eval_samples=1"]


def run_demo(tmp_path, home, policy_cache) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pc_pipelines_dagster.demo", "--root", str(tmp_path / "runs"),
           "--segments", "2", "--segment-steps", "2", "--cache-dir", str(policy_cache)]
    for s in SMALL:
        cmd += ["--set", s]
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return out


def test_demo_materializes_the_graph_and_prints_the_table(tmp_path, base_policy, policy_cache, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "etc" / "dagster.yaml").read_text())
    out = run_demo(tmp_path, home, policy_cache)
    assert "| seed | target | GRPO | DAPO | PC | GRPO/PC | DAPO/PC |" in out.stdout
    assert f"plots in {tmp_path / 'runs' / 'reports'}" in out.stdout
    # A 4-step table says it is a smoke test, and the committed study's headline is printed beside it.
    assert "SMOKE TEST, not a comparison: each method trained 4 steps" in out.stdout
    assert out.stdout.index("SMOKE TEST") < out.stdout.index("| seed | target")  # said before the table
    # A console for reading: the narrative and the per-step lines, no Dagster DEBUG engine events.
    console = (out.stdout + out.stderr).splitlines()
    assert [line for line in console if " - DEBUG - " in line] == []
    assert sum(" - INFO - " in line and "(run step 1/4): mean reward" in line for line in console) >= 3  # per run
    assert study_headline() in out.stdout
    for name in ("accuracy_vs_rollouts", "accuracy_vs_steps", "reward_std_per_step", "informative_share_per_step"):
        assert (tmp_path / "runs" / "reports" / f"{name}.png").stat().st_size > 10_000
    # the report job's every plot goes under --root (run_comparison's too: it once went to the working folder)
    assert (tmp_path / "runs" / "reports" / "compare_bench.png").stat().st_size > 10_000
    con = duckdb.connect(str(tmp_path / "runs" / "pc.duckdb"), read_only=True)
    try:
        runs = con.execute("SELECT method, status FROM runs ORDER BY method").fetchall()
        run_ids = con.execute("SELECT run_id FROM runs").fetchall()
        presets = con.execute("SELECT DISTINCT preset FROM runs").fetchall()
        segs = con.execute("SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM segments").fetchone()
        steps = con.execute("SELECT method, count(*) FROM steps JOIN runs USING (run_id) GROUP BY ALL ORDER BY 1").fetchall()
    finally:
        con.close()
    assert runs == [("dapo", "finished"), ("grpo", "finished"), ("pc", "finished")]
    assert presets == [("bench",)]  # the study's regime, whose headline the demo prints
    assert segs == (6, 6) and steps == [("dapo", 4), ("grpo", 4), ("pc", 4)]
    with _instance(home) as inst:  # the demo's orchestrator runs are in the instance the UI reads
        seg_runs = inst.get_runs(filters=RunsFilter(job_name="train_segment"))
        assert len(seg_runs) == 6 and all(r.status == DagsterRunStatus.SUCCESS for r in seg_runs)
        assert len({r.tags["pc/run"] for r in seg_runs}) == 3
        assert sorted(r.tags["dagster/partition"].split("/")[1] for r in seg_runs) == ["seg-0000"] * 3 + ["seg-0001"] * 3
        # The UI's Runs list shows them launched by the sensor (its tag), not "Manually launched"; the report is the
        # sensor's `report` request, so `make ui`'s sensor, starting on this instance, requests no report again.
        assert {r.tags.get("dagster/sensor_name") for r in seg_runs} == {"advance_runs"}
        reports = inst.get_runs(filters=RunsFilter(job_name="report"))
        assert len(reports) == 1 and reports[0].status == DagsterRunStatus.SUCCESS
        assert sorted(reports[0].tags["pc/report_for"].split(",")) == sorted(r[0] for r in run_ids)
        assert reports[0].tags.get("dagster/sensor_name") == "advance_runs"
        tick = build_advance_runs_sensor()(build_sensor_context(
            instance=inst, resources={"store": StoreResource(path=str(tmp_path / "runs" / "pc.duckdb"))}))
        assert isinstance(tick, SkipReason) and tick.skip_message.count("skip (run is finished)") == 3

    # `pilot-commit plan` on the demo's store (its runs' first 4 steps, evaluated at 0, 2 and 4): every budget ranked
    # with its refits' interval, and the train command of the first on the demo's preset.
    # (in this process: the test is about what plan reads from the demo's store, not about plan's own process)
    capsys.readouterr()
    assert main(["plan", "--store", str(tmp_path / "runs" / "pc.duckdb"), "--runs", *(r[0] for r in run_ids),
                 "--fit-steps", "4", "--horizon", "20", "--seeds", "1", "--resamples", "2"]) == 0
    res = capsys.readouterr()
    table = [line.split() for line in res.out.splitlines() if line[:4].strip().isdigit()]
    assert [int(r[0]) for r in table] == list(range(1, 11)) and 1 <= max(int(r[-3].split("/")[0]) for r in table) <= 2
    best = next(line for line in res.out.splitlines() if line.startswith("best: "))
    assert f"train --preset bench --method {'grpo' if table[0][1] == 'GRPO' else 'pc'}" in best

    again = run_demo(tmp_path, home, policy_cache)
    assert "training + evaluation" not in again.stdout  # every segment was done: only the report is rebuilt
    assert "| seed | target | GRPO | DAPO | PC | GRPO/PC | DAPO/PC |" in again.stdout


def _instance(home: Path):
    prev = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        return DagsterInstance.get()
    finally:
        if prev is None:
            del os.environ["DAGSTER_HOME"]
        else:
            os.environ["DAGSTER_HOME"] = prev


def test_demo_refuses_a_bad_plan_before_building_anything(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pc_pipelines_dagster.demo", "--root", str(tmp_path / "runs"),
                          "--segments", "0"], cwd=ROOT, env={**os.environ, "DAGSTER_HOME": ""}, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "configuration error: start_run config total_steps 0: must be >= 1" in out.stderr and "Fix:" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "runs").exists()
