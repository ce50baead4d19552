"""A re-run of a done segment killed before its end leaves the segment ``done``: its earlier result stands (rows,
checkpoint, status, totals), and the run's status is what it was. A real ``pilot-commit train-segment --segment``
process re-trains the done segment of a finished run and is stopped by SIGTERM after its first step, as
Kubernetes stops a pod and Dagster a run worker; before, the run was left ``stopped`` with the CLI's "resume it
with --resume"."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance
from dagster_runs import register_run

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2", "training.eval_every=100", "training.eval_samples=1",
        "task.heldout_per_length=5", "task.num_prompts=200", "training.checkpoint_every=1"]


def segment_args(tmp: Path, run_id: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pc_pipelines.cli", "train-segment", "--store", str(tmp / "pc.duckdb"),
            "--run-id", run_id, "--runs-root", str(tmp / "runs"), "--data-dir", str(tmp / "data"), *args]


def test_a_rerun_of_a_done_segment_killed_mid_run_leaves_it_done(tmp_path, base_policy):
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster")) as instance:
        run_id = register_run(instance, tmp_path, base_policy, "redo", TINY, segment_steps=3, total_steps=3)
    store = Store(tmp_path / "pc.duckdb")
    first = subprocess.run(segment_args(tmp_path, run_id, "--from-step", "0", "--until-step", "3", "--segment", "0",
                                        "--attempt", "first"), capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    done = store.segments(run_id)
    steps = store.query("SELECT step, sampled_rollouts, loss FROM steps WHERE run_id = ? ORDER BY step", [run_id])
    run_before = store.get_run(run_id)
    assert (done[0]["status"], done[0]["attempts"]) == ("done", 1) and [s["step"] for s in steps] == [1, 2, 3]
    assert run_before["status"] == "finished"  # its one segment done

    rerun = subprocess.Popen(segment_args(tmp_path, run_id, "--from-step", "0", "--until-step", "3", "--segment", "0",
                                          "--attempt", "redo-killed"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        line = rerun.stdout.readline()  # its first step replayed, not yet the segment's end
        assert json.loads(line)["step"] == 1
        rerun.send_signal(signal.SIGTERM)
        _, err = rerun.communicate(timeout=600)
    finally:
        if rerun.poll() is None:
            rerun.kill()
            rerun.wait()
    assert rerun.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err
    seg = store.segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["consecutive_failures"], seg["orchestrator_run_id"]) == (
        "done", 2, 0, "redo-killed")
    assert (seg["cumulative_rollouts"], seg["eval_accuracy"], seg["mean_reward_std"]) == (
        done[0]["cumulative_rollouts"], done[0]["eval_accuracy"], done[0]["mean_reward_std"])
    after = store.get_run(run_id)
    assert (after["status"], after["status_reason"]) == (run_before["status"], run_before["status_reason"])
    assert store.query("SELECT step, sampled_rollouts, loss FROM steps WHERE run_id = ? ORDER BY step",
                       [run_id]) == steps
