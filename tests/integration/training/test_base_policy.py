"""The canonical embedded warm start (issue 16): it ships with the package, its files match their hashes, its stored
report is what a fresh evaluation measures on any CPU, and it leaves RL something to learn."""

import json
import shutil

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.training.base_policy import (
    META_FILE,
    SHIPPED_DIR,
    SUMS_FILE,
    WarmStartError,
    ensure_base_policy,
    read_meta,
    recipe_hash,
    verify_sums,
    warm_start_report,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def fresh_report(base_policy):
    cfg = resolve("embedded", method="pc")
    return warm_start_report(base_policy, cfg.task, cfg.training.prompt_template,
                             max_new_tokens=cfg.training.max_response_length)


def test_the_embedded_preset_uses_the_shipped_warm_start(base_policy, tmp_path):
    cfg = resolve("embedded", method="pc")
    assert base_policy.parent == SHIPPED_DIR
    assert base_policy.name == f"base-policy-{recipe_hash(cfg.task, cfg.policy, cfg.training.prompt_template)}"
    # no build, no cache: an empty cache directory stays empty
    assert ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template, cache_dir=tmp_path) == base_policy
    assert list(tmp_path.iterdir()) == []
    # the efficiency study's preset has the same task and policy recipe: the same warm start
    eff = resolve("efficiency", method="pc")
    assert ensure_base_policy(eff.task, eff.policy, eff.training.prompt_template) == base_policy


def test_shipped_files_match_their_hashes_and_damage_is_named(base_policy, tmp_path):
    verify_sums(base_policy)
    names = {line.split("  ", 1)[1] for line in (base_policy / SUMS_FILE).read_text().splitlines()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", META_FILE} <= names
    copy = tmp_path / "copy"
    shutil.copytree(base_policy, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    weights.write_bytes(bytes(data))
    with pytest.raises(WarmStartError, match="model.safetensors does not match its sha256.*Fix"):
        verify_sums(copy)
    shutil.copy(base_policy / "model.safetensors", weights)
    verify_sums(copy)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(WarmStartError, match="tokenizer.json is missing"):
        verify_sums(copy)


def test_stored_report_equals_a_fresh_evaluation(base_policy, fresh_report):
    """The report shipped beside the weights was measured on the build machine; re-measured here (any CPU) it agrees.
    Greedy decoding and seeded sampling on fixed weights differ across CPU kernels only where two tokens tie to the
    last bits, so the tolerance is a few prompts, not a distribution's width."""
    stored = read_meta(base_policy)["warm_start"]
    for d, acc in stored["greedy_heldout_accuracy"].items():
        assert fresh_report["greedy_heldout_accuracy"][d] == pytest.approx(acc, abs=0.02), d
    for key, h in stored["pass_rate_histogram"].items():
        got = fresh_report["pass_rate_histogram"][key]
        assert got["n"] == h["n"]
        for bucket in ("below", "between", "above"):
            assert got[bucket] == pytest.approx(h[bucket], abs=0.02), (key, bucket)


def test_warm_start_leaves_rl_something_to_learn(fresh_report):
    hist = fresh_report["pass_rate_histogram"]["all"]
    assert hist["n"] == 640
    assert hist["below"] >= 0.2 and hist["between"] >= 0.2 and hist["above"] >= 0.1, hist
    greedy = fresh_report["greedy_heldout_accuracy"]
    assert min(greedy["1"], greedy["2"]) >= 0.95  # covered by SFT
    assert greedy["6"] <= 0.6  # mostly not: RL has a skill to learn


def test_shipped_warm_start_is_a_complete_hf_directory_with_its_recipe(base_policy):
    cfg = resolve("embedded", method="pc")
    meta = read_meta(base_policy)
    assert meta["recipe_hash"] == recipe_hash(cfg.task, cfg.policy, cfg.training.prompt_template)
    assert meta["policy"] == cfg.policy.to_dict() and meta["template"] == cfg.training.prompt_template
    assert meta["sft_target_reached_at"] is not None  # the stop rule ended the SFT, not the step budget
    assert meta["sft_probes"][-1][1] >= cfg.policy.sft_target
    assert 150_000 <= meta["parameters"] <= 300_000
    assert json.loads((base_policy / "config.json").read_text())["model_type"] == "qwen2"
