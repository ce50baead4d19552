"""Issue 40, hostile inputs: what the tool prints for a value a user typed is short and one line, and a setting it
would ignore or fail on mid-run is refused before anything is made.

* a 100,000-character ``--run`` / ``--run-name`` (timeline, report, simulate, train): was echoed whole (100 KB);
* the window schedule on the spring-forward night (02:00-03:00 Europe/Berlin said "opens 03:00", outside the
  window) and ``00:00-24:00`` (the whole day, was refused as empty), as the code location reads them;
* ``allocator.eviction_strategy=easy_pool`` / ``allocator.return_share`` with GRPO or DAPO, ``return_share`` with
  strict eviction: were silently ignored;
* ``oversample=1e308`` (an OverflowError traceback), ``prompt_template="{question}{x}"`` in ``train`` (a KeyError
  traceback), ``simulate-demo --steps 0`` (an IndexError), ``simulate --store ... --steps -5`` (recorded a
  ``finished`` run of 0 steps).

Each case runs the real CLI (a subprocess) against a store holding one run, and checks: exit 2, one line on
stderr naming the value and the fix, no traceback, nothing on stdout, and every file under the store's folder
byte-for-byte as before (no run registered, nothing written).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fault_cli import cli, no_traceback, tree_digest

from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration]

SMALL = ["--prompts", "300", "--train-batch", "8", "--n", "8"]
HUGE = "a" * 100_000


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store holding one finished simulated run, ``kept``."""
    path = tmp_path_factory.mktemp("hostile") / "pc.duckdb"
    cli("simulate", "--store", str(path), "--run-name", "kept", "--steps", "2", "--json", *SMALL, check_rc=0)
    return path


def refused_unchanged(store: Path, *args: str, needles: tuple[str, ...] = (), max_bytes: int = 1024) -> str:
    """Run the CLI; a clean one-line refusal (exit 2, "Fix:", every needle, under ``max_bytes``) that left every
    file under the store's folder as it was and registered no run. Returns the line."""
    before = tree_digest(store.parent)
    res = cli(*args)
    no_traceback(res.stderr)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stdout == "", res.stdout[-2000:]
    assert len(res.stderr.encode()) < max_bytes, (len(res.stderr), res.stderr[:2000])
    assert res.stderr.count("\n") == 1 and res.stderr.endswith("\n"), res.stderr
    assert "Fix:" in res.stderr, res.stderr
    for needle in needles:
        assert needle in res.stderr, (needle, res.stderr)
    assert tree_digest(store.parent) == before
    assert [r["run_id"] for r in Store(store).query("SELECT run_id FROM runs ORDER BY run_id")] == ["kept"]
    return res.stderr


# ---- a 100,000-character value on the command line -----------------------------------------------------------
CUT = "a" * 80 + "'... (100,000 characters)"


@pytest.mark.parametrize(("args", "needles"), [
    (("timeline", "--store", "{store}", "--run", HUGE, "--out", "{dir}/t.png"),
     ("pilot-commit timeline: no run 'aaaa", CUT, "Fix: name one of its runs, e.g. kept.")),
    (("report", "--store", "{store}", "--run", HUGE),
     ("unrecognized arguments: --run aaaa", "a... (100,000 characters). Fix: see `", "pilot-commit report --help`.")),
    (("simulate", "--store", "{store}", "--run-name", HUGE, "--steps", "2", *SMALL),
     ("argument --run-name: --run-name 'aaaa", "is 100000 characters long (at most 128)", "Fix: choose a name")),
    (("train", "--out", "{dir}/runs", "--run-name", HUGE, "--steps", "1"),
     ("pilot-commit train: error: argument --run-name", "Fix: choose a name like 'pc-seed0-try2'")),
    (("train-segment", "--store", "{store}", "--runs-root", "{dir}/runs", "--until-step", "1", "--run-id", HUGE),
     ("pilot-commit train-segment: error: argument --run-id: --run-id 'aaaa", "Fix: choose a name")),
    (("simulate", "--steps", "2", "--method", HUGE),
     ("argument --method: invalid choice: 'aaaa", "... (100,002 characters)", "Fix: see `", "pilot-commit simulate --help`")),
    (("timeline", "--store", "{store}", "--run", "kept", "--out", "{dir}/" + HUGE + "/t.png"),
     ("could not write", "(100,", "characters): File name too long. Fix: give --out a PNG file path")),
])
def test_a_100k_character_value_is_echoed_cut_in_one_line(store, args, needles):
    """Before: the timeline's 'no run' message and argparse's 'unrecognized arguments' held the whole 100,000
    characters (100 KB of stderr); argparse errors printed the usage block (over 1 KB for train)."""
    args = tuple(a.replace("{store}", str(store)).replace("{dir}", str(store.parent)) for a in args)
    refused_unchanged(store, *args, needles=needles)
    assert not (store.parent / "runs").exists() and not (store.parent / "t.png").exists()


# ---- the window schedule, as the code location reads it --------------------------------------------------------
SCHEDULE_PROBE = textwrap.dedent("""
    from datetime import datetime
    from zoneinfo import ZoneInfo
    from pc_pipelines_dagster.automation.schedules import ScheduleSettings
    window = ScheduleSettings.from_env().window
    berlin = ZoneInfo("Europe/Berlin")
    print(window, window.contains(datetime(2025, 3, 30, 3, 15, tzinfo=berlin)))
    print(window.closed_reason(datetime(2025, 3, 30, 1, 30, tzinfo=berlin)) if not window.whole_day else "whole day")
""")


