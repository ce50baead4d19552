"""Issue 41 point 8: `make ui`'s console is for reading. Its instance (etc/dagster.yaml, copied by the Makefile)
logs runs at INFO: no Dagster DEBUG engine events on the console (they filled it, ~230 lines for the demo's runs),
while the UI's event log keeps every structured event. A real run of the code location's ``report`` job, on an
instance made from the template as `make ui` makes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance
from dagster_runs import local_resources

from pc_pipelines_dagster.definitions import build_definitions

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[3]


def test_make_uis_instance_logs_runs_at_info_and_keeps_every_event(tmp_path, monkeypatch, capfd):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "etc" / "dagster.yaml", home / "dagster.yaml")  # what `make ui` does
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = DagsterInstance.get()
    try:
        job = build_definitions(local_resources(tmp_path)).resolve_job_def("report")
        capfd.readouterr()
        result = job.execute_in_process(instance=instance, raise_on_error=False)  # an empty store: it fails
        console = capfd.readouterr()
        lines = (console.out + console.err).splitlines()
        events = {e.dagster_event.event_type_value for e in instance.all_logs(result.run_id) if e.dagster_event}
    finally:
        instance.dispose()
    assert not result.success
    assert [ln for ln in lines if " - DEBUG - " in ln] == []
    assert any(" - ERROR - " in ln and "STEP_FAILURE" in ln for ln in lines)  # what went wrong still shows
    assert {"PIPELINE_START", "STEP_START", "STEP_FAILURE"} <= events  # the UI's event log is whole
