"""Issue 18, fault injection on runs: real processes (`pilot-commit simulate` / `train`), real files, real DuckDB.

Each test reproduces one fault found by injection and checks it now holds: no step lost or doubled, no other run
touched, the message names the fix, no traceback for a user error, the run's status honest.

* two writers on one run (simulate twice, train twice), an existing run name re-used, a stale lock;
* a damaged newest checkpoint, nine kinds (empty / wrong meta.json, missing / truncated weights, missing trainer /
  allocator / sidecar / RNG state, missing manifest): `--resume` falls back to the newest intact checkpoint, and
  the result is bit-exact with the uninterrupted run; with no intact checkpoint it is refused, nothing changed;
* SIGTERM and Ctrl-C mid-run (simulate and train); a disk full, twice: a real one (an 8 MiB tmpfs, when this
  process may mount one, i.e. root) and an injected one (the step write raises ENOSPC, in process, always);
  a bogus config.json under --policy.
"""

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fault_cli import ENV, EXE, SIM, TRAIN, cli, messages, no_traceback, run_row, simulate, steps_of, train

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration]



def popen(*args) -> subprocess.Popen:
    return subprocess.Popen([*EXE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def wait_lines(proc: subprocess.Popen, n: int) -> list[str]:
    lines = []
    while len(lines) < n:
        line = proc.stdout.readline()
        assert line, f"the process ended early: {proc.stderr.read()[-2000:]}"
        lines.append(line)
    return lines


# ---- one writer per run -------------------------------------------------------------------------------------------
def test_two_simulate_writers_on_one_run_second_is_refused_nothing_lost(tmp_path):
    store = tmp_path / "s.duckdb"
    simulate(store, "other", 20, check_rc=0)
    other = Store(store).query("SELECT * FROM steps WHERE run_id = 'other' ORDER BY step")

    first = popen("simulate", "--store", str(store), "--run-name", "r", "--steps", "300", "--json", *SIM)
    wait_lines(first, 5)  # it holds the run now
    second = simulate(store, "r", 300)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 2
    assert f"being written by pid {first.pid} on host" in second.stderr and "Fix:" in second.stderr
    no_traceback(second.stderr)
    assert steps_of(store, "r") == list(range(1, 300 + 1))  # every step, once
    assert run_row(store, "r")["status"] == "finished"
    assert Store(store).query("SELECT * FROM steps WHERE run_id = 'other' ORDER BY step") == other


def test_an_existing_run_name_is_refused_unless_overwrite(tmp_path):
    store = tmp_path / "s.duckdb"
    simulate(store, "r", 30, check_rc=0)
    simulate(store, "keep", 7, check_rc=0)
    again = simulate(store, "r", 5)
    assert again.returncode == 2 and again.stdout == ""
    assert "already exists" in again.stderr and "30 steps" in again.stderr and "--overwrite" in again.stderr
    no_traceback(again.stderr)
    assert steps_of(store, "r") == list(range(1, 30 + 1)) and run_row(store, "r")["status"] == "finished"

    simulate(store, "r", 5, "--overwrite", check_rc=0)
    assert steps_of(store, "r") == list(range(1, 5 + 1))
    evals = Store(store).query("SELECT step FROM eval_results WHERE run_id = 'r' ORDER BY step")
    assert [e["step"] for e in evals] == [0, 5]  # before training and the last step: nothing of the old run left
    assert steps_of(store, "keep") == list(range(1, 7 + 1))


def test_a_stale_lock_of_a_dead_holder_is_broken_a_live_one_refuses(tmp_path):
    """A lock file still flocked by an orphan (a child that inherited it) whose record names a dead pid on this
    host is stale: the next writer breaks it. The same lock naming a live pid refuses."""
    store = tmp_path / "s.duckdb"
    lock = tmp_path / "s.duckdb.runs" / "r" / ".writer.lock"
    lock.parent.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    def holder(pid: int) -> subprocess.Popen:
        code = (f"import fcntl, json, sys, time; f = open({str(lock)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
                f"f.truncate(0); f.write(json.dumps({{'pid': {pid}, 'host': {socket.gethostname()!r}}})); f.flush(); "
                "print('locked', flush=True); time.sleep(120)")
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "locked"
        return p

    orphan = holder(dead.pid)
    try:
        with open(lock) as f, pytest.raises(BlockingIOError):  # it really is held
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        simulate(store, "r", 10, check_rc=0)
        assert steps_of(store, "r") == list(range(1, 10 + 1))
    finally:
        orphan.kill()
        orphan.wait()

    live = holder(os.getpid())  # names a live process (this one) on this host
    try:
        r = simulate(store, "r", 10, "--overwrite")
        assert r.returncode == 2 and f"pid {os.getpid()} on host" in r.stderr
        no_traceback(r.stderr)
    finally:
        live.kill()
        live.wait()
    assert steps_of(store, "r") == list(range(1, 10 + 1))


def test_a_sigkilled_writer_leaves_no_lock_behind(tmp_path):
    store = tmp_path / "s.duckdb"
    proc = popen("simulate", "--store", str(store), "--run-name", "r", "--steps", "100000", "--json", *SIM)
    wait_lines(proc, 3)
    proc.kill()
    proc.communicate(timeout=30)
    simulate(store, "r", 8, "--overwrite", check_rc=0)
    assert steps_of(store, "r") == list(range(1, 8 + 1))


def test_two_trains_on_one_run_second_is_refused(tmp_path, base_policy):
    """The first writer still holds the run when the second asks for it: it has far more steps to go than a second
    process takes to start (a 3-step first run could finish first on a loaded machine, and then nothing was refused);
    once the second is refused, the first is stopped at a step boundary, and its steps are all there, once each."""
    first = popen("train", "--method", "pc", "--steps", "500", "--out", str(tmp_path), "--run-name", "t", "--policy",
                  str(base_policy), "--json", "--quiet", "--seed", "3", *TRAIN)
    wait_lines(first, 1)
    second = train(tmp_path, "t", base_policy, 3, "--resume")
    assert first.poll() is None, "the first run ended before the second was refused: nothing was tested"
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 143, err[-2000:]
    assert second.returncode == 2 and f"pid {first.pid}" in second.stderr and "Fix:" in second.stderr
    no_traceback(second.stderr)
    last = 1 + len(out.splitlines())  # the step the first stopped after (step 1's line was read before)
    assert steps_of(tmp_path / "pc.duckdb", "t") == list(range(1, last + 1))
    assert run_row(tmp_path / "pc.duckdb", "t")["status"] == "stopped"


# ---- checkpoints that verify themselves ---------------------------------------------------------------------------
def _damage(kind: str, ck: Path) -> None:
    if kind == "meta_empty":
        (ck / "meta.json").write_text("")
    elif kind == "meta_wrong":
        meta = json.loads((ck / "meta.json").read_text())
        (ck / "meta.json").write_text(json.dumps({**meta, "step": meta["step"] - 1}))
    elif kind == "weights_missing":
        (ck / "policy" / "model.safetensors").unlink()
    elif kind == "weights_truncated":
        w = ck / "policy" / "model.safetensors"
        with open(w, "r+b") as f:
            f.truncate(w.stat().st_size // 2)
    elif kind == "manifest_missing":
        (ck / "manifest.json").unlink()
    else:
        (ck / {"trainer_missing": "trainer.pt", "allocator_missing": "allocator.json",
               "sidecar_missing": "sidecar.parquet", "rng_missing": "rng.pt"}[kind]).unlink()


DAMAGE = ["meta_empty", "meta_wrong", "weights_missing", "weights_truncated", "trainer_missing", "allocator_missing",
          "sidecar_missing", "rng_missing", "manifest_missing"]


def _final(out: Path, step: int) -> dict:
    ck = out / "t" / "checkpoints" / f"step-{step:08d}"
    store = Store(out / "pc.duckdb")
    return {
        "weights": (ck / "policy" / "model.safetensors").read_bytes(),
        "allocator": json.loads((ck / "allocator.json").read_text()),
        "steps": store.query("SELECT step, sampled_rollouts, trained_rollouts, loss, mean_reward FROM steps "
                             "WHERE run_id = 't' ORDER BY step"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", DAMAGE)
def test_resume_skips_a_damaged_newest_checkpoint(kind, run4_and_ref5, base_policy, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run4_and_ref5 / "run4", out)
    store = out / "pc.duckdb"
    assert run_row(store, "t")["status"] == "finished"
    newest = out / "t" / "checkpoints" / "step-00000004"
    _damage(kind, newest)

    r = train(out, "t", base_policy, 5, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r.stderr)
    assert "step-00000004 is damaged" in r.stderr and "damaged-step-00000004" in r.stderr
    assert "resuming from step-00000003" in r.stderr
    assert [json.loads(x)["step"] for x in r.stdout.splitlines()] == [4, 5]  # step 4 replayed, then step 5
    assert (out / "t" / "checkpoints" / "damaged-step-00000004").is_dir()  # kept for inspection
    assert steps_of(store, "t") == [1, 2, 3, 4, 5]
    assert run_row(store, "t")["status"] == "finished"
    assert _final(out, 5) == _final(run4_and_ref5 / "ref5", 5)  # bit-exact with the uninterrupted run


@pytest.mark.slow
def test_resume_with_no_intact_checkpoint_is_refused_and_changes_nothing(run4_and_ref5, base_policy, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run4_and_ref5 / "run4", out)
    store = out / "pc.duckdb"
    before = Store(store).query("SELECT * FROM steps WHERE run_id = 't' ORDER BY step")
    for i, ck in enumerate(sorted((out / "t" / "checkpoints").glob("step-*"))):
        _damage(DAMAGE[i % len(DAMAGE)], ck)
    r = train(out, "t", base_policy, 5, "--resume")
    assert r.returncode == 2
    no_traceback(r.stderr)
    assert "no intact checkpoint" in r.stderr and "Fix:" in r.stderr and "--overwrite" in r.stderr
    assert run_row(store, "t")["status"] == "finished"  # not flipped to running
    assert Store(store).query("SELECT * FROM steps WHERE run_id = 't' ORDER BY step") == before
    assert len(list((out / "t" / "checkpoints").glob("step-*"))) == 4  # nothing moved: nothing to fall back to


# ---- clean stops and honest statuses ------------------------------------------------------------------------------
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_simulate_stops_cleanly_on_a_signal(sig, code, tmp_path):
    store = tmp_path / "s.duckdb"
    simulate(store, "other", 6, check_rc=0)
    proc = popen("simulate", "--store", str(store), "--run-name", "r", "--steps", "100000", "--json", *SIM)
    wait_lines(proc, 20)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    no_traceback(err)
    (line,) = messages(err)
    assert line.startswith("pilot-commit simulate: stopped by ") and sig.name in line
    printed = 20 + len(out.splitlines())
    row = run_row(store, "r")
    assert row["status"] == "stopped" and sig.name in row["status_reason"]
    assert steps_of(store, "r") == list(range(1, printed + 1))  # what was printed is what was recorded, once each
    assert steps_of(store, "other") == list(range(1, 6 + 1))
    listing = cli("runs", "--store", str(store), check_rc=0).stdout
    assert "stopped" in listing and f"r stopped: stopped by {sig.name}" in listing


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_train_stops_at_a_step_boundary_with_a_checkpoint_then_resumes(sig, code, base_policy, tmp_path):
    proc = popen("train", "--method", "pc", "--steps", "50", "--out", str(tmp_path), "--run-name", "t", "--policy",
                 str(base_policy), "--json", "--quiet", "--seed", "3", *TRAIN, "--set", "training.checkpoint_every=10")
    wait_lines(proc, 2)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err[-2000:]
    no_traceback(err)
    (line,) = messages(err)
    assert line.startswith("pilot-commit train: run t stopped by ") and sig.name in line and "--resume" in line
    last = 2 + len(out.splitlines())  # the step it stopped after (two lines were read before)
    store = tmp_path / "pc.duckdb"
    assert steps_of(store, "t") == list(range(1, last + 1))
    row = run_row(store, "t")
    assert row["status"] == "stopped" and sig.name in row["status_reason"]
    assert (tmp_path / "t" / "checkpoints" / f"step-{last:08d}").is_dir()  # the boundary was checkpointed

    r = train(tmp_path, "t", base_policy, last + 1, "--resume", "--set", "training.checkpoint_every=10")
    assert r.returncode == 0, r.stderr[-2000:]
    assert [json.loads(x)["step"] for x in r.stdout.splitlines()] == [last + 1]  # nothing redone, nothing lost
    assert steps_of(store, "t") == list(range(1, last + 2))
    assert run_row(store, "t")["status"] == "finished"


def test_a_real_full_disk_ends_the_run_failed_with_the_fix(tmp_path):
    """An 8 MiB tmpfs fills up under `simulate`: status failed with the reason and the fix, exit 1, no traceback."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)]
    if subprocess.run(mount, capture_output=True, check=False).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); test_disk_full_injected_* covers ENOSPC in process")
    try:
        store = mnt / "s.duckdb"
        r = simulate(store, "full", 100000, timeout=300)
        assert r.returncode == 1
        no_traceback(r.stderr)
        assert "disk full" in r.stderr and "No space left on device" in r.stderr and "Fix: free space" in r.stderr
        row = run_row(store, "full")
        assert row["status"] == "failed" and row["status_reason"].startswith("disk full")
        steps = steps_of(store, "full")
        assert steps == list(range(1, len(steps) + 1)) and len(steps) > 0  # what was written is whole, in order
        assert not [p for p in (mnt / "s.duckdb.runs" / "full").iterdir() if p.name.startswith(".tmp-")]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _enospc_after(monkeypatch, n: int) -> None:
    from pc_pipelines.store.steplog import StepLogWriter

    real = StepLogWriter.write_step
    calls = {"n": 0}

    def write_step(self, step, tables):
        calls["n"] += 1
        if calls["n"] > n:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.run_dir / f"step-{step:08d}"))
        return real(self, step, tables)

    monkeypatch.setattr(StepLogWriter, "write_step", write_step)


def test_disk_full_injected_in_simulate(tmp_path, monkeypatch, capsys):
    from pc_pipelines.cli import main

    store = tmp_path / "s.duckdb"
    simulate(store, "other", 4, check_rc=0)
    _enospc_after(monkeypatch, 12)
    rc = main(["simulate", "--store", str(store), "--run-name", "r", "--steps", "50", "--json", *SIM])
    err = capsys.readouterr().err
    assert rc == 1
    assert "run r failed: disk full" in err and "Fix: free space" in err and "--overwrite" in err
    row = run_row(store, "r")
    assert row["status"] == "failed" and "No space left on device" in row["status_reason"]
    assert steps_of(store, "r") == list(range(1, 12 + 1))
    assert steps_of(store, "other") == list(range(1, 4 + 1))


@pytest.mark.slow
def test_disk_full_injected_in_train(tmp_path, monkeypatch, capsys, base_policy):
    from pc_pipelines.cli import main

    _enospc_after(monkeypatch, 2)
    rc = main(["train", "--method", "pc", "--steps", "4", "--out", str(tmp_path), "--run-name", "t", "--policy",
               str(base_policy), "--json", "--quiet", "--seed", "3", *TRAIN])
    err = capsys.readouterr().err
    assert rc == 1
    assert "run t failed: disk full" in err and "--resume" in err and "Fix: free space" in err
    row = run_row(tmp_path / "pc.duckdb", "t")
    assert row["status"] == "failed" and row["status_reason"].startswith("disk full")
    assert steps_of(tmp_path / "pc.duckdb", "t") == [1, 2]
    monkeypatch.undo()
    rc = main(["train", "--method", "pc", "--steps", "4", "--out", str(tmp_path), "--run-name", "t", "--policy",
               str(base_policy), "--json", "--quiet", "--seed", "3", *TRAIN, "--resume"])
    assert rc == 0
    assert steps_of(tmp_path / "pc.duckdb", "t") == [1, 2, 3, 4]
    assert run_row(tmp_path / "pc.duckdb", "t")["status"] == "finished"


def test_a_bogus_policy_config_is_refused_before_the_run_starts(tmp_path, base_policy):
    simulate(tmp_path / "pc.duckdb", "other", 3, check_rc=0)
    bogus = tmp_path / "bogus-policy"
    shutil.copytree(base_policy, bogus)
    (bogus / "config.json").write_text('{"model_type": "no-such-architecture", "hidden_size": ')
    r = train(tmp_path, "t", bogus, 3)
    assert r.returncode == 2, r.stderr[-2000:]
    no_traceback(r.stderr)
    assert str(bogus) in r.stderr and "cannot be loaded" in r.stderr and "Fix:" in r.stderr
    assert run_row(tmp_path / "pc.duckdb", "t") is None  # never marked running
    assert steps_of(tmp_path / "pc.duckdb", "other") == [1, 2, 3]
    assert run_row(tmp_path / "pc.duckdb", "other")["status"] == "finished"
