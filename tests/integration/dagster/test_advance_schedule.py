"""Issue 33 point 7: the ``advance_runs_in_window`` schedule beside the ``advance_runs`` sensor, and the report
requested when a run finishes (point 2). Real Dagster (a persistent temporary instance: schedules need one; the
schedule started and stopped with ``dagster schedule start|stop`` on the code location
``pc_pipelines_dagster.definitions``, as a user does, with ``DAGSTER_HOME`` the instance's directory), a real store
(DuckDB) with runs registered by ``start_run``. The sensor and the schedule are evaluated as the daemons evaluate them
(``evaluate_tick``: partition and instigator tags resolved) and their requests are added to the instance as the
queued Dagster runs the daemons create (their run key, ``dagster/sensor_name`` or ``dagster/schedule_name``); nothing
trains: the segments' outcomes are recorded in the store as the training asset records them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    build_schedule_context,
    build_sensor_context,
    partition_loading_context,
)
from dagster_runs import local_resources, register_run

from pc_pipelines.errors import ConfigError
from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.training import ADVANCED_BY_TAG
from pc_pipelines_dagster.automation.schedules import SCHEDULE_NAME, ScheduleSettings
from pc_pipelines_dagster.automation.sensors import (
    REPORT_TAG,
    RUN_KEY_TAG,
    RUN_TAG,
    SCHEDULE_NAME_TAG,
    SENSOR_NAME,
    SENSOR_NAME_TAG,
)
from pc_pipelines_dagster.definitions import build_definitions
from pc_pipelines_dagster.demo import sensor_run_tags

pytestmark = [pytest.mark.integration]

BERLIN = ZoneInfo("Europe/Berlin")
# The window schedule's settings, as the code location reads them from its environment (the `dagster schedule`
# command loads it with these too).
SETTINGS_ENV = {"PC_ADVANCE_SCHEDULE_CRON": "*/10 * * * *", "PC_ADVANCE_SCHEDULE_WINDOW": "22:00-06:00",
                "PC_ADVANCE_SCHEDULE_TIMEZONE": "Europe/Berlin", "PC_ADVANCE_SCHEDULE_DEFAULT": "stopped"}
RUNNING_BY_DEFAULT = {**SETTINGS_ENV, "PC_ADVANCE_SCHEDULE_DEFAULT": "running"}
TINY = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "allocator.pilot_wave=1",
        "allocator.commit_mean=6", "training.ppo_minibatch=2"]
NIGHT = datetime(2025, 1, 15, 23, 0, tzinfo=BERLIN)  # inside the window
EVENING = datetime(2025, 1, 15, 21, 50, tzinfo=BERLIN)  # ten minutes before it opens


# ---- helpers ----------------------------------------------------------------------------------------------------
def resources(tmp: Path) -> dict:
    return local_resources(tmp)


def start(instance, tmp: Path, policy: Path, name: str, total_steps: int = 2) -> str:
    return register_run(instance, tmp, policy, name, TINY, total_steps=total_steps)


class Location:
    """The code location as the webserver and the daemons see it: ``defs`` (the test's resources, the window
    schedule of ``settings``, the ``PC_ADVANCE_SCHEDULE_*`` variables) for evaluating, and the stored on/off state
    of its schedule, toggled with ``dagster schedule start|stop`` on the real code location
    (``pc_pipelines_dagster.definitions``, loaded with the same variables) against the instance's directory."""

    def __init__(self, instance: DagsterInstance, tmp: Path, origins: dict, settings: dict[str, str] = SETTINGS_ENV
                 ) -> None:
        self.instance, self.tmp, self.origins, self.settings = instance, tmp, origins, settings
        self.defs = build_definitions(resources(tmp), schedule_settings=ScheduleSettings.from_env(settings))
        self.repo = self.defs.get_repository_def()

    def _dagster_schedule(self, verb: str, says: str) -> None:
        """``dagster schedule <verb> advance_runs_in_window -m pc_pipelines_dagster.definitions``, as a user types it,
        with ``DAGSTER_HOME`` the test instance's directory (it writes the schedule's state there, as the UI's toggle
        does)."""
        r = dagster_cli(self.tmp / "dagster", self.tmp, "schedule", verb, SCHEDULE_NAME, env=self.settings)
        assert f"{says} schedule {SCHEDULE_NAME}" in r.stdout, r.stdout + r.stderr[-3000:]

    def schedule_on(self) -> None:
        self._dagster_schedule("start", "Started")

    def schedule_off(self) -> None:
        self._dagster_schedule("stop", "Stopped")

    def sensor(self, cursor: str | None = None):
        """The sensor's tick as the daemon evaluates it (its requests, or its skip reason; the daemon loads dynamic
        partitions from the instance); ``cursor``: the one the previous tick left, as the daemon passes it on."""
        with build_sensor_context(instance=self.instance, resources={"store": resources(self.tmp)["store"]},
                                  definitions=self.defs, cursor=cursor) as ctx, \
                partition_loading_context(dynamic_partitions_store=self.instance):
            return self.repo.get_sensor_def(SENSOR_NAME).evaluate_tick(ctx)

    def schedule(self, when: datetime):
        """The schedule's tick as the daemon evaluates it. The context is closed after the tick: a schedule context
        built on a persistent instance opens its own copy of the instance from the instance's ref when its
        resources are built (it does here), and only closing the context exits that copy; left open, Dagster's
        "current" definitions-state storage would stay that copy's after it is collected."""
        with build_schedule_context(instance=self.instance, scheduled_execution_time=when,
                                    resources={"store": resources(self.tmp)["store"]}, repository_def=self.repo) as ctx:
            return self.repo.get_schedule_def(SCHEDULE_NAME).evaluate_tick(ctx)

    def launch(self, request, instigator: dict[str, str]):
        """The Dagster run a daemon creates for ``request``, queued: its job (and the job's origin in the code
        location, as a launch records it), its assets, its tags, its run key, the instigator's tag."""
        job = self.repo.get_job(request.job_name or "train_segment")
        return self.instance.add_run(DagsterRun(
            job_name=job.name, status=DagsterRunStatus.QUEUED, remote_job_origin=self.origins[job.name],
            asset_selection=job.asset_layer.selected_asset_keys,
            tags={**request.tags, RUN_KEY_TAG: request.run_key, **instigator}))

    def cancel(self, dagster_run) -> None:
        self.instance.report_run_canceled(self.instance.get_run_by_id(dagster_run.run_id))


