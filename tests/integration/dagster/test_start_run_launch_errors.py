"""A bad ``start_run`` config is refused when it is launched, before a run exists (issue 33, point 4): in process
(``execute_in_process`` raises, no run, nothing in the store) and through the webserver's GraphQL launch, the path of
the UI's Launch button (an answer naming the field, no run created). Each refusal is one line: "configuration error:
start_run config <field> ...: why. Fix: ...". The job's config mapping (``pc_pipelines_dagster.automation.jobs.launch_check``) does it; a
valid config is passed on unchanged, and a job with the same op but no mapping still accepts ``total_steps: -10`` at
launch (what Dagster's own schema checks, the reason for the mapping)."""

import contextlib
import textwrap

import pytest
from dagster import DagsterInstance, DagsterInvalidConfigError

from pc_pipelines.store.names import RUN_ID_PATTERN
from pc_pipelines_dagster.assets.training import SEGMENTS
from pc_pipelines_dagster.automation.jobs import OP, dataset_choices, launch_check, launch_problems, start_run
from pc_pipelines_dagster.resources import DataResource, LocalCheckpointResource, StoreResource

pytestmark = [pytest.mark.integration]

ISSUE_MESSAGE = ("configuration error: start_run config total_steps -10: must be >= 1 (training steps of the whole "
                 "run). Fix: set total_steps to a whole number from 1 to 10,000,000, or leave it out (default 50).")


def run_config(**cfg) -> dict:
    return {"ops": {OP: {"config": {"method": "pc", **cfg}}}}


def resources(tmp_path) -> dict:
    return {"data": DataResource(out_dir=str(tmp_path / "data")),
            "store": StoreResource(path=str(tmp_path / "pc.duckdb")),
            "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs"))}


def refused(tmp_path, **cfg) -> str:
    """start_run launched in process with ``cfg``: the error's message, after checking that no run was created and
    nothing was written (no store, no run directory, no partition)."""
    with DagsterInstance.ephemeral() as instance:
        with pytest.raises(DagsterInvalidConfigError) as caught:
            start_run.execute_in_process(run_config=run_config(**cfg), instance=instance, resources=resources(tmp_path),
                                         raise_on_error=False)
        assert instance.get_runs() == []  # refused before the run was created: no op started
        assert instance.get_dynamic_partitions(SEGMENTS.name) == []
    assert not (tmp_path / "pc.duckdb").exists() and not (tmp_path / "runs").exists()
    return str(caught.value)


def test_the_issues_case_is_refused_at_launch_with_one_line(tmp_path):
    msg = refused(tmp_path, total_steps=-10, segment_steps=2)
    assert msg == ISSUE_MESSAGE  # the one line, nothing before or after it
    assert "Traceback" not in msg and "pydantic" not in msg


