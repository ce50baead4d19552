"""The warm start's stop rule (recipe v2): the learning-rate share over steps, and SFT driven by a scripted probe
(a fake probe is fine here: this tests the code that uses it; the real probe is pc_pipelines' generate + grade)."""

import pytest
import torch

from pc_pipelines.config import PolicyConfig
from pc_pipelines.training.base_policy import lr_share, new_model, sft

RULE = PolicyConfig(sft_steps=1000, sft_hold_lr=0.25, sft_target=0.3, sft_onset=0.05, sft_decay_steps=100)


def test_lr_share_follows_the_worked_example():
    assert lr_share(RULE, 49, True, None) == pytest.approx(0.5)
    assert lr_share(RULE, 99, True, None) == pytest.approx(1.0)
    assert lr_share(RULE, 400, True, None) == 1.0  # before the onset the rate stays at its peak, however long
    assert lr_share(RULE, 430, True, 430) == pytest.approx(1.0)
    assert lr_share(RULE, 480, True, 430) == pytest.approx(0.625)
    assert lr_share(RULE, 530, True, 430) == pytest.approx(0.25) == lr_share(RULE, 2000, True, 430)
    # without the stop rule: a cosine over sft_steps, then held
    fixed = PolicyConfig(sft_steps=1000, sft_hold_lr=0.1)
    assert lr_share(fixed, 550, False, None) == pytest.approx(0.55)
    assert lr_share(fixed, 999, False, None) == pytest.approx(0.1, abs=1e-4)


class _Tok:
    pad_token_id, eos_token_id = 0, 1

    def __len__(self) -> int:
        return 16


def _run(policy: PolicyConfig, rates: list[float]):
    torch.manual_seed(0)
    model = new_model(policy, _Tok(), 0)
    ids = torch.randint(2, 16, (64, 8))
    mask = torch.ones_like(ids)
    seen: dict[int, dict] = {}
    calls = iter(rates)
    step = {"n": 0}

    def progress(s: int, _loss: float) -> None:
        step["n"] = s + 1

    def probe() -> float:
        seen[step["n"]] = {k: v.clone() for k, v in model.state_dict().items()}
        return next(calls)

    return model, sft(model, ids, mask, policy, 0, progress, probe), seen


@pytest.mark.parametrize(("last", "kept"), [(0.31, 50), (0.50, 40)])
def test_stop_rule_stops_at_the_target_keeping_the_nearer_probe(last, kept):
    policy = PolicyConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, sft_batch=8, sft_steps=100,
                          sft_target=0.3, sft_onset=0.05, sft_probe_every=10, sft_max_steps=500)
    # the warmup is min(100, 100 // 10 + 1) = 11 steps; probes every 10 steps after it: 20, 30, 40, 50
    model, run, seen = _run(policy, [0.0, 0.06, 0.2, last, 0.9])
    assert [s for s, _ in run["probes"]] == [20, 30, 40, 50]
    assert run["steps"] == 50  # stopped at the first probe at or above the target, not at the budget
    assert run["onset_at"] == 30
    assert run["target_reached_at"] == kept  # 0.31 is nearer 0.3 than 0.2; 0.5 is not, so step 40's weights
    for k, v in model.state_dict().items():
        assert torch.equal(v, seen[kept][k]), k


def test_stop_rule_never_reached_runs_the_budget_and_says_so(caplog):
    policy = PolicyConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, sft_batch=8, sft_steps=100,
                          sft_target=0.3, sft_probe_every=10, sft_max_steps=50)
    _, run, _ = _run(policy, [0.0] * 10)
    assert run["steps"] == 50 and run["target_reached_at"] is None
    assert "sft_max_steps" in caplog.text


def test_bad_stop_rule_settings_name_the_field_and_fix():
    with pytest.raises(ValueError, match="sft_onset.*sft_target"):
        PolicyConfig(sft_target=0.3, sft_onset=0.4)
    with pytest.raises(ValueError, match="sft_target"):
        PolicyConfig(sft_target=1.5)
    with pytest.raises(ValueError, match="sft_lr"):
        PolicyConfig(sft_lr=float("nan"))
