"""StepLogWriter at the file level: one directory per step, replaced atomically, leftovers swept.

No DuckDB catalog here (see tests/integration/store/ for the views over these files).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pc_pipelines.store import STEP_TABLES, StepLogWriter
from pc_pipelines.store import steplog as steplog_mod
from pc_pipelines.store.steplog import MANIFEST, empty_tables, quarantine_step_dir, step_dir_name, verify_step_dir


def tables(run_id: str, step: int, marker: int, n_obs: int) -> dict[str, pa.Table]:
    """Four step tables whose every row carries ``marker`` so a mix of two writes would show."""
    steps = pa.Table.from_pylist(
        [{"run_id": run_id, "step": step, "sampled_rollouts": marker, "trained_rollouts": marker // 2}],
        schema=STEP_TABLES["steps"],
    )
    obs = pa.Table.from_pylist(
        [
            {"run_id": run_id, "step": step, "prompt_id": i, "stage": "pilot", "n": marker, "n_correct": 1.0,
             "p_hat": 1.0 / marker, "decision": "kept", "evicted": False, "lag": 0}
            for i in range(n_obs)
        ],
        schema=STEP_TABLES["prompt_observations"],
    )
    buf = pa.Table.from_pylist(
        [{"run_id": run_id, "step": step, "entry_id": marker, "prompt_id": 1, "born": step}],
        schema=STEP_TABLES["buffer_state"],
    )
    ev = pa.Table.from_pylist(
        [{"run_id": run_id, "step": step, "prompt_id": 2, "effective_epoch": marker}], schema=STEP_TABLES["evictions"]
    )
    return {"steps": steps, "prompt_observations": obs, "buffer_state": buf, "evictions": ev}


def hidden(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith("."))


def test_step_dir_name_is_zero_padded_and_sorts():
    assert step_dir_name(123) == "step-00000123"
    assert sorted(step_dir_name(s) for s in (10, 9, 100)) == ["step-00000009", "step-00000010", "step-00000100"]


def test_write_step_writes_all_four_files_with_the_schema(tmp_path):
    w = StepLogWriter(tmp_path / "run")
    d = w.write_step(5, tables("run", 5, marker=10, n_obs=3))
    assert d == tmp_path / "run" / "step-00000005"
    assert sorted(p.name for p in d.iterdir()) == sorted([MANIFEST, *(f"{t}.parquet" for t in STEP_TABLES)])
    for name, schema in STEP_TABLES.items():
        t = pq.read_table(d / f"{name}.parquet")
        assert t.schema.equals(schema, check_metadata=False), name
    assert pq.read_table(d / "steps.parquet").to_pylist()[0]["sampled_rollouts"] == 10
    assert pq.read_table(d / "prompt_observations.parquet").num_rows == 3
    assert hidden(tmp_path / "run") == []


def test_replayed_step_replaces_the_old_files(tmp_path):
    w = StepLogWriter(tmp_path / "run")
    w.write_step(3, tables("run", 3, marker=10, n_obs=2))
    w.write_step(3, tables("run", 3, marker=20, n_obs=5))
    dirs = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert dirs == ["step-00000003"]  # one copy, no .tmp-/.old- leftovers
    d = tmp_path / "run" / "step-00000003"
    assert pq.read_table(d / "steps.parquet").column("sampled_rollouts").to_pylist() == [20]
    obs = pq.read_table(d / "prompt_observations.parquet")
    assert obs.num_rows == 5 and set(obs.column("n").to_pylist()) == {20}
    assert pq.read_table(d / "buffer_state.parquet").column("entry_id").to_pylist() == [20]
    assert pq.read_table(d / "evictions.parquet").column("effective_epoch").to_pylist() == [20]


def test_missing_table_is_refused_and_leaves_nothing(tmp_path):
    w = StepLogWriter(tmp_path / "run")
    t = tables("run", 1, marker=1, n_obs=1)
    del t["evictions"]
    with pytest.raises(ValueError, match="evictions"):
        w.write_step(1, t)
    assert list((tmp_path / "run").iterdir()) == []


def test_fresh_writer_sweeps_leftovers_of_killed_writes(tmp_path):
    run = tmp_path / "run"
    w = StepLogWriter(run)
    w.write_step(1, tables("run", 1, marker=1, n_obs=1))
    # What a killed write leaves: a half-written temp dir; an interrupted replacement: the old dir renamed aside.
    (run / ".tmp-step-00000002-deadbeef").mkdir()
    (run / ".tmp-step-00000002-deadbeef" / "steps.parquet").write_bytes(b"PAR1 truncated")
    (run / ".old-step-00000001-cafef00d").mkdir()
    StepLogWriter(run)
    assert sorted(p.name for p in run.iterdir()) == ["step-00000001"]


def test_crash_between_the_two_renames_leaves_the_step_absent_and_a_sweepable_old_dir(tmp_path, monkeypatch):
    """A replay killed after renaming the old step aside and before renaming the new one in: the step is
    absent (never doubled), and the aside copy is named ``.old-step-*`` so the next writer sweeps it.

    Regression: an earlier write_dir rebound ``name`` in ``for name, table in tables.items()``, so the aside
    directory was called ``.old-evictions-<hex>`` and ``sweep()`` never removed it.
    """
    run = tmp_path / "run"
    w = StepLogWriter(run)
    w.write_step(3, tables("run", 3, marker=10, n_obs=2))

    real_rename = os.rename
    calls = []

    def crash_on_second_rename(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the renames")
        return real_rename(src, dst)

    monkeypatch.setattr(steplog_mod.os, "rename", crash_on_second_rename)
    with pytest.raises(KeyboardInterrupt):
        w.write_step(3, tables("run", 3, marker=20, n_obs=2))
    monkeypatch.setattr(steplog_mod.os, "rename", real_rename)

    assert not (run / "step-00000003").exists()  # absent, never doubled
    leftovers = hidden(run)
    assert len(leftovers) == 2, leftovers  # the new temp dir and the old step renamed aside
    assert calls[0][0] == "step-00000003"
    assert calls[0][1].startswith(".old-step-00000003-"), f"aside dir named {calls[0][1]!r}"

    StepLogWriter(run)  # the next writer sweeps every leftover
    assert hidden(run) == [], "leftovers survive the sweep"


def test_truncate_after_removes_later_steps_only(tmp_path):
    w = StepLogWriter(tmp_path / "run")
    for s in range(1, 6):
        w.write_step(s, tables("run", s, marker=s, n_obs=1))
    assert w.truncate_after(3) == 2
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [step_dir_name(s) for s in range(1, 4)]
    assert w.truncate_after(0) == 3
    assert list((tmp_path / "run").iterdir()) == []


def test_empty_tables_match_the_schemas(tmp_path):
    w = StepLogWriter(tmp_path / "_schema")
    d = w.write_step(1, empty_tables())
    for name, schema in STEP_TABLES.items():
        t = pq.read_table(d / f"{name}.parquet")
        assert t.num_rows == 0 and t.schema.equals(schema, check_metadata=False)


def test_manifest_lists_every_file_with_its_size_and_sha256(tmp_path):
    d = StepLogWriter(tmp_path / "run").write_step(2, tables("run", 2, marker=7, n_obs=4))
    manifest = json.loads((d / MANIFEST).read_text())
    assert manifest["format"] == 3 and manifest["step"] == 2 and manifest["run_id"] == "run"  # 3: steps from 1
    assert sorted(manifest["files"]) == sorted(f"{t}.parquet" for t in STEP_TABLES)
    for name, entry in manifest["files"].items():
        data = (d / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    assert verify_step_dir(d) is None


def test_manifest_is_written_last_and_everything_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    """The order of durable operations: each file fsynced, then the manifest, then the temp dir, then the rename,
    then the run dir. (A power loss before the rename leaves only a .tmp dir; after it, complete files.)"""
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append("fsync:" + Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        return real_fsync(fd)

    def rename(a, b):
        events.append(f"rename:{Path(a).name[:9]}->{Path(b).name}")
        return real_rename(a, b)

    monkeypatch.setattr(steplog_mod.os, "fsync", fsync)
    monkeypatch.setattr(steplog_mod.os, "rename", rename)
    StepLogWriter(tmp_path / "run").write_step(1, tables("run", 1, marker=3, n_obs=2))
    files = [e for e in events if e.endswith(".parquet")]
    assert sorted(files) == sorted(f"fsync:{t}.parquet" for t in STEP_TABLES)
    i_manifest = events.index(f"fsync:{MANIFEST}")
    assert all(events.index(f) < i_manifest for f in files)
    i_rename = events.index("rename:.tmp-step->step-00000001")
    assert events[i_manifest + 1].startswith("fsync:.tmp-step-00000001-") and i_manifest + 1 < i_rename
    assert events[i_rename + 1] == "fsync:run"


@pytest.mark.parametrize("damage, expect", [
    ("truncate", "steps.parquet is 0 bytes, the manifest says"),
    ("flip", "sha256"),
    ("delete", "steps.parquet is missing"),
    ("manifest", "MANIFEST.json is damaged"),
])
def test_verify_step_dir_names_the_damage(tmp_path, damage, expect):
    d = StepLogWriter(tmp_path / "run").write_step(1, tables("run", 1, marker=5, n_obs=3))
    f = d / "steps.parquet"
    if damage == "truncate":
        f.write_bytes(b"")
    elif damage == "flip":
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    elif damage == "delete":
        f.unlink()
    else:
        (d / MANIFEST).write_text("{not json")
    problem = verify_step_dir(d)
    assert problem is not None and expect in problem, problem
    if damage == "flip":
        assert verify_step_dir(d, checksums=False) is None  # sizes alone do not see flipped bytes


def test_step_without_manifest_is_checked_for_parquet_framing(tmp_path):
    """Step directories written before manifests existed: presence and PAR1 framing."""
    d = StepLogWriter(tmp_path / "run").write_step(1, tables("run", 1, marker=5, n_obs=3))
    (d / MANIFEST).unlink()
    assert verify_step_dir(d) is None
    (d / "evictions.parquet").write_bytes((d / "evictions.parquet").read_bytes()[:-10])
    assert "evictions.parquet is not a complete Parquet file" in verify_step_dir(d)
    (d / "evictions.parquet").write_bytes(b"")
    assert "evictions.parquet is 0 bytes" in verify_step_dir(d)


def test_quarantine_moves_a_step_aside_where_no_reader_or_sweep_looks(tmp_path):
    run = tmp_path / "run"
    w = StepLogWriter(run)
    for s in range(1, 4):
        w.write_step(s, tables("run", s, marker=s, n_obs=1))
    dest = quarantine_step_dir(run / "step-00000002")
    assert dest.parent == run / ".quarantine" and dest.name.startswith("step-00000002.")
    assert [n for n, _ in steplog_mod.list_step_dirs(run)] == [1, 3]
    StepLogWriter(run)  # the sweep leaves quarantined steps alone
    assert dest.is_dir() and verify_step_dir(dest) is None


def test_step_0_is_refused_steps_count_from_1(tmp_path):
    """Since store v12 steps count from 1 (step 0 is the evaluation before training): a step 0 is a caller still
    counting from 0, refused before anything is written."""
    w = StepLogWriter(tmp_path / "run")
    with pytest.raises(ValueError, match="steps count from 1"):
        w.write_step(0, tables("run", 0, marker=1, n_obs=1))
    assert list((tmp_path / "run").iterdir()) == []


def test_a_step_refuses_rows_of_another_run_or_step(tmp_path):
    w = StepLogWriter(tmp_path / "run")
    with pytest.raises(ValueError, match="holds rows of run_id 'other', not 'run'"):
        w.write_step(1, tables("other", 1, marker=1, n_obs=1))
    with pytest.raises(ValueError, match="holds rows of step 2, not 1"):
        w.write_step(1, tables("run", 2, marker=1, n_obs=1))
    assert list((tmp_path / "run").iterdir()) == []


def test_every_file_names_its_run_and_step_and_a_copy_elsewhere_is_caught(tmp_path):
    run = tmp_path / "run"
    w = StepLogWriter(run)
    d3 = w.write_step(3, tables("run", 3, marker=3, n_obs=2))
    meta = pq.read_metadata(d3 / "evictions.parquet").metadata
    assert meta[b"pc_pipelines.run_id"] == b"run" and meta[b"pc_pipelines.step"] == b"3"
    d5 = w.write_step(5, tables("run", 5, marker=5, n_obs=2))
    assert verify_step_dir(d3) is None and verify_step_dir(d5) is None
    # the manifest rewritten to match a swapped file: the file still says which step it holds
    shutil.copy2(d3 / "buffer_state.parquet", d5 / "buffer_state.parquet")
    manifest = json.loads((d5 / MANIFEST).read_text())
    data = (d5 / "buffer_state.parquet").read_bytes()
    manifest["files"]["buffer_state.parquet"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (d5 / MANIFEST).write_text(json.dumps(manifest))
    assert verify_step_dir(d5) == "buffer_state.parquet says it holds step 3, not 5"
    assert verify_step_dir(d5, checksums=False) is None  # the cheap size check cannot see it; readers checksum
    # files written before step identities (no metadata, a format 1 manifest): their columns' statistics
    old = run / "step-00000006"
    old.mkdir()
    files = {}
    for name, table in tables("run", 3, marker=3, n_obs=2).items():
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        (old / f"{name}.parquet").write_bytes(data := sink.getvalue().to_pybytes())
        files[f"{name}.parquet"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (old / MANIFEST).write_text(json.dumps({"format": 1, "step": old.name, "files": files}))
    assert verify_step_dir(old) == "steps.parquet holds rows of step 3, not 6 (a file of another run or step)"
    (old / MANIFEST).unlink()  # and with no manifest at all
    assert verify_step_dir(old).startswith("steps.parquet holds rows of step 3")
    # a directory copied under another number: the manifest names its step
    shutil.copytree(d3, run / "step-00000007")
    assert verify_step_dir(run / "step-00000007") == (
        "MANIFEST.json describes step 3, not 7 (a step directory copied under another number)")
