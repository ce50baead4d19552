"""A ``start_run`` launch whose run name the store already holds (issue 41, point 7). With another config (or
another segment plan) it is refused in one line naming the run, the difference and the fix, before the warm start is
built and before anything is written; it used to fail after the warm start with the store's error naming a CLI flag
(``--run-name``). With the same config it succeeds saying that nothing new was registered and the state of the run's
segments, where it used to report "2 segments of 2 steps registered" as if it had."""

import shlex

import pytest
from dagster import DagsterInstance

from pc_pipelines.errors import installed_command
from pc_pipelines.store import Store
from pc_pipelines_dagster.automation.jobs import OP, StartRunRefused, launch_check, start_run
from pc_pipelines_dagster.resources import DataResource, LocalCheckpointResource, StoreResource

pytestmark = [pytest.mark.integration]


def launch(tmp_path, instance, **cfg):
    res = {"data": DataResource(out_dir=str(tmp_path / "data")),
           "store": StoreResource(path=str(tmp_path / "pc.duckdb")),
           "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs"))}
    rc = {"ops": {OP: {"config": {"method": "pc", "run_name": "dup", "total_steps": 4, "segment_steps": 2, **cfg}}}}
    return start_run.execute_in_process(run_config=rc, instance=instance, resources=res, raise_on_error=False)


def failure(result) -> str:
    (event,) = [e for e in result.all_events if e.is_step_failure]
    data = event.step_failure_data
    return data.user_failure_data.description if data.user_failure_data else data.error.message


def state(tmp_path) -> tuple:
    st = Store(tmp_path / "pc.duckdb")
    return (st.query("SELECT run_id, config_hash, status, updated_at FROM runs ORDER BY run_id"),
            st.query("SELECT * FROM segments ORDER BY run_id, segment"))


def test_a_run_name_taken_by_another_config_is_refused_with_the_fix(tmp_path):
    with DagsterInstance.ephemeral() as instance:
        assert launch(tmp_path, instance).success
        before = state(tmp_path)
        for cfg, needle in [({"overrides": ["training.lr=2e-4"]}, "with another config (hash "),
                            ({"total_steps": 6}, "with a plan of 2 segments of 2 steps, not 3 of 2")]:
            result = launch(tmp_path, instance, **cfg)
            assert not result.success
            msg = failure(result)
            assert msg.startswith("configuration error: start_run config run_name 'dup': the store already has"), msg
            assert needle in msg and "--run-name" not in msg and "\n" not in msg
            assert "Fix: set start_run config run_name to a name not in the store (e.g. 'dup-2')" in msg
            see = msg.split("(see it: ")[1].rsplit(")", 1)[0]
            assert shlex.split(see)[:4] == [installed_command("pilot-commit"), "sql", "--store", str(tmp_path / "pc.duckdb")]
            assert "run_id = 'dup'" in shlex.split(see)[4]
            assert state(tmp_path) == before  # nothing written: the run's row and its segment plan as they were


def test_a_relaunch_with_the_same_config_says_nothing_new_was_registered(tmp_path):
    with DagsterInstance.ephemeral() as instance:
        first = launch(tmp_path, instance)
        assert first.success
        again = launch(tmp_path, instance)
        assert again.success
        outs = [e for e in again.all_events if e.event_type_value == "STEP_OUTPUT"]
        (out,) = outs
        registered = out.step_output_data.metadata["registered"].value
        assert registered == "nothing new: already registered; its segments: 2 planned"
        logs = [e.message for e in instance.all_logs(again.run_id) if e.message]
        assert any("already registered with this config: nothing new registered" in m for m in logs)
        assert not any("segments of 2 steps registered" in m for m in logs)


def test_the_launch_check_reads_the_store_the_launch_would_write(tmp_path):
    """What the code location's start_run checks at launch (its config mapping, before a run exists): the store of
    its ``store`` resource, or the one the run config's ``resources.store`` names, which wins."""
    with DagsterInstance.ephemeral() as instance:
        assert launch(tmp_path, instance).success  # 'dup': 2 segments of 2 steps
    store = str(tmp_path / "pc.duckdb")
    other = {"ops": {OP: {"config": {"method": "pc", "run_name": "dup", "total_steps": 4, "segment_steps": 2,
                                     "seed": 1}}}}
    for rc, store_path in [(other, store), ({**other, "resources": {"store": {"config": {"path": store}}}}, None),
                           ({**other, "resources": {"store": {"config": {"path": store}}}}, str(tmp_path / "no.db"))]:
        with pytest.raises(StartRunRefused) as caught:
            launch_check(rc, store_path=store_path)
        (line,) = str(caught.value).splitlines()
        assert line.startswith("configuration error: start_run config run_name 'dup': the store already has a run of "
                               "this name with another config"), line
        assert caught.value.user_code_process_error_infos[0].stack == []  # what the webserver shows: the line alone
    assert launch_check(other, store_path=None) is other  # no store to check: the op checks it (the tests above)
    assert launch_check(other, store_path=str(tmp_path / "none.duckdb")) is other  # a store not created holds none
    same = {"ops": {OP: {"config": {"method": "pc", "run_name": "dup", "total_steps": 4, "segment_steps": 2}}}}
    assert launch_check(same, store_path=store) is same  # its own config again: launched, registers nothing new
