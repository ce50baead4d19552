"""The embedded data and policy assets materialize with dagster.materialize on temporary paths."""

import json

import pyarrow.parquet as pq
import pytest
from dagster import materialize

from pc_pipelines_dagster.assets import arith_task, base_policy
from pc_pipelines_dagster.definitions import defs
from pc_pipelines_dagster.resources import DataResource

pytestmark = pytest.mark.integration

TINY = ["task.num_prompts=300", "task.sft_examples=2000", "policy.sft_steps=20", "policy.sft_target=null"]


def test_definitions_hold_the_embedded_assets():
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"arith_task", "base_policy"} <= keys


def test_materialize_task_and_base_policy(tmp_path):
    cfg = {"overrides": TINY, "cache_dir": str(tmp_path / "cache")}
    result = materialize(
        [arith_task, base_policy],
        resources={"data": DataResource(out_dir=str(tmp_path / "data"))},
        run_config={"ops": {"arith_task": {"config": cfg}, "base_policy": {"config": cfg}}},
    )
    assert result.success
    task_meta = result.asset_materializations_for_node("arith_task")[0].metadata
    assert task_meta["train_rows"].value == 300 and task_meta["heldout_rows"].value == 600
    assert set(task_meta["rows_per_digit_length"].value["train"]) == {"4", "5", "6"}  # the preset's RL range
    train = pq.read_table(tmp_path / "data" / "arith" / "train.parquet")
    assert train.num_rows == 300 and len(set(train.column("id").to_pylist())) == 300
    pol_meta = result.asset_materializations_for_node("base_policy")[0].metadata
    path = pol_meta["path"].value
    assert (tmp_path / "cache").resolve().as_posix() in path and path.endswith(pol_meta["recipe_hash"].value)
    assert "| all (n=300) | 1.00 | 0.00 | 0.00 |" in pol_meta["pass_rate_histogram"].value  # 20 SFT steps: nothing solved yet
    assert set(pol_meta["greedy_heldout_accuracy"].value) == {str(d) for d in range(1, 7)}


def test_base_policy_from_a_configured_hf_directory(tmp_path, request):
    policy_dir = request.getfixturevalue("base_policy")  # the session's warm start, used here as "a local HF model"
    ok = materialize([base_policy], run_config={"ops": {"base_policy": {"config": {"policy_path": str(policy_dir)}}}})
    meta = ok.asset_materializations_for_node("base_policy")[0].metadata
    assert meta["model_type"].value == "qwen2" and meta["architectures"].value == ["Qwen2ForCausalLM"]
    assert meta["path"].value == str(policy_dir.resolve())
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = materialize([base_policy], raise_on_error=False,
              run_config={"ops": {"base_policy": {"config": {"policy_path": str(empty)}}}})
    assert not bad.success
    msg = "\n".join(e.event_specific_data.error.to_string() for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "no config.json" in msg and "save_pretrained" in msg
    # a directory whose config asks for its own code (auto_map) is refused before transformers reads it
    custom = tmp_path / "custom"
    custom.mkdir()
    marker = tmp_path / "ran"
    (custom / "config.json").write_text(json.dumps({"model_type": "mine", "auto_map": {"AutoConfig": "m.C"}}))
    (custom / "m.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nclass C: pass\n")
    bad = materialize([base_policy], raise_on_error=False,
                      run_config={"ops": {"base_policy": {"config": {"policy_path": str(custom)}}}})
    msg = "\n".join(e.event_specific_data.error.to_string() for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert not bad.success and "auto_map" in msg and "Fix:" in msg and not marker.exists()
