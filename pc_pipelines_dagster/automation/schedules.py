"""The ``advance_runs_in_window`` schedule: advances training runs only inside a daily time window (a shared
cluster's nights, say), by the ``advance_runs`` sensor's own rule (:func:`pc_pipelines_dagster.automation.sensors.advance`). **Off by
default**: start it in the UI (Automation), or set ``PC_ADVANCE_SCHEDULE_DEFAULT=running``.

On each tick (its cron) inside the window it requests each active run's next segment, pauses a run after repeated
failures and finishes a run whose segments are all done, exactly as the sensor does; outside the window it requests
nothing and its skip reason says when the window opens. **While it runs, the sensor requests no segment** (it still
records, pauses, finishes and requests the report: keep it running, it alone requests the ``report`` job), so
segments start only in the window; stop the schedule and the sensor advances runs again at its next tick. Each
sees the other's requests in flight (``pc/run``) and never reuses the other's run keys; ``pc/advanced_by`` on a
segment's Dagster run says which one requested it (``schedule:advance_runs_in_window`` or ``sensor:advance_runs``).
The module docstring of :mod:`pc_pipelines_dagster.automation.sensors` has the details.

**Config.** A schedule's cron must be known when the code location loads, so its settings are read once, then,
from environment variables (:meth:`ScheduleSettings.from_env`; the code location's, e.g. the Helm values'
``dagster-user-deployments`` env on Kubernetes; tests and ``build_definitions`` may pass a
:class:`ScheduleSettings`):

* ``PC_ADVANCE_SCHEDULE_CRON`` (default ``*/10 * * * *``): when the schedule ticks, a 5-field cron string (or
  ``@hourly`` ...) in the timezone below;
* ``PC_ADVANCE_SCHEDULE_WINDOW`` (default ``22:00-06:00``): ``HH:MM-HH:MM`` of wall-clock time, start inclusive, end
  exclusive; a start after the end wraps midnight; ``24:00`` may end it (``00:00-24:00``: the whole day);
* ``PC_ADVANCE_SCHEDULE_TIMEZONE`` (default ``UTC``): an IANA timezone name (``Europe/Berlin``), for cron and window;
* ``PC_ADVANCE_SCHEDULE_DEFAULT`` (default ``stopped``): ``stopped`` or ``running``, its status until someone toggles
  it in the UI.

A bad value stops the code location from loading with an error naming the variable and the fix.
"""

from __future__ import annotations

import os
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from datetime import timezone as dt_timezone

