"""Benchmark adapters (pc_pipelines.data.evaluation_sets): the six real files shipped in the package, their sha256 check,
and small files for the error paths."""

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from pc_pipelines.data.evaluation_sets import (
    BENCHMARK_SPECS,
    BENCHMARKS,
    EVAL_SETS_DIR,
    load_benchmarks,
    prepare_benchmark,
    prepare_benchmarks,
)
from pc_pipelines.data.prepare import PREPARED_SCHEMA
from pc_pipelines.data.readers import DatasetError
from pc_pipelines.rewards import extract_boxed, math_reward

REAL_DIR = EVAL_SETS_DIR
README_ROWS = {"aime24": 30, "aime25": 30, "amc23": 40, "math500": 500, "minerva_math": 272, "olympiadbench": 675}
# Golds math-verify cannot parse as written (measured on the shipped files), kept once normalized.
NORMALIZED = {"aime24": 0, "aime25": 0, "amc23": 0, "math500": 0, "minerva_math": 6, "olympiadbench": 4}
# The 10 formerly quarantined golds: (benchmark, row, gold in the file, normalized gold, a correct and a wrong answer).
FORMERLY_QUARANTINED = [
    ("minerva_math", 5, "np.arcsin(10/13)", "\\arcsin(10/13)", "\\arcsin(\\frac{10}{13})", "\\arcsin(3/13)"),
    ("minerva_math", 27, "\\frac{dM}{dt}=\\frac{10^{5} L_{\\odot}}{0.007 c^{2} M_{\\odot}^{6}} M^{6}",
     "\\frac{10^{5} L_{odot}}{0.007 c^{2} M_{odot}^{6}} M^{6}",
     "\\frac{10^{5} L_{\\odot}}{0.007 c^{2} M_{\\odot}^{6}} M^{6}", "\\frac{10^{5} L_{\\odot}}{0.007 c^{2} M_{\\odot}^{6}} M^{5}"),
    ("minerva_math", 38, "-1./3", "-1/3", "-\\frac{1}{3}", "\\frac{1}{3}"),
    ("minerva_math", 49, "-3./2", "-3/2", "-1.5", "-\\frac{2}{3}"),
    ("minerva_math", 72, "x_{0} \\cos (\\omega t)+$ $\\dot{x}_{0} \\sin (\\omega t) / \\omega",
     "x_{0} \\cos (\\omega t)+ \\dot{x}_{0} \\sin (\\omega t) / \\omega",
     "x_0\\cos(\\omega t)+\\frac{\\dot{x}_0}{\\omega}\\sin(\\omega t)", "x_0\\sin(\\omega t)"),
    ("minerva_math", 269, "E_{1},E_{2}", "\\mathrm{E}_{1},\\mathrm{E}_{2}", "E_1, E_2", "E_1, E_3"),
    ("olympiadbench", 34, "$m_{\\max }=n^{2}-n-1$", "n^{2}-n-1", "n^2-n-1", "n^2-n"),
    ("olympiadbench", 96, "$t(0,4]$", "(0,4]", "(0,4]", "(0,4)"),
    ("olympiadbench", 139, "62.5%", "62.5", "62.5\\%", "37.5\\%"),
    ("olympiadbench", 188, "17.5%", "17.5", "17.5", "82.5"),
]

# The sets ship inside the package: a missing directory is a failure, not a skip.
needs_real = pytest.mark.usefixtures("real_dir_present")


@pytest.fixture
def real_dir_present():
    assert REAL_DIR.is_dir(), f"benchmark files not present at {REAL_DIR}: they ship with the package"
    assert REAL_DIR == Path(__file__).resolve().parents[3] / "pc_pipelines" / "data" / "eval_sets"


@pytest.fixture(scope="module")
def real(grader):
    return prepare_benchmarks(grader=grader)  # the default directory: the shipped copies


def _raw(name):
    return [json.loads(line) for line in (REAL_DIR / name / "test.jsonl").read_text().splitlines() if line.strip()]


@needs_real
def test_all_six_load_with_the_readme_row_counts(real):
    assert list(real) == list(BENCHMARKS) == list(README_ROWS)
    for name, p in real.items():
        s = p.stats
        assert s["rows_in"] == README_ROWS[name] == s["expected_rows"], name
        # every set keeps every problem of its file: the counts equal the raw file's row count
        assert s["kept"] == len(_raw(name)) == README_ROWS[name], name
        assert s["quarantined"] == 0 and p.quarantine.num_rows == 0, name
        assert s["answers_normalized"] == NORMALIZED[name] == len(s["normalized_golds"]), name
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
@pytest.mark.parametrize("name,row,gold,normalized,correct,wrong", FORMERLY_QUARANTINED,
                         ids=[f"{c[0]}-{c[1]}" for c in FORMERLY_QUARANTINED])
