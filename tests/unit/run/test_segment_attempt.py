"""What the orchestrator records after a launched segment process failed (``record_failed_launch``), on a real
DuckDB catalog: an attempt still ``running`` is failed; one its process ended as ``stopped`` (a stop request) stays
stopped, unless the launcher itself stopped it (a Ray job past ``job_timeout_s``), which is a failure that counts."""

import pytest

from pc_pipelines.run.segment_attempt import SegmentRequest, record_failed_launch


@pytest.fixture
def store(new_store):
    new_store.plan_segments("r", [(0, 1), (2, 3)])
    return new_store


def request(store) -> SegmentRequest:
    return SegmentRequest(store=str(store.path), run_id="r", until_step=2, segment=0, attempt="dagster-a")


@pytest.mark.parametrize(("by_launcher", "status", "failures"), [(False, "stopped", 0), (True, "failed", 1)])
def test_a_stop_is_a_failure_only_when_the_launcher_stopped_the_process(store, by_launcher, status, failures):
    store.segment_started("r", 0, "dagster-a")
    store.segment_stopped("r", 0, "stopped at a step boundary (SIGTERM)", orchestrator_run_id="dagster-a")
    record_failed_launch(store, request(store), RuntimeError("[pipes] Ray job stopped"), "cmd",
                         stopped_by_launcher=by_launcher)
    r = store.segments("r")[0]
    assert (r["status"], r["consecutive_failures"]) == (status, failures)
    assert ("Ray job stopped" in r["error"]) is by_launcher


def test_a_process_killed_while_running_is_failed_and_a_done_segment_stays_done(store):
    store.segment_started("r", 0, "dagster-a")
    record_failed_launch(store, request(store), RuntimeError("killed"), "cmd")
    assert (store.segments("r")[0]["status"], store.segments("r")[0]["consecutive_failures"]) == ("failed", 1)
    store.segment_started("r", 0, "dagster-a")
    store.segment_done("r", 0, 10, None, None)
    record_failed_launch(store, request(store), RuntimeError("late"), "cmd", stopped_by_launcher=True)
    assert store.segments("r")[0]["status"] == "done"
