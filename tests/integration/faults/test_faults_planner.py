"""The planner meets ordinary and odd stores (issue 54, cases 4 and 5): `pilot-commit sim-fit` and `plan` as
subprocesses on real DuckDB stores.

* a real training run whose steps trained no group (PC with one pilot rollout: every pilot is decided at once, none
  kept): before, numpy's ``_UFuncOutputCastingError ... 'divide' ... float64 to int64`` in ``simulator/fit.py``
  ``_gains``, exit 1; now both fit and rank, exit 0;
* rows that are odd but legal, written into a simulated run's catalog rows with plain SQL (every evaluation 1.0, a
  run config that is not JSON or an empty object, an observation of n = 5000, no trained group at all, a step
  whose sampled count is NULL): before, tracebacks (math domain error, JSONDecodeError, KeyError, IndexError, the
  cast); now a fit (exit 0) or one line with the fix (exit 2), the store byte for byte the same;
* `sim-fit --out` onto a directory, a folder it cannot write, a block device or a socket: before, tracebacks after
  the fit; now one line, exit 2, the node unchanged;
* `sim-fit` on a run while `simulate` writes it (an evaluation every step): before, ``IndexError: index 267 is out of
  bounds`` when the run's next step and evaluation landed between two of its queries; now one reading session.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import duckdb
import pytest
from fault_cli import ENV, EXE, cli, messages, no_traceback, tree_digest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = ["--method", "pc", "--prompts", "300", "--train-batch", "8", "--n", "8"]
FIT = ["--fit-steps", "5", "--horizon", "5", "--resamples", "0", "--seeds", "1"]


@pytest.fixture(scope="module")
def untrained(tmp_path_factory, base_policy) -> Path:
    """A real 2-step PC training run ``u`` (evaluated before training and after each step) with one pilot rollout
    per prompt: its pass rate is 0 or 1, never in the band, so no group is ever kept or trained."""
    out = tmp_path_factory.mktemp("untrained")
    res = cli("train", "--method", "pc", "--steps", "2", "--out", str(out), "--run-name", "u", "--policy",
              str(base_policy), "--json", "--quiet", "--seed", "3", "--set", "allocator.train_batch=8",
              "--set", "allocator.n=8", "--set", "allocator.n_pilot=1", "--set", "allocator.pilot_strategy=single",
              "--set", "task.num_prompts=100", "--set", "training.ppo_minibatch=4", "--set", "training.eval_every=1",
              "--set", "training.eval_samples=1", "--set", "task.heldout_per_length=5", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_sim_fit_and_plan_on_a_training_run_that_trained_no_group(untrained):
    from pc_pipelines.store import Store

    store = untrained / "pc.duckdb"
    # the run as the case needs it: finished, two steps, evaluations, and not one trained group
    assert Store(store).get_run("u")["status"] == "finished"
    assert Store(store).query("SELECT count(*) AS n, sum(trained_prompts) AS g FROM steps WHERE run_id = 'u'")[0] == \
        {"n": 2, "g": 0}
    before = tree_digest(untrained)
    res = cli("sim-fit", "--store", str(store), "--runs", "u")
    no_traceback(res.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "fitted SimConfig fields" in res.stdout and "\nu " in res.stdout
    res = cli("plan", "--store", str(store), "--runs", "u", "--fit-steps", "1", "--horizon", "5", "--resamples",
              "0", "--seeds", "1")
    no_traceback(res.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "best: " in res.stdout
    assert tree_digest(untrained) == before


def test_sim_fit_and_plan_outputs_into_a_checkpoint_are_refused(untrained):
    """`sim-fit --out` and `plan --plot` into a folder of the run's checkpoints (which the store lists): refused before
    the fit, one line naming the run's checkpoint folder; every checkpoint file byte for byte the same."""
    store, ckpts = untrained / "pc.duckdb", untrained / "u" / "checkpoints"
    before = tree_digest(untrained)
    for args in (["sim-fit", "--out", str(ckpts / "step-00000002" / "fit.json")],
                 ["plan", "--fit-steps", "1", "--horizon", "5", "--resamples", "0", "--plot",
                  str(ckpts / "plan.png")]):
        res = cli(args[0], "--store", str(store), "--runs", "u", *args[1:])
        no_traceback(res.stderr)
        lines = messages(res.stderr)
        assert res.returncode == 2 and len(lines) == 1 and res.stdout == "", res.stderr[-2000:]
        assert f"is inside the checkpoints of run u {ckpts.resolve()}, which this command reads" in lines[0], lines[0]
    assert tree_digest(untrained) == before


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    """A simulated 30-step PC run ``r``, its steps compacted into the catalog (a finished run)."""
    folder = tmp_path_factory.mktemp("planner-sim")
    res = cli("simulate", "--store", str(folder / "pc.duckdb"), "--run-name", "r", "--steps", "30", *SIM)
    assert res.returncode == 0, res.stderr[-3000:]
    return folder


ODD = {
    "every evaluation 1.0": ("UPDATE eval_results SET accuracy = 1.0", None),
    "config not JSON": ("UPDATE runs SET config_json = 'not json'", "its recorded config in"),
    "config an empty object": ("UPDATE runs SET config_json = '{}'", "names no training pool"),
    "an observation of n = 5000": (
        "UPDATE compacted_prompt_observations SET n = 5000 WHERE step = 0 AND stage = 'pilot' AND prompt_id = ("
        "SELECT min(prompt_id) FROM compacted_prompt_observations WHERE step = 0 AND stage = 'pilot')", None),
    "no trained group": ("UPDATE compacted_prompt_observations SET decision = 'kept' WHERE decision = 'trained'",
                         None),
    "a step's sampled count NULL": ("UPDATE compacted_steps SET sampled_rollouts = NULL WHERE step = 3", None),
    "every sampled count NULL": ("UPDATE compacted_steps SET sampled_rollouts = NULL", None),
}