@pytest.mark.parametrize(
    "cfg,field,needles",
    [
        ({"total_steps": 10**8}, "total_steps", ["100000000: must be <= 10,000,000", "from 1 to 10,000,000"]),
        ({"segment_steps": 0}, "segment_steps", ["0: must be >= 1 (training steps per segment)", "(default 10)"]),
        ({"segment_steps": 100_001}, "segment_steps", ["must be <= 100,000"]),
        ({"seed": -1}, "seed", ["-1: must be >= 0", "(default 0)"]),
        ({"seed": 2**70}, "seed", ["must be <= 9,223,372,036,854,775,807"]),
        ({"run_name": "[a-z]*"}, "run_name", ["'[a-z]*' contains '*', '[', ']'", RUN_ID_PATTERN]),
        ({"run_name": ""}, "run_name", ["'' is empty"]),
        ({"run_name": "x" * 129}, "run_name", ["is 129 characters long (at most 128)"]),
        ({"family": "a b"}, "family", ["'a b': the default run id", "Or name the run with start_run config run_name"]),
        ({"preset": "paper", "dataset": "embedded"}, "dataset", ["preset 'paper' has no embedded task section"]),
        ({"dataset": "deepmath"}, "policy_path", ["a run on dataset 'deepmath'", "set policy_path to a local"]),
        ({"preset": "paper"}, "policy_path", ["a run on dataset 'deepmath'"]),  # auto: the paper preset's data
        ({"overrides": ["foo"]}, "overrides", ["--set 'foo' is not key=value"]),
        ({"overrides": ["allocator.nope=1"]}, "overrides", ["allocator has no field 'nope'"]),
        ({"overrides": ["allocator.n=abc"]}, "overrides", ["allocator.n='abc' is not a valid int"]),
        ({"overrides": ["allocator.n=0"]}, "overrides", ["AllocatorConfig.n=0: must be at least 1"]),
        ({"overrides": ["allocator.selection=nope"]}, "overrides", ["'nope': unknown buffer selection strategy"]),
        ({"overrides": ["training.lr=nan"]}, "overrides", ["TrainingConfig.lr=nan", "finite"]),
        ({"overrides": ["training.keep_every=3"]}, "overrides", ["training.keep_every=3 would be ignored"]),
        ({"overrides": ["seed=5"]}, "overrides", ["--set seed=5 conflicts with --seed 0"]),
    ],
    ids=lambda v: None if isinstance(v, (dict, list)) else str(v),
)
def test_each_bad_field_is_refused_at_launch_naming_it(tmp_path, cfg, field, needles):
    msg = refused(tmp_path, **cfg)
    (line,) = msg.splitlines()  # one line, one problem
    assert line.startswith(f"configuration error: start_run config {field}"), line
    assert "Fix:" in line
    for n in needles:
        assert n in line, (n, line)


def test_every_bounded_field_is_reported_at_once(tmp_path):
    msg = refused(tmp_path, total_steps=-10, segment_steps=0, seed=-3)
    lines = msg.splitlines()
    assert [ln.split(" start_run config ")[1].split(":")[0] for ln in lines] == ["seed -3", "segment_steps 0",
                                                                                  "total_steps -10"]
    assert all(ln.startswith("configuration error: ") and "Fix:" in ln for ln in lines)
    assert lines[2] == ISSUE_MESSAGE


def test_a_valid_config_is_passed_on_unchanged():
    rc = {**run_config(total_steps=4, segment_steps=2, run_name="r", overrides=["training.lr=2e-4"]),
          "loggers": {"console": {"config": {"log_level": "INFO"}}}}
    assert launch_problems(rc["ops"][OP]["config"]) == {}
    assert launch_check(rc) is rc
    # The launchpad still shows the op's fields, their descriptions and defaults (the mapping's schema is the op's).
    fields = start_run.run_config_schema.config_type.fields["ops"].config_type.fields[OP].config_type.fields
    config = fields["config"].config_type.fields
    assert config["method"].is_required and config["total_steps"].default_value == 50
    assert config["total_steps"].description == "Training steps of the whole run. A whole number from 1 to 10,000,000."


# ---- what the Launchpad checks as you type: the job's config schema, no code of ours --------------------------------
def launchpad_errors(cfg: dict) -> list[str]:
    """The errors the Launchpad shows for the op config ``cfg`` before Launch: the webserver's ``isPipelineConfigValid``
    (``ensure_valid_config``) validates the run config against the job's config schema alone, without running the
    config mapping, as this does."""
    from dagster._config import validate_config

    result = validate_config(start_run.run_config_schema.config_type, run_config(**cfg))
    return [e.message for e in result.errors or []]


@pytest.mark.parametrize("field,value", [("preset", "embeded"), ("preset", "../embedded"), ("preset", None),
                                         ("method", "oracle"), ("method", "GRPO"), ("dataset", "nope")])
def test_the_launchpad_refuses_a_preset_method_or_dataset_its_registry_lacks(tmp_path, field, value):
    cfg = {field: value}
    (err,) = launchpad_errors(cfg)
    assert f"config:{field}" in err and ("enum type" in err or "Value at path" in err), err
    msg = refused(tmp_path, **cfg)  # and a launch is refused, before a run exists
    assert f"config:{field}" in msg


