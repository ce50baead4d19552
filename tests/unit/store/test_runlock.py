"""The run writer lock (pc_pipelines/store/runlock.py) and the stop/status helpers (pc_pipelines/run/stopping.py):
real files, real flocks, a second real process as the other writer."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from pc_pipelines.run.stopping import SpaceReserve, StopFlag, StopRequested, io_error, run_outcome, stop_on_signals
from pc_pipelines.store import RunBusyError, Store, StoreError, hold_run, remove_run
from pc_pipelines.store.runlock import LOCK_NAME, holds, is_stale, read_holder

OTHER_WRITER = """
import sys, time
from pc_pipelines.store import hold_run
with hold_run("r", sys.argv[1], command="other writer"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_the_lock_records_its_holder_counts_per_process_and_is_released(tmp_path):
    d = tmp_path / "run"
    with hold_run("r", d, command="test writer"):
        rec = read_holder(d / LOCK_NAME)
        assert (rec["pid"], rec["host"], rec["command"]) == (os.getpid(), socket.gethostname(), "test writer")
        with hold_run("r", d, d):  # the same process again (and the same directory twice) counts, no deadlock
            assert holds(d)
        assert holds(d)
    assert not holds(d)
    assert read_holder(d / LOCK_NAME) is None  # released: the record is cleared


def test_a_second_process_is_refused_with_the_holder_and_the_fix(tmp_path):
    d = tmp_path / "run"
    other = subprocess.Popen([sys.executable, "-c", OTHER_WRITER, str(d)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        with pytest.raises(RunBusyError) as info, hold_run("r", tmp_path / "free", d):
            pass
        msg = str(info.value)
        assert f"pid {other.pid} on host {socket.gethostname()}" in msg and "other writer" in msg
        assert f"kill {other.pid}" in msg and "--run-name" in msg and "Fix:" in msg
        assert not holds(tmp_path / "free")  # nothing stays taken after a refusal
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    with hold_run("r", d):  # the kernel dropped the dead holder's lock
        assert read_holder(d / LOCK_NAME)["pid"] == os.getpid()


def test_staleness_is_a_dead_pid_on_this_host_only():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    assert is_stale({"pid": dead.pid, "host": host})
    assert not is_stale({"pid": os.getpid(), "host": host})
    assert not is_stale({"pid": dead.pid, "host": host + "-elsewhere"})  # another host's pid cannot be checked
    assert not is_stale(None)


def test_remove_run_needs_the_lock_and_keeps_it(tmp_path):
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation

    store = Store(tmp_path / "s.duckdb")
    cfg = resolve("simulator", {"sim.num_prompts": 2000, "allocator.train_batch": 8, "allocator.n": 8}, method="grpo")
    list(record_simulation(cfg, store, 3, run_id="a"))
    list(record_simulation(cfg, store, 2, run_id="b"))
    with pytest.raises(StoreError, match="does not hold the lock"):
        remove_run(store, "a", store.run_dir("a"))
    with hold_run("a", store.run_dir("a")):
        remove_run(store, "a", store.run_dir("a"))
        assert [p.name for p in store.run_dir("a").iterdir()] == [LOCK_NAME]
    assert store.get_run("a") is None
    assert store.query("SELECT count(*) AS n FROM eval_results WHERE run_id = 'a'") == [{"n": 0}]
    assert store.query("SELECT run_id, count(*) AS n FROM steps GROUP BY run_id") == [{"run_id": "b", "n": 2}]


def test_remove_run_refuses_a_symlinked_directory_and_removes_links_inside_without_following(tmp_path, new_store):
    from pc_pipelines.store import refuse_symlinked

    store = new_store
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    link = tmp_path / "runlink"
    link.symlink_to(outside)
    with pytest.raises(StoreError, match="symbolic link") as info:
        refuse_symlinked("a", tmp_path / "plain", link)
    assert "nothing was deleted" in str(info.value) and f"rm {link}" in str(info.value)
    with pytest.raises(StoreError, match="symbolic link"), hold_run("a", link):
        remove_run(store, "a", link)
    assert (outside / "keep.txt").read_text() == "x"
    # a link inside a real run directory: the link goes, what it points to stays
    d = tmp_path / "run"
    d.mkdir()
    (d / "inner").symlink_to(outside)
    (d / "sub").mkdir()
    (d / "sub" / "f").write_text("y")
    with hold_run("a", d):
        what = remove_run(store, "a", d)
    assert sorted(p.name for p in d.iterdir()) == [LOCK_NAME]
    assert (outside / "keep.txt").read_text() == "x"
    assert what == f"deleted 0 catalog rows and 3 entries in {d}"


HOLD_FLOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_running_run_whose_writer_is_gone_shows_as_stopped(new_store):
    from pc_pipelines.store import RunRecord
    from pc_pipelines.store.runlock import live_writer, with_live_status, writer_gone

    store = new_store
    names = ("live", "dead", "elsewhere-held", "elsewhere-gone", "released")
    for r in names:
        store.register_run(RunRecord(run_id=r, family="f", method="pc", preset="p", seed=0, config={},
                                     config_hash="h", kind="train"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    records = {"live": {"pid": os.getpid(), "host": host}, "dead": {"pid": dead.pid, "host": host},
               "elsewhere-held": {"pid": 7, "host": host + "-other"},
               "elsewhere-gone": {"pid": 7, "host": host + "-other"}, "released": None}
    for run, rec in records.items():
        (store.run_dir(run) / LOCK_NAME).write_text(json.dumps(rec) + "\n" if rec else "")
    # another host's writer is judged by the lock itself: this process stands in for it
    other = subprocess.Popen([sys.executable, "-c", HOLD_FLOCK, str(store.run_dir("elsewhere-held") / LOCK_NAME)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        assert writer_gone(store, "live") is None and writer_gone(store, "elsewhere-held") is None
        assert live_writer(store, "elsewhere-held") == f"pid 7 on host {host}-other"
        assert f"pid {dead.pid} on host {host}" in writer_gone(store, "dead")
        assert "pid 7 on host" in writer_gone(store, "elsewhere-gone") and live_writer(store, "elsewhere-gone") is None
        assert "ended without recording" in writer_gone(store, "released")
        shown = {r["run_id"]: r for r in with_live_status(store, store.list_runs())}
        assert {r: shown[r]["status"] for r in names} == {
            "live": "running", "dead": "stopped", "elsewhere-held": "running", "elsewhere-gone": "stopped",
            "released": "stopped"}
    finally:
        other.kill()
        other.wait()
        other.stdout.close()
    assert "--run-name dead --resume" in shown["dead"]["status_reason"]
    assert store.get_run("dead")["status"] == "running"  # a reader changes nothing


def test_run_outcome_names_disk_full_io_errors_and_stops():
    full = OSError(errno.ENOSPC, "No space left on device", "/data/run/step-00000003")
    status, reason = run_outcome(full, where="/data/run", then="resume it with --resume")
    assert status == "failed" and reason.startswith("disk full: No space left on device")
    assert "Fix: free space on the disk holding /data/run" in reason and reason.endswith("resume it with --resume.")
    wrapped = RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed / No space left on device")
    assert io_error(wrapped).errno == errno.ENOSPC
    assert run_outcome(OSError(errno.EIO, "Input/output error"))[1].startswith("I/O error: [Errno 5]")
    assert run_outcome(ValueError("x")) == ("failed", "ValueError: x")
    assert run_outcome(KeyboardInterrupt())[0] == "stopped"
    stop = StopRequested(signal.SIGTERM).with_detail("after step 4")
    assert run_outcome(stop) == ("stopped", "stopped by SIGTERM (at a step boundary): after step 4")
    assert stop.exit_code == 143 and StopRequested(signal.SIGINT).exit_code == 130


def test_first_signal_requests_a_stop_the_second_abandons(tmp_path):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)  # whatever the test runner set
    with stop_on_signals() as flag:
        assert isinstance(flag, StopFlag) and not flag.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.signum == signal.SIGTERM
        with pytest.raises(StopRequested) as info:
            os.kill(os.getpid(), signal.SIGINT)
        assert info.value.abandoned
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # the previous handlers are back


def test_space_reserve_holds_real_blocks_and_gives_them_back(tmp_path):
    r = SpaceReserve(tmp_path, nbytes=1 << 20)
    assert r.path.stat().st_blocks * 512 >= 1 << 20
    r.release()
    r.release()  # idempotent
    assert not r.path.exists()
