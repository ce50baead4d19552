"""research/planner_validation.py: its scores (regret, Kendall's tau-b, coverage) on hand-built rows, the early cut,
the simulated protocol, the registry and the section's tables."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest

from pc_pipelines.simulator.fit import RunObservations


def load():
    return importlib.import_module("research.planner_validation")


def test_regret_is_the_picks_measured_cost_over_the_best():
    pv = load()
    measured = {"a": 20_000.0, "b": 25_000.0, "c": math.inf}
    assert pv.regret({"a": 9.0, "b": 5.0, "c": 7.0}, measured) == pytest.approx(1.25)  # picks b
    assert pv.regret({"a": 1.0, "b": 5.0, "c": 7.0}, measured) == 1.0  # picks the best
    assert math.isinf(pv.regret({"a": 9.0, "b": 8.0, "c": 1.0}, measured))  # picks one that never reached it
    assert math.isnan(pv.regret({"a": 1.0}, {"a": math.inf}))  # nothing measured reached it: no regret defined
    # every prediction never: the planner ranks nothing, so there is no pick (not the first configuration in order)
    assert math.isnan(pv.regret({"a": math.inf, "b": math.inf}, measured))


def test_per_seed_regret_is_the_median_of_each_fresh_seeds_pick_over_its_best():
    """Beside the ratio of medians: seed by seed, the pick's cost over the cheapest configuration's on that seed."""
    pv = load()

    def row(c, point, per):
        return {"config": c, "measured": pv.median_cost(per), "after": {"point": point}, "per_seed": per}
    rows = [row("g", 2.0, [100.0, 300.0, 100.0]), row("p", 1.0, [150.0, 200.0, 130.0])]  # picks p
    # seed by seed: 150/100, 200/200, 130/100 -> median 1.3; the ratio of medians is 150/100 = 1.5
    assert pv.per_seed_regret(rows, "after") == pytest.approx(1.3)
    assert pv.regret({"g": 2.0, "p": 1.0}, {"g": 100.0, "p": 150.0}) == pytest.approx(1.5)
    never = [row("g", 2.0, [100.0, math.inf]), row("p", 1.0, [math.inf, math.inf])]
    assert math.isinf(pv.per_seed_regret(never, "after"))  # the pick never reached it where g did: median of 1 inf
    assert math.isnan(pv.per_seed_regret([row("g", math.inf, [1.0])], "after"))  # no pick
    assert math.isnan(pv.per_seed_regret([{**rows[0], "per_seed": None}, rows[1]], "after"))  # not recorded
    scored = pv.scores(rows, "after")
    assert scored["regret"] == pytest.approx(1.5) and scored["regret_per_seed"] == pytest.approx(1.3)
    goals = pv._goals({"fresh": {"rows": rows, "after": scored}})
    assert "regret on fresh seeds 1.50x: missed by 20% (the median over the seeds of each seed's regret" in goals
    assert "median ratio: 1.30x)" in goals


def test_a_stored_result_is_rescored_by_the_current_rules():
    pv = load()
    rows = [{"config": c, "measured": m, "before": {"point": math.inf, "low": math.inf, "high": math.inf},
             "after": {"point": math.inf, "low": math.inf, "high": math.inf}}
            for c, m in (("g", 20_000.0), ("p", math.inf))]
    stale = {"regret": 1.0, "tau": 0.0, "covered": 0, "intervals": 0}
    res = pv.rescore({"dataset": "x", "resamples": 4, "sim_seeds": 2,
                      "early": {"rows": rows, "kept": [], "before": stale, "after": stale},
                      "loo": {"rows": rows, "kept": [[]], "picks": {"before": [1.5, math.nan, 1.0],
                                                                    "after": [math.nan]},
                              "before": stale, "after": stale}})
    assert math.isnan(res["early"]["after"]["regret"]) and res["early"]["after"]["covered"] == 1
    assert res["loo"]["before"]["regret"] == pytest.approx(1.25)  # the folds with a pick: median(1.5, 1.0)
    assert math.isnan(res["loo"]["after"]["regret"])
    text = pv.section([res])
    assert "| no pick | no pick |" in text and "missed (every prediction never reaches the target)" in text


def test_kendall_tau_b_with_ties_and_infinities():
    pv = load()
    assert pv.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert pv.kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # one swapped pair of 6: (5 - 1) / 6
    assert pv.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # tau-b with a tie in y: 5 concordant, 0 discordant, 1 tie -> 5 / sqrt(6 * 5)
    assert pv.kendall_tau([1, 2, 3, 4], [1, 2, math.inf, math.inf]) == pytest.approx(5 / math.sqrt(30))
    assert math.isnan(pv.kendall_tau([1, 1, 1], [1, 2, 3]))


def test_coverage_counts_measured_medians_inside_their_interval():
    pv = load()
    rows = [{"measured": 10.0, "low": 8.0, "high": 12.0}, {"measured": 10.0, "low": 11.0, "high": 12.0},
            {"measured": math.inf, "low": 30.0, "high": math.inf}, {"measured": 5.0, "low": None, "high": None}]
    assert pv.coverage(rows) == (2, 3)  # the row without an interval is not scored


def test_scores_and_the_section_show_each_prediction_beside_its_measurement():
    pv = load()
    rows = [{"config": c, "measured": m, "before": {"point": p, "low": lo, "high": hi},
             "after": {"point": p, "low": lo, "high": hi}}
            for c, m, p, lo, hi in (("g", 20_000.0, 10_000.0, 8_000.0, 12_000.0),
                                    ("p", 15_000.0, 16_000.0, 12_000.0, 18_000.0))]
    s = pv.scores(rows, "before")
    assert s == {"regret": pytest.approx(20_000 / 15_000), "tau": pytest.approx(-1.0), "covered": 1, "intervals": 2}
    res = {"dataset": "x", "resamples": 4, "sim_seeds": 2,
           "fresh": {"rows": rows, "kept": ["law_cap_pc"], "before": s, "after": s}}
    text = pv.section([res])
    assert "| fresh seeds | law_cap_pc | 1.33x | 1.33x | -1.00 | -1.00 | 1 of 2 | 1 of 2 |" in text
    assert "| g | 20,000 | 10,000 | 8,000-12,000 | 10,000 | 8,000-12,000 |" in text


def test_early_cut_keeps_the_first_sixth_of_the_budget():
    pv = load()
    run = RunObservations(run_id="r", method="grpo", seed=0, steps=640, group_step=np.arange(640),
                          group_sigma=np.full(640, 0.4), group_size=np.full(640, 4.0),
                          eval_step=np.arange(-1, 640, 20), eval_accuracy=np.linspace(0.6, 0.8, 33),
                          first_step=np.zeros(0, np.int64), first_n=np.zeros(0, np.int64),
                          first_correct=np.zeros(0, np.int64), sampled_per_step=64.0)
    cut = pv.early_cut(run, 40_960)
    assert cut.steps == 107 and cut.group_step.max() == 106 and cut.eval_step.max() == 99


def test_simulate_cost_follows_the_protocol():
    pv = load()
    from pc_pipelines.config import resolve
    cfg = resolve("simulator", overrides={"allocator.n": 4, "allocator.train_batch": 8, "sim.num_prompts": 300},
                  method="grpo", seed=0).to_dict()
    ds = pv.Dataset("t", "", target=0.0, budget=640, eval_every=64, smooth=3, tune={}, fresh={})
    assert pv.simulate_cost(cfg, {}, 0, ds) == 0.0  # reached before training
    never = pv.Dataset("t", "", target=1.01, budget=640, eval_every=64, smooth=3, tune={}, fresh={})
    assert math.isinf(pv.simulate_cost(cfg, {}, 0, never))


def test_the_registry_names_each_configurations_runs():
    pv = load()
    ds = pv.DATASETS["s52"](None)
    assert ds.target == 0.725 and ds.budget == 40_960 and ds.eval_every == 1_280
    assert ds.tune["grpo-n4"] == ("small-tune-grpo-n4-s100", "small-tune-grpo-n4-s101")
    assert len(ds.tune) == 13 and ds.fresh["p2c2-prior"][0] == "small-study-p2c2-prior-s19"


def test_the_paper_regime_data_set_needs_grpos_tuning_runs_for_its_target(tmp_path):
    pv = load()
    with pytest.raises(SystemExit, match=r"pr57: GRPO's tuning runs are not all in .*Fix: finish them"):
        pv.DATASETS["pr57"](str(tmp_path / "absent.duckdb"))


def test_the_paper_regime_data_sets_fresh_seeds_are_the_studys_tuned_arms(monkeypatch):
    pv = load()
    pr = importlib.import_module("research.paper_regime")
    monkeypatch.setattr(pr, "_curves", lambda path, jobs: {})
    monkeypatch.setattr(pr, "target_from_grpo", lambda curves: (0.755, 0.677, 0.775, {}))
    ds = pv.DATASETS["pr57"]("unused.duckdb")
    study_runs = {j.run_id for j in pr.study_jobs()}
    assert set(ds.fresh) == {f"grpo-n{pr.GRPO_BEST_N}", "grpo-n64", "paper", pr.PC_BEST} <= set(ds.tune)
    assert all(len(ids) == len(pr.STUDY_SEEDS) and set(ids) <= study_runs for ids in ds.fresh.values())
    assert ds.fresh[pr.PC_BEST][0] == f"{pr.STUDY_FAMILY}-pc-{pr.PC_BEST}-s{pr.STUDY_SEEDS[0]}"


def test_plans_trust_line_quotes_the_committed_validation():
    """One truth: the numbers `plan` prints (copied into the package, which never imports research/) are the ones
    research/planner_validation.py measured and committed."""
    import json

    from pc_pipelines.simulator.plan import VALIDATIONS

    root = Path(__file__).resolve().parents[2]
    assert VALIDATIONS
    pv = load()
    for v in VALIDATIONS:
        measured = json.loads((root / v.results).read_text())
        fresh = measured[pv.judged_fresh(measured)]  # the extended seeds where they ran: the goal is judged there
        assert round(measured["loo"]["after"]["regret"], 2) == v.held_out_regret
        assert round(fresh["after"]["regret"], 2) == v.fresh_regret
        assert v.fresh_seeds == len(fresh["rows"][0]["per_seed"]) == len(fresh.get("seeds", fresh["rows"][0]["per_seed"]))
        assert (measured["loo"]["after"]["covered"] + fresh["after"]["covered"],
                measured["loo"]["after"]["intervals"] + fresh["after"]["intervals"]) == (v.covered, v.intervals)


def test_measured_cost_reads_a_run_only_up_to_its_budget(tmp_path):
    """A run that trained past the study's budget (a chunk overshot) is read as if it had stopped there."""
    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation
    from pc_pipelines.store import Store

    pv = load()
    st = Store(tmp_path / "s.duckdb").init()
    cfg = resolve("simulator", {"allocator.train_batch": 16, "sim.num_prompts": 600, "training.eval_every": 2},
                  method="grpo", seed=1)
    assert len(list(record_simulation(cfg, st, 12, run_id="g", compact_every=None))) == 12
    curve = st.query("SELECT step, cumulative_sampled, accuracy FROM eval_curve WHERE run_id = 'g' ORDER BY step")
    # smoothing 1: the target is the curve's peak, first reached at evaluation m (after training: it learned)
    target = max(r["accuracy"] for r in curve)
    m = next(i for i, r in enumerate(curve) if r["accuracy"] == target)
    assert m > 0
    at = int(curve[m]["cumulative_sampled"])
    ds = pv.Dataset("t", str(st.path), target, at, 1, 1, {}, {})
    assert pv.measured_costs(st, ds, ["g"]) == {"g": float(at)}
    # a budget one evaluation earlier: the run is read up to there, where it had not reached the peak yet
    early = pv.Dataset("t", str(st.path), target, int(curve[m - 1]["cumulative_sampled"]) or 1, 1, 1, {}, {})
    assert pv.measured_costs(st, early, ["g"]) == {"g": math.inf}


