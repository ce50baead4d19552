"""DeepMath-103K, a training dataset: its columns, loader, preparation (the paper's binary-answer filter, quarantine,
a seeded 500-row held-out split) and its registry entry :data:`DEEPMATH_DATASET`. Public API::

    DEEPMATH_COLUMNS                                           # question, final_answer, difficulty
    load_deepmath(path) -> pa.Table                            # load_table with these columns and messages
    prepare_deepmath(table, heldout=500, seed=0, grader=None, *, gold_workers=None) -> PreparedDataset
    DEEPMATH_DATASET                                           # its DatasetSpec (pc_pipelines/data/registry.py)

The rules: docs/DATA.md, "Training datasets".
"""
from __future__ import annotations

import os

import pyarrow as pa

from .prepare import PreparedDataset, parse_number, prepare_rows
from .readers import load_table, require_columns
from .spec import DatasetSpec

__all__ = ["DEEPMATH_COLUMNS", "DEEPMATH_DATASET", "load_deepmath", "prepare_deepmath"]

DEEPMATH_COLUMNS = ("question", "final_answer", "difficulty")
"""Read from a DeepMath-103K file (it also has ``topic`` and ``r1_solution_1..3``, which are not needed)."""

_COPY_EXAMPLE = (
    "e.g. `python -c \"import datasets; datasets.load_dataset('zwhe99/DeepMath-103K', split='train')"
    ".save_to_disk('/data/deepmath')\"` on a machine with network access"
)


def load_deepmath(path: str | os.PathLike | None) -> pa.Table:
    """DeepMath-103K's ``question``, ``final_answer`` and ``difficulty`` columns from a local copy."""
    return load_table(path, columns=DEEPMATH_COLUMNS, required=DEEPMATH_COLUMNS, what="DeepMath-103K",
                      setting="deepmath_path", copy_example=_COPY_EXAMPLE)


def prepare_deepmath(
    table: pa.Table,
    heldout: int = 500,
    seed: int = 0,
    grader=None,
    *,
    gold_workers: int | None = None,
) -> PreparedDataset:
    """DeepMath-103K (``question``, ``final_answer``, ``difficulty``) -> prepared rows, with the binary-answer
    filter, quarantine and a ``heldout``-row held-out split (rules: docs/DATA.md)."""
    require_columns(table.column_names, DEEPMATH_COLUMNS, "the DeepMath table", "DeepMath-103K")
    return prepare_rows(
        "deepmath",
        table.column("question").to_pylist(),
        table.column("final_answer").to_pylist(),
        table.column("difficulty").to_pylist(),
        parse_number,
        drop_binary=True,
        heldout=heldout,
        seed=seed,
        grader=grader,
        gold_workers=gold_workers,
    )


DEEPMATH_DATASET = DatasetSpec(
    "deepmath", "DeepMath-103K",
    "DeepMath-103K without binary (yes/no/true/false) answers, with a seeded held-out split; bad rows quarantined\n"
    "into their own Parquet with a reason per row.",
    load=load_deepmath, prepare=prepare_deepmath, heldout=500, forbid_binary=True, min_kept_fraction=0.75,
    config_help={
        "config": "How the DeepMath-103K training set is split (the filter and quarantine rules are fixed: see "
                  "``pc_pipelines/data/prepare.py``).",
        "heldout": "Rows of the held-out evaluation split (docs/DESIGN.md section 6: 500). Must leave training rows.",
        "checks": "Row-count bounds of ``deepmath``'s ``row_count_in_range`` check. By default relative to the rows "
                  "read from the file: the full 103,110 rows keep about 85K (the paper), a fraction of 0.82, so 0.75 "
                  "catches a broken load or an over-eager filter while any small or partial copy passes. Pin the "
                  "paper's numbers with min_rows=80000, max_rows=90000.",
    },
)