def probe_schedule(window: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PC_ADVANCE_SCHEDULE_WINDOW": window, "PC_ADVANCE_SCHEDULE_TIMEZONE": "Europe/Berlin"}
    return subprocess.run([sys.executable, "-c", SCHEDULE_PROBE], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_a_window_wholly_in_the_spring_forward_gap_says_the_next_night():
    """02:00-03:00 Europe/Berlin at 01:30 on 2025-03-30 (the clocks skip 02:00-03:00): before, "it opens at
    2025-03-30 03:00 CEST (in 0h 30m)", a time outside the window; now the next night's 02:00."""
    res = probe_schedule("02:00-03:00")
    assert res.returncode == 0, res.stderr[-2000:]
    first, reason = res.stdout.splitlines()
    assert first == "02:00-03:00 Europe/Berlin False"  # 03:15 CEST that night is outside
    assert reason.startswith("outside the window 02:00-03:00 Europe/Berlin: it opens at 2025-03-31 02:00 CEST "
                             "(in 23h 30m)")


def test_00_00_to_24_00_is_the_whole_day_and_00_00_to_00_00_points_to_it():
    res = probe_schedule("00:00-24:00")  # before: refused as "an empty window"
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == ["00:00-24:00 Europe/Berlin True", "whole day"]
    bad = probe_schedule("00:00-00:00")
    assert bad.returncode == 1 and "PC_ADVANCE_SCHEDULE_WINDOW='00:00-00:00': an empty window" in bad.stderr
    assert "For the whole day write 00:00-24:00." in bad.stderr


# ---- settings the run would ignore -----------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "needles"), [
    (("--method", "grpo", "--set", "allocator.eviction_strategy=easy_pool"),
     ("--set allocator.eviction_strategy='easy_pool' is a PC setting: a grpo run", "Fix: drop it, or use --method pc.")),
    (("--method", "dapo", "--set", "allocator.return_share=0.5"),
     ("--set allocator.return_share=0.5 is a PC setting: a dapo run", "Fix: drop it, or use --method pc.")),
    (("--method", "grpo", "--set", "allocator.return_share=0.5", "--set", "allocator.eviction_strategy=easy_pool"),
     ("is a PC setting: a grpo run",)),
    (("--method", "pc", "--set", "allocator.return_share=0.5"),
     ("--set allocator.return_share=0.5 is an easy_pool setting, but allocator.eviction_strategy='strict'",
      "Fix: drop it, or add --set allocator.eviction_strategy=easy_pool.")),
    (("--method", "grpo", "--set", "allocator.n_pilot=4"),  # the refusal the others follow (it held before)
     ("--set allocator.n_pilot=4 (or --n-pilot / --n-commit) is a PC setting",)),
])
def test_a_setting_the_run_would_ignore_is_refused_before_anything_is_registered(store, args, needles):
    """Before: the GRPO / DAPO run (or strict PC) ran and was recorded, the setting ignored."""
    refused_unchanged(store, "simulate", "--store", str(store), "--run-name", "ignored", "--steps", "2", *SMALL, *args,
                      needles=needles)


def test_simulate_demo_gives_pc_eviction_settings_to_the_pc_run_only(tmp_path):
    res = cli("simulate-demo", "--steps", "3", *SMALL, "--set", "allocator.eviction_strategy=easy_pool",
              "--set", "allocator.return_share=0.5")
    assert res.returncode == 0, res.stderr[-2000:]
    no_traceback(res.stderr)
    assert "pc " in res.stdout and "grpo " in res.stdout


# ---- values that failed mid-run --------------------------------------------------------------------------------
def test_oversample_1e308_is_refused_naming_the_range(store):
    """Before: OverflowError: cannot convert float infinity to integer (a traceback computing b_g)."""
    refused_unchanged(store, "simulate", "--store", str(store), "--run-name", "huge-s", "--steps", "2", *SMALL,
                      "--set", "allocator.oversample=1e308",
                      needles=("AllocatorConfig.oversample=1e+308: must be a number from 1 to 100",
                               "Fix: set oversample in [1, 100], e.g. 3 as the paper."))


def test_a_prompt_template_with_another_placeholder_is_refused_by_train(store):
    """Before: train built the task, then failed on template.format(question=...) with KeyError: 'x'."""
    line = refused_unchanged(store, "train", "--store", str(store), "--out", str(store.parent / "runs"), "--steps", "1",
                             "--set", 'training.prompt_template="{question}{x}"',
                             needles=("TrainingConfig.prompt_template='{question}{x}': has the placeholder '{x}', but "
                                      "only {question} is filled in", "Fix: drop it, or write {{ and }} for a literal"))
    assert line.startswith("pilot-commit: configuration error: ")
    assert not (store.parent / "runs").exists()


@pytest.mark.parametrize(("command", "steps", "default"), [("simulate-demo", "0", 300), ("simulate", "-5", 200),
                                                           ("simulate", "0", 200)])
def test_fewer_than_one_step_is_refused_before_a_run_is_registered(store, command, steps, default):
    """Before: simulate-demo --steps 0 raised IndexError (after registering its runs with --store);
    simulate --store ... --steps -5 recorded a `finished` run of 0 steps."""
    name = ("--run-name", "no-steps") if command == "simulate" else ()
    refused_unchanged(store, command, "--store", str(store), *name, "--steps", steps, *SMALL,
                      needles=(f"--steps {steps}: must be >= 1", f"Fix: pass --steps 1 or more (default {default})."))
