"""The window schedule's time arithmetic and settings (:mod:`pc_pipelines_dagster.automation.schedules`): a window that wraps midnight, one
that ends at 24:00, wall-clock times in a named timezone across daylight saving time, when it next opens, and the
environment variables with their defaults and errors."""

from datetime import datetime, time
from zoneinfo import ZoneInfo

import pytest

from pc_pipelines.errors import ConfigError
from pc_pipelines_dagster.automation.schedules import (
    DEFAULT_CRON,
    ENV_CRON,
    ENV_DEFAULT,
    ENV_TIMEZONE,
    ENV_WINDOW,
    ScheduleSettings,
    TimeWindow,
    check_cron,
)

UTC = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")


def at(hhmm: str, tz=UTC, day=(2025, 1, 15)) -> datetime:
    h, m = (int(x) for x in hhmm.split(":"))
    return datetime(*day, h, m, tzinfo=tz)


@pytest.mark.parametrize(("hhmm", "inside"), [
    ("08:59", False), ("09:00", True), ("12:00", True), ("17:29", True), ("17:30", False), ("23:59", False),
])
def test_a_day_window_holds_its_start_not_its_end(hhmm, inside):
    w = TimeWindow.parse("09:00-17:30")
    assert not w.wraps and w.contains(at(hhmm)) is inside


@pytest.mark.parametrize(("hhmm", "inside"), [
    ("21:59", False), ("22:00", True), ("23:59", True), ("00:00", True), ("03:00", True), ("05:59", True),
    ("06:00", False), ("12:00", False),
])
def test_a_night_window_wraps_midnight(hhmm, inside):
    w = TimeWindow.parse("22:00-06:00")
    assert w.wraps and w.contains(at(hhmm)) is inside


def test_a_window_may_end_at_midnight_as_24_00():
    w = TimeWindow.parse("18:00-24:00")
    assert (w.start, w.end, str(w)) == (time(18), time(0), "18:00-24:00 UTC")
    assert w.contains(at("23:59")) and w.contains(at("18:00"))
    assert not w.contains(at("00:00")) and not w.contains(at("17:59"))
    assert str(TimeWindow.parse(" 7:05 - 8:00 ")) == "07:05-08:00 UTC"  # one-digit hours and spaces are fine


def test_the_window_is_wall_clock_time_in_its_timezone_in_winter_and_summer():
    """22:00-06:00 Europe/Berlin: 22:30 local is 21:30 UTC in winter (CET) and 20:30 UTC in summer (CEST); the
    moment's own zone does not matter."""
    w = TimeWindow.parse("22:00-06:00", "Europe/Berlin")
    assert w.contains(at("21:30", day=(2025, 1, 15))) and not w.contains(at("20:30", day=(2025, 1, 15)))
    assert w.contains(at("20:30", day=(2025, 7, 15))) and not w.contains(at("19:30", day=(2025, 7, 15)))
    assert w.contains(datetime(2025, 1, 15, 16, 30, tzinfo=ZoneInfo("America/New_York")))  # 22:30 in Berlin
    assert w.contains(datetime(2025, 10, 26, 2, 30, fold=1, tzinfo=BERLIN))  # the hour that happens twice


def test_next_open_and_the_skip_reason_say_when_in_real_time():
    w = TimeWindow.parse("22:00-06:00", "Europe/Berlin")
    assert w.next_open(at("21:50", BERLIN)) == at("22:00", BERLIN)
    assert w.next_open(at("06:00", BERLIN)) == at("22:00", BERLIN)
    assert w.next_open(at("22:00", BERLIN)) == datetime(2025, 1, 16, 22, 0, tzinfo=BERLIN)  # open now: the next one
    assert w.closed_reason(at("21:50", BERLIN)).startswith(
        "outside the window 22:00-06:00 Europe/Berlin: it opens at 2025-01-15 22:00 CET (in 0h 10m)")
    # Across the change to summer time the wait is real time: 18:00 CET to 09:00 CEST is 14 hours, not 15.
    day = TimeWindow.parse("09:00-17:00", "Europe/Berlin")
    assert "opens at 2025-03-30 09:00 CEST (in 14h 00m)" in day.closed_reason(at("18:00", BERLIN, (2025, 3, 29)))


def test_a_start_in_the_spring_forward_gap_opens_when_the_clocks_land():
    """02:30 does not exist on 2025-03-30 in Berlin (clocks go 02:00 CET -> 03:00 CEST): the window 02:30-04:00
    opens at the first real instant inside it, 03:00 CEST, one real hour after 01:00 CET (was: 03:30)."""
    gap = TimeWindow.parse("02:30-04:00", "Europe/Berlin")
    opens = gap.next_open(at("01:00", BERLIN, (2025, 3, 30)))
    assert opens == datetime(2025, 3, 30, 1, 0, tzinfo=UTC) and opens.utcoffset().total_seconds() == 7200
    assert gap.contains(opens)
    assert "opens at 2025-03-30 03:00 CEST (in 1h 00m)" in gap.closed_reason(at("01:00", BERLIN, (2025, 3, 30)))


