"""Issue 40, "nothing the tool prints or writes can hurt": full disks and hand-altered catalog schemas, on real
`pilot-commit` processes, real tmpfs mounts (root only: mounting needs it) and real DuckDB.

* a filesystem out of inodes (a tmpfs mounted with a small ``nr_inodes``, its inodes taken by empty files, or by
  a run's own steps) while ``df -h`` shows it nearly empty: the refusal or the run's status says inodes, names the
  mount and the fix, not "free space";
* a writer starting on a full disk: ``Store.init`` cannot commit, and the command ends with the one-line disk-full
  refusal naming the catalog (was DuckDB's ``TransactionException`` traceback), the catalog's bytes unchanged;
* a disk that fills inside a checkpoint's safetensors write (the policy's weights): the run's status says disk full
  with the fix, and so does the command's one line (was a ``SafetensorError`` traceback);
* a catalog whose schema version was altered by hand ('abc', '8.0', 1, the meta row deleted, 6 while ``runs.seq``
  exists) or whose required columns were dropped (``runs.seq``, ``compacted_steps.returned``): every command
  (`runs`, `sql`, `check`, `simulate`) refuses with one line naming the catalog, the value found and the fix, exit
  2, and the catalog's sha256 is unchanged (version 6 with ``seq`` used to renumber ``seq`` silently).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import duckdb
import pytest
from fault_cli import SIM, cli, messages, no_traceback, run_row, simulate, steps_of

from pc_pipelines.store.schema import SCHEMA_VERSION

pytestmark = [pytest.mark.integration]



def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


EMPTY = hashlib.sha256(b"").hexdigest()


def tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` (relative name -> sha256)."""
    return {str(p.relative_to(path)): sha256(p) for p in sorted(path.rglob("*")) if p.is_file()}


# ---- full disks --------------------------------------------------------------------------------------------------
def mount_tmpfs(mnt: Path, options: str) -> Path:
    mnt.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True,
                      check=False).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); tests/unit/run/test_stopping.py covers the inode "
                    "reading in process")
    return mnt


def unmount(mnt: Path) -> None:
    if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=True)
    assert not os.path.ismount(mnt)


def use_every_inode(directory: Path) -> int:
    """Empty files in ``directory`` until the filesystem has no inode left; how many were made."""
    filler = directory / "filler"
    filler.mkdir()
    n = 0
    while True:
        try:
            (filler / f"f{n}").touch()
        except OSError:
            break
        n += 1
    st = os.statvfs(directory)
    assert st.f_favail == 0 and st.f_bavail * st.f_frsize > 32 << 20  # no inode, most of the space free
    return n


def test_no_free_inodes_on_a_new_store_says_inodes_not_free_space(tmp_path):
    """Expected (root): a 64 MiB tmpfs of 300 inodes, all taken by empty files, `df -h` 0% used: `simulate` refuses
    with one line "... no free inodes on <mount> ... Fix: delete files ... or ... more inodes", exit 2; nothing
    written."""
    mnt = mount_tmpfs(tmp_path / "small", "size=64m,nr_inodes=300")
    try:
        use_every_inode(mnt)
        before = tree(mnt)
        r = simulate(mnt / "s.duckdb", "r", 3)
        assert r.returncode == 2, r.stderr[-3000:]
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert "no free inodes" in line and str(mnt) in line and "`df -i" in line, line
        assert "Fix: delete files" in line and "more inodes" in line and "free space" not in line, line
        assert tree(mnt) == before
    finally:
        unmount(mnt)


def test_no_free_inodes_under_a_running_store_says_inodes(tmp_path):
    """Expected (root): a store with one run on a 64 MiB tmpfs of 400 inodes; its inodes then all taken: a second
    `simulate` refuses with the inode line naming the mount (was "disk full ... Fix: free space" or DuckDB's
    TransactionException traceback), exit 2; the catalog's bytes and the first run unchanged."""
    mnt = mount_tmpfs(tmp_path / "small", "size=64m,nr_inodes=400")
    try:
        store = mnt / "s.duckdb"
        simulate(store, "a", 3, check_rc=0)
        use_every_inode(mnt)
        before = tree(mnt)
        r = simulate(store, "b", 3)
        assert r.returncode == 2, r.stderr[-3000:]
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert f"the store {store}" in line and "no free inodes" in line and str(mnt) in line, line
        assert "Fix: delete files" in line and "free space" not in line, line
        assert tree(mnt) == before
        assert steps_of(store, "a") == [1, 2, 3] and run_row(store, "b") is None
    finally:
        unmount(mnt)


