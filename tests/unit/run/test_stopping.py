"""A full disk whatever the writer says (issue 31 point 5): safetensors' and pyarrow's wordings, an OSError without
an errno, and torch's zip writer, which says only ``unexpected pos`` (:func:`disk_full_error` asks the filesystem).
The rest of stopping.py is tested with the run lock (tests/unit/store/test_runlock.py)."""

from __future__ import annotations

import errno
import os
import subprocess
from types import SimpleNamespace

import pytest

from pc_pipelines.run.stopping import (
    StopRequested,
    disk_full_error,
    failed_write,
    free_bytes,
    io_error,
    run_outcome,
)
from pc_pipelines.store import StoreError

ZIP_WRITER = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"


class SafetensorError(Exception):
    pass


def test_library_wordings_of_a_full_disk_are_disk_full():
    st = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert run_outcome(st)[1].startswith("disk full: No space left on device (SafetensorError: Error while")
    no_errno = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert no_errno.errno is None and io_error(no_errno).errno == errno.ENOSPC
    assert run_outcome(OSError(errno.EIO, "Input/output error"))[1].startswith("I/O error")


def statvfs(free: int):
    return lambda path: SimpleNamespace(f_bavail=free // 4096, f_frsize=4096)


def test_an_error_on_a_disk_with_no_room_left_is_a_full_disk(tmp_path, monkeypatch):
    exc = RuntimeError(ZIP_WRITER)
    assert run_outcome(exc)[1] == f"RuntimeError: {ZIP_WRITER}"  # on its own: no disk full to be read
    monkeypatch.setattr(os, "statvfs", statvfs(8192))
    full = disk_full_error(exc, tmp_path / "ckpt" / "trainer.pt")  # not there (yet): its parent's disk
    assert full.errno == errno.ENOSPC and full.filename == str(tmp_path / "ckpt" / "trainer.pt")
    assert "8192 bytes left" in str(full) and "unexpected pos" in str(full)
    status, reason = run_outcome(full, where="runs/", then="resume it with --resume")
    assert status == "failed" and reason.startswith("disk full: No space left on device")
    assert "Fix: free space on the disk holding runs/" in reason


def test_only_an_unexplained_error_on_a_full_disk_is_called_one(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "statvfs", statvfs(64 << 20))
    assert disk_full_error(RuntimeError(ZIP_WRITER), tmp_path) is None  # room left: some other failure
    monkeypatch.setattr(os, "statvfs", statvfs(0))
    assert disk_full_error(OSError(errno.EIO, "Input/output error"), tmp_path) is None  # says what it is itself
    assert disk_full_error(KeyboardInterrupt(), tmp_path) is None
    assert disk_full_error(StopRequested(15), tmp_path) is None
    assert disk_full_error(RuntimeError(ZIP_WRITER), tmp_path) is not None


def test_free_bytes_of_a_real_full_filesystem(tmp_path):
    """A real tmpfs filled to the last block (root only: mounting needs it)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True,
                      check=False).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        assert free_bytes(mnt) == 256 << 10
        with pytest.raises(OSError), open(mnt / "fill", "wb") as f:
            f.write(b"\0" * (512 << 10))
        assert free_bytes(mnt / "not" / "there") == 0
        assert disk_full_error(RuntimeError(ZIP_WRITER), mnt / "x.pt").errno == errno.ENOSPC
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def inodes(files: int, free_files: int, free_bytes_: int):
    return lambda path: SimpleNamespace(f_bavail=free_bytes_ // 4096, f_frsize=4096, f_files=files,
                                        f_ffree=free_files, f_favail=free_files)


def test_a_full_disk_with_space_left_is_out_of_inodes(tmp_path, monkeypatch):
    """ENOSPC on a filesystem whose inodes are used up while `df -h` shows room: the reason says inodes, names the
    mount, and the fix does not say "free space"; with the inodes there (or the space short too) it stays the
    space reason."""
    err = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "step-00000003"))
    monkeypatch.setattr(os, "statvfs", inodes(300, 2, 60 << 20))  # the failed write gave two back
    reason = run_outcome(err, where=str(tmp_path), then="resume the run")[1]
    assert reason.startswith("disk full: no free inodes on /"), reason
    assert "298 of its 300 files and directories used" in reason and "`df -h` shows 60.0 MiB still free" in reason
    assert "Fix: delete files you no longer need on /" in reason and "more inodes, then resume the run." in reason
    assert "free space" not in reason
    for plenty in (inodes(300, 200, 60 << 20), inodes(300, 2, 4096), inodes(0, 0, 60 << 20)):
        monkeypatch.setattr(os, "statvfs", plenty)  # inodes left; no space left either; no inode count kept
        assert "Fix: free space on the disk holding" in run_outcome(err, where=str(tmp_path))[1]


def test_a_command_ends_in_one_line_on_a_wrapped_full_disk_not_on_other_errors():
    assert failed_write(SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert failed_write(OSError(errno.EIO, "Input/output error"))
    assert not failed_write(RuntimeError("shape mismatch"))
    assert not failed_write(SafetensorError("header too large"))
    # a store refusal about a full disk says so itself, in its own line
    assert not failed_write(StoreError("could not open the store s.duckdb for writing: the disk holding it is full "
                                       "(DuckDB: No space left on device). Fix: free space"))


def test_process_stop_takes_the_processs_flag_back_from_handlers_swapped_in_meanwhile():
    """``make demo`` holds stop_on_signals around execute_in_process, which swaps Dagster's own handlers in (they
    raise inside the step); an asset's process_stop puts the process's flag back, so a SIGTERM sets it."""
    import signal

    from pc_pipelines.run.stopping import active_stop_flag, process_stop, stop_on_signals

    with process_stop() as none:  # no process-level stop: nothing installed
        assert none is None and active_stop_flag() is None
    raised = []

    def dagsters(signum, frame):  # what Dagster's raise_interrupts_as installs
        raised.append(signum)

    with stop_on_signals() as flag:
        previous = signal.signal(signal.SIGTERM, dagsters)
        try:
            with process_stop() as stop:
                assert stop is flag and active_stop_flag() is flag
                os.kill(os.getpid(), signal.SIGTERM)
                assert flag.requested and flag.signum == signal.SIGTERM and raised == []
            assert signal.getsignal(signal.SIGTERM) is dagsters  # Dagster's handler is back after the block
        finally:
            signal.signal(signal.SIGTERM, previous)
    assert active_stop_flag() is None
    with pytest.raises(StopRequested):
        flag.check()
