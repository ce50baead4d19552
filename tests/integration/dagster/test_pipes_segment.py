"""The in-pod entrypoint for real: the ``training_segment`` asset launches ``pilot-commit train-segment`` through
``dagster.PipesSubprocessClient`` (the same entrypoint a Kubernetes pod or a RayJob runs), on a temporary DuckDB
store; what the subprocess reports through Dagster Pipes (one custom message per step, the materialization at the
end) must match what it wrote to the store. ``segment_eval`` then runs ``pilot-commit eval-segment`` through the
same client and must reproduce the loop's own evaluation of that checkpoint. Then both entrypoints run plainly (no
Pipes)."""

import json
import subprocess
import sys

import pytest
from dagster import DagsterInstance, materialize

from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.evaluation import segment_eval
from pc_pipelines_dagster.assets.training import training_segment
from pc_pipelines_dagster.automation.jobs import start_run
from pc_pipelines_dagster.resources import (
    DataResource,
    LocalCheckpointResource,
    StoreResource,
    SubprocessComputeResource,
    TransformersEngineResource,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Tiny: 4 prompts per step, n=8 as 2+6, 2-step segments, a small held-out split evaluated once per segment.
TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2",
        "training.eval_every=2", "training.eval_samples=1", "task.heldout_per_length=5", "task.num_prompts=200"]


