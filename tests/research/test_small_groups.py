"""research/small_groups.py (issue 52): the grid resolves to valid configs with the trained group it names, every arm
has the same measurement, the chunked budget and the tuning rule, and only the tuning seeds tune."""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("research.small_groups")


def _config(job):
    from pc_pipelines.allocation import check_config
    from pc_pipelines.config.presets import parse_overrides, resolve

    cfg = resolve(job.preset, parse_overrides(list(job.overrides)), method=job.method, seed=job.seed,
                  family=job.family)
    check_config(cfg.allocator)
    return cfg


def test_every_candidate_resolves_with_its_trained_group_and_the_common_measurement():
    sg = load()
    groups = {}
    for name in sg.CANDIDATES:
        cfg = _config(sg.pc_job(name, 100))
        a = cfg.allocator
        trained = (a.pilot_n if a.train_pilots else 0) + a.commit_n
        assert trained <= 8, f"{name}: trained group {trained}"
        assert cfg.training.eval_every_rollouts == sg.EVAL_EVERY and cfg.training.dtype == "float64"
        assert a.train_pilots == (not name.endswith("-co"))
        assert (a.screen_strategy == "posterior") == name.endswith("-prior")
        groups[name] = (trained, a.train_batch)
    assert groups["p2c2"] == (4, 16) and groups["p2c2-b32"] == (4, 32) and groups["p4c4"] == (8, 16)
    assert groups["p2s2c4"] == (8, 16) and groups["p2s2c4-co"] == (4, 16) and groups["p2c2-co"] == (2, 16)
    grpo = _config(sg.grpo_job(100))
    assert grpo.allocator.n == 4 and grpo.training.eval_every_rollouts == sg.EVAL_EVERY


def test_only_tuning_seeds_tune_and_the_study_waits_for_the_choice():
    sg = load()
    assert {j.seed for j in sg.tune_jobs()} == set(sg.TUNE_SEEDS)
    with pytest.raises(ValueError, match="only"):
        sg.tune_jobs([19])
    assert not set(sg.STUDY_SEEDS) & (set(range(19)) | set(sg.TUNE_SEEDS))
    if sg.PC_SMALL_BEST is None:
        with pytest.raises(ValueError, match="not frozen"):
            sg.study_jobs()
    else:  # per fresh seed: GRPO-4, the choice, its twin with the other prior setting and commits only
        jobs = sg.study_jobs()
        assert {j.seed for j in jobs} == set(sg.STUDY_SEEDS) and len(jobs) == 4 * len(sg.STUDY_SEEDS)
        names = {j.run_id.rsplit("-s", 1)[0] for j in jobs}
        base = sg.PC_SMALL_BEST.removesuffix("-prior")
        assert any(n.endswith(f"-{base}-prior") for n in names) and any(n.endswith(f"-{base}-ne") for n in names)
        assert any(n.endswith(f"-{base}-co-ne") for n in names)  # the commits-only ablation, same seeds


def _row(rollouts, acc):
    sg = load()
    return {"rollouts": rollouts, sg.EQUAL_BUDGETS[1]: acc}


def test_rule_lowest_median_cost_then_accuracy_and_waits_for_missing_runs():
    sg = load()
    rows = {("a", 100): _row(10_000, 0.70), ("a", 101): _row(30_000, 0.70),
            ("b", 100): _row(20_000, 0.71), ("b", 101): _row(20_000, 0.72),
            ("c", 100): _row(None, 0.74), ("c", 101): _row(1_000, 0.74)}
    assert sg.choose(rows, ["a", "b", "c"]) == "b"  # a ties b on the median cost (20,000): b is more accurate
    rows[("b", 101)] = _row(None, 0.72)
    assert sg.choose(rows, ["a", "b", "c"]) == "a"  # b never reaches it on one seed: infinite median
    del rows[("a", 100)]
    assert sg.choose(rows, ["a", "b", "c"]) is None


def test_cost_row_reads_the_smoothed_curve_at_the_fixed_target_and_budgets():
    from pc_pipelines.reports import RunCurves

    sg = load()
    accs = (0.70, 0.71, 0.72, 0.73, 0.74, 0.74)
    evals = tuple(range(0, 6 * 12_800, 12_800))
    curve = RunCurves(run_id="r", family="f", method="pc", seed=100, eval_step=tuple(range(-1, 5)),
                      eval_rollouts=evals, eval_accuracy=accs, step=tuple(range(5)),
                      cumulative_sampled=tuple(12_800 * (i + 1) for i in range(5)),
                      cumulative_trained=tuple(3_200 * (i + 1) for i in range(5)),
                      reward_std=(0.1,) * 5, informative_share=(1.0,) * 5)
    row = sg.cost_row(curve)
    # smoothed over 3: .70 .705 .71 .72 .73 .7367; first >= .725 is the fifth eval, at 51,200 rollouts
    assert row["rollouts"] == 51_200
    assert row[15_360] == pytest.approx((0.70 + 0.71 + 0.72) / 3)  # the first eval at or past 15,360: 25,600
    assert row["sampled_per_trained"] == pytest.approx(4.0)
    assert not math.isnan(row["peak"])
    # a chunk that overshoots the budget: the evaluations after the first at or past it are not read
    late = dataclasses.replace(curve, eval_step=tuple(range(-1, 7)), eval_rollouts=(*evals, 76_800, 89_600),
                               eval_accuracy=(0.70, 0.70, 0.70, 0.70, 0.70, 0.70, 0.80, 0.80))
    row = sg.cost_row(late)
    assert row["rollouts"] is None and row["peak"] == pytest.approx(0.70)


