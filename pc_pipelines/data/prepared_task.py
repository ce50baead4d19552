"""The training task of a prepared dataset: its rows and the benchmarks as the :class:`TaskData` a run trains on."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .evaluation_sets import BENCHMARK_SPECS, BENCHMARKS, BENCHMARKS_SUBDIR
from .prepare import PreparedDataset
from .readers import DatasetError
from .task import EvalSet, TaskData

log = logging.getLogger(__name__)


def to_task_data(
    prepared: PreparedDataset | pa.Table,
    template: str,
    eval_name: str = "heldout",
    *,
    eval_tables: Mapping[str, pa.Table] | None = None,
) -> TaskData:
    """Training prompts/golds from the ``train`` rows (file order; the allocator's prompt id is the index), one
    EvalSet ``eval_name`` from the ``heldout`` rows (none if there are none), then one EvalSet per entry of
    ``eval_tables`` (e.g. ``load_benchmarks(...)``), all formatted with ``template.format(question=problem)``. A
    known benchmark's set carries its own mean@k (``BenchmarkSpec.eval_k``: 32 for AIME24/25 and AMC23)."""
    if "{question}" not in template:
        raise ValueError(f"prompt template {template!r} has no {{question}} placeholder; include it where the "
                         "problem goes (e.g. \"{question} Let's think step by step ...\").")
    table = prepared.rows if isinstance(prepared, PreparedDataset) else prepared
    problems = table.column("problem").to_pylist()
    golds = table.column("answer").to_pylist()
    splits = table.column("split").to_pylist()
    train = [i for i, s in enumerate(splits) if s == "train"]
    held = [i for i, s in enumerate(splits) if s == "heldout"]
    evals = []
    if held:
        evals.append(EvalSet(eval_name, [template.format(question=problems[i]) for i in held], [golds[i] for i in held]))
    for name, t in (eval_tables or {}).items():
        spec = BENCHMARK_SPECS.get(name)
        evals.append(
            EvalSet(name, [template.format(question=p) for p in t.column("problem").to_pylist()],
                    t.column("answer").to_pylist(), k=spec.eval_k if spec is not None else None)
        )
    return TaskData(
        prompts=[template.format(question=problems[i]) for i in train],
        golds=[golds[i] for i in train],
        eval_sets=evals,
    )


def load_prepared_task(data_dir: str | os.PathLike, dataset: str, template: str) -> TaskData:
    """The training task of a prepared dataset as the Dagster data assets wrote it under ``data_dir``: the
    ``train`` rows of ``<dataset>.parquet`` as the prompt pool, its ``heldout`` rows as the eval set
    ``<dataset>_heldout``, and every benchmark in ``benchmarks/<name>.parquet`` as one eval set each."""
    root = Path(data_dir)
    path = root / f"{dataset}.parquet"
    if not path.is_file():
        raise DatasetError(
            f"no prepared {dataset} at {path}. Fix: materialize the `{dataset}` asset first (its data resource "
            f"writes to {root}), then start the run."
        )
    evals = {name: pq.read_table(root / BENCHMARKS_SUBDIR / f"{name}.parquet") for name in BENCHMARKS
             if (root / BENCHMARKS_SUBDIR / f"{name}.parquet").is_file()}
    if not evals:
        log.warning("no prepared benchmarks under %s: the run evaluates on %s_heldout only (materialize "
                    "`benchmarks` to add them)", root / BENCHMARKS_SUBDIR, dataset)
    return to_task_data(pq.read_table(path), template, f"{dataset}_heldout", eval_tables=evals)