def test_train_segment_reports_through_pipes_then_runs_plainly(tmp_path, base_policy):
    instance = DagsterInstance.ephemeral()
    res = {
        "data": DataResource(out_dir=str(tmp_path / "data")),
        "store": StoreResource(path=str(tmp_path / "pc.duckdb")),
        "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs")),
        "compute": SubprocessComputeResource(),
        "engine": TransformersEngineResource(),
    }
    cfg = {"method": "pc", "overrides": TINY, "segment_steps": 2, "total_steps": 4, "run_name": "pipes-pc",
           "policy_path": str(base_policy)}
    assert start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                        instance=instance, resources=res).success

    out = materialize([training_segment], partition_key="pipes-pc/seg-0000", instance=instance, resources=res)
    meta = out.asset_materializations_for_node("training_segment")[-1].metadata
    store = Store(tmp_path / "pc.duckdb")
    rows = store.query("SELECT step, sampled_rollouts, trained_rollouts, pilot_rollouts, commit_rollouts, rounds, "
                       "loss FROM steps WHERE run_id = 'pipes-pc' ORDER BY step")
    assert [r["step"] for r in rows] == [1, 2]

    # Per step, what the subprocess reported through Pipes is what it wrote to the store.
    reported = meta["pipes_steps"].value
    assert [r["step"] for r in reported] == [1, 2]  # the stored steps
    for got, row in zip(reported, rows):
        for key in ("sampled_rollouts", "trained_rollouts", "pilot_rollouts", "commit_rollouts", "rounds"):
            assert got[key] == row[key], key
        assert got["sampled_rollouts"] == got["pilot_rollouts"] + got["commit_rollouts"]
        assert got["loss"] == pytest.approx(row["loss"])
    assert rows[0]["rounds"] >= 2  # PC step 1 starts with an empty buffer: a pilot round, then a commit round
    assert reported[-1]["cumulative_rollouts"] == sum(r["sampled_rollouts"] for r in rows)

    # The final materialization the subprocess reported, and the asset's own view of the store, agree.
    assert meta["steps_run"].value == "2" and meta["steps"].value == "1..2"
    assert meta["first_step"].value == "1" and meta["last_step"].value == "2"  # text: out of the Plots tab
    assert meta["reported/steps_run"].value == "2"
    assert meta["cumulative_rollouts"].value == sum(r["sampled_rollouts"] for r in rows)
    assert meta["reported/segment_rollouts"].value == meta["segment_rollouts"].value
    assert meta["reported/checkpoint"].value.endswith("pipes-pc/checkpoints/step-00000002")
    ev = store.query("SELECT avg(accuracy) AS a FROM eval_results WHERE run_id = 'pipes-pc' AND step = 2")[0]["a"]
    assert meta["eval_accuracy"].value == round(ev, 4)  # rounded for the UI
    seg = store.segments("pipes-pc")[0]
    assert seg["status"] == "done" and seg["cumulative_rollouts"] == meta["cumulative_rollouts"].value
    # The subprocess's steps reached the Dagster event log as they came: a step line and an observation each.
    logs = [e.message for e in instance.all_logs(out.run_id) if e.message]
    assert any(m.startswith("step 2/2 of segment seg-0000 of 2 (run step 2/4): mean reward ") for m in logs)
    assert any(m.startswith("pilot-commit train-segment: code ") for m in logs)  # its Pipes log reached Dagster
    obs = [e.asset_observation for e in instance.all_logs(out.run_id) if e.asset_observation is not None]
    steps_seen = [o.metadata["segment_step"].value for o in obs if "segment_step" in o.metadata]
    assert steps_seen == ["1", "2"]  # counters as text: out of the Plots tab
    assert [o.metadata["cumulative_rollouts"].value for o in obs if "segment_step" in o.metadata] == \
        [r["cumulative_rollouts"] for r in reported]

    # segment_eval runs `eval-segment` through the same Pipes client; same checkpoint and seed as the loop's own
    # evaluation of step 2 (eval_every 2), so the same numbers: the asset rewrites those rows unchanged.
    evals = "SELECT benchmark, k, accuracy, n_prompts FROM eval_results WHERE run_id = 'pipes-pc' AND step = 2 ORDER BY 1"
    by_loop = store.query(evals)
    assert len(by_loop) == 6  # arith_d1 .. arith_d6
    out = materialize([segment_eval], partition_key="pipes-pc/seg-0000", instance=instance, resources=res)
    emeta = out.asset_materializations_for_node("segment_eval")[0].metadata
    assert emeta["compute"].value == "SubprocessComputeResource" and emeta["step"].value == 2
    assert store.query(evals) == by_loop
    assert emeta["average_accuracy"].value == pytest.approx(ev)
    assert any("pipes-pc step 2: average accuracy" in (e.message or "") for e in instance.all_logs(out.run_id))

    # Run by hand (no Pipes): the same entrypoint trains the next segment and prints JSON lines.
    r = subprocess.run([sys.executable, "-m", "pc_pipelines.cli", "train-segment", "--store", str(tmp_path / "pc.duckdb"),
                        "--run-id", "pipes-pc", "--runs-root", str(tmp_path / "runs"), "--from-step", "2",
                        "--until-step", "3"], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["step"] for x in lines[:-1]] == [3] and lines[-1]["segment"] is True
    assert lines[-1]["steps_run"] == 1 and lines[-1]["last_step"] == 3
    total = store.query("SELECT sum(sampled_rollouts) AS s FROM steps WHERE run_id = 'pipes-pc'")[0]["s"]
    assert lines[-1]["cumulative_rollouts"] == total == lines[0]["cumulative_rollouts"]

    # eval-segment by hand: one JSON line, the result it would report to segment_eval (it does not write the store).
    r = subprocess.run([sys.executable, "-m", "pc_pipelines.cli", "eval-segment", "--store", str(tmp_path / "pc.duckdb"),
                        "--run-id", "pipes-pc", "--runs-root", str(tmp_path / "runs"), "--step", "2"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = r.stdout.splitlines()
    report = json.loads(line)
    assert report["step"] == 2 and report["average_accuracy"] == pytest.approx(ev)
    assert report["eval"]["accuracy"] == {row["benchmark"]: row["accuracy"] for row in by_loop}
    r = subprocess.run([sys.executable, "-m", "pc_pipelines.cli", "eval-segment", "--store", str(tmp_path / "pc.duckdb"),
                        "--run-id", "pipes-pc", "--runs-root", str(tmp_path / "runs"), "--step", "1"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 2 and "no checkpoint after step 1" in r.stderr and "Fix:" in r.stderr


def test_train_segment_without_a_registered_run_exits_2_with_a_fix(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pc_pipelines.cli", "train-segment", "--store", str(tmp_path / "none.duckdb"),
                        "--run-id", "x", "--runs-root", str(tmp_path), "--until-step", "1"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "Fix:" in r.stderr
