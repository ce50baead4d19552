"""Faults in what the tool writes (issue 40): `pilot-commit timeline --out` onto what is not a plain file, and the
conversion of pickled payloads failing half-way.

`--out` (pc_pipelines.durable.write_user_output): a character device node (what /dev/null is) stays that node, a
symlink to /proc/self/fd/1 (what /dev/stdout is) stays a link and the PNG arrives on stdout, a FIFO stays a FIFO
and its reader gets the PNG, a symlink to a file stays a link and its target gets the PNG; a block device and a
folder are refused with the fix. Before, each was replaced by a PNG file (as root, `--out /dev/null` replaced the
system's /dev/null). Each case runs the real CLI on a store recorded by `pilot-commit simulate` and checks the
store's bytes and the folder around the output unchanged.

`convert_pickled_payloads` on a value the new format cannot hold (a set in meta_info) or an index that lists a start
twice: before, it deleted every `<start>.pkl` and then failed, both requests lost and the index still saying
"pickled"; now it refuses in one line naming the file / value and the fix, every byte and the index unchanged
(sha256), and runs again once the fault is fixed.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import threading
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from fault_cli import tree_digest
from pilot_cli import MODULE, run_cli

SMALL = ["--prompts", "300", "--steps", "6", "--train-batch", "8", "--n", "8"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


cli = partial(run_cli, exe=MODULE, text=False, extra_env={"PYTHONWARNINGS": "ignore"})


def whole_png(blob: bytes) -> tuple[int, int]:
    """(width, height) of a PNG that is whole: every chunk's CRC right, IEND last."""
    assert blob[:8] == PNG_MAGIC, blob[:16]
    pos, kinds = 8, []
    while pos < len(blob):
        (n,) = struct.unpack(">I", blob[pos:pos + 4])
        kind, body = blob[pos + 4:pos + 8], blob[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", blob[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + body), kind
        kinds.append(kind)
        pos += 12 + n
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and pos == len(blob)
    return struct.unpack(">II", blob[16:24])


def identity(path: Path) -> tuple:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_rdev, st.st_ino


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("outputs-store")
    for method in ("pc", "grpo"):  # both: `report --plots` draws a family with a GRPO and a PC run
        res = cli("simulate", "--store", str(folder / "runs.duckdb"), "--method", method, "--run-name",
                  f"{method}-run", *SMALL)
        assert res.returncode == 0, res.stderr[-3000:]
    return folder


def timeline(store: Path, out: str | Path, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return cli("timeline", "--store", str(store / "runs.duckdb"), "--run", "pc-run", "--out", str(out), stdout=stdout)


@pytest.fixture
def untouched(store):
    """The store's files, byte for byte, the same after the case."""
    before = tree_digest(store, symlinks=False)
    yield
    assert tree_digest(store, symlinks=False) == before


def test_timeline_onto_a_character_device_writes_into_it_and_keeps_the_node(store, untouched, tmp_path):
    node = tmp_path / "null-node"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a private /dev/null
    except PermissionError:  # not root: /dev/null itself, checked unchanged (never replaced)
        node = Path("/dev/null")
    before = identity(node)
    res = timeline(store, node)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert identity(node) == before and stat.S_ISCHR(before[0]) and before[1] == os.makedev(1, 3)
    assert res.stdout.decode().startswith(f"wrote {node}: run pc-run (PC)") and b"Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == (["null-node"] if node.parent == tmp_path else [])


def test_timeline_onto_a_link_to_stdout_sends_the_png_to_stdout_and_keeps_the_link(store, untouched, tmp_path):
    link = tmp_path / "stdout.png"
    link.symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    res = timeline(store, link)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    width, height = whole_png(res.stdout)  # stdout is the PNG, nothing else
    assert width > 500 and height > 300
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert res.stderr.decode().startswith(f"wrote {link}: run pc-run (PC)")  # what was written: on stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout.png"]


def test_timeline_onto_a_fifo_streams_the_png_to_its_reader_and_keeps_the_fifo(store, untouched, tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read():
        with open(fifo, "rb") as f:  # opens when the writer does
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    res = timeline(store, fifo)
    reader.join(timeout=120)
    if reader.is_alive():  # the writer never opened it: unblock the reader so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert len(got) == 1 and whole_png(got[0])[0] > 500
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.png"]


def test_timeline_onto_a_link_to_a_file_writes_the_file_and_keeps_the_link(store, untouched, tmp_path):
    target = tmp_path / "figs" / "pc.png"
    target.parent.mkdir()
    target.write_bytes(b"an older plot")
    link = tmp_path / "latest.png"
    link.symlink_to("figs/pc.png")
    res = timeline(store, link)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert link.is_symlink() and os.readlink(link) == "figs/pc.png"
    whole_png(target.read_bytes())
    assert res.stdout.decode().startswith(f"wrote {target.resolve()}: ")
    assert sorted(p.name for p in target.parent.iterdir()) == ["pc.png"]  # no temporary left


def test_timeline_onto_a_block_device_or_a_folder_is_refused_with_the_fix(store, untouched, tmp_path):
    disk = tmp_path / "disk"
    try:
        os.mknod(disk, stat.S_IFBLK | 0o600, os.makedev(7, 250))  # never opened: refused on its type
    except PermissionError:
        disk = next(p for p in sorted(Path("/dev").iterdir()) if stat.S_ISBLK(os.lstat(p).st_mode))
    before = identity(disk)
    res = timeline(store, disk)
    err = res.stderr.decode()
    assert res.returncode == 2 and res.stdout == b"" and "Traceback" not in err
    assert err == (f"pilot-commit timeline: --out {disk} is a block device (a disk: a file's bytes written onto it "
                   "destroy what it holds); it is not written over. Fix: name a new file or a regular file (a symlink "
                   "to one is written through), or a character device or FIFO to stream into.\n")
    assert identity(disk) == before
    folder = tmp_path / "folder.png"
    folder.mkdir()
    res = timeline(store, folder)
    err = res.stderr.decode()
    assert res.returncode == 2 and f"--out {folder} is a directory; it is not written over. Fix:" in err
    assert len(err.splitlines()) == 1 and folder.is_dir() and not list(folder.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"folder.png", *(
        ["disk"] if disk.parent == tmp_path else [])})


def test_report_plots_into_a_file_is_refused_and_a_device_among_the_plots_is_kept(store, untouched, tmp_path):
    taken = tmp_path / "plots"
    taken.write_bytes(b"a file the user keeps")
    res = cli("report", "--store", str(store / "runs.duckdb"), "--plots", str(taken))
    err = res.stderr.decode()
    assert res.returncode == 2 and "Traceback" not in err, err[-2000:]
    assert err.splitlines()[-1] == (f"pilot-commit report: --plots {taken} is not a folder (a file is there or above "
                                    "it); nothing was written. Fix: give --plots a folder, new or existing.")
    assert taken.read_bytes() == b"a file the user keeps"

    plots = tmp_path / "figs"
    plots.mkdir()
    node = plots / "accuracy_vs_rollouts.png"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # that plot, thrown away
    except PermissionError:
        node.symlink_to("/dev/null")
    before = identity(node)
    res = cli("report", "--store", str(store / "runs.duckdb"), "--plots", str(plots))
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert identity(node) == before
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        ["accuracy_vs_rollouts.png", "accuracy_vs_steps.png", "reward_std_per_step.png",
         "informative_share_per_step.png"])
    for p in plots.iterdir():
        if p != node:
            whole_png(p.read_bytes())


# ---- a failed write exits 1, a user error 2 (cli/exits.py; issue 56 point 4) ---------------------------------------
def read_only_folder(tmp_path: Path) -> Path:
    """A folder no file can be created in: as root (whom permissions do not stop) /sys, else a folder mode 0555."""
    if os.geteuid() == 0:
        return Path("/sys")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    return ro


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (every write: ENOSPC)")
@pytest.mark.parametrize("command", ["timeline", "compare", "report"])
def test_a_store_command_whose_output_hits_a_full_disk_exits_1(store, untouched, tmp_path, command):
    """/dev/full: a real device whose every write fails with ENOSPC (no space left on device). Before, exit 2 (the
    table of cli/exits.py says 1 for a failed write)."""
    db = str(store / "runs.duckdb")
    if command == "report":  # the first plot streamed into /dev/full through a link
        plots = tmp_path / "figs"
        plots.mkdir()
        (plots / "accuracy_vs_rollouts.png").symlink_to("/dev/full")
        args, what = ("report", "--store", db, "--plots", str(plots)), f"could not write the plots into {plots}"
    else:
        args = (command, "--store", db, "--out", "/dev/full", *(["--run", "pc-run"] if command == "timeline" else []))
        what = "could not write /dev/full"
    res = cli(*args)
    err = res.stderr.decode()
    assert res.returncode == 1, (res.returncode, err[-2000:])
    assert f"pilot-commit {command}: {what}: No space left on device. Fix:" in err and "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command", ["timeline", "compare", "report"])
