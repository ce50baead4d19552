"""research/bench_study.py's rules on hand-made curves: GRPO's group size chosen by rollouts to a common target."""

import importlib.util
import sys
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
