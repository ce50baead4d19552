"""Evaluation benchmarks (docs/DESIGN.md section 6): AIME24, AIME25, AMC23, MATH-500, Minerva Math, OlympiadBench.

Each lives at ``<directory>/<name>/test.jsonl``. The default directory is :data:`EVAL_SETS_DIR`, the copies shipped
inside this package (``pc_pipelines/data/eval_sets``; its README lists sources, licenses, fields and answer types);
the ``benchmarks_dir`` of the ``data`` resource names another. Every file is checked against the sha256 pinned here
(the shipped copies') before it is read; a file that differs is refused by name, unless ``verify=False`` says it is
another version on purpose. Public API::

    BENCHMARKS                                   # the six names, in the order above
    BenchmarkSpec(name, problem_field, expected_rows, answer_of)
    BENCHMARK_SPECS                              # name -> BenchmarkSpec (read-only; expected_rows = the README's)
    EVAL_SETS_DIR                                # the shipped copies (the default directory)
    prepare_benchmark(directory, name, grader=None, verify=True) -> PreparedDataset   # rows + quarantine + stats
    prepare_benchmarks(directory=None, names=None, grader=None, verify=True) -> dict[name, PreparedDataset]
    load_benchmarks(directory=None, names=None, grader=None, verify=True) -> dict[name, pa.Table]  # kept rows only

The rows' schema and ids, each benchmark's answer adapter and the filtering: docs/DATA.md, "Benchmarks".
"""
from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from pc_pipelines.rewards.extract import extract_boxed

from .prepare import PreparedDataset, gold_cache_dir, parse_number, prepare_rows
from .readers import DatasetError, as_text, read_json_rows
from .spec import EVAL, DatasetSpec

log = logging.getLogger(__name__)

__all__ = [
    "BENCHMARKS",
    "BENCHMARKS_DATASET",
    "BENCHMARKS_SUBDIR",
    "BENCHMARK_SPECS",
    "EVAL_SETS_DIR",
    "BenchmarkSpec",
    "load_benchmarks",
    "prepare_benchmark",
    "prepare_benchmarks",
]

EVAL_SETS_DIR = Path(__file__).resolve().with_name("eval_sets")
"""The six sets shipped with the package (byte-identical public copies; sources and licenses in its README)."""
BENCHMARKS_SUBDIR = "benchmarks"
"""Where the ``benchmarks`` asset writes ``<benchmark>.parquet`` under the data directory."""
BENCHMARKS_DATASET = DatasetSpec(
    "benchmarks", "the evaluation benchmarks",
    "The six evaluation benchmarks (AIME24, AIME25, AMC23, MATH-500, Minerva Math, OlympiadBench), one Parquet each.",
    role=EVAL, location=BENCHMARKS_SUBDIR,
)
"""Its registry entry: evaluation sets of every run on a prepared dataset, prepared by its own asset."""


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
"""mean@32 for the 30-40 prompt competition sets (AIME24, AIME25, AMC23; docs/DESIGN.md section 6)."""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    problem_field: str
    expected_rows: int
    answer_of: Callable[[dict], Any]
    """Row dict -> the gold answer (str, or None/blank when the row has none)."""
    sha256: str
    """The sha256 of ``test.jsonl`` as shipped in :data:`EVAL_SETS_DIR` (its README lists the same values)."""
    difficulty_field: str | None = None
    eval_k: int | None = None
    """mean@k of this benchmark's eval set (None: the run's ``training.eval_samples``)."""


_SPECS = {
    s.name: s
    for s in (
        BenchmarkSpec("aime24", "problem", 30, _field("answer"),
                      "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac", eval_k=SMALL_SET_K),
        BenchmarkSpec("aime25", "problem", 30, _number,
                      "b4e273c02d3e7fe1b74b59eae768fc8230bfb0f79539890cb56f4361caac0331", eval_k=SMALL_SET_K),
        BenchmarkSpec("amc23", "problem", 40, _number,
                      "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4", eval_k=SMALL_SET_K),
        BenchmarkSpec("math500", "problem", 500, _field("answer"),
                      "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132", difficulty_field="level"),
        BenchmarkSpec("minerva_math", "problem", 272, _boxed_in_solution,
                      "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2"),
        BenchmarkSpec("olympiadbench", "question", 675, _joined_list,
                      "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416"),
    )
}
BENCHMARKS: tuple[str, ...] = tuple(_SPECS)
BENCHMARK_SPECS: Mapping[str, BenchmarkSpec] = MappingProxyType(_SPECS)


