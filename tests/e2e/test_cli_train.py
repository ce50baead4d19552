"""`pilot-commit train` and `pilot-commit base-policy` as a user types them."""

import json
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from pilot_cli import MODULE, run_cli
from reason_checks import disagreements
from transformers import AutoModelForCausalLM, AutoTokenizer

from pc_pipelines.errors import installed_command, shell_command

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTINGS = ["allocator.train_batch=8", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
            "allocator.commit_mean=6", "task.num_prompts=100", "training.ppo_minibatch=4", "training.eval_every=2",
            "training.eval_samples=1"]


def sets(pc: bool = True) -> list[str]:
    """SETTINGS as --set flags; without the PC-only n_pilot for a GRPO/DAPO run (which refuses it)."""
    return [a for s in SETTINGS if pc or not s.startswith("allocator.n_pilot=") for a in ("--set", s)]


SMALL = sets()


cli = partial(run_cli, exe=MODULE, timeout=600)


def test_train_json_out_of_the_box(base_policy, policy_cache, tmp_path):
    # no --policy: the embedded base policy comes from the cache (built on first use; the fixture built it)
    r = cli("train", "--method", "pc", "--steps", "3", "--out", str(tmp_path), "--run-name", "r1", "--json",
            "--cache-dir", str(policy_cache), *SMALL)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]  # the stored steps
    for row in rows:
        for key in ("sampled_rollouts", "trained_rollouts", "pilot_rollouts", "commit_rollouts", "rounds", "kept",
                    "buffer_size", "loss", "mean_reward", "reward_std", "cumulative_rollouts"):
            assert key in row, key
        assert 0.0 <= row["mean_reward"] <= 1.0
        assert row["trained_prompts"] <= 8
    # eval_every 2: step 2 on the schedule; step 3, the run's last (no multiple of 2), evaluated as well
    assert "eval_accuracy" in rows[1] and "eval_accuracy" not in rows[0] and "eval_accuracy" in rows[2]
    for row in rows[1:]:
        assert set(row["eval"]) == {f"arith_d{d}" for d in range(1, 7)}
        assert row["eval_accuracy"] == pytest.approx(sum(row["eval"].values()) / 6)
    assert rows[-1]["cumulative_rollouts"] == sum(row["sampled_rollouts"] for row in rows)
    # the store has the run, readable with `pilot-commit sql` while nothing writes
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
            "SELECT count(*) AS steps, max(status) AS status FROM steps JOIN runs USING (run_id) WHERE run_id = 'r1'")
    assert json.loads(q.stdout) == [{"steps": 3, "status": "finished"}]
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
            "SELECT step, avg(accuracy) AS acc, count(*) AS sets FROM eval_results WHERE run_id = 'r1' GROUP BY step "
            "ORDER BY step")
    evals = json.loads(q.stdout)
    assert [(e["step"], e["sets"]) for e in evals] == [(0, 6), (2, 6), (3, 6)]
    assert evals[2]["acc"] == pytest.approx(rows[2]["eval_accuracy"])
    # a real PC run (the embedded preset: adaptive band, sequential pilots; here pilots of 1 + 1, so the first wave
    # decides most): each reason agrees with its own numbers
    reasons = json.loads(cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
                             "SELECT * FROM decision_reasons WHERE run_id = 'r1'").stdout)
    assert len(reasons) > 20 and disagreements(reasons) == []


def test_train_human_output_and_resume_past_the_end(base_policy, tmp_path):
    args = ["train", "--method", "grpo", "--steps", "2", "--out", str(tmp_path), "--run-name", "r2", "--policy",
            str(base_policy), "--quiet", *sets(pc=False)]
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    # the closing block: the first and the last evaluated step side by side (not the same step twice), their mean
    assert lines[0] == "held-out accuracy (mean@1, T=0.7):"
    assert lines[1].split() == ["set", "start", "step", "2"]  # before training, and the 2nd step
    table = {ln.split()[0]: [float(x) for x in ln.split()[1:]] for ln in lines[2:9]}
    assert list(table) == [f"arith_d{d}" for d in range(1, 7)] + ["mean"]
    assert table["mean"] == pytest.approx([sum(v[i] for k, v in table.items() if k != "mean") / 6 for i in (0, 1)],
                                          abs=1e-3)
    summary = lines[9]
    assert summary.startswith("run r2: 2 steps; final mean reward ") and "(step 2)" in summary
    assert f"final eval accuracy {table['mean'][1]:.3f} (step 2)" in summary and "rollouts sampled" in summary
    assert lines[10] == f"checkpoint:  {tmp_path / 'r2' / 'checkpoints' / 'step-00000002'}"
    # the scripts as this shell reaches them (the bare name on PATH, else their path: tests/e2e/test_cli_hints.py)
    tb, exe = installed_command("tensorboard"), installed_command("pilot-commit")
    assert lines[11] == f"tensorboard: {shell_command(tb, '--logdir', tmp_path / 'r2' / 'tensorboard')}"
    assert lines[12] == f"store:       {shell_command(exe, 'runs', '--store', tmp_path / 'pc.duckdb')}"
    assert list((tmp_path / "r2" / "tensorboard").glob("events.out.tfevents.*"))
    again = cli(*args, "--resume")
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert again.stdout.splitlines()[:2] == lines[:2]  # nothing trained, the same closing table


