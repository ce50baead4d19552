"""The committed efficiency study's headline (pc_pipelines/reports/headline.py): read from the results file the package
ships, and what it says when there is none."""

from __future__ import annotations

import json


def test_study_headline_reads_the_committed_results_and_says_when_there_are_none(tmp_path):
    from pc_pipelines.reports import STUDY_RESULTS, smoke_test_note, study_headline

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
    assert "20 steps" in smoke_test_note(20) and "SMOKE TEST, not a comparison" in smoke_test_note(20)
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
