"""`make demo` stops when asked (issue 41, point 9): SIGTERM (``timeout``, CI, a process manager) or Ctrl-C while a
segment trains lets the step in progress finish, checkpoints it, records the segment ``stopped`` (not failed), starts
nothing else and exits 143 / 130. It used to fail the segment ("the sensor retries it, then pauses the run") and go on
training the next ones."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pc_pipelines.run import list_checkpoints
from pc_pipelines.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
# Small steps (4 prompts of 16 rollouts), segments of 3 steps evaluated every 3, one sample a held-out prompt: the signal
# comes while a segment's step 2 trains, a step with no evaluation, so the wait for the step in progress is one small
# step (issue 53: the same stop on less work; it was step 2 of 2 and its evaluation). (task.heldout_per_length would
# shrink the evaluation too, but it is part of the warm start's recipe: another value builds a new SFT warm start.)
SMALL = ["allocator.train_batch=4", "allocator.n=16", "allocator.n_pilot=4", "allocator.pilot_wave=2",
         "allocator.commit_mean=12", "training.ppo_minibatch=4", "training.eval_every=3", "training.eval_samples=1"]


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_demo_at_a_step_boundary(tmp_path, base_policy, policy_cache, procs, signum, code):
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "pc_pipelines_dagster.demo", "--root", str(root), "--methods", "grpo,dapo",
           "--segments", "3", "--segment-steps", "3", "--cache-dir", str(policy_cache)]
    for s in SMALL:
        cmd += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    first_step = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "(run step 1/" in line:
                first_step.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first_step.wait(timeout=900), "".join(lines)[-3000:]  # the first step of a segment is logged
        started = procs.descendants(proc.pid)
        proc.send_signal(signum)
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=60)
    out = "".join(lines)
    assert rc == code, out[-4000:]
    assert procs.wait_gone(started) == set()  # nothing it started is left running
    assert f"stopped by {signum.name}; nothing else was started" in out
    assert "failed (the sensor retries it" not in out
    assert "Loading weights" not in out and "Writing model shards" not in out  # transformers' bars stay off

    st = Store(root / "pc.duckdb")  # the steps of a stopped run are still in their step files: the store's views
    segs = [tuple(r.values()) for r in st.query(
        "SELECT run_id, segment, status, attempts, consecutive_failures, error FROM segments "
        "ORDER BY status DESC, run_id, segment")]
    steps = [tuple(r.values()) for r in st.query("SELECT run_id, max(step), count(*) FROM steps GROUP BY ALL")]
    runs = {r["run_id"]: f"{r['status']}: {r['status_reason']}" for r in st.query("SELECT * FROM runs")}
    # The segment that was training (the first the sensor asked for) is stopped, not failed; it has its checkpoint.
    run_id, seg, seg_status, attempts, failures, error = segs[0]
    assert (seg, seg_status, attempts, failures) == (0, "stopped", 1, 0), segs
    assert error.startswith(f"stopped by {signum.name} (at a step boundary): after step "), error
    assert runs[run_id].startswith(f"stopped: stopped by {signum.name}"), runs
    # The step in progress finished and was checkpointed; no later step, segment or run started.
    ((r, last, n),) = steps
    assert r == run_id and n == last and last in (1, 2), steps
    assert [s for s, _ in list_checkpoints(root / run_id / "checkpoints")][-1] == last
    assert sorted(s[2:5] for s in segs[1:]) == [("planned", 0, 0)] * 5, segs
    # the message, the store and the checkpoint's name carry one step number (pc_pipelines/steps.py)
    assert (f"{run_id}/seg-0000: stopped by {signum.name} (at a step boundary): after step {last} (checkpoint "
            f"step-{last:08d}") in out
    assert "--resume" not in error and "resumes from that checkpoint when it is next materialized" in out
