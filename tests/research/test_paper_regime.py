"""research/paper_regime.py (issue 57 points 1-2): the pilot's in-band chance, the static Monte Carlo of the paper's
PC, the mix rule on the committed probe (it must still choose what `bench-paper` froze), the target and size rules,
and every tuning candidate resolving to a valid config on the frozen preset."""

from __future__ import annotations

import importlib
import math
import sys
from math import comb
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("research.paper_regime")


def test_in_band_probability_is_the_hypergeometric_band_mass():
    pr = load()
    assert pr.in_band_probability(0, 64) == 0.0  # never a right answer: below the band
    assert pr.in_band_probability(64, 64) == 0.0  # always right: 16 of 16, above 12
    # 2..12 right of 16, drawn from 32 right of 64
    want = sum(comb(32, k) * comb(32, 16 - k) for k in range(2, 13)) / comb(64, 16)
    assert pr.in_band_probability(32, 64) == pytest.approx(want) and 0.9 < want < 1.0


def test_simulate_counts_second_rounds_and_eviction_retires_solved_prompts():
    pr = load()
    middling = np.full(50, 32)  # every pilot in band
    solved = np.full(50, 64)  # every pilot 16 of 16
    counts = [solved, solved, solved, middling, middling, middling]
    # half the pool solved: a round of 48 keeps ~24 >= 16, so second rounds are rare with or without eviction
    half = pr.simulate(counts, (1, 0, 0, 1, 0, 0), 64, evict=False, seed=0)
    assert half["second"] < 0.1 and 0.4 < half["first_visit_in_band"] < 0.6
    # 80% solved: a round keeps ~10 < 16, so without eviction most steps need a second round; with it the solved
    # prompts leave after their first pilot and later steps fill in one round
    heavy = (4, 0, 0, 1, 0, 0)
    no = pr.simulate(counts, heavy, 64, evict=False, seed=0)
    ev = pr.simulate(counts, heavy, 64, evict=True, seed=0)
    assert no["second"] > 0.9 and ev["second"] < 0.3


def test_the_rule_on_the_committed_probe_chooses_what_bench_paper_froze():
    import json

    from pc_pipelines.config import resolve

    pr = load()
    temp, best, tables = pr.choose(json.loads(pr.PROBE_FILE.read_text()))
    cfg = resolve(pr.STUDY_PRESET, method="grpo", seed=100)
    lo = next(i for i, w in enumerate(best["weights"]) if w) + 1
    assert float(temp) == cfg.training.temperature == 0.5
    assert (lo, pr.length_weights(best["weights"], lo)) == (cfg.task.min_digits, cfg.task.length_weights)
    assert best["in_band"] >= 1 / 3
    # T 0.3 (bench's) was tried first and had no admissible mix
    assert list(tables) == ["0.3", "0.5"] and not any(r["admissible"] for r in tables["0.3"])
    # everything but the pool and the temperature is bench's
    bench = resolve("bench", method="grpo", seed=100)
    assert cfg.policy == bench.policy and cfg.allocator == bench.allocator
    assert cfg.task.sft_fields() == bench.task.sft_fields() and cfg.training.dtype == "float64"


