"""DeepMath preparation (pc_pipelines.data.deepmath) on small tables in its real schema: exact stats, a
quarantine reason per dropped row, a seeded held-out split, Parquet output."""

import json
import random
import re

import pyarrow.parquet as pq
import pytest
from deepmath_rows import KEPT_ROWS, ROWS, deepmath_records, write_jsonl

from pc_pipelines.data.deepmath import load_deepmath, prepare_deepmath
from pc_pipelines.data.prepare import (
    PREPARED_SCHEMA,
    QUARANTINE_SCHEMA,
    PreparedDataset,
    binary_part,
)
from pc_pipelines.data.readers import DatasetError


def test_deepmath_stats_are_exact(prepared):
    s = prepared.stats
    assert s["source"] == "deepmath"
    assert s["rows_in"] == 34
    assert s["kept"] == 24
    assert s["quarantined"] == 5
    assert s["quarantined_by_reason"] == {
        "empty_problem": 2,
        "empty_answer": 1,
        "duplicate_problem": 1,
        "unparsable_answer": 1,
    }
    assert s["binary_removed"] == 5
    assert s["binary_removed_by_part"] == {"yes": 2, "no": 1, "true": 1, "false": 1}
    assert s["rows_in"] == s["kept"] + s["quarantined"] + s["binary_removed"]
    assert (s["train"], s["heldout"], s["heldout_seed"]) == (19, 5, 0)
    assert s["answers_rewrapped"] == 1
    assert s["difficulty_unparsed"] == 0
    assert s["distinct_golds_checked"] == 24  # 24 kept rows hold 23 distinct golds ("2" twice), + "\frac{"
    json.dumps(s)  # JSON-able, for Dagster metadata


def test_deepmath_quarantine_reasons_per_row(prepared):
    q = prepared.quarantine
    assert q.schema == QUARANTINE_SCHEMA
    by_row = {r["row_index"]: r for r in q.to_pylist()}
    assert {i: r["reason"] for i, r in by_row.items()} == {
        5: "empty_problem",
        6: "empty_problem",
        7: "empty_answer",
        8: "duplicate_problem",
        9: "unparsable_answer",
    }
    assert by_row[8]["detail"].startswith("same problem as row 0 (kept), same answer")
    assert by_row[8]["id"] == prepared.rows.column("id")[0].as_py()
    assert "'\\\\frac{'" in by_row[9]["detail"] and "cannot be graded" in by_row[9]["detail"]
    assert by_row[9]["answer"] == "\\frac{" and by_row[9]["problem"] == "Simplify $\\frac{1}{2}$."
    assert by_row[5]["id"] is None and by_row[7]["answer"] == ""


def test_deepmath_kept_rows(prepared):
    rows = prepared.rows
    assert rows.schema == PREPARED_SCHEMA
    assert rows.column("row_index").to_pylist() == KEPT_ROWS
    ids = rows.column("id").to_pylist()
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"deepmath-[0-9a-f]{16}", i) for i in ids)
    # the id is a hash of the whitespace-collapsed problem: reproducible, independent of the row position
    import hashlib

    assert ids[0] == "deepmath-" + hashlib.sha256(b"What is $1+1$?").hexdigest()[:16]
    answers = rows.column("answer").to_pylist()
    assert answers[:3] == ["2", "\\boxed{\\$36}", "0"]
    assert rows.column("difficulty").to_pylist()[:3] == [1.0, 2.5, 1.0]
    assert set(rows.column("source").to_pylist()) == {"deepmath"}
    assert sorted(set(rows.column("split").to_pylist())) == ["heldout", "train"]
    binary = [r[1] for r in ROWS if binary_part(r[1])]
    assert not set(binary) & set(answers)


def test_heldout_is_seeded_and_independent_of_row_order(deepmath_table, prepared, grader):
    def held(p):
        return sorted(i for i, s in zip(p.rows.column("id").to_pylist(), p.rows.column("split").to_pylist())
                      if s == "heldout")

    again = prepare_deepmath(deepmath_table, heldout=5, seed=0, grader=grader)
    assert held(again) == held(prepared) and len(held(prepared)) == 5
    assert again.rows.equals(prepared.rows)
    other_seed = prepare_deepmath(deepmath_table, heldout=5, seed=1, grader=grader)
    assert held(other_seed) != held(prepared)
    order = list(range(deepmath_table.num_rows))
    random.Random(3).shuffle(order)
    shuffled = prepare_deepmath(deepmath_table.take(order), heldout=5, seed=0, grader=grader)
    assert held(shuffled) == held(prepared)
    none = prepare_deepmath(deepmath_table, heldout=0, grader=grader)
    assert set(none.rows.column("split").to_pylist()) == {"train"} and none.stats["heldout"] == 0


def test_heldout_larger_than_the_data_fails(deepmath_table, grader):
    with pytest.raises(DatasetError, match="heldout=500 but only 24 rows are kept"):
        prepare_deepmath(deepmath_table, grader=grader)  # default heldout=500
    with pytest.raises(DatasetError, match="heldout=-1"):
        prepare_deepmath(deepmath_table, heldout=-1, grader=grader)


def test_write_puts_rows_and_quarantine_in_their_own_parquet(prepared, tmp_path):
    paths = prepared.write(tmp_path / "out")
    assert pq.read_table(paths["rows"]).equals(prepared.rows)
    assert pq.read_table(paths["quarantine"]).equals(prepared.quarantine)
    assert json.loads(paths["stats"].read_text()) == prepared.stats
    assert paths["quarantine"].name == "deepmath.quarantine.parquet"
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_prepare_from_files_on_disk(tmp_path, grader):
    path = write_jsonl(tmp_path / "deepmath.jsonl", deepmath_records())
    p = prepare_deepmath(load_deepmath(path), heldout=5, grader=grader)
    assert isinstance(p, PreparedDataset)
    assert p.stats["kept"] == 24 and p.stats["binary_removed"] == 5