from dagster import (
    DagsterInvalidDefinitionError,
    DefaultScheduleStatus,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from pc_pipelines.errors import ConfigError, brief
from pc_pipelines_dagster.resources import StoreResource

from .jobs import train_segment_job
from .sensors import SENSOR_NAME, advance

SCHEDULE_NAME = "advance_runs_in_window"
ENV_CRON = "PC_ADVANCE_SCHEDULE_CRON"
ENV_WINDOW = "PC_ADVANCE_SCHEDULE_WINDOW"
ENV_TIMEZONE = "PC_ADVANCE_SCHEDULE_TIMEZONE"
ENV_DEFAULT = "PC_ADVANCE_SCHEDULE_DEFAULT"
DEFAULT_CRON = "*/10 * * * *"
DEFAULT_WINDOW = "22:00-06:00"
DEFAULT_TIMEZONE = "UTC"
_UTC = dt_timezone.utc
_CLOCK = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


def _fix(name: str, example: str, default: str) -> str:
    return f"Fix: set {name} to e.g. {example}, or unset it for the default ({default})."


def timezone_of(name: str, variable: str = ENV_TIMEZONE) -> zoneinfo.ZoneInfo:
    """The IANA timezone ``name``; :class:`ConfigError` naming ``variable`` when there is none such."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigError(f"{variable}={brief(name)}: not an IANA timezone name. "
                          f"{_fix(variable, 'Europe/Berlin or America/New_York', DEFAULT_TIMEZONE)}") from None


@dataclass(frozen=True)
class TimeWindow:
    """A daily window of wall-clock time in a timezone: ``start`` inclusive, ``end`` exclusive; ``start > end``
    wraps midnight (``22:00-06:00`` is 22:00 to 06:00 the next morning); ``end`` 00:00 is the end of the day;
    ``whole_day`` (``00:00-24:00``) holds every moment."""

    start: time
    end: time
    timezone: str = DEFAULT_TIMEZONE
    whole_day: bool = False

    def __post_init__(self) -> None:
        timezone_of(self.timezone)
        if self.whole_day and (self.start, self.end) != (time(0), time(0)):
            raise ConfigError(f"TimeWindow({self.start:%H:%M}, {self.end:%H:%M}, whole_day=True): a whole-day window "
                              "is 00:00-24:00. Fix: pass start=end=time(0), or whole_day=False.")
        if self.start == self.end and not self.whole_day:
            whole = " For the whole day write 00:00-24:00." if self.start == time(0) else ""
            raise ConfigError(f"{ENV_WINDOW}={str(self).split(' ')[0]!r}: an empty window (it starts where it ends). "
                              f"{_fix(ENV_WINDOW, DEFAULT_WINDOW, DEFAULT_WINDOW)}{whole} To advance runs at any "
                              f"hour, stop the {SCHEDULE_NAME} schedule: the {SENSOR_NAME} sensor then advances them.")

    @classmethod
    def parse(cls, text: str, timezone: str = DEFAULT_TIMEZONE) -> TimeWindow:
        """``"22:00-06:00"`` in ``timezone`` (``00:00-24:00`` is the whole day; ``00:00-00:00``, like any window
        that starts where it ends, is refused as empty); :class:`ConfigError` naming ``PC_ADVANCE_SCHEDULE_WINDOW``
        otherwise."""
        m = _CLOCK.match(text or "")
        bad = f"{ENV_WINDOW}={brief(text)}: "
        fix = _fix(ENV_WINDOW, "22:00-06:00 (wraps midnight) or 09:00-17:30", DEFAULT_WINDOW)
        if m is None:
            raise ConfigError(f"{bad}not a window HH:MM-HH:MM. {fix}")
        h1, m1, h2, m2 = (int(g) for g in m.groups())
        if h1 > 23 or m1 > 59 or (h2, m2) > (24, 0) or m2 > 59:
            raise ConfigError(f"{bad}hours go 00..23 (24:00 only as the end) and minutes 00..59. {fix}")
        return cls(time(h1, m1), time(h2 % 24, m2), timezone, whole_day=(h1, m1, h2, m2) == (0, 0, 24, 0))

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        return timezone_of(self.timezone)

    @property
    def wraps(self) -> bool:
        """Whether the window goes past midnight (an end of 00:00 included)."""
        return self.start > self.end

    def __str__(self) -> str:
        end = "24:00" if self.end == time(0) and (self.whole_day or self.start != time(0)) else f"{self.end:%H:%M}"
        return f"{self.start:%H:%M}-{end} {self.timezone}"

    def contains(self, when: datetime) -> bool:
        """Whether the moment ``when`` (timezone-aware) falls in the window, on the window's wall clock."""
        if self.whole_day:
            return True
        now = when.astimezone(self.tz).time().replace(tzinfo=None)
        if self.wraps:
            return now >= self.start or now < self.end
        return self.start <= now < self.end

    def next_open(self, when: datetime) -> datetime:
        """The next moment after ``when`` at which the window opens, in the window's timezone: its start's first
        real instant on the first day where that instant is inside the window. A start in a daylight-saving gap
        (02:30 on the night clocks go 02:00 -> 03:00) opens when the clocks land (03:00); a window wholly in the
        gap (02:00-03:00 that night) does not open that day, so the next day's start is the answer."""
        local = when.astimezone(self.tz)
        for days in range(8):
            opens = first_instant_at(datetime.combine(local.date() + timedelta(days=days), self.start), self.tz)
            if opens > local and self.contains(opens):
                return opens
        raise ConfigError(f"{ENV_WINDOW}={str(self).split(' ')[0]!r}: the window does not open in the 8 days after "
                          f"{local:%Y-%m-%d %H:%M %Z} in {self.timezone}. {_fix(ENV_WINDOW, DEFAULT_WINDOW, DEFAULT_WINDOW)}")

    def closed_reason(self, when: datetime) -> str:
        """A schedule tick's skip reason outside the window: when it opens, and in how long."""
        opens = self.next_open(when)
        wait = opens.astimezone(_UTC) - when.astimezone(_UTC)  # in one zone, aware times subtract as wall clocks
        minutes = int(wait.total_seconds() // 60)
        return (f"outside the window {self}: it opens at {opens:%Y-%m-%d %H:%M %Z} (in {minutes // 60}h "
                f"{minutes % 60:02d}m); no segment is requested until then (the {SENSOR_NAME} sensor defers to this "
                "schedule while it runs)")


def first_instant_at(wall: datetime, tz: zoneinfo.ZoneInfo) -> datetime:
    """The first real moment whose wall clock in ``tz`` reads ``wall`` (naive) or later, in ``tz``: ``wall`` itself
    when it exists (its first occurrence when the clocks go back), else the instant the clocks jump past it (a
    daylight-saving gap: 02:30 on a 02:00 -> 03:00 night is 03:00)."""
    early, late = (wall.replace(tzinfo=tz, fold=f).astimezone(_UTC) for f in (1, 0))
    if early >= late:  # the wall time exists (once, or twice when the clocks go back: fold 0 is the first)
        return late.astimezone(tz)
    # A gap: zoneinfo reads the time with the offset after the jump (fold=1, earlier) or before it (fold=0, later);
    # the jump lies between, and the wall clock only grows there, so bisect on whole seconds for it.
    lo, hi = int(early.timestamp()), int(late.timestamp())
    while lo < hi:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid + 1
    return datetime.fromtimestamp(lo, tz)


@dataclass(frozen=True)
class ScheduleSettings:
    """The schedule's settings (the module docstring's table)."""

    cron: str = DEFAULT_CRON
    window: TimeWindow = field(default_factory=lambda: TimeWindow.parse(DEFAULT_WINDOW))
    running_by_default: bool = False

    def __post_init__(self) -> None:
        check_cron(self.cron)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ScheduleSettings:
        """The settings from ``env`` (default ``os.environ``); an unset or empty variable takes its default."""
        env = dict(os.environ if env is None else env)
        status = (env.get(ENV_DEFAULT) or "stopped").strip().lower()
        if status not in ("stopped", "running"):
            raise ConfigError(f"{ENV_DEFAULT}={brief(env[ENV_DEFAULT])}: use stopped (the default: start the schedule "
                              f"in the UI) or running. {_fix(ENV_DEFAULT, 'running', 'stopped')}")
        timezone = (env.get(ENV_TIMEZONE) or DEFAULT_TIMEZONE).strip()
        timezone_of(timezone)
        return cls(cron=(env.get(ENV_CRON) or DEFAULT_CRON).strip(),
                   window=TimeWindow.parse(env.get(ENV_WINDOW) or DEFAULT_WINDOW, timezone),
                   running_by_default=status == "running")


def check_cron(cron: str) -> str:
    """``cron`` when Dagster takes it as a schedule's cron string; :class:`ConfigError` naming
    ``PC_ADVANCE_SCHEDULE_CRON`` otherwise."""
    try:
        ScheduleDefinition(name="cron_check", cron_schedule=cron, job_name="cron_check")
    except DagsterInvalidDefinitionError:
        raise ConfigError(f"{ENV_CRON}={brief(cron)}: not a cron string Dagster takes (5 fields: minute hour "
                          "day-of-month month day-of-week, or @hourly / @daily). "
                          f"{_fix(ENV_CRON, repr('*/10 * * * *') + ' (every 10 minutes)', DEFAULT_CRON)}") from None
    return cron


def schedule_tag(name: str = SCHEDULE_NAME) -> str:
    """``pc/advanced_by`` of the schedule's requests."""
    return f"schedule:{name}"


def _tick_time(context: ScheduleEvaluationContext, tz: zoneinfo.ZoneInfo) -> datetime:
    """The tick's scheduled time (the daemon always sets it); now when a test context has none."""
    try:
        return context.scheduled_execution_time
    except Exception:  # dagster's check error: built without scheduled_execution_time
        return datetime.now(tz)


def build_advance_schedule(settings: ScheduleSettings | None = None, max_failures: int = 3) -> ScheduleDefinition:
    """The window schedule with ``settings`` (default: :meth:`ScheduleSettings.from_env`), pausing a run after
    ``max_failures`` consecutive failures of a segment as the sensor does (give both the same)."""
    settings = settings or ScheduleSettings.from_env()
    window = settings.window

    @schedule(
        name=SCHEDULE_NAME,
        cron_schedule=settings.cron,
        execution_timezone=window.timezone,
        job=train_segment_job,
        default_status=DefaultScheduleStatus.RUNNING if settings.running_by_default else DefaultScheduleStatus.STOPPED,
        description=f"Advances training runs only in the window {window} (ticks {settings.cron!r}): requests each "
                    f"active run's next segment by the {SENSOR_NAME} sensor's rule. While it runs, the sensor "
                    "requests no segment.",
        metadata={"window": str(window), "cron": settings.cron},
    )
    def advance_runs_in_window(context: ScheduleEvaluationContext, store: StoreResource):
        when = _tick_time(context, window.tz)
        if not window.contains(when):
            return SkipReason(window.closed_reason(when))
        tick = advance(store.get(vacuum=False), context.instance, context.log, max_failures, schedule_tag())
        for event in tick.events:  # a schedule returns run requests only: a paused run's observation goes here
            context.instance.report_runless_asset_event(event)
        if tick.requests:
            return tick.requests
        return SkipReason("; ".join(tick.notes) or "no training runs: launch the start_run job")

    return advance_runs_in_window