def test_the_fresh_seeds_reference_is_the_tuning_runs_own_pick():
    pv = load()

    def rows(measured):
        return [{"config": c, "measured": m, "before": {"point": 1.0, "low": None, "high": None},
                 "after": {"point": 1.0, "low": None, "high": None}} for c, m in measured.items()]
    res = {"dataset": "x", "resamples": 2, "sim_seeds": 1,
           "loo": {"rows": rows({"g": 100.0, "p": 120.0, "q": math.inf, "only-tuned": 50.0}), "kept": [[]],
                   "picks": {"before": [1.0], "after": [1.0]}},
           "fresh": {"rows": rows({"g": 150.0, "p": 100.0, "q": math.inf}), "kept": []}}
    # "only-tuned" is cheapest on the tuning seeds but has no fresh runs: the pick is among the fresh configurations
    assert pv.tuning_pick(res) == ("g", pytest.approx(1.5))
    assert pv.tuning_pick({k: v for k, v in res.items() if k != "loo"}) is None
    text = pv.section([pv.rescore(res)])
    assert "the tuning seeds' own measured pick (`g`, the lowest tuning median) scores 1.50x on fresh seeds:" in text


def test_the_fresh_seeds_extension_adds_each_configurations_extra_runs_and_rescores(tmp_path):
    """--extend: the extra seeds' runs, measured by the same rule, join each fresh row's per-seed costs; the
    predictions stay; the goal is judged on all the seeds, the first ones shown beside; a run not finished is named."""
    from types import SimpleNamespace

    from pc_pipelines.config import resolve
    from pc_pipelines.simulator import record_simulation
    from pc_pipelines.store import Store

    pv = load()
    st = Store(tmp_path / "ext.duckdb").init()
    extra = pv.EXTRA_FRESH_SEEDS
    for c, n in (("a", 8), ("b", 4)):
        for s in extra:
            cfg = resolve("simulator", {"allocator.train_batch": 16, "allocator.n": n, "sim.num_prompts": 600,
                                        "training.eval_every": 2}, method="grpo", seed=s)
            assert len(list(record_simulation(cfg, st, 12, run_id=f"{c}-s{s}", compact_every=None))) == 12
    budget = min(r["n"] for r in st.query("SELECT sum(sampled_rollouts) AS n FROM steps GROUP BY run_id"))

    def jobs(seeds):
        return {c: [SimpleNamespace(run_id=f"{c}-s{s}") for s in seeds] for c in ("a", "b")}

    # a target above every run's first evaluation that some run reaches within the budget: non-zero costs
    first = max(r["a"] for r in st.query("SELECT arg_min(accuracy, step) AS a FROM eval_curve GROUP BY run_id"))
    target = min(r["accuracy"] for r in st.query("SELECT accuracy FROM eval_curve WHERE cumulative_sampled <= ?",
                                                 [budget]) if r["accuracy"] > first)
    ds = pv.Dataset("t", str(st.path), target, budget, 1, 1, {}, {}, (1, 2), jobs)
    costs = pv.measured_costs(st, ds, [j.run_id for js in jobs(extra).values() for j in js])
    assert any(0 < v < math.inf for v in costs.values())

    def pred(point):
        return {"point": point, "low": 1.0, "high": 1e9}
    res = {"dataset": "t", "resamples": 2, "sim_seeds": 1,
           "fresh": {"rows": [{"config": "a", "measured": 150.0, "before": pred(2.0), "after": pred(1.0),
                               "per_seed": [100.0, 200.0]},
                              {"config": "b", "measured": 120.0, "before": pred(1.0), "after": pred(2.0),
                               "per_seed": [120.0, 120.0]}], "kept": ["law_cap_pc"]}}
    out = pv.rescore(pv.extend_fresh(res, ds, st))
    ext = out["fresh_ext"]
    assert ext["seeds"] == [1, 2, *extra] and ext["kept"] == ["law_cap_pc"]
    for row, first in zip(ext["rows"], ([100.0, 200.0], [120.0, 120.0]), strict=True):
        per_seed = [*first, *(costs[f"{row['config']}-s{s}"] for s in extra)]
        assert row["per_seed"] == per_seed and row["measured"] == pv.median_cost(per_seed)
        assert row["after"] == res["fresh"]["rows"][[r["config"] for r in res["fresh"]["rows"]].index(row["config"])][
            "after"]
    meas = {r["config"]: r["measured"] for r in ext["rows"]}
    assert ext["after"]["regret"] == pytest.approx(pv.regret({"a": 1.0, "b": 2.0}, meas), nan_ok=True)
    assert ext["before"]["regret"] == pytest.approx(pv.regret({"a": 2.0, "b": 1.0}, meas), nan_ok=True)
    assert out["fresh"]["rows"][0]["per_seed"] == [100.0, 200.0]  # the first seeds' part is kept as it was
    text = pv.section([out])
    assert f"fresh seeds, extended (all 5: 1-2, {extra[0]}-{extra[-1]})" in text
    assert f"regret on fresh seeds, extended (all 5: 1-2, {extra[0]}-{extra[-1]}) " in text
    assert "on the first 2 alone " in text and "| configuration | seed 1 | seed 2 |" in text
    # a run not finished: named, with how to resume; nothing written
    short = pv.Dataset("t", str(st.path), target, budget * 10, 1, 1, {}, {}, (1, 2), jobs)
    with pytest.raises(SystemExit, match=r"6 extension runs are not finished .*Fix: run the same command again"):
        pv.extend_fresh({"fresh": res["fresh"]}, short, st)
