"""The embedded task: seeded splits, formats, difficulty ranges, disjointness, config errors."""

import numpy as np
import pytest

from pc_pipelines.config import ArithTaskConfig
from pc_pipelines.data.arith import build_splits
from pc_pipelines.data.task import TaskData, embedded_task
from pc_pipelines.errors import ConfigError
from pc_pipelines.rewards import MathGrader

TEMPLATE = "{question} Let's think step by step and output the final answer within \\boxed{{}}."


def test_worked_example_formats():
    cfg = ArithTaskConfig(max_digits=5)
    s = build_splits(cfg)
    p = s.train
    p.a[0], p.b[0] = 123, 4567
    assert p.question(0) == "00123+04567"
    assert p.gold(0) == "4690"
    assert p.target(0) == "\\boxed{004690}"


def test_splits_are_seeded_and_sft_ignores_the_rl_pool():
    a, b = build_splits(ArithTaskConfig()), build_splits(ArithTaskConfig())
    assert np.array_equal(a.train.a, b.train.a) and np.array_equal(a.sft.b, b.sft.b)
    c = build_splits(ArithTaskConfig(data_seed=1))
    assert not np.array_equal(a.train.a, c.train.a)
    # the SFT set (hence the base policy) does not change with the RL pool's size or range
    d = build_splits(ArithTaskConfig(num_prompts=50, min_digits=4))
    assert np.array_equal(a.sft.a, d.sft.a) and np.array_equal(a.heldout.b, d.heldout.b)
    assert set(d.train.digits.tolist()) <= {4, 5, 6}


def test_digit_lengths_and_shares():
    cfg = ArithTaskConfig(num_prompts=3000, sft_examples=20000, sft_long_share=0.01)
    s = build_splits(cfg)
    for probs in (s.train, s.heldout, s.sft):
        longest = np.maximum(probs.a, probs.b)
        digits = np.array([len(str(int(x))) for x in longest])
        assert np.array_equal(digits, probs.digits)  # digits = the longer operand's significant digits
    assert set(s.train.digits.tolist()) == set(range(1, 7))
    assert np.bincount(s.heldout.digits).tolist() == [0] + [100] * 6
    long_share = float((s.sft.digits > cfg.sft_max_digits).mean())
    assert long_share == pytest.approx(0.01, abs=1e-4)


def test_heldout_is_disjoint_where_pairs_allow():
    s = build_splits(ArithTaskConfig())
    seen = set(s.train.keys().tolist()) | set(s.sft.keys().tolist())
    for i, key in enumerate(s.heldout.keys().tolist()):
        if s.heldout.digits[i] >= 2:
            assert key not in seen
    # 1-digit addition has only 100 ordered pairs: the overlap is reported, not hidden
    assert set(s.heldout_overlap) <= {1}


def test_targets_grade_correct_with_math_verify():
    s = build_splits(ArithTaskConfig(num_prompts=40))
    with MathGrader() as g:
        rewards = g.rewards([s.train.target(i) for i in range(40)], s.train.golds())
        wrong = g.rewards([s.train.target((i + 1) % 40) for i in range(40)], s.train.golds())
    assert rewards.tolist() == [1.0] * 40
    assert wrong.sum() < 3  # only coincidentally equal sums


def test_embedded_task_eval_sets_per_length():
    cfg = ArithTaskConfig(num_prompts=64, heldout_per_length=7)
    task = embedded_task(cfg, TEMPLATE)
    assert len(task.prompts) == 64 and len(task.golds) == 64
    assert [e.name for e in task.eval_sets] == [f"arith_d{d}" for d in range(1, 7)]
    assert all(len(e.prompts) == 7 == len(e.golds) for e in task.eval_sets)
    assert task.prompts[0].endswith("within \\boxed{}.") and "+" in task.prompts[0]


def test_embedded_task_declares_each_prompts_digit_length_as_its_group():
    """The history prior pools its prior by this attribute (TaskData.groups)."""
    cfg = ArithTaskConfig(num_prompts=64, min_digits=2, max_digits=5)
    task = embedded_task(cfg, TEMPLATE)
    train = build_splits(cfg).train
    assert task.groups == tuple(int(d) for d in train.digits) and set(task.groups) == {2, 3, 4, 5}
    for q, d in zip(train.questions(), task.groups):  # the longer operand has d significant digits
        assert max(len(x.lstrip("0")) for x in q.split("+")) == d, q
    with pytest.raises(ValueError, match="3 prompt groups for 64 prompts: give one group id >= 0 per prompt"):
        TaskData(prompts=task.prompts, golds=task.golds, eval_sets=[], groups=(1, 2, 3))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_prompts": 0}, "num_prompts"),
        ({"min_digits": 4, "max_digits": 3, "sft_max_digits": 3}, "min_digits"),
        ({"max_digits": 13}, "max_digits"),
        ({"sft_max_digits": 7}, "sft_max_digits"),
        ({"sft_long_share": 1.5}, "sft_long_share"),
        ({"heldout_per_length": 0}, "heldout_per_length"),
    ],
)
def test_bad_config_names_field_and_fix(kwargs, field):
    with pytest.raises(ConfigError, match=field) as exc:
        ArithTaskConfig(**kwargs)
    assert "Fix:" in str(exc.value)


def test_length_weights_set_the_pool_mix_and_leave_the_rest():
    uniform = build_splits(ArithTaskConfig(num_prompts=4000, min_digits=4))
    mixed_cfg = ArithTaskConfig(num_prompts=4000, min_digits=4, length_weights="1, 0, 3")
    mixed = build_splits(mixed_cfg)
    assert mixed_cfg.length_probabilities() == [0.25, 0.0, 0.75]
    counts = {d: int((mixed.train.digits == d).sum()) for d in (4, 5, 6)}
    assert counts[5] == 0 and abs(counts[4] / 4000 - 0.25) < 0.03 and abs(counts[6] / 4000 - 0.75) < 0.03
    # the warm start's data and the held-out split do not depend on the mix
    assert np.array_equal(uniform.sft.a, mixed.sft.a) and np.array_equal(uniform.heldout.b, mixed.heldout.b)
    assert mixed_cfg.sft_fields() == ArithTaskConfig(num_prompts=4000, min_digits=4).sft_fields()
    # None keeps the uniform draw (the pools every earlier run trained on)
    same = build_splits(ArithTaskConfig(num_prompts=4000, min_digits=4, length_weights=None))
    assert np.array_equal(uniform.train.a, same.train.a)


@pytest.mark.parametrize("weights, says", [
    ("1,2", "has 2 weight(s) for the 3 lengths 4-6"),
    ("1,x,2", "must be comma-separated numbers"),
    ("1,-1,2", "weights must be finite and >= 0"),
    ("1,inf,2", "weights must be finite and >= 0"),
    ("0,0,0", "has no positive weight"),
])
def test_bad_length_weights_name_the_field_and_the_fix(weights, says):
    with pytest.raises(ConfigError) as e:
        ArithTaskConfig(min_digits=4, length_weights=weights)
    assert says in str(e.value) and "ArithTaskConfig.length_weights=" in str(e.value) and "Fix: " in str(e.value)
