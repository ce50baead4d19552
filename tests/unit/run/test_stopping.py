"""A full disk whatever the writer says (issue 31 point 5): safetensors' and pyarrow's wordings, an OSError without
an errno, and torch's zip writer, which says only ``unexpected pos`` (:func:`disk_full_error` asks the filesystem).
The rest of stopping.py is tested with the run lock (tests/unit/store/test_runlock.py)."""

from __future__ import annotations

import errno
import os
import subprocess
from types import SimpleNamespace

import pytest

from pc_pipelines.run.stopping import StopRequested, disk_full_error, free_bytes, io_error, run_outcome

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
