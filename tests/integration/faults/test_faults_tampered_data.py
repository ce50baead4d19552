"""Issue 40, "nothing the tool prints or writes can hurt": a checkpoint whose plain data was altered, on real
`pilot-commit train --resume` processes, real files, real DuckDB.

Each case alters one value of the newest checkpoint of a finished 3-step GRPO run (checkpoints after steps 1, 2, 3;
Adam's moments in ``trainer.pt``) and rewrites the file's size and sha256 in ``manifest.json``, as an attacker
would, so the checkpoint verifies as intact. Nothing in the altered file runs (no pickle payload: those are
refused by the scan, test_faults_tampering.py); what is checked is that the values are what pc-pipelines writes:

* ``rng.pt``: torch's state of the wrong size, Python's of the wrong length, numpy's state of PCG64 (not the legacy
  MT19937 the run draws from) as a tuple and as numpy's dict;
* ``trainer.pt``: format 99, a value nested 100,000 deep in the optimizer's state (RecursionError), an Adam
  moment with stride 0 (one value seen through every index), an Adam moment of another shape than its parameter;
* ``policy/model.safetensors``: a header length of 2**62, a header that is not JSON, a tensor whose data ends past
  the end of the file;
* ``meta.json``: negative totals (the resume reported ``cumulative_rollouts`` from them).

Expected for each: exit 2, ONE line naming the checkpoint, the file and the value, with "Fix: move it aside";
no traceback; nothing printed on stdout; the run still ``finished`` with its reason, every row and every
checkpoint file (sha256) as they were, nothing moved aside. The meta.json case then follows the fix and resumes
from the checkpoint before it, with the true ``cumulative_rollouts``.
"""

import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from fault_cli import cli, messages, no_traceback, rewrite_manifest, run_row, stored_rows, tree_digest

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GRPO = ["--method", "grpo", "--set", "allocator.train_batch=8", "--set", "allocator.n=8", "--set", "task.num_prompts=100",
        "--set", "training.ppo_minibatch=4", "--set", "training.eval_every=2", "--set", "training.eval_samples=1",
        "--set", "training.checkpoint_every=1", "--set", "training.keep_checkpoints=10",
        "--set", "task.heldout_per_length=5"]
"""GRPO trains at every step, so every checkpoint has Adam's two moments in trainer.pt (5 held-out prompts a length:
no case reads the evaluations)."""
NEWEST = "step-00000003"


def train(out: Path, steps: int, policy: Path, *extra: str, **kw):
    return cli("train", "--steps", str(steps), "--out", str(out), "--run-name", "t", "--policy", str(policy), "--json",
               "--quiet", "--seed", "3", *GRPO, *extra, **kw)


@pytest.fixture(scope="module")
def trained(shared_runs, base_policy) -> Path:
    """A finished 3-step GRPO run (checkpoints after steps 1, 2 and 3), shared by every case (each works on a copy),
    built once per session (``shared_runs``)."""
    return shared_runs.get("faults-grpo3", ["train", "--steps", "3", "--policy", str(base_policy), *GRPO],
                           lambda out: train(out, 3, base_policy, check_rc=0))


def everything(store: Path) -> dict:
    return {**stored_rows(store), "run": run_row(store, "t")}


# ---- the alterations: each rewrites one file of the checkpoint and returns it (relative) and what the refusal says --
def _rng(ck: Path, change) -> tuple[str, str]:
    rng = torch.load(ck / "rng.pt", weights_only=True)
    expected = change(rng)
    torch.save(rng, ck / "rng.pt")
    return "rng.pt", expected


def torch_state_short(ck: Path):
    def change(rng):
        rng["torch"] = rng["torch"][:-8].clone()
        n = torch.get_rng_state().numel()
        return f"rng.pt: its torch state is {n - 8} bytes, not the {n} of torch's CPU generator"
    return _rng(ck, change)


def python_state_short(ck: Path):
    def change(rng):
        version, internal, gauss = rng["python"]
        rng["python"] = (version, internal[:-1], gauss)
        return "rng.pt: its Python random state holds 624 numbers, not 625"
    return _rng(ck, change)


