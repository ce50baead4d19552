"""research/bench_study.py's rules on hand-made curves: GRPO's group size chosen by rollouts to a common target."""

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pc_pipelines.reports import RunCurves

ROOT = Path(__file__).resolve().parents[2]


def load_bench_study():
    spec = importlib.util.spec_from_file_location("bench_study", ROOT / "research/bench_study.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_study", mod)
    spec.loader.exec_module(mod)
    return mod


def curve(n: int, seed: int, rollouts: list[int], acc: list[float]) -> RunCurves:
    return RunCurves(f"g{n}-s{seed}", "bench-tune", "grpo", seed, tuple(range(-1, len(acc) - 1)), tuple(rollouts),
                     tuple(acc), (), (), (), (), ())


def test_common_target_is_the_lowest_peak_and_cost_is_the_first_eval_at_or_above_it():
    b = load_bench_study()
    curves = {
        (16, 100): curve(16, 100, [0, 10_240, 20_480, 30_720], [0.60, 0.66, 0.70, 0.69]),   # peak .70
        (32, 100): curve(32, 100, [0, 20_480, 40_960, 61_440], [0.60, 0.70, 0.74, 0.73]),   # peak .74
        (64, 100): curve(64, 100, [0, 40_960, 81_920, 122_880], [0.60, 0.69, 0.72, 0.73]),  # peak .73
    }
    rows = b.size_rows(curves, window=1)
    assert [(r.n, r.target, r.rollouts, r.peak, r.last) for r in rows] == [
        (16, 0.70, 20_480, 0.70, 0.69), (32, 0.70, 20_480, 0.74, 0.73), (64, 0.70, 81_920, 0.73, 0.73)]
    # n 16 and n 32 tie on cost (20,480): the tie goes to the higher peak.
    assert b.choose_size(rows) == 32
    # The study's default smooths over SMOOTH = 3 evals: n 16 becomes .60 .63 .653 .683 (peak .683 = the target),
    # n 32 .60 .65 .68 .723 and n 64 .60 .645 .67 .713; n 16 reaches .683 only at its last eval (30,720), n 32 at
    # 61,440 (.68 < .683 at 40,960): n 16 is now the cheapest.
    smooth = b.size_rows(curves)
    assert b.SMOOTH == 3
    assert [(r.n, r.rollouts) for r in smooth] == [(16, 30_720), (32, 61_440), (64, 122_880)]
    assert smooth[0].target == pytest.approx((0.66 + 0.70 + 0.69) / 3)
    assert b.choose_size(smooth) == 16


def test_choice_is_the_lowest_median_cost_over_seeds_and_a_miss_counts_as_infinite():
    b = load_bench_study()
    rows = [b.SizeRow(16, 100, 0.7, 0.7, 10_000, 0.7), b.SizeRow(16, 101, 0.7, 0.7, None, 0.7),
            b.SizeRow(16, 102, 0.7, 0.7, None, 0.7),
            b.SizeRow(64, 100, 0.7, 0.7, 40_000, 0.7), b.SizeRow(64, 101, 0.7, 0.7, 50_000, 0.7),
            b.SizeRow(64, 102, 0.7, 0.7, 60_000, 0.7)]
    assert b.choose_size(rows) == 64  # n 16 never reached the target on two of three seeds
    assert b.choose_size([]) is None