@pytest.mark.parametrize("case", list(ODD))
def test_sim_fit_and_plan_on_odd_but_legal_rows_fit_or_refuse_in_one_line(simulated, tmp_path, case):
    sql, refusal = ODD[case]
    folder = tmp_path / "store"
    shutil.copytree(simulated, folder)
    con = duckdb.connect(str(folder / "pc.duckdb"))
    try:
        con.execute(sql)
    finally:
        con.close()
    before = tree_digest(folder)
    for command in (["sim-fit"], ["plan", *FIT]):
        res = cli(command[0], "--store", str(folder / "pc.duckdb"), "--runs", "r", *command[1:])
        no_traceback(res.stderr)
        lines = [ln for ln in messages(res.stderr) if not ln.startswith("plan: ")]  # plan's progress lines
        if refusal is None:
            assert res.returncode == 0 and not lines, (case, command[0], res.stderr[-2000:])
            assert ("fitted SimConfig fields" if command[0] == "sim-fit" else "best: ") in res.stdout
        else:
            assert res.returncode == 2 and len(lines) == 1, (case, res.stderr[-2000:])
            assert refusal in lines[0] and "run 'r'" in lines[0] and "Fix:" in lines[0], lines[0]
    assert tree_digest(folder) == before


def _refused_out(store: Path, out: Path, words: str, status: int = 2) -> None:
    res = cli("sim-fit", "--store", str(store), "--runs", "r", "--out", str(out))
    no_traceback(res.stderr)
    lines = messages(res.stderr)
    assert res.returncode == status and len(lines) == 1, res.stderr[-2000:]
    assert words in lines[0] and "Fix:" in lines[0], lines[0]


def test_sim_fit_out_onto_what_takes_no_file_is_one_line(simulated, tmp_path):
    """A directory, a folder it cannot write (as root: /sys, which root cannot write either), a block device, a
    socket: one line, exit 2 (a folder it cannot write: 1, a failed write), each node as it was, the store unchanged."""
    store = simulated / "pc.duckdb"
    before = tree_digest(simulated)
    folder = tmp_path / "fit.json"
    folder.mkdir()
    _refused_out(store, folder, f"--out {folder} is a directory; it is not written over")
    assert folder.is_dir() and not list(folder.iterdir())

    if os.geteuid() == 0:
        locked = Path("/sys/fit.json")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        locked = ro / "fit.json"
    try:
        # a failed write: exit 1 (cli/exits.py; was 2, a configuration error, before issue 56 point 4)
        _refused_out(store, locked, f"could not write {locked}: Permission denied; the fit above is not saved", 1)
        assert not locked.exists()
    finally:
        if locked.parent != Path("/sys"):
            locked.parent.chmod(0o755)

    disk = tmp_path / "disk"
    try:
        os.mknod(disk, stat.S_IFBLK | 0o600, os.makedev(7, 250))
    except PermissionError:
        disk = next(p for p in sorted(Path("/dev").iterdir()) if stat.S_ISBLK(os.lstat(p).st_mode))
    ident = os.lstat(disk)
    _refused_out(store, disk, f"--out {disk} is a block device")
    assert (os.lstat(disk).st_ino, os.lstat(disk).st_rdev) == (ident.st_ino, ident.st_rdev)

    sock_path = tmp_path / "fit.sock"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        _refused_out(store, sock_path, f"--out {sock_path} is a socket")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        sock.close()
    assert tree_digest(simulated) == before


def test_sim_fit_while_simulate_writes_the_run(tmp_path):
    """`sim-fit` three times on a run that `simulate` is writing (an evaluation after every step): each reads the
    run as it stood when its reading session opened, exit 0, no traceback; the writer is not disturbed."""
    store = tmp_path / "pc.duckdb"
    writer = subprocess.Popen([*EXE, "simulate", "--store", str(store), "--run-name", "big", "--steps", "600",
                               "--set", "training.eval_every=1", "--method", "pc", "--prompts", "3000",
                               "--train-batch", "16", "--n", "8"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        from pc_pipelines.store import Store

        # a few steps with their evaluations first: the writer batches evaluation rows (every flush_every_s = 2 s
        # of its time), so a fast machine can write 20 steps before the first evaluation lands; a fit needs the one
        # before training and one more (the refusal for fewer is its own fault case)
        ready = ("SELECT (SELECT count(*) FROM steps) AS steps, "
                 "(SELECT count(DISTINCT step) FROM eval_results WHERE run_id = 'big') AS evals")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                row = Store(store).query(ready)[0] if store.exists() else None
                if row and row["steps"] >= 20 and row["evals"] >= 2:
                    break
            except Exception:  # the catalog is being created
                pass
            time.sleep(0.5)
        else:
            raise AssertionError(f"no 20 steps and 2 evaluations within 300 s: {writer.poll()=}")
        fits = 0
        while writer.poll() is None and fits < 3:
            res = cli("sim-fit", "--store", str(store), "--runs", "big")
            no_traceback(res.stderr)
            assert res.returncode == 0, res.stderr[-3000:]
            fits += 1
        assert fits >= 1
        _, err = writer.communicate(timeout=600)
        assert writer.returncode == 0, err[-3000:]
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=30)
    steps = Store(store).query("SELECT step FROM steps WHERE run_id = 'big' ORDER BY step")
    assert [r["step"] for r in steps] == list(range(1, 601))
