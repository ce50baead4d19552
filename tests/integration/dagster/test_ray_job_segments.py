"""Training segments as jobs on a real Ray cluster: the ``training_segment`` and ``segment_eval`` assets with
:class:`~resources.RayJobComputeResource`, against a Ray head this module starts on 127.0.0.1 (2 CPUs, bounded
memory, its job server on the dashboard port) and stops, every process it started gone afterwards.

A 2-segment GRPO run submitted as Ray jobs (``pilot-commit train-segment``, its Pipes messages read back from the job
log) equals the same run trained in process by :class:`~resources.LocalComputeResource`, bit for bit: store rows
(steps, evaluations) and checkpoint weights. Its second segment's job is stopped through the job server once the
job has reported step 2; the segment fails, and its retry resumes from the checkpoint after step 2 and ends on the
same rows and weights. Paths are shared by construction (one machine), as a PVC shares them on Kubernetes."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from dagster import DagsterInstance, materialize
from dagster_runs import local_resources, step_failures
from safetensors.torch import load_file

import pc_pipelines
from pc_pipelines.run import list_checkpoints
from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.evaluation import segment_eval
from pc_pipelines_dagster.assets.training import training_segment
from pc_pipelines_dagster.automation.jobs import start_run
from pc_pipelines_dagster.resources import (
    LocalComputeResource,
    RayJobComputeResource,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.ray]

# test_pipes_segment.py's tiny run (4 prompts per step, n=8, a small held-out split evaluated every 2 steps), with
# GRPO: PC's pilots find no informative prompt in so small a run, so nothing would train and the weights would not
# move; GRPO updates them (loss > 0 at steps 0 and 2). A checkpoint after every step: the stopped segment has one to
# resume from.
METHOD = "grpo"
TINY = ["allocator.train_batch=4", "allocator.n=8", "training.ppo_minibatch=2",
        "training.eval_every=2", "training.eval_samples=1", "task.heldout_per_length=5", "task.num_prompts=200",
        "training.checkpoint_every=1"]
TOKEN_ENV = "PC_TEST_RAY_AUTH_TOKEN"  # the test cluster's token, in this process's environment while it runs


# ---- the cluster -------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _mentioning(marker: str) -> set[int]:
    """Live processes whose command line mentions ``marker`` (this cluster's own temp dir)."""
    return {int(d.name) for d in Path("/proc").iterdir()
            if d.name.isdigit() and int(d.name) != os.getpid() and marker in _cmdline(int(d.name))}


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _stop(head: int | None, pids: set[int], procs) -> tuple[set[int], set[int]]:
    """Stop a cluster's processes ``pids``: SIGTERM to ``head`` (``ray start --block`` then stops its cluster
    itself), then SIGTERM and at last SIGKILL to whatever is left. Returns (the pids left after the head's own
    stop, the pids still alive at the end)."""
    if head is not None:
        _signal({head}, signal.SIGTERM)
    after_head = procs.wait_gone(pids, timeout=20.0)
    left = after_head
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
        if not left:
            break
        _signal(left, sig)
        left = procs.wait_gone(left, timeout=wait)
    return after_head, left


@pytest.fixture(scope="module")
def ray_head(procs):
    """``ray start --head --block`` on 127.0.0.1 as a child of this process: 2 CPUs, 2 GiB of schedulable memory,
    a 100 MB object store, its ports picked free (the GCS, the dashboard with the job server, the Ray Client server
    and the dashboard agent, whose defaults another cluster on this machine may hold), its own temp dir. Yields its
    job server's address. Then stops exactly what it started: the ``ray start`` process and its descendants (the
    Ray daemons, workers, job supervisors and job entrypoints), SIGTERM then SIGKILL, by pid; and checks that no
    process mentioning its temp dir is left."""
    temp = tempfile.mkdtemp(prefix="pcray-", dir="/tmp")  # short: Ray's unix socket paths live under it
    dash = _free_port()
    token = secrets.token_hex(32)  # this cluster's own token (Ray 2.60 authenticates its job server by token)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--disable-usage-stats",
           "--node-ip-address", "127.0.0.1", "--port", str(_free_port()), "--num-cpus", "2",
           "--memory", str(2 * 1024**3), "--object-store-memory", str(100 * 1024**2),
           "--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
           "--ray-client-server-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
           "--dashboard-agent-grpc-port", str(_free_port()), "--metrics-export-port", str(_free_port()),
           "--min-worker-port", "0", "--max-worker-port", "0", "--temp-dir", temp]
    log = open(Path(temp) / "ray-start.log", "w")  # noqa: SIM115 (closed at teardown)
    head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    headers = {"Authorization": f"Bearer {token}"}
    os.environ[TOKEN_ENV] = token  # what RayJobComputeResource(auth_token_env=TOKEN_ENV) sends
    t0 = time.monotonic()
    try:
        while True:
            assert head.poll() is None, f"ray start exited {head.returncode}: {(Path(temp) / 'ray-start.log').read_text()[-3000:]}"
            try:
                req = urllib.request.Request(f"{address}/api/version", headers=headers)
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() - t0 < 120, "the Ray job server did not answer within 120 s"
            time.sleep(0.5)
        yield SimpleNamespace(address=address, headers=headers, temp_dir=temp, pid=head.pid,
                              started_s=time.monotonic() - t0)
    finally:
        os.environ.pop(TOKEN_ENV, None)
        started = procs.descendants(head.pid) | {head.pid}
        t1 = time.monotonic()
        after_head, left = _stop(head.pid, started, procs)
        head.wait(timeout=10)
        log.close()
        strays = _mentioning(temp)  # anything of this cluster that escaped the process tree (none expected)
        stray_left = _stop(None, strays, procs)[1] if strays else set()
        shutil.rmtree(temp, ignore_errors=True)
        print(f"\nray head: {len(started)} processes stopped in {time.monotonic() - t1:.1f}s "
              f"({len(after_head)} needed signals of ours after the head's own stop)")
        assert left == set(), f"processes of the Ray head outlived SIGKILL: {left}"
        assert not strays, f"processes of this cluster had left its process tree: {strays} (killed; left: {stray_left})"