def numpy_pcg64_tuple(ck: Path):
    def change(rng):
        _, key, pos, has_gauss, cached = rng["numpy"]
        rng["numpy"] = ("PCG64", key, pos, has_gauss, cached)
        return "rng.pt: its numpy state is of the bit generator 'PCG64', not MT19937"
    return _rng(ck, change)


def numpy_pcg64_dict(ck: Path):
    def change(rng):
        rng["numpy"] = np.random.default_rng(3).bit_generator.state
        return "rng.pt: its numpy state is of the bit generator 'PCG64', not MT19937"
    return _rng(ck, change)


def _trainer(ck: Path, change) -> tuple[str, str]:
    state = torch.load(ck / "trainer.pt", weights_only=True)
    expected = change(state)
    torch.save(state, ck / "trainer.pt")
    return "trainer.pt", expected


def trainer_format_99(ck: Path):
    def change(state):
        state["format"] = 99
        return "trainer.pt: its format is 99, this version reads 1"
    return _trainer(ck, change)


def adam_moment_stride_0(ck: Path):
    def change(state):
        moment = state["optimizer"]["state"][0]["exp_avg"]
        state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(()).expand(moment.shape)
        # refused before it loads: the scan of the file (run/torch_files.py) sees 6,400 elements over 1 stored value
        return "trainer.pt holds a tensor of 6,400 elements over a storage of 1 (a view that repeats its storage)"
    return _trainer(ck, change)


def adam_moment_of_another_shape(ck: Path):
    def change(state):
        moment = state["optimizer"]["state"][0]["exp_avg_sq"]
        state["optimizer"]["state"][0]["exp_avg_sq"] = torch.zeros(moment.shape[0] + 1, *moment.shape[1:])
        wrong = [moment.shape[0] + 1, *moment.shape[1:]]
        return f"trainer.pt: optimizer state of parameter 0: exp_avg_sq has shape {wrong}, its parameter {list(moment.shape)}"
    return _trainer(ck, change)


DEPTH = 100_000


