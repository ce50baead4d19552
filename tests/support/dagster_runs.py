"""The Dagster integration tests' shared set-up: the local resources over one temporary directory, and a training run
registered through the real ``start_run`` job. One copy, used by the segment, schedule and fault tests."""

from __future__ import annotations

from pathlib import Path

from pc_pipelines_dagster.automation.jobs import start_run
from pc_pipelines_dagster.resources import (
    DataResource,
    LocalCheckpointResource,
    LocalComputeResource,
    StoreResource,
    TransformersEngineResource,
)


def local_resources(tmp: Path, compute=None, engine=None) -> dict:
    """The code location's resources, each kept under ``tmp`` (store ``tmp/pc.duckdb``, checkpoints ``tmp/runs``,
    prepared data ``tmp/data``); ``compute`` and ``engine`` default to the in-process ones."""
    tmp = Path(tmp)
    return {
        "data": DataResource(out_dir=str(tmp / "data")),
        "store": StoreResource(path=str(tmp / "pc.duckdb")),
        "checkpoints": LocalCheckpointResource(root=str(tmp / "runs")),
        "compute": compute or LocalComputeResource(),
        "engine": engine or TransformersEngineResource(),
    }


def register_run(instance, tmp: Path, policy: Path, name: str, overrides: list[str], *, method: str = "pc",
                 segment_steps: int = 1, total_steps: int = 2) -> str:
    """Register a training run with ``start_run`` (as the UI's launchpad does) and return its run id."""
    cfg = {"method": method, "overrides": list(overrides), "segment_steps": segment_steps,
           "total_steps": total_steps, "run_name": name, "policy_path": str(policy)}
    res = start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                       instance=instance, resources=local_resources(tmp))
    assert res.success
    return res.output_for_node("register_training_run")


def step_failures(result) -> str:
    """The errors of a Dagster run's failed steps, one after another (empty when no step failed)."""
    return "\n".join(e.event_specific_data.error.to_string() for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE")
