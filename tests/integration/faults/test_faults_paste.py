"""Issue 40 point 1: a command the tool prints for a person to paste does what it says, whatever the store's path
holds. Each case makes a real store under a directory whose name holds single quotes and spaces, ``$(touch pwned)``,
backticks or a newline, gets the real text (``pilot-commit check``'s fix for a damaged step, ``simulate-demo``'s
closing hints, a Dagster segment's ``sql`` and ``tensorboard_command`` metadata), and pastes the command into
``bash -c`` in a directory of its own. Each checks that the command ran as one command with its arguments whole (the
damaged step is gone, the query printed the store's rows, TensorBoard was given the run's directory), that no code
in the path ran (no ``pwned`` file anywhere), and that nothing outside the store changed: a sibling ``Bobs`` and an
``and`` where the paste runs are what a command broken at the first quote (``rm -r '/x/Bob's and Al's runs/...'``)
deleted before.

Issue 54 case 3: the fix `runs` and `check` print for a stopped run (its writer killed) names the store, the run
folder, the run and its flags: pasted in another directory it continues that run in its store (a killed `train --out
exp` resumes; a killed `simulate --store S` is recorded again) and creates nothing where it is pasted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize
from dagster_runs import local_resources, register_run
from fault_cli import ENV, EXE, SIM, TRAIN, cli, no_traceback, run_row, steps_of

from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.training import training_segment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = Path(sys.executable).parent  # the environment's pilot-commit, as a person's PATH has it
MARKER = "pwned"
NAMES = {
    "quotes-and-spaces": "Bob's and Al's runs",
    "command-substitution": "Bob's and Al's $(touch pwned) runs",
    "backticks": "Bob's and Al's `touch pwned` runs",
    "newline": "Bob's and Al's runs\nsecond line",
    "all-of-them": "Bob's \"and\" Al's $(touch pwned) `touch pwned` $HOME runs!\n\tend",
}
KILL_AFTER = 4  # steps printed (hence on disk, uncompacted) before the SIGKILL
# A one-step Dagster segment (test_faults_segments.py's tiny run).
TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2", "training.eval_every=2", "training.eval_samples=1",
        "task.heldout_per_length=5", "task.num_prompts=200", "training.checkpoint_every=1"]


class Place:
    """``tmp/home/<name>/`` for the store, decoys beside it and where the paste runs, and a snapshot of the rest."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.store_dir = self.home / name
        self.here = tmp / "paste-here"  # the shell's working directory
        self.store_dir.mkdir(parents=True)
        self.here.mkdir()
        for decoy in (self.home / "Bobs", self.here / "and", self.here / "Als"):
            decoy.mkdir()
            (decoy / "keep.txt").write_text(f"{decoy.name} is not the tool's to delete\n")

    def outside(self) -> dict[str, str]:
        """sha256 (or "dir") of every path under tmp that is not in the store's directory."""
        out = {}
        for p in sorted(self.tmp.rglob("*")):
            if p == self.store_dir or self.store_dir in p.parents:
                continue
            out[str(p)] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        return out

    def paste(self, command: str, path_first: Path = BIN) -> subprocess.CompletedProcess:
        env = {**ENV, "PATH": f"{path_first}{os.pathsep}{BIN}{os.pathsep}{ENV.get('PATH', '')}",
               "HOME": str(self.here)}
        return subprocess.run(["bash", "-c", command], cwd=self.here, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300, check=False)

    def assert_no_code_ran(self) -> None:
        assert [str(p) for p in self.tmp.rglob(MARKER)] == []  # what `touch pwned` would have made


def snapshot(root: Path, skip: Path | None = None) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and (skip is None or skip not in p.parents)}


