"""Issue 31 in a checkpoint's torch files: nothing in them runs, and a full disk under torch's writer is a full disk.

* ``rng.pt`` is plain data now (numpy's key a list of ints) and reads back exactly; one written before (numpy arrays
  inside) reads back exactly too, through exactly numpy's array names.
* A pickle payload (an object whose ``__reduce__`` runs a shell command) in ``rng.pt`` or ``trainer.pt`` is refused
  with the fix before anything runs; each planted payload is shown live first (a plain ``torch.load`` runs it).
* verl's actor files (loaded by verl with ``weights_only=False``) are scanned against an allowlist of data classes:
  real FSDP2 DTensor files and numpy RNG state pass, a payload is refused before verl's trainer is touched.
* ``torch.save`` given a path reports ENOSPC as ``RuntimeError: ... unexpected pos``; :func:`save_torch` writes the
  same bytes and reports the OSError.
"""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pickle_payload import Payload

from pc_pipelines.errors import RunError
from pc_pipelines.run.checkpoints import (
    load_plain,
    load_rng,
    pickle_problem,
    refuse_unsafe_pickles,
    restore_rng,
    rng_state,
    save_torch,
)
from pc_pipelines.run.stopping import run_outcome


def live(path: Path, marker: Path) -> None:
    """The planted payload is live: loading the file the way the code did before issue 31 runs it."""
    assert not marker.exists()
    torch.load(path, weights_only=False)
    assert marker.exists(), "the planted payload did not run under a plain torch.load: the test proves nothing"
    marker.unlink()


def draws() -> tuple:
    return tuple(np.random.rand(4).tolist()), random.random(), torch.rand(3).tolist()


def old_rng_pt(path: Path) -> None:
    """rng.pt as written before issue 31: numpy's state with its key as an ndarray."""
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}, path)


@pytest.fixture
def ckpt(tmp_path) -> Path:
    d = tmp_path / "checkpoints" / "step-00000003"
    d.mkdir(parents=True)
    return d


def seed_all() -> None:
    np.random.seed(11)
    random.seed(12)
    torch.manual_seed(13)


def test_rng_pt_is_plain_data_and_restores_every_rng_exactly(ckpt):
    seed_all()
    want = draws()
    seed_all()
    save_torch(rng_state(), ckpt / "rng.pt")
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt / "rng.pt")) == []
    state = torch.load(ckpt / "rng.pt", weights_only=True)  # plain data: loads with nothing allowlisted
    assert isinstance(state["numpy"][1], list) and len(state["numpy"][1]) == 624
    np.random.seed(0), random.seed(0), torch.manual_seed(0)
    restore_rng(load_rng(ckpt))
    assert draws() == want


def test_an_old_rng_pt_with_numpy_arrays_still_restores_exactly(ckpt):
    seed_all()
    want = draws()
    seed_all()
    old_rng_pt(ckpt / "rng.pt")
    assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt / "rng.pt"))) == {
        "numpy.ndarray", "numpy.dtype", "numpy._core.multiarray._reconstruct"}
    np.random.seed(0), random.seed(0), torch.manual_seed(0)
    restore_rng(load_rng(ckpt))
    assert draws() == want


def _plant(kind: str, path: Path, marker: Path) -> None:
    evil = Payload(marker)
    if kind == "extra_key":
        torch.save({**rng_state(), "x": evil}, path)
    elif kind == "old_format_extra_key":
        torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                    "x": evil}, path)
    elif kind == "in_the_numpy_state":
        name, key, pos, g, c = rng_state()["numpy"]
        torch.save({**rng_state(), "numpy": (name, key, pos, g, evil)}, path)
    elif kind == "legacy_pickle":  # torch's pre-zip format: a bare pickle
        torch.save({**rng_state(), "x": evil}, path, _use_new_zipfile_serialization=False)


