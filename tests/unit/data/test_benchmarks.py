"""Benchmark adapters (pc_pipelines.data.benchmarks): the six real files, and small files for the error paths."""

import json
from pathlib import Path

import pytest

from pc_pipelines.data.benchmarks import (
    BENCHMARKS,
    load_benchmarks,
    prepare_benchmark,
    prepare_benchmarks,
)
from pc_pipelines.data.datasets import PREPARED_SCHEMA, DatasetError
from pc_pipelines.rewards import MathGrader, extract_boxed

REAL_DIR = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "benchmarks"
README_ROWS = {"aime24": 30, "aime25": 30, "amc23": 40, "math500": 500, "minerva_math": 272, "olympiadbench": 675}
# Golds math-verify cannot parse (measured on the shipped files; see the module docstring and the report).
UNPARSABLE = {"aime24": 0, "aime25": 0, "amc23": 0, "math500": 0, "minerva_math": 6, "olympiadbench": 4}

# The project is always checked out with ../shared beside it (CI too): a missing directory is a failure, not a skip.
needs_real = pytest.mark.usefixtures("real_dir_present")


@pytest.fixture
def real_dir_present():
    assert REAL_DIR.is_dir(), f"benchmark files not present at {REAL_DIR}: check out ../shared beside the project"


@pytest.fixture(scope="module")
def grader():
    return MathGrader()


@pytest.fixture(scope="module")
def real(grader):
    return prepare_benchmarks(REAL_DIR, grader=grader)


def _raw(name):
    return [json.loads(line) for line in (REAL_DIR / name / "test.jsonl").read_text().splitlines() if line.strip()]


@needs_real
def test_all_six_load_with_the_readme_row_counts(real):
    assert list(real) == list(BENCHMARKS) == list(README_ROWS)
    for name, p in real.items():
        s = p.stats
        assert s["rows_in"] == README_ROWS[name] == s["expected_rows"], name
        assert s["kept"] + s["quarantined"] == s["rows_in"], name
        assert s["quarantined_by_reason"]["unparsable_answer"] == UNPARSABLE[name], name
        assert s["quarantined"] == UNPARSABLE[name], name  # nothing else is wrong with the shipped files
        rows = p.rows
        assert rows.schema == PREPARED_SCHEMA
        assert set(rows.column("source").to_pylist()) == {name}
        assert set(rows.column("split").to_pylist()) == {"eval"}
        ids = rows.column("id").to_pylist()
        assert len(set(ids)) == len(ids) and ids[0] == f"{name}-0"
        assert all(a.strip() for a in rows.column("answer").to_pylist())


@needs_real
def test_answer_adapters(real):
    def answers(name):
        return real[name].rows.column("answer").to_pylist()

    assert answers("aime24") == [str(r["answer"]).strip() for r in _raw("aime24")]
    assert answers("aime25")[:2] == ["70", "588"]  # JSON ints
    assert answers("amc23")[0] == "27"  # 27.0
    assert all("." not in a for a in answers("amc23"))  # every AMC23 float is integral
    math500 = _raw("math500")
    assert answers("math500")[0] == math500[0]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert real["math500"].rows.column("difficulty").to_pylist()[:2] == [2.0, 5.0]  # MATH level
    assert real["math500"].stats["answers_rewrapped"] == 3
    assert "\\boxed{\\$18.90}" in answers("math500")  # an escaped-dollar gold, made gradable
    minerva = _raw("minerva_math")
    assert answers("minerva_math")[:2] == [extract_boxed(minerva[0]["solution"]), extract_boxed(minerva[1]["solution"])]
    assert answers("minerva_math")[:2] == ["1.6", "4.5e33"]
    olympiad = real["olympiadbench"].rows
    assert olympiad.column("problem")[0].as_py() == _raw("olympiadbench")[0]["question"]
    assert olympiad.column("answer").to_pylist()[:2] == ["2", "$\\frac{1}{2 n+2}$"]
    assert "$69$,$84$" in olympiad.column("answer").to_pylist()  # a multiple-answer row, one list element


