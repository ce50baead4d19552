"""Segment arithmetic and the sensor's decisions (pure)."""

import pytest

from pc_pipelines.run import stale_checkpoints
from pc_pipelines.segments import (
    Action,
    RunView,
    SegmentError,
    SegmentPlan,
    SegmentView,
    decide,
    parse_partition_key,
    partition_key,
    resume_step,
    run_key,
)


def test_partition_keys_round_trip_and_bad_keys_say_how_to_fix():
    assert partition_key("pc-s0", 3) == "pc-s0/seg-0003"
    assert parse_partition_key("pc-s0/seg-0003") == ("pc-s0", 3)
    assert parse_partition_key("embedded-arith-pc-s0-1a2b3c4d/seg-12345") == ("embedded-arith-pc-s0-1a2b3c4d", 12345)
    for bad in ("pc-s0", "pc-s0/seg-3", "pc-s0/0003", "/seg-0001", "a/b/seg-0001"):
        with pytest.raises(SegmentError, match="start_run job"):
            parse_partition_key(bad)


def test_plan_bounds_match_the_worked_example():
    plan = SegmentPlan(segment_steps=10, total_steps=25)
    assert plan.num_segments == 3
    assert plan.all_bounds() == [(0, 9), (10, 19), (20, 24)]
    assert SegmentPlan(5, 10).all_bounds() == [(0, 4), (5, 9)]
    with pytest.raises(SegmentError, match="segments 0..2"):
        plan.bounds(3)
    with pytest.raises(SegmentError):
        SegmentPlan(0, 10)


def test_resume_step_recomputes_done_segments_and_resumes_failed_ones():
    # steps 10..19 with checkpoints after 4, 9 and 14 (the docstring's example)
    assert resume_step(10, 19, [4, 9, 14], done=False) == 14
    assert resume_step(10, 19, [4, 9, 14], done=True) == 9
    assert resume_step(10, 19, [4, 9, 14, 19, 29], done=False) == 14  # later checkpoints are not inside
    assert resume_step(0, 9, [], done=False) == -1  # the base policy
    assert resume_step(0, 9, [4, 9], done=True) == -1
    with pytest.raises(SegmentError, match="previous segment is not done"):
        resume_step(10, 19, [4], done=False)


def test_checkpoint_retention_keeps_the_newest_and_every_boundary():
    ckpts = [(s, f"p{s}") for s in (4, 9, 14, 19, 24)]
    assert stale_checkpoints(ckpts, keep_last=2, keep_every=10) == [(4, "p4"), (14, "p14")]
    assert stale_checkpoints(ckpts, keep_last=2, keep_every=0) == [(4, "p4"), (9, "p9"), (14, "p14")]
    assert stale_checkpoints(ckpts, keep_last=5, keep_every=0) == []


def view(*statuses, in_flight=False, status="running", failures=0, attempts=None, error=None):
    segs = tuple(
        SegmentView(k, s, attempts=(attempts if attempts is not None else int(s != "planned")),
                    consecutive_failures=failures if s == "failed" else 0, error=error if s == "failed" else None)
        for k, s in enumerate(statuses)
    )
    return RunView("r", status, segs, in_flight)


def test_sensor_requests_the_next_segment_in_order():
    d = decide(view("planned", "planned"), max_failures=3)
    assert (d.action, d.segment, d.run_key, d.partition_key) == (Action.REQUEST, 0, "r/0", "r/seg-0000")
    d = decide(view("done", "planned", "planned"), max_failures=3)
    assert (d.action, d.segment, d.run_key) == (Action.REQUEST, 1, "r/1")
    assert decide(view("done", "done"), max_failures=3).action is Action.FINISH


def test_sensor_waits_while_a_segment_is_in_flight_and_skips_paused_runs():
    assert decide(view("done", "running", in_flight=True), 3).action is Action.WAIT
    assert decide(view("done", "planned", in_flight=True), 3).action is Action.WAIT
    assert decide(view("planned", status="paused"), 3).action is Action.SKIP
    assert decide(view("done", status="finished"), 3).action is Action.SKIP
    assert decide(RunView("r", "running", (), False), 3).action is Action.SKIP


def test_sensor_retries_with_a_new_run_key_then_pauses_with_the_reason():
    d = decide(view("done", "failed", failures=1, attempts=1, error="OOM"), max_failures=3)
    assert (d.action, d.segment, d.run_key) == (Action.REQUEST, 1, "r/1/retry-1")
    assert "retrying" in d.reason
    d = decide(view("done", "failed", failures=3, attempts=3, error="CUDA OOM"), max_failures=3)
    assert d.action is Action.PAUSE and d.segment == 1
    assert "failed 3 times in a row" in d.reason and "CUDA OOM" in d.reason and "r/seg-0001" in d.reason
    assert run_key("r", 2, 0) == "r/2" and run_key("r", 2, 4) == "r/2/retry-4"