def test_a_store_command_writing_into_a_read_only_folder_exits_1(store, untouched, tmp_path, command):
    ro = read_only_folder(tmp_path)
    db = str(store / "runs.duckdb")
    if command == "report":
        args, what = ("report", "--store", db, "--plots", str(ro)), f"could not write the plots into {ro}"
    else:
        out = ro / "x.png"
        args = (command, "--store", db, "--out", str(out), *(["--run", "pc-run"] if command == "timeline" else []))
        what = f"could not write {out}"
    try:
        res = cli(*args)
    finally:
        if ro != Path("/sys"):
            ro.chmod(0o755)
    err = res.stderr.decode()
    assert res.returncode == 1, (res.returncode, err[-2000:])
    assert f"pilot-commit {command}: {what}: Permission denied. Fix:" in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("**/*.png"))


@pytest.mark.parametrize(("args", "words"), [
    (("compare", "--runs", "no-such-run", "--out", "{tmp}/c.png"), "pilot-commit compare: no run 'no-such-run'"),
    (("timeline", "--run", "no-such-run", "--out", "{tmp}/t.png"), "pilot-commit timeline: no run 'no-such-run'"),
    (("compare", "--out", "{tmp}"), "pilot-commit compare: --out {tmp} is a directory"),
    (("report", "--family", "nope"), "pilot-commit report: no family 'nope'"),
])
def test_a_store_command_given_a_wrong_name_or_path_exits_2(store, untouched, tmp_path, args, words):
    res = cli(args[0], "--store", str(store / "runs.duckdb"), *(a.replace("{tmp}", str(tmp_path)) for a in args[1:]))
    err = res.stderr.decode()
    assert res.returncode == 2, (res.returncode, err[-2000:])
    assert err.startswith(words.replace("{tmp}", str(tmp_path))) and "Fix:" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


