"""Issue 31, "nothing runs that was not asked for", on real `pilot-commit train` processes, real files, real DuckDB.

Each test plants what an attacker (or a careless download) could put in a run's inputs and checks that none of it
runs, that the command refuses with the fix (exit 2, no traceback) and that the run and its store are untouched;
and that a full disk inside torch's zip writer is reported as a full disk:

* a pickle payload (an object whose ``__reduce__`` runs ``touch MARKER``) in a checkpoint's ``rng.pt`` or
  ``trainer.pt``, its size and sha256 rewritten in ``manifest.json`` so the checkpoint verifies as intact: the
  resume is refused (not skipped: its files match its manifest, so someone altered it), the marker never appears;
  moving it aside as the fix says resumes from the one before it, bit-exact with the uninterrupted run;
* an ``rng.pt`` of the format written before issue 31 (numpy arrays inside) resumes bit-exactly;
* a ``--policy`` whose config.json has an ``auto_map`` (its own module would create a marker) is refused without
  transformers' "run the custom code? [y/N]" prompt, even with "y" waiting on stdin;
* a ``--policy`` whose weights are a pickled ``pytorch_model.bin`` with a payload is refused with our fix (convert
  to safetensors), not torch's advice to load it with ``weights_only=False``;
* a real full disk (a tmpfs as the checkpoint directory, root only) inside ``torch.save`` of ``trainer.pt``: status
  ``failed``, reason "disk full ..." with the fix, exit 1; and the same with the checkpoint written the way verl's
  workers write theirs (``torch.save`` to a path, which says only ``unexpected pos``).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fault_cli import cli, messages, no_traceback, rewrite_manifest, run_row, steps_of, stored_rows, train
from pickle_payload import Payload

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration]


def payload_is_live(path: Path, marker: Path) -> None:
    """A plain ``torch.load`` (what resume did before issue 31), in another process, runs the planted payload:
    so the test below would fail if the resume still loaded it that way."""
    assert not marker.exists()
    subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(path)!r}, weights_only=False)"],
                   check=True, capture_output=True, timeout=120)
    assert marker.exists(), "the planted payload does not run under a plain torch.load: the test proves nothing"
    marker.unlink()


def _final(out: Path, step: int) -> dict:
    ck = out / "t" / "checkpoints" / f"step-{step:08d}"
    return {
        "weights": (ck / "policy" / "model.safetensors").read_bytes(),
        "trainer": torch.load(ck / "trainer.pt", weights_only=True)["optimizer"]["state"],
        "allocator": json.loads((ck / "allocator.json").read_text()),
        "steps": Store(out / "pc.duckdb").query("SELECT step, sampled_rollouts, trained_rollouts, loss, mean_reward "
                                                "FROM steps WHERE run_id = 't' ORDER BY step"),
    }


def same(a: dict, b: dict) -> bool:
    ta, tb = a.pop("trainer"), b.pop("trainer")
    tensors = all(torch.equal(ta[k][n], tb[k][n]) for k in ta for n in ta[k]) and ta.keys() == tb.keys()
    return tensors and a == b


# ---- a pickle payload in a checkpoint --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("file", ["rng.pt", "trainer.pt"])
def test_a_pickle_payload_in_a_checkpoint_never_runs_and_the_resume_is_refused(file, run4_and_ref5, base_policy, tmp_path):
    """Expected: exit 2, one line naming the file, "posix.system", "the checkpoint was altered" and "Fix: move it
    aside"; the marker never appears; the run's rows, status and checkpoints are untouched (nothing moved aside).
    Then, following the fix (moving it aside), the resume continues from step 3, bit-exact with the uninterrupted
    run."""
    out = tmp_path / "run"
    shutil.copytree(run4_and_ref5 / "run4", out)
    store = out / "pc.duckdb"
    ck = out / "t" / "checkpoints" / "step-00000004"
    marker = tmp_path / "PWNED"
    state = torch.load(ck / file, weights_only=True)
    torch.save({**state, "x": Payload(marker)}, ck / file)
    rewrite_manifest(ck, file)
    payload_is_live(ck / file, marker)
    before = stored_rows(store)

    r = train(out, "t", base_policy, 5, "--resume")
    assert not marker.exists(), "the payload ran"
    assert r.returncode == 2, r.stderr[-3000:]
    no_traceback(r.stderr)
    (line,) = [m for m in messages(r.stderr) if "pilot-commit" in m]
    assert f"{ck}: {file} holds objects other than tensors and plain data (posix.system)" in line
    assert "the checkpoint was altered" in line and "Fix: move it aside (e.g. to damaged-step-00000004)" in line
    assert r.stdout == ""
    assert stored_rows(store) == before and run_row(store, "t")["status"] == "finished"
    assert sorted(p.name for p in (out / "t" / "checkpoints").iterdir()) == [f"step-{s:08d}" for s in range(1, 5)]

    ck.rename(ck.with_name("damaged-step-00000004"))  # the fix
    r = train(out, "t", base_policy, 5, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not marker.exists()
    assert [json.loads(x)["step"] for x in r.stdout.splitlines()] == [4, 5]
    assert same(_final(out, 5), _final(run4_and_ref5 / "ref5", 5))


@pytest.mark.slow
def test_an_rng_pt_written_before_issue_31_still_resumes_bit_exactly(run4_and_ref5, base_policy, tmp_path):
    """Expected: an rng.pt holding numpy's state as an ndarray (how every checkpoint wrote it before) is read through
    exactly numpy's array names; the resume is exit 0 with no warning and bit-exact with the uninterrupted run."""
    out = tmp_path / "run"
    shutil.copytree(run4_and_ref5 / "run4", out)
    ck = out / "t" / "checkpoints" / "step-00000004"
    rng = torch.load(ck / "rng.pt", weights_only=True)
    name, key, pos, has_gauss, cached = rng["numpy"]
    old = {**rng, "numpy": (name, np.array(key, dtype=np.uint32), pos, has_gauss, cached)}  # np.random.get_state()
    torch.save(old, ck / "rng.pt")
    assert "numpy.ndarray" in torch.serialization.get_unsafe_globals_in_checkpoint(str(ck / "rng.pt"))
    rewrite_manifest(ck, "rng.pt")

    r = train(out, "t", base_policy, 5, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r.stderr)
    assert not [m for m in messages(r.stderr) if "damaged" in m or "WARNING" in m]
    assert [json.loads(x)["step"] for x in r.stdout.splitlines()] == [5]
    assert same(_final(out, 5), _final(run4_and_ref5 / "ref5", 5))


