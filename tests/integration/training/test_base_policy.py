"""The embedded warm start leaves RL something to learn (issue 4): at least a fifth of the RL prompts below 0.125,
a fifth above 0.75 and a fifth in between (16 samples each at the training temperature), and the short sums the
SFT data covered are solved while the long ones are not."""

import json

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.training.base_policy import META_FILE, read_meta, recipe_hash, warm_start_report

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_warm_start_spread(base_policy):
    cfg = resolve("embedded", method="pc")
    report = warm_start_report(base_policy, cfg.task, cfg.training.prompt_template,
                               max_new_tokens=cfg.training.max_response_length)
    hist = report["pass_rate_histogram"]["all"]
    assert hist["n"] == 640
    assert hist["below"] >= 0.2 and hist["between"] >= 0.2 and hist["above"] >= 0.2, hist
    greedy = report["greedy_heldout_accuracy"]
    assert min(greedy["1"], greedy["2"]) >= 0.95  # covered by SFT
    assert greedy["6"] <= 0.6  # mostly not: RL has a skill to learn


def test_cached_policy_is_a_complete_hf_directory(base_policy):
    cfg = resolve("embedded", method="pc")
    meta = read_meta(base_policy)
    assert meta["recipe_hash"] == recipe_hash(cfg.task, cfg.policy)
    assert base_policy.name == f"base-policy-{meta['recipe_hash']}"
    for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", META_FILE):
        assert (base_policy / f).exists(), f
    assert 150_000 <= meta["parameters"] <= 300_000
    assert json.loads((base_policy / "config.json").read_text())["model_type"] == "qwen2"