def _how_to(directory: Path) -> str:
    return (
        f"Set `benchmarks_dir` of the `data` resource (DataResource; a relative path is taken from the working "
        f"directory, now {Path.cwd()}) to the directory holding <benchmark>/test.jsonl for {', '.join(BENCHMARKS)}, "
        f"or leave it unset for the copies shipped in {EVAL_SETS_DIR} (its README lists the files); nothing is "
        "downloaded."
    )


def _check_sha256(name: str, path: Path) -> None:
    """Refuse a file whose bytes are not the pinned copy's, naming it, both hashes and the fix."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    want = _SPECS[name].sha256
    if h.hexdigest() != want:
        shipped = EVAL_SETS_DIR / name / "test.jsonl"
        raise DatasetError(
            f"benchmark {name!r}: {path} differs from the pinned copy (sha256 {h.hexdigest()}, expected {want}, "
            f"listed in {EVAL_SETS_DIR / 'README.md'}). Fix: restore the file (the shipped copy is {shipped}; in a "
            "git checkout `git checkout -- <file>`), or, to evaluate on another version of it on purpose, set "
            "`verify_benchmarks: false` on the `data` resource (verify=False in Python)."
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
            "(each needs an answer adapter in pc_pipelines/data/evaluation_sets.py)."
        )
    d = Path(directory if directory is not None else EVAL_SETS_DIR).expanduser()
    if not d.is_dir():
        raise DatasetError(f"the benchmark directory {str(d)!r} (resolved to {d.resolve()}) does not exist. "
                           + _how_to(d))
    return d, list(names)


def prepare_benchmark(directory: str | os.PathLike | None, name: str, grader=None,
                      verify: bool = True) -> PreparedDataset:
    """One benchmark file -> kept rows (prepared schema, split "eval"), quarantine and stats. ``directory`` None:
    the shipped copies. ``verify``: refuse a file whose sha256 is not the pinned one (False: another version of the
    file, on purpose)."""
    d, _ = _resolve(directory, [name])
    spec = _SPECS[name]
    path = d / name / "test.jsonl"
    if not path.is_file():
        raise DatasetError(f"benchmark {name!r}: {path} (resolved to {path.resolve()}) does not exist. " + _how_to(d))
    if verify:
        _check_sha256(name, path)
    rows = read_json_rows(path, None, python=True).to_pylist()
    if rows and spec.problem_field not in rows[0]:
        raise DatasetError(
            f"benchmark {name!r}: {path} has no {spec.problem_field!r} field (fields: {sorted(rows[0])}); this "
            f"adapter expects the file described in {EVAL_SETS_DIR / 'README.md'}."
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
        gold_cache=gold_cache_dir(),  # the same golds with the same grading code: checked once per machine
    )
    prepared.stats["path"] = str(path)
    prepared.stats["expected_rows"] = spec.expected_rows
    if len(rows) != spec.expected_rows:
        log.warning("benchmark %s: %s has %d rows, the README says %d", name, path, len(rows), spec.expected_rows)
    return prepared


def prepare_benchmarks(
    directory: str | os.PathLike | None = None,
    names: Sequence[str] | None = None,
    grader=None,
    verify: bool = True,
) -> dict[str, PreparedDataset]:
    """Every named benchmark (default: all six), in the order given; all names and the directory are checked
    before any file is read. ``directory`` None: the shipped copies; ``verify``: see :func:`prepare_benchmark`."""
    from pc_pipelines.rewards import MathGrader

    _, names = _resolve(directory, names)
    grader = grader if grader is not None else MathGrader()
    return {n: prepare_benchmark(directory, n, grader, verify) for n in names}


def load_benchmarks(
    directory: str | os.PathLike | None = None,
    names: Sequence[str] | None = None,
    grader=None,
    verify: bool = True,
) -> dict[str, pa.Table]:
    """The kept rows of each named benchmark (prepared schema); quarantined rows are logged, see
    ``prepare_benchmarks`` for them and the counts."""
    out = {}
    for name, p in prepare_benchmarks(directory, names, grader, verify).items():
        if p.quarantine.num_rows:
            log.warning("benchmark %s: %d of %d rows quarantined: %s", name, p.quarantine.num_rows,
                        p.stats["rows_in"], {k: v for k, v in p.stats["quarantined_by_reason"].items() if v})
        out[name] = p.rows
    return out
