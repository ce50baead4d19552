"""pc_pipelines.durable.write_user_output: a path the user names is written by what is there. A regular file or a
new path is written whole (temporary sibling + rename), a symlink through to its target, a character device or a
FIFO streamed into; a folder, a block device or a socket is refused with the fix. Nothing but a regular file is
ever unlinked or renamed over. Real special files made in tmp (mknod as root, as CI runs; /dev/null otherwise)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from pc_pipelines.durable import OutputRefused, write_user_output

DATA = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40


def char_device(tmp_path: Path) -> Path:
    """A private character device node of what /dev/null is (1, 3); /dev/null itself where mknod is not allowed."""
    node = tmp_path / "null-node"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        return Path("/dev/null")
    return node


def block_device(tmp_path: Path) -> Path:
    """A private block device node (never opened: the rule refuses it on its type); a system one without mknod."""
    node = tmp_path / "disk"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 250))
    except PermissionError:
        found = [p for p in sorted(Path("/dev").iterdir()) if stat.S_ISBLK(os.lstat(p).st_mode)]
        assert found, "no block device to test with: run as root (CI does) or where /dev holds one"
        return found[0]
    return node


def identity(path: Path) -> tuple:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_rdev, st.st_ino


def no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name]


def test_a_new_path_and_a_regular_file_are_written_whole_keeping_the_files_mode(tmp_path):
    out = tmp_path / "new.png"
    assert write_user_output(out, DATA) == "created"
    assert out.read_bytes() == DATA
    out.write_bytes(b"old")
    os.chmod(out, 0o600)
    assert write_user_output(out, DATA[:100]) == "replaced"
    assert out.read_bytes() == DATA[:100] and stat.S_IMODE(os.stat(out).st_mode) == 0o600
    no_temporaries(tmp_path)


def test_a_symlink_to_a_file_writes_the_target_and_stays_a_link(tmp_path):
    target = tmp_path / "real" / "plot.png"
    target.parent.mkdir()
    target.write_bytes(b"old")
    link = tmp_path / "link.png"
    link.symlink_to(Path("real") / "plot.png")  # relative, as users make them
    assert write_user_output(link, DATA) == "replaced"
    assert link.is_symlink() and os.readlink(link) == "real/plot.png"
    assert target.read_bytes() == DATA
    dangling = tmp_path / "dangling.png"
    dangling.symlink_to(tmp_path / "real" / "later.png")
    assert write_user_output(dangling, DATA) == "created"
    assert dangling.is_symlink() and (tmp_path / "real" / "later.png").read_bytes() == DATA
    no_temporaries(tmp_path)
    no_temporaries(target.parent)


def test_a_character_device_is_written_into_and_stays_the_same_node(tmp_path):
    node = char_device(tmp_path)
    before = identity(node)
    assert stat.S_ISCHR(before[0]) and before[1] == os.makedev(1, 3)
    assert write_user_output(node, DATA) == "streamed"
    assert identity(node) == before  # not replaced by a file
    if node.parent == tmp_path:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["null-node"]
    link = tmp_path / "to-null"
    link.symlink_to(node)
    assert write_user_output(link, DATA) == "streamed"
    assert link.is_symlink() and identity(node) == before


def test_a_fifo_is_written_into_and_read_by_its_reader(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read():
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert write_user_output(fifo, DATA) == "streamed"
    reader.join(timeout=60)
    assert not reader.is_alive() and got == [DATA]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_link_to_stdout_writes_the_bytes_to_stdout_and_stays_a_link(tmp_path):
    link = tmp_path / "stdout.png"
    link.symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    code = textwrap.dedent(f"""
        import sys
        from pc_pipelines.durable import write_user_output
        sys.stderr.write(write_user_output({str(link)!r}, bytes(range(256)) * 40))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout == bytes(range(256)) * 40 and res.stderr == b"streamed"
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout.png"]


def test_stdout_redirected_to_a_file_is_appended_to_never_replaced(tmp_path):
    log = tmp_path / "log"
    log.write_bytes(b"earlier lines\n")
    code = "from pc_pipelines.durable import write_user_output; print(write_user_output('/dev/stdout', b'png'), " \
           "file=__import__('sys').stderr)"
    with open(log, "ab") as out:  # a shell's >>
        ino = os.fstat(out.fileno()).st_ino
        res = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.PIPE, timeout=120,
                             check=False)
    assert res.returncode == 0 and res.stderr.strip() == b"streamed", res.stderr
    assert log.read_bytes() == b"earlier lines\npng" and os.stat(log).st_ino == ino


def test_stdout_on_a_socket_gets_the_bytes(tmp_path):
    """A service manager's stdout is often a socket: nothing can open() it by name, its descriptor takes writes."""
    code = "from pc_pipelines.durable import write_user_output; print(write_user_output('/dev/stdout', b'png' * 999), " \
           "file=__import__('sys').stderr)"
    here, there = socket.socketpair()
    with here, there:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=there, stderr=subprocess.PIPE)
        there.close()
        got = b""
        here.settimeout(120)
        while chunk := here.recv(1 << 16):
            got += chunk
        assert proc.wait(timeout=120) == 0
    assert proc.stderr.read().strip() == b"streamed" and got == b"png" * 999
    proc.stderr.close()


def test_a_refusal_survives_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(OutputRefused("/x/disk", "a block device", 1)))
    assert isinstance(err, OutputRefused) and str(err).startswith("/x/disk is a block device; it is not written over")


def test_a_folder_a_block_device_and_a_socket_are_refused_with_the_fix(tmp_path):
    folder = tmp_path / "folder.png"
    folder.mkdir()
    with pytest.raises(OutputRefused, match=r"folder\.png is a directory; it is not written over\. Fix: name a new "):
        write_user_output(folder, DATA)
    assert folder.is_dir() and not list(folder.iterdir())

    disk = block_device(tmp_path)
    before = identity(disk)
    with pytest.raises(OutputRefused, match=rf"{disk.name} is a block device .*Fix:"):
        write_user_output(disk, DATA)
    assert identity(disk) == before

    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OutputRefused, match=r"sock is a socket .*Fix:") as err:
            write_user_output(sock_path, DATA)
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    assert "\n" not in str(err.value) and isinstance(err.value, OSError)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"folder.png", "sock", *(
        ["disk"] if disk.parent == tmp_path else [])})
