"""research/sim_paper_regime.py: the paper's PC statistics from a simulated run, the calibration's order, and the
section's Table 2 beside the paper's with each error."""

from __future__ import annotations

import importlib

LAW = {"law": "fitted", "law_rate": 0.01, "law_noise_scale": 100.0}


def load():
    return importlib.import_module("research.sim_paper_regime")


def test_law_fields_leave_the_mix_to_the_calibration():
    sp = load()
    fit = {"sim": {**LAW, "difficulty_mean": 5.0, "num_prompts": 500, "eval_noise": 0.01}}
    assert sp.law_fields(fit) == {**LAW, "eval_noise": 0.01}
    # the planner's law terms (issue 57) travel with the law: PC's plateau, the prior's, the update's saturation
    terms = {"law_cap_pc": 1.9, "law_cap_prior": 1.0, "law_gain_max": 0.02}
    assert sp.law_fields({"sim": {**fit["sim"], **terms}}) == {**LAW, "eval_noise": 0.01, **terms}


def test_pc_stats_counts_second_rounds_and_rollouts():
    sp = load()
    # a pool almost all in the band: a second round only on the first step (its commits wait for its pilots)
    share, per_step = sp.pc_stats(LAW, mean=0.8, spread=0.1, evict=True, steps=10, seed=1)
    assert share == 0.1 and 128 * 96 <= per_step <= 2 * (384 * 32 + 128 * 96)
    # a pool almost all too hard: every step needs more rounds
    share, per_step = sp.pc_stats(LAW, mean=6.0, spread=0.1, evict=True, steps=3, seed=1)
    assert share == 1.0 and per_step > 384 * 32 + 128 * 96


def test_section_puts_table2_beside_the_paper(tmp_path):
    sp = load()
    rows = [{"difficulty_mean": 1.0, "difficulty_spread": 2.0, "second_noevict": 0.3, "second_evict": 0.05,
             "rollouts_noevict": 30000.0, "rollouts_evict": 26000.0, "loss": 0.01}]
    text = sp.section(tmp_path / "fit.json", rows, {"GRPO / PC": 1.2, "DAPO / PC": None}, {"pc": [3, None]}, 300,
                      [1, 2], 1.0)
    assert "| GRPO / PC | 1.20x | 1.5x | -20% |" in text and "| DAPO / PC | - | 4.0x | - |" in text
    assert "| 1.0, 2.0 | 30.0% | 5.0% | 30,000 | 26,000 |" in text and "pc 3, never" in text