def test_jobs_share_the_frozen_preset_and_differ_only_in_what_they_vary():
    b = load_bench_study()
    tune = b.tune_jobs((100,), (16, 64), 120)
    assert [(j.run_id, j.overrides) for j in tune] == [("bench-tune-grpo-n16-s100", ("allocator.n=16",)),
                                                        ("bench-tune-grpo-s100", ())]
    main = b.main_jobs((0,), 32, 120, primary_seeds=())
    # The primary pair (GRPO at n = 64, our PC) also runs on the extra seeds; the other variants do not.
    extra = b.main_jobs((0,), 32, 120, primary_seeds=(0, 6))
    assert [j.run_id for j in extra if j.seed == 6] == ["bench-grpo-s6", "bench-pc-s6"]
    assert len([j for j in extra if j.seed == 0]) == 6
    assert {j.preset for j in main} == {"bench"} and {j.steps for j in main} == {120}
    assert [j.run_id for j in main] == ["bench-grpo-s0", "bench-dapo-s0", "bench-pc-paper-s0", "bench-pc-s0",
                                        "bench-pc-paper-noevict-s0", "bench-grpo-n32-s0"]
    by = {j.run_id: j for j in main}
    assert set(by["bench-pc-paper-noevict-s0"].overrides) - set(by["bench-pc-paper-s0"].overrides) == {
        "allocator.evict=false"}
    assert by["bench-pc-s0"].overrides == ()  # our PC is the preset as frozen
    assert b.main_jobs((0,), 64, 120, primary_seeds=())[-1].run_id == "bench-pc-paper-noevict-s0"  # best = 64: no extra GRPO run
    isa = b.repro_jobs((0,), 120)
    assert [(j.run_id, j.env) for j in isa] == [("bench-isa-grpo-s0", (("ATEN_CPU_CAPABILITY", "default"),)),
                                                ("bench-isa-pc-s0", (("ATEN_CPU_CAPABILITY", "default"),))]


def test_a_parts_wall_time_is_the_union_of_its_runs_spans():
    b = load_bench_study()
    assert b.union_seconds([(1000, 1100), (0, 100), (50, 300)]) == 400  # the docstring's example
    assert b.union_seconds([(0, 10), (10, 20)]) == 20 and b.union_seconds([(0, 50), (10, 20)]) == 50
    assert b.union_seconds([]) is None


def test_a_runs_time_dead_between_a_kill_and_its_resume_is_not_wall_time():
    b = load_bench_study()
    assert b.running_spans(0, [5, 10, 15, 1015, 1020]) == [(0, 5), (5, 10), (10, 15), (1015, 1020)]  # docstring
    # an evaluation every few steps (a span a few times the median) is running time, not a gap
    assert b.running_spans(0, [5, 10, 40, 45]) == [(0, 5), (5, 10), (10, 40), (40, 45)]
    # short runs: nothing under GAP_FLOOR_S is a gap, however many medians it is
    assert b.running_spans(0, [1, 2, 3, 100]) == [(0, 1), (1, 2), (2, 3), (3, 100)]
    assert b.running_spans(0, []) == [] and b.running_spans(0, [7]) == [(0, 7)]
    spans = b.running_spans(0, [5, 10, 15, 1015, 1020]) + b.running_spans(12, [17, 22])
    assert b.union_seconds(spans) == 27  # two runs side by side: [0, 22] + [1015, 1020]


# ---- regimes (issue 30 point 4): one code path, the Regime says what differs -------------------------------------
NOISE_BUDGET = ("allocator.n_pilot=8", "allocator.pilot_wave=4", "allocator.commit_mean=8")


