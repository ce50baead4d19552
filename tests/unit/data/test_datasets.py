"""DeepMath / Polaris loading and preparation (pc_pipelines.data.deepmath, .polaris, and the shared .readers and
.prepare) on small files in the real schemas."""

import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pc_pipelines.data.deepmath import load_deepmath, prepare_deepmath
from pc_pipelines.data.polaris import load_polaris, prepare_polaris
from pc_pipelines.data.prepare import (
    PREPARED_SCHEMA,
    QUARANTINE_SCHEMA,
    PreparedDataset,
    binary_part,
    check_golds,
    normalize_final_answer,
    verifier_gold,
)
from pc_pipelines.data.prepared_task import to_task_data
from pc_pipelines.data.readers import DatasetError, load_table

TEMPLATE = "{question} Let's think step by step and output the final answer within \\boxed{{}}."

# (question, final_answer, difficulty) and what should happen to the row.
SPECIAL = [
    ("What is $1+1$?", "2", 1.0),  # 0 kept
    ("Is 7 prime?", "Yes", 2.0),  # 1 binary yes
    ("Is 9 prime?", "$\\text{No}$", 2.0),  # 2 binary no
    ("Is $0 < 1$?", "\\boxed{True}", 3.0),  # 3 binary true
    ("Is $2 < 1$?", "false.", 3.0),  # 4 binary false
    ("", "3", 1.0),  # 5 empty problem
    ("   \n", "4", 1.0),  # 6 empty problem (blank)
    ("Compute $2 \\cdot 3$.", "", 4.0),  # 7 empty answer
    ("What is   $1+1$? ", "2", 1.0),  # 8 duplicate of row 0 (whitespace differs)
    ("Simplify $\\frac{1}{2}$.", "\\frac{", 5.0),  # 9 unparsable gold
    ("Is 4 even?", "\\text{Yes}", 1.5),  # 10 binary yes
    ("How much does it cost?", "\\$36", 2.5),  # 11 kept, gold wrapped in \boxed{}
]
GOOD = [(f"What is {i} + {i}?", str(2 * i), 1.0 + i / 4) for i in range(22)]  # rows 12..33, all kept
ROWS = SPECIAL + GOOD
KEPT_ROWS = [0, 11, *range(12, 34)]


def deepmath_records(rows=ROWS):
    return [
        {
            "question": q,
            "final_answer": a,
            "difficulty": d,
            "topic": "Mathematics -> Algebra",
            "r1_solution_1": f"... \\boxed{{{a}}}",
            "r1_solution_2": "...",
            "r1_solution_3": "...",
        }
        for q, a, d in rows
    ]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def deepmath_table():
    return pa.Table.from_pylist(deepmath_records())


@pytest.fixture(scope="module")
def prepared(deepmath_table, grader):
    return prepare_deepmath(deepmath_table, heldout=5, seed=0, grader=grader)


# ---------------------------------------------------------------------------------------------------------------
# The binary rule
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, normalized, part",
    [
        ("Yes", "yes", "yes"),
        ("$\\text{No}$", "no", "no"),
        ("\\boxed{True}", "true", "true"),
        ("false.", "false", "false"),
        ("  \\boxed{\\text{ YES }}  ", "yes", "yes"),
        ("$\\boxed{\\text{False}}$!", "false", "false"),
        ("No solution", "no solution", None),
        ("Yes, for n = 2", "yes for n 2", None),
        ("\\textbf{Yes}", "textbfyes", None),  # only \text{} and \boxed{} are unwrapped (the paper's rule)
        ("Not", "not", None),
        ("\\frac{1}{2}", "frac12", None),
        ("", "", None),
        (None, "", None),
        (1, "1", None),
    ],
)
def test_normalize_final_answer_and_binary_part(answer, normalized, part):
    assert normalize_final_answer(answer) == normalized
    assert binary_part(answer) == part


def test_verifier_gold_wraps_only_escaped_dollar_golds():
    assert verifier_gold("  \\$36 ") == "\\boxed{\\$36}"
    assert verifier_gold("\\$32,\\!348") == "\\boxed{\\$32,\\!348}"
    assert verifier_gold("$\\$5$") == "$\\$5$"  # real delimiters: as is
    assert verifier_gold("\\boxed{\\$5}") == "\\boxed{\\$5}"
    assert verifier_gold(" 7 ") == "7"


# ---------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------


def _as_rows(table):
    return list(zip(table.column("question").to_pylist(), table.column("final_answer").to_pylist()))


