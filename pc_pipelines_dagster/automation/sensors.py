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

**Sensor and schedule.** The ``advance_runs_in_window`` schedule (:mod:`pc_pipelines_dagster.automation.schedules`, off by default) advances
runs with the same rule, :func:`advance` (one evaluation shared by both), but only inside its time window. The rule
between them: **while that schedule is running, the sensor requests no segment** (it says so in its skip reason)
and goes on doing everything else (recording interrupted segments, pausing, finishing, the report); stop the
schedule and the sensor advances runs again at once. Whether the schedule runs is read from the Dagster instance
on every tick (its stored state: started or stopped in the UI, else its default status). One requester of segments
at a time means two ticks cannot race for the same segment; on top of that each sees the other's requests: both
tag their runs ``pc/run`` (in flight while queued or running, above) and ``pc/advanced_by``
(``sensor:advance_runs`` or ``schedule:<name>``, which the UI shows on the run), and both take their run keys
from the same sequence, moved past every key either used (:func:`used_run_keys`): Dagster dedups run keys per
sensor or schedule only, so the cross-check is ours.

**What `pilot-commit runs` shows.** A run's next segment requested (by whom) or deferred (why) is noted on the run
(``runs.status_reason``, :func:`note_waiting`), so between two segments it reads as waiting for that segment, never
as a crashed writer (:func:`pc_pipelines.store.runlock.between_segments`).

**The report.** When a run is finished (the sensor finishes it, or the training asset or the schedule did), the
sensor requests the ``report`` job (``rollouts_report``, ``pass_rate_timeline``) once for it: one request per tick
for every run finished since, tagged ``pc/report_for`` with their ids (run key ``report-<first>[-and-N-more]``); a
run some ``report`` run was already requested for is not requested again.

**Cadence.** The sensor ticks every ``PC_ADVANCE_SENSOR_INTERVAL_S`` seconds (default 30; read once, when the code
location loads: :func:`interval_from_env`), so a segment starts at most that long after the previous one ended.
"""

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from dagster import (
    AssetObservation,
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from pc_pipelines.errors import seconds_from_env
from pc_pipelines.run.lifecycle import record_finished
from pc_pipelines.run.segments import Action, RunView, SegmentError, SegmentView, decide, parse_partition_key
from pc_pipelines.steps import segment_name
from pc_pipelines.store import Store
from pc_pipelines.store.runlock import live_writer
from pc_pipelines_dagster.assets.training import ADVANCED_BY_TAG, training_segment
from pc_pipelines_dagster.resources import StoreResource

from .jobs import report_job, train_segment_job

SENSOR_NAME = "advance_runs"
ENV_INTERVAL = "PC_ADVANCE_SENSOR_INTERVAL_S"
DEFAULT_INTERVAL_S = 30
MAX_INTERVAL_S = 86_400


def interval_from_env(env: Mapping[str, str] | None = None) -> int:
    """Seconds between the sensor's ticks, from ``PC_ADVANCE_SENSOR_INTERVAL_S`` in ``env`` (default ``os.environ``;
    unset or empty: 30): a whole number from 1 to 86,400, else a :class:`ConfigError` naming the variable and the fix
    (the code location does not load; :func:`~pc_pipelines.errors.seconds_from_env`)."""
    return int(seconds_from_env(ENV_INTERVAL, DEFAULT_INTERVAL_S, 1, MAX_INTERVAL_S,
                                "how often the advance_runs sensor ticks", whole=True, env=env))
RUN_TAG = "pc/run"  # one training segment in flight per run: the run queue limits this tag per unique value
REPORT_TAG = "pc/report_for"  # the finished training run a report run was requested for
# Dagster's own tags on runs (constants private to Dagster): the partition of a partitioned run, the
# bounds of a partition-range run, the sensor that requested a run and its run key.
PARTITION_TAG = "dagster/partition"
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
SENSOR_NAME_TAG = "dagster/sensor_name"
SCHEDULE_NAME_TAG = "dagster/schedule_name"
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
    """The run keys of every Dagster run requested for ``run_id`` under a run key: the sensor's and the schedule's
    alike (both tag ``pc/run``; Dagster sets ``dagster/run_key`` on a sensor's or a schedule's run). Dagster skips a
    sensor's request whose key that sensor used, and a schedule's only within one tick, so the sensor and the
    schedule move past each other's keys here, never reusing one."""
    runs = instance.get_runs(filters=RunsFilter(tags={RUN_TAG: run_id}))
    return frozenset(r.tags[RUN_KEY_TAG] for r in runs if r.tags.get(RUN_KEY_TAG))


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
                busy = busy or f"Dagster run {dr.run_id} ({dr.status.value}) of segment {segment_name(r['segment'])}"
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


