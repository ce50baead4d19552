"""Each check once, at its layer, in a Dagster segment and a ``start_run``:

* the run's writer lock is taken once per process: the in-process ``training_segment`` (``LocalComputeResource``)
  and ``pilot-commit train-segment --segment`` take it where they record the attempt, and the segment driver
  trains under it (``lock_held``) instead of taking it again;
* ``start_run``'s checks (:func:`check_start_run`: the preset, the overrides resolved, the method, the run id, the
  dataset) run once in a process, though Dagster resolves the job's config (its config mapping, ``launch_check``)
  three times in ``execute_in_process`` and the op needs the resolved config too.

Counted by wrapping the real functions; the segment trains for real, on the real store and Dagster."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter

import pytest
from call_counts import count_calls
from dagster import DagsterInstance, materialize
from dagster_runs import local_resources, register_run

import pc_pipelines.cli.segment as segment_cli
import pc_pipelines.run.lifecycle as lifecycle
import pc_pipelines.store as store_package
import pc_pipelines.store.runlock as runlock
import pc_pipelines_dagster.assets.training as training_asset
import pc_pipelines_dagster.automation.jobs as jobs
from pc_pipelines.cli import main
from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.training import training_segment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2", "training.eval_every=100", "training.eval_samples=1",
        "task.heldout_per_length=5", "task.num_prompts=200"]


@pytest.fixture
def lock_takes(monkeypatch) -> Counter:
    seen: Counter = Counter()
    count_calls(monkeypatch, seen, "hold_run", (runlock, store_package, lifecycle, training_asset, segment_cli),
                "hold_run")
    return seen


def test_an_in_process_segment_takes_the_runs_lock_once(tmp_path, base_policy, lock_takes):
    instance = DagsterInstance.ephemeral()
    run_id = register_run(instance, tmp_path, base_policy, "once", TINY, total_steps=2)
    lock_takes.clear()
    res = materialize([training_segment], partition_key="once/seg-0000", instance=instance,
                      resources=local_resources(tmp_path), raise_on_error=False)
    assert res.success
    assert lock_takes == {"hold_run": 1}
    seg = Store(tmp_path / "pc.duckdb").segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["orchestrator_run_id"]) == ("done", 1, res.run_id)
    assert not runlock.holds(tmp_path / "runs" / run_id)  # released at the end


def test_train_segment_takes_the_runs_lock_once(tmp_path, base_policy, lock_takes):
    instance = DagsterInstance.ephemeral()
    run_id = register_run(instance, tmp_path, base_policy, "seg", TINY, total_steps=2)
    lock_takes.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["train-segment", "--store", str(tmp_path / "pc.duckdb"), "--run-id", run_id, "--runs-root",
                     str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--from-step", "0",
                     "--until-step", "1", "--segment", "0", "--attempt", "by-hand"])
    assert code == 0
    assert json.loads(out.getvalue().splitlines()[-1])["last_step"] == 1
    assert lock_takes == {"hold_run": 1}
    seg = Store(tmp_path / "pc.duckdb").segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["orchestrator_run_id"]) == ("done", 1, "by-hand")


def test_start_run_checks_its_config_once(tmp_path, monkeypatch):
    seen: Counter = Counter()
    count_calls(monkeypatch, seen, "check_trainable", (jobs,), "check_trainable")
    count_calls(monkeypatch, seen, "resolve", (jobs,), "resolve")
    cfg = {"method": "grpo", "overrides": ["allocator.n=8"], "segment_steps": 1, "total_steps": 2,
           "run_name": "checked-once"}
    res = jobs.start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                            instance=DagsterInstance.ephemeral(), resources=local_resources(tmp_path))
    assert res.success and res.output_for_node("register_training_run") == "checked-once"
    assert seen == {"resolve": 1, "check_trainable": 1}
    assert [s["segment"] for s in Store(tmp_path / "pc.duckdb").segments("checked-once")] == [0, 1]
