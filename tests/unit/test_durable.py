"""pc_pipelines.durable: a directory written whole or not at all, verified against its manifest, set aside when damaged.

The rule the checkpoints, the step directories and the warm starts share (their own formats: tests/unit/run/,
tests/unit/store/test_store_steplog.py, tests/integration/training/test_base_policy.py)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pc_pipelines import durable
from pc_pipelines.durable import Entry, JsonManifest, Manifest, Sha256Sums

FMT = JsonManifest("manifest.json", order=("format", "files"))
FILES = {"a.bin": b"alpha" * 100, "b.txt": b"bravo\n", "sub/c.json": b'{"c": 3}'}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fill_with(files: dict[str, bytes], fields: dict | None = None):
    def fill(stage: durable.Staging) -> dict | None:
        for rel, data in files.items():
            (stage.path / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage.path / rel).write_bytes(data)
        return fields
    return fill


@pytest.fixture
def written(tmp_path) -> Path:
    return durable.write_dir(tmp_path / "d", fill_with(FILES, {"format": 7, "owner": "me"}), FMT)


def test_write_dir_lists_every_file_and_the_fields_and_leaves_nothing_else(tmp_path, written):
    assert written == tmp_path / "d"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no .tmp- / .old- leftovers
    doc = json.loads((written / "manifest.json").read_text())
    assert list(doc) == ["format", "files", "owner"]
    assert doc == {"format": 7, "owner": "me",
                   "files": {rel: {"size": len(data), "sha256": sha(data)} for rel, data in FILES.items()}}
    assert durable.verify_dir(written, FMT) is None
    assert durable.verify_dir(written, FMT, checksums=False) is None


def test_the_formats_write_what_their_callers_always_wrote():
    m = Manifest({"x/y.bin": Entry(3, "ab" * 32), "a": Entry(0, "cd" * 32)}, {"step": 2, "format": 2})
    assert FMT.dump(m) == json.dumps({"format": 2, "files": {"x/y.bin": {"size": 3, "sha256": "ab" * 32},
                                                             "a": {"size": 0, "sha256": "cd" * 32}},
                                      "step": 2}, indent=1).encode()
    assert JsonManifest("M", sort_keys=True).dump(m) == json.dumps(
        {"step": 2, "format": 2, "files": {"x/y.bin": {"size": 3, "sha256": "ab" * 32},
                                           "a": {"size": 0, "sha256": "cd" * 32}}}, sort_keys=True, indent=1).encode()
    sums = Sha256Sums().dump(m)
    assert sums == f"{'ab' * 32}  x/y.bin\n{'cd' * 32}  a\n".encode()
    assert Sha256Sums().parse(sums) == Manifest({"x/y.bin": Entry(None, "ab" * 32), "a": Entry(None, "cd" * 32)})
    assert FMT.parse(FMT.dump(m)) == m


def test_staging_write_fsyncs_and_hashes_from_memory(tmp_path):
    stage = durable.Staging(tmp_path / "d")
    assert stage.path.parent == tmp_path and stage.path.name.startswith(".tmp-d-")
    stage.write("x.bin", b"xyz")
    (stage.path / "y.bin").write_bytes(b"yy")
    manifest = stage.seal(FMT, {"format": 1})
    assert manifest.files == {"x.bin": Entry(3, sha(b"xyz")), "y.bin": Entry(2, sha(b"yy"))}
    assert stage.publish() == tmp_path / "d"
    assert durable.verify_dir(tmp_path / "d", FMT) is None


def test_a_truncated_file(written):
    (written / "a.bin").write_bytes(b"alpha")
    assert durable.verify_dir(written, FMT) == "a.bin is 5 bytes, the manifest says 500 (truncated or replaced)"
    assert durable.verify_dir(written, FMT, checksums=False) == durable.verify_dir(written, FMT)


def test_flipped_bytes(written):
    data = bytearray(FILES["sub/c.json"])
    data[2] ^= 0x01
    (written / "sub/c.json").write_bytes(bytes(data))
    assert durable.verify_dir(written, FMT) == (
        f"sub/c.json has sha256 {sha(bytes(data))[:12]}..., the manifest says {sha(FILES['sub/c.json'])[:12]}... "
        "(bytes changed)")
    assert durable.verify_dir(written, FMT, checksums=False) is None  # sizes alone do not see flipped bytes


def test_a_missing_file(written):
    (written / "b.txt").unlink()
    assert durable.verify_dir(written, FMT) == "b.txt is missing"
    (written / "b.txt").mkdir()  # not a file either
    assert durable.verify_dir(written, FMT) == "b.txt is missing"


def test_a_missing_manifest(written):
    (written / "manifest.json").unlink()
    assert durable.verify_dir(written, FMT) == "manifest.json is missing"
    assert durable.verify_dir(written, FMT, without_manifest=lambda: "old layout, checked otherwise") == (
        "old layout, checked otherwise")
    assert durable.verify_dir(written, FMT, without_manifest=lambda: None) is None


@pytest.mark.parametrize("raw, detail", [
    (b"{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b"[]", "no files object"),
    (b'{"files": {"a.bin": {"size": "500", "sha256": "00"}}}', "the entry of 'a.bin' is not {size, sha256}"),
    (b'{"files": {"a.bin": {"size": 500}}}', "the entry of 'a.bin' is not {size, sha256}"),
    (b'{"files": {"../a.bin": {"size": 1, "sha256": "00"}}}', "'../a.bin' is not a file name inside the directory"),
    (b'{"files": {"/etc/passwd": {"size": 1, "sha256": "00"}}}',
     "'/etc/passwd' is not a file name inside the directory"),
    (b'{"files": \x80}', "'utf-8' codec can't decode byte 0x80 in position 10: invalid start byte"),
])
def test_a_damaged_manifest(written, raw, detail):
    (written / "manifest.json").write_bytes(raw)
    assert durable.verify_dir(written, FMT) == f"manifest.json is damaged ({detail})"


def test_a_damaged_sha256sums(tmp_path):
    d = durable.write_dir(tmp_path / "w", fill_with({"x": b"1"}), Sha256Sums())
    assert (d / "SHA256SUMS").read_text() == f"{sha(b'1')}  x\n"
    assert durable.verify_dir(d, Sha256Sums()) is None
    (d / "x").write_bytes(b"2")  # no sizes in this format: the sha256 says it
    assert durable.verify_dir(d, Sha256Sums()) == f"x has sha256 {sha(b'2')[:12]}..., the manifest says " \
                                                  f"{sha(b'1')[:12]}... (bytes changed)"
    (d / "SHA256SUMS").write_text("no two spaces here\n")
    assert durable.verify_dir(d, Sha256Sums()) == "SHA256SUMS is damaged (line 1 is not '<sha256>  <name>')"


def test_the_callers_checks_in_order(written):
    seen: list[str] = []

    def check_file(name: str, data: bytes) -> str | None:
        seen.append(name)
        assert data == FILES[name]
        return "c.json holds another step" if name == "sub/c.json" else None

    assert durable.verify_dir(written, FMT, expect=("b.txt",), check_file=check_file) == "c.json holds another step"
    assert seen == ["b.txt", "a.bin", "sub/c.json"]  # the expected names first
    assert durable.verify_dir(written, FMT, check_file=check_file, checksums=False) is None  # checksums only
    assert durable.verify_dir(written, FMT, expect=("b.txt", "z", "y")) == "manifest.json lists no z, y"
    assert durable.verify_dir(written, FMT, check=lambda m: f"owner {m.fields['owner']}") == "owner me"
    (written / "a.bin").unlink()  # the manifest's own checks come before the files'
    assert durable.verify_dir(written, FMT, check=lambda m: "fields first") == "fields first"
    assert durable.verify_dir(written, FMT, messages={"missing": "{name} is gone from {manifest}"}) == (
        "a.bin is gone from manifest.json")


def test_quarantine_names(tmp_path):
    names = []
    for _ in range(3):
        (tmp_path / "step-1").mkdir()
        names.append(durable.quarantine(tmp_path / "step-1").name)
    assert names == ["damaged-step-1", "damaged-step-1-1", "damaged-step-1-2"]
    (tmp_path / "step-2").mkdir()
    dest = durable.quarantine(tmp_path / "step-2", tmp_path / ".quarantine" / "step-2.when")
    assert dest == tmp_path / ".quarantine" / "step-2.when" and dest.is_dir()
    (tmp_path / "step-3").mkdir()
    (tmp_path / "damaged-step-3").mkdir()
    (tmp_path / "damaged-step-3-1").mkdir()
    with pytest.raises(FileExistsError, match="damaged-step-3 and 1 more names are taken"):
        durable.quarantine(tmp_path / "step-3", tries=2)
    assert (tmp_path / "step-3").is_dir()


def test_a_new_copy_replaces_the_old_one(tmp_path, written):
    durable.write_dir(written, fill_with({"new.bin": b"new"}), FMT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert sorted(p.name for p in written.iterdir()) == ["manifest.json", "new.bin"]
    assert durable.verify_dir(written, FMT) is None
    (tmp_path / ".d.old-7").mkdir()  # an earlier replacement's leftover under the aside name asked for
    (tmp_path / ".d.old-7" / "stale").write_bytes(b"s")
    durable.write_dir(written, fill_with({"newer.bin": b"newer"}), FMT, tmp=tmp_path / ".d.tmp-7",
                      aside=tmp_path / ".d.old-7")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert sorted(p.name for p in written.iterdir()) == ["manifest.json", "newer.bin"]


def test_a_failed_fill_leaves_the_old_copy_and_no_temp_dir(tmp_path, written):
    def fill(stage):
        (stage.path / "half").write_bytes(b"h")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        durable.write_dir(written, fill, FMT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert durable.verify_dir(written, FMT) is None


def test_a_crash_between_the_two_renames_leaves_the_directory_absent_never_mixed(tmp_path, written, monkeypatch):
    real = os.rename
    calls = []

    def rename(a, b):
        calls.append((Path(a).name, Path(b).name))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the renames")
        return real(a, b)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        durable.write_dir(written, fill_with({"new.bin": b"new"}), FMT, aside=tmp_path / ".old-d-x")
    monkeypatch.setattr(os, "rename", real)
    assert calls[0] == ("d", ".old-d-x") and calls[1][0].startswith(".tmp-d-")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 2 and left[0] == ".old-d-x" and left[1].startswith(".tmp-d-")  # neither is "d"
    assert durable.verify_dir(tmp_path / ".old-d-x", FMT) is None  # the old copy whole, for a sweep or a look


def test_durability_order(tmp_path, monkeypatch):
    """Each file fsynced (and the subdirectory holding one), then the manifest, then the directory, the rename,
    then the parent."""
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append("fsync:" + Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        return real_fsync(fd)

    def rename(a, b):
        events.append(f"rename:{Path(a).name[:6]}->{Path(b).name}")
        return real_rename(a, b)

    (tmp_path / "parent").mkdir()
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    durable.write_dir(tmp_path / "parent" / "d", fill_with(FILES), FMT)
    tmp = next(e for e in events if e.startswith("fsync:.tmp-d-"))
    assert events == ["fsync:a.bin", "fsync:b.txt", "fsync:c.json", "fsync:sub", "fsync:manifest.json", tmp,
                      "rename:.tmp-d->d", "fsync:parent"]


def test_sealing_in_place_replaces_the_manifest_atomically(written):
    (written / "b.txt").write_bytes(b"changed by hand")
    assert durable.verify_dir(written, FMT).startswith("b.txt is 15 bytes")
    manifest = durable.seal(written, FMT, {"format": 8})
    assert manifest.files["b.txt"] == Entry(15, sha(b"changed by hand")) and manifest.fields == {"format": 8}
    assert sorted(p.name for p in written.iterdir()) == ["a.bin", "b.txt", "manifest.json", "sub"]  # no .tmp
    assert durable.verify_dir(written, FMT) is None


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pc_pipelines import durable

    def fill(stage):
        (stage.path / "a.bin").write_bytes(b"new" * 1000)
        print("ready", flush=True)
        time.sleep(60)

    durable.write_dir(Path(sys.argv[1]), fill, durable.JsonManifest("manifest.json"))
    """
)


def test_a_killed_write_leaves_only_a_temp_dir_and_the_old_copy_intact(tmp_path, written):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(written)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 2 and left[0].startswith(".tmp-d-") and left[1] == "d", left
    assert durable.verify_dir(tmp_path / left[0], FMT) == "manifest.json is missing"  # never looks finished
    assert durable.verify_dir(written, FMT) is None
    assert (written / "a.bin").read_bytes() == FILES["a.bin"]