def test_the_regime_registry_holds_bench_as_it_was_and_the_tuned_regime():
    b = load_bench_study()
    assert list(b.REGIMES) == ["bench", "bench-tuned"]
    bench, noise = b.REGIMES["bench"], b.REGIMES["bench-tuned"]
    assert (bench.preset, bench.family, bench.seeds, bench.tune_seeds, bench.grpo_best_n, bench.pc_best) == (
        "bench", "bench", (8, 9, 10), (100, 101), 16, None)
    assert bench.variants == ("grpo", "dapo", "pc-paper", "pc", "pc-paper-noevict")
    assert (bench.repro, bench.marker, bench.plot_prefix, bench.store, bench.tuned_by, bench.extended) == (
        True, "bench-study", "bench", "benchmarks/out/bench.duckdb", None, False)
    assert bench.title == "The rollout-efficiency study on the benchmark (`research/bench_study.py`, issue 16)"
    assert (noise.preset, noise.family, noise.seeds, noise.tune_seeds, noise.grpo_best_n, noise.pc_best) == (
        "bench", "bench-tuned", (11, 12, 13), (100, 101), 16,
        b.Budget("p2+6/c8", ("allocator.n_pilot=8", "allocator.pilot_wave=2", "allocator.commit_mean=8")))
    assert noise.variants == ("grpo", "dapo", "pc-paper", "pc-paper-easy", "pc", "pc-best")
    assert (noise.repro, noise.marker, noise.plot_prefix, noise.store, noise.tuned_by, noise.extended) == (
        False, "bench-tuned-study", "bench_tuned", "benchmarks/out/bench-tuned.duckdb", "research/noise_regime.py", True)
    assert noise.out_dir == "benchmarks/out/bench-tuned-runs" and bench.out_dir == "benchmarks/out/bench-runs"
    with pytest.raises(AttributeError):
        bench.seeds = (1,)  # frozen
    # The constants noise_regime.py and the tests import stay bench's.
    assert (b.SEEDS, b.TUNE_SEEDS, b.GRPO_BEST_N, b.PRESET) == (bench.seeds, bench.tune_seeds, 16, "bench")


def test_new_variants_are_the_paper_pc_with_easy_pool_eviction_and_our_pc_at_the_best_budget():
    b = load_bench_study()
    assert b.VARIANTS["pc-paper-easy"] == ("pc", (*b.PAPER_PC, "allocator.eviction_strategy=easy_pool"))
    best = b.Budget("p4+4/c8", NOISE_BUDGET)
    assert b.variant_spec("pc-best", best) == ("pc", NOISE_BUDGET)
    assert b.variant_spec("pc-paper", best) == ("pc", b.PAPER_PC)
    with pytest.raises(ValueError):
        b.variant_spec("pc-best", None)
    assert not b.separate_best(None) and not b.separate_best(b.Budget("p4+12/c16")) and b.separate_best(best)


def test_the_tuned_regimes_jobs():
    b = load_bench_study()
    noise = b.REGIMES["bench-tuned"]
    best = b.Budget("p4+4/c8", NOISE_BUDGET)
    jobs = b.main_jobs(noise.seeds, 16, 120, regime=noise, pc_best=best, primary_seeds=())
    assert [j.run_id for j in jobs if j.seed == 11] == [
        "bench-tuned-grpo-s11", "bench-tuned-dapo-s11", "bench-tuned-pc-paper-s11", "bench-tuned-pc-paper-easy-s11",
        "bench-tuned-pc-s11", "bench-tuned-pc-best-s11", "bench-tuned-grpo-n16-s11"]
    assert len(jobs) == 21 and sorted({j.seed for j in jobs}) == [11, 12, 13]
    assert {j.preset for j in jobs} == {"bench"} and {j.family for j in jobs} == {"bench-tuned"}
    by = {j.run_id: j for j in jobs}
    assert by["bench-tuned-pc-best-s12"].overrides == NOISE_BUDGET and by["bench-tuned-pc-best-s12"].method == "pc"
    assert by["bench-tuned-pc-s12"].overrides == ()
    assert by["bench-tuned-pc-paper-easy-s13"].overrides == (*b.PAPER_PC, "allocator.eviction_strategy=easy_pool")
    assert by["bench-tuned-grpo-n16-s13"].overrides == ("allocator.n=16",)
    assert b.repro_jobs(noise.seeds, 120, noise) == []  # no repro part
    # A best budget that is the preset's own: pc-best is the pc run, not a run of its own; its goal reads "our PC".
    same = b.main_jobs((11,), 16, 120, regime=noise, pc_best=b.Budget("p4+12/c16"))
    assert "bench-tuned-pc-best-s11" not in {j.run_id for j in same} and len(same) == 6
    assert b.best_pc_variant(noise, b.Budget("p4+12/c16")) == "pc" and b.best_pc_variant(noise, best) == "pc-best"
    assert b.ratio_pcs(noise, b.Budget("p4+12/c16")) == ("pc-paper", "pc-paper-easy", "pc")
    # The regime's own preset can be replaced (the tests run it on `bench`); the default pc_best is the regime's.
    assert {j.preset for j in b.main_jobs((11,), 16, 2, regime=noise, pc_best=best, preset="bench")} == {"bench"}
    frozen = {j.run_id: j for j in b.main_jobs((11,), 16, 2, regime=noise)}  # the regime's frozen best budget
    assert frozen["bench-tuned-pc-best-s11"].overrides == noise.pc_best.overrides
    # bench's jobs: as they always were (the regime defaults to bench).
    assert b.main_jobs((0,), 32, 120, primary_seeds=()) == b.main_jobs((0,), 32, 120, primary_seeds=(),
                                                                        regime=b.REGIMES["bench"])


