"""research/prior_study.py: the screening-free ceiling, the forgetting fit, the tuning seeds only, the candidates."""

from __future__ import annotations

import importlib
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("research.prior_study")


def _curve(accs, sampled_per_step=700, trained_per_step=256, steps=30, every=10):
    from pc_pipelines.reports import RunCurves

    eval_steps = tuple(range(0, every * (len(accs) - 1) + 1, every))  # 0: before training; steps count from 1
    step = tuple(range(1, steps + 1))
    sampled = tuple(s * sampled_per_step for s in step)
    trained = tuple(s * trained_per_step for s in step)
    return RunCurves(run_id="r", family="f", method="pc", seed=100, eval_step=eval_steps,
                     eval_rollouts=tuple(0 if s < 1 or s > steps else sampled[s - 1] for s in eval_steps), eval_accuracy=tuple(accs),
                     step=step, cumulative_sampled=sampled, cumulative_trained=trained, reward_std=(),
                     informative_share=())


def test_the_ceiling_counts_only_trained_rollouts_at_the_same_accuracies():
    m = load()
    c = _curve([0.60, 0.65, 0.70])
    ceil = m.ceiling(c)
    assert c.eval_rollouts == (0, 7_000, 14_000)
    assert ceil.eval_rollouts == (0, 2_560, 5_120) and ceil.eval_accuracy == c.eval_accuracy
    assert ceil.run_id == "r@ceiling"
    from research import study
    assert study.first_at_or_above(ceil, 0.7) == 5_120 and study.first_at_or_above(c, 0.7) == 14_000
    assert m.steps_to(c, 0.65) == 10 and m.steps_to(c, 0.71) is None
    short = _curve([0.6, 0.65, 0.7], steps=12)  # the eval after step 20 has no steps row
    with pytest.raises(ValueError, match="eval at step 20 has no steps row. Fix: finish the run first"):
        m.ceiling(short)