@needs_real
def test_quarantined_benchmark_rows_name_their_gold(real):
    q = real["minerva_math"].quarantine.to_pylist()
    assert [r["row_index"] for r in q] == [5, 27, 38, 49, 72, 269]
    assert q[0]["answer"] == "np.arcsin(10/13)" and q[0]["id"] == "minerva_math-5"
    assert {r["reason"] for r in q} == {"unparsable_answer"}
    percent = [r["answer"] for r in real["olympiadbench"].quarantine.to_pylist()]
    assert "62.5%" in percent and "17.5%" in percent


@needs_real
def test_load_benchmarks_returns_the_kept_rows(real, grader):
    tables = load_benchmarks(REAL_DIR, ["amc23", "minerva_math"], grader=grader)
    assert list(tables) == ["amc23", "minerva_math"]
    assert tables["amc23"].equals(real["amc23"].rows)
    assert tables["minerva_math"].num_rows == 272 - 6


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_benchmarks(tmp_path, ["aime24", "gsm8k"])
    assert "['gsm8k']" in str(e.value) and "olympiadbench" in str(e.value)


def test_missing_directory_says_how_to_configure_it(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_benchmarks(tmp_path / "nowhere")
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "benchmarks_dir" in msg and "nothing is downloaded" in msg


def test_missing_file_names_the_expected_path(tmp_path):
    (tmp_path / "aime24").mkdir()
    with pytest.raises(DatasetError) as e:
        prepare_benchmark(tmp_path, "aime25")
    assert str(tmp_path / "aime25" / "test.jsonl") in str(e.value) and "benchmarks_dir" in str(e.value)


def _write(d, name, rows):
    (d / name).mkdir(parents=True, exist_ok=True)
    (d / name / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_small_files_quarantine_bad_rows(tmp_path, grader):
    _write(tmp_path, "aime25", [
        {"problem": "p0", "answer": 70, "id": "0"},
        {"problem": "", "answer": 5, "id": "1"},
        {"problem": "p2", "answer": None, "id": "2"},
    ])
    _write(tmp_path, "minerva_math", [
        {"problem": "m0", "solution": "so \\boxed{3.5}.", "type": "x", "idx": 0},
        {"problem": "m1", "solution": "no box here", "type": "x", "idx": 1},
        {"problem": "m2", "solution": "bad \\boxed{\\frac{}", "type": "x", "idx": 2},  # never closed
        {"problem": "m3", "solution": "\\boxed{62.5%}", "type": "x", "idx": 3},
    ])
    _write(tmp_path, "olympiadbench", [
        {"id": 1, "question": "q0", "final_answer": ["$1$", "$2$"], "is_multiple_answer": True},
        {"id": 2, "question": "q1", "final_answer": [], "is_multiple_answer": False},
    ])
    out = prepare_benchmarks(tmp_path, ["aime25", "minerva_math", "olympiadbench"], grader=grader)
    aime = out["aime25"]
    assert aime.rows.column("answer").to_pylist() == ["70"]
    assert [(r["row_index"], r["reason"]) for r in aime.quarantine.to_pylist()] == [(1, "empty_problem"),
                                                                                    (2, "empty_answer")]
    assert aime.stats["expected_rows"] == 30 and aime.stats["rows_in"] == 3
    minerva = out["minerva_math"]
    assert minerva.rows.column("answer").to_pylist() == ["3.5"]
    assert [(r["row_index"], r["reason"]) for r in minerva.quarantine.to_pylist()] == [
        (1, "empty_answer"), (2, "empty_answer"), (3, "unparsable_answer")]
    olympiad = out["olympiadbench"]
    assert olympiad.rows.column("answer").to_pylist() == ["$1$, $2$"]  # list elements joined with ", "
    assert olympiad.quarantine.column("reason").to_pylist() == ["empty_answer"]


def test_wrong_problem_field_is_reported(tmp_path):
    _write(tmp_path, "olympiadbench", [{"problem": "q", "final_answer": ["1"]}])
    with pytest.raises(DatasetError, match="no 'question' field"):
        prepare_benchmark(tmp_path, "olympiadbench")
