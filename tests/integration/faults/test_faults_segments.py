"""Issue 31 point 4, fault injection on segment bookkeeping: real Dagster (an ephemeral instance: ``materialize`` and
the ``advance_runs`` sensor evaluated against it), a real store (DuckDB) and a second real process writing the run
(a ``pilot-commit train-segment``, or a process taking the run's writer lock the way ``runlock.hold_run`` does).

Each test reproduces one race found in Dagster and checks it now holds: the segment's state follows what happened,
the sensor never requests a segment that is being trained, a run whose segments are all done is finished, and the
store's rows hold each step exactly once.

* (a) a materialization refused because another process trains the run leaves the segment as it was (not
  ``failed``), names the holder, and the sensor requests nothing until that process is done, then a fresh run key;
* (a') the same when the refusal comes from a launched process (Pipes): the attempt the asset had recorded is put
  back;
* (b) a refused re-run of a done segment leaves it done and the run finished;
* (c) a queued or started manual run (untagged, only Dagster's partition tag) of a segment stops the sensor from
  requesting that run's segments;
* (d) a run whose last segment is done is finished: after a failed re-run of it, and when its status was left
  ``running``;
* (e) a ``running`` segment whose Dagster run died while the process it launched still trains is neither failed nor
  requested until that process is gone.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, SkipReason, build_sensor_context, materialize
from dagster_runs import local_resources, register_run

from pc_pipelines.errors import installed_command
from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.training import training_segment
from pc_pipelines_dagster.automation.sensors import (
    RUN_KEY_TAG,
    RUN_TAG,
    SENSOR_NAME,
    SENSOR_NAME_TAG,
    build_advance_runs_sensor,
)
from pc_pipelines_dagster.resources import StoreResource, SubprocessComputeResource, TransformersEngineResource

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOST = socket.gethostname()
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
# Tiny (test_pipes_segment.py's run): 4 prompts per step, n=8 as 2+6, a small held-out split; one-step segments,
# a checkpoint after every step.
TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2", "training.eval_every=2", "training.eval_samples=1",
        "task.heldout_per_length=5", "task.num_prompts=200", "training.checkpoint_every=1"]

# A second writer of the run that only holds its lock (what every writer takes first), until told to let go.
HOLD = ("import sys\nfrom pc_pipelines.store.runlock import hold_run\n"
        "with hold_run(sys.argv[1], *sys.argv[2:], command='pilot-commit train-segment (test writer)'):\n"
        "    print('held', flush=True)\n    sys.stdin.readline()\n")
# A real `pilot-commit train-segment`, held at the start of its training (the run restored, its lock taken, no store
# connection open) until told to go on.
GATED = ("import sys\nimport pc_pipelines.run.driver as driver\ntrain = driver._train_segment\n"
         "def gated(*args, **kwargs):\n    print('holding', flush=True)\n    sys.stdin.readline()\n"
         "    return train(*args, **kwargs)\n"
         "driver._train_segment = gated\nfrom pc_pipelines.cli import main\nsys.exit(main(sys.argv[1:]))\n")


# ---- helpers ----------------------------------------------------------------------------------------------------
def resources(tmp: Path, compute=None, engine=None) -> dict:
    return local_resources(tmp, compute, engine)


def start(instance, tmp: Path, policy: Path, name: str, total_steps: int = 2) -> str:
    return register_run(instance, tmp, policy, name, TINY, total_steps=total_steps)


def by_sensor(run_id: str, key: str) -> dict:
    """The tags the sensor daemon gives a run it launched for run key ``key``."""
    return {RUN_TAG: run_id, RUN_KEY_TAG: key, SENSOR_NAME_TAG: SENSOR_NAME}


def train(instance, tmp: Path, partition: str, tags: dict | None = None, compute=None, engine=None):
    return materialize([training_segment], partition_key=partition, instance=instance, raise_on_error=False,
                       resources=resources(tmp, compute, engine), tags=tags or {})


def tick(instance, tmp: Path):
    sensor = build_advance_runs_sensor(max_failures=3)
    return sensor(build_sensor_context(instance=instance,
                                       resources={"store": StoreResource(path=str(tmp / "pc.duckdb"))}))


def requests(result) -> list[tuple[str, str]]:
    return [] if isinstance(result, SkipReason) else [(r.run_key, r.partition_key) for r in result.run_requests]


def skipped(result) -> str:
    assert isinstance(result, SkipReason), result
    return result.skip_message


def failure(result) -> str:
    return "\n".join(e.event_specific_data.error.to_string() for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE")


def steps(store: Store, run_id: str) -> list[int]:
    """Every step row of the run, in order: each step exactly once is ``list(range(1, n + 1))``."""
    return [r["step"] for r in store.query("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [run_id])]


def lock_dirs(tmp: Path, run_id: str) -> list[str]:
    """The directories every writer of ``run_id`` locks: its step logs' and its checkpoints'."""
    return [str(Store(tmp / "pc.duckdb").run_dir(run_id)), str(tmp / "runs" / run_id)]


class Writer:
    """A second real process writing the run (``HOLD`` or ``GATED``), started and waited for until it holds the
    lock; ``release()`` lets it go on and returns its exit code."""

    def __init__(self, code: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        line = self.proc.stdout.readline()
        assert line.strip() in ("held", "holding"), f"the writer did not start: {line!r} {self.proc.stderr.read()[-3000:]}"
        self.pid = self.proc.pid

    def release(self, timeout: float = 300) -> int:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err[-3000:]
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def writers():
    started: list[Writer] = []

    def make(code: str, *args: str) -> Writer:
        started.append(Writer(code, *args))
        return started[-1]

    yield make
    for w in started:
        w.kill()


# ---- (a) refused while another process trains the run ----------------------------------------------------------
def test_a_refused_materialization_leaves_the_segment_as_it_was_and_the_sensor_waits(tmp_path, base_policy, writers):
    """A real ``pilot-commit train-segment`` trains segment 1 (it holds the run's lock). The sensor-launched
    materialization of segment 1 is refused: its step fails naming the trainer (pid, host, command) and the fix,
    and segment 1's row is exactly as it was (``planned``, 0 attempts: not ``failed``). The sensor requests nothing
    for the run while the trainer lives (its skip reason names it). Once it is done the sensor requests segment 1
    under a fresh run key (the refused run used ``busy/1``); that run finishes it from the trainer's checkpoint, the
    run is finished, and steps 0 and 1 are in the store once each."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "busy")
    store = Store(tmp_path / "pc.duckdb")
    assert train(instance, tmp_path, "busy/seg-0000", by_sensor(run_id, "busy/0")).success

    trainer = writers(GATED, "train-segment", "--store", str(tmp_path / "pc.duckdb"), "--run-id", run_id,
                      "--runs-root", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
                      "--from-step", "1", "--until-step", "2")
    before = store.segments(run_id)
    assert [s["status"] for s in before] == ["done", "planned"]

    res = train(instance, tmp_path, "busy/seg-0001", by_sensor(run_id, "busy/1"))
    assert not res.success
    assert store.segments(run_id) == before  # every column, updated_at included
    msg = failure(res)
    assert f"pid {trainer.pid} on host {HOST} (pilot-commit train-segment" in msg
    assert "Fix:" in msg and "Nothing was recorded: the segment is still planned (0 attempt(s))" in msg

    result = tick(instance, tmp_path)
    assert requests(result) == []
    assert skipped(result).startswith(
        f"busy: wait (a segment of this run is in flight: its writer lock is held by pid {trainer.pid} on host {HOST} "
        "(pilot-commit train-segment")
    assert store.segments(run_id) == before  # the sensor recorded nothing either

    trainer.release()
    assert steps(store, run_id) == [1, 2]
    assert [s["status"] for s in store.segments(run_id)] == ["done", "planned"]  # train-segment keeps no segment rows
    assert requests(tick(instance, tmp_path)) == [("busy/1/retry-1", "busy/seg-0001")]
    res = train(instance, tmp_path, "busy/seg-0001", by_sensor(run_id, "busy/1/retry-1"))
    assert res.success
    meta = res.asset_materializations_for_node("training_segment")[-1].metadata
    assert meta["resumed_after_step"].value == "1" and meta["steps_run"].value == "1"
    segs = store.segments(run_id)
    assert [(s["status"], s["attempts"], s["consecutive_failures"]) for s in segs] == [("done", 1, 0), ("done", 1, 0)]
    assert store.get_run(run_id)["status"] == "finished"
    assert steps(store, run_id) == [1, 2]
    assert requests(tick(instance, tmp_path)) == [("report-busy", None)]  # finished: no segment, the report job


class RacingSubprocessCompute(SubprocessComputeResource):
    """``pilot-commit train-segment`` through Pipes, with another writer taking the run's lock between the asset's
    look at the segment and the launch (the window the asset cannot hold the lock across: the launched process
    takes it itself)."""

    lock_dirs: list[str]
    run_id: str

    def launch(self, context, args, on_message=None):
        RACERS.append(Writer(HOLD, self.run_id, *self.lock_dirs))
        return super().launch(context, args, on_message)


RACERS: list[Writer] = []


def test_a_launched_segment_refused_by_the_lock_leaves_the_segment_as_it_was(tmp_path, base_policy, writers):
    """Pipes (``SubprocessComputeResource``). A writer already holding the run: the asset refuses before it
    launches anything. A writer taking the run between the asset's look at the segment and the launch: the
    launched ``train-segment`` is refused (exit 2, its Pipes message ``{"refused": ...}``), recording nothing: the
    segment's row is exactly as it was (``planned``, 0 attempts, no Dagster run); the asset fails naming the
    writer. No step is written; the sensor waits while the writer lives."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "pipes")
    store = Store(tmp_path / "pc.duckdb")
    before = store.segments(run_id)

    holder = writers(HOLD, run_id, *lock_dirs(tmp_path, run_id))
    res = train(instance, tmp_path, "pipes/seg-0000", by_sensor(run_id, "pipes/0"), compute=SubprocessComputeResource())
    assert not res.success
    assert store.segments(run_id) == before
    assert f"pid {holder.pid} on host {HOST}" in failure(res)
    assert not [e for e in res.all_events if "[pipes]" in (e.message or "")]  # nothing was launched
    holder.release()

    racing = RacingSubprocessCompute(lock_dirs=lock_dirs(tmp_path, run_id), run_id=run_id)
    try:
        res = train(instance, tmp_path, "pipes/seg-0000", by_sensor(run_id, "pipes/0/retry-1"), compute=racing)
        (racer,) = RACERS
        assert not res.success
        assert store.segments(run_id) == before  # never touched, updated_at included
        assert steps(store, run_id) == []
        msg = failure(res)
        assert f"pid {racer.pid} on host {HOST} (pilot-commit train-segment (test writer)" in msg
        assert "Nothing was recorded: the segment is still planned (0 attempt(s))" in msg
        result = tick(instance, tmp_path)
        assert requests(result) == [] and f"held by pid {racer.pid} on host {HOST}" in skipped(result)
        racer.release()
        assert requests(tick(instance, tmp_path)) == [("pipes/0/retry-2", "pipes/seg-0000")]
    finally:
        for w in RACERS:
            w.kill()
        RACERS.clear()


# ---- (b) a refused re-run of a done segment ---------------------------------------------------------------------
def test_a_refused_rerun_of_a_done_segment_leaves_it_done_and_the_run_finished(tmp_path, base_policy, writers):
    """Both segments done, the run finished. While another process holds the run, re-materializing either segment
    by hand is refused: each stays ``done`` (row unchanged), the run stays ``finished`` and the sensor skips it.
    Once the writer is gone, the re-run of segment 1 succeeds: it stays done (2 attempts), the run is finished, and
    steps 1 and 2 are in the store once each, with the same rows."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "redo")
    store = Store(tmp_path / "pc.duckdb")
    for k in (0, 1):
        assert train(instance, tmp_path, f"redo/seg-000{k}", by_sensor(run_id, f"redo/{k}")).success
    assert store.get_run(run_id)["status"] == "finished"
    rows = store.query("SELECT step, sampled_rollouts, loss FROM steps WHERE run_id = ? ORDER BY step", [run_id])
    before = store.segments(run_id)

    holder = writers(HOLD, run_id, *lock_dirs(tmp_path, run_id))
    for k in (0, 1):
        res = train(instance, tmp_path, f"redo/seg-000{k}")
        assert not res.success
        assert store.segments(run_id) == before
        run = store.get_run(run_id)
        assert (run["status"], run["status_reason"]) == ("finished", None)
        msg = failure(res)
        assert f"pid {holder.pid} on host {HOST}" in msg and "the segment is still done (1 attempt(s))" in msg
    result = tick(instance, tmp_path)
    assert requests(result) == [("report-redo", None)]  # no segment (the run is finished), its report (not launched)
    holder.release()

    res = train(instance, tmp_path, "redo/seg-0001")
    assert res.success
    assert res.asset_materializations_for_node("training_segment")[-1].metadata["resumed_after_step"].value == "1"
    segs = store.segments(run_id)
    assert [(s["status"], s["attempts"]) for s in segs] == [("done", 1), ("done", 2)]
    assert store.get_run(run_id)["status"] == "finished"
    assert steps(store, run_id) == [1, 2]
    assert store.query("SELECT step, sampled_rollouts, loss FROM steps WHERE run_id = ? ORDER BY step",
                       [run_id]) == rows  # the replay reproduces the rows it replaced
    assert requests(tick(instance, tmp_path)) == [("report-redo", None)]


# ---- (c) untagged manual runs in flight -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def asset_job_origin(tmp_path_factory):
    """The code location's asset job's origin, as Dagster records it on a run launched with ``dagster job launch``
    (queued: no daemon takes it), in a Dagster home of its own: the manual runs below carry it, as every queued run
    does."""
    home = tmp_path_factory.mktemp("launched")
    r = subprocess.run([sys.executable, "-m", "dagster", "job", "launch", "-j", "__ASSET_JOB", "-m",
                        "pc_pipelines_dagster.definitions"], cwd=home, env={**os.environ, "DAGSTER_HOME": str(home)},
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    instance = DagsterInstance.local_temp(tempdir=str(home))
    try:
        return instance.get_runs()[0].remote_job_origin
    finally:
        instance.dispose()


@pytest.fixture(scope="module")
def manual(tmp_path_factory, base_policy, asset_job_origin):
    """A run of two one-step segments, segment 0 done: the sensor's next request is segment 1."""
    tmp = tmp_path_factory.mktemp("manual")
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp, base_policy, "manual")
    assert train(instance, tmp, "manual/seg-0000", by_sensor(run_id, "manual/0")).success
    return instance, tmp, run_id, asset_job_origin


def manual_run(instance, tmp: Path, origin, partition: str, status: DagsterRunStatus, assets: str):
    """A run as the UI or ``dagster asset materialize --partition`` makes it: no tag of ours, only the partition tag
    Dagster adds, queued (QueuedRunCoordinator) or started (a run worker going), of the code location's asset job
    with the assets selected (what the sensor reads: its status, tags and asset selection)."""
    from pc_pipelines_dagster.assets.evaluation import segment_eval
    from pc_pipelines_dagster.definitions import build_definitions

    job = build_definitions(resources(tmp)).resolve_implicit_global_asset_job_def()
    keys = {"training": {training_segment.key}, "training+eval": {training_segment.key, segment_eval.key},
            "eval": {segment_eval.key}}[assets]
    return instance.add_run(DagsterRun(job_name=job.name, asset_selection=frozenset(keys), status=status,
                                       remote_job_origin=origin, tags={"dagster/partition": partition}))


@pytest.mark.parametrize("status", [DagsterRunStatus.QUEUED, DagsterRunStatus.STARTED], ids=["queued", "started"])
@pytest.mark.parametrize(("partition", "assets"), [("manual/seg-0001", "training"),
                                                   ("manual/seg-0001", "training+eval"),
                                                   ("manual/seg-0000", "training")],
                         ids=["next-segment", "next-segment-with-eval", "rerun-of-done-segment"])
def test_an_untagged_manual_run_in_flight_stops_the_sensor(manual, status, partition, assets):
    """A manual run of one of the run's partitions, queued or started (only Dagster's ``dagster/partition`` tag, no
    ``pc/run``, nothing in the store yet: the moment it is starting): the sensor requests nothing for the run (not
    the segment the manual run trains, nor the next one while it re-trains a done one), its skip reason names the
    Dagster run, and no segment row changes. Once that run is cancelled the sensor requests segment 1 (run key
    ``manual/1``)."""
    instance, tmp, run_id, origin = manual
    store = Store(tmp / "pc.duckdb")
    before = store.segments(run_id)
    dr = manual_run(instance, tmp, origin, partition, status, assets)
    assert RUN_TAG not in dr.tags and dr.tags["dagster/partition"] == partition
    try:
        result = tick(instance, tmp)
        assert requests(result) == []
        assert skipped(result) == (f"manual: wait (a segment of this run is in flight: Dagster run {dr.run_id} "
                                   f"({status.value}) of {partition})")
        assert store.segments(run_id) == before
    finally:
        instance.report_run_canceled(instance.get_run_by_id(dr.run_id))
    assert requests(tick(instance, tmp)) == [("manual/1", "manual/seg-0001")]


def test_a_manual_run_of_the_evaluation_alone_does_not_stop_the_sensor(manual):
    """A queued manual run of ``segment_eval`` alone (it reads a checkpoint, never writes the run) is not training:
    the sensor still requests segment 1."""
    instance, tmp, run_id, origin = manual
    dr = manual_run(instance, tmp, origin, "manual/seg-0000", DagsterRunStatus.QUEUED, "eval")
    try:
        assert requests(tick(instance, tmp)) == [("manual/1", "manual/seg-0001")]
    finally:
        instance.report_run_canceled(instance.get_run_by_id(dr.run_id))


# ---- (d) a run whose last segment is done is finished -----------------------------------------------------------
class FailingEngineResource(TransformersEngineResource):
    """Records the segment's status as the store has it at the first generation call, then fails."""

    store_path: str
    run_id: str
    segment: int
    seen: str

    def build(self, model, tokenizer):
        engine = super().build(model, tokenizer)

        def generate(requests, params):
            status = Store(self.store_path).segments(self.run_id)[self.segment]["status"]
            Path(self.seen).write_text(status)
            raise RuntimeError("engine lost (test)")

        engine.generate = generate
        return engine


def test_a_run_whose_last_segment_is_done_is_finished(tmp_path, base_policy):
    """Both segments done, the run finished. A re-run of the last segment that fails mid-way: the segment is
    ``done`` throughout (as the store has it while the re-run trains) and after (its error kept, one consecutive
    failure), the run is ``finished`` (not the ``failed`` the training loop recorded), the sensor skips it, and the
    rows are the first run's, each step once. A run left ``running`` with every segment done (what a refused re-run
    used to leave) is finished by the sensor's next tick."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "fin")
    store = Store(tmp_path / "pc.duckdb")
    for k in (0, 1):
        assert train(instance, tmp_path, f"fin/seg-000{k}", by_sensor(run_id, f"fin/{k}")).success
    rows = store.query("SELECT step, sampled_rollouts, loss FROM steps WHERE run_id = ? ORDER BY step", [run_id])

    seen = tmp_path / "seen"
    engine = FailingEngineResource(store_path=str(tmp_path / "pc.duckdb"), run_id=run_id, segment=1, seen=str(seen))
    res = train(instance, tmp_path, "fin/seg-0001", engine=engine)
    assert not res.success and "engine lost (test)" in failure(res)
    assert seen.read_text() == "done"
    seg = store.segments(run_id)[1]
    assert (seg["status"], seg["attempts"], seg["consecutive_failures"]) == ("done", 2, 1)
    assert "engine lost (test)" in seg["error"]
    assert store.get_run(run_id)["status"] == "finished"
    assert requests(tick(instance, tmp_path)) == [("report-fin", None)]  # no segment; the report (not launched)
    assert store.query("SELECT step, sampled_rollouts, loss FROM steps WHERE run_id = ? ORDER BY step",
                       [run_id]) == rows

    store.set_status(run_id, "running")
    assert requests(tick(instance, tmp_path)) == [("report-fin", None)]  # finished by this tick; no segment
    assert store.get_run(run_id)["status"] == "finished"
    assert steps(store, run_id) == [1, 2]


# ---- (e) a Dagster run gone while its process still trains ------------------------------------------------------
def test_a_segment_whose_dagster_run_died_is_not_failed_while_its_process_still_trains(tmp_path, base_policy, writers,
                                                                                      asset_job_origin):
    """Segment 0 is ``running`` for a Dagster run whose worker died (the run ended FAILURE) while the process it
    launched (a pod, a subprocess) still holds the run's lock and trains. The sensor neither records the segment
    failed nor requests it: it waits, naming the process. Once the process is gone, the sensor records the segment
    failed (``did not record a result``, one consecutive failure) and requests a retry under a fresh run key."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "orphan")
    store = Store(tmp_path / "pc.duckdb")
    dr = manual_run(instance, tmp_path, asset_job_origin, "orphan/seg-0000", DagsterRunStatus.STARTED, "training")
    store.segment_started(run_id, 0, dr.run_id)  # what the asset recorded before its worker died
    writer = writers(HOLD, run_id, *lock_dirs(tmp_path, run_id))
    instance.report_run_failed(instance.get_run_by_id(dr.run_id))
    before = store.segments(run_id)

    result = tick(instance, tmp_path)
    assert requests(result) == []
    assert skipped(result).startswith(
        f"orphan: wait (a segment of this run is in flight: its writer lock is held by pid {writer.pid} on host {HOST}")
    assert store.segments(run_id) == before and before[0]["status"] == "running"

    writer.release()
    assert requests(tick(instance, tmp_path)) == [("orphan/0/retry-1", "orphan/seg-0000")]
    seg = store.segments(run_id)[0]
    assert (seg["status"], seg["attempts"], seg["consecutive_failures"]) == ("failed", 1, 1)
    assert seg["error"] == f"segment did not record a result: its run {dr.run_id} ended FAILURE"
    assert steps(store, run_id) == []


# ---- (f) a segment trains exactly its steps or refuses (issue 54) -------------------------------------------------
def pilot(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`pilot-commit` as a process."""
    return subprocess.run([sys.executable, "-m", "pc_pipelines.cli", *args], check=False, capture_output=True,
                          text=True, env=env or ENV, timeout=900)


def segment_cli(tmp: Path, run_id: str, *args: str, env: dict | None = None,
                runs_root: Path | None = None) -> subprocess.CompletedProcess:
    """`pilot-commit train-segment` of ``run_id`` by hand (no Pipes), with the code location's paths."""
    return pilot("train-segment", "--store", str(tmp / "pc.duckdb"), "--run-id", run_id, "--runs-root",
                 str(runs_root or tmp / "runs"), "--data-dir", str(tmp / "data"), *args, env=env)


def one_line(res: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and "%|" not in ln]
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(lines) == 1 and "Fix:" in lines[0], res.stderr[-3000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_train_segment_refuses_steps_that_are_not_its_segment(tmp_path, base_policy):
    """`--segment 1` (steps 1..1 of a two-segment plan) with `--from-step -1 --until-step 0`: before, it trained step
    0, exit 0, and recorded segment 1 done with step 1 never trained. Now refused before anything is trained or
    recorded, naming the segment's steps and the flags that train them; so are a segment the plan lacks, an
    `--attempt` without `--segment` and an `--until-step` past the plan. Then the right flags train it."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "seg")
    store = Store(tmp_path / "pc.duckdb")
    assert train(instance, tmp_path, "seg/seg-0000", by_sensor(run_id, "seg/0")).success
    plan = store.segments(run_id)
    rows = store.query("SELECT * FROM steps WHERE run_id = ? ORDER BY step", [run_id])
    checkpoints = sorted(p.name for p in (tmp_path / "runs" / run_id / "checkpoints").iterdir())

    one_line(segment_cli(tmp_path, run_id, "--segment", "1", "--from-step", "0", "--until-step", "1",
                         "--attempt", "manual"),
             f"--segment 1 of run {run_id} is steps 2..2, but --from-step 0 --until-step 1 would train steps 1..1",
             "Fix: pass --from-step 1 --until-step 2")
    one_line(segment_cli(tmp_path, run_id, "--segment", "7", "--until-step", "7"),
             f"--segment 7: run {run_id} has no such segment; its plan has segments 0..1")
    one_line(segment_cli(tmp_path, run_id, "--attempt", "manual", "--until-step", "1"),
             "--attempt 'manual' names an attempt at a segment, but no --segment is given")
    one_line(segment_cli(tmp_path, run_id, "--until-step", "5"),
             f"--until-step 5 is past run {run_id}'s plan, which ends at step 2")
    assert store.segments(run_id) == plan  # nothing recorded: segment 1 planned, no attempt
    assert (plan[1]["status"], plan[1]["attempts"]) == ("planned", 0)
    assert store.query("SELECT * FROM steps WHERE run_id = ? ORDER BY step", [run_id]) == rows
    assert sorted(p.name for p in (tmp_path / "runs" / run_id / "checkpoints").iterdir()) == checkpoints

    res = segment_cli(tmp_path, run_id, "--segment", "1", "--from-step", "1", "--until-step", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert steps(store, run_id) == [1, 2]
    assert [s["status"] for s in store.segments(run_id)] == ["done", "done"]
    assert store.get_run(run_id)["status"] == "finished"


def test_a_finished_run_missing_a_step_is_damaged_and_its_segment_is_not_done_again(tmp_path, base_policy):
    """A finished two-segment run whose step 2 is gone (what a segment recorded done without its step left): `runs`
    and `check` show it damaged, never finished, with the fix; and a train-segment of segment 1 that trains nothing
    (from its newest checkpoint, already after step 2) is not recorded done over the missing step: exit 2, the
    segment's error says which step is missing."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "gone")
    store = Store(tmp_path / "pc.duckdb")
    for k in (0, 1):
        assert train(instance, tmp_path, f"gone/seg-000{k}", by_sensor(run_id, f"gone/{k}")).success
    assert store.get_run(run_id)["status"] == "finished"
    # step 2 removed from the catalog and its directory, as a segment recorded done without it left the run
    con = duckdb.connect(str(tmp_path / "pc.duckdb"))
    try:
        for t in ("steps", "prompt_observations", "buffer_state", "evictions"):
            con.execute(f"DELETE FROM compacted_{t} WHERE run_id = ? AND step = 2", [run_id])
        con.execute("UPDATE runs SET compacted_through = least(compacted_through, 1) WHERE run_id = ?", [run_id])
    finally:
        con.close()
    for d in store.run_dir(run_id).glob("step-00000002"):
        shutil.rmtree(d)
    assert steps(store, run_id) == [1]

    res = pilot("runs", "--store", str(tmp_path / "pc.duckdb"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith(run_id + " "))
    assert row.split()[-4:] == ["damaged", "step", "2", "missing"], row  # status, then its problems
    assert f"{run_id} damaged: recorded finished, but the store lacks step 2 missing" in res.stdout
    assert f"Fix: `{installed_command('pilot-commit')} check --store" in res.stdout
    res = pilot("check", "--store", str(tmp_path / "pc.duckdb"))
    assert res.returncode == 1 and f"run {run_id}: damaged: recorded finished" in res.stdout, res.stdout[-3000:]

    res = segment_cli(tmp_path, run_id, "--segment", "1", "--until-step", "2")
    line = one_line(res)
    assert f"segment 1 of run {run_id} (steps 2..2) ended without step(s) 2 in the store; it is not recorded done" \
        in line, line
    assert steps(store, run_id) == [1]
    assert "ended without step(s) 2" in store.segments(run_id)[1]["error"]


def test_train_segment_on_a_device_or_runs_root_it_cannot_use_is_one_line(tmp_path, base_policy):
    """`train-segment` with `--device cuda` where torch sees no CUDA device (CUDA_VISIBLE_DEVICES empty), and with a
    runs root that is a file: before, tracebacks; now one line each with the fix, exit 2, before the store is
    touched: the segment planned, no attempt, no step, no checkpoint folder, the file as it was."""
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "dev")
    store = Store(tmp_path / "pc.duckdb")
    plan = store.segments(run_id)
    one_line(segment_cli(tmp_path, run_id, "--segment", "0", "--from-step", "0", "--until-step", "1",
                         "--device", "cuda", env={**ENV, "CUDA_VISIBLE_DEVICES": ""}),
             "--device 'cuda': torch sees no CUDA device on this machine", "Fix: run it where a GPU is")
    not_a_folder = tmp_path / "runs-root"
    not_a_folder.write_text("a file the user keeps")
    one_line(segment_cli(tmp_path, run_id, "--segment", "0", "--from-step", "0", "--until-step", "1",
                         runs_root=not_a_folder),
             f"--runs-root '{str(not_a_folder)[:40]}", "is a file, not a folder")  # a long path is shown cut
    one_line(segment_cli(tmp_path, run_id, "--segment", "0", "--from-step", "0", "--until-step", "1",
                         runs_root=not_a_folder / "below"),
             "lies under ", "which is a file")
    assert not_a_folder.read_text() == "a file the user keeps"
    assert store.segments(run_id) == plan and plan[0]["attempts"] == 0
    assert steps(store, run_id) == []
    assert not (tmp_path / "runs" / run_id / "checkpoints").exists()
