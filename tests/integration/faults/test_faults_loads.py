"""Issue 40, loads whose memory the file does not bound, on real processes and real files: a checkpoint's torch file
loads in about the memory of its own bytes, or is refused before torch reads it.

Each case plants, in a real run's checkpoint (its size and sha256 rewritten in ``manifest.json``, as whoever can
write the checkpoint can), a torch file that claims ~1.5 GB in a few bytes:

* ``bytearray(1_500_000_000)`` in a 1 KB ``rng.pt`` (torch's weights-only loader calls ``bytearray``);
* a ``data.pkl`` deflated to ~1.5 MB that expands to 1.5 GB in ``trainer.pt`` (``torch.save`` stores entries as
  they are; torch inflates the whole entry, twice, to read it);
* a storage in ``trainer.pt`` whose declared elements are 1.5 GB and whose bytes are 16;

and ``--resume`` is refused: exit 2, one line naming the file, the value and the fix, no traceback, the run's rows,
status and checkpoints unchanged, and the process's peak RSS (``wait4``) well under what the file claims. verl's
actor files (which verl's workers load unrestricted) and payloads are checked through the verl backend's real
``restore`` in a subprocess, verl's own load (``torch.load(weights_only=False)`` of every actor file) standing where
the trainer would be; a payload holding an object is refused in our words, never torch's advice to load it with
``weights_only=False``.
"""

from __future__ import annotations

import json
import os
import pickletools
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from fault_cli import (
    ENV,
    EXE,
    TRAIN,
    messages,
    no_traceback,
    rewrite_manifest,
    run_row,
    stored_rows,
    tree_digest,
)
from pickle_payload import Payload

from pc_pipelines.run.checkpoints import rng_state, save_torch

pytestmark = [pytest.mark.integration]

CLAIMED = 1_500_000_000
BOUND_MB = 1000
"""The refused load's peak RSS stays under this: the file claims 1,500 MB on top of the process's own (importing
torch and the project: 359-431 MB measured, where loading the file took 1.6-3 GB)."""


class Alloc:
    """Unpickling it calls ``bytearray(CLAIMED)`` (torch's weights-only loader allows that call)."""

    def __reduce__(self):
        return (bytearray, (CLAIMED,))


PEAK_OF_CHILD = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""
"""Runs the command and writes its exit status and peak RSS (KB). Measured from this small process, not from pytest:
on Linux a child's ``ru_maxrss`` starts at the high-water mark of the process that forked it (exec records the old
address space's), so ``wait4`` from a pytest worker of 1 GB reported 1,058 MB for every command it ran."""


