"""The Dagster resources hold configuration and hand back real library objects."""

import json

from pc_pipelines.run.checkpoints import CHECKPOINT_FORMAT
from pc_pipelines_dagster.resources import (
    DataResource,
    LocalCheckpointResource,
    LocalComputeResource,
    StoreResource,
    TransformersEngineResource,
)


def test_store_resource_initializes_the_store(tmp_path):
    store = StoreResource(path=str(tmp_path / "s.duckdb")).get()
    assert store.path == (tmp_path / "s.duckdb").resolve()
    assert store.query("SELECT count(*) AS n FROM runs") == [{"n": 0}]


def test_checkpoint_resource_finds_the_newest_complete_checkpoint(tmp_path):
    res = LocalCheckpointResource(root=str(tmp_path))
    ck = res.run_dir("r") / "checkpoints"
    assert res.latest_step("r") is None
    for step in (1, 3):
        (ck / f"step-{step:08d}").mkdir(parents=True)
        (ck / f"step-{step:08d}" / "meta.json").write_text(json.dumps({"step": step, "format": CHECKPOINT_FORMAT}))
    (ck / "step-00000005").mkdir()  # no meta.json: an interrupted write, not a checkpoint
    assert res.latest_step("r") == 3  # format 3 counts steps done: step-00000003 is after step 3
    (ck / "step-00000004").mkdir()  # format 1 (no format field) counted from 0: step-00000004 is after step 5
    (ck / "step-00000004" / "meta.json").write_text(json.dumps({"step": 4}))
    assert res.latest_step("r") == 5
    assert res.runs_root() == tmp_path.resolve()


def test_defaults_are_the_embedded_local_environment():
    assert TransformersEngineResource().device == "cpu"
    assert LocalComputeResource().device == "cpu"
    data = DataResource()
    assert data.deepmath_path is None and data.benchmarks_dir is None and data.verify_benchmarks is True
