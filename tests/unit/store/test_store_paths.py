"""Store paths that cannot work (issue 31, point 6): each cause gets its own message and fix, and only a lock held
by another process gets "close the other process"; nothing is created or changed at a refused path."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from pc_pipelines.store import Store, StoreError
from pc_pipelines.store.names import shown_path, store_path_problem

LOCK_FIX = "close the other process"


def open_refused(path: Path, read_only: bool) -> str:
    with pytest.raises(StoreError) as exc, Store(path, lock_timeout_s=0.2).connect(read_only=read_only):
        pass
    msg = str(exc.value)
    assert "Fix:" in msg and len(msg) < 1000, msg
    return msg


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def siblings(path: Path) -> set[str]:
    return {p.name for p in path.parent.iterdir()}


# ---- seen before opening: devices, directories, names too long ----------------------------------------------------
@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
@pytest.mark.parametrize("read_only", [True, False])
def test_a_device_is_refused_as_not_a_regular_file(device, read_only):
    if not Path(device).exists():
        pytest.skip(f"no {device} here")
    msg = open_refused(Path(device), read_only)
    assert f"store path {device} is a character device, not a regular file" in msg
    assert LOCK_FIX not in msg
    assert stat.S_ISCHR(os.stat(device).st_mode)
    assert not Path(device + ".runs").exists() and not Path(device + ".wal").exists()


@pytest.mark.parametrize("read_only", [True, False])
def test_a_directory_is_refused_with_a_file_inside_it_as_the_fix(tmp_path, read_only):
    d = tmp_path / "stores"
    d.mkdir()
    msg = open_refused(d, read_only)
    assert "is a directory" in msg and f"--store {d}/pc.duckdb" in msg and LOCK_FIX not in msg
    assert list(d.iterdir()) == [] and siblings(d) == {"stores"}


@pytest.mark.parametrize("length", [300, 252])
@pytest.mark.parametrize("read_only", [True, False])
def test_a_file_name_too_long_is_refused_naming_the_limit(tmp_path, length, read_only):
    path = tmp_path / ("s" * (length - len(".duckdb")) + ".duckdb")
    msg = open_refused(path, read_only)
    assert f"{length} bytes long" in msg and "limit of 255 bytes for one name" in msg
    assert ("Fix: choose a shorter name" if length > 255 else "Fix: choose a file name of at most 250 bytes") in msg
    assert LOCK_FIX not in msg and len(msg) < 700  # the path is shown shortened
    assert list(tmp_path.iterdir()) == []


def test_a_name_of_250_bytes_is_accepted(tmp_path):
    path = tmp_path / ("s" * 243 + ".duckdb")
    assert store_path_problem(path, writing=True) is None
    Store(path).init()
    assert path.is_file() and Store(path).schema_version() >= 1


def test_a_path_too_long_for_the_step_files_below_it_is_refused(tmp_path):
    path = tmp_path.joinpath(*["d" * 200] * 20, "pc.duckdb")
    problem = store_path_problem(path, writing=True)
    assert problem is not None and "limit of 4096 bytes for a path" in problem and "Fix:" in problem
    assert len(problem) < 700


def test_a_parent_that_is_a_file_is_refused_for_writing(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    msg = open_refused(f / "pc.duckdb", read_only=False)
    assert f"{f} is a file, not a directory" in msg and LOCK_FIX not in msg
    assert f.read_text() == "x"
    assert "no store at" in open_refused(f / "pc.duckdb", read_only=True)


def test_a_missing_store_is_fine_for_a_writer_and_no_store_for_a_reader(tmp_path):
    assert store_path_problem(tmp_path / "new" / "pc.duckdb", writing=True) is None
    assert store_path_problem(tmp_path / "pc.duckdb", writing=False) is None
    assert "no store at" in open_refused(tmp_path / "pc.duckdb", read_only=True)


def test_shown_path_keeps_short_paths_and_shortens_long_ones():
    assert shown_path("/a/b.duckdb") == "/a/b.duckdb"
    long = "/tmp/" + "s" * 300 + ".duckdb"
    shown = shown_path(long)
    assert shown.startswith("/tmp/sss") and shown.endswith(f".duckdb ({len(long)} characters)") and len(shown) < 200


# ---- told by DuckDB: not a database, damaged, full disk, no permission, a lock ----------------------------------
@pytest.mark.parametrize("read_only", [True, False])
def test_a_file_that_is_not_a_duckdb_database_is_left_alone(tmp_path, read_only):
    path = tmp_path / "notes.duckdb"
    path.write_text("my notes, not a database\n")
    before = digest(path)
    msg = open_refused(path, read_only)
    assert "is not a DuckDB database" in msg and "check the --store path" in msg and LOCK_FIX not in msg
    assert digest(path) == before and siblings(path) == {"notes.duckdb"}


@pytest.mark.parametrize("read_only", [True, False])
def test_a_damaged_catalog_is_reported_as_damaged(tmp_path, read_only):
    path = tmp_path / "pc.duckdb"
    Store(path).init()
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xff" * 4096
    path.write_bytes(bytes(data))
    before = digest(path)
    msg = open_refused(path, read_only)
    assert "damaged" in msg and "backup" in msg and LOCK_FIX not in msg
    assert digest(path) == before


@pytest.mark.parametrize("text,needles", [
    ('IO Error: Could not write file "X": No space left on device', ["disk holding it is full", "df -h"]),
    ('IO Error: Cannot open file "X": Permission denied', ["permission denied", "chmod"]),
    ('IO Error: Cannot open file "X": Read-only file system', ["permission denied", "writable disk"]),
    ('IO Error: Cannot open file "X": File name too long', ["too long", "shorter"]),
    ('IO Error: Could not read from file "X": Is a directory', ["is a directory", "/pc.duckdb"]),
    ("IO Error: Trying to read a database file with version number 99, but we can only read version 64. The "
     "database file was created with a newer version of DuckDB.", ["another DuckDB release", duckdb.__version__]),
    ("IO Error: something new", ["check that --store names", "dmesg"]),
])
def test_each_duckdb_failure_gets_its_own_fix(tmp_path, monkeypatch, text, needles):
    def fail(*args, **kwargs):
        raise duckdb.IOException(text)

    monkeypatch.setattr(duckdb, "connect", fail)
    msg = open_refused(tmp_path / "pc.duckdb", read_only=False)
    for n in needles:
        assert n in msg, (n, msg)
    assert LOCK_FIX not in msg


HOLDER = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def held_store(tmp_path):
    """A store whose catalog another process holds open for writing (as a `duckdb` shell would)."""
    path = tmp_path / "pc.duckdb"
    Store(path).init()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield path, proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.parametrize("read_only", [True, False])
def test_a_lock_held_by_another_process_keeps_close_the_other_process(held_store, read_only):
    path, pid = held_store
    before = digest(path)
    msg = open_refused(path, read_only)
    assert LOCK_FIX in msg and f"PID {pid}" in msg and "waited" in msg
    assert digest(path) == before