def nested_100000_deep(ck: Path):
    """A list nested 100,000 deep in the optimizer's parameter group (its deepcopy in ``load_state_dict`` raised
    RecursionError): torch.save cannot write one (it recurses), so the pickle in the zip is rewritten by hand: the
    placeholder string's opcode becomes 100,000 EMPTY_LIST and 99,999 APPEND opcodes."""
    state = torch.load(ck / "trainer.pt", weights_only=True)
    state["optimizer"]["param_groups"][0]["nested"] = "NESTED-PLACEHOLDER"
    buf = io.BytesIO()
    torch.save(state, buf)
    placeholder = b"X" + struct.pack("<I", 18) + b"NESTED-PLACEHOLDER"
    nested = b"]" * DEPTH + b"a" * (DEPTH - 1)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(ck / "trainer.pt", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/data.pkl"):
                assert data.count(placeholder) == 1
                data = data.replace(placeholder, nested)
            dst.writestr(info, data)
    deep = torch.load(ck / "trainer.pt", weights_only=True)["optimizer"]["param_groups"][0]["nested"]
    for _ in range(DEPTH - 1):  # it loads, nested as meant (walked without recursion)
        (deep,) = deep
    assert deep == []
    return "trainer.pt", "trainer.pt: optimizer is nested deeper than 32 levels"


def _safetensors(ck: Path, change) -> tuple[str, str]:
    path = ck / "policy" / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header, body = data[8:8 + n], data[8 + n:]
    new_n, new_header, expected = change(n, header, body)
    path.write_bytes(struct.pack("<Q", new_n) + new_header + body)
    return "policy/model.safetensors", expected


def safetensors_huge_header(ck: Path):
    return _safetensors(ck, lambda n, header, body: (
        2**62, header, f"policy/model.safetensors: its header is 4611686018427387904 bytes long, the file has "
                       f"{8 + n + len(body)}"))


def safetensors_header_not_json(ck: Path):
    return _safetensors(ck, lambda n, header, body: (
        n, b"{" + b"\xff" * (n - 1), "policy/model.safetensors: its header is not JSON"))


def safetensors_offsets_past_the_end(ck: Path):
    def change(n, header, body):
        tensors = json.loads(header)
        name = max((k for k in tensors if k != "__metadata__"), key=lambda k: tensors[k]["data_offsets"][1])
        tensors[name]["data_offsets"][1] += 4096
        text = json.dumps(tensors).encode()
        text += b" " * (-len(text) % 8)
        return len(text), text, (f"policy/model.safetensors: tensor {name!r} spans bytes "
                                 f"{tensors[name]['data_offsets'][0]}..{tensors[name]['data_offsets'][1]} of its data,")
    return _safetensors(ck, change)


def meta_totals_negative(ck: Path):
    meta = json.loads((ck / "meta.json").read_text())
    meta["totals"] = {k: -v for k, v in meta["totals"].items()}
    (ck / "meta.json").write_text(json.dumps(meta))
    return "meta.json", f"meta.json: totals.steps is {-3}, not a whole number >= 0"


CASES = [torch_state_short, python_state_short, numpy_pcg64_tuple, numpy_pcg64_dict,
         trainer_format_99, nested_100000_deep, adam_moment_stride_0, adam_moment_of_another_shape,
         safetensors_huge_header, safetensors_header_not_json, safetensors_offsets_past_the_end,
         meta_totals_negative]


def tampered_copy(trained: Path, tmp_path: Path, alter) -> tuple[Path, Path, str, str]:
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    ck = out / "t" / "checkpoints" / NEWEST
    rel, expected = alter(ck)
    rewrite_manifest(ck, rel)
    return out, ck, rel, expected


@pytest.mark.parametrize("alter", CASES, ids=[c.__name__ for c in CASES])
def test_altered_plain_data_in_a_checkpoint_is_refused_with_the_fix(alter, trained, base_policy, tmp_path):
    """Expected: exit 2; one line "pilot-commit: checkpoint <ck>: <file>: <the value> ..." ending in "Fix: move
    it aside (e.g. to damaged-step-00000003) ..."; no traceback, nothing on stdout; the run still finished with its
    reason, its rows and every file of its checkpoints (sha256) unchanged, nothing moved aside."""
    out, ck, rel, expected = tampered_copy(trained, tmp_path, alter)
    store = out / "pc.duckdb"
    before, files = everything(store), tree_digest(out / "t" / "checkpoints")
    assert before["run"]["status"] == "finished"

    r = train(out, 4, base_policy, "--resume")
    assert r.returncode == 2, r.stderr[-3000:]
    no_traceback(r.stderr)
    assert r.stdout == ""
    (line,) = [m for m in messages(r.stderr) if "pilot-commit" in m]
    assert line.startswith(f"pilot-commit: checkpoint {ck}: {expected}"), line
    assert line.endswith(f"Fix: move it aside (e.g. to damaged-{NEWEST}) to resume from the one before it, or start "
                         "a new --run-name."), line
    assert len(line) < 600, line
    assert everything(store) == before
    assert tree_digest(out / "t" / "checkpoints") == files


def test_negative_totals_followed_by_the_fix_resume_with_the_true_cumulative_rollouts(trained, base_policy, tmp_path):
    """Expected: refused (exit 2, as above); moving the checkpoint aside as the fix says resumes from step 2 (exit 0,
    steps 3 and 4 trained) and step 4's cumulative_rollouts is the sum of the sampled rollouts of steps 1..4."""
    out, ck, _, _ = tampered_copy(trained, tmp_path, meta_totals_negative)
    assert train(out, 4, base_policy, "--resume").returncode == 2

    ck.rename(ck.with_name(f"damaged-{NEWEST}"))  # the fix
    r = train(out, 4, base_policy, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r.stderr)
    records = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["step"] for x in records] == [3, 4]
    rows = Store(out / "pc.duckdb").query("SELECT step, sampled_rollouts FROM steps WHERE run_id = 't' ORDER BY step")
    assert [x["step"] for x in rows] == [1, 2, 3, 4]
    assert records[-1]["cumulative_rollouts"] == sum(x["sampled_rollouts"] for x in rows) > 0
    assert run_row(out / "pc.duckdb", "t")["status"] == "finished"