@pytest.mark.parametrize("kind", ["extra_key", "old_format_extra_key", "in_the_numpy_state", "legacy_pickle"])
def test_a_payload_in_rng_pt_is_refused_and_never_runs(kind, ckpt, tmp_path):
    marker = tmp_path / "PWNED"
    _plant(kind, ckpt / "rng.pt", marker)
    live(ckpt / "rng.pt", marker)
    with pytest.raises(RunError) as err:
        load_rng(ckpt)
    assert not marker.exists()
    msg = str(err.value)
    assert "rng.pt" in msg and "the checkpoint was altered" in msg and "Fix: move it aside" in msg
    assert "damaged-step-00000003" in msg and "weights_only" not in msg
    if kind != "legacy_pickle":
        assert "(posix.system)" in msg


def test_a_payload_in_trainer_pt_is_refused_and_never_runs(ckpt, tmp_path):
    marker = tmp_path / "PWNED"
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))])
    opt.step()
    state = {"format": 1, "optimizer": opt.state_dict(), "last_step": 3, "seed": 3}
    save_torch(state, ckpt / "trainer.pt")
    assert load_plain(ckpt, "trainer.pt")["optimizer"]["param_groups"] == opt.state_dict()["param_groups"]
    torch.save({**state, "x": Payload(marker)}, ckpt / "trainer.pt")
    live(ckpt / "trainer.pt", marker)
    with pytest.raises(RunError, match=r"trainer.pt holds objects other than tensors and plain data \(posix.system\)"):
        load_plain(ckpt, "trainer.pt")
    assert not marker.exists()


def test_numpy_names_do_not_let_other_numpy_objects_by(ckpt):
    """An old rng.pt may name numpy's array reconstruction, for a uint32 key: an object array (which would carry
    arbitrary objects) is still refused, by the weights-only unpickler itself."""
    torch.save({"numpy": np.array([1, "a"], dtype=object)}, ckpt / "rng.pt")
    with pytest.raises(RunError, match="altered"):
        load_rng(ckpt)