def test_the_forgetting_fit_prefers_forgetting_when_pass_rates_move_and_none_when_they_stay(monkeypatch):
    m = load()
    rng = np.random.default_rng(0)
    steps = np.repeat(np.arange(60), 20)
    pid = np.tile(np.arange(20), 60)

    def data(moving: bool):
        p = np.where(pid < 10, 0.2, 0.8).astype(float)
        if moving:  # every 10 steps the two halves swap their pass rates
            p = np.where((steps // 10) % 2 == 1, 1.0 - p, p)
        k = rng.binomial(8, p).astype(float)
        return pid.astype(np.int64), steps.astype(np.int64), np.full(pid.shape[0], 8), k, np.ones(pid.shape[0], bool)

    class S:
        path = "test"

    fits = {}
    for moving in (False, True):
        d = data(moving)
        monkeypatch.setattr(m, "observations", lambda store, run_id, d=d: d)
        fits[moving] = m.forgetting_fit(S(), "r", [0.5, 0.9, 1.0])
    assert max(fits[False], key=fits[False].get) == 1.0
    assert max(fits[True], key=fits[True].get) == 0.5
    assert all(math.isfinite(v) and v < 0 for f in fits.values() for v in f.values())


def test_tuning_runs_only_the_tuning_seeds_with_our_pc_best_budget_under_every_candidate():
    m = load()
    jobs = m.tune_jobs()
    assert {j.seed for j in jobs} == {100, 101}
    with pytest.raises(ValueError, match=r"seeds \[100, 11\]: only the tuning seeds \[100, 101\] may tune"):
        m.tune_jobs((100, 11))
    from research import bench_study, noise_regime
    assert m.PC_BEST == bench_study.REGIMES["bench-tuned"].pc_best.overrides == noise_regime.PC_BUDGETS["p2+6/c8"]
    pcs = [j for j in jobs if j.method == "pc"]
    assert all(j.overrides[:3] == m.PC_BEST for j in pcs)
    # part 1's runs stand in for the same configs, not run twice
    assert "prior-tune-pc-none-s100" not in {j.run_id for j in jobs}
    assert {j.run_id for j in jobs if j.method == "grpo"} == {"prior-tune-grpo-n8-h240-s100", "prior-tune-grpo-n8-h240-s101",
                                                              "prior-tune-grpo-n4-h480-s100", "prior-tune-grpo-n4-h480-s101",
                                                              "prior-tune-grpo-n2-h960-s100", "prior-tune-grpo-n2-h960-s101",
                                                              "prior-tune-grpo-n16-s101"}
    # every candidate's overrides make a valid allocator config
    from pc_pipelines.allocation import AllocatorConfig
    for name, over in m.PRIOR_CANDIDATES.items():
        kw = m.allocator_fields((*m.PC_BEST, *over))
        assert kw["n_pilot"] == 8 and isinstance(kw["pilot_wave"], int)
        cfg = AllocatorConfig(method="pc", pilot_strategy="sequential", **kw)
        assert (cfg.screen_strategy == "none") == (name == "none")


def test_the_study_driver_refuses_until_both_choices_are_frozen_and_never_runs_a_tuning_seed(monkeypatch):
    m = load()
    monkeypatch.setattr(m, "GRPO_BEST_N", None)
    with pytest.raises(ValueError, match=r"GRPO_BEST_N is None\). Fix: run `prior_study.py tune`"):
        m.study_jobs()
    monkeypatch.setattr(m, "GRPO_BEST_N", 16)
    monkeypatch.setattr(m, "PRIOR_BEST", None)
    with pytest.raises(ValueError, match=r"PRIOR_BEST is None\). Fix: run `prior_study.py tune`"):
        m.study_jobs()
    monkeypatch.setattr(m, "PRIOR_BEST", "A")
    with pytest.raises(ValueError, match=r"the tuning seeds \[100, 101\] never report"):
        m.study_jobs((14, 101))
    jobs = m.study_jobs()
    assert len(jobs) == 5 * 6 and {j.seed for j in jobs} == {14, 15, 16, 17, 18}
    by = {j.run_id: j for j in jobs}
    assert by["prior-study-grpo-best-s14"].overrides == ("allocator.n=16",)
    assert by["prior-study-grpo-64-s14"].overrides == () and by["prior-study-dapo-s14"].method == "dapo"
    pc_prior = by["prior-study-pc-best-prior-s14"].overrides
    assert pc_prior == (*m.PC_BEST, *m.PRIOR_CANDIDATES["A"]) and "allocator.screen_early_wave=true" in pc_prior
    grpo_prior = by["prior-study-grpo-best-prior-s14"].overrides
    assert grpo_prior[0] == "allocator.n=16" and "allocator.screen_strategy=posterior" in grpo_prior
    assert not any(o.startswith(("allocator.screen_early_wave", "allocator.evict")) for o in grpo_prior)  # PC only
    # GRPO's best size below 16 runs n = 16's rollout budget, under its own run id
    monkeypatch.setattr(m, "GRPO_BEST_N", 8)
    by8 = {j.run_id: j for j in m.study_jobs((14,))}
    assert by8["prior-study-grpo-best-h240-s14"].steps == 240 and by8["prior-study-pc-best-s14"].steps == 120
    assert by8["prior-study-grpo-best-prior-h240-s14"].overrides[0] == "allocator.n=8"
    # before GRPO's size is frozen, the variants that do not need it may run
    monkeypatch.setattr(m, "GRPO_BEST_N", None)
    early = m.study_jobs((14,), variants=("pc-best", "pc-best-prior", "dapo", "grpo-64"))
    assert [j.run_id for j in early] == ["prior-study-pc-best-s14", "prior-study-pc-best-prior-s14",
                                         "prior-study-dapo-s14", "prior-study-grpo-64-s14"]
    with pytest.raises(ValueError, match=r"or run only --variants grpo-64 dapo pc-best pc-best-prior"):
        m.study_jobs((14,), variants=("grpo-best",))
    with pytest.raises(ValueError, match=r"variants \['pc'\]: not study variants"):
        m.study_jobs((14,), variants=("pc",))
    monkeypatch.setattr(m, "GRPO_BEST_N", 16)
    thin = m.study_jobs(thin=True)
    assert [j.run_id for j in thin[:2]] == ["prior-thin-pc-best-s14", "prior-thin-pc-best-prior-s14"]
    assert all(j.overrides[-1] == f"task.num_prompts={m.THIN_POOL}" and j.family == "prior-thin" for j in thin)


def test_grpo_sizes_below_16_run_to_n16s_rollout_budget():
    m = load()
    assert [m.grpo_steps(n) for n in m.GRPO_SIZES] == [960, 480, 240, 120, 120, 120]
    assert [(j.run_id, j.steps) for j in (m.grpo_job(8, 100), m.grpo_job(16, 101))] == [
        ("prior-tune-grpo-n8-h240-s100", 240), ("prior-tune-grpo-n16-s101", 120)]
    assert m.PRIOR_BEST in m.PRIOR_CANDIDATES


def test_grpo_choice_reuses_the_recorded_sizes_only_while_n8_leaves_the_target_where_it_was(monkeypatch):
    m = load()

    def with_small(accs_by_seed, n4=(0.58, 0.60, 0.62, 0.64, 0.66, 0.68, 0.70, 0.72, 0.73, 0.74),
                   n2=tuple(0.50 + 0.0125 * i for i in range(20))):
        """n = 8 with ``accs_by_seed``, n = 4 and n = 2 (slower: never cheapest) on the same seeds."""
        def fake(store, run_ids, steps=120):
            out = {}
            for rid in run_ids:
                for seed, accs in accs_by_seed.items():
                    for n, a in ((8, accs), (4, n4), (2, n2)):
                        if rid == f"prior-tune-grpo-n{n}-h{120 * 16 // n}-s{seed}":
                            assert steps == 120 * 16 // n  # read only once it has run n = 16's rollout budget
                            out[rid] = _curve(a, sampled_per_step=16 * n, steps=steps)
            return out
        monkeypatch.setattr(m, "_curves", fake)

    # n = 8 reaches both recorded targets (smoothed) after 6 evals: 50 steps x 128 = 6,400 rollouts < n = 16's
    rise = [0.68, 0.70, 0.72, 0.73, 0.74, 0.74, 0.74]
    with_small({100: rise, 101: rise})
    best, lines = m.choose_grpo(None)
    assert best == 8
    assert "| 16 | 100 | 0.730 | 0.722 | 28,160 | recorded (docs/STUDIES.md) |" in lines
    # smoothed (trailing 3): .68 .69 .70 .7167 .73 -> first >= .722 after step 39 (40 x 128 = 5,120)
    assert "| 8 | 100 | 0.740 | 0.722 | 5,120 | run prior-tune-grpo-n8-h240-s100 |" in lines
    # n = 4 (64 a step), smoothed: ... .7167 (after step 79), .73 (after step 89: 90 x 64 = 5,760 > n = 8's 5,120)
    assert "| 4 | 100 | 0.730 | 0.722 | 5,760 | run prior-tune-grpo-n4-h480-s100 |" in lines
    # n = 2 (32 a step): smoothed .4875 + .0125 i from the third eval: first >= .722 at i = 19 (190 x 32 = 6,080)
    assert "| 2 | 100 | 0.725 | 0.722 | 6,080 | run prior-tune-grpo-n2-h960-s100 |" in lines
    # n = 8 peaks below seed 101's recorded target: the target would move, so no choice from the recorded table
    with_small({100: rise, 101: [0.68, 0.69, 0.70, 0.70, 0.70, 0.70, 0.70]})
    best, lines = m.choose_grpo(None)
    assert best is None and lines[-1].startswith("No choice: a size below 16 is missing, or its peak is below")
    with_small({100: rise})  # seed 101 not run
    assert m.choose_grpo(None)[0] is None


def test_versus_rows_give_grpo_over_each_pc_run_and_its_ceiling_at_their_common_target(monkeypatch):
    m = load()
    monkeypatch.setattr(m, "PRIOR_BEST", "A")
    grpo = _curve([0.60, 0.66, 0.70, 0.72, 0.72, 0.72], sampled_per_step=128, steps=240)
    pc = _curve([0.60, 0.70, 0.74, 0.76, 0.76, 0.76], sampled_per_step=500, trained_per_step=256, steps=120)

    def fake(store, run_ids, steps=120):
        out = {}
        for rid in run_ids:
            if rid == "prior-tune-grpo-n8-h240-s100":
                assert steps == 240
                out[rid] = grpo
            elif rid == "prior-tune-pc-A-r3-s100":
                out[rid] = pc
        return out
    monkeypatch.setattr(m, "_curves", fake)
    lines = m.versus_rows(None, 8, seeds=(100,))
    # smoothed (trailing 3) GRPO: .60 .63 .6533 .6933 .7133 .72 -> peak .72 after step 49 (50 x 128 = 6,400);
    # PC: .60 .65 .68 .7333 .7533 .76 -> first >= .72 after step 29: 30 x 500 = 15,000 sampled, 7,680 trained
    assert "| 100 | PC, prior A | 0.760 | 0.720 | 15,000 | 0.43x |" in lines
    assert "| 100 | PC, prior A, ceiling | 0.760 | 0.720 | 7,680 | 0.83x |" in lines
    assert not any("PC, no prior" in row for row in lines)  # not run: no row
    assert lines[-1] == "| 100 | GRPO-8 | 0.720 | | | |"


def test_every_study_job_names_its_variant_and_the_thin_regime_runs_only_pc():
    m = load()
    jobs = m.study_jobs()
    assert [m.job_variant(j) for j in jobs[:len(m.STUDY_VARIANTS)]] == list(m.STUDY_VARIANTS)
    assert {(m.job_variant(j), j.seed) for j in jobs} == {(v, s) for v in m.STUDY_VARIANTS for s in m.STUDY_SEEDS}
    thin = m.study_jobs(thin=True)
    assert {m.job_variant(j) for j in thin} == {"pc-best", "pc-best-prior"}
    assert all(j.family == m.THIN_FAMILY for j in thin)
    bad = replace(jobs[0], run_id="someone-else-s14")
    with pytest.raises(ValueError, match="is not a study run id. Fix: build the jobs with study_jobs"):
        m.job_variant(bad)


def test_the_report_ratios_are_baseline_over_run_per_seed_with_the_ceiling_and_missing_runs_left_open():
    m = load()
    grpo = _curve([0.60, 0.66, 0.70, 0.72, 0.72, 0.72], sampled_per_step=128, steps=240)
    pc = _curve([0.60, 0.70, 0.74, 0.76, 0.76, 0.76], sampled_per_step=500, trained_per_step=256, steps=120)
    curves = {("grpo-best", 14): grpo, ("pc-best-prior", 14): pc, ("pc-best-prior@ceiling", 14): m.ceiling(pc),
              ("grpo-best", 15): grpo}
    lines, per, med = m.ratio_lines(curves, (14, 15))
    head = f"GRPO{m.GRPO_BEST_N} / our PC best + prior"
    # smoothed GRPO reaches 0.72 after 50 steps (6,400 sampled); PC after 30 (15,000 sampled, 7,680 trained)
    assert per[head] == {14: pytest.approx(6_400 / 15_000), 15: None}
    assert per[f"GRPO{m.GRPO_BEST_N} / ceiling of our PC best + prior"][14] == pytest.approx(6_400 / 7_680)
    assert med[head] == pytest.approx(6_400 / 15_000)  # the missing seed does not count
    assert lines[0].startswith(f"| seed | {head} |") and lines[3].startswith("| 15 | - |")


def test_the_goals_are_open_until_every_seed_ran_then_met_or_missed_by_the_measured_values():
    m = load()
    mech = {s: m.Mechanism(run_id=f"r{s}", steps=120, sampled_per_step=380.0 + s, early_screen_per_step=0.0,
                           piloted_in_band=0.25, informative_per_step=15.5, trained_per_step=16.0,
                           prior_skips_per_step=3.0, longest_unpiloted=8) for s in (14, 15)}
    head = f"GRPO{m.GRPO_BEST_N} / our PC best + prior"
    g = m.study_goals(mech, {head: 1.4}, {14: 0.01, 15: -0.002}, 0.97, (14, 15), (14, 15))
    assert g["sampled"]["met"] is False and g["sampled"]["value"] == 395.0  # seed 15: 395 > 390
    assert g["in_band"]["met"] and g["informative"]["met"] and g["floor"]["met"] and g["ratio"]["met"]
    assert g["heldout"]["met"] is False and g["heldout"]["value"] == pytest.approx(-0.002)
    assert g["thin"]["met"] is True
    g = m.study_goals({14: mech[14]}, {head: 1.4}, {14: 0.01}, None, (14, 15), ())
    assert all(g[k]["met"] is None for k in ("sampled", "ratio", "heldout", "thin"))
    missed = m.study_goals(mech, {head: 0.6}, {14: 0.0, 15: 0.0}, 0.9, (14, 15), (14,))["ratio"]
    assert missed["met"] is False and "missed by 0.70x" in missed["detail"]


def test_the_planners_history_prior_is_the_rule_the_study_chose():
    """`pilot-commit plan`'s '+ prior' candidates train with the rule this study froze (PRIOR_BEST), value for
    value: GRPO's without the PC-only fields, PC's with them."""
    from pc_pipelines.config import parse_overrides
    from pc_pipelines.simulator.plan import HISTORY_PRIOR, PC_PRIOR, default_candidates

    m = load()
    chosen = parse_overrides(m.PRIOR_CANDIDATES[m.PRIOR_BEST])
    pc_only = {k: v for k, v in chosen.items() if k in ("allocator.screen_early_wave", "allocator.evict")}
    assert dict(HISTORY_PRIOR) == {k: v for k, v in chosen.items() if k not in pc_only}
    assert dict(PC_PRIOR) == pc_only
    grpo, pc = default_candidates()[-2:]
    assert dict(grpo.overrides).items() >= dict(HISTORY_PRIOR).items() and dict(pc.overrides).items() >= chosen.items()
