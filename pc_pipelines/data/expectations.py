"""Data-quality checks of prepared datasets: Great Expectations 1.x called directly, plus a verifier check.

The data assets' checks, as plain functions whose results are JSON-able dicts ready to become Dagster asset-check
metadata (``dagster-ge`` needs GE < 1.0, so GE is run here without it). Public API::

    validate_prepared(table, *, min_rows, max_rows, forbid_binary) -> ValidationReport      # Great Expectations
    verifier_parseable(table, *, grader=None, workers=None) -> ValidationReport             # the grader, not GE
    ValidationReport(success, results, rows, seconds)
        .failed -> list[ExpectationResult]; .as_dict() -> dict; .summary() -> str; .merged(other) -> ValidationReport
    ExpectationResult(expectation, column, success, unexpected_count, element_count, observed, examples, error)
        .as_dict() -> dict
    split_by_check(report, *, forbid_binary) -> {check name: ValidationReport}   # one per Dagster asset check
    row_count_bounds(rows_in, *, min_kept_fraction, min_rows=None, max_rows=None) -> (min_rows, max_rows)
    CHECK_NON_EMPTY, CHECK_UNIQUE_IDS, CHECK_NO_BINARY, CHECK_ROW_COUNT, CHECK_PARSEABLE   # the check names

The expectation suite, the examples a failed expectation carries, how one GE run backs several asset checks,
the row-count bounds and the timings: docs/DATA.md, "Checks".
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .prepare import BINARY_PARTS, check_golds, normalize_final_answer, verifier_gold

log = logging.getLogger(__name__)

__all__ = [
    "CHECK_NON_EMPTY",
    "CHECK_NO_BINARY",
    "CHECK_PARSEABLE",
    "CHECK_ROW_COUNT",
    "CHECK_UNIQUE_IDS",
    "ExpectationResult",
    "ValidationReport",
    "row_count_bounds",
    "split_by_check",
    "validate_prepared",
    "verifier_parseable",
]

CHECK_NON_EMPTY = "problem_and_answer_non_empty"
CHECK_UNIQUE_IDS = "unique_ids"
CHECK_NO_BINARY = "no_binary_answers"
CHECK_ROW_COUNT = "row_count_in_range"
CHECK_PARSEABLE = "answers_parseable"

MAX_EXAMPLES = 5
_counter = itertools.count()


@dataclass
class ExpectationResult:
    expectation: str  # GE's snake_case type, e.g. "expect_column_values_to_be_unique", or "verifier_parseable"
    column: str | None
    success: bool
    unexpected_count: int | None = None
    element_count: int | None = None
    observed: Any = None  # e.g. the row count for the table expectation
    examples: list[dict] = field(default_factory=list)
    error: str | None = None  # an exception GE raised while evaluating it
    kwargs: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation,
            "column": self.column,
            "success": self.success,
            "unexpected_count": self.unexpected_count,
            "element_count": self.element_count,
            "observed": self.observed,
            "examples": self.examples,
            "error": self.error,
            "kwargs": self.kwargs,
        }


@dataclass
class ValidationReport:
    success: bool
    results: list[ExpectationResult]
    rows: int
    seconds: float

    @property
    def failed(self) -> list[ExpectationResult]:
        return [r for r in self.results if not r.success]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (e.g. for Dagster ``MetadataValue.json``)."""
        return {
            "success": self.success,
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "failed": [f"{r.expectation}({r.column})" if r.column else r.expectation for r in self.failed],
            "results": [r.as_dict() for r in self.results],
        }

    def summary(self) -> str:
        if self.success:
            return f"all {len(self.results)} expectations passed on {self.rows} rows"
        parts = []
        for r in self.failed:
            what = f"{r.expectation}({r.column})" if r.column else r.expectation
            n = f"{r.unexpected_count} rows" if r.unexpected_count is not None else f"observed {r.observed!r}"
            ex = "; ".join(_short(e) for e in r.examples[:3])
            parts.append(f"{what}: {n}" + (f", e.g. {ex}" if ex else "") + (f" [{r.error}]" if r.error else ""))
        return f"{len(self.failed)} of {len(self.results)} expectations failed on {self.rows} rows: " + " | ".join(parts)

    def merged(self, other: ValidationReport) -> ValidationReport:
        return ValidationReport(self.success and other.success, self.results + other.results,
                                max(self.rows, other.rows), self.seconds + other.seconds)


def _short(example: dict) -> str:
    return ", ".join(f"{k}={str(v)[:60]!r}" if isinstance(v, str) else f"{k}={v}" for k, v in example.items())


