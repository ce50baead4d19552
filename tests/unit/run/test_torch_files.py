"""Issue 40: a torch file is read from its bytes before torch loads it (``run/torch_files.py``).

Files written the way pc-pipelines writes them (rng.pt new and old, an optimizer state with float32 and bfloat16
tensors, a payload of int64 tensors) pass; each way of making the load allocate more than the file's bytes is
refused, named, without running or allocating it: a call of ``bytearray`` or of a storage constructor with a count,
a tensor repeating its storage, numpy rebuilding an array at a size, a compressed entry, a ``data.pkl`` over the
bound, a pickle that is not one. Torch's weights-only refusal is never forwarded with its advice.
"""

from __future__ import annotations

import pickle
import random
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from pc_pipelines.run import torch_files
from pc_pipelines.run.checkpoints import rng_state, save_torch, unreadable
from pc_pipelines.run.torch_files import torch_file_problem

NUMPY = {"numpy.ndarray", "numpy.dtype", "numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct"}


class Calls:
    """Unpickling it calls ``fn(*args)``."""

    def __init__(self, fn, *args) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def test_files_as_pc_pipelines_writes_them_pass(tmp_path):
    save_torch(rng_state(), tmp_path / "rng.pt")
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
               tmp_path / "old-rng.pt")
    params = [torch.nn.Parameter(torch.ones(3, 2)), torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))]
    for p in params:
        p.grad = torch.ones_like(p)
    opt = torch.optim.AdamW(params)
    opt.step()
    save_torch({"format": 1, "optimizer": opt.state_dict(), "last_step": 3, "seed": 3}, tmp_path / "trainer.pt")
    torch.save({"input_ids": torch.arange(12).view(3, 4), "mask": torch.ones(3, 4)[:, :2]}, tmp_path / "0.pt")
    assert torch_file_problem(tmp_path / "rng.pt") is None
    assert torch_file_problem(tmp_path / "old-rng.pt", NUMPY) is None
    assert torch_file_problem(tmp_path / "trainer.pt") is None
    assert torch_file_problem(tmp_path / "0.pt") is None


@pytest.mark.parametrize(("obj", "says"), [
    (Calls(bytearray, 1_500_000_000), "calls builtins.bytearray(1500000000) as it loads"),
    (Calls(torch.FloatStorage, 1_500_000_000), "calls torch.FloatStorage(1500000000) as it loads"),
    (Calls(torch.ByteTensor, 1_500_000_000), "calls torch.ByteTensor(1500000000) as it loads"),
    (torch.zeros(1).expand(1_000_000), "holds a tensor of 1,000,000 elements over a storage of 1 (a view that repeats"),
])
def test_what_would_allocate_from_a_number_is_refused_unrun(obj, says, tmp_path):
    """Refused from the stand-ins' record of the call: the process's peak RSS does not grow by the 1.5 GB."""
    import resource

    torch.save({"x": obj}, tmp_path / "f.pt")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    problem = torch_file_problem(tmp_path / "f.pt")
    assert problem is not None and says in problem, problem
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 1024


def test_numpy_rebuilding_an_array_at_a_size_is_refused(tmp_path):
    from numpy._core.multiarray import _reconstruct

    torch.save({"x": Calls(_reconstruct, np.ndarray, (1_500_000_000,), b"b")}, tmp_path / "f.pt")
    assert "rebuilds a numpy array at shape ((1500000000,),)" in torch_file_problem(tmp_path / "f.pt", NUMPY)


def test_a_compressed_entry_is_refused_without_inflating_it(tmp_path):
    save_torch(rng_state(), tmp_path / "rng.pt")
    with zipfile.ZipFile(tmp_path / "rng.pt") as z, zipfile.ZipFile(tmp_path / "deflated.pt", "w") as new:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename.endswith("data.pkl"):
                data += bytes(50_000_000)
            new.writestr(zipfile.ZipInfo(info.filename), data, compress_type=zipfile.ZIP_DEFLATED)
    problem = torch_file_problem(tmp_path / "deflated.pt")
    assert problem.startswith("holds a compressed entry (archive/data.pkl: ") and "that expand to 50,00" in problem


def test_a_data_pkl_over_the_bound_and_a_broken_pickle_are_refused(tmp_path, monkeypatch):
    save_torch({"x": list(range(1000))}, tmp_path / "big.pt")
    monkeypatch.setattr(torch_files, "MAX_PICKLE_BYTES", 1000)
    assert "has a data.pkl of " in torch_file_problem(tmp_path / "big.pt")
    monkeypatch.undo()
    with zipfile.ZipFile(tmp_path / "bad.pt", "w") as z:
        z.writestr("bad/data.pkl", pickle.dumps([1, 2])[:-3])
    assert "has a data.pkl that is not a pickle" in torch_file_problem(tmp_path / "bad.pt")
    (tmp_path / "plain.pt").write_bytes(pickle.dumps({"a": 1}))
    assert torch_file_problem(tmp_path / "plain.pt") == "is not a torch.save zip file"


def test_torch_advice_to_load_unrestricted_is_never_forwarded():
    advice = ("Weights only load failed. This file can still be loaded ... Re-running `torch.load` with `weights_only` "
              "set to `False` will likely succeed, but it can result in arbitrary code execution.")
    msg = str(unreadable(Path("/runs/t/checkpoints/step-00000003"), pickle.UnpicklingError(advice)))
    assert "weights_only" not in msg and "likely succeed" not in msg
    assert "torch's weights-only loader refused what it holds" in msg and "Fix: move it aside" in msg