# ---- verl's actor files ---------------------------------------------------------------------------------------------
DTENSOR_FILES = r"""
import sys, numpy as np, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
out = sys.argv[1]
dist.init_process_group("gloo", init_method=f"file://{out}/pg", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
w = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
b = distribute_tensor(torch.randn(4), mesh, [Replicate()])
torch.save({"w": w, "b": b}, f"{out}/model_world_size_1_rank_0.pt")
torch.save({"state": {0: {"exp_avg": w, "step": torch.tensor(1.0)}}, "param_groups": [{"lr": 1e-6, "params": [0]}]},
           f"{out}/optim_world_size_1_rank_0.pt")
torch.save({"lr_scheduler": {"last_epoch": 1}, "rng": {"cpu": torch.get_rng_state(), "numpy": np.random.get_state()}},
           f"{out}/extra_state_world_size_1_rank_0.pt")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def verl_actor(tmp_path_factory) -> Path:
    """An actor checkpoint shaped as verl 0.9.1 writes it with FSDP2 (DTensor shards, numpy RNG in extra state)."""
    ck = tmp_path_factory.mktemp("verl") / "step-00000001"
    actor = ck / "verl" / "actor"
    actor.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", DTENSOR_FILES, str(actor)], check=True, timeout=120)
    (actor / "pg").unlink(missing_ok=True)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    return ck


def test_verl_actor_files_pass_the_allowlist(verl_actor):
    """Every class they name is in the allowlist or one torch itself lets ``weights_only`` load (by default, or
    registered when torch.distributed loads: the pickles' names are read directly to tell which)."""
    import io
    import zipfile

    from torch import _weights_only_unpickler as wu

    from pc_pipelines.run.verl import VERL_ACTOR_GLOBALS

    files = refuse_unsafe_pickles(verl_actor, "verl/actor", VERL_ACTOR_GLOBALS)
    assert [f.name for f in files] == ["extra_state_world_size_1_rank_0.pt", "model_world_size_1_rank_0.pt",
                                       "optim_world_size_1_rank_0.pt"]
    named = set()
    for f in files:
        with zipfile.ZipFile(f) as z:
            (pkl,) = [n for n in z.namelist() if n.endswith("/data.pkl")]
            named |= wu.get_globals_in_pkl(io.BytesIO(z.read(pkl)))
    beyond = named - set(wu._get_allowed_globals())
    assert {"torch.distributed.tensor.DTensor", "torch.distributed.tensor.placement_types.Shard",
            "torch.distributed.tensor.placement_types.Replicate", "numpy.ndarray"} <= beyond
    unknown = beyond - VERL_ACTOR_GLOBALS  # DeviceMesh's layouts: torch registers them as weights-only safe itself
    assert unknown <= set(wu._get_user_allowed_globals()) and all(n.startswith("torch.") for n in unknown), unknown


def test_verl_backend_refuses_a_payload_before_verl_sees_the_checkpoint(verl_actor, tmp_path):
    import shutil

    from pc_pipelines.config import resolve
    from pc_pipelines.data.task import EvalSet, TaskData
    from pc_pipelines.run import TrainingRun
    from pc_pipelines.run.verl import VerlBackend

    ck = tmp_path / "checkpoints" / "step-00000001"
    shutil.copytree(verl_actor, ck)
    marker = tmp_path / "PWNED"
    f = ck / "verl" / "actor" / "extra_state_world_size_1_rank_0.pt"
    torch.save({"lr_scheduler": None, "rng": Payload(marker)}, f)
    live(f, marker)

    class Trainer:
        calls: list[str] = []

        def __getattr__(self, name):
            Trainer.calls.append(name)
            raise AssertionError(f"verl's trainer was asked for {name} before the checkpoint was checked")

    cfg = resolve("embedded", {"task.num_prompts": 40, "allocator.train_batch": 4}, method="pc", seed=1)
    run = TrainingRun("v", cfg, tmp_path / "runs" / "v", tmp_path / "policy",
                      TaskData(["p"] * 40, ["1"] * 40, [EvalSet("e", ["q"], ["a"])]))
    with pytest.raises(RunError) as err:
        VerlBackend(run, trainer=Trainer()).restore(ck)
    assert "verl/actor/extra_state_world_size_1_rank_0.pt holds objects other than tensors" in str(err.value)
    assert "posix.system" in str(err.value) and "Fix:" in str(err.value)
    assert not marker.exists() and Trainer.calls == []


# ---- a full disk under torch's zip writer -------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (every write: ENOSPC)")
def test_save_torch_reports_a_full_disk_where_torch_save_says_unexpected_pos():
    state = {"x": torch.zeros(100_000)}
    with pytest.raises(RuntimeError, match="unexpected pos") as hidden:  # why save_torch exists
        torch.save(state, "/dev/full")
    assert run_outcome(hidden.value)[1].startswith("RuntimeError")  # no "disk full" to be read from it
    with pytest.raises(OSError) as err:
        save_torch(state, Path("/dev/full"))
    assert err.value.errno == errno.ENOSPC and err.value.filename == "/dev/full"
    status, reason = run_outcome(err.value, where="runs/", then="resume it with --resume")
    assert status == "failed" and reason.startswith("disk full: No space left on device (/dev/full). Fix: free space")


def test_save_torch_through_a_file_whose_write_fails(tmp_path, monkeypatch):
    """ENOSPC raised by the file's write inside torch's zip writer (which turns it into ``unexpected pos``)."""
    import builtins

    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            self.n += len(memoryview(data).cast("B"))
            if self.n > 4096:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    target = tmp_path / "trainer.pt"
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: Full(real_open(p, *a, **k)) if Path(p) == target
                        else real_open(p, *a, **k))
    with pytest.raises(OSError) as err:
        save_torch({"x": torch.zeros(100_000)}, target)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert isinstance(err.value.__cause__, RuntimeError) and "unexpected pos" in str(err.value.__cause__)
    monkeypatch.undo()
    save_torch({"x": torch.arange(5)}, target)  # and an ordinary write reads back as tensors
    assert torch.equal(load_plain(tmp_path, "trainer.pt")["x"], torch.arange(5))
    assert pickle_problem(target) is None
