"""Faults in what a user types or hands in (issue 18, inputs): `--set` keys, NaN / out-of-range configs, and bad
dataset files (BINARY Parquet columns, NaN answers, non-UTF-8 JSONL); issue 31: `--set` values that are not one
plain value (YAML tags, huge integers, null, alias bombs, 120k characters, lists) and store paths that cannot work
(/dev/null, /dev/full, a 300-character name, a directory, not a DuckDB file, a lock another process holds).

Each case runs the real CLI (a subprocess, as a user would) or the real loader on real files written in tmp_path,
and checks: the setting is honoured, or refused with a message naming the field / file / line and the fix; no
traceback; nothing already written is lost.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fault_cli import tree_digest
from pilot_cli import MODULE, run_cli

from pc_pipelines.data.polaris import load_polaris, prepare_polaris
from pc_pipelines.data.readers import DatasetError, load_table
from pc_pipelines.rewards import MathGrader

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["--prompts", "300", "--train-batch", "8", "--n", "8"]


cli = partial(run_cli, exe=MODULE, cwd=ROOT, extra_env={"PYTHONWARNINGS": "ignore"})


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


# ---- input hygiene (issue 31): --set values that are not one plain value, and store paths that cannot work ----
MAX_MESSAGE = 2000
ALIAS_BOMB = ("[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], "
              "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], "
              "&f [*e,*e,*e,*e,*e,*e,*e,*e,*e], &g [*f,*f,*f,*f,*f,*f,*f,*f,*f], &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]]")


def refused_short(res: subprocess.CompletedProcess, *needles: str) -> str:
    """refused(), and the message is short: a long value is quoted cut, never echoed whole."""
    err = refused(res, *needles)
    assert len(err) < MAX_MESSAGE, (len(err), err[:3000])
    return err


def set_refused(tmp_path: Path, setting: str, *needles: str) -> str:
    """`simulate --store` with one --set, run in tmp_path: refused before the store (or anything) is written."""
    res = cli("simulate", *SMALL, "--steps", "2", "--store", str(tmp_path / "pc.duckdb"), "--set", setting,
              cwd=tmp_path)
    err = refused_short(res, *needles)
    assert "configuration error" in err
    assert list(tmp_path.iterdir()) == [], sorted(p.name for p in tmp_path.iterdir())
    return err


@pytest.mark.parametrize("value", ['!!python/object/apply:os.system ["touch MARKER"]', "!!python/name:os.system"],
                         ids=["object-apply", "name"])
def test_set_with_a_python_yaml_tag_is_refused_and_runs_nothing(tmp_path, value):
    """Expected: exit 2, "--set training.temperature: ... YAML tag", a Fix, no traceback (before: yaml's
    ConstructorError traceback), under 2,000 characters; MARKER is never created, no store is written."""
    err = set_refused(tmp_path, f"training.temperature={value}", "--set training.temperature", "YAML tag")
    assert "ConstructorError" not in err
    assert not (tmp_path / "MARKER").exists() and not (ROOT / "MARKER").exists()


def test_train_with_a_yaml_tag_writes_nothing_to_its_out_dir(tmp_path):
    """Expected: `train --set training.temperature='!!python/name:os.system'` exits 2 naming the field, with a Fix
    and no traceback; its --out directory is left as it was."""
    out = tmp_path / "runs"
    out.mkdir()
    refused_short(cli("train", "--steps", "1", "--out", str(out), "--quiet", "--set",
                      "training.temperature=!!python/name:os.system", cwd=tmp_path),
                  "--set training.temperature", "YAML tag")
    assert list(out.iterdir()) == [] and not (tmp_path / "MARKER").exists()


def test_set_with_a_5000_digit_integer_is_refused_naming_the_field(tmp_path):
    """Expected: exit 2, "--set allocator.n: the integer 99999999999999999999... has 5,000 digits", a Fix, no
    traceback (before: Python's "Exceeds the limit (4300 digits)" ValueError), a short message, no store written."""
    set_refused(tmp_path, "allocator.n=" + "9" * 5000, "--set allocator.n", "5,000 digits", "64 bits")


def test_set_family_to_null_is_refused_naming_family(tmp_path):
    """Expected: `--set family=~` exits 2 with "family is null" and a Fix (before: the run's family was the
    string "None"), no store written."""
    set_refused(tmp_path, "family=~", "family is null", "--set family=")


def test_set_family_to_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    """Expected: a YAML alias bomb (9**8 leaves if expanded) as the family exits 2 in seconds, "--set family" and a
    Fix, a message under 2,000 characters (before: accepted, its expansion became the family), no store written."""
    t0 = time.monotonic()
    set_refused(tmp_path, "family=" + ALIAS_BOMB, "--set family", "a list")
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("key", ["family", "training.prompt_template", "allocator.method"])
def test_set_with_a_120k_character_value_is_refused_with_the_value_cut(tmp_path, key):
    """Expected: exit 2, "--set KEY: the value 'xxx...'... (120,000 characters) is too long: at most 1,024
    characters", a Fix, the whole message under 2,000 characters (before: a 240 KB message), no store written."""
    set_refused(tmp_path, f"{key}=" + "x" * 120_000, f"--set {key}", "(120,000 characters)", "at most 1,024")


@pytest.mark.parametrize("setting,needles", [
    ("training.temperature=[1, 2]", ["--set training.temperature", "a list"]),
    ("allocator.method={name: pc}", ["--set allocator.method", "a mapping"]),
    ("sim.num_prompts=- 300", ["--set sim.num_prompts", "a list"]),
], ids=["list-for-float", "mapping-for-str", "block-list-for-int"])
def test_set_with_a_list_or_mapping_for_a_scalar_field_is_refused(tmp_path, setting, needles):
    """Expected: exit 2 naming the field, "a list" / "a mapping" and a Fix, no traceback, no store written."""
    set_refused(tmp_path, setting, *needles)


def test_set_null_for_a_field_that_needs_a_value_is_refused(tmp_path):
    """Expected: `--set training.temperature=~` exits 2 with "training.temperature is null" and a Fix giving an
    example value, no store written."""
    set_refused(tmp_path, "training.temperature=~", "training.temperature is null",
                "--set training.temperature=1.0")


STORE_COMMANDS = {
    "simulate": lambda store: ["simulate", *SMALL, "--steps", "2", "--store", store],
    "runs": lambda store: ["runs", "--store", store],
    "sql": lambda store: ["sql", "--store", store, "SELECT count(*) FROM runs"],
}


def store_refused(res: subprocess.CompletedProcess, *needles: str) -> str:
    """A store path refused: exit 2, a Fix that is not the lock's, no traceback, a short message."""
    err = refused_short(res, "store error", *needles)
    assert "close the other process" not in err
    return err


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_store_on_a_device_is_refused_and_the_device_left_alone(command, device):
    """Expected: exit 2, "store path /dev/X is a character device, not a regular file" with its Fix (a file of your
    own), no traceback; /dev/X is still a character device and nothing was created beside it (.runs, .wal)."""
    if not Path(device).exists():
        pytest.skip(f"no {device} here")
    before = os.stat(device)
    store_refused(cli(*STORE_COMMANDS[command](device)), f"store path {device} is a character device",
                  "--store ./pc.duckdb")
    after = os.stat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert not Path(device + ".runs").exists() and not Path(device + ".wal").exists()


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_store_with_a_300_character_file_name_is_refused_naming_the_limit(tmp_path, command):
    """Expected: exit 2, "the store's file name is 300 bytes long, past this file system's limit of 255 bytes" and
    "Fix: choose a shorter name", no traceback (before: `runs` crashed with ENAMETOOLONG, `simulate` said to close
    another process); the path is shown cut; nothing created in its directory."""
    store = tmp_path / ("s" * 293 + ".duckdb")
    store_refused(cli(*STORE_COMMANDS[command](str(store))), "300 bytes long", "255 bytes", "choose a shorter name")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_store_path_that_is_a_directory_is_refused_with_a_file_inside_as_the_fix(tmp_path, command):
    """Expected: exit 2, "store path DIR is a directory" with "Fix: name the catalog file, e.g. --store
    DIR/pc.duckdb", no traceback; the directory stays empty."""
    d = tmp_path / "stores"
    d.mkdir()
    store_refused(cli(*STORE_COMMANDS[command](str(d))), f"store path {d} is a directory", f"--store {d}/pc.duckdb")
    assert list(d.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["stores"]


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_store_file_that_is_not_a_duckdb_database_is_left_alone(tmp_path, command):
    """Expected: exit 2, "the file is not a DuckDB database" with the Fix to check the --store path, no traceback;
    the file's bytes are unchanged and nothing is created beside it."""
    f = tmp_path / "notes.duckdb"
    f.write_text("my notes\n")
    store_refused(cli(*STORE_COMMANDS[command](str(f))), "is not a DuckDB database", "check the --store path")
    assert f.read_text() == "my notes\n" and [p.name for p in tmp_path.iterdir()] == ["notes.duckdb"]


HOLDER = "import duckdb, sys; con = duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()"


def test_store_held_for_writing_by_another_process_says_close_the_other_process(tmp_path):
    """Expected: while another process holds the catalog open for writing (as a `duckdb` shell would), simulate,
    runs and sql each wait for the lock (PC_PIPELINES_STORE_LOCK_WAIT_S: 5 s here, 60 by default), then exit 2 with
    "another process (..., PID n) holds the catalog" and "Fix: close the other process holding the catalog", no
    traceback; the catalog is unchanged."""
    store = tmp_path / "pc.duckdb"
    assert cli(*STORE_COMMANDS["simulate"](str(store))).returncode == 0
    files = tree_digest(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "PC_PIPELINES_STORE_LOCK_WAIT_S": "5"}
        procs = {c: subprocess.Popen([sys.executable, "-m", "pc_pipelines.cli", *STORE_COMMANDS[c](str(store))],
                                     cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for c in STORE_COMMANDS}  # side by side: each waits out the lock timeout
        results = {}
        for c, p in procs.items():
            out, err = p.communicate(timeout=300)
            results[c] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    for c, res in results.items():
        err = refused_short(res, "store error", f"PID {holder.pid}", "close the other process holding the catalog")
        assert "holds the catalog" in err and "(waited 5 s)" in err, (c, err)
    assert tree_digest(tmp_path) == files


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
    from dagster import DagsterInstance, DagsterInvalidConfigError

    from pc_pipelines_dagster.automation.jobs import start_run
    from pc_pipelines_dagster.resources import (
        DataResource,
        LocalCheckpointResource,
        LocalComputeResource,
        StoreResource,
    )
    from pc_pipelines_dagster.resources.engines import TransformersEngineResource

    store = tmp_path / "pc.duckdb"
    resources = {"data": DataResource(out_dir=str(tmp_path / "data")), "store": StoreResource(path=str(store)),
                 "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs")),
                 "compute": LocalComputeResource(), "engine": TransformersEngineResource()}
    cfg = {"method": "pc", "overrides": overrides, "segment_steps": 2, "total_steps": 4, "run_name": "r"}
    instance = DagsterInstance.ephemeral()
    # Refused at launch (the job's config mapping), before a run exists: one line naming the field, no traceback.
    with pytest.raises(DagsterInvalidConfigError) as caught:
        start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                     instance=instance, resources=resources, raise_on_error=False)
    msg = str(caught.value)
    for n in needles:
        assert n in msg, (n, msg)
    assert "configuration error: start_run config overrides: " in msg and "Fix" in msg
    assert instance.get_runs() == []
    assert not (tmp_path / "runs" / "r").exists()  # nothing registered or written
