"""Fuzz and adversarial inputs: grading never raises, never hangs, and scores 0.0 when the answer is not the gold.

Every call's wall time is asserted to stay within the grader's timeout plus a small slack, on the main thread
(in-process SIGALRM guard) and on a non-main thread (worker process).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reward_threads import run_in_thread

from pc_pipelines.rewards import GradeOutcome, MathGrader

# Hypothesis installs gc callbacks; a deadline alarm that lands inside one is "ignored" there (printed as
# unraisable) and re-fires 50 ms later in the grading code, which is what these tests check. Not a failure.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

O = GradeOutcome  # noqa: E741 - short alias, as in test_math_reward.py
TIMEOUT_S = 0.3
SLACK_S = 10.0  # over TIMEOUT_S: extraction of 100 KB, IPC, the worker's hard deadline grace (0.5 s), and a loaded
# 2-core CI machine (1.1 s seen under load 7; 2.8 s under load 12, 2026-11-29). A grader whose timeout does not fire
# hangs on these inputs (minutes), so a bound this loose still catches it and no machine load reaches it.
GOLD = "357"

ADVERSARIAL = {
    "power tower": r"\boxed{9^{9^{9^{9^{9}}}}}",
    "googolplex": r"\boxed{10^{10^{100}}}",
    "huge power": r"\boxed{2^{2^{40}}}",
    "factorial of 10^10": r"\boxed{(10^{10})!}",
    "factorial tower": r"\boxed{9!!!!!!}",
    "exp tower": r"\boxed{e^{e^{e^{e^{100}}}}}",
    "huge sum": r"\boxed{\sum_{n=1}^{10^{10}} n^{n}}",
    "parens 5000 deep": r"\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "parens 300 deep": r"\boxed{" + "(" * 300 + "1" + ")" * 300 + "}",
    "braces 400 deep": r"\boxed{" + "{" * 400 + "1" + "}" * 400 + "}",
    "nested fractions": r"\boxed{" + r"\frac{1}{" * 90 + "2" + "}" * 90 + "}",  # < 1000 chars: reaches sympy
    "nested sqrt": r"\boxed{" + r"\sqrt{" * 120 + "2" + "}" * 120 + "}",
    "nested fractions over the cap": r"\boxed{" + r"\frac{1}{" * 300 + "2" + "}" * 300 + "}",
    "999 nines": r"\boxed{" + "9" * 999 + "}",
    "matrix": r"\boxed{\begin{pmatrix}" + r"\\".join(["&".join(["x"] * 20)] * 20) + r"\end{pmatrix}}",
    "unbalanced open": r"\boxed{1+{2+{3",
    "unbalanced close": r"\boxed{358}}}}}}" + "}" * 1000,
    "braces reversed": "}{" * 50_000,
    "boxed repeated 10000x": r"\boxed{" * 10_000,
    "boxed repeated then closed": r"\boxed{" * 10_000 + "358" + "}" * 10_000,
    "100 KB of text then a wrong box": "blah " * 20_000 + r"\boxed{358}",
    "100 KB of backslashes": "\\" * 100_000,
    "100 KB of dollars": "$" * 100_000,
    "100 KB of open braces": r"\boxed{" + "{" * 100_000,
    "100 KB inside one box": r"\boxed{" + "1+" * 50_000 + "1}",
    "slow box then 100 KB": r"\boxed{9^{9^{9}}}" + " ok" * 33_000,
    "escaped braces": r"\boxed{\{\}\{\}" + r"\}" * 500 + "}",
    "control characters": "\\boxed{\x00\x01\x02\ufeff\u202e358}",
}


@pytest.fixture(scope="module")
def main_grader():
    g = MathGrader(timeout_s=TIMEOUT_S)
    g.check_gold(GOLD)
    yield g
    g.close()


@pytest.fixture(scope="module")
def thread_grader():
    g = MathGrader(timeout_s=TIMEOUT_S)
    run_in_thread(lambda: g.check_gold(GOLD))  # starts the worker outside any timed call
    yield g
    g.close()


def _timed(grader, response):
    t0 = time.perf_counter()
    g = grader.grade(response, GOLD)
    return g, time.perf_counter() - t0


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_main_thread(main_grader, name):
    g, wall = _timed(main_grader, ADVERSARIAL[name])
    assert g.reward == 0.0 and g.outcome is not O.CORRECT
    assert wall < TIMEOUT_S + SLACK_S, f"{name}: {wall:.2f} s"


@pytest.mark.parametrize(
    "name",
    [
        "power tower",
        "factorial of 10^10",
        "parens 300 deep",
        "100 KB inside one box",
        "boxed repeated 10000x",
    ],
)
def test_adversarial_non_main_thread(thread_grader, name):
    g, wall = run_in_thread(lambda: thread_grader.grade(ADVERSARIAL[name], GOLD))
    assert g.reward == 0.0 and g.outcome is not O.CORRECT
    assert wall < TIMEOUT_S + SLACK_S, f"{name}: {wall:.2f} s"


def test_adversarial_batch_respects_a_per_distinct_pair_budget(main_grader):
    """A whole round of adversarial responses (each repeated 8x): bounded by distinct pairs x timeout."""
    responses = [r for r in ADVERSARIAL.values() for _ in range(8)] + [r"\boxed{000357}"] * 8
    fresh = MathGrader(timeout_s=TIMEOUT_S)
    t0 = time.perf_counter()
    grades = fresh.grade_batch(responses, [GOLD] * len(responses))
    wall = time.perf_counter() - t0
    assert [g.reward for g in grades] == [0.0] * (len(responses) - 8) + [1.0] * 8
    assert fresh.stats.cache_misses <= len(ADVERSARIAL) + 1
    assert wall < fresh.stats.cache_misses * TIMEOUT_S + 2 * SLACK_S


# Digit-free text can never equal the gold 357, so the reward must be 0.0. The LaTeX-ish alphabet has boxes,
# braces, powers and factorials, plus the digits 9 and 0: no product/power/factorial of numbers written with
# 9s and 0s (all multiples of 9, or 0, or 1) equals 357 = 3 * 7 * 17, and there is no minus, plus or division.
_TOKENS = [
    r"\boxed{",
    r"\boxed {",
    r"\fbox{",
    "{",
    "}",
    "^",
    "!",
    "(",
    ")",
    "9",
    "0",
    "99",
    "x",
    "e",
    r"\pi",
    " ",
    "\\",
    r"\{",
    r"\}",
    r"\left(",
    r"\right)",
    "$",
    r"\infty",
    ",",
    r"\cdot",
    "\n",
    r"\sqrt",
    "_",
    "=",
    r"\le",
    "[",
    "]",
]
_latexish = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)
# Well-formed boxed expressions from the same numbers: every integer value is 0, 1 or a multiple of 9 (products,
# positive powers and factorials keep that; 0! and x^0 give 1), and the rest is irrational or symbolic.
_LEAVES = ["9", "0", "99", "909", "x", "e", r"\pi", r"\infty", "0,9"]
_expr = st.recursive(
    st.sampled_from(_LEAVES),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: f"{t[0]}^{{{t[1]}}}"),
        inner.map(lambda a: f"({a})!"),
        inner.map(lambda a: f"\\left({a}\\right)"),
        inner.map(lambda a: "{" + a + "}"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]} \\cdot {t[1]}"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}, {t[1]}"),
    ),
    max_leaves=8,
)
_no_digits = st.text(alphabet=st.characters(blacklist_categories=("Nd", "No", "Cs")), max_size=300)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=_no_digits)
def test_fuzz_random_text(main_grader, text):
    for response in (text, r"\boxed{" + text + "}"):
        g, wall = _timed(main_grader, response)
        assert g.reward == 0.0
        assert wall < TIMEOUT_S + SLACK_S


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=_latexish)
def test_fuzz_latexish(main_grader, text):
    g, wall = _timed(main_grader, text)
    assert g.reward == 0.0
    assert g.outcome in (O.WRONG, O.NO_BOXED, O.UNPARSABLE, O.TIMEOUT)
    assert (g.answer is None) == (g.outcome is O.NO_BOXED)
    assert wall < TIMEOUT_S + SLACK_S


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(expr=_expr)
def test_fuzz_boxed_expressions(main_grader, expr):
    g, wall = _timed(main_grader, rf"\boxed{{{expr}}}")
    assert g.reward == 0.0
    assert g.outcome in (O.WRONG, O.UNPARSABLE, O.TIMEOUT)
    assert g.answer == expr
    assert wall < TIMEOUT_S + SLACK_S


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pad=st.integers(0, 12), value=st.integers(0, 10**9), other=st.integers(0, 10**9))
def test_fuzz_zero_padded_integers(main_grader, pad, value, other):
    response = rf"\boxed{{{'0' * pad}{value}}}"
    assert main_grader.grade(response, str(value)).reward == 1.0
    assert main_grader.grade(response, str(other)).reward == (1.0 if other == value else 0.0)
