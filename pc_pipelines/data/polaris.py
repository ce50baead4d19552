"""Polaris-53K, a training dataset: its columns, loader, preparation (quarantine, difficulty ``"7/8"`` -> 0.875, an
optional held-out split, no binary filter) and its registry entry :data:`POLARIS_DATASET`. Public API::

    POLARIS_COLUMNS                                            # problem, answer, difficulty
    load_polaris(path) -> pa.Table                             # load_table with these columns and messages
    prepare_polaris(table, heldout=0, seed=0, grader=None, *, gold_workers=None) -> PreparedDataset
    POLARIS_DATASET                                            # its DatasetSpec (pc_pipelines/data/registry.py)

The rules: docs/DATA.md, "Training datasets".
"""
from __future__ import annotations

import os
import re
from typing import Any

import pyarrow as pa

from .prepare import PreparedDataset, parse_number, prepare_rows
from .readers import load_table, require_columns
from .spec import DatasetSpec

__all__ = ["POLARIS_COLUMNS", "POLARIS_DATASET", "load_polaris", "prepare_polaris"]

POLARIS_COLUMNS = ("problem", "answer", "difficulty")

_COPY_EXAMPLE = (
    "e.g. `python -c \"import datasets; datasets.load_dataset('POLARIS-Project/Polaris-Dataset-53K', "
    "split='train').save_to_disk('/data/polaris')\"` on a machine with network access"
)


def load_polaris(path: str | os.PathLike | None) -> pa.Table:
    """Polaris-53K's ``problem``, ``answer`` and ``difficulty`` columns from a local copy."""
    return load_table(path, columns=POLARIS_COLUMNS, required=POLARIS_COLUMNS, what="Polaris-53K",
                      setting="polaris_path", copy_example=_COPY_EXAMPLE)


def prepare_polaris(
    table: pa.Table,
    heldout: int = 0,
    seed: int = 0,
    grader=None,
    *,
    gold_workers: int | None = None,
) -> PreparedDataset:
    """Polaris-53K (``problem``, ``answer``, ``difficulty`` like ``"7/8"``) -> prepared rows with quarantine and an
    optional held-out split (no binary filter: the paper applies it to DeepMath only)."""
    require_columns(table.column_names, POLARIS_COLUMNS, "the Polaris table", "Polaris-53K")
    return prepare_rows(
        "polaris",
        table.column("problem").to_pylist(),
        table.column("answer").to_pylist(),
        table.column("difficulty").to_pylist(),
        _parse_fraction,
        drop_binary=False,
        heldout=heldout,
        seed=seed,
        grader=grader,
        gold_workers=gold_workers,
    )


_FRACTION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)\s*$")


def _parse_fraction(v: Any) -> float | None:
    """Polaris difficulty: ``"a/b"`` (b > 0) -> a/b; a number (or numeric string) -> itself; else None."""
    if isinstance(v, str):
        m = _FRACTION.match(v)
        if m:
            den = float(m.group(2))
            return float(m.group(1)) / den if den > 0 else None
    return parse_number(v)


POLARIS_DATASET = DatasetSpec(
    "polaris", "Polaris-53K",
    'Polaris-53K (difficulty "7/8" -> 0.875), bad rows quarantined into their own Parquet with a reason per row.',
    load=load_polaris, prepare=prepare_polaris, heldout=0, forbid_binary=False, min_kept_fraction=0.9,
    config_help={
        "config": "How the Polaris-53K training set is split (quarantine rules: ``pc_pipelines/data/prepare.py``).",
        "heldout": "Rows of the held-out evaluation split (0: none; the paper evaluates Polaris runs on the "
                   "benchmarks). Must leave training rows.",
        "seed": "Seed of the held-out split (as for DeepMath).",
        "gold_workers": "Grader worker processes for the gold check (default: automatic).",
        "checks": "Row-count bounds of ``polaris``'s ``row_count_in_range`` check: relative to the rows read from the "
                  "file unless pinned (no binary filter, so nearly every row should survive the quarantine).",
    },
)