def test_every_local_format_loads_the_same_rows(tmp_path):
    import datasets

    records = deepmath_records()
    expected = [(r["question"], r["final_answer"]) for r in records]
    table = pa.Table.from_pylist(records)

    pq.write_table(table, tmp_path / "deepmath.parquet")
    shards = tmp_path / "snapshot" / "data"
    shards.mkdir(parents=True)
    pq.write_table(table.slice(0, 10), shards / "train-00000-of-00002.parquet")
    pq.write_table(table.slice(10), shards / "train-00001-of-00002.parquet")
    write_jsonl(tmp_path / "deepmath.jsonl", records)
    (tmp_path / "deepmath_array.json").write_text(json.dumps(records))
    ds = datasets.Dataset.from_list(records)
    ds.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(str(tmp_path / "saved_dict"))
    cache = tmp_path / "hf_cache" / "zwhe99___deep_math-103_k" / "default" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    for split, t in (("train", table), ("test", table.slice(0, 2))):
        with pa.OSFile(str(cache / f"deep_math-103_k-{split}.arrow"), "wb") as sink, pa.ipc.new_stream(
            sink, t.schema
        ) as writer:
            writer.write_table(t)

    for path in (
        tmp_path / "deepmath.parquet",
        tmp_path / "snapshot",
        tmp_path / "deepmath.jsonl",
        tmp_path / "deepmath_array.json",
        tmp_path / "saved",
        tmp_path / "saved_dict",
        tmp_path / "hf_cache",
    ):
        loaded = load_deepmath(path)
        assert loaded.column_names == ["question", "final_answer", "difficulty"], path
        assert _as_rows(loaded) == expected, path
        assert loaded.column("difficulty").to_pylist()[:3] == [1.0, 2.0, 2.0], path

    full = load_table(tmp_path / "deepmath.parquet")  # no projection: every column
    assert "r1_solution_3" in full.column_names and full.num_rows == len(records)


def test_unconfigured_path_says_how_to_provide_it():
    for path in (None, "", "   "):
        with pytest.raises(DatasetError) as e:
            load_deepmath(path)
        msg = str(e.value)
        for needle in ("DeepMath-103K", "`deepmath_path`", "data", "Parquet", "JSONL", "save_to_disk",
                       "Nothing is downloaded", "zwhe99/DeepMath-103K"):
            assert needle in msg, needle
    with pytest.raises(DatasetError, match="`polaris_path`"):
        load_polaris(None)