def test_the_decision_needs_the_ratio_and_the_accuracy_at_both_budgets_on_four_seeds():
    sg = load()
    seeds = sg.STUDY_SEEDS
    grpo = {s: (0.70, 0.72) for s in seeds}
    better = {s: (0.71, 0.73) for s in seeds}
    assert sg.decide([1.5] * 5, grpo, better)["verdict"] == "pays"
    assert sg.decide([1.2, 1.3, 1.3, 1.4, 1.5], grpo, better)["verdict"] == "pays"  # median 1.3: the bound holds
    assert sg.decide([1.29] * 5, grpo, better)["verdict"] == "five more seeds"
    worse_late = {s: (0.71, 0.71) if s in seeds[:2] else (0.71, 0.73) for s in seeds}  # 3 of 5 at 30,720
    d = sg.decide([1.5] * 5, grpo, worse_late)
    assert d["verdict"] == "five more seeds" and d["at_least_as_accurate"] == {"15360": 5, "30720": 3}
    assert sg.decide([0.8] * 5, grpo, worse_late)["verdict"] == "fails"
    assert sg.decide([0.8] * 5, grpo, better)["verdict"] == "five more seeds"  # cheaper GRPO, but PC more accurate
    assert sg.decide([1.5] * 4, grpo, better)["verdict"] == "open"  # a seed missing: no verdict
    assert sg.decide([1.5] * 5, grpo, {**better, seeds[0]: (0.71, None)})["verdict"] == "open"
    assert "use GRPO at n = 4" in sg.advice("fails", "p2c2-prior") and "p2c2-prior" in sg.advice("pays", "p2c2-prior")


def test_the_report_on_a_store_without_the_runs_leaves_every_cell_open(tmp_path):
    from pc_pipelines.store import Store

    sg = load()
    body, res = sg.study_report(Store(tmp_path / "none.duckdb"))
    assert "**open**" in body and "| 19 | - |" in body
    assert res["decision"]["verdict"] == "open" and res["seeds"] == []
    assert res["goals"]["ratio"]["met"] is None and res["pc_best"]["name"] == sg.PC_SMALL_BEST
    assert all(v is None for v in res["medians"].values())
    assert not (tmp_path / "none.duckdb").exists()  # reading creates no store


def test_a_simulated_arm_follows_the_studys_protocol_to_the_budget():
    sg = load()
    fields = {"difficulty_mean": 2.0, "difficulty_spread": 6.0, "eval_difficulty_mean": -1.4,
              "eval_difficulty_spread": 2.4, "eval_noise": 0.0, "law": "linear", "global_rate": 0.001,
              "law_skill_cap": 4.0}
    row = sg.simulate_arm(sg.grpo_job(19, sg.STUDY_FAMILY), fields)
    assert row["steps"] == sg.BUDGET // 64 and row["sampled_per_trained"] == pytest.approx(1.0)  # GRPO-4: 64 a step
    assert row["peak"] > 0.5 and row[sg.EQUAL_BUDGETS[1]] is not None
    pc = sg.simulate_arm(sg.pc_job(sg.PC_SMALL_BEST, 19, sg.STUDY_FAMILY), fields)
    assert pc["sampled_per_trained"] > 1.0  # pilots screened out cost rollouts nobody trains on


def test_the_first_wave_shares_of_the_fitted_mix_sum_to_one_and_an_empty_store_measures_nothing(tmp_path):
    from pc_pipelines.store import Store

    sg = load()
    rows = sg.first_wave_shares(Store(tmp_path / "none.duckdb"), {"difficulty_mean": 2.0, "difficulty_spread": 6.0})
    assert [k for k, _, _ in rows] == ["0 of 2 correct", "1 of 2 correct", "2 of 2 correct"]
    assert all(m is None for _, m, _ in rows) and sum(p for _, _, p in rows) == pytest.approx(1.0)
    assert rows[0][2] > rows[1][2]  # a pool this spread out: few first waves split