# ---- a policy that would run something ---------------------------------------------------------------------------
def test_a_policy_with_its_own_code_is_refused_without_a_prompt(tmp_path, base_policy):
    """Expected: exit 2, "needs Python code of its own (config.json has an auto_map ...)" with the fix; no "[y/N]"
    prompt, the policy's module never imported (its marker absent) even with "y" on stdin; no run registered."""
    policy = tmp_path / "custom-policy"
    shutil.copytree(base_policy, policy)
    marker = tmp_path / "RAN"
    (policy / "modeling_custom.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    config = json.loads((policy / "config.json").read_text())
    config.update(model_type="custom-lm", architectures=["CustomLM"],  # only the custom code could build it
                  auto_map={"AutoConfig": "modeling_custom.CustomConfig",
                            "AutoModelForCausalLM": "modeling_custom.CustomLM"})
    (policy / "config.json").write_text(json.dumps(config))

    r = train(tmp_path, "t", policy, 2, stdin_text="y\ny\n", timeout=300)
    assert not marker.exists(), "the policy's own code ran"
    assert r.returncode == 2, r.stderr[-3000:]
    no_traceback(r.stderr)
    assert "[y/N]" not in r.stdout + r.stderr and "trust_remote_code" not in r.stderr
    (line,) = messages(r.stderr)
    assert f"the base policy at {policy} needs Python code of its own (config.json has an auto_map" in line
    assert "Fix: use a model whose architecture transformers ships" in line
    assert run_row(tmp_path / "pc.duckdb", "t") is None


def test_pickled_policy_weights_with_a_payload_are_refused_with_our_fix(tmp_path, base_policy):
    """Expected: exit 2, "its weights (pytorch_model.bin) are a pickle file holding objects other than tensors
    (posix.system)" and "Fix: convert them to safetensors"; nothing advising weights_only=False; the marker absent;
    no run registered."""
    from safetensors.torch import load_file

    policy = tmp_path / "pickled-policy"
    shutil.copytree(base_policy, policy)
    marker = tmp_path / "PWNED"
    weights = load_file(policy / "model.safetensors")
    (policy / "model.safetensors").unlink()
    (policy / "SHA256SUMS").unlink(missing_ok=True)
    torch.save({**weights, "x": Payload(marker)}, policy / "pytorch_model.bin")
    payload_is_live(policy / "pytorch_model.bin", marker)

    r = train(tmp_path, "t", policy, 2)
    assert not marker.exists(), "the payload ran"
    assert r.returncode == 2, r.stderr[-3000:]
    no_traceback(r.stderr)
    assert "weights_only" not in r.stderr
    (line,) = messages(r.stderr)
    assert (f"the base policy at {policy}: its weights (pytorch_model.bin) are a pickle file holding objects other than "
            "tensors (posix.system)") in line
    assert "Fix: convert them to safetensors with `model.save_pretrained(dir, safe_serialization=True)`" in line
    assert run_row(tmp_path / "pc.duckdb", "t") is None


# ---- a full disk inside torch's zip writer -----------------------------------------------------------------------
GRPO = ["--method", "grpo", "--set", "allocator.train_batch=8", "--set", "allocator.n=8", "--set", "task.num_prompts=100",
        "--set", "training.ppo_minibatch=4", "--set", "training.eval_every=2", "--set", "training.eval_samples=1",
        "--set", "training.checkpoint_every=1"]
"""GRPO trains at step 0, so the checkpoint after it has Adam's state in trainer.pt."""


def small_checkpoint_disk(out: Path, kib: int) -> Path:
    """``out/t/checkpoints`` as a tmpfs of ``kib`` KiB (the store and the steps stay on the big disk, so the
    status can be recorded): the policy (~0.8 MB) fits, trainer.pt with Adam's two moments (~1.6 MB) does not."""
    mnt = out / "t" / "checkpoints"
    mnt.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(mnt)], capture_output=True,
                      check=False).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); tests/unit/run/test_checkpoints.py covers it in process")
    return mnt


