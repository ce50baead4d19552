"""The ``advance_runs`` sensor: requests each active training run's next segment (``train_segment``) as soon as the
previous one succeeded, and pauses a run after repeated failures. Its decisions are
:func:`pc_pipelines.run.segments.decide`; this module reads the store, Dagster's run records and the runs' writer locks
into the views it decides on.

**In flight.** A run is in flight, and the sensor requests nothing for it, while

* a queued or running Dagster run trains one of its partitions: the sensor's own (tagged ``pc/run``) and any other
  (launched by hand from the UI or ``dagster asset materialize``, a backfill's), found by the partition tags Dagster
  sets on every partitioned run (``dagster/partition``, or a partition range's bounds);
* the Dagster run a ``running`` segment row names is still going;
* a live process holds the run's writer lock (a ``pilot-commit`` command, a launched process or pod whose Dagster
  run is gone). A record of a process on this host is checked by its pid (and start time); one of another host by
  the lock itself, with a shared non-blocking probe released at once (only when such a record is left in the lock
  file, i.e. its holder still holds it or died without releasing it).

A ``running`` segment whose Dagster run ended while nothing else is in flight is recorded ``failed`` (it counts
towards the pause limit), only if the row is still that run's attempt.
"""

import contextlib

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

from pc_pipelines.run.lifecycle import record_finished
from pc_pipelines.run.segments import Action, RunView, SegmentError, SegmentView, decide, parse_partition_key
from pc_pipelines.store import Store
from pc_pipelines.store.runlock import live_writer
from resources import StoreResource

from .jobs import train_segment_job
from .training import training_segment

SENSOR_NAME = "advance_runs"
RUN_TAG = "pc/run"  # one training segment in flight per run: the run queue limits this tag per unique value
# Dagster's own tags on runs (dagster._core.storage.tags, private there): the partition of a partitioned run, the
# bounds of a partition-range run, the sensor that requested a run and its run key.
PARTITION_TAG = "dagster/partition"
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
SENSOR_NAME_TAG = "dagster/sensor_name"
RUN_KEY_TAG = "dagster/run_key"
_FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
# Queued or going: Dagster's in-progress statuses (its private IN_PROGRESS_RUN_STATUSES) and QUEUED. NOT_STARTED is
# left out: a run created and never submitted stays so for ever (the daemon resubmits a sensor's own by its key).
_IN_FLIGHT = (DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED,
              DagsterRunStatus.CANCELING, DagsterRunStatus.SUSPENDED)


def training_runs_of(dagster_run) -> set[str]:
    """The training runs a Dagster run trains segments of: its ``pc/run`` tag, and the run of its segment partition
    (or partition range) when it materializes ``training_segment`` (a run of ``segment_eval`` alone does not write
    the run)."""
    tags = dagster_run.tags or {}
    out = {tags[RUN_TAG]} if tags.get(RUN_TAG) else set()
    selection = dagster_run.asset_selection
    if selection is not None and training_segment.key not in selection:
        return out
    for tag in (PARTITION_TAG, *RANGE_TAGS):
        with contextlib.suppress(SegmentError):
            if tags.get(tag):
                out.add(parse_partition_key(tags[tag])[0])
    return out


def dagster_in_flight(instance) -> dict[str, str]:
    """Training run -> the first queued or running Dagster run training it, in words."""
    out: dict[str, str] = {}
    for rec in instance.get_run_records(filters=RunsFilter(statuses=list(_IN_FLIGHT))):
        dr = rec.dagster_run
        for run_id in training_runs_of(dr):
            part = dr.tags.get(PARTITION_TAG) or "..".join(dr.tags.get(t, "?") for t in RANGE_TAGS)
            out.setdefault(run_id, f"Dagster run {dr.run_id} ({dr.status.value}) of {part}")
    return out


def used_run_keys(instance, run_id: str) -> frozenset[str]:
    """The run keys of every Dagster run this sensor requested for ``run_id`` (Dagster skips a request whose key
    one of them has)."""
    runs = instance.get_runs(filters=RunsFilter(tags={RUN_TAG: run_id}))
    return frozenset(r.tags[RUN_KEY_TAG] for r in runs
                     if r.tags.get(SENSOR_NAME_TAG) == SENSOR_NAME and r.tags.get(RUN_KEY_TAG))


def run_views(st: Store, instance) -> list[RunView]:
    """Each planned run as the sensor sees it (see the module docstring for what counts as in flight). A segment
    the store says is running whose Dagster run ended (killed worker, cancelled run), with nothing in flight, is
    recorded as failed first, so it counts towards the pause limit."""
    views = []
    by_run: dict[str, list[dict]] = {}
    for row in st.segments():
        by_run.setdefault(row["run_id"], []).append(row)
    flying = dagster_in_flight(instance)
    for run_id, rows in by_run.items():
        run = st.get_run(run_id)
        busy = flying.get(run_id)
        running = [r for r in rows if r["status"] == "running" and r["orchestrator_run_id"]]
        ended = []
        for r in running:
            dr = instance.get_run_by_id(r["orchestrator_run_id"])
            if dr is not None and dr.status in _IN_FLIGHT:
                busy = busy or f"Dagster run {dr.run_id} ({dr.status.value}) of segment {r['segment']}"
            elif dr is None or dr.status in _FAILED or dr.status == DagsterRunStatus.SUCCESS:
                ended.append((r, "its run was deleted" if dr is None else f"its run {dr.run_id} ended {dr.status.value}"))
        holder = None if busy else live_writer(st, run_id)
        if holder:
            busy = f"its writer lock is held by {holder}"
        if not busy:
            for r, why in ended:
                error = f"segment did not record a result: {why}"
                if st.segment_failed(run_id, r["segment"], error, orchestrator_run_id=r["orchestrator_run_id"],
                                     only_running=True):
                    r.update(status="failed", consecutive_failures=r["consecutive_failures"] + 1, error=error)
                else:  # it recorded its outcome meanwhile
                    r.update(next(x for x in st.segments(run_id) if x["segment"] == r["segment"]))
        segs = tuple(SegmentView(r["segment"], r["status"], r["attempts"], r["consecutive_failures"], r["error"])
                     for r in rows)
        status = run["status"] if run else "failed"
        used = frozenset() if status in ("paused", "finished") else used_run_keys(instance, run_id)
        views.append(RunView(run_id, status, segs, bool(busy), busy or "", used))
    return views


def build_advance_runs_sensor(max_failures: int = 3, interval_s: int = 30, default_running: bool = True):
    """The sensor advancing every active run by one segment at a time; pauses a run after ``max_failures``
    consecutive failures of its next segment (the reason goes to the store and the UI)."""

    @sensor(
        name=SENSOR_NAME,
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
                record_finished(st, d.run_id, complete=True)  # decide(): every segment is done
        for n in notes:
            context.log.info(n)
        if requests or events:
            return SensorResult(run_requests=requests, asset_events=events)
        return SkipReason("; ".join(notes) or "no training runs: launch the start_run job")

    return advance_runs