def _curve(run_id, rollouts, accuracy):
    from pc_pipelines.reports import RunCurves

    return RunCurves(run_id, "f", "grpo", 0, tuple(range(len(rollouts))), tuple(rollouts), tuple(accuracy),
                     (1,), (rollouts[-1],), (rollouts[-1] // 2,), (0.0,), (0.0,))


def test_target_rule_and_size_rule():
    pr = load()
    budget = pr.BUDGET
    grid = [0, budget // 2, budget]
    curves = {}
    for n in pr.GRPO_SIZES:
        for s in pr.TUNE_SEEDS:
            top = 0.70 if n != 16 else 0.80  # n 16 peaks highest
            curves[pr.grpo_job(n, s).run_id] = _curve(pr.grpo_job(n, s).run_id, grid, (0.60, 0.60, top * 3 - 1.2))
    target, start, g, peaks = pr.target_from_grpo(curves)
    # smoothed over 3: the last eval is mean(0.60, 0.60, 3 top - 1.2) = top
    assert start == 0.60 and g == pytest.approx(0.80) and peaks[16] == pytest.approx(0.80)
    assert target == math.floor((0.60 + 0.8 * 0.20) * 200 + 1e-9) / 200 == 0.76
    missing = dict(curves)
    missing.pop(pr.grpo_job(2, 100).run_id)
    assert pr.target_from_grpo(missing) is None
    rows = {(f"grpo-n{n}", s): pr.cost(curves[pr.grpo_job(n, s).run_id], target)
            for n in pr.GRPO_SIZES for s in pr.TUNE_SEEDS}
    assert rows[("grpo-n16", 100)]["rollouts"] == budget and rows[("grpo-n2", 100)]["rollouts"] is None
    assert pr.pick(rows, [f"grpo-n{n}" for n in pr.GRPO_SIZES]) == "grpo-n16"
    del rows[("grpo-n4", 101)]
    assert pr.pick(rows, [f"grpo-n{n}" for n in pr.GRPO_SIZES]) is None


@pytest.mark.parametrize("name", ["paper", "ours", "ours-n32", "p4c12", "p4c4", "p2c2", "p2c2-prior"])
def test_every_pc_candidate_is_a_valid_config_with_the_trained_group_it_names(name):
    from pc_pipelines.allocation import check_config
    from pc_pipelines.config.presets import parse_overrides, resolve

    pr = load()
    job = pr.pc_job(name, 100)
    cfg = resolve(job.preset, parse_overrides(list(job.overrides)), method="pc", seed=100)
    check_config(cfg.allocator)
    assert cfg.training.eval_every_rollouts == pr.EVAL_EVERY and job.seed in pr.TUNE_SEEDS
    n = {"paper": 64, "ours": 64, "ours-n32": 32, "p4c12": 16, "p4c4": 8, "p2c2": 4, "p2c2-prior": 4}[name]
    assert cfg.allocator.n == n and cfg.allocator.evict == (cfg.allocator.n_pilot >= 8)
    assert (cfg.allocator.screen_strategy == "posterior") == name.endswith("-prior")


def test_fresh_seed_arms_need_the_frozen_choices_and_resolve(monkeypatch):
    from pc_pipelines.allocation import check_config
    from pc_pipelines.config.presets import parse_overrides, resolve

    pr = load()
    monkeypatch.setattr(pr, "GRPO_BEST_N", None)
    with pytest.raises(ValueError, match="not frozen"):
        pr.study_jobs()
    monkeypatch.setattr(pr, "GRPO_BEST_N", 8)
    monkeypatch.setattr(pr, "PC_BEST", "p4c4")
    monkeypatch.setattr(pr, "TARGET", 0.75)
    jobs = pr.study_jobs()
    assert len(jobs) == 6 * len(pr.STUDY_SEEDS) and not {j.seed for j in jobs} & set(pr.TUNE_SEEDS)
    assert {j.run_id for j in jobs if j.seed == 24} == {f"paper-study-{a}-s24" for a in (
        "grpo-n8", "grpo-n64", "dapo", "pc-paper", "pc-paper-noevict", "pc-p4c4")}
    for j in jobs[:6]:
        cfg = resolve(j.preset, parse_overrides(list(j.overrides)), method=j.method, seed=j.seed)
        check_config(cfg.allocator)
        assert cfg.training.eval_every_rollouts == pr.EVAL_EVERY
        assert cfg.allocator.evict == ("noevict" not in j.run_id and "p4c4" not in j.run_id) or j.method != "pc"


def test_pc_tuning_refuses_to_start_before_the_target_is_fixed(tmp_path):
    pr = load()
    store = tmp_path / "empty.duckdb"
    with pytest.raises(SystemExit, match="target is not fixed. Fix: run `research/paper_regime.py tune-grpo` first"):
        pr.main(["tune-pc", "--store", str(store), "--out", str(tmp_path / "runs")])
    assert not (tmp_path / "runs").exists()


def test_the_study_report_on_a_store_without_the_runs_leaves_every_cell_open(tmp_path):
    pr = load()
    body, results = pr.study_section(str(tmp_path / "absent.duckdb"))
    assert "| 24 | - | - | - | - | - | - | - | - | - | - |" in body
    assert "GRPO at its best n / our PC best >= 1.3x: - (-)" in body
    assert results["medians"] == {f"GRPO{pr.GRPO_BEST_N} / our PC {pr.PC_BEST}": None,
                                  f"GRPO64 / our PC {pr.PC_BEST}": None, f"DAPO / our PC {pr.PC_BEST}": None,
                                  f"GRPO{pr.GRPO_BEST_N} / paper PC": None}
    assert results["target"] == pr.TARGET and results["seeds"] == list(pr.STUDY_SEEDS) and "advice" not in results


def test_kernel_comparison_counts_identical_steps_and_names_the_first_that_differs(tmp_path):
    """Two stores holding the same seed's run agree on every ledger row and evaluation; a run of another seed under
    the same id parts at some step, which the comparison names (the other-kernels row of the study)."""
    pr = load()
    from dataclasses import replace

    import duckdb

    from pc_pipelines.store import Store
    from research import study
    job = study.StudyJob("r", "grpo", 0, 12, "simulator", "fam",
                         ("sim.num_prompts=2000", "allocator.train_batch=8", "training.eval_every=4"))
    paths = {x: tmp_path / f"{x}.duckdb" for x in ("study", "same", "other")}
    for name, j in (("study", job), ("same", job), ("other", replace(job, seed=1))):
        study.simulate_jobs([j], Store(paths[name]), show_progress=False)
    for name, bump in (("study", 0.0), ("same", 1e-12)):  # the simulator trains nothing: losses planted (its finished
        # run is compacted into the catalog), one apart
        with duckdb.connect(str(paths[name])) as con:
            con.execute("UPDATE compacted_steps SET loss = 0.5 + (CASE WHEN step = 3 THEN ? ELSE 0 END)", [bump])
    same = pr.compare_kernels(str(paths["study"]), str(paths["same"]), ["r", "not-run"])
    assert set(same) == {"r"}  # a run the other store lacks is left out, not counted as different
    s = same["r"]
    assert (s["steps"], s["compared"], s["identical"], s["first_different"], s["evals_identical"]) == (12, 12, 12, None, True)
    assert s["evals"] >= 3 and s["to_target"]["study"] == s["to_target"]["other"]
    o = pr.compare_kernels(str(paths["study"]), str(paths["other"]), ["r"])["r"]
    rows = {k: Store(paths[k]).query(f"SELECT {', '.join(pr.LEDGER)} FROM steps ORDER BY step") for k in ("study", "other")}
    first = next(a["step"] for a, b in zip(*rows.values()) if a != b)
    assert o["identical"] < 12 and o["first_different"] == first
    assert s["loss_max_diff"] == pytest.approx(1e-12, rel=1e-3)  # a loss apart in its last bits: the rest identical
    lines = pr.kernels_section({"seeds": [24, 25], "machine_kernels": "AVX512",
                                "kernels": {"avx2": {"x-s24": same["r"]}, "default": {"x-s24": o, "x-s25": o}}})
    assert "| `ATEN_CPU_CAPABILITY=avx2` | 24 | 1 | 12 of 12 | 1.0e-12 | 1 of 1 | 1 of 1 |" in lines
    assert (f"| `ATEN_CPU_CAPABILITY=default` | 24, 25 | 2 | {2 * o['identical']} of 24 | {o['loss_max_diff']:.1e} | "
            f"{2 * int(o['evals_identical'])} of 2 |") in lines[-2]
    assert pr.kernels_section({}) == []


def test_kernel_runs_need_the_study_runs_to_compare_with(tmp_path):
    pr = load()
    with pytest.raises(SystemExit, match="paper-study-grpo-n8-s24 is not in .*Fix: run `research/paper_regime.py study`"):
        pr.kernel_jobs(str(tmp_path / "none.duckdb"), "avx2")
    assert pr.kernels_store("/x/pr57.duckdb", "default") == "/x/pr57-kernels-default.duckdb"