def measured(args: list[str], timeout: float = 600) -> tuple[int, str, str, int]:
    """Run ``args``: its exit status, stdout, stderr and peak RSS in MB (``wait4`` in a small parent, see
    ``PEAK_OF_CHILD``: that process and its children)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err, peak = (Path(tmp) / name for name in ("out", "err", "peak"))
        with out.open("wb") as fo, err.open("wb") as fe:
            p = subprocess.Popen([sys.executable, "-c", PEAK_OF_CHILD, str(peak), *args], stdout=fo, stderr=fe,
                                 env=ENV, start_new_session=True)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise AssertionError(f"{args[:4]} ran past {timeout} s") from None
        assert p.returncode == 0 and peak.exists(), f"the measuring parent failed: {err.read_text()[-2000:]}"
        rc, kb = map(int, peak.read_text().split())
        return rc, out.read_text(), err.read_text(), kb // 1024


def resume(out: Path, policy: Path, steps: int = 5) -> tuple[int, str, str, int]:
    return measured([*EXE, "train", "--method", "pc", "--steps", str(steps), "--out", str(out), "--run-name", "t",
                     "--policy", str(policy), "--json", "--quiet", "--seed", "3", *TRAIN, "--resume"])


def rezip(path: Path, deflate_zeros: int = 0, numel: int | None = None) -> None:
    """Rewrite the torch file ``path``: its ``data.pkl`` deflated, with ``deflate_zeros`` zero bytes after the
    pickle (torch reads up to the pickle's STOP); or its first storage's element count declared as ``numel``
    (``torch.save`` writes a storage's count as the last int of its persistent id, before ``BINPERSID``)."""
    tmp = path.with_suffix(".new")
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(tmp, "w") as new:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename.endswith("/data.pkl") and numel is not None:
                ops = list(pickletools.genops(data))
                pid = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
                k = pid - 2 if ops[pid - 1][0].name == "BINPUT" else pid - 1  # TUPLE (BINPUT) BINPERSID
                k -= 1
                assert ops[k][0].name in ("BININT", "BININT1", "BININT2"), ops[k - 2:pid + 1]
                data = data[:ops[k][2]] + b"J" + struct.pack("<i", numel) + data[ops[k + 1][2]:]
            entry = zipfile.ZipInfo(info.filename)
            if info.filename.endswith("/data.pkl") and deflate_zeros:
                entry.compress_type = zipfile.ZIP_DEFLATED
                with new.open(entry, "w") as w:  # streamed: the test never holds the 1.5 GB
                    w.write(data)
                    chunk = bytes(1 << 24)
                    for _ in range(deflate_zeros // len(chunk)):
                        w.write(chunk)
                    w.write(bytes(deflate_zeros % len(chunk)))
            else:
                new.writestr(entry, data)
    tmp.replace(path)


@pytest.fixture(scope="module")
def trained(run4) -> Path:
    """A finished 4-step run (checkpoints after steps 1..4): the fault suite's ``run4`` (conftest.py)."""
    return run4


def plant(case: str, ck: Path) -> tuple[str, str]:
    """Plant ``case`` in the checkpoint ``ck``; the file changed and what the refusal must say of it."""
    if case == "bytearray":
        state = torch.load(ck / "rng.pt", weights_only=True)
        torch.save({**state, "x": Alloc()}, ck / "rng.pt")
        return "rng.pt", "rng.pt calls builtins.bytearray(1500000000) as it loads"
    if case == "deflated":
        rezip(ck / "trainer.pt", deflate_zeros=CLAIMED)
        return "trainer.pt", "trainer.pt holds a compressed entry (archive/data.pkl: "
    rezip(ck / "rng.pt", numel=CLAIMED)  # torch's RNG state: a uint8 storage
    return "rng.pt", "rng.pt declares storage "


CASES = ["bytearray", "deflated", "storage"]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_file_claiming_1_5_gb_is_refused_before_it_is_read(case, trained, base_policy, tmp_path):
    """Expected: exit 2, one line naming the file, the value ("bytearray(1500000000)", "a compressed entry ...
    that expand to 1,500,...", "storage ... of 1,500,000,000 bytes") and "Fix: move it aside"; no
    traceback; peak RSS under 1,000 MB (the file claims 1,500 on top of the process's own); the run's rows, status
    and checkpoint files (sha256) unchanged. Then, following the fix, the resume continues from step 3."""
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    store = out / "pc.duckdb"
    ck = out / "t" / "checkpoints" / "step-00000004"
    rel, says = plant(case, ck)
    rewrite_manifest(ck, rel)
    before, files = stored_rows(store), tree_digest(out / "t" / "checkpoints")

    rc, stdout, stderr, peak_mb = resume(out, base_policy)
    assert rc == 2, stderr[-3000:]
    no_traceback(stderr)
    (line,) = [m for m in messages(stderr) if "pilot-commit" in m]
    assert f"checkpoint {ck}: {says}" in line, line
    if case == "deflated":
        assert "bytes that expand to 1,500,00" in line and "torch.save stores every entry as it is" in line
    if case == "storage":
        assert "of 1,500,000,000 bytes (1,500,000,000 x 1), its entry data/" in line and "holds 5,056" in line
    assert "the checkpoint was altered" in line and "Fix: move it aside (e.g. to damaged-step-00000004)" in line
    assert "weights_only" not in stderr
    assert peak_mb < BOUND_MB, f"peak RSS {peak_mb} MB"
    assert stdout == ""
    assert stored_rows(store) == before and run_row(store, "t")["status"] == "finished"
    assert tree_digest(out / "t" / "checkpoints") == files

    ck.rename(ck.with_name("damaged-step-00000004"))  # the fix
    rc, stdout, stderr, _ = resume(out, base_policy)
    assert rc == 0, stderr[-3000:]
    assert [json.loads(x)["step"] for x in stdout.splitlines()] == [4, 5]


LOAD = r"""
import sys
from pathlib import Path
from pc_pipelines.errors import RunError
from pc_pipelines.run.checkpoints import load_plain
try:
    load_plain(Path(sys.argv[1]), sys.argv[2])
except RunError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
"""


@pytest.mark.parametrize("case", CASES)
def test_the_load_itself_stays_in_the_memory_of_the_file(case, tmp_path):
    """Expected: ``load_plain`` (how resume reads rng.pt and trainer.pt) refuses each file in a process whose peak
    RSS stays under 1,000 MB (importing torch: ~300), where loading it took 1.6 to 3 GB."""
    ck = tmp_path / "step-00000003"
    ck.mkdir()
    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.ones(3)
    opt = torch.optim.AdamW([param])
    opt.step()
    save_torch({"format": 1, "optimizer": opt.state_dict(), "last_step": 3, "seed": 3}, ck / "trainer.pt")
    save_torch(rng_state(), ck / "rng.pt")
    rel, says = plant(case, ck)
    rc, _, stderr, peak_mb = measured([sys.executable, "-c", LOAD, str(ck), rel])
    assert rc == 2, stderr[-3000:]
    assert f"checkpoint {ck}: {says}" in stderr and "Fix: move it aside" in stderr
    assert peak_mb < BOUND_MB, f"peak RSS {peak_mb} MB"


# ---- verl's actor files and payloads, through the verl backend's restore ------------------------------------------
ACTOR = r"""
import sys, numpy as np, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
out = sys.argv[1]
dist.init_process_group("gloo", init_method=f"file://{out}/pg", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
w = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
b = distribute_tensor(torch.randn(4), mesh, [Replicate()])
torch.save({"w": w, "b": b}, f"{out}/model_world_size_1_rank_0.pt")
torch.save({"state": {0: {"exp_avg": torch.randn(4, 4), "step": torch.tensor(1.0)}}, "param_groups": [{"lr": 1e-6, "params": [0]}]},
           f"{out}/optim_world_size_1_rank_0.pt")
torch.save({"lr_scheduler": {"last_epoch": 1}, "rng": {"cpu": torch.get_rng_state(), "numpy": np.random.get_state()}},
           f"{out}/extra_state_world_size_1_rank_0.pt")
dist.destroy_process_group()
"""
"""An actor checkpoint shaped as verl 0.9.1 writes it with FSDP2 (DTensor shards, numpy RNG in extra state)."""

RESTORE = r"""
import sys
from pathlib import Path
import torch
from pc_pipelines.config import resolve
from pc_pipelines.data.task import EvalSet, TaskData
from pc_pipelines.errors import RunError
from pc_pipelines.run import TrainingRun
from pc_pipelines.run.verl import VerlBackend
ck = Path(sys.argv[1])

class Trainer:
    # verl's trainer, as far as restore reaches it: its workers load every actor file unrestricted
    def load_actor(self, directory):
        for f in sorted(Path(directory).rglob("*.pt")):
            torch.load(f, weights_only=False)
    def sync_weights(self):
        pass

cfg = resolve("embedded", {"task.num_prompts": 40, "allocator.train_batch": 4}, method="pc", seed=1)
run = TrainingRun("v", cfg, ck.parent / "runs" / "v", ck.parent / "policy",
                  TaskData(["p"] * 40, ["1"] * 40, [EvalSet("e", ["q"], ["a"])]))
backend = VerlBackend(run, trainer=Trainer())
try:
    backend.restore(ck)
except RunError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
print(len(backend.payloads))
"""


@pytest.fixture(scope="module")
def verl_checkpoint(tmp_path_factory) -> Path:
    """A verl backend's checkpoint: verl's actor files (written by torch.distributed) and our payloads."""
    import numpy as np
    from verl import DataProto

    from pc_pipelines.training.verl_batch import PayloadStore

    ck = tmp_path_factory.mktemp("verl") / "checkpoints" / "step-00000001"
    actor = ck / "verl" / "actor"
    actor.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", ACTOR, str(actor)], check=True, timeout=300, env=ENV)
    (actor / "pg").unlink(missing_ok=True)
    store = PayloadStore()
    part = DataProto.from_dict(tensors={"input_ids": torch.arange(12).view(3, 4),
                                        "attention_mask": torch.ones(3, 4, dtype=torch.int64)},
                               non_tensors={"raw": np.array(["a", "b", "c"], dtype=object)})
    store._starts, store._parts = [0], {0: part}
    store.save(ck / "payloads")
    return ck


def verl_plant(case: str, ck: Path, marker: Path) -> tuple[str, str]:
    actor = ck / "verl" / "actor"
    if case == "actor_bytearray":
        f = actor / "extra_state_world_size_1_rank_0.pt"
        torch.save({**torch.load(f, weights_only=False), "x": Alloc()}, f)
        return f.name, "calls builtins.bytearray(1500000000) as it loads"
    if case == "actor_deflated":
        rezip(actor / "model_world_size_1_rank_0.pt", deflate_zeros=CLAIMED)
        return "model_world_size_1_rank_0.pt", "holds a compressed entry (model_world_size_1_rank_0/data.pkl: "
    if case == "actor_storage":
        rezip(actor / "optim_world_size_1_rank_0.pt", numel=CLAIMED // 4)  # a float32 storage
        return "optim_world_size_1_rank_0.pt", "of 1,500,000,000 bytes (375,000,000 x 4), its entry data/"
    f = ck / "payloads" / "0.pt"
    state = torch.load(f, weights_only=True)
    torch.save({**state, "x": Alloc() if case == "payload_bytearray" else Payload(marker)}, f)
    return "payloads/0.pt", ("calls builtins.bytearray(1500000000) as it loads" if case == "payload_bytearray"
                             else "holds objects other than tensors and plain data (posix.system)")


@pytest.mark.parametrize("case", ["actor_bytearray", "actor_deflated", "actor_storage", "payload_bytearray",
                                  "payload_object"])
def test_verl_actor_files_and_payloads_are_bounded_before_verl_loads_them(case, verl_checkpoint, tmp_path):
    """Expected: the verl backend's restore refuses before verl's trainer loads anything: exit 2, one line naming
    the file, the value and "Fix: move it aside"; never torch's advice to set weights_only=False; peak RSS under
    1,000 MB; the planted object never runs. The untouched checkpoint restores (3 payload rows)."""
    ck = tmp_path / "checkpoints" / "step-00000001"
    shutil.copytree(verl_checkpoint, ck)
    rc, stdout, stderr, _ = measured([sys.executable, "-c", RESTORE, str(ck)])
    assert rc == 0 and stdout.split() == ["3"], stderr[-3000:]

    marker = tmp_path / "PWNED"
    name, says = verl_plant(case, ck, marker)
    rc, stdout, stderr, peak_mb = measured([sys.executable, "-c", RESTORE, str(ck)])
    assert rc == 2, stderr[-3000:]
    no_traceback(stderr)
    (line,) = messages(stderr)
    assert line.startswith(f"checkpoint {ck}: ") and name in line and says in line, line
    assert "Fix: move it aside (e.g. to damaged-step-00000001)" in line
    assert "weights_only" not in stderr and "will likely succeed" not in stderr
    assert peak_mb < BOUND_MB, f"peak RSS {peak_mb} MB"
    assert not marker.exists()
