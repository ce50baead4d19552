"""The ``advance_runs`` sensor: requests each active training run's next segment (``train_segment``) as soon as the
previous one succeeded, and pauses a run after repeated failures. Its decisions are :func:`pc_pipelines.segments.decide`;
this module reads the store and Dagster's run records into the views it decides on."""

from dagster import (
    AssetObservation,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from pc_pipelines.segments import Action, RunView, SegmentView, decide
from pc_pipelines.store import Store
from resources import StoreResource

from .jobs import train_segment_job
from .training import training_segment

RUN_TAG = "pc/run"  # one training segment in flight per run: the run queue limits this tag per unique value
_FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
# Dagster's own in-progress run statuses (its private IN_PROGRESS_RUN_STATUSES), from the public enum.
_IN_PROGRESS = (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING,
                DagsterRunStatus.SUSPENDED)


def run_views(st: Store, instance) -> list[RunView]:
    """Each planned run as the sensor sees it. A segment the store says is running whose orchestrator run ended
    (killed worker, cancelled run) is recorded as failed first, so it counts towards the pause limit."""
    views = []
    by_run: dict[str, list[dict]] = {}
    for row in st.segments():
        by_run.setdefault(row["run_id"], []).append(row)
    for run_id, rows in by_run.items():
        run = st.get_run(run_id)
        in_flight = bool(instance.get_run_records(
            filters=RunsFilter(tags={RUN_TAG: run_id}, statuses=list(_IN_PROGRESS)), limit=1))
        for r in rows:
            if r["status"] == "running" and not in_flight and r["orchestrator_run_id"]:
                dr = instance.get_run_by_id(r["orchestrator_run_id"])
                if dr is not None and dr.status in _IN_PROGRESS:
                    in_flight = True  # launched by hand (no run tag) and still going
                elif dr is None or dr.status in _FAILED or dr.status == DagsterRunStatus.SUCCESS:
                    why = "its run was deleted" if dr is None else f"its run {dr.run_id} ended {dr.status.value}"
                    st.segment_failed(run_id, r["segment"], f"segment did not record a result: {why}")
                    r.update(status="failed", consecutive_failures=r["consecutive_failures"] + 1,
                             error=f"segment did not record a result: {why}")
        segs = tuple(SegmentView(r["segment"], r["status"], r["attempts"], r["consecutive_failures"], r["error"])
                     for r in rows)
        views.append(RunView(run_id, run["status"] if run else "failed", segs, in_flight))
    return views


def build_advance_runs_sensor(max_failures: int = 3, interval_s: int = 30, default_running: bool = True):
    """The sensor advancing every active run by one segment at a time; pauses a run after ``max_failures``
    consecutive failures of its next segment (the reason goes to the store and the UI)."""

    @sensor(
        name="advance_runs",
        job=train_segment_job,
        minimum_interval_seconds=interval_s,
        default_status=DefaultSensorStatus.RUNNING if default_running else DefaultSensorStatus.STOPPED,
        description=f"Requests each active run's next training segment; pauses a run after {max_failures} "
                    "consecutive failures.",
    )
    def advance_runs(context: SensorEvaluationContext, store: StoreResource):
        st = store.get(vacuum=False)
        requests, events, notes = [], [], []
        for view in run_views(st, context.instance):
            d = decide(view, max_failures)
            notes.append(f"{d.run_id}: {d.action.value} ({d.reason})")
            if d.action is Action.REQUEST:
                requests.append(RunRequest(run_key=d.run_key, partition_key=d.partition_key,
                                           tags={RUN_TAG: d.run_id}))
            elif d.action is Action.PAUSE:
                st.set_status(d.run_id, "paused", d.reason)
                context.log.warning("paused run %s: %s", d.run_id, d.reason)
                events.append(AssetObservation(asset_key=training_segment.key, partition=d.partition_key,
                                               metadata={"paused": d.reason}))
            elif d.action is Action.FINISH:
                st.set_status(d.run_id, "finished")
        for n in notes:
            context.log.info(n)
        if requests or events:
            return SensorResult(run_requests=requests, asset_events=events)
        return SkipReason("; ".join(notes) or "no training runs: launch the start_run job")

    return advance_runs