def test_inodes_running_out_mid_run_end_it_failed_with_the_inode_fix(tmp_path):
    """Expected (root): `simulate` of 1000 steps into a new store on a 64 MiB tmpfs of 300 inodes (each step is a
    directory of 5 files): the inodes run out after some 50 steps while `df -h` shows ~60 MiB free; exit 1, one line
    "run r failed: disk full: no free inodes on <mount> ... Fix: delete files ..." (was "disk full: No space left on
    device ... Fix: free space on the disk"); the status says the same; the steps written are whole, in order."""
    mnt = mount_tmpfs(tmp_path / "small", "size=64m,nr_inodes=300")
    try:
        store = mnt / "s.duckdb"
        r = simulate(store, "r", 1000, timeout=300)
        assert r.returncode == 1, r.stderr[-3000:]
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert line.startswith(f"pilot-commit simulate: run r failed: disk full: no free inodes on {mnt} ("), line
        assert "Fix: delete files you no longer need on" in line and "free space" not in line, line
        row = run_row(store, "r")
        assert row["status"] == "failed" and row["status_reason"].startswith(f"disk full: no free inodes on {mnt}")
        steps = steps_of(store, "r")
        assert 0 < len(steps) < 1000 and steps == list(range(1, len(steps) + 1))
        assert not [p for p in (mnt / "s.duckdb.runs" / "r").iterdir() if p.name.startswith(".tmp-")]
    finally:
        unmount(mnt)


def test_a_writer_starting_on_a_full_disk_gets_one_line(tmp_path):
    """Expected (root): a store on an 8 MiB tmpfs, the rest of its space then taken by one file: `simulate`'s
    Store.init cannot commit (was DuckDB's TransactionException traceback): one line "could not open the store
    <path> for writing: the disk holding it is full ... Fix: free space", exit 2; catalog bytes unchanged; with the
    space freed the same command records the run."""
    mnt = mount_tmpfs(tmp_path / "small", "size=8m")
    try:
        store = mnt / "s.duckdb"
        simulate(store, "a", 2, check_rc=0)
        with open(mnt / "ballast", "wb") as f:  # every block left
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        assert os.statvfs(mnt).f_bavail == 0
        before = tree(mnt)
        r = simulate(store, "b", 3)
        assert r.returncode == 2, r.stderr[-3000:]
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert line.startswith(f"pilot-commit: store error: could not open the store {store} for writing: "
                               "the disk holding it is full"), line
        assert "Fix: free space on that disk" in line and "inodes" not in line, line
        after = tree(mnt)
        # DuckDB leaves the write-ahead log it could not write, empty (its next open ignores it); nothing else
        assert after.pop("s.duckdb.wal", EMPTY) == EMPTY and after == before
        assert steps_of(store, "a") == [1, 2] and run_row(store, "b") is None
        (mnt / "ballast").unlink()  # the fix
        simulate(store, "b", 3, check_rc=0)
        assert steps_of(store, "a") == [1, 2] and steps_of(store, "b") == [1, 2, 3]
    finally:
        unmount(mnt)


GRPO = ["--method", "grpo", "--set", "allocator.train_batch=8", "--set", "allocator.n=8",
        "--set", "task.num_prompts=100", "--set", "training.ppo_minibatch=4", "--set", "training.eval_every=2", "--set", "training.eval_samples=1",
        "--set", "training.checkpoint_every=1"]


@pytest.mark.slow
def test_a_full_disk_inside_the_policys_safetensors_write_ends_in_one_line(tmp_path, base_policy):
    """Expected (root): ``out/t/checkpoints`` a 400 KiB tmpfs, too small for the policy's weights (~0.8 MB): the
    checkpoint after step 1 fails inside safetensors; the status is failed, "disk full ..." with the fix; the
    command ends with that one line, exit 1 (was a SafetensorError traceback)."""
    mnt = mount_tmpfs(tmp_path / "t" / "checkpoints", "size=400k")
    try:
        r = cli("train", "--steps", "3", "--out", str(tmp_path), "--run-name", "t", "--policy", str(base_policy),
                "--json", "--quiet", "--seed", "3", *GRPO)
        assert r.returncode == 1, r.stderr[-3000:]
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert line.startswith("pilot-commit train: run t failed: disk full: No space left on device"), line
        assert "Fix: free space on the disk holding" in line and "--resume" in line, line
        row = run_row(tmp_path / "pc.duckdb", "t")
        assert row["status"] == "failed" and row["status_reason"].startswith("disk full"), row["status_reason"]
        assert steps_of(tmp_path / "pc.duckdb", "t") == [1]
        assert not [p for p in mnt.iterdir() if p.name.startswith(".tmp-")]
    finally:
        unmount(mnt)


