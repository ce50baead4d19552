"""Faults in what a user types or hands in (issue 18, inputs): `--set` keys, NaN / out-of-range configs, and bad
dataset files (BINARY Parquet columns, NaN answers, non-UTF-8 JSONL).

Each case runs the real CLI (a subprocess, as a user would) or the real loader on real files written in tmp_path,
and checks: the setting is honoured, or refused with a message naming the field / file / line and the fix; no
traceback; nothing already written is lost.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pc_pipelines.data.datasets import DatasetError, load_polaris, load_table, prepare_polaris
from pc_pipelines.rewards import MathGrader

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["--prompts", "300", "--train-batch", "8", "--n", "8"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "pc_pipelines.cli", *args], check=False, capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=300)


def refused(res: subprocess.CompletedProcess, *needles: str) -> str:
    """A clean refusal: exit 2, every needle and "Fix" in stderr, no traceback, nothing on stdout."""
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    assert "Fix" in res.stderr, res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)
    assert res.stdout == ""
    return res.stderr


def steps_json(res: subprocess.CompletedProcess) -> list[dict]:
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(line) for line in res.stdout.splitlines()]


def tree_digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


# ---- --set keys: honoured or refused, never ignored -------------------------------------------------------------
def test_set_seed_is_honoured_like_the_seed_flag():
    via_set = steps_json(cli("simulate", *SMALL, "--steps", "4", "--json", "--set", "seed=5"))
    via_flag = steps_json(cli("simulate", *SMALL, "--steps", "4", "--json", "--seed", "5"))
    seed0 = steps_json(cli("simulate", *SMALL, "--steps", "4", "--json"))
    assert via_set == via_flag
    assert via_set != seed0  # before: --seed's default 0 silently won over --set seed=5


def test_set_allocator_method_is_honoured_like_the_method_flag():
    via_set = cli("simulate", *SMALL, "--steps", "3", "--set", "allocator.method=grpo")
    assert via_set.returncode == 0, via_set.stderr
    assert via_set.stdout.startswith("simulate grpo:")  # before: "simulate pc:" (--method's default won)
    a = steps_json(cli("simulate", *SMALL, "--steps", "3", "--json", "--set", "allocator.method=grpo"))
    b = steps_json(cli("simulate", *SMALL, "--steps", "3", "--json", "--method", "grpo"))
    assert a == b and all(r["pilot_rollouts"] == 0 and r["full_rollouts"] == 8 * 8 for r in a)


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--set", "seed=5", "--seed", "1"], ["--set seed=5", "--seed 1"]),
        (["--set", "allocator.method=grpo", "--method", "dapo"], ["--set allocator.method='grpo'", "--method dapo"]),
        (["--set", "family=a", "--family", "b"], ["--set family='a'", "--family b"]),
        (["--set", "allocator.train_batch=16", "--train-batch", "8"], ["allocator.train_batch=16", "--train-batch"]),
        (["--set", "allocator.evict=true", "--no-evict"], ["allocator.evict=True", "--no-evict"]),
        (["--set", "allocator.seed=3"], ["allocator.seed", "--seed"]),
        (["--set", "nonsense=3"], ["--set nonsense"]),
        (["--set", "training.no_such_field=3"], ["training has no field 'no_such_field'"]),
        (["--method", "grpo", "--set", "allocator.n_pilot=4"], ["allocator.n_pilot=4", "PC setting", "grpo run"]),
        (["--method", "dapo", "--n-pilot", "4"], ["allocator.n_pilot=4", "PC setting", "dapo run"]),
        (["--method", "grpo", "--n-commit", "12"], ["--n-commit", "PC setting", "--method pc"]),
    ],
    ids=["seed", "method", "family", "flag-vs-set", "no-evict-vs-set", "section-seed", "unknown-key", "unknown-field",
         "n_pilot-grpo", "n-pilot-dapo", "n-commit-grpo"],
)
def test_conflicting_or_unknown_set_keys_are_refused(args, needles):
    refused(cli("simulate", "--steps", "2", *args), *needles)


def test_simulate_demo_refuses_a_method_setting():
    refused(cli("simulate-demo", "--steps", "2", "--set", "allocator.method=grpo"), "simulate-demo runs every method",
            "simulate --method")


# ---- NaN / inf / out of range: refused with the field and the fix ----------------------------------------------
@pytest.mark.parametrize(
    "setting,field",
    [
        ("training.temperature=nan", "TrainingConfig.temperature=nan"),
        ("training.temperature=.inf", "TrainingConfig.temperature=inf"),
        ("training.eval_temperature=nan", "TrainingConfig.eval_temperature"),
        ("training.lr=nan", "TrainingConfig.lr"),
        ("training.lr=2.0", "TrainingConfig.lr=2.0"),
        ("training.weight_decay=-.inf", "TrainingConfig.weight_decay"),
        ("training.grad_clip=nan", "TrainingConfig.grad_clip"),
        ("training.clip_low=nan", "TrainingConfig.clip_low"),
        ("training.clip_low=1.5", "TrainingConfig.clip_low=1.5"),
        ("training.clip_high=.inf", "TrainingConfig.clip_high"),
        ("training.dual_clip_c=nan", "TrainingConfig.dual_clip_c"),
        ("training.kl_coef=nan", "TrainingConfig.kl_coef"),
        ("training.top_p=nan", "TrainingConfig.top_p"),
        ("training.overlong_reward=nan", "TrainingConfig.overlong_reward"),
        ("training.overlong_reward=5", "TrainingConfig.overlong_reward=5.0"),
        ("allocator.oversample=.inf", "AllocatorConfig.oversample"),
        ("allocator.p_lower=nan", "AllocatorConfig.p_lower"),
        ("allocator.survival_margin=nan", "AllocatorConfig.survival_margin"),
        ("sim.difficulty_mean=nan", "SimConfig.difficulty_mean"),
        ("sim.local_rate=.inf", "SimConfig.local_rate"),
        ("sim.global_rate=nan", "SimConfig.global_rate"),
        ("sim.difficulty_spread=nan", "SimConfig.difficulty_spread"),
    ],
)
def test_nonfinite_or_out_of_range_settings_are_refused(setting, field):
    err = refused(cli("simulate", "--steps", "2", "--set", setting), field)
    assert "configuration error" in err


@pytest.mark.parametrize("setting,field", [("policy.sft_lr=.inf", "PolicyConfig.sft_lr"),
                                           ("task.sft_long_share=nan", "ArithTaskConfig.sft_long_share")])
def test_embedded_sections_refuse_nonfinite_values(setting, field):
    refused(cli("presets", "--show", "embedded", "--set", setting), field)


def test_bad_setting_loses_nothing_already_recorded(tmp_path):
    store = tmp_path / "pc.duckdb"
    ok = cli("simulate", *SMALL, "--steps", "3", "--store", str(store), "--json")
    assert ok.returncode == 0, ok.stderr
    before = json.loads(cli("runs", "--store", str(store), "--json").stdout)
    files = tree_digest(tmp_path)
    refused(cli("simulate", *SMALL, "--steps", "3", "--store", str(store), "--set", "training.temperature=nan"),
            "TrainingConfig.temperature=nan")
    after = json.loads(cli("runs", "--store", str(store), "--json").stdout)
    assert after == before and len(after) == 1 and after[0]["steps"] == 3
    assert tree_digest(tmp_path) == files  # refused before anything was opened for writing


def test_train_with_a_nan_temperature_is_refused_before_writing(tmp_path):
    """Before: `train --set training.temperature=nan` "succeeded" having trained nothing (NaN logits)."""
    out = tmp_path / "runs"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier run's notes")
    files = tree_digest(out)
    refused(cli("train", "--steps", "1", "--out", str(out), "--quiet", "--set", "training.temperature=nan"),
            "TrainingConfig.temperature=nan", "finite")
    assert tree_digest(out) == files


# ---- dataset files ----------------------------------------------------------------------------------------------
def polaris_parquet(path: Path, problems, answers, difficulty=None, types=None) -> Path:
    types = types or {}
    n = len(problems)
    table = pa.table({
        "problem": pa.array(problems, types.get("problem", pa.string())),
        "answer": pa.array(answers, types.get("answer", pa.string())),
        "difficulty": pa.array(difficulty or ["1/2"] * n, types.get("difficulty", pa.string())),
    })
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def grader():
    return MathGrader()


def test_binary_parquet_columns_are_decoded_as_text(tmp_path, grader):
    path = polaris_parquet(tmp_path / "p.parquet", [b"What is 2+3?", "Solve x+1=3. Über!".encode()],
                           [b"5", b"2"], [b"1/8", b"3/8"],
                           types={"problem": pa.binary(), "answer": pa.large_binary(), "difficulty": pa.binary()})
    assert pq.read_schema(path).field("answer").type == pa.large_binary()
    table = load_polaris(path)
    assert table.column("problem").to_pylist() == ["What is 2+3?", "Solve x+1=3. Über!"]  # before: "b'What is 2+3?'"
    assert table.column("answer").type == pa.large_string()
    prepared = prepare_polaris(table, grader=grader)
    assert prepared.rows.column("answer").to_pylist() == ["5", "2"]
    assert prepared.rows.column("difficulty").to_pylist() == [0.125, 0.375]
    assert not any("b'" in p for p in prepared.rows.column("problem").to_pylist())


def test_binary_column_that_is_not_utf8_is_refused_naming_file_column_and_row(tmp_path):
    path = polaris_parquet(tmp_path / "p.parquet", [b"ok", "caf\xe9".encode("latin-1")], [b"1", b"2"],
                           types={"problem": pa.binary(), "answer": pa.binary()})
    before = path.read_bytes()
    with pytest.raises(DatasetError) as e:
        load_polaris(path)
    msg = str(e.value)
    assert str(path) in msg and "'problem'" in msg and "row 1" in msg and "UTF-8" in msg and "Fix" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no chained traceback
    assert path.read_bytes() == before


@pytest.mark.parametrize("how", ["parquet-float", "parquet-text", "jsonl-NaN"])
def test_nan_answers_are_quarantined_not_graded_as_nan(tmp_path, grader, how):
    problems = ["What is 2+3?", "A question whose answer was lost", "What is 7-4?"]
    if how == "parquet-float":
        path = polaris_parquet(tmp_path / "p.parquet", problems, [5.0, math.nan, 3.0], types={"answer": pa.float64()})
    elif how == "parquet-text":
        path = polaris_parquet(tmp_path / "p.parquet", problems, ["5", "nan", "3"])
    else:
        path = tmp_path / "p.jsonl"
        path.write_text("".join(json.dumps({"problem": p, "answer": a, "difficulty": "1/2"}) + "\n"
                                for p, a in zip(problems, [5, math.nan, 3])))
        assert "NaN" in path.read_text()
    prepared = prepare_polaris(load_polaris(path), grader=grader)
    assert prepared.rows.column("answer").to_pylist() == ["5", "3"]  # before: a row with the gold "nan"
    (q,) = prepared.quarantine.to_pylist()
    assert (q["row_index"], q["reason"]) == (1, "empty_answer")
    assert ("NaN" in q["detail"]) or ("'nan'" in q["detail"]), q["detail"]
    assert prepared.stats["rows_in"] == prepared.stats["kept"] + prepared.stats["quarantined"] == 3


def test_non_utf8_jsonl_is_refused_naming_file_and_line(tmp_path):
    path = tmp_path / "polaris.jsonl"
    lines = [json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1), "difficulty": "1/2"}).encode()
             for i in range(4)]
    lines[2] = '{"problem": "Caf\xe9 costs 3, tea 2: total?", "answer": "5", "difficulty": "1/2"}'.encode("latin-1")
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "prepared"
    written = prepare_polaris(load_polaris(_good_jsonl(tmp_path)), grader=MathGrader()).write(out)
    files = tree_digest(out)
    with pytest.raises(DatasetError) as e:
        load_polaris(path)
    msg = str(e.value)
    assert f"{path}, line 3" in msg and "UTF-8" in msg and "Fix" in msg and "iconv" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert tree_digest(out) == files and all(p.is_file() for p in written.values())


def test_non_utf8_json_array_is_refused_naming_file_and_line(tmp_path):
    path = tmp_path / "polaris.json"
    path.write_bytes(b'[{"problem": "a", "answer": "1", "difficulty": "1/2"},\n'
                     + '{"problem": "\xe9", "answer": "2", "difficulty": "1/2"}]\n'.encode("latin-1"))
    with pytest.raises(DatasetError) as e:
        load_table(path, required=("problem",))
    assert f"{path}, line 2" in str(e.value) and "UTF-8" in str(e.value)


def _good_jsonl(tmp_path: Path) -> Path:
    p = tmp_path / "good.jsonl"
    p.write_text(json.dumps({"problem": "What is 1+1?", "answer": "2", "difficulty": "1/2"}) + "\n"
                 + json.dumps({"problem": "What is 2+2?", "answer": "4", "difficulty": "1/2"}) + "\n")
    return p


# ---- the same through Dagster: start_run's overrides ----------------------------------------------------------
@pytest.mark.parametrize(
    "overrides,needles",
    [
        (["seed=5"], ["--set seed=5 conflicts with --seed 0"]),
        (["allocator.method=grpo"], ["--set allocator.method='grpo' conflicts with --method pc"]),
        (["training.keep_every=3"], ["training.keep_every=3 would be ignored", "segment_steps"]),
        (["training.temperature=nan"], ["TrainingConfig.temperature=nan", "finite"]),
    ],
    ids=["seed", "method", "keep_every", "nan"],
)
def test_start_run_refuses_ignored_or_nonfinite_overrides(tmp_path, overrides, needles):
    from dagster import DagsterInstance

    from assets.jobs import start_run
    from resources import DataResource, LocalCheckpointResource, LocalComputeResource, StoreResource
    from resources.engines import TransformersEngineResource

    store = tmp_path / "pc.duckdb"
    resources = {"data": DataResource(out_dir=str(tmp_path / "data")), "store": StoreResource(path=str(store)),
                 "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs")),
                 "compute": LocalComputeResource(), "engine": TransformersEngineResource()}
    cfg = {"method": "pc", "overrides": overrides, "segment_steps": 2, "total_steps": 4, "run_name": "r"}
    res = start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                       instance=DagsterInstance.ephemeral(), resources=resources, raise_on_error=False)
    assert not res.success
    (failure,) = [e.event_specific_data.error for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    msg = failure.message
    for n in needles:
        assert n in msg, (n, msg)
    assert "Fix" in msg
    assert failure.cls_name == "Failure"  # a clear Failure, not a ConfigError traceback from deep inside
    assert not (tmp_path / "runs" / "r").exists()  # nothing registered or written