def killed_run(store: Path, name: str) -> list[int]:
    """A real ``pilot-commit simulate``, SIGKILLed once it has printed KILL_AFTER steps (on disk, uncompacted)."""
    proc = subprocess.Popen([str(BIN / "pilot-commit"), "simulate", "--store", str(store), "--run-name", name,
                             "--steps", "400", "--prompts", "20000", "--train-batch", "32", "--n", "16", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    printed = []
    try:
        while len(printed) < KILL_AFTER:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            printed.append(json.loads(line)["step"])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    return printed


def in_backticks(text: str, head: str) -> str:
    """The one command of ``text`` that starts with ``head``, between backticks."""
    found = re.findall(rf"`({re.escape(head)}[^`]*)`", text)
    assert len(found) == 1, text
    return found[0]


def code_block(markdown: str) -> str:
    assert markdown.startswith("```\n") and markdown.endswith("\n```"), markdown
    return markdown[4:-4]


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_check_s_rm_fix_deletes_the_damaged_step_and_nothing_else(tmp_path, name):
    """Before: ``rm -r '<path>'`` with the path pasted in as it is; under ``Bob's and Al's runs`` bash deleted the
    sibling ``Bobs`` (and ``and`` where it ran) and left the damaged step; ``$(...)`` or backticks after a quote ran."""
    place = Place(tmp_path, name)
    store = place.store_dir / "s.duckdb"
    assert killed_run(store, "killed") == [1, 2, 3, 4]
    steps = Path(str(store) + ".runs") / "killed"
    damaged = steps / "step-00000003"
    (damaged / "steps.parquet").write_bytes(b"")
    shown = cli("check", "--store", str(store), check_rc=1)
    no_traceback(shown.stderr)
    problem, = json.loads(cli("check", "--store", str(store), "--json", check_rc=1).stdout)["problems"]
    assert (problem["step"], problem["kind"], problem["path"]) == (3, "damaged", str(damaged))
    command = in_backticks(problem["fix"], "rm -r ")
    outside, kept = place.outside(), snapshot(steps, skip=damaged)

    pasted = place.paste(command)

    place.assert_no_code_ran()
    assert place.outside() == outside  # Bobs, and, Als: untouched
    assert snapshot(steps, skip=damaged) == kept  # the other steps, byte for byte
    assert pasted.returncode == 0 and pasted.stderr == "", pasted.stderr
    assert not damaged.exists()  # it did what it says
    fix_lines = [ln for ln in shown.stdout.splitlines() if ln.startswith("  fix:")]
    assert len(fix_lines) == 1 and in_backticks(fix_lines[0], "rm -r ") == command  # the whole fix on one line
    after, = json.loads(cli("check", "--store", str(store), "--json", check_rc=1).stdout)["problems"]
    assert (after["step"], after["kind"]) == (3, "missing") and "accept the gap" in after["fix"]


@pytest.mark.parametrize("name", [NAMES["quotes-and-spaces"], NAMES["all-of-them"]],
                         ids=["quotes-and-spaces", "all-of-them"])
def test_simulate_demo_s_hints_ask_the_store_they_name(tmp_path, name):
    """Before: ``pilot-commit sql --store <path> "..."`` with the path unquoted: bash split it at the spaces (exit 2,
    unrecognized arguments) or ran the ``$(...)`` in it."""
    place = Place(tmp_path, name)
    store = place.store_dir / "demo.duckdb"
    on_path = {**ENV, "PATH": f"{BIN}{os.pathsep}{ENV.get('PATH', '')}"}  # the hints name `pilot-commit` bare then
    out = cli("simulate-demo", "--store", str(store), "--steps", "5", "--prompts", "500", "--train-batch", "8",
              "--n", "8", check_rc=0, env=on_path)
    no_traceback(out.stderr)
    hints = ["pilot-commit " + h.rstrip("\n") for h in out.stdout.split("Ask it, e.g.:\n  pilot-commit ", 1)[1]
             .split("\n  pilot-commit ")]
    assert [h.split()[:2] for h in hints] == [["pilot-commit", "runs"], ["pilot-commit", "report"],
                                              ["pilot-commit", "sql"]]
    runs = sorted(r["run_id"] for r in Store(store).list_runs())
    decisions = Store(store).query(
        "SELECT decision, count(*) AS n FROM prompt_observations WHERE stage = 'pilot' GROUP BY ALL")
    assert len(runs) == 4 and decisions
    outside, catalog = place.outside(), snapshot(place.store_dir)

    shown = [place.paste(h) for h in hints]

    place.assert_no_code_ran()
    assert place.outside() == outside
    assert snapshot(place.store_dir) == catalog  # the queries read, nothing more
    assert all("\n" not in h for h in hints)  # one line each
    for r in shown:
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert all(run in shown[0].stdout for run in runs)
    table = [ln.split() for ln in shown[2].stdout.splitlines()]
    assert all([d["decision"], str(d["n"])] in table for d in decisions), shown[2].stdout
    assert f"({len(decisions)} row" in shown[2].stdout


def test_a_dagster_segment_s_sql_and_tensorboard_commands_paste_whole(tmp_path, base_policy, monkeypatch):
    """Before: the segment's ``sql`` and ``tensorboard_command`` metadata put the store and TensorBoard paths in
    unquoted: pasted, the path's ``$(...)`` ran and the command got pieces of the path."""
    place = Place(tmp_path, NAMES["all-of-them"])
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # the scripts named bare, as pasted
    instance = DagsterInstance.ephemeral()
    run_id = register_run(instance, place.store_dir, base_policy, "paste", TINY, segment_steps=1, total_steps=1)
    res = materialize([training_segment], partition_key=f"{run_id}/seg-0000", instance=instance,
                      resources=local_resources(place.store_dir), tags={"pc/run": run_id})
    assert res.success
    meta = res.asset_materializations_for_node("training_segment")[-1].metadata
    sql, tensorboard = code_block(meta["sql"].value), code_block(meta["tensorboard_command"].value)
    store = Store(place.store_dir / "pc.duckdb")
    rows = store.query("SELECT step, sampled_rollouts FROM steps WHERE run_id = ?", [run_id])
    assert [r["step"] for r in rows] == [1]
    logdir = place.store_dir / "runs" / run_id / "tensorboard"
    assert logdir.is_dir()
    # TensorBoard itself would serve until stopped: a stand-in first on PATH records the arguments it was given.
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "tensorboard").write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {stand_in}/argv\n")
    (stand_in / "tensorboard").chmod(0o755)
    outside, files = place.outside(), snapshot(place.store_dir)

    queried = place.paste(sql)
    opened = place.paste(tensorboard, path_first=stand_in)

    place.assert_no_code_ran()
    assert {k: v for k, v in place.outside().items() if not k.startswith(str(stand_in))} == \
        {k: v for k, v in outside.items() if not k.startswith(str(stand_in))}
    assert snapshot(place.store_dir) == files
    assert "\n" not in tensorboard  # one line
    # the program, sql, --store and the store path whole on the first line; only the query's text (issue 55: on
    # short lines, so the metadata table stays on screen) continues inside its opening quote
    head, _, query = sql.partition("\n")
    assert head.endswith(("'", '"')) and "SELECT" not in head and query.lstrip().startswith("SELECT")
    assert queried.returncode == 0 and "Traceback" not in queried.stderr, queried.stderr
    table = [ln.split() for ln in queried.stdout.splitlines()]
    assert table[0][:5] == ["step", "mean_reward", "mean_reward_std", "informative_share", "sampled_rollouts"]
    assert table[2][0] == "1" and table[2][4] == str(rows[0]["sampled_rollouts"]) and table[3] == ["(1", "row)"]
    assert opened.returncode == 0, opened.stderr
    assert (stand_in / "argv").read_bytes().split(b"\0")[:-1] == [b"--logdir", os.fsencode(str(logdir))]


# ---- issue 54 case 3: a stopped run's fix, pasted in another directory, acts on that run ----------------------------
FIX_NAME = NAMES["command-substitution"]  # "Bob's and Al's $(touch pwned) runs"


def killed(argv: list[str], cwd: Path, after: int) -> list[int]:
    """``pilot-commit *argv`` (its steps as JSON lines) in ``cwd``, SIGKILLed once it has printed ``after`` steps."""
    proc = subprocess.Popen([*EXE, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    printed: list[int] = []
    try:
        while len(printed) < after:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            with contextlib.suppress(ValueError):
                printed.append(json.loads(line)["step"])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    return printed


def the_fix(store: Path, run: str, subcommand: str) -> str:
    """The command ``runs`` prints for the stopped ``run`` (``check`` prints the same), between backticks."""
    shown = cli("runs", "--store", str(store), check_rc=0)
    checked = cli("check", "--store", str(store))
    no_traceback(shown.stderr + checked.stderr)
    line, = [ln for ln in shown.stdout.splitlines() if ln.startswith(f"{run} stopped:")]
    found = re.findall(rf"`([^`]* {subcommand} --store [^`]*)`", line)
    assert len(found) == 1, line
    assert found[0] in checked.stdout, checked.stdout  # `check` names the same command
    return found[0]


def assert_nothing_else(place: Place, outside: dict[str, str], store: Path) -> None:
    place.assert_no_code_ran()
    assert place.outside() == outside  # no ./runs, no cache, no decoy touched where the paste ran
    assert sorted(place.tmp.rglob("*.duckdb")) == [store]


def test_a_stopped_train_runs_fix_resumes_it_from_another_directory(tmp_path, base_policy):
    """``train --out exp`` (a relative folder, as typed), killed after 2 of 4 steps; the fix pasted elsewhere
    resumes it in its own store and folder to its 4 steps."""
    place = Place(tmp_path, FIX_NAME)
    store = place.store_dir / "exp" / "pc.duckdb"
    argv = ["train", "--method", "pc", "--steps", "4", "--out", "exp", "--run-name", "t", "--policy",
            str(base_policy), "--json", "--quiet", "--seed", "3", *TRAIN]
    assert killed(argv, place.store_dir, after=2) == [1, 2]
    before = steps_of(store, "t")
    command = the_fix(store, "t", "train")
    assert "\n" not in command
    outside = place.outside()

    pasted = place.paste(command)

    assert pasted.returncode == 0, pasted.stderr[-3000:]
    no_traceback(pasted.stderr)
    assert steps_of(store, "t") == [1, 2, 3, 4] and len(before) >= 2  # that run, grown to the steps it asked for
    assert run_row(store, "t")["status"] == "finished"
    assert (place.store_dir / "exp" / "t" / "checkpoints").is_dir()  # its own run folder
    assert_nothing_else(place, outside, store)


def test_a_stopped_simulations_fix_records_it_again_from_another_directory(tmp_path):
    """``simulate --store S`` killed after 4 of 40 steps; the fix pasted elsewhere records it again in S."""
    place = Place(tmp_path, FIX_NAME)
    store = place.store_dir / "s.duckdb"
    argv = ["simulate", "--store", str(store), "--run-name", "r", "--steps", "40", "--json", *SIM,
            "--set", "allocator.p_upper=0.875"]
    assert killed(argv, place.tmp, after=4) == [1, 2, 3, 4]
    config = run_row(store, "r")["config_hash"]
    command = the_fix(store, "r", "simulate")
    assert "\n" not in command
    outside = place.outside()

    pasted = place.paste(command)

    assert pasted.returncode == 0, pasted.stderr[-3000:]
    no_traceback(pasted.stderr)
    assert steps_of(store, "r") == list(range(1, 41))  # recorded again, whole, in its store
    row = run_row(store, "r")
    assert (row["status"], row["config_hash"]) == ("finished", config)  # the same run: its flags came with it
    assert_nothing_else(place, outside, store)
