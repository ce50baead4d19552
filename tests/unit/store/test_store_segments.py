"""The store's segment bookkeeping (the ``segments`` table): what an attempt, a failure, a refusal and a success do
to a segment's row, on a real DuckDB catalog."""

import pytest

from pc_pipelines.store import Store, StoreError


@pytest.fixture
def store(new_store) -> Store:
    new_store.plan_segments("r", [(0, 1), (2, 3)])
    return new_store


def row(st: Store, k: int) -> dict:
    return st.segments("r")[k]


def test_an_attempt_marks_running_and_a_failure_counts_but_only_for_its_own_attempt(store):
    before = store.segment_started("r", 0, "dagster-a")
    assert (before["status"], before["attempts"], before["orchestrator_run_id"]) == ("planned", 0, None)
    assert (row(store, 0)["status"], row(store, 0)["attempts"], row(store, 0)["orchestrator_run_id"]) == (
        "running", 1, "dagster-a")
    # A failure reported for another attempt (a stale run the sensor found ended) changes nothing.
    assert not store.segment_failed("r", 0, "stale", orchestrator_run_id="dagster-old")
    assert row(store, 0)["status"] == "running"
    assert store.segment_failed("r", 0, "engine lost", orchestrator_run_id="dagster-a", only_running=True)
    r = row(store, 0)
    assert (r["status"], r["consecutive_failures"], r["error"]) == ("failed", 1, "engine lost")
    assert not store.segment_failed("r", 0, "again", only_running=True)  # no longer running
    store.segment_started("r", 0, "dagster-b")
    store.segment_done("r", 0, 123, 0.5, 0.25)
    r = row(store, 0)
    assert (r["status"], r["attempts"], r["consecutive_failures"], r["error"]) == ("done", 2, 0, None)
    with pytest.raises(StoreError, match="no segment 5"):
        store.segment_started("r", 5)


def test_a_done_segment_stays_done_when_rematerialized_or_when_its_rerun_fails(store):
    store.segment_started("r", 0, "a")
    store.segment_done("r", 0, 10, None, None)
    store.segment_started("r", 0, "b")  # a re-materialization
    r = row(store, 0)
    assert (r["status"], r["attempts"], r["orchestrator_run_id"]) == ("done", 2, "b")
    assert store.segment_failed("r", 0, "RuntimeError: engine lost", orchestrator_run_id="b")
    r = row(store, 0)
    assert (r["status"], r["consecutive_failures"], r["error"]) == ("done", 1, "RuntimeError: engine lost")
    assert r["cumulative_rollouts"] == 10  # the segment's outcome is still the first run's
    # the sensor's "its run ended without a result" applies to running segments only
    assert not store.segment_failed("r", 0, "did not record a result", orchestrator_run_id="b", only_running=True)
    assert row(store, 0)["consecutive_failures"] == 1


def test_a_stopped_attempt_is_recorded_stopped_not_failed(store):
    store.segment_started("r", 0, "a")
    store.segment_stopped("r", 0, "stopped by SIGTERM (at a step boundary): after step 3", orchestrator_run_id="a")
    r = row(store, 0)
    assert (r["status"], r["attempts"], r["consecutive_failures"], r["error"]) == (
        "stopped", 1, 0, "stopped by SIGTERM (at a step boundary): after step 3")
    store.segment_stopped("r", 0, "stale", orchestrator_run_id="old")  # another attempt's: changes nothing
    assert row(store, 0)["error"].endswith("after step 3")
    store.segment_started("r", 0, "b")
    store.segment_done("r", 0, 10, None, None)
    store.segment_started("r", 0, "c")  # a re-materialization of a done segment stopped: it stays done
    store.segment_stopped("r", 0, "stopped by SIGINT", orchestrator_run_id="c")
    assert row(store, 0)["status"] == "done"