@contextlib.contextmanager
def _quiet_ge():
    loggers = [logging.getLogger(n) for n in ("great_expectations", "great_expectations.core")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def validate_prepared(
    table: pa.Table, *, min_rows: int, max_rows: int | None, forbid_binary: bool
) -> ValidationReport:
    """Runs the expectation suite of the module docstring over a prepared table; never raises on bad data.
    ``max_rows=None``: no upper bound on the row count."""
    t0 = time.perf_counter()
    n = table.num_rows
    missing = [c for c in ("id", "problem", "answer") if c not in table.column_names]
    results: list[ExpectationResult] = []
    if missing:
        results.append(
            ExpectationResult("columns_present", None, False, observed=table.column_names,
                              examples=[{"missing": c} for c in missing], kwargs={"required": ["id", "problem", "answer"]})
        )
    with _quiet_ge():
        import great_expectations as gx
        import great_expectations.expectations as gxe

        expectations = []
        if not missing:
            for col in ("id", "problem", "answer"):
                expectations.append(gxe.ExpectColumnValuesToNotBeNull(column=col))
            expectations.append(gxe.ExpectColumnValuesToBeUnique(column="id"))
            for col in ("problem", "answer"):
                expectations.append(gxe.ExpectColumnValueLengthsToBeBetween(column=col, min_value=1))
                expectations.append(gxe.ExpectColumnValuesToMatchRegex(column=col, regex=r"\S"))
            if forbid_binary:
                expectations.append(
                    gxe.ExpectColumnValuesToNotBeInSet(column="answer_normalized", value_set=list(BINARY_PARTS))
                )
        expectations.append(gxe.ExpectTableRowCountToBeBetween(min_value=min_rows, max_value=max_rows))

        cols = [c for c in ("id", "problem", "answer") if c in table.column_names]
        df = table.select(cols).to_pandas()
        if forbid_binary and not missing:
            df["answer_normalized"] = [normalize_final_answer(a) for a in df["answer"]]
        ids = df["id"].tolist() if "id" in df else None

        ctx = _context()
        k = next(_counter)
        batch_def = (
            ctx.data_sources.add_pandas(f"prepared_{k}")
            .add_dataframe_asset(f"table_{k}")
            .add_batch_definition_whole_dataframe(f"whole_{k}")
        )
        batch = batch_def.get_batch(batch_parameters={"dataframe": df})
        suite = gx.ExpectationSuite(name=f"prepared_{k}")
        for e in expectations:
            suite.add_expectation(e)
        validation = batch.validate(
            suite, result_format={"result_format": "SUMMARY", "partial_unexpected_count": MAX_EXAMPLES}
        )
    for r in validation.results:
        results.append(_result_of(r, df, ids, forbid_binary))
    report = ValidationReport(all(r.success for r in results), results, n, time.perf_counter() - t0)
    log.info("validate_prepared: %s (%.2f s)", report.summary(), report.seconds)
    return report


def _result_of(r, df, ids, forbid_binary: bool) -> ExpectationResult:
    cfg = r.expectation_config
    kwargs = {k: v for k, v in dict(cfg.kwargs).items() if k not in ("batch_id", "column")}
    column = cfg.kwargs.get("column")
    res = dict(r.result or {})
    error = None
    info = r.exception_info or {}
    if info.get("raised_exception"):
        error = str(info.get("exception_message"))
    examples: list[dict] = []
    if not r.success:
        idx = res.get("partial_unexpected_index_list") or []
        values = res.get("partial_unexpected_list") or []
        if idx:
            for i in idx[:MAX_EXAMPLES]:
                ex: dict[str, Any] = {"row": int(i)}
                if ids is not None:
                    ex["id"] = ids[i]
                if column == "answer_normalized":
                    ex["answer"] = df["answer"].iat[i]
                ex["value"] = _jsonable(df[column].iat[i]) if column in df else None
                examples.append(ex)
        elif values:
            examples = [{"value": _jsonable(v)} for v in values[:MAX_EXAMPLES]]
        elif "observed_value" in res:
            examples = [{"observed_value": _jsonable(res["observed_value"]), **kwargs}]
    return ExpectationResult(
        expectation=cfg.type,
        column=column,
        success=bool(r.success),
        unexpected_count=res.get("unexpected_count"),
        element_count=res.get("element_count"),
        observed=_jsonable(res.get("observed_value")),
        examples=examples,
        error=error,
        kwargs={k: _jsonable(v) for k, v in kwargs.items()},
    )


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # pandas' NaN for a null cell; JSON has no NaN
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if hasattr(v, "item"):  # numpy scalars
        try:
            return _jsonable(v.item())
        except (ValueError, TypeError):
            pass
    return str(v)


def verifier_parseable(table: pa.Table, *, grader=None, workers: int | None = None) -> ValidationReport:
    """Every ``answer`` must parse as a gold for the grader (``MathGrader.check_gold``, after
    ``prepare.verifier_gold``); failing rows are reported like a GE expectation, with the grader's reason."""
    t0 = time.perf_counter()
    n = table.num_rows
    if "answer" not in table.column_names:
        res = ExpectationResult("verifier_parseable", "answer", False, observed=table.column_names,
                                examples=[{"missing": "answer"}])
        return ValidationReport(False, [res], n, time.perf_counter() - t0)
    answers = table.column("answer").to_pylist()
    ids = table.column("id").to_pylist() if "id" in table.column_names else None
    golds = [None if a is None else verifier_gold(a) for a in answers]
    verdicts = check_golds((g for g in golds if g is not None), grader, workers=workers)
    bad = [i for i, g in enumerate(golds) if g is None or verdicts[g] is not None]
    examples = []
    for i in bad[:MAX_EXAMPLES]:
        ex: dict[str, Any] = {"row": i}
        if ids is not None:
            ex["id"] = ids[i]
        ex["value"] = answers[i]
        ex["reason"] = "the answer is null" if golds[i] is None else verdicts[golds[i]]
        examples.append(ex)
    res = ExpectationResult("verifier_parseable", "answer", not bad, unexpected_count=len(bad), element_count=n,
                            observed={"distinct_golds": len(verdicts)}, examples=examples)
    report = ValidationReport(not bad, [res], n, time.perf_counter() - t0)
    log.info("verifier_parseable: %s (%.2f s)", report.summary(), report.seconds)
    return report


def split_by_check(report: ValidationReport, *, forbid_binary: bool) -> dict[str, ValidationReport]:
    """``validate_prepared``'s results grouped by the asset check they back (module docstring): keys
    ``CHECK_NON_EMPTY``, ``CHECK_UNIQUE_IDS``, ``CHECK_ROW_COUNT`` and, with ``forbid_binary``, ``CHECK_NO_BINARY``.
    Each group is a ValidationReport over the same rows; a group with no result at all fails (nothing was checked)."""
    column_checks = [CHECK_NON_EMPTY, CHECK_UNIQUE_IDS] + ([CHECK_NO_BINARY] if forbid_binary else [])
    groups: dict[str, list[ExpectationResult]] = {name: [] for name in [*column_checks, CHECK_ROW_COUNT]}
    for r in report.results:
        if r.expectation == "columns_present":
            targets = column_checks
        elif r.expectation == "expect_table_row_count_to_be_between":
            targets = [CHECK_ROW_COUNT]
        elif r.column == "id":
            targets = [CHECK_UNIQUE_IDS]
        elif r.column in ("problem", "answer"):
            targets = [CHECK_NON_EMPTY]
        elif r.column == "answer_normalized" and forbid_binary:
            targets = [CHECK_NO_BINARY]
        else:
            raise ValueError(f"split_by_check: no asset check takes the result {r.expectation}({r.column}); "
                             "add it to a group in pc_pipelines/data/expectations.py")
        for t in targets:
            groups[t].append(r)
    share = report.seconds / max(1, len(groups))
    return {
        name: ValidationReport(bool(rs) and all(r.success for r in rs), rs, report.rows, share)
        for name, rs in groups.items()
    }


def row_count_bounds(
    rows_in: int | None,
    *,
    min_kept_fraction: float,
    min_rows: int | None = None,
    max_rows: int | None = None,
) -> tuple[int, int | None]:
    """Bounds for ``ExpectTableRowCountToBeBetween``: ``min_rows`` / ``max_rows`` when given, else
    ``ceil(min_kept_fraction * rows_in)`` / ``rows_in`` (the rows read from the source file; ``rows_in=None``:
    unknown, then the lower bound is 1 and there is no upper bound). Raises ValueError on impossible bounds."""
    if not 0.0 <= min_kept_fraction <= 1.0:
        raise ValueError(f"min_kept_fraction={min_kept_fraction!r} must be within [0, 1] (e.g. 0.75)")
    if rows_in is not None and rows_in < 0:
        raise ValueError(f"rows_in={rows_in!r} must be >= 0")
    lo = min_rows if min_rows is not None else (math.ceil(min_kept_fraction * rows_in) if rows_in is not None else 1)
    hi = max_rows if max_rows is not None else rows_in
    if lo < 0 or (hi is not None and hi < lo):
        raise ValueError(
            f"row-count bounds [{lo}, {hi}] are empty (min_rows={min_rows}, max_rows={max_rows}, "
            f"min_kept_fraction={min_kept_fraction}, rows read from the source={rows_in}). Fix: set min_rows <= "
            "max_rows, both >= 0."
        )
    return lo, hi
