"""The test files that take longest, by measured seconds, so that `make test`'s workers start them first (issue 53:
the longest file must not set the end).

`make test` runs one file per worker (``--dist loadfile``) and hands the files out in collection order
(``--no-loadscope-reorder``; xdist's own order, most tests first, put these files, one or two tests each, last).
``tests/conftest.py`` sorts the collection by ``SECONDS``, longest first; every other file keeps its place after them.
The figures are one file's wall seconds under ``make test`` (sum of its tests' setup, call and teardown from pytest's
``--durations``), rounded; what counts is their order. A file missing here only starts later: re-measure with
``benchmarks/ci_time.py`` (its slowest files, from a JUnit report) when a file grows slow."""

from __future__ import annotations

SECONDS = {  # docs/BENCHMARKS.md "Where the test time went" (benchmarks/ci_time.py, idle, 2026-11-29)
    "tests/research/test_bench_study_e2e.py": 270,
    "tests/e2e/test_ui.py": 230,
    "tests/integration/faults/test_faults_runs.py": 220,
    "tests/e2e/test_cli_train.py": 190,
    "tests/integration/faults/test_faults_loads.py": 125,
    "tests/integration/rollout/test_ray_engine_local.py": 120,
    "tests/integration/dagster/test_ray_job_segments.py": 95,
    "tests/e2e/test_demo_graph.py": 90,
    "tests/e2e/test_demo_stop.py": 65,
}


def order(path: str) -> float:
    """Sort key of a test file (its path below the repository, with /): the longest first, the rest after in their
    collection order (a stable sort)."""
    return -SECONDS.get(path, 0)
