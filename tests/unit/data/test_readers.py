"""Loading local dataset files (pc_pipelines.data.readers, through the DeepMath and Polaris loaders): every
format gives the same rows, and a missing, unconfigured, unsupported or malformed input fails naming it and the fix."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deepmath_rows import deepmath_records, write_jsonl

from pc_pipelines.data.deepmath import load_deepmath, prepare_deepmath
from pc_pipelines.data.polaris import load_polaris
from pc_pipelines.data.readers import DatasetError, load_table


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