# ---- hand-altered schema versions ----------------------------------------------------------------------------------
SET_VERSION = "UPDATE meta SET value = '{}' WHERE key = 'schema_version'"
SCHEMA_CASES = {
    # case: (the SQL that alters the catalog, what the refusal quotes, the version its tables still match)
    "version 1 on a current catalog": ([SET_VERSION.format(1)], "does not match its version 1", SCHEMA_VERSION),
    "version 'abc'": ([SET_VERSION.format("abc")], "its schema version 'abc' is not a whole number", SCHEMA_VERSION),
    "version '8.0'": ([SET_VERSION.format("8.0")], "its schema version '8.0' is not a whole number", SCHEMA_VERSION),
    "meta row deleted": (["DELETE FROM meta"], "its meta table has no schema_version row", SCHEMA_VERSION),
    "runs.seq dropped": (["ALTER TABLE runs DROP COLUMN seq"], f"does not match its version {SCHEMA_VERSION}: it lacks runs.seq", None),
    "compacted_steps.returned dropped": (["ALTER TABLE compacted_steps DROP COLUMN returned"],
                                         f"does not match its version {SCHEMA_VERSION}: it lacks compacted_steps.returned", None),
    "version 6 while runs.seq exists": ([SET_VERSION.format(6)],
                                        "does not match its version 6: it has compacted_prompt_observations.band_lower "
                                        "(version 11), compacted_prompt_observations.band_upper (version 11), "
                                        "compacted_prompt_observations.evidence_n (version 10)", SCHEMA_VERSION),
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A store with two simulated runs (compacted at their end, so compacted_steps has rows), written once."""
    store = tmp_path_factory.mktemp("schema") / "s.duckdb"
    simulate(store, "a", 3, check_rc=0)
    simulate(store, "z", 2, check_rc=0)
    return store


@pytest.mark.parametrize("case", list(SCHEMA_CASES))
def test_a_hand_altered_schema_is_refused_by_every_command_and_left_unchanged(recorded, tmp_path, case):
    """Expected: `runs`, `sql`, `check` and `simulate` each refuse with one line naming the catalog, the value found
    and the fix, exit 2 (were tracebacks for a writer, silent reads for the readers; version 6 with seq renumbered
    seq); the catalog's sha256 and the step files are unchanged. Where only the version was altered, the fix the
    line gives (the SQL that sets it back) makes the store usable again."""
    import re
    import shutil

    statements, quoted, matches = SCHEMA_CASES[case]
    store = tmp_path / "s.duckdb"
    shutil.copy2(recorded, store)
    shutil.copytree(f"{recorded}.runs", f"{store}.runs")
    con = duckdb.connect(str(store))
    seq_before = con.execute("SELECT run_id, seq FROM runs ORDER BY run_id").fetchall() if "seq" not in case else None
    for sql in statements:
        con.execute(sql)
    con.close()
    catalog, steps = sha256(store), tree(Path(f"{store}.runs"))

    commands = {"runs": ["runs", "--store", str(store)],
                "sql": ["sql", "--store", str(store), "SELECT count(*) FROM steps"],
                "check": ["check", "--store", str(store)],
                "simulate": ["simulate", "--store", str(store), "--run-name", "b", "--steps", "2", "--json", *SIM]}
    for name, args in commands.items():
        r = cli(*args)
        assert r.returncode == 2, (name, r.returncode, r.stderr[-3000:])
        assert r.stdout == "", (name, r.stdout[-2000:])
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert line.startswith(f"pilot-commit: store error: the store {store} was not opened: "), (name, line)
        assert quoted in line, (name, line)
        assert "nothing was changed. Fix: restore the catalog from a backup" in line, (name, line)
        assert sha256(store) == catalog, name
        assert tree(Path(f"{store}.runs")) == steps, name

    fix = re.search(r"`duckdb \S+ \"(.+?)\"`", line)
    if matches is None:
        assert fix is None and "its tables match no version" in line, line
        return
    assert fix is not None and f"the version its tables match ({matches})" in line, line
    con = duckdb.connect(str(store))
    for sql in fix.group(1).split("; "):
        con.execute(sql)
    con.close()
    simulate(store, "b", 2, check_rc=0)
    con = duckdb.connect(str(store), read_only=True)
    seqs = dict(con.execute("SELECT run_id, seq FROM runs").fetchall())
    con.close()
    if seq_before is not None:  # the runs' order of registration kept, the new run after them
        assert [(r, seqs[r]) for r, _ in seq_before] == seq_before and seqs["b"] == max(s for _, s in seq_before) + 1