def test_ratio_columns_per_regime():
    b = load_bench_study()
    bench = b.REGIMES["bench"]
    assert b.ratio_pcs(bench, None) == ("pc-paper", "pc")  # the ablation is no column
    assert b.ratio_pcs(bench, None, ["grpo", "pc-paper-easy"]) == ("pc-paper", "pc-paper-easy", "pc")
    assert b.ratio_columns(16, b.ratio_pcs(bench, None)) == [
        ("GRPO64 / paper PC", "pc-paper", "grpo"), ("GRPO16 / paper PC", "pc-paper", "grpo-n16"),
        ("DAPO / paper PC", "pc-paper", "dapo"), ("GRPO64 / our PC", "pc", "grpo"),
        ("GRPO16 / our PC", "pc", "grpo-n16"), ("DAPO / our PC", "pc", "dapo")]
    noise = b.REGIMES["bench-tuned"]
    pcs = b.ratio_pcs(noise, b.Budget("x", NOISE_BUDGET))
    assert pcs == ("pc-paper", "pc-paper-easy", "pc", "pc-best")
    assert [c[0] for c in b.ratio_columns(32, pcs)] == [
        "GRPO64 / paper PC", "GRPO32 / paper PC", "DAPO / paper PC",
        "GRPO64 / paper PC easy_pool", "GRPO32 / paper PC easy_pool", "DAPO / paper PC easy_pool",
        "GRPO64 / our PC", "GRPO32 / our PC", "DAPO / our PC",
        "GRPO64 / our PC best", "GRPO32 / our PC best", "DAPO / our PC best"]
    # GRPO's best n = 64: bench's table repeats the GRPO-64 column (as it always did); a new regime's does not.
    assert [c[0] for c in b.ratio_columns(64)] == ["GRPO64 / paper PC", "GRPO64 / paper PC", "DAPO / paper PC",
                                                   "GRPO64 / our PC", "GRPO64 / our PC", "DAPO / our PC"]
    assert [c[0] for c in b.ratio_columns(64, ("pc",), distinct=True)] == ["GRPO64 / our PC", "DAPO / our PC"]


def flat_then_up(run_id: str, seed: int, at_peak: int) -> RunCurves:
    """0.5 for three evals, then 0.9: smoothed over 3 evals the peak (0.9) is reached at the last eval only, at
    ``at_peak`` sampled rollouts."""
    rollouts = [0, 1, 2, 3, 4, at_peak]
    return RunCurves(run_id, "x", "pc", seed, tuple(range(-1, 5)), tuple(rollouts), (0.5, 0.5, 0.5, 0.9, 0.9, 0.9),
                     (), (), (), (), ())


