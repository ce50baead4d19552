"""The shared preparation rules (pc_pipelines.data.prepare): the paper's binary-answer rule, gold normalisation
and the gold checks, in process and in worker processes."""

import pytest

from pc_pipelines.data import prepare
from pc_pipelines.data.prepare import (
    binary_part,
    check_golds,
    gold_cache_dir,
    normalize_final_answer,
    verifier_gold,
)


@pytest.mark.parametrize(
    "answer, normalized, part",
    [
        ("Yes", "yes", "yes"),
        ("$\\text{No}$", "no", "no"),
        ("\\boxed{True}", "true", "true"),
        ("false.", "false", "false"),
        ("  \\boxed{\\text{ YES }}  ", "yes", "yes"),
        ("$\\boxed{\\text{False}}$!", "false", "false"),
        ("No solution", "no solution", None),
        ("Yes, for n = 2", "yes for n 2", None),
        ("\\textbf{Yes}", "textbfyes", None),  # only \text{} and \boxed{} are unwrapped (the paper's rule)
        ("Not", "not", None),
        ("\\frac{1}{2}", "frac12", None),
        ("", "", None),
        (None, "", None),
        (1, "1", None),
    ],
)
def test_normalize_final_answer_and_binary_part(answer, normalized, part):
    assert normalize_final_answer(answer) == normalized
    assert binary_part(answer) == part


def test_verifier_gold_wraps_only_escaped_dollar_golds():
    assert verifier_gold("  \\$36 ") == "\\boxed{\\$36}"
    assert verifier_gold("\\$32,\\!348") == "\\boxed{\\$32,\\!348}"
    assert verifier_gold("$\\$5$") == "$\\$5$"  # real delimiters: as is
    assert verifier_gold("\\boxed{\\$5}") == "\\boxed{\\$5}"
    assert verifier_gold(" 7 ") == "7"


def test_check_golds_in_process_and_with_worker_processes():
    golds = ["1", "\\frac{1}{2}", "\\frac{", "x^2+1", "1", "(1, 2)", "\\$5", "\\boxed{}"]
    forms: dict = {}
    one = check_golds(golds, workers=1, forms=forms)
    assert list(one) == ["1", "\\frac{1}{2}", "\\frac{", "x^2+1", "(1, 2)", "\\$5", "\\boxed{}"]
    # a bare escaped dollar parses to nothing as written; normalized (currency dropped) it is graded as 5
    assert {g for g, why in one.items() if why} == {"\\frac{", "\\boxed{}"}
    assert forms == {"\\$5": "5"}
    assert "cannot be graded" in one["\\frac{"]
    forms2: dict = {}
    two = check_golds(golds, workers=2, forms=forms2)
    assert {g: why is None for g, why in two.items()} == {g: why is None for g, why in one.items()}
    assert forms2 == forms
    with pytest.raises(ValueError, match="workers"):
        check_golds(golds, workers=0)


def test_cached_gold_verdicts_are_the_checked_ones_and_a_damaged_entry_is_checked_again(tmp_path, monkeypatch):
    from pc_pipelines.rewards import MathGrader

    golds = ["1", "\\frac{", "\\$5", "x^2+1"]
    forms: dict = {}
    first = check_golds(golds, workers=1, forms=forms, cache=tmp_path)
    (entry,) = tmp_path.glob("*.json")
    calls = []
    real = MathGrader.graded_gold
    monkeypatch.setattr(MathGrader, "graded_gold", lambda self, g: calls.append(g) or real(self, g))
    forms2: dict = {}
    assert check_golds(golds, workers=1, forms=forms2, cache=tmp_path) == first and forms2 == forms == {"\\$5": "5"}
    assert calls == []  # every verdict from the cache
    assert check_golds(golds[:2], workers=1, cache=tmp_path) == {g: first[g] for g in golds[:2]}
    forms3: dict = {}
    assert check_golds(golds[:2], workers=1, forms=forms3, cache=tmp_path) == {g: first[g] for g in golds[:2]}
    assert calls == golds[:2] and forms3 == {}  # other golds: another entry, checked once, then read (no forms in it)
    calls.clear()
    check_golds(golds[2:], workers=1, cache=tmp_path)
    forms4: dict = {}
    check_golds(golds[2:], workers=1, forms=forms4, cache=tmp_path)
    assert calls == golds[2:] and forms4 == {"\\$5": "5"}
    entry.write_text('{"verdicts": {"1": nu')  # a damaged entry: checked anew, rewritten whole
    calls.clear()
    assert check_golds(golds, workers=1, cache=tmp_path) == first and calls == golds
    assert check_golds(golds, workers=1, cache=tmp_path) == first and calls == golds  # rewritten: read again
    calls.clear()
    monkeypatch.setattr(prepare, "_GRADING_PACKAGES", (*prepare._GRADING_PACKAGES, "pyarrow"))
    assert check_golds(golds, workers=1, cache=tmp_path) == first and calls == golds  # other code: other key
    calls.clear()
    check_golds(golds, MathGrader(timeout_s=3.0), workers=1, cache=tmp_path)
    assert calls == golds  # another timeout: another key

    class Lenient(MathGrader):
        pass
    calls.clear()
    check_golds(golds, Lenient(), workers=1, cache=tmp_path)
    check_golds(golds, Lenient(), workers=1, cache=tmp_path)
    assert calls == golds * 2  # a grader of another class: never cached


def test_the_gold_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PC_PIPELINES_CACHE", "off")
    assert gold_cache_dir() is None
    monkeypatch.setenv("PC_PIPELINES_CACHE", str(tmp_path))
    assert gold_cache_dir() == tmp_path / "golds"
    monkeypatch.delenv("PC_PIPELINES_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gold_cache_dir() == tmp_path / "xdg" / "pc-pipelines" / "golds"