def sensor_tag() -> str:
    """``pc/advanced_by`` of the sensor's requests."""
    return f"sensor:{SENSOR_NAME}"


def report_run_key(run_ids: list[str]) -> str:
    """The run key of the report requested when ``run_ids`` finished (a training run key always has a ``/``)."""
    return f"report-{run_ids[0]}" + (f"-and-{len(run_ids) - 1}-more" if len(run_ids) > 1 else "")


@dataclass
class Advance:
    """One evaluation of the advancing rule (:func:`advance`): the segments to request, the observations to log
    (a paused run's reason on its partition), one note per run (the skip reason's text) and the finished runs."""

    requests: list[RunRequest] = field(default_factory=list)
    events: list[AssetObservation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    active: list[str] = field(default_factory=list)  # the notes of the runs something happens to
    skipped: list[str] = field(default_factory=list)  # the reason of each run with nothing to do (paused, finished)

    def summary(self) -> str:
        """The tick in one line: each run something happens to (requested, waiting, deferred, paused), then the
        runs with nothing to do counted by reason ("3 runs skipped: run is finished")."""
        counts: dict[str, int] = {}
        for reason in self.skipped:
            counts[reason] = counts.get(reason, 0) + 1
        idle = [f"{n} run{'s' if n > 1 else ''} skipped: {reason}" for reason, n in counts.items()]
        return "; ".join(self.active + idle) or "no training runs"


def advance(st: Store, instance, log, max_failures: int, advanced_by: str, defer: str = "",
            job_name: str | None = None, log_notes: bool = True) -> Advance:
    """The advancing rule, shared by the ``advance_runs`` sensor and the window schedule: each planned run's
    :func:`~pc_pipelines.run.segments.decide` on its view (:func:`run_views`); a REQUEST becomes a run request of
    its segment tagged ``pc/run`` and ``pc/advanced_by`` = ``advanced_by`` (or, with ``defer`` set, a note saying
    why it is not requested), a PAUSE pauses the run in the store, a FINISH finishes it. ``job_name``: the
    requests' job, for a sensor targeting several. ``log_notes``: log each run's note (the schedule); the sensor
    logs :meth:`Advance.summary` instead, when it changed."""
    out = Advance()
    for view in run_views(st, instance):
        d = decide(view, max_failures)
        if d.action is Action.REQUEST:  # `pilot-commit runs` shows it while the run waits for the segment
            note_waiting(st, d.run_id, f"{d.partition_key} deferred: {defer}" if defer
                         else f"{d.partition_key} requested by {advanced_by}")
        if d.action is Action.REQUEST and defer:
            out.notes.append(f"{d.run_id}: deferred ({d.reason}; {defer})")
            out.active.append(out.notes[-1])
            continue
        out.notes.append(f"{d.run_id}: {d.action.value} ({d.reason})")
        if d.action is Action.SKIP:
            out.skipped.append(d.reason)
        else:
            out.active.append(out.notes[-1])
        if d.action is Action.REQUEST:
            out.requests.append(RunRequest(run_key=d.run_key, partition_key=d.partition_key, job_name=job_name,
                                           tags={RUN_TAG: d.run_id, ADVANCED_BY_TAG: advanced_by}))
        elif d.action is Action.PAUSE:
            st.set_status(d.run_id, "paused", d.reason)
            log.warning("paused run %s: %s", d.run_id, d.reason)
            out.events.append(AssetObservation(asset_key=training_segment.key, partition=d.partition_key,
                                               metadata={"paused": d.reason}))
        elif d.action is Action.FINISH:
            record_finished(st, d.run_id, complete=True)  # decide(): every segment is done
        if d.action is Action.FINISH or view.status == "finished":
            out.finished.append(d.run_id)
    if log_notes:
        for n in out.notes:
            log.info(n)
    return out


def note_waiting(st: Store, run_id: str, note: str) -> None:
    """Record on a ``running`` run why its next segment is not training yet (``runs.status_reason``: requested by
    whom, or deferred and why), once: a tick that finds the same note writes nothing. The segment's writer clears it
    when it starts (``Store.register_run``)."""
    run = st.get_run(run_id)
    if run is not None and run["status"] == "running" and run.get("status_reason") != note:
        st.set_status(run_id, "running", note)


def reported_runs(instance) -> set[str]:
    """The training runs some ``report`` run was requested for (its ``pc/report_for`` tag: one id, or several
    joined by ``,``)."""
    runs = instance.get_runs(filters=RunsFilter(job_name=report_job.name))
    return {rid for r in runs for rid in (r.tags.get(REPORT_TAG) or "").split(",") if rid}


def report_requests(instance, finished: list[str]) -> list[RunRequest]:
    """One ``report`` job request for the finished runs no report was requested for yet (:func:`reported_runs`):
    once per run, whoever finished it, and one report for all the runs that finished since the last one (a first
    tick over a store of finished runs asks for one report, not one per run)."""
    if not finished:
        return []
    done = reported_runs(instance)
    todo = [run_id for run_id in finished if run_id not in done]
    if not todo:
        return []
    return [RunRequest(run_key=report_run_key(todo), job_name=report_job.name, tags={REPORT_TAG: ",".join(todo)})]


def schedule_running(context, schedule: ScheduleDefinition) -> bool:
    """Whether ``schedule`` runs now, from the instance: its stored state (started or stopped in the UI, for this
    code location and repository when the context knows them; started anywhere wins), else its default status
    (a stored ``DECLARED_IN_CODE`` state means the default too)."""
    location = getattr(context.code_location_origin, "location_name", None)
    stored = set()
    for state in context.instance.all_instigator_state():
        origin = state.origin.repository_origin
        if (state.instigator_type.value == "SCHEDULE" and state.name == schedule.name
                and (not context.repository_name or origin.repository_name == context.repository_name)
                and (not location or origin.code_location_origin.location_name == location)):
            stored.add(state.status.value)
    if "RUNNING" in stored or "STOPPED" in stored:
        return "RUNNING" in stored
    return schedule.default_status == DefaultScheduleStatus.RUNNING


def build_advance_runs_sensor(max_failures: int = 3, interval_s: int = DEFAULT_INTERVAL_S, default_running: bool = True,
                              defer_to: ScheduleDefinition | None = None):
    """The sensor advancing every active run by one segment at a time; pauses a run after ``max_failures``
    consecutive failures of its next segment (the reason goes to the store and the UI), and requests the report
    job once per finished run. Its log: one line a tick (:meth:`Advance.summary`), only when it differs from the
    last tick's (kept as the sensor's cursor), so an idle `make ui` console stays quiet; the tick's skip reason in
    the UI still names every run. ``defer_to``: the window schedule; while it runs, this sensor requests no segment
    (see the module docstring)."""

    @sensor(
        name=SENSOR_NAME,
        jobs=[train_segment_job, report_job],
        minimum_interval_seconds=interval_s,
        default_status=DefaultSensorStatus.RUNNING if default_running else DefaultSensorStatus.STOPPED,
        description=f"Requests each active run's next training segment; pauses a run after {max_failures} "
                    "consecutive failures; requests the report job when a run finishes."
                    + (f" Requests no segment while the schedule {defer_to.name} runs." if defer_to else ""),
    )
    def advance_runs(context: SensorEvaluationContext, store: StoreResource):
        defer = ""
        if defer_to is not None and schedule_running(context, defer_to):
            window = getattr(defer_to.metadata.get("window"), "value", None) or "its window"
            defer = f"the schedule {defer_to.name} is running: it requests segments, in {window} only"
        st = store.get(vacuum=False)
        tick = advance(st, context.instance, context.log, max_failures, sensor_tag(), defer, train_segment_job.name,
                       log_notes=False)
        requests = tick.requests + report_requests(context.instance, tick.finished)
        summary = tick.summary() + "".join(f"; report requested for {r.tags[REPORT_TAG]}" for r in requests
                                           if r.job_name == report_job.name)
        said = hashlib.sha256(summary.encode()).hexdigest()[:16]  # the cursor: the last line logged, hashed
        if said != context.cursor:  # one line a tick, only when it says something new
            context.log.info(summary)
            context.update_cursor(said)
        if requests or tick.events:
            return SensorResult(run_requests=requests, asset_events=tick.events)
        return SkipReason("; ".join(tick.notes) or "no training runs: launch the start_run job")

    return advance_runs