def test_bench_ratio_table_layout(monkeypatch):
    """bench's table, column set and layout exactly (its section must render as before the regimes)."""
    b = load_bench_study()
    cost = {("grpo", 8): 600, ("grpo-n16", 8): 150, ("dapo", 8): 900, ("pc-paper", 8): 300, ("pc", 8): 200,
            ("grpo", 9): 600, ("grpo-n16", 9): 150, ("pc-paper", 9): 300, ("pc", 9): 400}  # seed 9: no DAPO run
    jobs = b.main_jobs((8, 9), 16, 120, primary_seeds=())
    curves = {j.run_id: flat_then_up(j.run_id, j.seed, cost[(b._variant(j), j.seed)]) for j in jobs
              if (b._variant(j), j.seed) in cost}
    monkeypatch.setattr(b.study, "curves_by_run", lambda store, ids: {i: curves[i] for i in ids if i in curves})
    lines, medians = b.ratio_table(None, jobs, 16, b.ratio_pcs(b.REGIMES["bench"], None))
    assert lines == [
        "| seed | GRPO64 / paper PC | GRPO16 / paper PC | DAPO / paper PC | GRPO64 / our PC | GRPO16 / our PC "
        "| DAPO / our PC |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        "| 8 | 2.00x | 0.50x | 3.00x | 3.00x | 0.75x | 4.50x |",
        "| 9 | 2.00x | 0.50x | - | 1.50x | 0.38x | - |",
        "| **median** | **2.00x** | **0.50x** | **3.00x** | **2.25x** | **0.56x** | **4.50x** |"]
    assert medians == pytest.approx({"GRPO64 / paper PC": 2.0, "GRPO16 / paper PC": 0.5, "DAPO / paper PC": 3.0,
                                     "GRPO64 / our PC": 2.25, "GRPO16 / our PC": 0.5625, "DAPO / our PC": 4.5})


def stats(run_id: str, seed: int, fill: tuple, rounds: tuple):
    from research.study import RunStats

    return RunStats(run_id, "bench-tuned", "pc", seed, len(fill), 16, 100, 50, sum(fill) / len(fill), 0.0, 0.0, 1.0,
                    0, 10, 0.1, 0.5, 60.0, fill, rounds)


def test_the_extended_per_run_table_has_short_steps_max_rounds_and_held_out_first_to_last():
    b = load_bench_study()
    best = b.Budget("p4+4/c8", NOISE_BUDGET)
    jobs = b.main_jobs((11,), 16, 3, ["pc-paper-easy", "pc-best"], regime=b.REGIMES["bench-tuned"], pc_best=best)
    st = [stats("bench-tuned-pc-paper-easy-s11", 11, (1.0, 0.75, 0.5), (1, 3, 2)),
          stats("bench-tuned-pc-best-s11", 11, (1.0, 1.0, 1.0), (1, 1, 1))]
    curves = {"bench-tuned-pc-paper-easy-s11": flat_then_up("e", 11, 5)}
    table = b._stats_table(st, {}, jobs, curves, 16, best).splitlines()
    assert table[0].endswith("| compute | short steps | max rounds | held-out |")
    assert table[1].count("|") == table[0].count("|") == 17
    assert table[2].startswith("| `bench-tuned-pc-paper-easy-s11` | paper PC, easy_pool eviction | 11 | 3 |")
    assert table[2].endswith("| 1.0 min | 2 | 3 | 0.500 -> 0.900 |")
    assert table[3].startswith("| `bench-tuned-pc-best-s11` | our PC, best budget (p4+4/c8) |")
    assert table[3].endswith("| 0 | 1 | - |")  # no curve: no held-out
    plain = b._stats_table(st, {}, jobs).splitlines()  # bench's table: as it was
    assert plain[0].endswith("| informative | compute |") and plain[2].endswith("| 1.0 min |")


