"""The bounded waits of ``tests/support/proc_waits.py`` on real processes: a count that is reached late is waited
for, one that never is fails with what was seen, and "nothing left running" waits for processes that exit late,
orphans included, and processes found another way (by pid and start time)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import proc_waits
import pytest

# A child that starts a grandchild only when told (a file appears), as a vLLM actor starts its engine core some time
# after the actor itself is up; the grandchild lives until its own file appears.
PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    go, stop, pid_file = sys.argv[1:4]
    while not os.path.exists(go):
        time.sleep(0.05)
    g = subprocess.Popen([sys.executable, "-c",
                          "import os, sys, time\\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)", stop])
    open(pid_file + ".tmp", "w").write(str(g.pid))
    os.replace(pid_file + ".tmp", pid_file)
    if len(sys.argv) > 4:  # leave the grandchild behind once released: it is re-parented, out of the test's tree
        while not os.path.exists(sys.argv[4]):
            time.sleep(0.05)
        sys.exit(0)
    g.wait()
""")


@pytest.fixture
def files(tmp_path):
    return tmp_path / "go", tmp_path / "stop", tmp_path / "grandchild.pid"


def _spawn(files, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PARENT, *map(str, (*files, *extra))])


def _grandchild(pid_file: Path) -> int:
    return int(proc_waits.wait_until(lambda: pid_file.read_text() if pid_file.exists() else "", str.isdigit,
                                     "the grandchild's pid file", timeout=60))


def test_a_count_reached_after_the_first_look_is_waited_for(files):
    go, stop, pid_file = files
    child = _spawn(files)
    grandchildren = lambda: len(proc_waits.descendants(child.pid))  # noqa: E731
    try:
        assert grandchildren() == 0  # a count taken now would say the grandchild is not there
        calls = []

        def probe() -> int:
            calls.append(1)
            if len(calls) == 3:
                go.touch()  # the grandchild starts while the wait is going on
            return grandchildren()

        assert proc_waits.wait_count(probe, 1, "the child's descendants", timeout=120) == 1
        assert len(calls) >= 3
        assert proc_waits.descendants(child.pid) == {_grandchild(pid_file)}
    finally:
        stop.touch()
        child.wait(timeout=60)


def test_a_count_never_reached_fails_naming_what_was_awaited_and_what_was_seen():
    seen = iter(range(100))
    with pytest.raises(AssertionError, match=r"^waited 0.3 s for engine cores to be 2; last seen: \d+$"):
        proc_waits.wait_count(lambda: min(next(seen), 1), 2, "engine cores", timeout=0.3)


def test_wait_started_returns_the_new_processes(files):
    go, stop, pid_file = files
    before = proc_waits.descendants()
    child = _spawn(files)
    try:
        assert proc_waits.wait_started(before, "the child", timeout=60) == {child.pid}
    finally:
        go.touch(), stop.touch()
        child.wait(timeout=60)


def _scanning(monkeypatch, on_scan) -> None:
    """``on_scan(n)`` runs after the n-th look at the process tree (n from 1) of the waits under test."""
    real, scans = proc_waits.descendants, []

    def spied(pid=None):
        found = real(pid)
        scans.append(1)
        on_scan(len(scans))
        return found

    monkeypatch.setattr(proc_waits, "descendants", spied)


def test_none_left_waits_for_a_process_that_exits_during_the_wait(files, monkeypatch):
    go, stop, pid_file = files
    before = proc_waits.descendants()
    child = _spawn(files)
    go.touch()
    grandchild = _grandchild(pid_file)
    _scanning(monkeypatch, lambda n: n == 3 and stop.touch())  # both still run at the first looks
    try:
        proc_waits.assert_none_left(before, "the child's processes", timeout=120)
        assert not proc_waits.alive(child.pid) and not proc_waits.alive(grandchild)
    finally:
        stop.touch()
        child.wait(timeout=60)


def test_none_left_keeps_waiting_for_an_orphan_and_names_it(files, monkeypatch):
    go, stop, pid_file = files
    release = pid_file.with_name("release")
    before = proc_waits.descendants()
    child = _spawn(files, release)  # exits when released, leaving its grandchild behind
    go.touch()
    grandchild = _grandchild(pid_file)
    try:
        _scanning(monkeypatch, lambda n: n == 1 and (release.touch(), child.wait(timeout=60)))
        with pytest.raises(AssertionError) as failed:  # seen once in the tree, then re-parented: still waited for
            proc_waits.assert_none_left(before, "the child's processes", timeout=1)
        monkeypatch.undo()
        assert child.returncode == 0 and proc_waits.alive(grandchild)
        assert proc_waits.descendants() - before == set()  # out of this process's tree: a snapshot misses it
        assert str(failed.value) == (f"the child's processes: 1 process(es) still running after 1 s: "
                                     f"{{{grandchild}: {proc_waits.cmdline(grandchild)!r}}}")
    finally:
        stop.touch()
    assert proc_waits.wait_gone({grandchild}, timeout=120) == set()


def test_none_left_follows_processes_found_another_way(files):
    """A process never seen in this process's tree (a Ray actor's engine core, found by asking the actor for its pid)
    is waited for when named in ``also`` by (pid, start time); a pid since given to another process is not."""
    go, stop, pid_file = files
    release = pid_file.with_name("release")
    before = proc_waits.descendants()
    child = _spawn(files, release)
    go.touch()
    grandchild = _grandchild(pid_file)
    release.touch()
    child.wait(timeout=60)  # the grandchild is re-parented before the wait starts: no tree walk finds it
    try:
        assert proc_waits.alive(grandchild) and grandchild not in proc_waits.descendants()
        followed = {(grandchild, proc_waits.start_time(grandchild))}
        proc_waits.assert_none_left(before, "nothing of ours", timeout=1)  # unnamed, it is missed
        with pytest.raises(AssertionError) as failed:
            proc_waits.assert_none_left(before, "the grandchild", timeout=1, also=followed)
        assert str(failed.value) == (f"the grandchild: 1 process(es) still running after 1 s: "
                                     f"{{{grandchild}: {proc_waits.cmdline(grandchild)!r}}}")
        proc_waits.assert_none_left(before, "a reused pid", timeout=1, also={(grandchild, -1)})  # not that process
    finally:
        stop.touch()
    proc_waits.assert_none_left(before, "the grandchild", timeout=120, also=followed)  # it exits: the wait ends