# ---- the runs ----------------------------------------------------------------------------------------------------
def register(instance, tmp_path, base_policy, name):
    cfg = {"method": METHOD, "overrides": TINY, "segment_steps": 2, "total_steps": 4, "run_name": name,
           "policy_path": str(base_policy)}
    res = start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                       instance=instance, resources=local_resources(tmp_path, LocalComputeResource()))
    assert res.success


def rows(store: Store, run_id: str) -> tuple[list[dict], list[dict]]:
    steps = store.query("SELECT step, sampled_rollouts, trained_rollouts, pilot_rollouts, commit_rollouts, rounds, "
                        "kept, evicted, buffer_size, mean_reward, mean_reward_std, informative_share, loss "
                        "FROM steps WHERE run_id = ? ORDER BY step", [run_id])
    evals = store.query("SELECT step, benchmark, k, accuracy, n_prompts FROM eval_results WHERE run_id = ? "
                        "ORDER BY step, benchmark", [run_id])
    return steps, evals


def weights(tmp_path, run_id: str, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(tmp_path / "runs" / run_id / "checkpoints" / f"step-{step:08d}" / "policy" / "model.safetensors"))


def _reports_step(log: str, step: int) -> bool:
    """Whether a job log holds the Pipes custom message of ``step`` (one JSON line)."""
    for line in log.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if (isinstance(msg, dict) and msg.get("method") == "report_custom_message"
                and (msg.get("params") or {}).get("payload", {}).get("step") == step):
            return True
    return False


class StopAfterStep(threading.Thread):
    """Finds the next ``train-segment`` job of ``run_id`` on the cluster, waits until its log holds the Pipes message
    of ``step`` (the job is still running: messages reach the log as they are written), then stops it through the
    job server (``JobSubmissionClient.stop_job``: SIGTERM, SIGKILL after 3 s), as an operator or a preemption would."""

    def __init__(self, head, run_id: str, step: int, known: set[str], timeout: float = 300.0) -> None:
        super().__init__(daemon=True)
        self.head, self.run_id, self.step, self.known, self.timeout = head, run_id, step, known, timeout
        self.job_id: str | None = None
        self.stopped_while: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        from ray.job_submission import JobStatus, JobSubmissionClient

        try:
            client = JobSubmissionClient(self.head.address, headers=self.head.headers)
            deadline = time.monotonic() + self.timeout
            while self.job_id is None:
                assert time.monotonic() < deadline, "no train-segment job was submitted"
                for job in client.list_jobs():
                    meta = job.metadata or {}
                    if (meta.get("pc_run_id") == self.run_id and meta.get("pc_command") == "train-segment"
                            and job.submission_id not in self.known):
                        self.job_id = job.submission_id
                time.sleep(0.1)
            while not _reports_step(client.get_job_logs(self.job_id), self.step):
                status = client.get_job_status(self.job_id)
                assert not status.is_terminal(), f"job {self.job_id} ended ({status}) before reporting step {self.step}"
                assert time.monotonic() < deadline, f"job {self.job_id} did not report step {self.step}"
                time.sleep(0.1)
            self.stopped_while = str(client.get_job_status(self.job_id))
            client.stop_job(self.job_id)
            assert self.stopped_while == str(JobStatus.RUNNING)
        except BaseException as exc:  # re-raised by the test
            self.error = exc


