"""The committed efficiency study's headline (pc_pipelines/reports/headline.py): read from the results file the package
ships, and what it says when there is none."""

from __future__ import annotations

import json


def test_study_headline_reads_the_committed_results_and_says_when_there_are_none(tmp_path):
    from pc_pipelines.reports import STUDY_RESULTS, study_headline

    res = {"preset": "bench", "steps": 120, "seeds": [0, 1, 2], "grpo_best_n": 16,
           "medians": {"GRPO64 / paper PC": 1.234, "GRPO16 / paper PC": 0.5, "DAPO / paper PC": None,
                       "GRPO64 / our PC": 2.5, "GRPO16 / our PC": 0.75, "DAPO / our PC": 4.125},
           "reproducibility": {"other_kernels": "DEFAULT", "median_main": 2.5, "median_other": 2.25}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    text = study_headline(path)
    assert "preset `bench`, 120 steps a run, seeds 0, 1, 2" in text
    assert "our PC GRPO64 2.50x, GRPO16 0.75x, DAPO 4.12x" in text
    assert "the paper's PC GRPO64 1.23x, GRPO16 0.50x, DAPO -" in text
    assert "DEFAULT CPU kernels: GRPO64 / our PC 2.25x (main 2.50x)" in text
    assert "ratio, baseline / PC" in text  # the first study's file has no smoothing: raw evals
    path.write_text(json.dumps({**res, "smooth_evals": 3}))
    assert "ratio on curves smoothed over 3 evals, baseline / PC" in study_headline(path)
    path.write_text(json.dumps({**res, "dtype": "float64"}))  # the float64 study says its precision
    assert "preset `bench` in float64, 120 steps a run" in study_headline(path)
    assert study_headline(tmp_path / "missing.json").startswith("No efficiency study is committed yet")
    if STUDY_RESULTS.exists():  # the committed file parses and names the frozen preset
        assert "preset `bench`" in study_headline()


def test_study_headline_adds_each_regime_of_the_results_file(tmp_path):
    """A regime's entry (``research/bench_study.py --regime bench-tuned --results``) adds one sentence: its medians
    by PC variant and what was tuned (on other seeds)."""
    from pc_pipelines.reports import study_headline

    res = {"preset": "bench", "steps": 120, "seeds": [8], "medians": {"GRPO64 / our PC": 1.5},
           "regimes": {"bench-tuned": {
               "seeds": [11, 12, 13], "grpo_best_n": 16, "pc_best": {"name": "p2+6/c8", "overrides": []},
               "medians": {"GRPO64 / our PC": 1.25, "GRPO16 / our PC best": 0.625, "DAPO / our PC best": None},
               "goals": {"b": {"met": False}, "a": {"met": True}, "c": {"met": None}}}}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    text = study_headline(path)
    assert ("Regime `bench-tuned` (seeds 11, 12, 13; tuned on other seeds: GRPO n = 16, our PC's budget p2+6/c8): "
            "our PC GRPO64 1.25x; our PC best GRPO16 0.62x, DAPO -.") in text
    assert "Goals" not in text and "missed" not in text  # the goals' wording lives in docs/STUDIES.md
    path.write_text(json.dumps({**res, "regimes": {}}))
    assert "Regime" not in study_headline(path)
    small = {"seeds": [19, 20], "grpo_best_n": 4, "pc_best": {"name": "p2c2-prior"},
             "medians": {"GRPO4 / PC-small p2c2-prior": 0.85}, "advice": "use GRPO at n = 4"}
    path.write_text(json.dumps({**res, "regimes": {"small-groups": small}}))
    assert ("Regime `small-groups` (seeds 19, 20; tuned on other seeds: GRPO n = 4, our PC's budget p2c2-prior): "
            "PC-small p2c2-prior GRPO4 0.85x. In short: use GRPO at n = 4.") in study_headline(path)
    paper = {"seeds": [24], "medians": {"GRPO8 / our PC p2c2": 1.19, "GRPO64 / our PC p2c2": None,
                                        "DAPO / our PC p2c2": None, "GRPO8 / paper PC": 0.0},
             "baseline_never": ["GRPO64 / our PC p2c2"], "pc_never": ["GRPO8 / paper PC"]}
    path.write_text(json.dumps({**res, "regimes": {"bench-paper": paper}}))
    assert ("our PC p2c2 GRPO8 1.19x, GRPO64 never reached the target, DAPO -; paper PC GRPO8 0.00x (PC never "
            "reached the target).") in study_headline(path)
    same = {"runs": 6, "steps": 1144, "identical_steps": 1144, "same_rollouts_to_target": 6}
    path.write_text(json.dumps({**res, "regimes": {"bench-paper": {**paper, "reproducibility": {
        "avx2": same, "default": {**same, "identical_steps": 1000}}}}}))
    assert ("reached the target). Re-run under the avx2 and default CPU kernels (1,144 steps each): some steps sampled "
            "differently") in study_headline(path)
    path.write_text(json.dumps({**res, "regimes": {"bench-paper": {**paper, "reproducibility": {
        "avx2": same, "default": {**same, "runs": 12, "steps": 2259, "identical_steps": 2259,
                                  "same_rollouts_to_target": 12}}}}}))
    assert ("Re-run under the avx2 and default CPU kernels (avx2 1,144 steps, default 2,259 steps): every sampled "
            "rollout and rollouts to target the same.") in study_headline(path)
    path.write_text(json.dumps({**res, "regimes": {"bench-paper": {**paper, "reproducibility": {"avx2": same}}}}))
    assert ("Re-run under the avx2 CPU kernels (1,144 steps): every sampled rollout and rollouts to target the "
            "same.") in study_headline(path)


def test_one_rule_says_when_a_ratio_is_a_smoke_test(tmp_path):
    """Issue 55: fewer seeds, or shorter runs, than the committed study's: the CLI report, the report asset and the
    demo say "SMOKE TEST" beside the ratio, in these words (reports.smoke_test, the one rule)."""
    from pc_pipelines.reports import family_smoke_test, smoke_test

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"preset": "bench", "steps": 120, "seeds": [8, 9, 10], "medians": {}}))
    assert smoke_test(1, 20, path) == (
        "SMOKE TEST, not a comparison: each method trained 20 steps on 1 seed, too few for rollout efficiency to "
        "show (the study runs 120 steps x 3 seeds per method and reads the medians)")
    assert smoke_test(3, 120, path) is None and smoke_test(5, 200, path) is None
    assert "trained 120 steps on 2 seeds" in smoke_test(2, 120, path)
    assert "trained 100 to 120 steps on 3 seeds" in smoke_test(3, (100, 120), path)
    fam = {"seeds": [{"seed": s, "steps": {"grpo": 120, "dapo": None, "pc": 120}} for s in (0, 1, 2)]}
    assert family_smoke_test(fam, path) is None
    fam["seeds"][1]["steps"]["pc"] = 20  # one short compared run makes the family's ratios a smoke test
    assert "trained 20 to 120 steps on 3 seeds" in family_smoke_test(fam, path)
    assert "120 steps x 3 seeds" in smoke_test(1, 20, tmp_path / "missing.json")  # no study committed: its scale
