"""A launched segment owns its row, and the Dagster process that launches it stays light.

* ``training_segment`` on ``SubprocessComputeResource`` (the real ``PipesSubprocessClient``), materialized in a
  fresh Dagster process: the launched ``pilot-commit train-segment`` records the segment's start and end itself
  (done, one attempt, the Dagster run's id on the row), and the Dagster process never imports torch (it reads the
  run's light spec; the task and the policy are built only in the process that trains).
* ``train-segment --segment K --attempt ID`` by hand records the same; refused by the run's writer lock it exits 2
  with the holder's name and the fix, and the row is untouched."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance
from dagster_runs import register_run
from pilot_cli import MODULE, run_cli

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2", "training.eval_every=2", "training.eval_samples=1",
        "task.heldout_per_length=5", "task.num_prompts=200", "training.checkpoint_every=1"]

# The Dagster process: the code location's asset on the Pipes compute, over the test's store and instance; it prints
# whether torch (or transformers) was imported while it materialized the segment, and the Dagster run's id.
MATERIALIZE = """
import json, sys
from dagster import DagsterInstance, materialize
from pc_pipelines_dagster.assets.training import training_segment
from pc_pipelines_dagster.resources import (DataResource, LocalCheckpointResource, StoreResource, SubprocessComputeResource,
                       TransformersEngineResource)
tmp, key = sys.argv[1], sys.argv[2]
res = {"data": DataResource(out_dir=tmp + "/data"), "store": StoreResource(path=tmp + "/pc.duckdb"),
       "checkpoints": LocalCheckpointResource(root=tmp + "/runs"), "compute": SubprocessComputeResource(),
       "engine": TransformersEngineResource()}
with DagsterInstance.local_temp(tempdir=tmp + "/dagster") as instance:
    out = materialize([training_segment], partition_key=key, instance=instance, resources=res, raise_on_error=False)
print(json.dumps({"success": out.success, "run_id": out.run_id, "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
"""

HOLD = ("import sys\nfrom pc_pipelines.store.runlock import hold_run\n"
        "with hold_run(sys.argv[1], *sys.argv[2:], command='pilot-commit train-segment (test writer)'):\n"
        "    print('held', flush=True)\n    sys.stdin.readline()\n")


def segment_cli(tmp: Path, run_id: str, *args: str) -> subprocess.CompletedProcess:
    return run_cli("train-segment", "--store", str(tmp / "pc.duckdb"), "--run-id", run_id, "--runs-root",
                   str(tmp / "runs"), "--data-dir", str(tmp / "data"), *args, exe=MODULE, timeout=600)


def test_a_pipes_segment_records_its_own_row_and_the_dagster_process_never_imports_torch(tmp_path, base_policy):
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster")) as instance:
        run_id = register_run(instance, tmp_path, base_policy, "light", TINY, total_steps=2)
    store = Store(tmp_path / "pc.duckdb")
    assert [(s["status"], s["attempts"]) for s in store.segments(run_id)] == [("planned", 0), ("planned", 0)]

    r = subprocess.run([sys.executable, "-c", MATERIALIZE, str(tmp_path), "light/seg-0000"], capture_output=True,
                       text=True, timeout=900, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["success"], r.stderr[-3000:]
    assert (got["torch"], got["transformers"]) == (False, False)
    seg = store.segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["orchestrator_run_id"]) == ("done", 1, got["run_id"])
    assert [x["step"] for x in store.query("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [run_id])] == [1]
    assert store.get_run(run_id)["status"] != "finished"  # one of two segments done


def test_train_segment_with_segment_records_its_start_and_end_and_a_refusal_records_nothing(tmp_path, base_policy):
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster")) as instance:
        run_id = register_run(instance, tmp_path, base_policy, "own", TINY, total_steps=2)
    store = Store(tmp_path / "pc.duckdb")

    r = segment_cli(tmp_path, run_id, "--from-step", "0", "--until-step", "1", "--segment", "0", "--attempt", "by-hand-1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1])["last_step"] == 1
    seg = store.segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["orchestrator_run_id"], seg["error"]) == ("done", 1, "by-hand-1", None)

    before = store.segments(run_id)
    lock_dirs = [str(store.run_dir(run_id)), str(tmp_path / "runs" / run_id)]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, run_id, *lock_dirs], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = segment_cli(tmp_path, run_id, "--until-step", "2", "--segment", "1", "--attempt", "by-hand-2")
        assert r.returncode == 2
        assert f"pid {holder.pid} on host" in r.stderr and "Fix:" in r.stderr and "Traceback" not in r.stderr
        assert store.segments(run_id) == before  # every column, updated_at included
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.communicate(timeout=60)

    r = segment_cli(tmp_path, run_id, "--until-step", "2", "--segment", "1", "--attempt", "by-hand-3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert [(s["status"], s["attempts"], s["orchestrator_run_id"]) for s in store.segments(run_id)] == [
        ("done", 1, "by-hand-1"), ("done", 1, "by-hand-3")]
    assert store.get_run(run_id)["status"] == "finished"  # every segment done: the process that trained settles it


def test_a_launched_segment_that_fails_records_its_own_error_and_one_that_never_starts_is_recorded_by_the_asset(
        tmp_path, base_policy):
    from dagster import materialize
    from dagster_runs import local_resources

    from pc_pipelines_dagster.assets.training import training_segment
    from pc_pipelines_dagster.resources import SubprocessComputeResource

    policy = tmp_path / "policy"
    shutil.copytree(base_policy, policy)
    instance = DagsterInstance.ephemeral()
    run_id = register_run(instance, tmp_path, policy, "broken", TINY, total_steps=2)
    shutil.rmtree(policy)  # the base policy is gone: the launched process fails where it trains
    store = Store(tmp_path / "pc.duckdb")

    res = materialize([training_segment], partition_key="broken/seg-0000", instance=instance, raise_on_error=False,
                      resources=local_resources(tmp_path, compute=SubprocessComputeResource()))
    assert not res.success
    seg = store.segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["consecutive_failures"], seg["orchestrator_run_id"]) == (
        "failed", 1, 1, res.run_id)
    assert str(policy) in seg["error"] and "Pipes" not in seg["error"]  # the launched process's own error

    # A process that never starts (no such interpreter) cannot record its attempt: the asset does.
    nowhere = SubprocessComputeResource(python=str(tmp_path / "no-python"))
    res = materialize([training_segment], partition_key="broken/seg-0000", instance=instance, raise_on_error=False,
                      resources=local_resources(tmp_path, compute=nowhere))
    assert not res.success
    seg = store.segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["consecutive_failures"], seg["orchestrator_run_id"]) == (
        "failed", 2, 2, res.run_id)
    assert seg["error"].startswith("the launched process failed: ") and "no-python" in seg["error"]