def test_ratio_goals_met_missed_and_not_measured():
    b = load_bench_study()
    g = b.ratio_goal("a", "GRPO16 / our PC best", 1.52, 1.3)
    assert (g.met, g.status, g.value, g.threshold) == (True, "met", 1.52, 1.3)
    assert g.detail == "GRPO16 / our PC best median 1.52x >= 1.30x, met by 0.22x"
    g = b.ratio_goal("b", "GRPO64 / our PC", 1.6, 2.0)
    assert (g.met, g.status) == (False, "missed") and g.detail.endswith("1.60x < 2.00x, missed by 0.40x")
    assert g.markdown().startswith("- (b) our default PC >= 2.0x vs GRPO-64") and "**missed**" in g.markdown()
    assert b.ratio_goal("b", "GRPO64 / our PC", 2.0, 2.0).met is True  # at the threshold: met
    g = b.ratio_goal("a", "GRPO16 / our PC best", None, 1.3)
    assert (g.met, g.status) == (None, "not measured")
    assert g.detail == "no GRPO16 / our PC best median: a run is missing, or no seed reached its target"
    assert g.markdown().endswith(": **not measured**: no GRPO16 / our PC best median: a run is missing, or no seed "
                                 "reached its target.")


def test_the_easy_pool_goal():
    b = load_bench_study()
    E = b.EasyCheck
    # The docstring's example: missed on both counts.
    g = b.easy_pool_goal({11: E(120, 0, 0.60, 0.62), 12: E(120, 0, 0.61, 0.60), 13: E(120, 3, 0.60, 0.65)},
                         (11, 12, 13))
    assert g.met is False
    assert g.detail == ("per seed 11, 12, 13: short steps 0, 0, 3; held-out last - first +0.020, -0.010, +0.050; "
                        "missed by 3 short steps (seed 13) and a held-out drop of 0.010 (seed 12)")
    assert g.per_seed[13] == {"steps": 120, "short_steps": 3, "heldout_first": 0.60, "heldout_last": 0.65}
    # Met: no short step, the held-out accuracy never ends below its start (equal counts).
    g = b.easy_pool_goal({11: E(120, 0, 0.60, 0.62), 12: E(120, 0, 0.61, 0.61), 13: E(120, 0, 0.60, 0.65)},
                         (11, 12, 13))
    assert g.met is True and g.detail.endswith("met with no short step and a held-out margin of +0.000 at the least "
                                               "(seed 12)")
    # Short of prompts alone misses it; one short step in one seed is enough.
    g = b.easy_pool_goal({11: E(120, 1, 0.60, 0.70)}, (11,))
    assert g.met is False and g.detail.endswith("missed by 1 short step (seed 11)")
    # A seed without its run (or without evals): not measured.
    g = b.easy_pool_goal({11: E(120, 0, 0.60, 0.70), 12: E(120, 0, None, None)}, (11, 12, 13))
    assert g.met is None and g.detail.endswith("on seed 12, 13")


def test_regime_goals_read_the_columns_of_the_best_pc_and_grpo_best():
    b = load_bench_study()
    med = {"GRPO16 / our PC best": 1.4, "GRPO16 / our PC": 1.2, "GRPO64 / our PC": 2.1}
    easy = {11: b.EasyCheck(2, 0, 0.5, 0.6)}
    a, bb, c = b.regime_goals(med, 16, "pc-best", easy, (11,), b.Budget("p4+4/c8", NOISE_BUDGET))
    assert (a.key, a.met, a.value) == ("a", True, 1.4) and "budget p4+4/c8, GRPO n = 16" in a.detail
    assert (bb.key, bb.met, bb.value) == ("b", True, 2.1) and (c.key, c.met) == ("c", True)
    a = b.regime_goals(med, 16, "pc", easy, (11,), b.Budget("p4+12/c16"))[0]
    assert (a.met, a.value) == (False, 1.2)  # the best budget is the preset's: our PC's column
    assert b.regime_goals({}, 16, "pc", {}, (11,))[2].met is None
    assert set(a.as_json()) == {"goal", "met", "value", "threshold", "detail", "per_seed"}


BENCH_RESULTS = {"preset": "bench", "dtype": "float64", "steps": 120, "seeds": [8, 9, 10], "core_seeds": [8, 9, 10],
                 "grpo_best_n": 16, "medians": {"GRPO64 / our PC": 1.6}, "reproducibility": {"median_main": 1.6},
                 "smooth_evals": 3, "command": "make bench-efficiency"}


