"""How validation reports become Dagster asset checks: split_by_check and row_count_bounds
(pc_pipelines.data.expectations)."""


import pyarrow as pa
import pytest
from prepared_tables import table

from pc_pipelines.data.expectations import (
    CHECK_NO_BINARY,
    CHECK_NON_EMPTY,
    CHECK_ROW_COUNT,
    CHECK_UNIQUE_IDS,
    ExpectationResult,
    ValidationReport,
    row_count_bounds,
    split_by_check,
    validate_prepared,
)


def test_each_check_gets_its_own_failures():
    t = table(["a", "b", "b", "c"], ["p1", "p2", "p3", " "], ["1", "No", "3", "4"])
    report = validate_prepared(t, min_rows=5, max_rows=None, forbid_binary=True)
    parts = split_by_check(report, forbid_binary=True)
    assert list(parts) == [CHECK_NON_EMPTY, CHECK_UNIQUE_IDS, CHECK_NO_BINARY, CHECK_ROW_COUNT]
    assert {k: v.success for k, v in parts.items()} == dict.fromkeys(parts, False)
    assert sum(len(v.results) for v in parts.values()) == len(report.results)  # each result in exactly one check
    assert [(e["row"], e["id"]) for e in parts[CHECK_UNIQUE_IDS].failed[0].examples] == [(1, "b"), (2, "b")]
    [blank] = parts[CHECK_NON_EMPTY].failed  # the regex expectation; length >= 1 passes " "
    assert blank.column == "problem" and blank.examples[0]["id"] == "c"
    assert parts[CHECK_NO_BINARY].failed[0].examples[0]["answer"] == "No"
    assert parts[CHECK_ROW_COUNT].results[0].observed == 4
    assert all(v.rows == 4 for v in parts.values())


def test_good_table_passes_and_without_forbid_binary_there_is_no_binary_check():
    t = table(["a", "b"], ["p1", "p2"], ["Yes", "2"])
    parts = split_by_check(validate_prepared(t, min_rows=2, max_rows=2, forbid_binary=False), forbid_binary=False)
    assert list(parts) == [CHECK_NON_EMPTY, CHECK_UNIQUE_IDS, CHECK_ROW_COUNT]
    assert all(v.success for v in parts.values())
    assert len(parts[CHECK_NON_EMPTY].results) == 6 and len(parts[CHECK_UNIQUE_IDS].results) == 2


def test_missing_columns_fail_every_column_check_not_vacuously_pass():
    t = pa.table({"id": ["a"], "problem": ["p"]})
    parts = split_by_check(validate_prepared(t, min_rows=1, max_rows=10, forbid_binary=True), forbid_binary=True)
    assert not parts[CHECK_NON_EMPTY].success and not parts[CHECK_UNIQUE_IDS].success
    assert not parts[CHECK_NO_BINARY].success
    assert parts[CHECK_NO_BINARY].results[0].examples == [{"missing": "answer"}]
    assert parts[CHECK_ROW_COUNT].success


def test_an_unknown_expectation_is_an_error_not_a_silent_drop():
    report = ValidationReport(True, [ExpectationResult("expect_something_new", "difficulty", True)], 1, 0.0)
    with pytest.raises(ValueError, match="no asset check takes the result expect_something_new"):
        split_by_check(report, forbid_binary=False)


def test_row_count_bounds():
    assert row_count_bounds(103_110, min_kept_fraction=0.75) == (77_333, 103_110)
    assert row_count_bounds(540, min_kept_fraction=0.75) == (405, 540)
    assert row_count_bounds(103_110, min_kept_fraction=0.75, min_rows=80_000, max_rows=90_000) == (80_000, 90_000)
    assert row_count_bounds(None, min_kept_fraction=0.75) == (1, None)  # no stats: at least one row
    assert row_count_bounds(None, min_kept_fraction=0.75, max_rows=5) == (1, 5)
    with pytest.raises(ValueError, match=r"bounds \[10, 5\] are empty"):
        row_count_bounds(100, min_kept_fraction=0.5, min_rows=10, max_rows=5)
    with pytest.raises(ValueError, match="min_kept_fraction"):
        row_count_bounds(100, min_kept_fraction=1.5)
