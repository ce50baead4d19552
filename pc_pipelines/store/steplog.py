"""Per-step Parquet logs: one directory per step, made visible by one atomic rename.

Writing never blocks reading (DESIGN.md section 5): the trainer never opens the DuckDB catalog while it steps.
It writes each step's tables into ``.tmp-step-<N>-<nonce>/`` inside the run directory and renames the directory to
``step-<N>/``. The views glob ``step-*/``, so:

* a process killed mid-write leaves only a ``.tmp-*`` directory, which no view matches (and the next writer
  sweeps away);
* a step replayed after a crash (resume from the last checkpoint) *replaces* ``step-<N>/``: the old directory is
  renamed aside, the new one renamed in, the old one deleted. A crash between those two renames leaves the step
  absent, never doubled; the replay that follows writes it again.
"""

from __future__ import annotations

import datetime as dt
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


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def list_step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """A run's visible step directories as (step, path), in step order; anything not ``step-<int>`` is skipped.

    Read-only on purpose (unlike constructing a StepLogWriter, which sweeps ``.tmp-*``): the catalog lists
    directories of runs another process may be writing right now.
    """
    out = []
    for p in Path(run_dir).glob("step-*"):
        try:
            out.append((int(p.name.split("-", 1)[1]), p))
        except ValueError:
            continue
    return sorted(out)


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
        for table_name, table in tables.items():
            pq.write_table(table.cast(STEP_TABLES[table_name]), tmp / f"{table_name}.parquet", compression="zstd")
        if final.exists():
            old = self.run_dir / f".old-{name}-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
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
