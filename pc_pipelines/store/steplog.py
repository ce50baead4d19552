"""Per-step Parquet logs: one directory per step, made visible by one atomic rename, verifiable by its manifest.

Writing never blocks reading (docs/DESIGN.md section 5): the trainer never opens the DuckDB catalog while it steps.
It writes each step's tables into ``.tmp-step-<N>-<nonce>/`` inside the run directory and renames the directory to
``step-<N>/``. Readers list ``step-<N>/`` directories by name (never a glob pattern handed to DuckDB), so:

* a process killed mid-write leaves only a ``.tmp-*`` directory, which no view matches (and the next writer
  sweeps away);
* a step replayed after a crash (resume from the last checkpoint) *replaces* ``step-<N>/``: the old directory is
  renamed aside, the new one renamed in, the old one deleted. A crash between those two renames leaves the step
  absent, never doubled; the replay that follows writes it again.

Durability (the rule of :mod:`pc_pipelines.durable`): every file is fsynced before the rename, then
``MANIFEST.json`` (each file's name, size and sha256) is written and fsynced LAST, then the directory; after the rename the run directory is fsynced too, so a
power loss leaves either the complete step or nothing, never a visible step with empty files. Readers check each
step against its manifest (:func:`verify_step_dir`): a damaged step is left out of every query and reported
(``pilot-commit check``), and compaction moves it into ``<run>/.quarantine/``. Step directories written before
manifests existed are checked for presence and Parquet framing only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import durable
from ..allocation import Decision, Rule, Stage, StepOutcome
from ..steps import step_number
from .schema import STEP_TABLES

_STAGE_LABELS = np.array([s.label for s in Stage], dtype=object)
_DECISION_LABELS = np.array([d.label for d in Decision], dtype=object)
_RULE_LABELS = np.array([r.label for r in Rule], dtype=object)


MANIFEST = "MANIFEST.json"
STEP_MANIFEST = durable.JsonManifest(MANIFEST, sort_keys=True)
MANIFEST_FORMAT = 3  # 3: steps counted from 1 (v12); 2: names the run and the step (an int); 1: "step" is the
# directory's name, no run. Formats 1 and 2 (and directories without a manifest) count steps from 0: the store's
# upgrade to v12 renumbers them (renumber_step_dirs).
IDENTITY_RUN, IDENTITY_STEP = "pc_pipelines.run_id", "pc_pipelines.step"  # keys of each file's Parquet metadata
QUARANTINE = ".quarantine"
FIRST_STEP = 1
"""The first step a writer writes (steps count from 1 since store v12)."""
_PARQUET_MAGIC = b"PAR1"
_STEP_FILES = tuple(f"{t}.parquet" for t in STEP_TABLES)


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _foreign_rows(table: pa.Table, run_id: str, step: int) -> str | None:
    """What in ``table`` belongs to another run or step (its ``run_id`` / ``step`` columns), or None."""
    if table.num_rows == 0:
        return None
    import pyarrow.compute as pc

    for col, want in (("run_id", run_id), ("step", step)):
        if col in table.column_names:
            bounds = pc.min_max(table[col])
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
            if lo != want or hi != want:
                return f"holds rows of {col} {lo!r}" + (f"..{hi!r}" if hi != lo else "") + f", not {want!r}"
    return None


def _identity_problem(name: str, data: bytes, run_id: str, step: int) -> str | None:
    """Whether the Parquet file ``name`` (its bytes) says it holds ``run_id``'s ``step``: the run and step in its
    metadata (files written since step identities) and the min / max statistics of its ``run_id`` and ``step``
    columns (every file that has rows). None when it does; else what it holds instead."""
    try:
        md = pq.read_metadata(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        return f"{name} is not a readable Parquet file ({str(exc)[:120]})"
    kv = md.metadata or {}
    said_run = kv.get(IDENTITY_RUN.encode())
    said_step = kv.get(IDENTITY_STEP.encode())
    if said_run is not None and said_run.decode(errors="replace") != run_id:
        return f"{name} says it holds run {said_run.decode(errors='replace')!r}, not {run_id!r}"
    if said_step is not None and said_step.decode(errors="replace") != str(step):
        return f"{name} says it holds step {said_step.decode(errors='replace')}, not {step}"
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            want = {"run_id": run_id, "step": step}.get(col.path_in_schema)
            stats = col.statistics
            if want is None or stats is None or not stats.has_min_max:
                continue
            lo, hi = stats.min, stats.max
            if isinstance(lo, bytes):
                lo, hi = lo.decode(errors="replace"), hi.decode(errors="replace")
            if lo != want or hi != want:
                return (f"{name} holds rows of {col.path_in_schema} {lo!r}" + (f"..{hi!r}" if hi != lo else "")
                        + f", not {want!r} (a file of another run or step)")
    return None


def _expected_identity(root: str) -> tuple[str, int | None]:
    """The run (the parent directory's name) and the step (``step-<N>``) a step directory must hold; a
    quarantined one (``<run>/.quarantine/step-<N>.<when>``) keeps its run's and step's."""
    parent, name = os.path.split(os.path.normpath(root))
    if os.path.basename(parent) == QUARANTINE:
        parent, name = os.path.dirname(parent), name.split(".", 1)[0]
    try:
        step = int(name[5:]) if name.startswith("step-") else None
    except ValueError:
        step = None
    return os.path.basename(parent), step


def verify_step_dir(step_dir: Path | str, checksums: bool = True) -> str | None:
    """None when ``step_dir`` holds one complete, intact step of its own run; else what is wrong with it, in words.

    With a manifest (:func:`~pc_pipelines.durable.verify_dir`): every step table's file is listed, present, of the
    listed size and (``checksums``) sha256, and the manifest names this directory's run and step. Without one
    (written before manifests): every table's file is present and framed as Parquet (``PAR1`` at both ends), which
    catches empty and truncated files but not flipped bytes. With ``checksums`` (every reader's session,
    ``pilot-commit check``) each file must also hold this run's step (:func:`_identity_problem`): a file or
    directory copied from another step or run is reported like a damaged one. (Plain ``os`` calls on strings:
    readers run this over every uncompacted step of every run.)
    """
    root = os.fspath(step_dir)
    run_id, step = _expected_identity(root)

    def names_this_step(manifest: durable.Manifest) -> str | None:
        said = manifest.fields.get("step")
        said_step = said if isinstance(said, int) else _expected_identity(os.path.join(root, str(said)))[1]
        if step is not None and said_step != step:
            return f"{MANIFEST} describes step {said!r}, not {step} (a step directory copied under another number)"
        if "run_id" in manifest.fields and manifest.fields["run_id"] != run_id:
            return (f"{MANIFEST} describes run {manifest.fields['run_id']!r}, not {run_id!r} (a step directory of "
                    "another run)")
        return None

    def without_manifest() -> str | None:
        for name in _STEP_FILES:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size < 12:
                        return f"{name} is {size} bytes (no manifest; a Parquet file is at least 12)"
                    data = f.read() if checksums and step is not None else None
                    if data is None:
                        head = f.read(4)
                        f.seek(-4, os.SEEK_END)
                        tail = f.read(4)
                    else:
                        head, tail = data[:4], data[-4:]
            except FileNotFoundError:
                return f"{name} is missing (no manifest)"
            except OSError as exc:
                return f"{name} unreadable ({exc.strerror})"
            if head != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
                return f"{name} is not a complete Parquet file (no manifest; PAR1 framing broken)"
            if data is not None:
                problem = _identity_problem(name, data, run_id, step)  # type: ignore[arg-type]
                if problem:
                    return problem
        return None

    holds_this_step = None if step is None else (lambda name, data: _identity_problem(name, data, run_id, step))
    return durable.verify_dir(root, STEP_MANIFEST, checksums, expect=_STEP_FILES, check=names_this_step,
                              check_file=holds_this_step, without_manifest=without_manifest)


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


def counts_from_one(step_dir: Path) -> bool:
    """Whether ``step_dir`` was written with steps counted from 1 (its manifest's format is 3 or later)."""
    try:
        with open(os.path.join(step_dir, MANIFEST), "rb") as f:
            fmt = json.loads(f.read()).get("format")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(fmt, int) and fmt >= 3


def renumber_step_dirs(run_dir: Path) -> tuple[int, int]:
    """Renumber a run's step directories written with steps counted from 0 (store v11 and before): ``step-<k>``
    becomes ``step-<k+1>``, its rows' ``step`` (and ``born``) one more, written and verified like any step
    (:meth:`StepLogWriter.write_step`), highest first so no directory is ever overwritten by another step.
    Idempotent: a directory already counted from 1 is left as it is, and one renumbered before a crash that left
    its old copy is written again from that copy. A damaged old directory (it fails its manifest) cannot be
    renumbered truthfully: it is moved into ``<run>/.quarantine/`` (as compaction would). Returns (renumbered,
    quarantined)."""
    old = [(n, d) for n, d in list_step_dirs(run_dir) if not counts_from_one(d)]
    if not old:
        return 0, 0
    writer = StepLogWriter(run_dir)
    done = quarantined = 0
    for n, d in sorted(old, reverse=True):
        if verify_step_dir(d) is not None:
            quarantine_step_dir(d)
            quarantined += 1
            continue
        tables = {}
        for t, schema in STEP_TABLES.items():
            table = pq.read_table(os.path.join(d, f"{t}.parquet"), schema=schema).replace_schema_metadata(None)
            table = table.set_column(table.schema.get_field_index("step"), "step",
                                     pa.array(np.full(table.num_rows, n + 1, np.int64)))
            if t == "buffer_state":
                table = table.set_column(table.schema.get_field_index("born"), "born",
                                         pc.add(table["born"], 1))
            tables[t] = table
        writer.write_step(n + 1, tables)
        shutil.rmtree(d)
        done += 1
    return done, quarantined


def quarantine_step_dir(step_dir: Path) -> Path:
    """Move a damaged step directory into ``<run>/.quarantine/`` (kept for inspection, out of every query)."""
    step_dir = Path(step_dir)
    stamp = f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    return durable.quarantine(step_dir, step_dir.parent / QUARANTINE / f"{step_dir.name}.{stamp}")


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
        """Write all step tables of ``step`` into ``step-<N>/`` atomically (replacing a previous one). Every file
        names its run (this directory's name) and step in its Parquet metadata, and so does the manifest; rows of
        another run or step are refused here, so a file that disagrees with its directory was put there by hand."""
        name = step_dir_name(step)
        run_id = self.run_dir.name
        if step < FIRST_STEP:
            raise ValueError(f"{name}: steps count from 1 (step 0 is the evaluation before training, which has no step "
                             "directory)")
        missing = set(STEP_TABLES) - set(tables)
        if missing:
            raise ValueError(f"{name}: tables {sorted(missing)} missing; every step writes all of {sorted(STEP_TABLES)}")
        for table_name, table in tables.items():
            problem = _foreign_rows(table, run_id, step)
            if problem:
                raise ValueError(f"{name}/{table_name}.parquet: {problem}; a step directory holds its own rows only")
        identity = {IDENTITY_RUN: run_id, IDENTITY_STEP: str(step)}

        def fill(stage: durable.Staging) -> dict[str, Any]:
            for table_name, table in tables.items():
                sink = pa.BufferOutputStream()
                pq.write_table(table.cast(STEP_TABLES[table_name]).replace_schema_metadata(identity), sink,
                               compression="zstd")
                stage.write(f"{table_name}.parquet", sink.getvalue().to_pybytes())
            return {"format": MANIFEST_FORMAT, "run_id": run_id, "step": step}  # the manifest last (durable)

        uid = uuid.uuid4().hex[:8]
        return durable.write_dir(self.run_dir / name, fill, STEP_MANIFEST, tmp=self.run_dir / f".tmp-{name}-{uid}",
                                 aside=self.run_dir / f".old-{name}-{uid}")

    def truncate_after(self, step: int) -> int:
        """Remove step directories after ``step`` (a run resumed from an earlier checkpoint). Returns how many."""
        later = [p for n, p in list_step_dirs(self.run_dir) if n > step]
        for p in later:
            shutil.rmtree(p)
        return len(later)


def step_tables(run_id: str, outcome: StepOutcome, *, extra: dict[str, Any] | None = None) -> dict[str, pa.Table]:
    """The four step tables for one finished step, from its outcome alone (the buffer's entries and the evictions'
    effective epochs travel in it). ``extra`` fills the steps row's loss / reward / timing columns. Rows carry the
    run's step numbers (:func:`~pc_pipelines.steps.step_number` of the allocator's step index and of ``born``)."""
    step = step_number(outcome.step)
    led = outcome.ledger.to_dict()
    led.pop("lags")
    row = {k: led.get(k) for k in STEP_TABLES["steps"].names}
    row.update({k: v for k, v in (extra or {}).items() if k in row})
    row["run_id"] = run_id
    row["step"] = step
    row["written_at"] = dt.datetime.now(dt.timezone.utc)
    steps = pa.Table.from_pylist([row], schema=STEP_TABLES["steps"])

    obs = outcome.observations
    k = len(obs)
    prior = obs.decision == Decision.SCREENED_BY_PRIOR
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
            "evidence_n": obs.evidence_n,
            "decision": _DECISION_LABELS[obs.decision].tolist() if k else [],
            "evicted": obs.evicted,
            "lag": obs.lag,
            "wave": obs.wave,
            "rule": _RULE_LABELS[obs.rule].tolist() if k else [],
            "returned": obs.returned,
            # NULL but on the rows the history prior skipped
            "prior_useful": pa.array(obs.prior_useful, pa.float64(), mask=~prior),
            "prior_mean": pa.array(obs.prior_mean, pa.float64(), mask=~prior),
            "prior_evidence": pa.array(obs.prior_evidence, pa.float64(), mask=~prior),
            "prior_observations": pa.array(obs.prior_observations, pa.int32(), mask=~prior),
            # NULL but on the rows a keep band decided (PC's screen): the band in force then
            "band_lower": pa.array(obs.band_lower, pa.float64(), mask=np.isnan(obs.band_lower)),
            "band_upper": pa.array(obs.band_upper, pa.float64(), mask=np.isnan(obs.band_upper)),
        },
        schema=STEP_TABLES["prompt_observations"],
    )

    entries = outcome.buffer_entries
    b = len(entries)
    buffer_state = pa.table(
        {
            "run_id": pa.array([run_id] * b, pa.string()),
            "step": np.full(b, step, np.int64),
            "entry_id": np.fromiter((e.entry_id for e in entries), np.int64, b),
            "prompt_id": np.fromiter((e.prompt_id for e in entries), np.int64, b),
            "born": np.fromiter((step_number(e.born) for e in entries), np.int64, b),
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
            "effective_epoch": np.asarray(outcome.evicted_epochs, np.int64),
        },
        schema=STEP_TABLES["evictions"],
    )
    return {"steps": steps, "prompt_observations": observations, "buffer_state": buffer_state, "evictions": evictions}


def empty_tables() -> dict[str, pa.Table]:
    return {name: schema.empty_table() for name, schema in STEP_TABLES.items()}