# ---- convert_pickled_payloads --------------------------------------------------------------------------------------
def pickled_payloads(folder: Path, starts: list[int], meta_info: dict, index_starts: list[int] | None = None) -> Path:
    """A payload directory of the old format, as verl's ``DataProto.save_to_disk`` wrote it: ``<start>.pkl`` per
    request and ``index.json`` without a format."""
    from verl import DataProto

    folder.mkdir()
    for start in starts:
        part = DataProto.from_dict(
            tensors={"responses": torch.arange(start, start + 12).reshape(3, 4),
                     "attention_mask": torch.ones(3, 4, dtype=torch.int64)},
            non_tensors={"prompt_id": np.array([start, start, start + 1]),
                         "extras": np.array([{"acc": 1}, {"acc": 0}, {"acc": 1}], dtype=object)},
            meta_info=dict(meta_info))
        part.save_to_disk(folder / f"{start}.pkl")
    (folder / "index.json").write_text(json.dumps({"starts": index_starts if index_starts is not None else starts}))
    return folder


def refused_whole(folder: Path, *needles: str) -> None:
    from pc_pipelines.training.verl_batch import BatchError, convert_pickled_payloads

    before = tree_digest(folder, symlinks=False)
    with pytest.raises(BatchError) as err:
        convert_pickled_payloads(folder)
    text = str(err.value)
    assert "\n" not in text and "Fix:" in text and "nothing was changed" in text, text
    for n in needles:
        assert n in text, (n, text)
    assert tree_digest(folder, symlinks=False) == before  # every .pkl and the index, byte for byte; no new file, no staging left
    assert sorted(p.name for p in folder.iterdir()) == sorted(before)


def converted(folder: Path, starts: list[int]) -> None:
    from pc_pipelines.training.verl_batch import PayloadStore, convert_pickled_payloads

    assert convert_pickled_payloads(folder) == len(starts)
    back = PayloadStore.load(folder)
    assert back._starts == sorted(starts) and len(back) == 3 * len(starts)
    for s in starts:
        assert back._parts[s].batch["responses"].tolist() == torch.arange(s, s + 12).reshape(3, 4).tolist()
    assert not list(folder.glob("*.pkl")) and not list(folder.glob(".tmp-*"))


def test_convert_refuses_a_set_in_meta_info_and_loses_nothing(tmp_path):
    from verl import DataProto

    folder = pickled_payloads(tmp_path / "payloads", [0, 3], {"tags": {"a", "b"}, "global_steps": 4})
    refused_whole(folder, f"{folder}", "0.pkl's meta_info['tags'] holds a set", "make that value a string")
    for start in (0, 3):
        part = DataProto.load_from_disk(folder / f"{start}.pkl")
        part.meta_info["tags"] = sorted(part.meta_info["tags"])
        part.save_to_disk(folder / f"{start}.pkl")
    converted(folder, [0, 3])


def test_convert_refuses_an_index_listing_a_start_twice_and_loses_nothing(tmp_path):
    folder = pickled_payloads(tmp_path / "payloads", [0, 3], {"global_steps": 4}, index_starts=[0, 3, 3])
    refused_whole(folder, "index.json lists request start(s) 3 more than once", "list each start once")
    (folder / "index.json").write_text(json.dumps({"starts": [0, 3]}))
    converted(folder, [0, 3])


