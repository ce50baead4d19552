"""Evaluation benchmarks (DESIGN.md section 6): AIME24, AIME25, AMC23, MATH-500, Minerva Math, OlympiadBench.

Each lives at ``<directory>/<name>/test.jsonl`` (default directory ``../shared/data/benchmarks``, relative to the
working directory, as the ``benchmarks_dir`` of the ``data`` resource; its README lists fields and answer types).
Public API::

    BENCHMARKS                                   # the six names, in the order above
    BenchmarkSpec(name, problem_field, expected_rows, answer_of)
    BENCHMARK_SPECS                              # name -> BenchmarkSpec (read-only; expected_rows = the README's)
    prepare_benchmark(directory, name, grader=None) -> PreparedDataset          # rows + quarantine + stats
    prepare_benchmarks(directory, names=None, grader=None) -> dict[name, PreparedDataset]
    load_benchmarks(directory, names=None, grader=None) -> dict[name, pa.Table]  # the kept rows only

The rows' schema and ids, each benchmark's answer adapter and the filtering: docs/DATA.md, "Benchmarks".
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from pc_pipelines.rewards.extract import extract_boxed

from .datasets import (
    DatasetError,
    PreparedDataset,
    as_text,
    parse_number,
    prepare_rows,
    read_json_rows,
)

log = logging.getLogger(__name__)

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_SPECS",
    "DEFAULT_BENCHMARKS_DIR",
    "BenchmarkSpec",
    "load_benchmarks",
    "prepare_benchmark",
    "prepare_benchmarks",
]

DEFAULT_BENCHMARKS_DIR = "../shared/data/benchmarks"


def _field(name: str) -> Callable[[dict], Any]:
    return lambda row: row.get(name)


def _number(row: dict) -> str | None:
    v = row.get("answer")
    return None if v is None else as_text(v)  # 70 -> "70", 27.0 -> "27"


def _boxed_in_solution(row: dict) -> str | None:
    sol = row.get("solution")
    return extract_boxed(sol) if isinstance(sol, str) else None


def _joined_list(row: dict) -> str | None:
    v = row.get("final_answer")
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ", ".join(as_text(x).strip() for x in v if x is not None and as_text(x).strip())
    return as_text(v)


SMALL_SET_K = 32
"""mean@32 for the 30-40 prompt competition sets (AIME24, AIME25, AMC23; DESIGN.md section 6)."""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    problem_field: str
    expected_rows: int
    answer_of: Callable[[dict], Any]
    """Row dict -> the gold answer (str, or None/blank when the row has none)."""
    difficulty_field: str | None = None
    eval_k: int | None = None
    """mean@k of this benchmark's eval set (None: the run's ``training.eval_samples``)."""


_SPECS = {
    s.name: s
    for s in (
        BenchmarkSpec("aime24", "problem", 30, _field("answer"), eval_k=SMALL_SET_K),
        BenchmarkSpec("aime25", "problem", 30, _number, eval_k=SMALL_SET_K),
        BenchmarkSpec("amc23", "problem", 40, _number, eval_k=SMALL_SET_K),
        BenchmarkSpec("math500", "problem", 500, _field("answer"), difficulty_field="level"),
        BenchmarkSpec("minerva_math", "problem", 272, _boxed_in_solution),
        BenchmarkSpec("olympiadbench", "question", 675, _joined_list),
    )
}
BENCHMARKS: tuple[str, ...] = tuple(_SPECS)
BENCHMARK_SPECS: Mapping[str, BenchmarkSpec] = MappingProxyType(_SPECS)


def _how_to(directory: Path) -> str:
    return (
        f"Set `benchmarks_dir` of the `data` resource (DataResource; default {DEFAULT_BENCHMARKS_DIR!r}, relative "
        f"to the working directory, now {Path.cwd()}) to the directory holding <benchmark>/test.jsonl for "
        f"{', '.join(BENCHMARKS)} (see the README in {DEFAULT_BENCHMARKS_DIR}); nothing is downloaded."
    )


def _resolve(directory: str | os.PathLike | None, names: Sequence[str] | None) -> tuple[Path, list[str]]:
    if names is None:
        names = list(BENCHMARKS)
    elif isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in _SPECS]
    if unknown:
        raise DatasetError(
            f"unknown benchmark name(s) {unknown}; known: {list(BENCHMARKS)}. Fix: pick names from that list "
            "(each needs an answer adapter in pc_pipelines/data/benchmarks.py)."
        )
    d = Path(directory if directory is not None else DEFAULT_BENCHMARKS_DIR).expanduser()
    if not d.is_dir():
        raise DatasetError(f"the benchmark directory {str(d)!r} (resolved to {d.resolve()}) does not exist. "
                           + _how_to(d))
    return d, list(names)


def prepare_benchmark(directory: str | os.PathLike | None, name: str, grader=None) -> PreparedDataset:
    """One benchmark file -> kept rows (prepared schema, split "eval"), quarantine and stats."""
    d, _ = _resolve(directory, [name])
    spec = _SPECS[name]
    path = d / name / "test.jsonl"
    if not path.is_file():
        raise DatasetError(f"benchmark {name!r}: {path} (resolved to {path.resolve()}) does not exist. " + _how_to(d))
    rows = read_json_rows(path, None, python=True).to_pylist()
    if rows and spec.problem_field not in rows[0]:
        raise DatasetError(
            f"benchmark {name!r}: {path} has no {spec.problem_field!r} field (fields: {sorted(rows[0])}); this "
            f"adapter expects the file described in the README of {DEFAULT_BENCHMARKS_DIR}."
        )
    problems = [r.get(spec.problem_field) for r in rows]
    answers = [spec.answer_of(r) for r in rows]
    difficulties = [r.get(spec.difficulty_field) if spec.difficulty_field else None for r in rows]
    prepared = prepare_rows(
        name,
        problems,
        answers,
        difficulties,
        parse_number,
        drop_binary=False,
        heldout=0,
        seed=0,
        grader=grader,
        gold_workers=1,
        split="eval",
        dedupe=False,
        id_of=lambda i, _problem: f"{name}-{i}",
    )
    prepared.stats["path"] = str(path)
    prepared.stats["expected_rows"] = spec.expected_rows
    if len(rows) != spec.expected_rows:
        log.warning("benchmark %s: %s has %d rows, the README says %d", name, path, len(rows), spec.expected_rows)
    return prepared


def prepare_benchmarks(
    directory: str | os.PathLike | None = DEFAULT_BENCHMARKS_DIR,
    names: Sequence[str] | None = None,
    grader=None,
) -> dict[str, PreparedDataset]:
    """Every named benchmark (default: all six), in the order given; all names and the directory are checked
    before any file is read."""
    from pc_pipelines.rewards import MathGrader

    _, names = _resolve(directory, names)
    grader = grader if grader is not None else MathGrader()
    return {n: prepare_benchmark(directory, n, grader) for n in names}


def load_benchmarks(
    directory: str | os.PathLike | None = DEFAULT_BENCHMARKS_DIR,
    names: Sequence[str] | None = None,
    grader=None,
) -> dict[str, pa.Table]:
    """The kept rows of each named benchmark (prepared schema); quarantined rows are logged, see
    ``prepare_benchmarks`` for them and the counts."""
    out = {}
    for name, p in prepare_benchmarks(directory, names, grader).items():
        if p.quarantine.num_rows:
            log.warning("benchmark %s: %d of %d rows quarantined: %s", name, p.quarantine.num_rows,
                        p.stats["rows_in"], {k: v for k, v in p.stats["quarantined_by_reason"].items() if v})
        out[name] = p.rows
    return out
