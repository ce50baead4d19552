"""The checks of what a checkpoint's files hold (pc_pipelines/run/checkpoint_data.py, PolicyTrainer.state_problem):
what pc-pipelines writes passes; each altered value is refused naming it, before any global state changes.
The real files of a real run are the fault suite's (tests/integration/faults/test_faults_tampered_data.py)."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from pc_pipelines.config import TrainingConfig
from pc_pipelines.errors import RunError
from pc_pipelines.run.checkpoint_data import rng_states, safetensors_problem, totals_problem
from pc_pipelines.run.checkpoints import rng_state
from pc_pipelines.training import PolicyTrainer


# ---- rng.pt ----------------------------------------------------------------------------------------------------------
def _replace(rng: dict, key: str, value) -> dict:
    return {**rng, key: value}


RNG_CASES = {
    "torch state 8 bytes short": (lambda r: _replace(r, "torch", r["torch"][:-8].clone()), "its torch state is "),
    "torch state of floats": (lambda r: _replace(r, "torch", r["torch"].float()), "torch.float32 tensor"),
    "python state 624 long": (lambda r: _replace(r, "python", (3, r["python"][1][:-1], None)), "holds 624 numbers"),
    "python state version 2": (lambda r: _replace(r, "python", (2, *r["python"][1:])), "has version 2, not 3"),
    "python value 2**40": (lambda r: _replace(r, "python", (3, (2**40, *r["python"][1][1:]), None)), "[0, 2**32)"),
    "numpy PCG64 tuple": (lambda r: _replace(r, "numpy", ("PCG64", *r["numpy"][1:])), "bit generator 'PCG64'"),
    "numpy PCG64 dict": (lambda r: _replace(r, "numpy", np.random.default_rng(1).bit_generator.state),
                         "bit generator 'PCG64'"),
    "numpy pos 625": (lambda r: _replace(r, "numpy", (*r["numpy"][:2], 625, *r["numpy"][3:])), "pos 625"),
    "no numpy state": (lambda r: {k: v for k, v in r.items() if k != "numpy"}, "holds no torch, numpy and Python"),
}


def test_the_rng_states_pc_pipelines_writes_pass_as_they_are():
    rng = rng_state()
    got = rng_states(Path("ck"), rng)
    assert torch.equal(got["torch"], rng["torch"]) and got["python"] == rng["python"]
    assert got["numpy"][0] == "MT19937" and got["numpy"][1].tolist() == rng["numpy"][1]


@pytest.mark.parametrize("case", RNG_CASES)
def test_an_altered_rng_state_is_refused_naming_it_and_no_global_rng_changes(case):
    alter, expected = RNG_CASES[case]
    before = rng_state()
    with pytest.raises(RunError) as err:
        rng_states(Path("/x/step-00000002"), alter(rng_state()))
    msg = str(err.value)
    assert msg.startswith("checkpoint /x/step-00000002: rng.pt: ") and expected in msg, msg
    assert "Fix: move it aside (e.g. to damaged-step-00000002)" in msg
    after = rng_state()
    assert torch.equal(after["torch"], before["torch"]) and after["numpy"] == before["numpy"]
    assert after["python"] == before["python"] == random.getstate()


# ---- safetensors -----------------------------------------------------------------------------------------------------
@pytest.fixture
def weights(tmp_path) -> Path:
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.zeros(3, 4), "b": torch.ones(5, dtype=torch.bfloat16)}, path)
    assert safetensors_problem(path) is None
    return path


def _rewrite(path: Path, change) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    change(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])


def test_safetensors_layouts_safetensors_refuses_are_named(weights):
    size = weights.stat().st_size
    body = weights.read_bytes()[8:]
    weights.write_bytes(struct.pack("<Q", 2**62) + body)
    assert safetensors_problem(weights) == f"its header is {2**62} bytes long, the file has {size}"
    weights.write_bytes(struct.pack("<Q", 4) + b"{\xff\xff\xff" + body[4:])
    assert safetensors_problem(weights) == "its header is not JSON"
    weights.write_bytes(b"\x01\x02")
    assert safetensors_problem(weights) == "it is 2 bytes, too short for a safetensors header"


@pytest.mark.parametrize(("change", "expected"), [
    (lambda h: h["b"]["data_offsets"].__setitem__(1, 10**6),
     "tensor 'b' spans bytes 48..1000000 of its data, which has 58 bytes"),
    (lambda h: h["a"].__setitem__("shape", [3, 5]),
     "tensor 'a' is F32 of shape [3, 5] (60 bytes), its span 0..48 has 48"),
    (lambda h: h["a"].__setitem__("dtype", "Q9"), "tensor 'a' has dtype 'Q9', not one safetensors reads"),
    (lambda h: h["b"]["data_offsets"].__setitem__(0, 50) or h["b"]["data_offsets"].__setitem__(1, 58),
     "tensor 'b' is BF16 of shape [5] (10 bytes), its span 50..58 has 8"),
    (lambda h: h.__setitem__("c", {"dtype": "U8", "shape": [2], "data_offsets": [40, 42]}),
     "tensor 'c' begins at byte 40 of its data, not 48 where the one before ends"),
])
def test_a_tensor_outside_its_bytes_is_named(weights, change, expected):
    _rewrite(weights, change)
    assert safetensors_problem(weights) == expected


# ---- meta.json -------------------------------------------------------------------------------------------------------
ROWS = [{"step": s, "sampled_rollouts": 240, "trained_rollouts": 16, "engine_calls": 10} for s in range(1, 5)]  # steps 1..4
TRUE = {"steps": 4, "sampled_rollouts": 960, "trained_rollouts": 64, "engine_calls": 40}


@pytest.mark.parametrize(("totals", "rows", "expected"), [
    (TRUE, ROWS, None),
    (TRUE | {"sampled_rollouts": 235}, ROWS[:3], None),  # the store lacks a step: only the ledger's own checks
    (TRUE | {"engine_calls": 7}, [r | {"engine_calls": None} for r in ROWS], None),  # a column older rows lack
    (TRUE | {"sampled_rollouts": -725}, ROWS, "totals.sampled_rollouts is -725, not a whole number >= 0"),
    (TRUE | {"engine_calls": 40.5}, ROWS, "totals.engine_calls is 40.5, not a whole number >= 0"),
    (TRUE | {"steps": True}, ROWS, "totals.steps is True, not a whole number >= 0"),
    (TRUE | {"steps": 9}, ROWS, "totals.steps is 9, the checkpoint is after step 4 (4 steps)"),
    (TRUE | {"sampled_rollouts": 235}, ROWS, "totals.sampled_rollouts is 235, the store's steps 1..4 add up to 960"),
    (TRUE | {"bonus": 1}, ROWS, "totals has 'bonus', not one of steps, sampled_rollouts, trained_rollouts, "
                                "engine_calls"),
    ([1, 2], ROWS, "totals is [1, 2], not an object of steps, sampled_rollouts, trained_rollouts, engine_calls"),
])
def test_totals_are_the_ledger_of_the_steps_through_the_checkpoint(totals, rows, expected):
    assert totals_problem(totals, 4, rows) == expected


# ---- trainer.pt ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trainer() -> PolicyTrainer:
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16))
    t = PolicyTrainer(model, TrainingConfig(ppo_minibatch=2), 0, train_batch=2, seed=0)
    for p in t._params:  # Adam's state as after a step
        t.optimizer.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p),
                                "exp_avg_sq": torch.zeros_like(p)}
    return t


def _nested(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def _moment(state: dict, value) -> dict:
    state["optimizer"]["state"][0]["exp_avg"] = value
    return state


TRAINER_CASES = {
    "format 99": (lambda s, p: s | {"format": 99}, "its format is 99, this version reads 1"),
    "nested 100000 deep": (lambda s, p: s | {"last_step": _nested(100_000)}, "last_step is nested deeper than 32"),
    "stride 0": (lambda s, p: _moment(s, torch.zeros(()).expand(p.shape)),
                 "optimizer state of parameter 0: exp_avg has stride (0, 0) for shape"),
    "another shape": (lambda s, p: _moment(s, torch.zeros(p.shape[0] + 1, p.shape[1])),
                      "optimizer state of parameter 0: exp_avg has shape"),
    "integer moment": (lambda s, p: _moment(s, torch.zeros(p.shape, dtype=torch.int64)), "not a floating point one"),
    "state of parameter 999": (lambda s, p: s["optimizer"]["state"].update({999: {}}) or s,
                               "its optimizer state is for parameter 999"),
    "a group listing other parameters": (
        lambda s, p: s["optimizer"]["param_groups"][0].update(params=[0, 1]) or s,
        "optimizer parameter group 0 does not list parameters"),
}


def test_the_trainer_state_it_writes_passes(trainer):
    assert trainer.state_problem(trainer.state_dict()) is None


@pytest.mark.parametrize("case", TRAINER_CASES)
def test_an_altered_trainer_state_is_named_and_never_loaded(trainer, case):
    alter, expected = TRAINER_CASES[case]
    import copy

    state = alter(copy.deepcopy(trainer.state_dict()), trainer._params[0])
    problem = trainer.state_problem(state)
    assert problem is not None and expected in problem, problem
    before = copy.deepcopy(trainer.optimizer.state_dict())
    with pytest.raises(ValueError, match="trainer state: "):
        trainer.load_state_dict(state)
    after = trainer.optimizer.state_dict()
    assert after["param_groups"] == before["param_groups"]
    assert all(torch.equal(after["state"][i]["exp_avg"], before["state"][i]["exp_avg"]) for i in before["state"])
