"""The shared preparation rules (pc_pipelines.data.prepare): the paper's binary-answer rule, gold normalisation
and the gold checks, in process and in worker processes."""

import pytest

from pc_pipelines.data.prepare import (
    binary_part,
    check_golds,
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
