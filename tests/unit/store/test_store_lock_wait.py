"""How long a command waits for a catalog another process holds: ``PC_PIPELINES_STORE_LOCK_WAIT_S`` (default 60 s),
read when a store is made; a bad value names the variable and the fix."""

from __future__ import annotations

import pytest

from pc_pipelines.errors import ConfigError
from pc_pipelines.store import Store
from pc_pipelines.store.session import ENV_LOCK_WAIT, lock_wait_s


@pytest.mark.parametrize("env,want", [({}, 60.0), ({ENV_LOCK_WAIT: " "}, 60.0), ({ENV_LOCK_WAIT: "0"}, 0.0),
                                      ({ENV_LOCK_WAIT: "2.5"}, 2.5), ({ENV_LOCK_WAIT: "86400"}, 86_400.0)])
def test_lock_wait_from_the_environment(env, want):
    assert lock_wait_s(env) == want


@pytest.mark.parametrize("raw", ["-1", "86401", "nan", "inf", "a minute", "5s"])
def test_a_bad_lock_wait_names_the_variable_and_the_fix(raw):
    with pytest.raises(ConfigError) as err:
        lock_wait_s({ENV_LOCK_WAIT: raw})
    msg = str(err.value)
    assert msg.startswith(f"{ENV_LOCK_WAIT}={raw!r}: must be a number of seconds from 0 to 86,400"), msg
    assert msg.endswith("Fix: set it to e.g. 60, or unset it for the default (60).")


def test_a_store_takes_the_wait_when_it_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_LOCK_WAIT, "7")
    assert Store(tmp_path / "s.duckdb").lock_timeout_s == 7.0
    assert Store(tmp_path / "s.duckdb", lock_timeout_s=0.5).lock_timeout_s == 0.5  # a caller's own wins
    monkeypatch.delenv(ENV_LOCK_WAIT)
    assert Store(tmp_path / "s.duckdb").lock_timeout_s == 60.0