def test_convert_refuses_both_faults_and_runs_once_both_are_fixed(tmp_path):
    from verl import DataProto

    folder = pickled_payloads(tmp_path / "payloads", [0, 5], {"seen": {7}}, index_starts=[5, 0, 5])
    refused_whole(folder, "start(s) 5 more than once")
    (folder / "index.json").write_text(json.dumps({"starts": [5, 0]}))
    refused_whole(folder, "meta_info['seen'] holds a set ({7})")
    for start in (0, 5):
        part = DataProto.load_from_disk(folder / f"{start}.pkl")
        part.meta_info["seen"] = [7]
        part.save_to_disk(folder / f"{start}.pkl")
    converted(folder, [0, 5])


# ---- what the command reads is never its output (issue 54) ----------------------------------------------------------
def one_line_refusal(res: subprocess.CompletedProcess, *needles: str) -> str:
    err = res.stderr.decode()
    assert res.returncode == 2 and "Traceback" not in err, err[-3000:]
    assert len(err.splitlines()) == 1 and "it is not written over. Fix: name a new file outside what the command " \
        "reads" in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.mark.parametrize("command", ["timeline", "sim-fit", "plan", "compare"])
def test_an_output_onto_the_store_it_reads_is_refused_before_anything_is_written(store, untouched, command,
                                                                               tmp_path):
    """`timeline --out`, `sim-fit --out`, `plan --plot`, `compare --out` given the store's own catalog (one slip of
    the tab key): before, the catalog was replaced by a PNG / the fit's JSON, exit 0, every run gone. Now exit 2,
    one line naming the clash and the fix; the catalog and every step file byte for byte the same (``untouched``).
    Also through a symlink to the catalog and a hard link of it."""
    catalog = store / "runs.duckdb"
    link = tmp_path / "fit.out"
    link.symlink_to(catalog)
    hard = tmp_path / "hard.out"
    os.link(catalog, hard)
    try:
        for out in (catalog, link, hard):
            args = {"timeline": ["timeline", "--run", "pc-run", "--out"], "sim-fit": ["sim-fit", "--runs", "pc-run",
                                                                                     "--out"],
                    "plan": ["plan", "--runs", "pc-run", "--fit-steps", "5", "--horizon", "5", "--resamples", "0",
                             "--plot"], "compare": ["compare", "--out"]}[command]
            res = cli(args[0], "--store", str(catalog), *args[1:], str(out))
            one_line_refusal(res, f"{out} is the store's catalog {catalog.resolve()}, which this command reads")
            assert res.stdout == b""  # refused before the fit / the plot: nothing computed, nothing printed
        assert link.is_symlink() and os.readlink(link) == str(catalog)
    finally:
        hard.unlink()


def test_an_output_into_the_store_step_logs_is_refused(store, untouched, tmp_path):
    """A plot or a report folder inside ``<catalog>.runs/`` (where the step logs live): refused the same way;
    nothing is created there."""
    runs_root = store / "runs.duckdb.runs"
    before = sorted(p.relative_to(runs_root) for p in runs_root.rglob("*"))
    res = cli("timeline", "--store", str(store / "runs.duckdb"), "--run", "pc-run", "--out",
              str(runs_root / "pc-run" / "timeline.png"))
    one_line_refusal(res, f"inside the store's step logs {runs_root.resolve()}")
    res = cli("report", "--store", str(store / "runs.duckdb"), "--plots", str(runs_root / "plots"))
    one_line_refusal(res, f"--plots: {runs_root / 'plots'} is inside the store's step logs {runs_root.resolve()}")
    assert sorted(p.relative_to(runs_root) for p in runs_root.rglob("*")) == before


def test_a_report_asset_out_dir_inside_the_store_is_refused(store):
    """The report assets' ``out_dir`` (a Dagster run config) inside the store's step logs: the materialization
    fails with the clash and the fix, nothing written there (every step file byte for byte the same; the catalog
    is the resource's to open for writing, as any materialization does)."""
    from dagster import materialize

    from pc_pipelines_dagster.assets.reports import pass_rate_timeline, run_comparison
    from pc_pipelines_dagster.resources import StoreResource

    runs_root = store / "runs.duckdb.runs"
    before = tree_digest(runs_root)
    for asset in (pass_rate_timeline, run_comparison):
        res = materialize([asset], resources={"store": StoreResource(path=str(store / "runs.duckdb"))},
                          run_config={"ops": {asset.key.path[-1]: {"config": {"out_dir": str(runs_root / "pc-run")}}}},
                          raise_on_error=False)
        assert not res.success
        failure = next(e for e in res.all_events if e.is_step_failure).step_failure_data.error.message
        assert f"out_dir {runs_root / 'pc-run'} is inside the store's step logs {runs_root.resolve()}" in failure
        assert "Fix: name a new file outside" in failure
    assert tree_digest(runs_root) == before