def dagster_cli(home: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dagster <args> -m pc_pipelines_dagster.definitions`` (the code location a user points the command at), with
    ``DAGSTER_HOME`` = ``home``, run in ``cwd``; it must succeed."""
    r = subprocess.run([sys.executable, "-m", "dagster", *args, "-m", "pc_pipelines_dagster.definitions"], cwd=cwd,
                       env={**os.environ, **(env or {}), "DAGSTER_HOME": str(home)}, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def origins(tmp_path_factory) -> dict:
    """Job name -> the job's origin in the code location, as Dagster records it on a run launched with
    ``dagster job launch`` (queued: no daemon takes it), once per job in a Dagster home of its own: the runs the
    tests queue carry it, as every queued run does."""
    home = tmp_path_factory.mktemp("launched")
    for job in ("train_segment", "report"):
        dagster_cli(home, home, "job", "launch", "-j", job)
    instance = DagsterInstance.local_temp(tempdir=str(home))
    try:
        return {r.job_name: r.remote_job_origin for r in instance.get_runs()}
    finally:
        instance.dispose()


BY_SENSOR = {SENSOR_NAME_TAG: SENSOR_NAME}
BY_SCHEDULE = {SCHEDULE_NAME_TAG: SCHEDULE_NAME}


def requests(data) -> list[tuple[str, str | None, str | None]]:
    return [(r.run_key, r.partition_key, r.job_name) for r in data.run_requests]


@pytest.fixture
def location(tmp_path, base_policy, origins):
    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster"))
    start(instance, tmp_path, base_policy, "a")
    start(instance, tmp_path, base_policy, "b")
    try:
        yield Location(instance, tmp_path, origins)
    finally:
        instance.dispose()


# ---- the schedule -----------------------------------------------------------------------------------------------
def test_the_schedule_is_off_by_default_and_advances_runs_only_in_its_window(location):
    """Off by default, the sensor advances the runs. Started (`dagster schedule start`), the sensor defers: it requests
    nothing and says why. The schedule's tick at 21:50 Berlin time skips, saying when the window opens; at 23:00 it
    requests both runs' first segment, tagged ``pc/run``, ``pc/advanced_by`` and Dagster's schedule tag; at 05:59
    (after midnight) it is still inside, at 06:00 outside until 22:00. Stopped again, the sensor advances the runs."""
    sched = location.repo.get_schedule_def(SCHEDULE_NAME)
    assert sched.default_status.value == "STOPPED" and sched.execution_timezone == "Europe/Berlin"
    assert sched.cron_schedule == "*/10 * * * *"
    first = location.sensor()
    assert requests(first) == [("a/0", "a/seg-0000", "train_segment"), ("b/0", "b/seg-0000", "train_segment")]
    assert first.run_requests[0].tags[ADVANCED_BY_TAG] == "sensor:advance_runs"

    location.schedule_on()
    deferred = location.sensor()
    assert requests(deferred) == []
    assert deferred.skip_message == "; ".join(
        f"{r}: deferred (next segment seg-0000 of 2; the schedule {SCHEDULE_NAME} is running: it requests segments, in "
        "22:00-06:00 Europe/Berlin only)" for r in ("a", "b"))

    closed = location.schedule(EVENING)
    assert requests(closed) == []
    assert closed.skip_message.startswith(
        "outside the window 22:00-06:00 Europe/Berlin: it opens at 2025-01-15 22:00 CET (in 0h 10m); no segment is "
        "requested until then")

    night = location.schedule(NIGHT)
    assert requests(night) == [("a/0", "a/seg-0000", None), ("b/0", "b/seg-0000", None)]
    tags = night.run_requests[0].tags
    assert tags[RUN_TAG] == "a" and tags[ADVANCED_BY_TAG] == f"schedule:{SCHEDULE_NAME}"
    assert tags[SCHEDULE_NAME_TAG] == SCHEDULE_NAME and tags["dagster/partition"] == "a/seg-0000"

    assert requests(location.schedule(datetime(2025, 1, 16, 5, 59, tzinfo=BERLIN)))[0][0] == "a/0"
    morning = location.schedule(datetime(2025, 1, 16, 6, 0, tzinfo=BERLIN))
    assert requests(morning) == []
    assert "it opens at 2025-01-16 22:00 CET (in 16h 00m)" in morning.skip_message
    # The same window in summer time: 20:30 UTC is 22:30 CEST, inside.
    assert requests(location.schedule(datetime(2025, 7, 15, 20, 30, tzinfo=ZoneInfo("UTC"))))[0][0] == "a/0"

    location.schedule_off()
    assert requests(location.sensor()) == requests(first)


def test_sensor_and_schedule_never_request_a_segment_twice(location):
    """The schedule requests ``a``'s segment 0 (its run queued as the daemon creates it): its next tick, and the
    sensor once the schedule is stopped, see it in flight and request nothing for ``a`` (``b`` goes on). Cancelled
    before it recorded anything, the segment is requested again by the sensor under a new key (``a/0`` was the
    schedule's, so ``a/0/retry-1``); that run queued, the schedule (on again) waits for it, and after its cancel
    moves past both keys."""
    st = Store(location.tmp / "pc.duckdb")
    location.schedule_on()
    night = location.schedule(NIGHT)
    by_schedule = location.launch(night.run_requests[0], BY_SCHEDULE)
    assert by_schedule.tags[RUN_KEY_TAG] == "a/0" and by_schedule.tags["dagster/partition"] == "a/seg-0000"

    waiting = f"a: wait (a segment of this run is in flight: Dagster run {by_schedule.run_id} (QUEUED) of a/seg-0000)"
    again = location.schedule(NIGHT.replace(minute=10))
    assert requests(again) == [("b/0", "b/seg-0000", None)]  # b's own request was not launched: asked again
    location.schedule_off()
    tick = location.sensor()
    assert requests(tick) == [("b/0", "b/seg-0000", "train_segment")]
    location.launch(tick.run_requests[0], BY_SENSOR)  # b's segment 0, by the sensor
    assert location.sensor().skip_message.startswith(waiting)

    location.cancel(by_schedule)  # refused before it recorded an attempt: the row is as it was
    assert [s["attempts"] for s in st.segments("a")] == [0, 0]
    tick = location.sensor()
    assert requests(tick) == [("a/0/retry-1", "a/seg-0000", "train_segment")]
    by_sensor = location.launch(tick.run_requests[0], BY_SENSOR)

    location.schedule_on()
    night = location.schedule(NIGHT.replace(minute=20))
    assert requests(night) == []
    assert night.skip_message.startswith(
        f"a: wait (a segment of this run is in flight: Dagster run {by_sensor.run_id} (QUEUED) of a/seg-0000)")
    location.cancel(by_sensor)
    assert requests(location.schedule(NIGHT.replace(minute=30)))[0][0] == "a/0/retry-2"


def test_a_schedule_running_by_default_defers_the_sensor_until_stopped(location):
    """``PC_ADVANCE_SCHEDULE_DEFAULT=running``: with no state stored (nobody toggled it) the schedule runs, so the
    sensor requests no segment; stopped in the UI, the sensor advances the runs."""
    on = Location(location.instance, location.tmp, location.origins, RUNNING_BY_DEFAULT)
    assert on.repo.get_schedule_def(SCHEDULE_NAME).default_status.value == "RUNNING"
    assert requests(on.sensor()) == []
    assert "a: deferred (next segment seg-0000 of 2; the schedule" in on.sensor().skip_message
    on.schedule_off()
    assert [k for k, _, _ in requests(on.sensor())] == ["a/0", "b/0"]


def test_the_schedule_pauses_a_failing_run_and_shows_why_on_its_partition(location):
    """Three consecutive failures of ``a``'s segment 0: the schedule's tick in the window pauses ``a`` (the store
    says why) and logs the reason on the partition as the sensor does (an observation with ``paused``); ``b`` is
    requested."""
    st = Store(location.tmp / "pc.duckdb")
    for _ in range(3):
        st.segment_started("a", 0, "dagster-run-of-the-test")
        st.segment_failed("a", 0, "engine lost (test)")
    location.schedule_on()
    night = location.schedule(NIGHT)
    assert requests(night) == [("b/0", "b/seg-0000", None)]
    run = st.get_run("a")
    assert run["status"] == "paused" and "failed 3 times in a row (limit 3)" in run["status_reason"]
    obs = location.instance.fetch_observations(AssetKey("training_segment"), limit=5).records
    assert [(o.partition_key, o.asset_observation.metadata["paused"].value) for o in obs] == [
        ("a/seg-0000", run["status_reason"])]


# ---- the report -------------------------------------------------------------------------------------------------
def finish_segments(st: Store, run_id: str) -> None:
    """Every segment done, as the training asset records it."""
    for row in st.segments(run_id):
        st.segment_started(run_id, row["segment"], "dagster-run-of-the-test")
        st.segment_done(run_id, row["segment"], 100, 0.5, 0.1)


def test_the_report_job_is_requested_once_per_finished_run(location, base_policy):
    """``a`` finished inside the training asset (its status already ``finished``) and ``b`` with every segment done
    but still ``running`` (the sensor finishes it): one tick requests the ``report`` job once for both (run key
    ``report-a-and-1-more``, tag ``pc/report_for`` = ``a,b``, no config), and no segment; ``c``, finishing later,
    gets one of its own. Once those runs exist, later ticks request nothing, also with the schedule on (it never
    requests a report)."""
    st = Store(location.tmp / "pc.duckdb")
    finish_segments(st, "a")
    st.set_status("a", "finished")
    finish_segments(st, "b")
    tick = location.sensor()
    assert requests(tick) == [("report-a-and-1-more", None, "report")]  # one report for both
    assert [r.tags[REPORT_TAG] for r in tick.run_requests] == ["a,b"]
    assert all(not r.run_config and RUN_TAG not in r.tags for r in tick.run_requests)
    assert st.get_run("b")["status"] == "finished"
    assert requests(location.sensor()) == [("report-a-and-1-more", None, "report")]  # not launched yet: asked again
    report = location.launch(tick.run_requests[0], BY_SENSOR)
    assert report.job_name == "report"
    assert location.repo.get_job("report").asset_layer.selected_asset_keys == {
        AssetKey("rollouts_report"), AssetKey("pass_rate_timeline"), AssetKey("run_comparison")}
    assert location.sensor().skip_message == "a: skip (run is finished); b: skip (run is finished)"
    start(location.instance, location.tmp, base_policy, "c")
    finish_segments(st, "c")  # a run finishing later gets a report of its own
    later = location.sensor()
    assert requests(later) == [("report-c", None, "report")] and later.run_requests[0].tags[REPORT_TAG] == "c"
    location.launch(later.run_requests[0], BY_SENSOR)
    assert location.sensor().skip_message == ("a: skip (run is finished); b: skip (run is finished); "
                                              "c: skip (run is finished)")
    location.schedule_on()
    assert location.sensor().skip_message == ("a: skip (run is finished); b: skip (run is finished); "
                                              "c: skip (run is finished)")
    assert requests(location.schedule(NIGHT)) == []


def test_the_sensor_logs_one_line_a_tick_and_only_when_it_changed(location, capfd):
    """Issue 41 point 8: `make ui`'s console got one line per finished run every 30 s. Now a tick logs one line
    (the runs something happens to, then the idle runs counted by reason), and only when it differs from the last
    tick's (the sensor's cursor): four ticks over two finished runs log two lines. The UI's skip reason still names
    every run."""
    st = Store(location.tmp / "pc.duckdb")
    finish_segments(st, "a")
    st.set_status("a", "finished")
    finish_segments(st, "b")
    capfd.readouterr()
    first = location.sensor()
    location.launch(first.run_requests[0], BY_SENSOR)
    cursor, skips = first.cursor, []
    for _ in range(3):
        tick = location.sensor(cursor)
        cursor = tick.cursor
        skips.append(tick.skip_message)
    lines = [ln.split(" - INFO - ", 1)[1] for ln in capfd.readouterr().err.splitlines() if " - dagster - INFO - " in ln]
    assert lines == ["b: finish (all 2 segments are done); 1 run skipped: run is finished; report requested for a,b",
                     "2 runs skipped: run is finished"]
    assert skips == ["a: skip (run is finished); b: skip (run is finished)"] * 3


def test_the_demos_runs_count_as_the_sensors(location):
    """Issue 41 point 8: `make demo` runs the sensor's requests in process; its runs carry the tags the sensor daemon
    sets (``dagster/sensor_name``: the UI's Runs list shows them launched by the sensor, not "Manually launched";
    ``dagster/run_key``), and its report is the sensor's ``report`` request, so the sensor of `make ui` starting
    on the demo's instance finds the report built and requests none."""
    st = Store(location.tmp / "pc.duckdb")
    finish_segments(st, "a")
    finish_segments(st, "b")
    request = location.sensor().run_requests[0]
    report = location.defs.resolve_job_def("report")
    done = report.execute_in_process(instance=location.instance, tags=sensor_run_tags(request), raise_on_error=False)
    run = location.instance.get_run_by_id(done.run_id)
    assert run.job_name == "report" and run.tags[REPORT_TAG] == "a,b"
    assert (run.tags[SENSOR_NAME_TAG], run.tags[RUN_KEY_TAG]) == (SENSOR_NAME, "report-a-and-1-more")
    assert requests(location.sensor()) == []


# ---- bad config -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "value", "says"), [
    ("PC_ADVANCE_SCHEDULE_CRON", "every night", "not a cron string Dagster takes"),
    ("PC_ADVANCE_SCHEDULE_WINDOW", "22-6", "not a window HH:MM-HH:MM"),
    ("PC_ADVANCE_SCHEDULE_WINDOW", "22:00-22:00", "an empty window"),
    ("PC_ADVANCE_SCHEDULE_TIMEZONE", "Berlin", "not an IANA timezone name"),
    ("PC_ADVANCE_SCHEDULE_DEFAULT", "on", "use stopped"),
])
def test_a_bad_schedule_setting_stops_the_code_location_naming_the_variable(tmp_path, monkeypatch, name, value, says):
    """The code location (``build_definitions``, what ``defs`` is) reads the schedule's settings from the
    environment when it loads: a bad value is refused there, naming the variable, its value and the fix."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        build_definitions(resources(tmp_path))
    text = str(err.value)
    assert text.startswith(f"{name}={value!r}: {says}") and f"Fix: set {name} to e.g. " in text


def test_the_schedule_settings_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PC_ADVANCE_SCHEDULE_CRON", "0 * * * *")
    monkeypatch.setenv("PC_ADVANCE_SCHEDULE_WINDOW", "01:00-05:30")
    monkeypatch.setenv("PC_ADVANCE_SCHEDULE_TIMEZONE", "America/New_York")
    monkeypatch.setenv("PC_ADVANCE_SCHEDULE_DEFAULT", "running")
    sched = build_definitions(resources(tmp_path)).resolve_schedule_def(SCHEDULE_NAME)
    assert (sched.cron_schedule, sched.execution_timezone, sched.default_status.value) == (
        "0 * * * *", "America/New_York", "RUNNING")
    assert sched.metadata["window"].value == "01:00-05:30 America/New_York"
