"""The data assets (pc_pipelines_dagster/assets/data.py) and their Great Expectations checks, materialized with
dagster.materialize on small files in the real schemas (DeepMath-103K, Polaris-53K) and on the real benchmark files."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, AssetSelection, Definitions, materialize

from pc_pipelines.data.evaluation_sets import EVAL_SETS_DIR
from pc_pipelines.data.prepare import PREPARED_SCHEMA, QUARANTINE_SCHEMA, problem_id
from pc_pipelines_dagster.assets import arith_task, base_policy
from pc_pipelines_dagster.assets.data import DATA_ASSETS, DATA_CHECKS, benchmarks, deepmath, polaris
from pc_pipelines_dagster.resources import DataResource

pytestmark = pytest.mark.integration

REAL_BENCHMARKS = EVAL_SETS_DIR

# DeepMath rows: (question, final_answer, difficulty). Binary answers, per normalized part.
BINARY = {
    "yes": ["Yes", "\\text{yes}", "$\\boxed{YES}$."],
    "no": ["No", "$\\text{No}$"],
    "true": ["\\boxed{True}"],
    "false": ["false", "False.", "\\text{False}", "$false$"],
}
LOOKALIKES = ["No solution", "\\textbf{Yes}", "Yes, for n = 2"]  # not binary after normalization: kept
N_GOOD = 520  # distinct problems with distinct integer answers: enough for the default 500-row held-out split


def deepmath_rows():
    rows = []  # (question, answer, difficulty, expected fate)
    for part, answers in BINARY.items():
        rows += [(f"Is statement {part}-{i} true?", a, 2.0, f"binary:{part}") for i, a in enumerate(answers)]
    rows += [(f"Decide property {i}.", a, 3.0, "kept") for i, a in enumerate(LOOKALIKES)]
    rows += [
        ("", "3", 1.0, "empty_problem"),
        ("   \n", "4", 1.0, "empty_problem"),
        ("Compute $2 \\cdot 3$.", "", 4.0, "empty_answer"),
        ("Compute $2 \\cdot 5$.", None, 4.0, "empty_answer"),
        ("Simplify $\\frac{1}{2}$.", "\\frac{", 5.0, "unparsable_answer"),
        ("Evaluate $\\sqrt{x}$ at 4.", "\\sqrt{", 5.0, "unparsable_answer"),
    ]
    rows += [(f"What is {i} + {i}?", str(2 * i), 1.0 + (i % 8) / 2, "kept") for i in range(N_GOOD)]
    rows += [
        ("What is   0 + 0? ", "0", 1.0, "duplicate_problem"),  # same problem as "What is 0 + 0?" (whitespace)
        ("What is 1 + 1?", "3", 1.0, "duplicate_problem"),  # same problem, different answer
    ]
    return rows


def deepmath_records(rows):
    return [
        {
            "question": q,
            "final_answer": a,
            "difficulty": d,
            "topic": "Mathematics -> Algebra -> Prealgebra",
            "r1_solution_1": f"Let me think. \\boxed{{{a}}}",
            "r1_solution_2": "...",
            "r1_solution_3": "...",
        }
        for q, a, d, _ in rows
    ]


POLARIS = [
    ("What is $3^2$?", "9", "7/8", "kept"),
    ("Find x if $2x = 10$.", "5", "1/8", "kept"),
    ("Is 2 even?", "Yes", "8/8", "kept"),  # no binary filter for Polaris
    ("What is half of 1?", "\\frac{1}{2}", "hard", "kept"),  # difficulty that does not parse: kept, null
    ("", "1", "3/8", "empty_problem"),
    ("Compute $1+2$.", "  ", "2/8", "empty_answer"),
    ("What is $3^2$? ", "9", "7/8", "duplicate_problem"),
    ("Write the limit.", "x^{", "0/8", "unparsable_answer"),
] + [(f"Compute {i} * 7.", str(7 * i), f"{i % 9}/8", "kept") for i in range(50)]


def write_polaris_jsonl(path):
    path.write_text("".join(json.dumps({"problem": p, "answer": a, "difficulty": d}) + "\n" for p, a, d, _ in POLARIS))
    return path


def checks_of(result):
    return {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}


def failure_description(result):
    failures = result.get_step_failure_events()
    assert failures, "expected a failed step"
    data = failures[0].step_failure_data
    if data.user_failure_data:  # a dagster.Failure raised by the asset
        return data.user_failure_data.description
    messages, err = [], data.error
    while err is not None:  # e.g. a config validation error, wrapped by Dagster
        messages.append(err.message)
        err = err.cause
    return "\n".join(messages)


def md(meta, key):
    return meta[key].value


# ----------------------------------------------------------------------------------------------------------------
# DeepMath
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deepmath_run(tmp_path_factory):
    """DeepMath from a Parquet file: asset + all its checks, default config (500 held out, seed 0)."""
    root = tmp_path_factory.mktemp("deepmath")
    rows = deepmath_rows()
    path = root / "deepmath.parquet"
    pq.write_table(pa.Table.from_pylist(deepmath_records(rows)), path)
    data = DataResource(deepmath_path=str(path), out_dir=str(root / "out"))
    checks = [c for c in DATA_CHECKS if AssetKey("deepmath") in c.keys_by_input_name.values()]
    result = materialize([deepmath, *checks], resources={"data": data})
    return rows, root / "out", data, result


def test_deepmath_removes_binary_answers_per_part(deepmath_run):
    rows, out, _, result = deepmath_run
    assert result.success
    meta = result.asset_materializations_for_node("deepmath")[0].metadata
    assert md(meta, "rows_in") == len(rows) == 10 + 3 + 6 + N_GOOD + 2
    assert md(meta, "binary_removed") == 10
    assert {p: md(meta, f"binary_removed_{p}") for p in BINARY} == {"yes": 3, "no": 2, "true": 1, "false": 4}
    kept = pq.read_table(out / "deepmath.parquet")
    assert kept.schema == PREPARED_SCHEMA
    answers = set(kept.column("answer").to_pylist())
    assert set(LOOKALIKES) <= answers  # "No solution", "\textbf{Yes}", "Yes, for n = 2" survive the filter
    assert not answers & {a for group in BINARY.values() for a in group}
    assert md(meta, "kept") == kept.num_rows == md(meta, "dagster/row_count") == len(LOOKALIKES) + N_GOOD
    # every input row is accounted for: kept + quarantined + binary removed
    assert md(meta, "kept") + md(meta, "quarantined") + md(meta, "binary_removed") == md(meta, "rows_in")


def test_deepmath_quarantines_bad_rows_with_reasons(deepmath_run):
    rows, out, _, result = deepmath_run
    meta = result.asset_materializations_for_node("deepmath")[0].metadata
    expected = {r: sum(f == r for *_, f in rows) for r in
                ("empty_problem", "empty_answer", "duplicate_problem", "unparsable_answer")}
    assert expected == {"empty_problem": 2, "empty_answer": 2, "duplicate_problem": 2, "unparsable_answer": 2}
    assert {r: md(meta, f"quarantined_{r}") for r in expected} == expected
    assert md(meta, "quarantined") == 8
    q = pq.read_table(out / "deepmath.quarantine.parquet")
    assert q.schema == QUARANTINE_SCHEMA and q.num_rows == 8
    fates = [f for *_, f in rows]
    for r in q.to_pylist():  # each quarantined row is traced to its row in the file, with the expected reason
        assert fates[r["row_index"]] == r["reason"], r
        assert r["detail"]
    dup = [r for r in q.to_pylist() if r["reason"] == "duplicate_problem"]
    assert dup[0]["id"] == problem_id("deepmath", "What is 0 + 0?") and "same answer" in dup[0]["detail"]
    assert "different answer" in dup[1]["detail"]
    assert "\\frac{" in md(meta, "quarantine_examples") and "unparsable_answer" in md(meta, "quarantine_examples")
    assert Path(md(meta, "quarantine_path")) == (out / "deepmath.quarantine.parquet").resolve()


def test_deepmath_heldout_split_default_500_seeded(deepmath_run, tmp_path):
    _, out, data, result = deepmath_run
    meta = result.asset_materializations_for_node("deepmath")[0].metadata
    kept = pq.read_table(out / "deepmath.parquet")
    splits = kept.column("split").to_pylist()
    assert md(meta, "heldout_rows") == splits.count("heldout") == 500
    assert md(meta, "train_rows") == splits.count("train") == kept.num_rows - 500
    held0 = {i for i, s in zip(kept.column("id").to_pylist(), splits) if s == "heldout"}

    def held_with(seed, heldout):
        d = DataResource(deepmath_path=data.deepmath_path, out_dir=str(tmp_path / f"s{seed}-{heldout}"))
        r = materialize([deepmath], resources={"data": d},
                        run_config={"ops": {"deepmath": {"config": {"heldout": heldout, "seed": seed}}}})
        t = pq.read_table(tmp_path / f"s{seed}-{heldout}" / "deepmath.parquet")
        m = r.asset_materializations_for_node("deepmath")[0].metadata
        assert md(m, "heldout_rows") == heldout and md(m, "heldout_seed") == seed
        return {i for i, s in zip(t.column("id").to_pylist(), t.column("split").to_pylist()) if s == "heldout"}

    assert held_with(0, 500) == held0  # deterministic for a seed
    other = held_with(7, 20)
    assert len(other) == 20 and other != set(sorted(held0)[:20])


def test_deepmath_heldout_config_is_bounded_and_must_leave_training_rows(deepmath_run, tmp_path):
    _, _, data, _ = deepmath_run
    d = DataResource(deepmath_path=data.deepmath_path, out_dir=str(tmp_path / "o"))
    r = materialize([deepmath], resources={"data": d}, raise_on_error=False,
                    run_config={"ops": {"deepmath": {"config": {"heldout": -1}}}})
    assert not r.success and "heldout" in failure_description(r)
    r = materialize([deepmath], resources={"data": d}, raise_on_error=False,
                    run_config={"ops": {"deepmath": {"config": {"heldout": 1000}}}})
    assert not r.success
    msg = failure_description(r)
    assert "heldout=1000" in msg and f"only {len(LOOKALIKES) + N_GOOD} rows are kept" in msg


def test_deepmath_checks_pass_on_good_data_with_counts(deepmath_run):
    _, _, _, result = deepmath_run
    checks = checks_of(result)
    names = {"problem_and_answer_non_empty", "unique_ids", "no_binary_answers", "row_count_in_range",
             "answers_parseable"}
    assert {c for a, c in checks if a == "deepmath"} == names
    kept = len(LOOKALIKES) + N_GOOD
    for name in names:
        ev = checks[("deepmath", name)]
        assert ev.passed, (name, ev.metadata)
        assert md(ev.metadata, "rows") == kept and md(ev.metadata, "unexpected_rows") == 0
        assert "examples" not in ev.metadata
    bounds = md(checks[("deepmath", "row_count_in_range")].metadata, "bounds")
    rows_in = 10 + 3 + 6 + N_GOOD + 2
    assert bounds == {"min_rows": -(-3 * rows_in // 4), "max_rows": rows_in, "rows_in": rows_in}
    assert md(checks[("deepmath", "answers_parseable")].metadata, "distinct_golds") == kept


def test_deepmath_checks_fail_on_bad_written_data_with_examples(deepmath_run, tmp_path):
    """A tampered deepmath.parquet (what a bug in the filter or a hand edit would leave) fails the checks."""
    _, out, data, _ = deepmath_run
    bad_out = tmp_path / "bad"
    bad_out.mkdir()
    (bad_out / "deepmath.stats.json").write_text((out / "deepmath.stats.json").read_text())
    ids = ["deepmath-a", "deepmath-b", "deepmath-b", "deepmath-c", "deepmath-d", "deepmath-e"]
    problems = ["What is 1+1?", "What is 2+2?", "What is 3+3?", "  ", "Is 4 even?", "Simplify."]
    answers = ["2", "4", "6", "1", "$\\text{Yes}$", "\\frac{"]
    n = len(ids)
    pq.write_table(
        pa.table({"id": ids, "problem": problems, "answer": answers, "difficulty": pa.array([None] * n, pa.float64()),
                  "source": ["deepmath"] * n, "split": ["train"] * n, "row_index": pa.array(range(n), pa.int64())},
                 schema=PREPARED_SCHEMA),
        bad_out / "deepmath.parquet",
    )
    d = DataResource(deepmath_path=data.deepmath_path, out_dir=str(bad_out))
    r = materialize([deepmath, *DATA_CHECKS[:2]], resources={"data": d}, raise_on_error=False,
                    selection=AssetSelection.checks_for_assets(deepmath))
    assert not r.success  # the checks are blocking
    assert r.get_asset_materialization_events() == []  # only the checks ran, on the tampered file
    checks = checks_of(r)
    assert {c: e.passed for (a, c), e in checks.items()} == {
        "problem_and_answer_non_empty": False, "unique_ids": False, "no_binary_answers": False,
        "row_count_in_range": False, "answers_parseable": False,
    }

    def examples(name):
        return md(checks[("deepmath", name)].metadata, "examples")

    assert {(e["row"], e["id"]) for e in examples("unique_ids")} == {(1, "deepmath-b"), (2, "deepmath-b")}
    assert {e["id"] for e in examples("problem_and_answer_non_empty")} == {"deepmath-c"}
    assert examples("no_binary_answers") == [
        {"check": "expect_column_values_to_not_be_in_set(answer_normalized)", "row": 4, "id": "deepmath-d",
         "answer": "$\\text{Yes}$", "value": "yes"}
    ]
    [parse] = examples("answers_parseable")
    assert parse["id"] == "deepmath-e" and parse["value"] == "\\frac{" and "cannot be graded" in parse["reason"]
    rows_in = json.loads((out / "deepmath.stats.json").read_text())["rows_in"]
    [count] = examples("row_count_in_range")
    assert count["observed_value"] == 6 and count["min_value"] == -(-3 * rows_in // 4)
    assert md(checks[("deepmath", "unique_ids")].metadata, "unexpected_rows") == 2
    assert "unique" in checks[("deepmath", "unique_ids")].description


def test_row_count_bounds_come_from_the_check_config(deepmath_run):
    _, _, data, _ = deepmath_run  # the written files of the good run
    kept = len(LOOKALIKES) + N_GOOD

    def row_count(cfg):
        r = materialize([deepmath, DATA_CHECKS[0]], resources={"data": data}, raise_on_error=False,
                        selection=AssetSelection.checks_for_assets(deepmath),
                        run_config={"ops": {"deepmath_expectations": {"config": cfg}}})
        return checks_of(r)

    checks = row_count({"min_rows": kept + 1})
    assert not checks[("deepmath", "row_count_in_range")].passed
    assert md(checks[("deepmath", "row_count_in_range")].metadata, "bounds")["min_rows"] == kept + 1
    assert checks[("deepmath", "unique_ids")].passed  # the other checks are unaffected
    assert row_count({"min_rows": kept, "max_rows": kept})[("deepmath", "row_count_in_range")].passed
    assert not row_count({"min_kept_fraction": 1.0})[("deepmath", "row_count_in_range")].passed


def test_checks_fail_when_the_asset_was_never_materialized(tmp_path):
    d = DataResource(out_dir=str(tmp_path / "empty"))
    r = materialize([deepmath, *DATA_CHECKS[:2]], resources={"data": d}, raise_on_error=False,
                    selection=AssetSelection.checks_for_assets(deepmath))
    checks = checks_of(r)
    assert len(checks) == 5 and not any(e.passed for e in checks.values())
    assert "materialize the asset first" in checks[("deepmath", "unique_ids")].description


@pytest.mark.parametrize(
    ("asset_def", "setting", "env"),
    [(deepmath, "deepmath_path", "PC_DEEPMATH_PATH"), (polaris, "polaris_path", "PC_POLARIS_PATH")],
)
def test_missing_path_fails_saying_how_to_provide_it(tmp_path, asset_def, setting, env):
    r = materialize([asset_def], resources={"data": DataResource(out_dir=str(tmp_path))}, raise_on_error=False)
    assert not r.success
    msg = failure_description(r)
    assert "no local path is configured" in msg
    assert f"resources.data.config.{setting}" in msg and env in msg
    assert r.get_asset_materialization_events() == [] and not (tmp_path / f"{asset_def.key.path[0]}.parquet").exists()

    missing = tmp_path / "nowhere.parquet"
    r = materialize([asset_def], resources={"data": DataResource(out_dir=str(tmp_path), **{setting: str(missing)})},
                    raise_on_error=False)
    msg = failure_description(r)
    assert str(missing) in msg and "does not exist" in msg and env in msg


def test_wrong_columns_fail_naming_them(tmp_path):
    path = tmp_path / "wrong.jsonl"
    path.write_text(json.dumps({"problem": "What is 1+1?", "answer": "2"}) + "\n")  # Polaris fields, no difficulty
    r = materialize([deepmath], resources={"data": DataResource(deepmath_path=str(path), out_dir=str(tmp_path))},
                    raise_on_error=False)
    msg = failure_description(r)
    assert "['question', 'final_answer', 'difficulty']" in msg and "PC_DEEPMATH_PATH" not in msg


# ----------------------------------------------------------------------------------------------------------------
# Polaris
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "save_to_disk"])
def test_polaris_quarantine_difficulty_and_checks(tmp_path, fmt):
    src = write_polaris_jsonl(tmp_path / "polaris.jsonl")
    if fmt == "save_to_disk":
        import datasets

        records = [json.loads(line) for line in src.read_text().splitlines()]
        src = tmp_path / "polaris_ds"
        datasets.Dataset.from_list(records).save_to_disk(str(src))
    data = DataResource(polaris_path=str(src), out_dir=str(tmp_path / "out"))
    checks = [c for c in DATA_CHECKS if AssetKey("polaris") in c.keys_by_input_name.values()]
    r = materialize([polaris, *checks], resources={"data": data},
                    run_config={"ops": {"polaris": {"config": {"heldout": 5, "seed": 3}}}})
    assert r.success
    meta = r.asset_materializations_for_node("polaris")[0].metadata
    fates = [f for *_, f in POLARIS]
    n_kept = fates.count("kept")
    assert md(meta, "rows_in") == len(POLARIS) == 58 and md(meta, "kept") == n_kept == 54
    assert (md(meta, "heldout_rows"), md(meta, "train_rows")) == (5, n_kept - 5)
    assert {r: md(meta, f"quarantined_{r}") for r in
            ("empty_problem", "empty_answer", "duplicate_problem", "unparsable_answer")} == {
        "empty_problem": 1, "empty_answer": 1, "duplicate_problem": 1, "unparsable_answer": 1}
    assert "binary_removed" not in meta and md(meta, "difficulty_unparsed") == 1
    q = pq.read_table(tmp_path / "out" / "polaris.quarantine.parquet").to_pylist()
    assert [(x["row_index"], x["reason"]) for x in q] == [(i, f) for i, f in enumerate(fates) if f != "kept"]
    kept = pq.read_table(tmp_path / "out" / "polaris.parquet")
    diff = dict(zip(kept.column("problem").to_pylist(), kept.column("difficulty").to_pylist()))
    assert diff["What is $3^2$?"] == 0.875 and diff["Find x if $2x = 10$."] == 0.125
    assert diff["What is half of 1?"] is None and "Yes" in kept.column("answer").to_pylist()
    assert set(kept.column("split").to_pylist()) == {"train", "heldout"}
    checks = checks_of(r)
    assert {c for a, c in checks if a == "polaris"} == {
        "problem_and_answer_non_empty", "unique_ids", "row_count_in_range", "answers_parseable"}
    assert all(e.passed for e in checks.values())
    # default bounds: [ceil(0.9 * rows read), rows read]
    assert md(checks[("polaris", "row_count_in_range")].metadata, "bounds") == {
        "min_rows": 53, "max_rows": 58, "rows_in": 58}
    assert md(checks[("polaris", "answers_parseable")].metadata, "rows") == 54


# ----------------------------------------------------------------------------------------------------------------
# Benchmarks (the real files)
# ----------------------------------------------------------------------------------------------------------------


def test_benchmarks_asset_on_the_real_directory(tmp_path):
    assert REAL_BENCHMARKS.is_dir(), f"benchmark files not present at {REAL_BENCHMARKS}: they ship with the package"
    lines = {
        d.name: sum(1 for line in (d / "test.jsonl").read_text().splitlines() if line.strip())
        for d in sorted(REAL_BENCHMARKS.iterdir()) if (d / "test.jsonl").is_file()
    }
    assert set(lines) == {"aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench"}
    data = DataResource(out_dir=str(tmp_path / "out"))  # benchmarks_dir unset: the copies shipped in the package
    checks = [c for c in DATA_CHECKS if AssetKey("benchmarks") in c.keys_by_input_name.values()]
    r = materialize([benchmarks, *checks], resources={"data": data})
    assert r.success
    meta = r.asset_materializations_for_node("benchmarks")[0].metadata
    per = md(meta, "rows_per_benchmark")
    assert list(per) == ["aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench"]
    out = tmp_path / "out" / "benchmarks"
    for name, n in lines.items():
        assert per[name]["rows_in"] == per[name]["expected_rows"] == n, name
        kept = pq.read_table(out / f"{name}.parquet")
        quarantined = pq.read_table(out / f"{name}.quarantine.parquet")
        assert per[name]["kept"] == kept.num_rows == md(meta, f"rows_{name}"), name
        assert per[name]["quarantined"] == quarantined.num_rows and kept.num_rows + quarantined.num_rows == n, name
        normalized = per[name]["answers_normalized"]
        assert f"| {name} | {n} | {n} | {kept.num_rows} | {normalized} | {quarantined.num_rows} |" in md(
            meta, "row_counts")
    # the shipped files: 6 Minerva and 4 OlympiadBench golds math-verify reads nothing from as written are graded
    # normalized, so every set keeps every problem (nothing quarantined)
    assert {n: c["answers_normalized"] for n, c in per.items() if c["answers_normalized"]} == {
        "minerva_math": 6, "olympiadbench": 4}
    assert all(c["quarantined"] == 0 and c["kept"] == lines[n] for n, c in per.items())
    assert md(meta, "quarantined") == 0 and md(meta, "dagster/row_count") == sum(lines.values())
    assert "np.arcsin(10/13)" in md(meta, "golds_normalized") and "\\arcsin(10/13)" in md(meta, "golds_normalized")
    checks = checks_of(r)
    assert {c for a, c in checks if a == "benchmarks"} == {
        "problem_and_answer_non_empty", "unique_ids", "row_count_in_range", "answers_parseable"}
    for (_, name), ev in checks.items():
        assert ev.passed, (name, ev.metadata)
        assert md(ev.metadata, "rows") == sum(lines.values())
    bounds = md(checks[("benchmarks", "row_count_in_range")].metadata, "bounds")
    assert bounds["minerva_math"] == {"min_rows": 259, "max_rows": 272, "rows": 272}  # ceil(0.95 * 272)


def test_benchmarks_asset_refuses_a_changed_file_by_name(tmp_path):
    shutil.copytree(REAL_BENCHMARKS, tmp_path / "sets")
    path = tmp_path / "sets" / "aime24" / "test.jsonl"
    path.write_bytes(path.read_bytes() + b"\n")  # one byte more
    d = DataResource(benchmarks_dir=str(tmp_path / "sets"), out_dir=str(tmp_path / "out"))
    r = materialize([benchmarks], resources={"data": d}, raise_on_error=False)
    msg = failure_description(r)
    assert not r.success and str(path) in msg and "differs from the pinned copy" in msg and "verify_benchmarks" in msg
    assert not (tmp_path / "out").exists()  # nothing written from a refused directory
    ok = DataResource(benchmarks_dir=str(tmp_path / "sets"), verify_benchmarks=False, out_dir=str(tmp_path / "out"))
    assert materialize([benchmarks], resources={"data": ok}).success


def test_benchmarks_missing_directory_says_how_to_configure_it(tmp_path):
    d = DataResource(benchmarks_dir=str(tmp_path / "none"), out_dir=str(tmp_path / "out"))
    r = materialize([benchmarks], resources={"data": d}, raise_on_error=False)
    msg = failure_description(r)
    assert str(tmp_path / "none") in msg and "resources.data.config.benchmarks_dir" in msg


# ----------------------------------------------------------------------------------------------------------------
# Wiring
# ----------------------------------------------------------------------------------------------------------------


def test_data_assets_and_checks_load_in_one_definitions():
    defs = Definitions(assets=[arith_task, base_policy, *DATA_ASSETS], asset_checks=DATA_CHECKS,
                       resources={"data": DataResource()})
    graph = defs.resolve_asset_graph()
    for key in ("deepmath", "polaris", "benchmarks"):
        assert graph.get(AssetKey(key)).group_name == "data"
    check_keys = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert len(check_keys) == 5 + 4 + 4
    assert ("deepmath", "no_binary_answers") in check_keys and ("polaris", "no_binary_answers") not in check_keys
    specs = [s for c in DATA_CHECKS for s in c.check_specs]
    assert all(s.blocking and s.description for s in specs)


TOY_SCRIPT = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from toy_dataset import TOY
from pc_pipelines.data.registry import register_dataset
register_dataset(TOY)  # what its line in the registry's _REGISTERED does, before the code location is imported

from dagster import AssetKey, materialize
from pc_pipelines_dagster.assets.data import DATA_CHECKS, toy
from pc_pipelines_dagster.automation.jobs import StartRunConfig
from pc_pipelines.config import resolve
from pc_pipelines_dagster.definitions import build_definitions
from pc_pipelines.run import task_for
from pc_pipelines_dagster.resources import DataResource, local_resources

copy, out = sys.argv[2], sys.argv[3]
graph = build_definitions().resolve_asset_graph()
node = graph.get(AssetKey("toy"))
checks = [c for c in DATA_CHECKS if AssetKey("toy") in c.keys_by_input_name.values()]
data = DataResource(toy_path=copy, out_dir=out)
run = materialize([toy, *checks], resources={"data": data})
meta = run.asset_materializations_for_node("toy")[0].metadata
missing = materialize([toy], resources={"data": DataResource(out_dir=out)}, raise_on_error=False)
print(json.dumps({
    "group": node.group_name, "kinds": sorted(node.kinds), "description": node.description,
    "checks": sorted(k.name for k in graph.asset_check_keys if k.asset_key == AssetKey("toy")),
    "deps_of": sorted(k.to_user_string() for k in graph.get_all_asset_keys() if AssetKey("toy") in graph.get(k).parent_keys),
    "env_setting": local_resources()["data"].toy_path,
    "start_run_help": StartRunConfig.model_fields["dataset"].description,
    "success": run.success, "checks_passed": [e.passed for e in run.get_asset_check_evaluations()],
    "kept": meta["kept"].value, "heldout_rows": meta["heldout_rows"].value,
    "prompts": len(task_for("toy", resolve("embedded", {}, method="grpo"), out).prompts),
    "missing": missing.get_step_failure_events()[0].step_failure_data.user_failure_data.description,
}))
"""