def _checkpoint_files(ckpt: Path) -> dict[str, bytes]:
    """Every file of a checkpoint but rng.pt (and the manifest, which hashes it): a fresh run does not seed the
    global RNGs, so rng.pt differs between two identical runs too; no step draws from them (every draw is seeded
    from the run seed and the step), and the driver puts them back after an off-schedule evaluation
    (tests/unit/run/test_driver.py compares rng.pt where the backend seeds them)."""
    files = {str(f.relative_to(ckpt)): f.read_bytes() for f in sorted(ckpt.rglob("*")) if f.is_file()}
    assert {"rng.pt", "manifest.json", "allocator.json", "trainer.pt", "policy/model.safetensors"} <= set(files)
    return {k: v for k, v in files.items() if k not in ("rng.pt", "manifest.json")}


def test_the_final_evaluation_changes_no_training_and_a_resume_stays_bit_identical(base_policy, tmp_path):
    """3 steps (step 3 evaluated as the run's last) then --resume to 6 equals 6 steps at once: the checkpoint after
    step 3 is byte for byte the one the 6-step run wrote there without evaluating, and so is everything after."""
    from pc_pipelines.store import Store

    # GRPO: it trains from the first step (PC at this size keeps its first groups in the buffer past step 5)
    args = ["train", "--method", "grpo", "--run-name", "r", "--policy", str(base_policy), "--json", "--quiet",
            "--seed", "3", *sets(pc=False), "--set", "training.eval_every=4", "--set", "training.checkpoint_every=3"]
    whole = cli(*args, "--steps", "6", "--out", str(tmp_path / "a"))
    assert whole.returncode == 0, whole.stderr[-2000:]
    first = cli(*args, "--steps", "3", "--out", str(tmp_path / "b"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "eval_accuracy" in json.loads(first.stdout.splitlines()[-1])  # step 3: the run's last, evaluated
    a_ckpt, b_ckpt = (tmp_path / out / "r" / "checkpoints" for out in ("a", "b"))
    # policy, optimizer, sidecar, allocator and meta byte for byte: the evaluation left no trace
    assert _checkpoint_files(b_ckpt / "step-00000003") == _checkpoint_files(a_ckpt / "step-00000003")
    rest = cli(*args, "--steps", "6", "--out", str(tmp_path / "b"), "--resume")
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert [json.loads(ln)["step"] for ln in rest.stdout.splitlines()] == [4, 5, 6]
    assert _checkpoint_files(b_ckpt / "step-00000006") == _checkpoint_files(a_ckpt / "step-00000006")

    cols = ("step, rounds, engine_calls, pilot_rollouts, commit_rollouts, trained_rollouts, kept, buffer_size, "
            "loss, mean_reward")

    def state(out: str) -> dict:
        store = Store(tmp_path / out / "pc.duckdb")
        return {
            "steps": store.query(f"SELECT {cols} FROM steps WHERE run_id = 'r' ORDER BY step"),
            "observations": store.query("SELECT step, round, prompt_id, stage, n_correct, decision FROM "
                                        "prompt_observations WHERE run_id = 'r' ORDER BY ALL"),
            "evals": store.query("SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = 'r' ORDER BY ALL"),
        }

    a, b = state("a"), state("b")
    assert all(r["loss"] is not None for r in a["steps"])  # the policy really trained, every step
    assert b["steps"] == a["steps"] and b["observations"] == a["observations"]
    assert sorted({e["step"] for e in a["evals"]}) == [0, 4, 6]  # eval_every 4, and the run's last step (6)
    assert [e for e in b["evals"] if e["step"] != 3] == a["evals"]  # plus step 3, the first invocation's last
    assert len([e for e in b["evals"] if e["step"] == 3]) == 6


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "oracle"], "simulator-only"),
        (["--preset", "simulator"], "embedded"),
        (["--policy", "/no/such/model"], "not a Hugging Face model directory"),
        (["--set", "training.max_response_length=4"], "max_response_length"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_train_bad_input_exits_2_with_a_fix(args, message, tmp_path):
    base = ["train", "--out", str(tmp_path), "--run-name", "bad", "--quiet"]
    if "--method" not in args:
        base += ["--method", "pc"]
    r = cli(*base, *args)
    assert r.returncode == 2, (r.returncode, r.stderr[-1000:])
    assert message in r.stderr


def test_base_policy_writes_a_hugging_face_directory(tmp_path):
    out = tmp_path / "bp"
    r = cli("base-policy", "--out", str(out), "--json", "--quiet", "--set", "policy.sft_steps=20",
            "--set", "policy.sft_target=null", "--set", "task.sft_examples=2000")
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads(r.stdout)
    hist = meta["warm_start"]["pass_rate_histogram"]
    assert set(hist) == {"all", "4", "5", "6"}  # RL prompts are 4-6 digits in the embedded preset
    for h in hist.values():
        assert h["below"] + h["between"] + h["above"] == pytest.approx(1.0)
    assert set(meta["warm_start"]["greedy_heldout_accuracy"]) == set(map(str, range(1, 7)))
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    assert model.config.model_type == "qwen2" and model.num_parameters() == meta["parameters"]
    assert tok.eos_token_id == model.generation_config.eos_token_id
    assert not list(tmp_path.glob(".bp.tmp-*"))  # the build renamed its temporary directory into place


def test_a_json_reader_that_goes_away_stops_the_run_it_does_not_fail_it(base_policy, tmp_path):
    """`train --json` whose reader closes the pipe after the first step (a study runner stopped, `| head -1`):
    the run stops at that step's boundary with a checkpoint, status `stopped`, exit 141 (128 + SIGPIPE), no I/O
    error blaming the disk, and --resume finishes it."""
    args = ["train", "--method", "pc", "--steps", "4", "--out", str(tmp_path), "--run-name", "p", "--json",
            "--policy", str(base_policy), *SMALL]
    proc = subprocess.Popen([sys.executable, "-m", "pc_pipelines.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 141, err[-2000:]
    assert first["step"] == 1
    # The first write after the close fails: step 2's, unless the pipe's buffer took it before the close.
    (last,) = [int(m) for m in re.findall(r"stopped by SIGPIPE \(at a step boundary\): after step (\d+)", err)]
    assert last in (2, 3) and "I/O error" not in err  # the message's step is the store's (one numbering)
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
            "SELECT status, (SELECT count(*) FROM steps WHERE run_id = 'p') AS steps FROM runs WHERE run_id = 'p'")
    assert json.loads(q.stdout) == [{"status": "stopped", "steps": last}]
    assert (tmp_path / "p" / "checkpoints" / f"step-{last:08d}").is_dir()
    # `runs` shows the steps done of the --steps asked for (issue 41 point 8), in the table and in --json
    assert runs_steps(tmp_path) == ({"p": f"{last}/4"}, {"p": (last, 4)})
    r = cli("train", *args[1:], "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert [json.loads(line)["step"] for line in r.stdout.splitlines()] == list(range(last + 1, 5))
    assert runs_steps(tmp_path) == ({"p": "4/4"}, {"p": (4, 4)})
    # a resume to a larger total plans that; one asking for fewer steps than done trains nothing and keeps its count
    more = cli("train", *[a if a != "4" else "5" for a in args[1:]], "--resume")
    assert more.returncode == 0, more.stderr[-2000:]
    assert runs_steps(tmp_path) == ({"p": "5/5"}, {"p": (5, 5)})
    fewer = cli("train", *[a if a != "4" else "2" for a in args[1:]], "--resume")
    assert fewer.returncode == 0 and "nothing to do" in fewer.stderr
    assert runs_steps(tmp_path) == ({"p": "5/5"}, {"p": (5, 5)})


def runs_steps(out: Path) -> tuple[dict[str, str], dict[str, tuple[int, int]]]:
    """``pilot-commit runs``: each run's steps column of the table, and (steps, planned_steps) of its --json."""
    table = cli("runs", "--store", str(out / "pc.duckdb"))
    assert table.returncode == 0, table.stderr[-2000:]
    header, _, *rows = table.stdout.splitlines()  # the header, its rule, one row per run, then "(1 row)" and notes
    col = header.split().index("steps")
    shown = {rows[0].split()[0]: rows[0].split()[col]}
    data = json.loads(cli("runs", "--store", str(out / "pc.duckdb"), "--json").stdout)
    return shown, {r["run_id"]: (r["steps"], r["planned_steps"]) for r in data}


PRIOR = ["--set", "allocator.screen_strategy=posterior", "--set", "allocator.screen_discount=1.0",
         "--set", "allocator.screen_min_evidence=2", "--set", "allocator.screen_explore=0",
         "--set", "allocator.screen_prior_strength=0.5", "--set", "allocator.screen_threshold=0.3"]


def test_train_with_the_history_prior_stores_its_skips_with_reasons(base_policy, tmp_path):
    """A tiny real PC run with the history prior: prompts it skipped are stored (n = 0, with their reason), counted
    in the steps and the console's step line, and the checkpoint holds the posterior pooled by digit length."""
    r = cli("train", "--method", "pc", "--steps", "6", "--out", str(tmp_path), "--run-name", "prior", "--policy",
            str(base_policy), "--json", *SMALL, *PRIOR, "--set", "task.num_prompts=40")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sum(row["screened_by_prior"] for row in rows) > 0
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
            "SELECT o.step, o.n, o.rule, o.reason, s.screened_by_prior, s.prior_rollouts_saved FROM decision_reasons o "
            "JOIN steps s USING (run_id, step) WHERE run_id = 'prior' AND o.decision = 'screened_by_prior'")
    skipped = json.loads(q.stdout)
    assert len(skipped) == sum(row["screened_by_prior"] for row in rows)
    for s in skipped:
        assert s["n"] == 0 and s["rule"] in ("prior_easy", "prior_hard")
        side = s["rule"].removeprefix("prior_")
        assert re.fullmatch(rf"skipped by prior, {side} side: P\(pilot in band\) 0\.[0-2]\d from \d+ observations "
                            r"\(discounted \d+\.\d rollouts\), posterior mean [01]\.\d\d", s["reason"]), s["reason"]
        assert s["prior_rollouts_saved"] == s["screened_by_prior"] * 1  # the first pilot wave (pilot_wave=1)
    state = json.loads(next((tmp_path / "prior" / "checkpoints").glob("step-*/allocator.json")).read_text())
    assert state["config"]["screen_strategy"] == "posterior"
    assert set(state["screen"]["groups"]) <= set(range(1, 7)) and len(state["screen"]["groups"]) == 40


def test_train_with_the_time_floor_and_first_waves_read_by_the_prior(base_policy, tmp_path):
    """A tiny real PC run with sequential pilots under the rules measured on the benchmark: no consecutive-skip
    cap, the time floor, a draw that reads the pool as needed, flat first waves decided by the posterior. Skips
    happen, no prompt goes unpiloted past the floor, and some flat first waves are sent on to their later wave."""
    floor = 3
    r = cli("train", "--method", "pc", "--steps", "8", "--out", str(tmp_path), "--run-name", "floor", "--policy",
            str(base_policy), "--json", *SMALL, *PRIOR, "--set", "task.num_prompts=40",
            "--set", "allocator.pilot_strategy=sequential", "--set", "allocator.n_pilot=4",
            "--set", "allocator.pilot_wave=2", "--set", "allocator.screen_max_skips=0",
            "--set", f"allocator.screen_max_unseen={floor}", "--set", "allocator.screen_draw_cap=0",
            "--set", "allocator.screen_early_wave=true")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sum(row["screened_by_prior"] for row in rows) > 0
    assert sum(row["prior_continued"] for row in rows) > 0
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
            "WITH s AS (SELECT DISTINCT prompt_id, step FROM prompt_observations WHERE run_id = 'floor' AND n > 0) "
            "SELECT o.step - coalesce((SELECT max(s.step) FROM s WHERE s.prompt_id = o.prompt_id AND s.step < o.step), "
            "0) AS unseen FROM prompt_observations o WHERE run_id = 'floor' AND decision = 'screened_by_prior'")
    unseen = [row["unseen"] for row in json.loads(q.stdout)]
    assert unseen and max(unseen) <= floor


def test_a_run_without_run_name_that_stops_names_its_run_id(base_policy, tmp_path):
    """`train` without --run-name whose run stops (its --json reader went away) names the run by its default id
    on stderr, the id the store holds it under (it used to print "run the run stopped")."""
    args = ["train", "--method", "grpo", "--steps", "3", "--out", str(tmp_path), "--json", "--policy",
            str(base_policy), *sets(pc=False)]
    proc = subprocess.Popen([sys.executable, "-m", "pc_pipelines.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert json.loads(proc.stdout.readline())["step"] == 1
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 141, err[-2000:]
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json", "SELECT run_id, status FROM runs")
    ((row),) = json.loads(q.stdout)
    assert row["status"] == "stopped" and row["run_id"].startswith("embedded-arith-grpo-s0-")
    assert f"pilot-commit train: run {row['run_id']} stopped by SIGPIPE" in err
    assert "the run" not in err
