"""`pilot-commit train` and `pilot-commit base-policy` as a user types them."""

import json
import subprocess
import sys

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTINGS = ["allocator.train_batch=8", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
            "allocator.commit_mean=6", "task.num_prompts=100", "training.ppo_minibatch=4", "training.eval_every=2",
            "training.eval_samples=1"]


def sets(pc: bool = True) -> list[str]:
    """SETTINGS as --set flags; without the PC-only n_pilot for a GRPO/DAPO run (which refuses it)."""
    return [a for s in SETTINGS if pc or not s.startswith("allocator.n_pilot=") for a in ("--set", s)]


SMALL = sets()


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "pc_pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_train_json_out_of_the_box(base_policy, policy_cache, tmp_path):
    # no --policy: the embedded base policy comes from the cache (built on first use; the fixture built it)
    r = cli("train", "--method", "pc", "--steps", "3", "--out", str(tmp_path), "--run-name", "r1", "--json",
            "--cache-dir", str(policy_cache), *SMALL)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        for key in ("sampled_rollouts", "trained_rollouts", "pilot_rollouts", "commit_rollouts", "rounds", "kept",
                    "buffer_size", "loss", "mean_reward", "reward_std", "cumulative_rollouts"):
            assert key in row, key
        assert 0.0 <= row["mean_reward"] <= 1.0
        assert row["trained_prompts"] <= 8
    assert "eval_accuracy" in rows[1] and "eval_accuracy" not in rows[0] and "eval_accuracy" not in rows[2]
    assert set(rows[1]["eval"]) == {f"arith_d{d}" for d in range(1, 7)}
    assert rows[1]["eval_accuracy"] == pytest.approx(sum(rows[1]["eval"].values()) / 6)
    assert rows[-1]["cumulative_rollouts"] == sum(row["sampled_rollouts"] for row in rows)
    # the store has the run, readable with `pilot-commit sql` while nothing writes
    q = cli("sql", "--store", str(tmp_path / "pc.duckdb"), "--json",
            "SELECT count(*) AS steps, max(status) AS status FROM steps JOIN runs USING (run_id) WHERE run_id = 'r1'")
    assert json.loads(q.stdout) == [{"steps": 3, "status": "finished"}]


def test_train_human_output_and_resume_past_the_end(base_policy, tmp_path):
    args = ["train", "--method", "grpo", "--steps", "2", "--out", str(tmp_path), "--run-name", "r2", "--policy",
            str(base_policy), "--quiet", *sets(pc=False)]
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "held-out accuracy" in r.stdout and "arith_d6" in r.stdout and "tensorboard --logdir" in r.stdout
    assert list((tmp_path / "r2" / "tensorboard").glob("events.out.tfevents.*"))
    again = cli(*args, "--resume")
    assert again.returncode == 0 and "nothing to do" in again.stderr


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