def test_segments_as_ray_jobs_equal_a_local_run_and_a_stopped_job_resumes(ray_head, tmp_path, base_policy):
    t0 = time.monotonic()
    instance = DagsterInstance.ephemeral()
    local = local_resources(tmp_path, LocalComputeResource())
    # The code travels with each job (runtime_env py_modules: Ray zips the package, uploads it to the cluster and puts
    # its copy first on the job's path), as it would to nodes whose image lacks it; the config is the run's row in
    # the store, on the shared storage.
    shipped = str(Path(pc_pipelines.__file__).resolve().parent)
    ray = local_resources(tmp_path, RayJobComputeResource(address=ray_head.address, auth_token_env=TOKEN_ENV,
                                                    poll_interval_s=0.2, py_modules=[shipped]))
    register(instance, tmp_path, base_policy, "local")
    register(instance, tmp_path, base_policy, "ray")
    store = Store(tmp_path / "pc.duckdb")

    # The reference: the same run (same config and seed) trained in this process.
    for k in (0, 1):
        materialize([training_segment], partition_key=f"local/seg-000{k}", instance=instance, resources=local)
    t_local = time.monotonic() - t0

    # Segment 0 as a Ray job, then its evaluation as another (eval-segment).
    out = materialize([training_segment, segment_eval], partition_key="ray/seg-0000", instance=instance, resources=ray)
    meta = out.asset_materializations_for_node("training_segment")[-1].metadata
    assert meta["steps_run"].value == "2" and meta["resumed_after_step"].value == "fresh (the base policy)"
    assert [r["step"] for r in meta["pipes_steps"].value] == [1, 2]  # one Pipes message per step, from the job log
    job0 = meta["launch/Ray Job ID"].value
    assert job0.startswith("pc-train-segment-ray-")
    assert meta["reported/checkpoint"].value.endswith("ray/checkpoints/step-00000002")
    logs = [e.message for e in instance.all_logs(out.run_id) if e.message]
    assert any(m.startswith("step 2/2 of segment seg-0000 of ") for m in logs)  # the job's steps reached Dagster as they came
    (origin,) = [m for m in logs if m.startswith("pilot-commit train-segment: code ")]
    ran = Path(origin.removeprefix("pilot-commit train-segment: code ").split(",")[0])
    assert ran != Path(shipped) and ray_head.temp_dir in str(ran) and "py_modules" in str(ran), origin
    assert ran.name == "pc_pipelines" and (ran / "cli" / "segment.py").read_bytes() == (Path(shipped) / "cli" / "segment.py").read_bytes()
    emeta = out.asset_materializations_for_node("segment_eval")[0].metadata
    assert emeta["compute"].value == "RayJobComputeResource" and emeta["step"].value == 2
    assert emeta["average_accuracy"].value == pytest.approx(meta["eval_accuracy"].value, abs=5e-5)  # = the loop's own eval (rounded to 4 places in the UI)

    # Segment 1 as a Ray job, stopped through the job server once it has reported step 3.
    stopper = StopAfterStep(ray_head, "ray", step=3, known={job0})
    stopper.start()
    bad = materialize([training_segment], partition_key="ray/seg-0001", instance=instance, resources=ray,
                      raise_on_error=False)
    stopper.join(timeout=60)
    assert stopper.error is None, stopper.error
    assert not bad.success
    msg = step_failures(bad)
    assert "STOPPED" in msg and stopper.job_id in msg and "resumes from its newest checkpoint" in msg
    seg = store.segments("ray")[1]  # the job's process recorded its own stop (at a step boundary): no failure
    assert (seg["status"], seg["consecutive_failures"]) == ("stopped", 0)
    assert seg["error"].startswith("stopped by SIGTERM") and seg["orchestrator_run_id"] == bad.run_id
    have = [s for s, _ in list_checkpoints(tmp_path / "runs" / "ray" / "checkpoints")]
    assert 3 in have  # the step it reported was checkpointed before the stop took effect

    # The retry (what the advance_runs sensor launches) resumes inside the segment, from the checkpoint after step 3.
    out = materialize([training_segment], partition_key="ray/seg-0001", instance=instance, resources=ray)
    meta = out.asset_materializations_for_node("training_segment")[-1].metadata
    assert meta["resumed_after_step"].value == "3" and meta["steps_run"].value == "1"
    assert [r["step"] for r in meta["pipes_steps"].value] == [4]
    assert [s["status"] for s in store.segments("ray")] == ["done", "done"]

    # Equal to the local run: step rows, evaluations (the loop's and segment_eval's), weights bit for bit.
    ref_steps, ref_evals = rows(store, "local")
    got_steps, got_evals = rows(store, "ray")
    assert [r["step"] for r in got_steps] == [1, 2, 3, 4]
    assert got_steps == ref_steps
    assert {r["step"] for r in got_evals} == {0, 2, 4} and got_evals == ref_evals
    assert any(r["loss"] for r in got_steps)  # the steps trained: the weights below moved
    base = load_file(str(base_policy / "model.safetensors"))
    for step in (2, 4):
        a, b = weights(tmp_path, "local", step), weights(tmp_path, "ray", step)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"weights after step {step} differ"
    assert any(not torch.equal(base[k], b[k]) for k in base.keys() & b.keys())  # not the base policy's
    print(f"\nray head up in {ray_head.started_s:.1f}s; local run {t_local:.1f}s; ray jobs (4) "
          f"{time.monotonic() - t0 - t_local:.1f}s")


