"""Segment arithmetic and the sensor's decisions (pure)."""

import pytest

from pc_pipelines.run import stale_checkpoints
from pc_pipelines.run.segments import (
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
    assert plan.all_bounds() == [(1, 10), (11, 20), (21, 25)]  # steps count from 1
    assert SegmentPlan(5, 10).all_bounds() == [(1, 5), (6, 10)]
    with pytest.raises(SegmentError, match="segments 0..2"):
        plan.bounds(3)
    with pytest.raises(SegmentError):
        SegmentPlan(0, 10)


def test_resume_step_recomputes_done_segments_and_resumes_failed_ones():
    # steps 11..20 with checkpoints after 5, 10 and 15 (the docstring's example)
    assert resume_step(11, 20, [5, 10, 15], done=False) == 15
    assert resume_step(11, 20, [5, 10, 15], done=True) == 10
    assert resume_step(11, 20, [5, 10, 15, 20, 30], done=False) == 15  # later checkpoints are not inside
    assert resume_step(1, 10, [], done=False) == 0  # the base policy
    assert resume_step(1, 10, [5, 10], done=True) == 0
    with pytest.raises(SegmentError, match="previous segment is not done"):
        resume_step(11, 20, [5], done=False)


def test_checkpoint_retention_keeps_the_newest_and_every_boundary():
    ckpts = [(s, f"p{s}") for s in (5, 10, 15, 20, 25)]
    assert stale_checkpoints(ckpts, keep_last=2, keep_every=10) == [(5, "p5"), (15, "p15")]
    assert stale_checkpoints(ckpts, keep_last=2, keep_every=0) == [(5, "p5"), (10, "p10"), (15, "p15")]
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


def test_sensor_resumes_a_stopped_segment_without_counting_a_failure():
    d = decide(view("done", "stopped", attempts=1, status="stopped"), max_failures=1)
    assert (d.action, d.segment, d.run_key) == (Action.REQUEST, 1, "r/1/retry-1")
    assert d.reason == "resuming (from its checkpoint) the stopped segment seg-0001 of 2"


def test_the_reasons_name_segments_by_their_partition_key_as_the_ui_does():
    """The sensor's reasons (its log line, its skip reason in the UI) name a segment as its partition key does: the
    first segment of two is "segment seg-0000 of 2", as training's own progress line and the UI's partition."""
    assert decide(view("planned", "planned"), 3).reason == "next segment seg-0000 of 2"
    assert decide(view("done", "failed", failures=1, attempts=1), 3).reason == "retrying segment seg-0001 of 2"
    assert decide(view("done", "running"), 3).reason.startswith("segment seg-0001 was interrupted")
    paused = decide(view("done", "failed", failures=3, attempts=3, error="OOM"), 3)
    assert paused.reason.startswith("segment seg-0001 failed 3 times in a row") and "re-materialize r/seg-0001" in paused.reason


def test_run_keys_skip_keys_the_sensor_already_used():
    """A refused or cancelled attempt records nothing, but Dagster launches a sensor's run key once: the next request
    moves past every key already used (``used_run_keys``), so it is never skipped as a duplicate."""
    assert run_key("r", 1, 0, {"r/1"}) == "r/1/retry-1"
    assert run_key("r", 1, 0, {"r/1", "r/1/retry-1", "r/1/retry-3"}) == "r/1/retry-2"
    assert run_key("r", 1, 2, {"r/1", "r/1/retry-1"}) == "r/1/retry-2"
    assert run_key("r", 1, 0, {"r/2", "other/1"}) == "r/1"
    v = RunView("r", "running", (SegmentView(0, "done", 1), SegmentView(1, "planned", 0)), False,
                used_run_keys=frozenset({"r/1"}))
    d = decide(v, max_failures=3)
    assert (d.action, d.segment, d.run_key) == (Action.REQUEST, 1, "r/1/retry-1")


def test_sensor_waits_for_whatever_is_in_flight_and_says_what():
    """In flight (a queued or running Dagster run of any of the run's partitions, or a live writer-lock holder):
    WAIT, whatever the segments' states say, with the reason naming it; nothing in flight: the decision follows the
    rows."""
    busy = "its writer lock is held by pid 7 on host h (pilot-commit train-segment)"
    for statuses in (("done", "planned"), ("done", "failed"), ("done", "running"), ("planned",), ("done", "done")):
        v = RunView("r", "running", view(*statuses).segments, True, busy)
        d = decide(v, max_failures=3)
        assert d.action is Action.WAIT and d.segment is None and d.run_key is None
        assert d.reason == f"a segment of this run is in flight: {busy}"
    assert decide(view("done", "planned", in_flight=True), 3).reason == "a segment of this run is in flight"
    # a run whose every segment is done is finished once nothing is in flight, whatever its status says
    for status in ("running", "failed", "stopped"):
        assert decide(view("done", "done", status=status), 3).action is Action.FINISH
