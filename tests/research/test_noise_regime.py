"""research/noise_regime.py: the learning-rate rule (fixed before the runs), the jobs, and the frozen choice."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load():
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("research.noise_regime")


def _curve(accs, every=10, per=1024):
    from pc_pipelines.reports import RunCurves

    steps = tuple(range(-1, every * (len(accs) - 1), every))
    rollouts = tuple(max(0, (s + 1) * per) for s in steps)
    return RunCurves(run_id="r", family="f", method="grpo", seed=0, eval_step=steps, eval_rollouts=rollouts,
                     eval_accuracy=tuple(accs), step=(), cumulative_sampled=(), cumulative_trained=(), reward_std=(),
                     informative_share=())


def test_the_lr_rule_takes_the_highest_rate_where_grpo64_rises_and_never_collapses():
    m = load()
    rising = _curve([0.678, 0.66, 0.69, 0.70, 0.71, 0.72])        # smoothed last .71 >= .698; lowest .66 >= .628
    falls = _curve([0.677, 0.61, 0.66, 0.70, 0.72, 0.73])          # lowest .61 < .627: a collapse, whatever the end
    flat = _curve([0.678, 0.67, 0.68, 0.69, 0.68, 0.69])           # smoothed last .687 < .698: does not rise
    checks = m.lr_checks({(2e-4, 100): rising, (2e-4, 101): rising, (3e-4, 100): rising, (3e-4, 101): falls})
    assert [(c.lr, c.seed, c.passes) for c in checks] == [(2e-4, 100, True), (2e-4, 101, True), (3e-4, 100, True),
                                                         (3e-4, 101, False)]
    assert m.choose_lr(checks) == 2e-4
    assert m.choose_lr(m.lr_checks({(2e-4, 100): rising, (2e-4, 101): rising, (3e-4, 100): rising,
                                    (3e-4, 101): rising})) == 3e-4
    flat_checks = m.lr_checks({(2e-4, 100): flat, (2e-4, 101): rising})
    assert not flat_checks[0].rises and not flat_checks[0].collapses and m.choose_lr(flat_checks) is None
    assert m.choose_lr(m.lr_checks({(2e-4, 100): rising})) is None  # a seed missing: not passed on every seed


def test_the_jobs_and_the_frozen_choice():
    m = load()
    cal = m.calibrate_jobs()
    assert len(cal) == 2 * 3 * 2 + 2 * 2 and {j.seed for j in cal} == {100, 101}  # tuning seeds only
    assert {j.preset for j in cal} == {"bench"} and all(j.steps == 120 for j in cal)
    assert m.grpo_job(32, 3e-4, 101).overrides == ("allocator.n=32", "training.lr=0.0003")
    # The rule read no passing rate: PC's budget is tuned in the frozen bench regime at the preset's own lr.
    from pc_pipelines.config import resolve

    assert m.CALIBRATED and m.NOISE_LR is None
    assert m.tune_lr() == m.BENCH_LR == resolve("bench", {}, method="pc", seed=0, family="x").training.lr
    tune = m.tune_pc_jobs(m.tune_lr())
    assert len(tune) == 2 * len(m.PC_BUDGETS) + 2 and {j.seed for j in tune} == {100, 101}
    default = [j for j in tune if j.run_id.startswith("noise-cal-pc-p4_12-c16-")]
    assert [j.overrides for j in default] == [("training.lr=0.0001",)] * 2  # the preset's own budget
    paper = [j for j in tune if "paper88" in j.run_id][0]
    assert "allocator.n=16" in paper.overrides and "allocator.n_pilot=8" in paper.overrides
    # PC's budget, frozen from the whole tune-pc grid, is the one bench-tuned's pc-best runs with.
    from research.bench_study import REGIMES

    assert m.PC_BEST in m.PC_BUDGETS
    best = REGIMES["bench-tuned"].pc_best
    assert (best.name, best.overrides) == (m.PC_BEST, m.PC_BUDGETS[m.PC_BEST])