def test_no_job_server_at_the_address_fails_with_a_fix(tmp_path, base_policy):
    instance = DagsterInstance.ephemeral()
    register(instance, tmp_path, base_policy, "nowhere")
    res = local_resources(tmp_path, RayJobComputeResource(address=f"http://127.0.0.1:{_free_port()}"))
    bad = materialize([training_segment], partition_key="nowhere/seg-0000", instance=instance, resources=res,
                      raise_on_error=False)
    assert not bad.success
    msg = step_failures(bad)
    assert "no Ray job server at http://127.0.0.1:" in msg and "Fix:" in msg
    assert Store(tmp_path / "pc.duckdb").segments("nowhere")[0]["status"] == "failed"


def test_a_cluster_that_wants_a_token_refuses_without_it_and_says_how_to_fix(ray_head, tmp_path, base_policy):
    instance = DagsterInstance.ephemeral()
    register(instance, tmp_path, base_policy, "tokenless")
    res = local_resources(tmp_path, RayJobComputeResource(address=ray_head.address, auth_token_env="PC_TEST_NO_SUCH_TOKEN"))
    bad = materialize([training_segment], partition_key="tokenless/seg-0000", instance=instance, resources=res,
                      raise_on_error=False)
    assert not bad.success
    msg = step_failures(bad)
    assert "refused the request" in msg and "$PC_TEST_NO_SUCH_TOKEN" in msg and "Fix:" in msg


def test_a_job_past_its_timeout_is_stopped_and_the_segment_fails_with_the_fix(ray_head, tmp_path, base_policy):
    """job_timeout_s stops the job through the job server (a segment takes far longer than 2 s); the asset fails
    saying so and how to fix it, and the segment is recorded failed whether the stop came before the process
    recorded its attempt or after (then it records a graceful `stopped`, which the launcher's record overrides)."""
    instance = DagsterInstance.ephemeral()
    register(instance, tmp_path, base_policy, "late")
    res = local_resources(tmp_path, RayJobComputeResource(address=ray_head.address, auth_token_env=TOKEN_ENV,
                                                    poll_interval_s=0.2, job_timeout_s=2))
    t0 = time.monotonic()
    bad = materialize([training_segment], partition_key="late/seg-0000", instance=instance, resources=res,
                      raise_on_error=False)
    assert not bad.success and time.monotonic() - t0 < 120
    msg = step_failures(bad)
    assert "STOPPED" in msg and "ran past job_timeout_s=2 and was stopped. Fix: raise job_timeout_s" in msg
    # failed, and counted towards the sensor's pause limit, however far the job got before the stop (one that had
    # started training records its graceful stop as `stopped`, which alone the sensor would resume for ever)
    seg = Store(tmp_path / "pc.duckdb").segments("late")[0]
    assert (seg["status"], seg["consecutive_failures"]) == ("failed", 1)