def test_a_window_wholly_in_the_spring_forward_gap_opens_the_next_night():
    """02:00-03:00 Europe/Berlin on 2025-03-30: no moment of that night is inside it (the clocks read 01:59:59 CET
    then 03:00 CEST), so it opens on 2025-03-31 at 02:00 CEST (was: "opens at 03:00 CEST", a time outside it)."""
    w = TimeWindow.parse("02:00-03:00", "Europe/Berlin")
    before = at("01:30", BERLIN, (2025, 3, 30))
    opens = w.next_open(before)
    assert opens == datetime(2025, 3, 31, 2, 0, tzinfo=BERLIN) and w.contains(opens)
    assert not w.contains(datetime(2025, 3, 30, 1, 0, tzinfo=UTC))  # 03:00 CEST, where the clocks land
    assert "opens at 2025-03-31 02:00 CEST (in 23h 30m)" in w.closed_reason(before)  # 00:30 UTC to 00:00 UTC next day
    # the night before and the night after open at 02:00 as on any other day
    assert w.next_open(at("01:30", BERLIN, (2025, 3, 29))) == datetime(2025, 3, 29, 2, 0, tzinfo=BERLIN)
    # when the clocks go back (2025-10-26, 02:00-03:00 happens twice) the window opens at the first 02:00
    autumn = w.next_open(at("01:30", BERLIN, (2025, 10, 26)))
    assert autumn.astimezone(UTC) == datetime(2025, 10, 26, 0, 0, tzinfo=UTC) and autumn.fold == 0


def test_00_00_to_24_00_is_the_whole_day():
    w = TimeWindow.parse("00:00-24:00", "Europe/Berlin")
    assert w.whole_day and str(w) == "00:00-24:00 Europe/Berlin"
    for moment in (at("00:00", BERLIN), at("12:00", BERLIN), at("23:59", BERLIN),
                   datetime(2025, 3, 30, 1, 30, tzinfo=UTC), datetime(2025, 10, 26, 2, 30, fold=1, tzinfo=BERLIN)):
        assert w.contains(moment)
    assert str(TimeWindow.parse("18:00-00:00")) == "18:00-24:00 UTC"  # an end of 00:00 after a start: midnight


@pytest.mark.parametrize(("text", "says"), [
    ("22-06", "not a window HH:MM-HH:MM"),
    ("", "not a window HH:MM-HH:MM"),
    ("25:00-06:00", "hours go 00..23 (24:00 only as the end)"),
    ("24:00-06:00", "hours go 00..23 (24:00 only as the end)"),
    ("22:00-24:30", "hours go 00..23 (24:00 only as the end)"),
    ("22:60-06:00", "minutes 00..59"),
    ("22:00-22:00", "an empty window (it starts where it ends)"),
    ("00:00-00:00", "an empty window (it starts where it ends). Fix: set PC_ADVANCE_SCHEDULE_WINDOW to e.g. "
                    "22:00-06:00, or unset it for the default (22:00-06:00). For the whole day write 00:00-24:00."),
])
def test_a_bad_window_names_the_variable_and_the_fix(text, says):
    with pytest.raises(ConfigError) as err:
        TimeWindow.parse(text)
    assert str(err.value).startswith(f"{ENV_WINDOW}=") and says in str(err.value)
    assert f"Fix: set {ENV_WINDOW} to e.g. 22:00-06:00" in str(err.value)


def test_the_settings_defaults_and_the_environment():
    default = ScheduleSettings.from_env({})
    assert (default.cron, str(default.window), default.running_by_default) == (DEFAULT_CRON, "22:00-06:00 UTC", False)
    assert ScheduleSettings.from_env({ENV_CRON: "", ENV_WINDOW: "", ENV_TIMEZONE: "", ENV_DEFAULT: ""}) == default
    got = ScheduleSettings.from_env({ENV_CRON: " 0 * * * * ", ENV_WINDOW: "01:00-05:00", ENV_TIMEZONE: "Asia/Tokyo",
                                     ENV_DEFAULT: "Running"})
    assert (got.cron, str(got.window), got.running_by_default) == ("0 * * * *", "01:00-05:00 Asia/Tokyo", True)
    assert check_cron("@daily") == "@daily"


@pytest.mark.parametrize(("env", "name", "says"), [
    ({ENV_CRON: "* * *"}, ENV_CRON, "not a cron string Dagster takes"),
    ({ENV_CRON: "61 * * * *"}, ENV_CRON, "not a cron string Dagster takes"),
    ({ENV_TIMEZONE: "CEST+2"}, ENV_TIMEZONE, "not an IANA timezone name"),
    ({ENV_TIMEZONE: "../etc/passwd"}, ENV_TIMEZONE, "not an IANA timezone name"),
    ({ENV_DEFAULT: "yes"}, ENV_DEFAULT, "use stopped (the default: start the schedule in the UI) or running"),
])
def test_bad_settings_name_the_variable_and_the_fix(env, name, says):
    with pytest.raises(ConfigError) as err:
        ScheduleSettings.from_env(env)
    text = str(err.value)
    assert text.startswith(f"{name}={next(iter(env.values()))!r}: {says}") and f"Fix: set {name} to e.g." in text
    assert "or unset it for the default" in text
