"""Great Expectations validators of prepared datasets (pc_pipelines.data.expectations)."""

import json
import time

import pyarrow as pa
import pytest
from prepared_tables import table

from pc_pipelines.data.deepmath import prepare_deepmath
from pc_pipelines.data.expectations import (
    ValidationReport,
    validate_prepared,
    verifier_parseable,
)
from pc_pipelines.data.prepare import PREPARED_SCHEMA


@pytest.fixture(scope="module")
def good(grader):
    rows = [{"question": f"What is {i} * 3?", "final_answer": str(3 * i), "difficulty": 2.0} for i in range(40)]
    rows += [{"question": "Is 3 odd?", "final_answer": "$\\text{Yes}$", "difficulty": 1.0}]
    return prepare_deepmath(pa.Table.from_pylist(rows), heldout=4, grader=grader).rows


def by_name(report: ValidationReport):
    return {(r.expectation, r.column): r for r in report.results}


def test_good_prepared_data_passes(good, grader, capfd):
    assert good.schema == PREPARED_SCHEMA and good.num_rows == 40
    report = validate_prepared(good, min_rows=10, max_rows=100, forbid_binary=True)
    assert report.success, report.summary()
    assert report.rows == 40 and report.failed == []
    names = set(by_name(report))
    assert {
        ("expect_column_values_to_not_be_null", "id"),
        ("expect_column_values_to_be_unique", "id"),
        ("expect_column_value_lengths_to_be_between", "problem"),
        ("expect_column_value_lengths_to_be_between", "answer"),
        ("expect_column_values_to_not_be_in_set", "answer_normalized"),
        ("expect_table_row_count_to_be_between", None),
    } <= names
    assert report.summary() == f"all {len(report.results)} expectations passed on 40 rows"
    parse = verifier_parseable(good, grader=grader)
    assert parse.success and parse.results[0].unexpected_count == 0
    err = capfd.readouterr().err
    assert "Calculating Metrics" not in err  # GE's progress bars are off


def test_bad_data_fails_with_examples(grader):
    t = table(
        ids=["a", "b", "b", "c", "d", "e", "f"],
        problems=["p1", "p2", "p3", None, "p5", "   ", "p7"],
        answers=["1", "2", "3", "4", "", "$\\text{No}$", "\\boxed{True}"],
    )
    report = validate_prepared(t, min_rows=10, max_rows=100, forbid_binary=True)
    assert not report.success
    r = by_name(report)
    unique = r[("expect_column_values_to_be_unique", "id")]
    assert not unique.success and unique.unexpected_count == 2
    assert unique.examples == [{"row": 1, "id": "b", "value": "b"}, {"row": 2, "id": "b", "value": "b"}]
    nulls = r[("expect_column_values_to_not_be_null", "problem")]
    assert nulls.examples == [{"row": 3, "id": "c", "value": None}]
    blank_problem = r[("expect_column_values_to_match_regex", "problem")]
    assert [e["row"] for e in blank_problem.examples] == [5]
    empty_answer = r[("expect_column_value_lengths_to_be_between", "answer")]
    assert empty_answer.examples == [{"row": 4, "id": "d", "value": ""}]
    binary = r[("expect_column_values_to_not_be_in_set", "answer_normalized")]
    assert binary.unexpected_count == 2
    assert binary.examples == [
        {"row": 5, "id": "e", "answer": "$\\text{No}$", "value": "no"},
        {"row": 6, "id": "f", "answer": "\\boxed{True}", "value": "true"},
    ]
    count = r[("expect_table_row_count_to_be_between", None)]
    assert not count.success and count.observed == 7
    assert count.examples == [{"observed_value": 7, "min_value": 10, "max_value": 100}]
    assert r[("expect_column_values_to_be_unique", "id")].kwargs == {}
    assert r[("expect_column_values_to_not_be_null", "answer")].success
    d = report.as_dict()
    json.dumps(d, allow_nan=False)  # plain JSON for Dagster metadata
    assert "expect_column_values_to_be_unique(id)" in d["failed"]
    assert "row=1, id='b'" in report.summary()

    # Without forbid_binary the binary answers are fine (Polaris).
    polaris = by_name(validate_prepared(t, min_rows=1, max_rows=100, forbid_binary=False))
    assert ("expect_column_values_to_not_be_in_set", "answer_normalized") not in polaris
    assert polaris[("expect_table_row_count_to_be_between", None)].success


def test_examples_are_capped_at_five():
    t = table(ids=["x"] * 12, problems=[f"p{i}" for i in range(12)], answers=["1"] * 12)
    unique = by_name(validate_prepared(t, min_rows=1, max_rows=100, forbid_binary=False))[
        ("expect_column_values_to_be_unique", "id")
    ]
    assert unique.unexpected_count == 12 and len(unique.examples) == 5


def test_missing_columns_fail_without_raising():
    report = validate_prepared(pa.table({"id": ["a"], "question": ["q"]}), min_rows=1, max_rows=10,
                               forbid_binary=True)
    assert not report.success
    first = report.results[0]
    assert first.expectation == "columns_present" and first.examples == [{"missing": "problem"},
                                                                          {"missing": "answer"}]
    assert by_name(report)[("expect_table_row_count_to_be_between", None)].success


def test_verifier_parseable_reports_bad_golds(grader):
    t = table(ids=["a", "b", "c", "d"], problems=["p"] * 4, answers=["\\frac{1}{2}", "\\frac{", "\\$36", "2"])
    report = verifier_parseable(t, grader=grader)
    assert not report.success
    (res,) = report.results
    assert (res.expectation, res.column, res.unexpected_count, res.element_count) == ("verifier_parseable", "answer",
                                                                                      1, 4)
    assert len(res.examples) == 1
    ex = res.examples[0]
    assert (ex["row"], ex["id"], ex["value"]) == (1, "b", "\\frac{")
    assert "cannot be graded" in ex["reason"]
    merged = validate_prepared(t, min_rows=1, max_rows=10, forbid_binary=True).merged(report)
    assert not merged.success and merged.failed == [res]
    json.dumps(merged.as_dict(), allow_nan=False)


def test_hundred_thousand_rows_validate_in_seconds():
    n = 100_000
    t = table(
        ids=[f"deepmath-{i:016x}" for i in range(n)],
        problems=[f"What is {i} + {i}? Give the exact value." for i in range(n)],
        answers=[str(2 * i) for i in range(n)],
    )
    validate_prepared(t.slice(0, 10), min_rows=1, max_rows=10, forbid_binary=True)  # GE import, warm-up
    t0 = time.perf_counter()
    report = validate_prepared(t, min_rows=90_000, max_rows=110_000, forbid_binary=True)
    elapsed = time.perf_counter() - t0
    assert report.success, report.summary()
    assert elapsed < 20, elapsed  # ~0.7 s measured on a shared 2-core VM
