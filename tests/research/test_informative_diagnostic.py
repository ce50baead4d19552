"""research/informative_diagnostic.py's pure parts: the grid, the slope fit, the reading and the tables."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("informative_diagnostic", ROOT / "research/informative_diagnostic.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("informative_diagnostic", mod)
    spec.loader.exec_module(mod)
    return mod


def test_grid_cells_run_ids_and_overrides():
    d = load()
    cells = d.grid()
    assert len(cells) == 12 + 4 + 4  # GRPO 3 b_t x 2 lr x 2 seeds, the drop variant and PC at b_t 16 x 2 lr x 2 seeds
    assert {c.seed for c in cells} == {100, 101}  # the tuning seeds only
    grpo = [c for c in cells if c.variant == "grpo"]
    assert [c.b_t for c in grpo[::4]] == [32, 16, 8]  # largest b_t first: run_jobs keeps the order within a method
    by = {c.run_id(): c for c in cells}
    c = by["info-diag-grpo-b32-lr3x-s101"]
    assert c.method == "grpo" and c.overrides(1e-4) == (
        "allocator.train_batch=32", "training.ppo_minibatch=16", "training.lr=0.0003", "training.eval_every=5")
    drop = by["info-diag-grpo-drop0-b16-lr1x-s100"]
    assert drop.method == "dapo" and drop.ppo_minibatch == 4
    assert drop.overrides(1e-4)[-2:] == ("allocator.oversample=1", "allocator.max_rounds=1")
    pc = by["info-diag-pc-b16-lr1x-s100"]
    assert pc.method == "pc" and pc.ppo_minibatch == 8  # 2 updates a step, as every GRPO cell
    job = pc.job(50, 1e-4)
    assert (job.preset, job.family, job.steps, job.seed) == ("bench", "info-diag", 50, 100)
    # Parts pick their variants; a tiny b_t (the smoke's 4, or 2) still gets a minibatch of at least one group.
    assert {c.variant for c in d.grid(parts=("pc",))} == {"pc"}
    assert d.Cell("grpo-drop0", 4, 1.0, 100).ppo_minibatch == 1 and d.Cell("grpo", 4, 1.0, 100).ppo_minibatch == 2
    assert d.Cell("grpo-drop0", 2, 1.0, 100).ppo_minibatch == 1 and d.Cell("grpo", 2, 1.0, 100).ppo_minibatch == 1


def test_estimate_scales_with_the_grid_and_packs_two_workers():
    d = load()
    one = d.Cell("grpo", 16, 1.0, 100)
    # The cost model reproduces the float64 study's GRPO-64 (4.0 s) and PC (2.55 s) steps at b_t 16.
    assert d.step_seconds(one) == pytest.approx(4.0, abs=0.02)
    assert d.step_seconds(d.Cell("pc", 16, 1.0, 100)) == pytest.approx(2.55, abs=0.02)
    assert d.step_seconds(d.Cell("grpo", 32, 1.0, 100)) == pytest.approx(2 * d.step_seconds(one))
    e1 = d.estimate([one], 50)
    assert e1["wall_s"] == pytest.approx(e1["core_s"]) == pytest.approx(d.run_seconds(one, 50))
    two = d.estimate([one, d.Cell("grpo", 16, 1.0, 101)], 50)
    # The second run waits only for the first to train its first step, then both run.
    first_step = d.START_S + d.EVAL_S + d.step_seconds(one)
    assert two["wall_s"] == pytest.approx(first_step + d.run_seconds(one, 50))
    full = d.estimate(d.grid(), d.STEPS)
    assert full["runs"] == 20 and full["core_s"] / 2 <= full["wall_s"] < 0.6 * full["core_s"]


def test_slope_fit_and_its_standard_error():
    d = load()
    slope, se = d.fit_slope([0, 5, 10], [0.60, 0.62, 0.67])  # the docstring's worked example
    assert slope == pytest.approx(0.007) and se == pytest.approx(math.sqrt(0.00015 / 50))
    assert d.fit_slope([0, 1, 2, 3], [1.0, 1.5, 2.0, 2.5]) == pytest.approx((0.5, 0.0))
    s2, se2 = d.fit_slope([0, 1], [0.0, 1.0])
    assert s2 == pytest.approx(1.0) and math.isnan(se2)
    assert all(math.isnan(v) for v in d.fit_slope([3], [0.5]))
    # Eval points: step 0 (before training) is x = 0; only steps <= fit_steps count.
    start, last, slope, _ = d.curve_numbers([(0, 0.60), (5, 0.62), (10, 0.67), (15, 0.99)], fit_steps=10)
    assert (start, last, slope) == (0.60, 0.67, pytest.approx(0.007))


def _row(d, variant, b_t, lr, seed, informative, slope, slope_in, se=0.0001, sampled=None):
    return d.Row(cell=d.Cell(variant, b_t, lr, seed), run_id=d.Cell(variant, b_t, lr, seed).run_id(), steps=50,
                 ppo_minibatch=max(1, b_t // 2), informative=informative, trained=b_t,
                 sampled=sampled if sampled is not None else 64 * b_t, start=0.678, last=0.678 + 50 * slope,
                 slope=slope, slope_se=se, start_in=0.40, last_in=0.40 + 50 * slope_in, slope_in=slope_in,
                 slope_in_se=se, grad_norm=0.5, ppo_kl=1e-3, clipped=0.0, compute_s=240.0)


def synthetic_lr_limited(d):
    """Slopes flat in b_t, tripled by lr x3, the same without the zero-advantage groups: the hypothesis."""
    rows = []
    for seed in (100, 101):
        for b, k in ((8, 3.4), (16, 6.7), (32, 13.4)):
            rows += [_row(d, "grpo", b, 1.0, seed, k, 0.0005, 0.0015), _row(d, "grpo", b, 3.0, seed, k, 0.0012, 0.004)]
        rows += [_row(d, "grpo-drop0", 16, 1.0, seed, 6.7, 0.0005, 0.0016),
                 _row(d, "pc", 16, 1.0, seed, 16.0, 0.0005, 0.0014, sampled=1022)]
    return rows


def test_cell_means_and_the_reading_on_synthetic_grids():
    d = load()
    means = d.cell_means(synthetic_lr_limited(d))
    m = means[("grpo", 16, 1.0)]
    assert m.seeds == (100, 101) and m.slope == pytest.approx(0.0005)
    assert m.slope_se == pytest.approx(math.sqrt(2) * 0.0001 / 2)
    text = "\n".join(d.reading(means, "in"))
    assert "beta = 0.00: flat" in text and "lr x3 / x1 slope ratio 2.67" in text
    assert "zero-adv. groups dropped / GRPO at b_t 16, lr x1: slope ratio 1.07" in text
    assert "the hypothesis **holds**" in text
    # Slopes proportional to the informative groups (noise-limited): beta 1, the hypothesis fails.
    noisy = [d.Row(**{**r.__dict__, "slope_in": 1e-4 * r.informative}) for r in synthetic_lr_limited(d)]
    text = "\n".join(d.reading(d.cell_means(noisy), "in"))
    assert "beta = 1.00: grows with the informative groups" in text and "**does not hold**" in text
    assert d.exponent(0.0002, 0.0004, 3.4, 13.4) == pytest.approx(math.log(2) / math.log(13.4 / 3.4))
    assert d.exponent(-0.0001, 0.0004, 3.4, 13.4) is None
    # One b_t: no reading.
    one = [r for r in synthetic_lr_limited(d) if r.cell.b_t == 16]
    assert d.reading(d.cell_means(one), "in")[-1] == "- Too few GRPO cells (one b_t) for a reading."


def test_tables_render_the_synthetic_rows():
    d = load()
    rows = synthetic_lr_limited(d)
    table = d.table_markdown(rows).splitlines()
    assert len(table) == 2 + len(rows)
    assert table[0].count("|") == table[1].count("|") == table[2].count("|") == 18
    first = table[2]  # GRPO first, b_t 8 first, lr x1 first, seed 100 first
    assert first.startswith("| GRPO n=64 | 8 | x1 | 100 | 4 | 3.4 | 8.0 | 512 | 0.678 -> 0.703 (+0.025) |")
    # slope .0005 a step = +0.050 per 100 steps; per 1k sampled: .0005 / 512 x 1000 = 0.977e-3
    assert "| +0.050 +- 0.010 | +0.977 |" in first and "| 0.5 (0%) | 1.00e-03 | 4.0 min |" in first
    pc = next(line for line in table if line.startswith("| our PC"))
    assert "| 1,022 |" in pc and "| +0.489 |" in pc  # .0005 / 1022 x 1000
    summary = d.summary_markdown(d.cell_means(rows)).splitlines()
    ref = next(line for line in summary if line.startswith("| GRPO n=64 | 16 | x1 |"))
    assert "| 100, 101 | 6.7 | +0.050 +- 0.007 (+0.050 / +0.050) | 1.00 |" in ref
    x3 = next(line for line in summary if line.startswith("| GRPO n=64 | 32 | x3 |"))
    assert "| 2.40 |" in x3 and "| 2.67 |" in x3  # 0.0012 / 0.0005 and 0.004 / 0.0015
    body = d.section(rows, "cmd", {"grpo": 600.0, "pc": None}, 50, 50, 5, 1e-4, None, {"eval_s": 5.0, "start_s": 9.0})
    assert "Wall time per part (from the runs' step times): grpo 10.0 min, pc - (an evaluation took 5.0 s, " in body
    assert body.count("the hypothesis **holds**") == 2
