"""A Dagster run between two segments reads as waiting for its next segment in `pilot-commit runs` and `check` (with
who requested it, or why it is deferred), never as a crashed writer; only a writer that died mid-segment reads
stopped; `runs` shows steps done of planned. A real store, real segment rows written under the run's writer lock, the
real advancing rule of the sensor on a real (ephemeral) Dagster instance, the installed CLI."""

from __future__ import annotations

import json
import logging
import re
from functools import partial

import pyarrow as pa
import pytest
from dagster import DagsterInstance
from pilot_cli import run_cli

from pc_pipelines.store import STEP_TABLES, RunRecord, Store, hold_run
from pc_pipelines_dagster.automation.sensors import advance, sensor_tag

pytestmark = pytest.mark.integration

LOG = logging.getLogger(__name__)
DEFER = "the schedule advance_runs_in_window is running: it requests segments, in 22:00-06:00 UTC only"


cli = partial(run_cli, check_rc=0)


def status_line(store: Store, run_id: str) -> str:
    """The line below `runs`' table that gives the run's status and its reason."""
    lines = cli("runs", "--store", str(store.path)).stdout.splitlines()
    return next(ln for ln in lines if re.match(rf"{run_id} (waiting|stopped|paused|failed): ", ln))


def write_steps(store: Store, run_id: str, steps: range) -> None:
    """Minimal real step directories (a steps row of 16 sampled rollouts, no observations)."""
    for step in steps:
        row = {"run_id": run_id, "step": step, "epoch": 0, "rounds": 1, "engine_calls": 1, "sampled_rollouts": 16,
               "pilot_rollouts": 0, "commit_rollouts": 0, "full_rollouts": 16, "trained_rollouts": 16,
               "shortfall": False}
        store.writer(run_id).write_step(step, {
            "steps": pa.Table.from_pylist([row], schema=STEP_TABLES["steps"]),
            **{t: STEP_TABLES[t].empty_table() for t in ("prompt_observations", "buffer_state", "evictions")}})


@pytest.fixture
def store(tmp_path) -> Store:
    """Run ``r`` of 3 segments of 2 steps; its first segment trained (steps 1..2) and recorded done by a writer that
    has ended."""
    st = Store(tmp_path / "pc.duckdb").init()
    st.register_run(RunRecord(run_id="r", family="f", method="pc", preset="embedded", seed=0, config={},
                              config_hash="h", kind="train"))
    st.plan_segments("r", [(1, 2), (3, 4), (5, 6)])
    with hold_run("r", st.run_dir("r"), command="test segment"):
        st.segment_started("r", 0, "dagster-run-1")
        write_steps(st, "r", range(1, 3))
        st.segment_done("r", 0, cumulative_rollouts=128, eval_accuracy=None, mean_reward_std=None)
    return st


def test_a_run_between_segments_reads_waiting_with_done_of_planned(store):
    table = cli("runs", "--store", str(store.path)).stdout
    row = next(ln for ln in table.splitlines() if ln.startswith("r "))
    assert row.split()[4] == "2/6" and row.split()[-1] == "waiting"
    assert ("r waiting: waiting for its next segment, segment seg-0001 of 3 (steps 3..4); not requested yet (the "
            "advance_runs sensor or the advance_runs_in_window schedule requests it)") in table
    assert "stopped" not in table and "no process holds its writer lock" not in table
    runs = json.loads(cli("runs", "--store", str(store.path), "--json").stdout)
    assert (runs[0]["status"], runs[0]["steps"], runs[0]["planned_steps"]) == ("waiting", 2, 6)
    check = cli("check", "--store", str(store.path)).stdout
    assert "run r: waiting: waiting for its next segment, segment seg-0001 of 3" in check and "stopped" not in check
    checked = json.loads(cli("check", "--store", str(store.path), "--json").stdout)
    assert checked["stopped_runs"] == [] and [r["run_id"] for r in checked["waiting_runs"]] == ["r"]
    assert store.get_run("r")["status"] == "running"  # a reader changes nothing


def test_the_waiting_run_says_who_requested_its_segment_or_why_it_is_deferred(store):
    instance = DagsterInstance.ephemeral()
    tick = advance(store, instance, LOG, 3, sensor_tag(), defer=DEFER)
    assert tick.requests == []
    assert status_line(store, "r") == ("r waiting: waiting for its next segment, segment seg-0001 of 3 (steps 3..4): "
                                       f"r/seg-0001 deferred: {DEFER}")
    tick = advance(store, instance, LOG, 3, sensor_tag())
    assert [r.partition_key for r in tick.requests] == ["r/seg-0001"]
    assert status_line(store, "r").endswith("segment seg-0001 of 3 (steps 3..4): r/seg-0001 requested by sensor:advance_runs")
    updated = store.get_run("r")["updated_at"]
    advance(store, instance, LOG, 3, sensor_tag())  # the same note again: nothing written
    assert store.get_run("r")["updated_at"] == updated


def test_a_failed_segment_waits_for_its_retry_and_a_paused_run_says_why(store):
    store.segment_failed("r", 1, "RuntimeError: out of memory")
    assert status_line(store, "r").startswith("r waiting: waiting to retry segment seg-0001 of 3 (steps 3..4), which failed 1 "
                                              "time(s) in a row (last: RuntimeError: out of memory)")
    store.set_status("r", "paused", "segment 1 failed 3 times in a row (limit 3)")
    assert status_line(store, "r") == "r paused: segment 1 failed 3 times in a row (limit 3)"


def test_a_writer_that_died_mid_segment_reads_stopped(store):
    with hold_run("r", store.run_dir("r"), command="test segment"):
        store.segment_started("r", 1, "dagster-run-2")
        write_steps(store, "r", range(3, 4))  # and its process ends mid-segment without recording an outcome
    line = status_line(store, "r")
    assert line.startswith("r stopped: recorded as running, but no process holds its writer lock") and "Fix:" in line