def unmount(mnt: Path) -> None:
    """Unmount the test's tmpfs, also when a file on it is still open in this process (the in-process run's
    failed write): then lazily, so no mount outlives the test."""
    if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode:
        import gc

        gc.collect()  # a leaked file object of the failed write
        if subprocess.run(["umount", str(mnt)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=True)
    assert not os.path.ismount(mnt)


def _trainer_pt_disk_full(reason: str, mnt: Path) -> None:
    assert reason.startswith("disk full: No space left on device"), reason
    assert "Fix: free space on the disk holding" in reason and "--resume" in reason
    assert not [p for p in mnt.iterdir() if p.name.startswith(".tmp-")]  # the partial checkpoint's space is back


@pytest.mark.slow
def test_a_full_disk_inside_torch_save_ends_the_run_failed_with_the_fix(tmp_path, base_policy):
    """Expected (root): the checkpoint after step 0 fills the tmpfs inside torch.save(trainer.pt): exit 1, one line
    "run t failed: disk full: No space left on device (.../trainer.pt). Fix: free space ..."; the run's status
    failed with that reason; step 0's rows are there; no partial checkpoint left."""
    mnt = small_checkpoint_disk(tmp_path, 1500)
    try:
        args = ["train", "--steps", "3", "--out", str(tmp_path), "--run-name", "t", "--policy", str(base_policy),
                "--json", "--quiet", "--seed", "3", *GRPO]
        r = cli(*args)
        assert r.returncode == 1, r.stderr[-3000:]
        no_traceback(r.stderr)
        (line,) = messages(r.stderr)
        assert line.startswith("pilot-commit train: run t failed: disk full: No space left on device") and "trainer.pt" in line
        row = run_row(tmp_path / "pc.duckdb", "t")
        assert row["status"] == "failed" and "trainer.pt" in row["status_reason"]
        _trainer_pt_disk_full(row["status_reason"], mnt)
        assert steps_of(tmp_path / "pc.duckdb", "t") == [1]
    finally:
        unmount(mnt)


@pytest.mark.slow
def test_a_full_disk_under_a_writer_that_hides_it_is_still_a_full_disk(tmp_path, base_policy, monkeypatch, capsys):
    """Expected (root): trainer.pt written with torch.save to a path, as verl's workers write their checkpoint
    (ENOSPC comes out as ``RuntimeError: ... unexpected pos``): the filesystem has no room left, so the status is
    still failed, "disk full: No space left on device (... bytes left; the write failed with RuntimeError ...)"
    with the fix."""
    import pc_pipelines.run.local as local
    from pc_pipelines.cli import main

    monkeypatch.setattr(local, "save_torch", lambda obj, path: torch.save(obj, str(path)))
    mnt = small_checkpoint_disk(tmp_path, 1500)
    try:
        rc = main(["train", "--steps", "3", "--out", str(tmp_path), "--run-name", "t", "--policy", str(base_policy),
                   "--json", "--quiet", "--seed", "3", *GRPO])
        err = capsys.readouterr().err
        assert rc == 1, err[-3000:]
        assert "run t failed: disk full" in err and "Fix: free space" in err
        row = run_row(tmp_path / "pc.duckdb", "t")
        assert row["status"] == "failed" and "bytes left; the write failed with RuntimeError" in row["status_reason"]
        _trainer_pt_disk_full(row["status_reason"], mnt)
    finally:
        unmount(mnt)