def test_the_launchpads_enums_are_the_registries():
    from pc_pipelines.allocation import training_methods
    from pc_pipelines.config import available_presets

    config = start_run.run_config_schema.config_type.fields["ops"].config_type.fields[OP].config_type.fields
    fields = config["config"].config_type.fields
    assert [v.config_value for v in fields["method"].config_type.enum_values] == training_methods()
    assert [v.config_value for v in fields["preset"].config_type.enum_values] == available_presets()
    assert [v.config_value for v in fields["dataset"].config_type.enum_values] == list(dataset_choices())
    assert fields["dataset"].default_value == "auto"
    assert fields["preset"].default_value == "embedded"
    assert launchpad_errors({"preset": "bench", "total_steps": 4}) == []
    assert launchpad_errors({"total_steps": "ten"})  # a whole number, in Dagster's own types
    # Dagster's schema has no bounds: the range is in the description, and the launch refuses it (launch_check).
    assert launchpad_errors({"total_steps": -10}) == []
    assert "from 1 to 100,000" in fields["segment_steps"].description


# ---- through the webserver: the GraphQL launch the UI's Launch button sends ----------------------------------------
LOCATION = '''
import os

from dagster import Definitions, job

from pc_pipelines_dagster.automation.jobs import register_training_run
from pc_pipelines_dagster.definitions import build_definitions
from pc_pipelines_dagster.resources import (
    DataResource,
    LocalCheckpointResource,
    LocalComputeResource,
    StoreResource,
    TransformersEngineResource,
)

root = os.environ["PC_LAUNCH_TEST_ROOT"]


@job
def start_run_unchecked():  # the same op, no config mapping: what Dagster's schema alone refuses
    register_training_run()


defs = Definitions.merge(
    build_definitions(resources={"data": DataResource(out_dir=f"{root}/data"),
                                 "store": StoreResource(path=f"{root}/pc.duckdb"),
                                 "checkpoints": LocalCheckpointResource(root=f"{root}/runs"),
                                 "compute": LocalComputeResource(), "engine": TransformersEngineResource()}),
    Definitions(jobs=[start_run_unchecked]),
)
'''

LAUNCH = """mutation($p: ExecutionParams!) { launchPipelineExecution(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId status } }
  ... on PythonError { message className stack errorChain { error { message } } }
  ... on RunConfigValidationInvalid { errors { message reason } }
  ... on Error { message } } }"""


VALIDATE = """query($s: PipelineSelector!, $rc: RunConfigData!) { isPipelineConfigValid(pipeline: $s, runConfigData: $rc, mode: "default") {
  __typename ... on RunConfigValidationInvalid { errors { message reason } } } }"""


@contextlib.contextmanager
def graphql_location(tmp_path, monkeypatch):
    """The code location (a code server) with its store, run directories and data under ``tmp_path``, and a test
    instance whose runs stay queued (no daemon here: a launch that is accepted creates a run and runs nothing):
    the instance, ``launch(job_name, run_config)`` and ``validate(run_config)`` (what the Launchpad asks as you type),
    each the GraphQL answer."""
    from dagster import instance_for_test
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql, infer_job_selector

    monkeypatch.setenv("PC_LAUNCH_TEST_ROOT", str(tmp_path))
    (tmp_path / "location.py").write_text(textwrap.dedent(LOCATION))
    queued = {"run_coordinator": {"module": "dagster", "class": "QueuedRunCoordinator"}}
    with instance_for_test(overrides=queued) as instance, \
            define_out_of_process_context(str(tmp_path / "location.py"), "defs", instance) as ctx:

        def launch(job_name: str, rc: dict) -> dict:
            params = {"selector": infer_job_selector(ctx, job_name), "runConfigData": rc, "mode": "default"}
            return execute_dagster_graphql(ctx, LAUNCH, {"p": params}).data["launchPipelineExecution"]

        def validate(rc: dict) -> dict:
            variables = {"s": infer_job_selector(ctx, "start_run"), "rc": rc}
            return execute_dagster_graphql(ctx, VALIDATE, variables).data["isPipelineConfigValid"]

        yield instance, launch, validate