def test_a_registered_dataset_gets_its_asset_checks_setting_and_deps(tmp_path):
    """A dataset module (``tests/support/toy_dataset.py``) and its registration, made before the code location is
    built (a process of its own): the code location has its asset in the ``data`` group with the generic checks,
    ``DataResource.toy_path`` (``PC_TOY_PATH``), the training and evaluation assets depending on it, start_run
    offering it; materialized, a run trains on what it wrote."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    copy = tmp_path / "toy.jsonl"
    copy.write_text("".join(json.dumps({"question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(10)) + json.dumps({"question": "", "answer": "1"}) + "\n")
    env = {**os.environ, "PC_TOY_PATH": str(copy)}
    proc = subprocess.run([sys.executable, "-c", TOY_SCRIPT, str(root / "tests" / "support"), str(copy),
                           str(tmp_path / "out")], cwd=root, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (got["group"], got["kinds"]) == ("data", ["parquet"])
    assert got["description"] == "Additions written out in words, as a test's dataset."
    assert got["checks"] == ["answers_parseable", "problem_and_answer_non_empty", "row_count_in_range", "unique_ids"]
    assert got["deps_of"] == ["segment_eval", "training_segment"]
    assert got["env_setting"] == str(copy)
    assert "deepmath, polaris or toy (prepared by their data assets" in got["start_run_help"]
    assert got["success"] and got["checks_passed"] == [True] * 4
    assert (got["kept"], got["heldout_rows"], got["prompts"]) == (10, 2, 8)  # the blank problem quarantined
    assert "resources.data.config.toy_path" in got["missing"] and "PC_TOY_PATH" in got["missing"]
