"""The advance_runs sensor's cadence from ``PC_ADVANCE_SENSOR_INTERVAL_S``: default 30 s, a whole number of seconds
from 1 to 86,400, anything else refused with the variable's name and the fix when the code location loads."""

from __future__ import annotations

import pytest

from pc_pipelines.errors import ConfigError
from pc_pipelines_dagster.automation.sensors import ENV_INTERVAL, SENSOR_NAME, interval_from_env


@pytest.mark.parametrize("env,want", [({}, 30), ({ENV_INTERVAL: ""}, 30), ({ENV_INTERVAL: " 5 "}, 5),
                                      ({ENV_INTERVAL: "1"}, 1), ({ENV_INTERVAL: "86400"}, 86_400)])
def test_interval_from_env(env, want):
    assert interval_from_env(env) == want


@pytest.mark.parametrize("raw", ["0", "-5", "86401", "1.5", "thirty", "5s"])
def test_a_bad_interval_names_the_variable_and_the_fix(raw):
    with pytest.raises(ConfigError) as err:
        interval_from_env({ENV_INTERVAL: raw})
    msg = str(err.value)
    assert msg.startswith(f"{ENV_INTERVAL}={raw!r}: must be a whole number of seconds from 1 to 86,400"), msg
    assert "Fix: set it to e.g. 30, or unset it for the default (30)." in msg


def test_the_code_location_ticks_at_the_interval(monkeypatch):
    from pc_pipelines_dagster.definitions import build_definitions

    monkeypatch.setenv(ENV_INTERVAL, "7")
    assert build_definitions().get_sensor_def(SENSOR_NAME).minimum_interval_seconds == 7
    monkeypatch.delenv(ENV_INTERVAL)
    assert build_definitions().get_sensor_def(SENSOR_NAME).minimum_interval_seconds == 30
