"""``training.eval_every_rollouts``: the evaluation schedule in sampled rollouts (issue 52), one rule for the driver
and the simulator (``TrainingConfig.evaluates_after``)."""

from __future__ import annotations

import pytest

from pc_pipelines.config import TrainingConfig
from pc_pipelines.errors import ConfigError


def test_steps_schedule_when_rollouts_unset():
    cfg = TrainingConfig(eval_every=5)
    assert [s for s in range(1, 21) if cfg.evaluates_after(s, (s - 1) * 100, s * 100)] == [5, 10, 15, 20]


def test_rollouts_schedule_evaluates_after_each_crossing_step():
    cfg = TrainingConfig(eval_every=1, eval_every_rollouts=1_000)
    sizes = [300, 300, 300, 300, 2_500, 100, 600]  # cumulative 300 600 900 1200 3700 3800 4400
    done, evals = 0, []
    for step, n in enumerate(sizes, start=1):  # steps count from 1
        if cfg.evaluates_after(step, done, done + n):
            evals.append(step)
        done += n
    assert evals == [4, 5, 7]  # crosses 1000; 2000 and 3000 in one step (one evaluation); 4000


def test_rollouts_schedule_exact_multiple_counts_once():
    cfg = TrainingConfig(eval_every_rollouts=64)
    assert cfg.evaluates_after(1, 0, 64) and not cfg.evaluates_after(2, 64, 127) and cfg.evaluates_after(3, 127, 128)


def test_negative_cadence_refused():
    with pytest.raises(ConfigError, match="eval_every_rollouts.*>= 0"):
        TrainingConfig(eval_every_rollouts=-1)
