"""Per-step Parquet logs: one directory per step, made visible by one atomic rename, verifiable by its manifest.

Writing never blocks reading (docs/DESIGN.md section 5): the trainer never opens the DuckDB catalog while it steps.
It writes each step's tables into ``.tmp-step-<N>-<nonce>/`` inside the run directory and renames the directory to
``step-<N>/``. Readers list ``step-<N>/`` directories by name (never a glob pattern handed to DuckDB), so:

* a process killed mid-write leaves only a ``.tmp-*`` directory, which no view matches (and the next writer
  sweeps away);
* a step replayed after a crash (resume from the last checkpoint) *replaces* ``step-<N>/``: the old directory is
  renamed aside, the new one renamed in, the old one deleted. A crash between those two renames leaves the step
  absent, never doubled; the replay that follows writes it again.

Durability: every file is fsynced before the rename, then ``MANIFEST.json`` (each file's name, size and
sha256) is written and fsynced LAST, then the directory; after the rename the run directory is fsynced too, so a
power loss leaves either the complete step or nothing, never a visible step with empty files. Readers check each
step against its manifest (:func:`verify_step_dir`): a damaged step is left out of every query and reported
(``pilot-commit check``), and compaction moves it into ``<run>/.quarantine/``. Step directories written before
manifests existed are checked for presence and Parquet framing only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..allocation import Allocator, Decision, Rule, Stage, StepOutcome
from .schema import STEP_TABLES

_STAGE_LABELS = np.array([s.label for s in Stage], dtype=object)
_DECISION_LABELS = np.array([d.label for d in Decision], dtype=object)
_RULE_LABELS = np.array([r.label for r in Rule], dtype=object)


MANIFEST = "MANIFEST.json"
QUARANTINE = ".quarantine"
_PARQUET_MAGIC = b"PAR1"
_STEP_FILES = tuple(f"{t}.parquet" for t in STEP_TABLES)


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file and fsync it before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def verify_step_dir(step_dir: Path | str, checksums: bool = True) -> str | None:
    """None when ``step_dir`` holds one complete, intact step; else what is wrong with it, in words.

    With a manifest: every step table's file is listed, present, of the listed size and (``checksums``) sha256.
    Without one (written before manifests): every table's file is present and framed as Parquet (``PAR1`` at both
    ends), which catches empty and truncated files but not flipped bytes. (Plain ``os`` calls on strings: readers
    run this over every uncompacted step of every run.)
    """
    root = os.fspath(step_dir)
    try:
        with open(os.path.join(root, MANIFEST), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        return f"{MANIFEST} unreadable ({exc.strerror})"
    if raw is None:
        for name in _STEP_FILES:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size < 12:
                        return f"{name} is {size} bytes (no manifest; a Parquet file is at least 12)"
                    head = f.read(4)
                    f.seek(-4, os.SEEK_END)
                    tail = f.read(4)
            except FileNotFoundError:
                return f"{name} is missing (no manifest)"
            except OSError as exc:
                return f"{name} unreadable ({exc.strerror})"
            if head != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
                return f"{name} is not a complete Parquet file (no manifest; PAR1 framing broken)"
        return None
    try:
        manifest = json.loads(raw)
        files = manifest["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        return f"{MANIFEST} is damaged ({exc})"
    for name in _STEP_FILES:
        entry = files.get(name)
        if not isinstance(entry, dict) or "size" not in entry or "sha256" not in entry:
            return f"{name} is not listed in {MANIFEST}"
        try:
            with open(os.path.join(root, name), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size != entry["size"]:
                    return f"{name} is {size} bytes, the manifest says {entry['size']}"
                if not checksums:
                    continue
                digest = hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
                    else hashlib.sha256(f.read()).hexdigest()
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as exc:
            return f"{name} unreadable ({exc.strerror})"
        if digest != entry["sha256"]:
            return f"{name} has sha256 {digest[:12]}..., the manifest says {str(entry['sha256'])[:12]}... (bytes changed)"
    return None


def list_step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """A run's visible step directories as (step, path), in step order; anything not ``step-<int>`` is skipped.

    Read-only on purpose (unlike constructing a StepLogWriter, which sweeps ``.tmp-*``): the catalog lists
    directories of runs another process may be writing right now.
    """
    out = []
    try:
        entries = list(os.scandir(run_dir))
    except (FileNotFoundError, NotADirectoryError):
        return out
    base = Path(run_dir)
    for e in entries:
        if not e.name.startswith("step-") or not e.is_dir():
            continue
        try:
            out.append((int(e.name[5:]), base / e.name))
        except ValueError:
            continue
    return sorted(out)


def quarantine_step_dir(step_dir: Path) -> Path:
    """Move a damaged step directory into ``<run>/.quarantine/`` (kept for inspection, out of every query)."""
    step_dir = Path(step_dir)
    qdir = step_dir.parent / QUARANTINE
    qdir.mkdir(exist_ok=True)
    dest = qdir / f"{step_dir.name}.{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    os.rename(step_dir, dest)
    _fsync_dir(step_dir.parent)
    return dest


class StepLogWriter:
    """Writes the step files of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.sweep()

    def sweep(self) -> None:
        """Remove leftovers of killed writes (``.tmp-*``) and interrupted replacements (``.old-*``)."""
        for p in self.run_dir.iterdir():
            if p.name.startswith((".tmp-step-", ".old-step-")):
                shutil.rmtree(p, ignore_errors=True)

    def write_step(self, step: int, tables: dict[str, pa.Table]) -> Path:
        return self.write_dir(step_dir_name(step), tables)

    def write_dir(self, name: str, tables: dict[str, pa.Table]) -> Path:
        """Write all step tables into ``name/`` atomically (replacing a previous ``name/``)."""
        missing = set(STEP_TABLES) - set(tables)
        if missing:
            raise ValueError(f"{name}: tables {sorted(missing)} missing; every step writes all of {sorted(STEP_TABLES)}")
        final = self.run_dir / name
        tmp = self.run_dir / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        files = {}
        for table_name, table in tables.items():
            sink = pa.BufferOutputStream()
            pq.write_table(table.cast(STEP_TABLES[table_name]), sink, compression="zstd")
            data = sink.getvalue().to_pybytes()
            _write_durable(tmp / f"{table_name}.parquet", data)
            files[f"{table_name}.parquet"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        # The manifest last: a step directory with a manifest is complete by construction.
        manifest = {"format": 1, "step": name, "files": files}
        _write_durable(tmp / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
        _fsync_dir(tmp)
        if final.exists():
            old = self.run_dir / f".old-{name}-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
            _fsync_dir(self.run_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
            _fsync_dir(self.run_dir)
        return final

    def truncate_after(self, step: int) -> int:
        """Remove step directories after ``step`` (a run resumed from an earlier checkpoint). Returns how many."""
        later = [p for n, p in list_step_dirs(self.run_dir) if n > step]
        for p in later:
            shutil.rmtree(p)
        return len(later)


def step_tables(run_id: str, outcome: StepOutcome, allocator: Allocator, extra: dict[str, Any] | None = None) -> dict[str, pa.Table]:
    """The four step tables for one finished step. ``extra`` fills the steps row's loss / reward / timing columns."""
    step = outcome.step
    led = outcome.ledger.to_dict()
    led.pop("lags")
    row = {k: led.get(k) for k in STEP_TABLES["steps"].names}
    row.update({k: v for k, v in (extra or {}).items() if k in row})
    row["run_id"] = run_id
    row["written_at"] = dt.datetime.now(dt.timezone.utc)
    steps = pa.Table.from_pylist([row], schema=STEP_TABLES["steps"])

    obs = outcome.observations
    k = len(obs)
    observations = pa.table(
        {
            "run_id": pa.array([run_id] * k, pa.string()),
            "step": np.full(k, step, np.int64),
            "round": obs.round,
            "call": obs.call,
            "prompt_id": obs.prompt_id,
            "stage": _STAGE_LABELS[obs.stage].tolist() if k else [],
            "n": obs.n,
            "n_correct": obs.n_correct,
            "p_hat": obs.p_hat,
            "decision": _DECISION_LABELS[obs.decision].tolist() if k else [],
            "evicted": obs.evicted,
            "lag": obs.lag,
            "wave": obs.wave,
            "rule": _RULE_LABELS[obs.rule].tolist() if k else [],
        },
        schema=STEP_TABLES["prompt_observations"],
    )

    entries = allocator.buffer.entries
    b = len(entries)
    buffer_state = pa.table(
        {
            "run_id": pa.array([run_id] * b, pa.string()),
            "step": np.full(b, step, np.int64),
            "entry_id": np.fromiter((e.entry_id for e in entries), np.int64, b),
            "prompt_id": np.fromiter((e.prompt_id for e in entries), np.int64, b),
            "born": np.fromiter((e.born for e in entries), np.int64, b),
            "n_pilot": np.fromiter((e.n for e in entries), np.int32, b),
            "pilot_correct": np.fromiter((e.reward_sum for e in entries), np.float64, b),
            "pilot_std": np.fromiter((e.std for e in entries), np.float64, b),
        },
        schema=STEP_TABLES["buffer_state"],
    )

    ev = np.asarray(outcome.evicted_prompts, np.int64)
    evictions = pa.table(
        {
            "run_id": pa.array([run_id] * ev.shape[0], pa.string()),
            "step": np.full(ev.shape[0], step, np.int64),
            "prompt_id": ev,
            "effective_epoch": allocator.stream.evicted_from[ev] if ev.shape[0] else np.zeros(0, np.int64),
        },
        schema=STEP_TABLES["evictions"],
    )
    return {"steps": steps, "prompt_observations": observations, "buffer_state": buffer_state, "evictions": evictions}


def empty_tables() -> dict[str, pa.Table]:
    return {name: schema.empty_table() for name, schema in STEP_TABLES.items()}