def test_a_regimes_results_are_merged_into_the_file_every_other_key_kept(tmp_path):
    import json

    b = load_bench_study()
    path = tmp_path / "bench_study_results.json"
    path.write_text(json.dumps({**BENCH_RESULTS, "extra": {"kept": True}}, indent=1) + "\n")
    noise = b.REGIMES["bench-tuned"]
    b.write_results(path, noise, {"seeds": [11, 12, 13], "medians": {"GRPO64 / our PC": 2.2}})
    data = json.loads(path.read_text())
    assert {k: v for k, v in data.items() if k != "regimes"} == {**BENCH_RESULTS, "extra": {"kept": True}}
    assert list(data)[:len(BENCH_RESULTS)] == list(BENCH_RESULTS)  # the order too
    assert data["regimes"] == {"bench-tuned": {"seeds": [11, 12, 13], "medians": {"GRPO64 / our PC": 2.2}}}
    # Re-running replaces the regime's own entry, keeps any other regime's.
    data["regimes"]["other"] = {"x": 1}
    path.write_text(json.dumps(data))
    b.write_results(path, noise, {"seeds": [11]})
    assert json.loads(path.read_text())["regimes"] == {"bench-tuned": {"seeds": [11]}, "other": {"x": 1}}
    # bench writes exactly its keys; the regimes' entries survive it.
    b.write_results(path, b.REGIMES["bench"], BENCH_RESULTS)
    data = json.loads(path.read_text())
    assert list(data) == [*BENCH_RESULTS, "regimes"] and data["regimes"]["other"] == {"x": 1}
    assert "extra" not in data
    fresh = tmp_path / "fresh.json"
    b.write_results(fresh, b.REGIMES["bench"], BENCH_RESULTS)
    assert fresh.read_text() == json.dumps(BENCH_RESULTS, indent=1) + "\n"  # as the study always wrote it
    b.write_results(tmp_path / "new.json", noise, {"seeds": [11]})  # no file yet: just the regime's entry
    assert json.loads((tmp_path / "new.json").read_text()) == {"regimes": {"bench-tuned": {"seeds": [11]}}}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit):
        b.write_results(bad, noise, {"seeds": [11]})
    assert bad.read_text() == "{not json"  # never overwritten


def test_the_tuned_regimes_parts_refuse_what_they_do_not_do(tmp_path, capsys, monkeypatch):
    b = load_bench_study()
    # As the regime stood before tune-pc froze PC's budget (main would otherwise start the real 21 runs).
    monkeypatch.setitem(b.REGIMES, "bench-tuned", replace(b.REGIMES["bench-tuned"], pc_best=None))
    base = ["--regime", "bench-tuned", "--store", str(tmp_path / "n.duckdb"), "--write", "", "--quiet",
            "--out", str(tmp_path / "runs")]
    assert b.main([*base, "tune"]) == 2
    assert "tuned by research/noise_regime.py" in capsys.readouterr().err
    assert b.main([*base, "repro"]) == 2
    assert "no repro part" in capsys.readouterr().err
    assert b.main([*base, "main"]) == 2  # the PC budget is not frozen yet (GRPO's n is bench's)
    err = capsys.readouterr().err
    assert "GRPO's best group size" not in err and "our PC's best budget" in err
    assert b.main([*base, "report", "--best-n", "16"]) == 2  # the budget still is not
    assert "our PC's best budget" in capsys.readouterr().err
    assert not (tmp_path / "n.duckdb").exists()
    assert b.unfrozen(b.REGIMES["bench-tuned"], 16, b.Budget("p4+12/c16"), b.REGIMES["bench-tuned"].variants) == []
    assert b.unfrozen(b.REGIMES["bench"], 16, None, b.REGIMES["bench"].variants) == []  # bench has no pc-best