def test_formerly_quarantined_golds_are_normalized_and_graded(real, grader, name, row, gold, normalized, correct,
                                                              wrong):
    """Each of the 10 golds math-verify reads nothing from as written: kept, with the normalized gold as its
    answer, graded correct against a correct \\boxed{} answer and wrong against a wrong one, both as stored and as
    written in the file (the grader normalizes a raw gold the same way, so math_reward no longer raises)."""
    p = real[name]
    file_gold = {"minerva_math": lambda r: extract_boxed(r["solution"]),
                 "olympiadbench": lambda r: r["final_answer"][0]}[name](_raw(name)[row])
    assert file_gold == gold
    assert {"row_index": row, "gold": gold, "normalized": normalized} == {
        k: v for k, v in next(d for d in p.stats["normalized_golds"] if d["row_index"] == row).items() if k != "rules"}
    stored = p.rows.filter(pc.equal(p.rows["row_index"], row)).column("answer").to_pylist()
    assert stored == [normalized]
    for g in (normalized, gold):
        assert grader.grade(f"So the answer is \\boxed{{{correct}}}.", g).reward == 1.0, (g, correct)
        assert grader.grade(f"So the answer is \\boxed{{{wrong}}}.", g).reward == 0.0, (g, wrong)
    assert math_reward(f"\\boxed{{{correct}}}", gold) == 1.0


def test_a_gold_nothing_normalizes_stays_quarantined_with_the_reason(tmp_path, grader):
    _write(tmp_path, "aime24", [{"problem": "p0", "answer": "\\odot\\odot"}, {"problem": "p1", "answer": "5%"}])
    p = prepare_benchmark(tmp_path, "aime24", grader, verify=False)
    assert p.rows.column("answer").to_pylist() == ["5"]
    (q,) = p.quarantine.to_pylist()
    assert (q["row_index"], q["reason"]) == (0, "unparsable_answer") and "no math expression" in q["detail"]


@needs_real
def test_load_benchmarks_returns_the_kept_rows(real, grader):
    tables = load_benchmarks(REAL_DIR, ["amc23", "minerva_math"], grader=grader)
    assert list(tables) == ["amc23", "minerva_math"]
    assert tables["amc23"].equals(real["amc23"].rows)
    assert tables["minerva_math"].num_rows == 272


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
    out = prepare_benchmarks(tmp_path, ["aime25", "minerva_math", "olympiadbench"], grader=grader, verify=False)
    aime = out["aime25"]
    assert aime.rows.column("answer").to_pylist() == ["70"]
    assert [(r["row_index"], r["reason"]) for r in aime.quarantine.to_pylist()] == [(1, "empty_problem"),
                                                                                    (2, "empty_answer")]
    assert aime.stats["expected_rows"] == 30 and aime.stats["rows_in"] == 3
    minerva = out["minerva_math"]
    assert minerva.rows.column("answer").to_pylist() == ["3.5", "62.5"]  # 62.5% normalized, kept
    assert [(r["row_index"], r["reason"]) for r in minerva.quarantine.to_pylist()] == [
        (1, "empty_answer"), (2, "empty_answer")]
    olympiad = out["olympiadbench"]
    assert olympiad.rows.column("answer").to_pylist() == ["$1$, $2$"]  # list elements joined with ", "
    assert olympiad.quarantine.column("reason").to_pylist() == ["empty_answer"]


def test_wrong_problem_field_is_reported(tmp_path):
    _write(tmp_path, "olympiadbench", [{"problem": "q", "final_answer": ["1"]}])
    with pytest.raises(DatasetError, match="no 'question' field"):
        prepare_benchmark(tmp_path, "olympiadbench", verify=False)


@needs_real
def test_the_shipped_files_match_the_pinned_sha256_and_the_readme():
    readme = (REAL_DIR / "README.md").read_text()
    for name in BENCHMARKS:
        digest = hashlib.sha256((REAL_DIR / name / "test.jsonl").read_bytes()).hexdigest()
        assert digest == BENCHMARK_SPECS[name].sha256, name
        assert f"{digest}  {name}/test.jsonl" in readme, name  # the README lists the same value


@needs_real
def test_a_changed_file_is_refused_by_name_unless_verify_is_off(tmp_path, grader):
    shutil.copytree(REAL_DIR, tmp_path / "sets")
    path = tmp_path / "sets" / "amc23" / "test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[3]["answer"] = 28.0  # one gold changed: the kind of edit nobody sees in a diff of 40 rows
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError) as e:
        prepare_benchmarks(tmp_path / "sets", grader=grader)
    msg = str(e.value)
    want = BENCHMARK_SPECS["amc23"].sha256
    assert "'amc23'" in msg and str(path) in msg and want in msg and hashlib.sha256(path.read_bytes()).hexdigest() in msg
    assert "verify_benchmarks: false" in msg and "Fix:" in msg
    for name in ("aime24", "aime25", "math500", "minerva_math", "olympiadbench"):  # the others are not blamed
        assert f"'{name}'" not in msg
    # on purpose: the changed file is read as it is
    out = prepare_benchmark(tmp_path / "sets", "amc23", grader, verify=False)
    assert out.rows.column("answer").to_pylist()[3] == "28"