@pytest.mark.slow
def test_the_graphql_launch_refuses_without_creating_a_run(tmp_path, monkeypatch):
    with graphql_location(tmp_path, monkeypatch) as (instance, launch, validate):

        got = validate(run_config(preset="embeded"))
        assert got["__typename"] == "RunConfigValidationInvalid"
        assert "preset not in enum type StartRunPreset got embeded" in got["errors"][0]["message"]
        got = validate(run_config(method="oracle"))
        assert "method not in enum type StartRunMethod got oracle" in got["errors"][0]["message"]
        assert validate(run_config(preset="bench"))["__typename"] == "PipelineConfigValidationValid"

        # The issue's case: answered with the one line and no stack (the Launch button's dialog shows message and
        # stack: the line alone), and no run.
        got = launch("start_run", run_config(total_steps=-10))
        assert got["__typename"] == "PythonError" and got["className"] == "StartRunRefused"
        assert got["message"] == ISSUE_MESSAGE and got["stack"] == [] and got["errorChain"] == []
        got = launch("start_run", run_config(run_name="[a-z]*"))
        assert "configuration error: start_run config run_name '[a-z]*'" in got["message"] and "Fix:" in got["message"]
        got = launch("start_run", run_config(overrides=["allocator.n=abc"]))
        assert "configuration error: start_run config overrides: allocator.n='abc'" in got["message"]
        assert instance.get_runs() == []
        # A field Dagster's schema does not know is still its own structured error, before ours.
        got = launch("start_run", run_config(totl_steps=3))
        assert got["__typename"] == "RunConfigValidationInvalid"
        assert got["errors"][0]["reason"] == "FIELD_NOT_DEFINED" and "totl_steps" in got["errors"][0]["message"]
        assert instance.get_runs() == []

        # Without the mapping, the same config is accepted at launch (it would fail in the op, seconds later).
        got = launch("start_run_unchecked", run_config(total_steps=-10))
        assert got["__typename"] == "LaunchRunSuccess"
        (unchecked,) = instance.get_runs()
        assert unchecked.job_name == "start_run_unchecked"
        # A valid config is launched as before: its run is created (queued), with its run config as given.
        rc = run_config(total_steps=4, segment_steps=2, run_name="ok")
        got = launch("start_run", rc)
        assert got["__typename"] == "LaunchRunSuccess" and got["run"]["status"] == "QUEUED"
        run = instance.get_run_by_id(got["run"]["runId"])
        assert run.job_name == "start_run" and run.run_config == rc
    assert not (tmp_path / "pc.duckdb").exists() and not (tmp_path / "runs").exists()  # no op ran


@pytest.mark.slow
def test_a_run_name_taken_by_another_config_is_refused_at_launch(tmp_path, monkeypatch):
    """The issue's duplicate run_name: refused by the launch itself, in one line naming the run and the fix, no
    run created (it used to launch and fail ~45 s later, as the run worker reached the op); the same name with the
    run's own config and plan is launched (the op then says nothing new was registered)."""
    from pc_pipelines.store import Store

    with DagsterInstance.ephemeral() as instance:  # the run "dup" as start_run registers it
        first = start_run.execute_in_process(run_config=run_config(run_name="dup", total_steps=4, segment_steps=2),
                                             instance=instance, resources=resources(tmp_path))
        assert first.success
    before = Store(tmp_path / "pc.duckdb").query("SELECT run_id, config_hash FROM runs")
    with graphql_location(tmp_path, monkeypatch) as (instance, launch, _):
        got = launch("start_run", run_config(run_name="dup", total_steps=4, segment_steps=2, seed=1))
        assert got["__typename"] == "PythonError" and got["stack"] == [] and got["errorChain"] == []
        (line,) = got["message"].splitlines()
        assert line.startswith("configuration error: start_run config run_name 'dup': the store already has a run "
                               "of this name with another config (hash "), line
        assert "Fix: set start_run config run_name to a name not in the store (e.g. 'dup-2')" in line
        got = launch("start_run", run_config(run_name="dup", total_steps=6, segment_steps=2))
        assert "with a plan of 2 segments of 2 steps, not 3 of 2" in got["message"]
        assert instance.get_runs() == []
        got = launch("start_run", run_config(run_name="dup", total_steps=4, segment_steps=2))
        assert got["__typename"] == "LaunchRunSuccess"
    assert Store(tmp_path / "pc.duckdb").query("SELECT run_id, config_hash FROM runs") == before
