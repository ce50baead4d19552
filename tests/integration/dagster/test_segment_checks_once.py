"""Each check once, at its layer, in a Dagster segment and a ``start_run``:

* the run's writer lock is taken once per process: the in-process ``training_segment`` (``LocalComputeResource``)
  and ``pilot-commit train-segment --segment`` take it where they record the attempt (``train_requested_segment``),
  and the segment driver trains under it (``lock_held``) instead of taking it again;
* a segment launched through Pipes opens the store once in each process, takes the lock once (in the launched
  process only) and checks the run id once in each (issue 56; the child counts through ``counting_python``);
* ``start_run``'s checks (:func:`check_start_run`: the preset, the overrides resolved, the method, the run id, the
  dataset) run once in a process, though Dagster resolves the job's config (its config mapping, ``launch_check``)
  three times in ``execute_in_process`` and the op needs the resolved config too; the op hands the checked config
  and run id to ``start_training_run``, which checks neither again.

Counted by wrapping the real functions; the segment trains for real, on the real store and Dagster."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter

import pytest
from call_counts import count_calls, count_everywhere, count_walk, counting_python
from dagster import DagsterInstance, materialize
from dagster_runs import local_resources, register_run, step_failures

import pc_pipelines.run.start as start
import pc_pipelines.store.names as names
import pc_pipelines.store.runlock as runlock
import pc_pipelines_dagster.automation.jobs as jobs
from pc_pipelines.cli import main
from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.training import training_segment
from pc_pipelines_dagster.resources import SubprocessComputeResource

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2", "training.eval_every=100", "training.eval_samples=1",
        "task.heldout_per_length=5", "task.num_prompts=200"]


@pytest.fixture
def lock_takes(monkeypatch) -> Counter:
    seen: Counter = Counter()
    count_everywhere(seen, "hold_run", runlock, "hold_run", monkeypatch.setattr)
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
    count_everywhere(seen, "check_trainable", start, "check_trainable", patch=monkeypatch.setattr)
    count_everywhere(seen, "run id checked", names, "run_id_problem", patch=monkeypatch.setattr)
    count_calls(monkeypatch, seen, "resolve", (jobs,), "resolve")
    cfg = {"method": "grpo", "overrides": ["allocator.n=8"], "segment_steps": 1, "total_steps": 2,
           "run_name": "checked-once"}
    res = jobs.start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                            instance=DagsterInstance.ephemeral(), resources=local_resources(tmp_path))
    assert res.success and res.output_for_node("register_training_run") == "checked-once"
    assert seen == {"resolve": 1, "check_trainable": 1, "run id checked": 1}  # in check_start_run, then carried
    assert [s["segment"] for s in Store(tmp_path / "pc.duckdb").segments("checked-once")] == [0, 1]


def test_a_pipes_segment_opens_the_store_locks_and_checks_the_run_id_once_per_process(tmp_path, base_policy,
                                                                                       monkeypatch):
    """Issue 56: the walk of a segment launched through Pipes (a subprocess here; a pod or a Ray job run the same
    command) opens the store once in each process, takes the run's lock once (in the process that trains: the asset
    launching it takes none) and checks the run id once."""
    instance = DagsterInstance.ephemeral()
    out = tmp_path / "child-counts.jsonl"
    compute = SubprocessComputeResource(python=counting_python(tmp_path, out))
    run_id = register_run(instance, tmp_path, base_policy, "pipes-once", TINY, total_steps=2)
    parent: Counter = Counter()
    count_walk(parent, monkeypatch.setattr)
    res = materialize([training_segment], partition_key="pipes-once/seg-0000", instance=instance,
                      resources=local_resources(tmp_path, compute=compute), raise_on_error=False)
    counted = dict(parent)
    assert res.success, step_failures(res)
    child = [json.loads(line) for line in out.read_text().splitlines()]
    print("asset process:", counted, "launched process:", child)
    assert len(child) == 1
    assert counted == {"Store()": 1, "store.init": 1, "run-id check": 1}  # no lock, no vacuum: it trains nothing
    # the one vacuum: the run's writer, of its own run, under its lock (open_run); no session vacuums another run
    assert child[0] == {"Store()": 1, "store.init": 1, "hold_run": 1, "run-id check": 1, "vacuum": 1}
    seg = Store(tmp_path / "pc.duckdb").segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["orchestrator_run_id"]) == ("done", 1, res.run_id)