def test_missing_path_names_it(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_polaris(tmp_path / "nope.parquet")
    assert "nope.parquet" in str(e.value) and "does not exist" in str(e.value) and "polaris_path" in str(e.value)


def test_missing_columns_are_named_with_the_columns_found(tmp_path):
    pq.write_table(pa.table({"problem": ["1+1?"], "answer": ["2"], "difficulty": ["1/8"]}), tmp_path / "p.parquet")
    with pytest.raises(DatasetError) as e:
        load_deepmath(tmp_path / "p.parquet")
    msg = str(e.value)
    assert "['question', 'final_answer']" in msg and "columns found: ['problem', 'answer', 'difficulty']" in msg
    assert str(tmp_path / "p.parquet") in msg
    with pytest.raises(DatasetError, match="final_answer"):
        prepare_deepmath(pa.table({"question": ["q"], "difficulty": [1.0]}))


def test_unsupported_files_and_empty_dirs_fail_clearly(tmp_path):
    (tmp_path / "data.csv").write_text("question,final_answer\n")
    with pytest.raises(DatasetError, match="neither Parquet"):
        load_deepmath(tmp_path / "data.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="holds no Parquet"):
        load_deepmath(tmp_path / "empty")


def test_bad_jsonl_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(deepmath_records()[0]) + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl, line 2: not valid JSON"):
        load_deepmath(path)


def test_jsonl_with_mixed_answer_types_and_dates_keeps_text(tmp_path):
    rows = [
        {"problem": "p1", "answer": 12, "difficulty": "7/8"},
        {"problem": "p2", "answer": "\\frac{1}{2}", "difficulty": "1/8"},
        {"problem": "p3", "answer": 2.0, "difficulty": "8/8"},
    ]
    t = load_polaris(write_jsonl(tmp_path / "mixed.jsonl", rows))
    assert t.column("answer").to_pylist() == ["12", "\\frac{1}{2}", "2"]
    dated = load_table(write_jsonl(tmp_path / "dated.jsonl", [{"problem": "When?", "answer": "2021-01-01"}]))
    assert dated.column("answer").to_pylist() == ["2021-01-01"]


# ---------------------------------------------------------------------------------------------------------------
# DeepMath preparation
# ---------------------------------------------------------------------------------------------------------------


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


def test_to_task_data(prepared):
    task = to_task_data(prepared, TEMPLATE)
    rows = prepared.rows.to_pylist()
    train = [r for r in rows if r["split"] == "train"]
    held = [r for r in rows if r["split"] == "heldout"]
    assert len(task.prompts) == len(task.golds) == 19
    assert task.prompts[0] == TEMPLATE.format(question=train[0]["problem"])
    assert task.prompts[0].startswith("What is $1+1$? Let's think step by step") and task.prompts[0].endswith(
        "\\boxed{}."
    )
    assert task.golds == [r["answer"] for r in train]
    assert [e.name for e in task.eval_sets] == ["heldout"]
    assert task.eval_sets[0].golds == [r["answer"] for r in held]
    bench = pa.table({"problem": ["1+2?"], "answer": ["3"]})
    task2 = to_task_data(prepared.rows, TEMPLATE, eval_name="deepmath_heldout", eval_tables={"aime24": bench})
    assert [e.name for e in task2.eval_sets] == ["deepmath_heldout", "aime24"]
    assert task2.eval_sets[1].prompts == [TEMPLATE.format(question="1+2?")]
    with pytest.raises(ValueError, match="placeholder"):
        to_task_data(prepared, "no placeholder")


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


# ---------------------------------------------------------------------------------------------------------------
# Polaris
# ---------------------------------------------------------------------------------------------------------------


def test_polaris_difficulty_and_stats(tmp_path, grader):
    rows = [
        {"problem": "Find $x$ if $2x = 14$.", "answer": "7", "difficulty": "7/8"},
        {"problem": "Compute $3^2$.", "answer": "9", "difficulty": "8/8"},
        {"problem": "Is 5 odd?", "answer": "Yes", "difficulty": "0/8"},  # no binary filter for Polaris
        {"problem": "Sum of roots of $x^2-5x+6$?", "answer": "5", "difficulty": "hard"},  # kept, null
        {"problem": "Area of a unit circle?", "answer": "\\pi", "difficulty": None},
        {"problem": "Half of 1?", "answer": "\\frac{1}{2}", "difficulty": " 3 / 4 "},
        {"problem": "Bad gold", "answer": "\\frac{", "difficulty": "1/8"},
        {"problem": "Compute $3^2$.", "answer": "9", "difficulty": "8/8"},  # duplicate
        {"problem": "Ratio by zero?", "answer": "1", "difficulty": "1/0"},  # kept, null
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "polaris.parquet")
    p = prepare_polaris(load_polaris(tmp_path / "polaris.parquet"), grader=grader)
    assert p.rows.column("difficulty").to_pylist() == [0.875, 1.0, 0.0, None, None, 0.75, None]
    assert p.rows.column("answer").to_pylist() == ["7", "9", "Yes", "5", "\\pi", "\\frac{1}{2}", "1"]
    assert set(p.rows.column("split").to_pylist()) == {"train"}
    s = p.stats
    assert (s["rows_in"], s["kept"], s["quarantined"], s["difficulty_unparsed"]) == (9, 7, 2, 2)
    assert s["quarantined_by_reason"] == {"empty_problem": 0, "empty_answer": 0, "duplicate_problem": 1,
                                          "unparsable_answer": 1}
    assert "binary_removed" not in s and (s["train"], s["heldout"]) == (7, 0)
    assert all(i.startswith("polaris-") for i in p.rows.column("id").to_pylist())
    task = to_task_data(p, TEMPLATE)
    assert len(task.prompts) == 7 and task.eval_sets == []
    held = prepare_polaris(load_polaris(tmp_path / "polaris.parquet"), heldout=2, seed=5, grader=grader)
    assert held.stats["heldout"] == 2 and held.rows.column("split").to_pylist().count("heldout") == 2


# ---------------------------------------------------------------------------------------------------------------
# Gold checks
# ---------------------------------------------------------------------------------------------------------------


def test_check_golds_in_process_and_with_worker_processes():
    golds = ["1", "\\frac{1}{2}", "\\frac{", "x^2+1", "1", "(1, 2)", "\\$5", "\\boxed{}"]
    forms: dict = {}
    one = check_golds(golds, workers=1, forms=forms)
    assert list(one) == ["1", "\\frac{1}{2}", "\\frac{", "x^2+1", "(1, 2)", "\\$5", "\\boxed{}"]
    # a bare escaped dollar parses to nothing as written; normalized (currency dropped) it is graded as 5
    assert {g for g, why in one.items() if why} == {"\\frac{", "\\boxed{}"}
    assert forms == {"\\$5": "5"}
    assert "cannot be graded" in one["\\frac{"]
    forms2: dict = {}
    two = check_golds(golds, workers=2, forms=forms2)
    assert {g: why is None for g, why in two.items()} == {g: why is None for g, why in one.items()}
    assert forms2 == forms
    with pytest.raises(ValueError, match="workers"):
        check_golds(golds, workers=0)
