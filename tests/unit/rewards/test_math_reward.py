"""pc_pipelines.rewards: boxed extraction, math-verify grading, outcomes, cache, gold errors, threads, timeouts."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reward_threads import run_in_thread

from pc_pipelines.rewards import (
    Grade,
    GradeOutcome,
    MathGrader,
    default_grader,
    extract_boxed,
    math_reward,
)
from pc_pipelines.rewards._verify import wall_backstop

O = GradeOutcome  # noqa: E741 - short alias for the expectation tables
SLOW_ANSWER = r"\boxed{9^{9^{9}}}"  # parses at once, verification runs for minutes: needs the timeout
GRADER_TIMEOUT_S = 1.0  # the ``grader`` fixture's (tests/conftest.py)
SLACK_S = 0.75  # wall-time slack over timeout_s for one call (the worker's hard deadline is timeout + 0.5 s)


@pytest.fixture(scope="module")
def patient_grader():
    """For tests of *what* is graded correct, not of timeouts: sympy needs ~1.6 s for an integral on an idle
    2-core machine, so a 1 s budget made those tests depend on machine load (CI once saw TIMEOUT)."""
    g = MathGrader(timeout_s=60.0)
    yield g
    g.close()


# ---------------------------------------------------------------------------------------------------------------
# extraction
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"the answer is \boxed{357}.", "357"),
        (r"\boxed{ 357 }", "357"),
        (r"\boxed {357}", "357"),
        ("\\boxed \n\t{357}", "357"),
        (r"\fbox{42}", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (
            r"\boxed{\frac{\sqrt{\frac{1}{2}}}{3^{2}}}",
            r"\frac{\sqrt{\frac{1}{2}}}{3^{2}}",
        ),
        (r"first \boxed{1} then \boxed{2} finally \boxed{3}", "3"),
        (r"\boxed{1} and \fbox{2}", "2"),
        (r"\fbox{1} and \boxed{2}", "2"),
        (r"\boxed{a \boxed{b} c}", "b"),  # the last opener decides
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not count
        (r"\boxed{\left\{ x \right\}}", r"\left\{ x \right\}"),
        (r"\boxed{}", ""),
        ("no box at all", None),
        ("", None),
        (r"\boxed 5", None),  # no brace: not an opener
        (r"\boxedx{5}", None),
        (r"\boxed{12", None),  # unbalanced
        (r"\boxed{\frac{1}{2}", None),
        (
            r"\boxed{5} then \boxed{6",
            None,
        ),  # the last opener is unclosed: no fallback to the earlier box
        (r"\boxed{5\}", None),  # the only closing brace is escaped
        (r"}}}} \boxed{7} }}}}", "7"),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_boxed_answers_huge_adversarial_inputs():
    # their speed (linear in the length) is measured by benchmarks/rewards.py on the same inputs, not asserted here
    cases = {
        "x" * 200_000 + r"\boxed{357}": "357",
        r"\boxed{" * 20_000: None,
        "{" * 200_000: None,
        r"\boxed{" + "{" * 200_000: None,
        "\\" * 200_000: None,
        r"\boxed" + " " * 200_000: None,
        r"\boxed{" + r"\{" * 100_000 + "}": r"\{" * 100_000,
    }
    assert [extract_boxed(text) for text in cases] == list(cases.values())


# ---------------------------------------------------------------------------------------------------------------
# grading
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, gold, outcome",
    [
        (r"\boxed{357}", "357", O.CORRECT),
        (r"so the sum is \boxed{357}.", "357", O.CORRECT),
        (r"\boxed{358}", "357", O.WRONG),
        (r"\boxed{-357}", "357", O.WRONG),
        (r"\boxed{1/2}", r"\frac12", O.CORRECT),
        (r"\boxed{\frac{1}{2}}", r"\frac12", O.CORRECT),
        (r"\boxed{1/2}", "0.5", O.CORRECT),
        (r"\boxed{\frac{1}{2}}", "0.5", O.CORRECT),
        (r"\boxed{0.5}", r"\frac{1}{2}", O.CORRECT),
        (r"\boxed{\frac{1}{3}}", "0.5", O.WRONG),
        (r"\boxed{x^2}", "$x^2$", O.CORRECT),
        (r"\boxed{x^3}", "$x^2$", O.WRONG),
        (r"\boxed{12}", r"\boxed{12}", O.CORRECT),
        (r"\fbox{12}", "12", O.CORRECT),
        (r"\boxed {12}", "12", O.CORRECT),
        (r"\boxed{12} no wait \boxed{13}", "12", O.WRONG),  # last box wins
        (r"\boxed{13} no wait \boxed{12}", "12", O.CORRECT),
        ("I don't know", "12", O.NO_BOXED),
        (r"\boxed{12", "12", O.NO_BOXED),
        (r"\boxed{}", "12", O.UNPARSABLE),
        (r"\boxed{   }", "12", O.UNPARSABLE),
        (
            r"\boxed{357.}",
            "357",
            O.CORRECT,
        ),  # math-verify only has a raw-string fallback for it; normalized (trailing dot dropped) it is 357
        (r"\boxed{62.5\%}", "62.5%", O.CORRECT),  # both sides normalized alike (percent dropped)
        (r"\boxed{37.5\%}", "62.5%", O.WRONG),
    ],
)
def test_grade_outcomes(grader, response, gold, outcome):
    g = grader.grade(response, gold)
    assert g.outcome is outcome
    assert g.reward == (1.0 if outcome is O.CORRECT else 0.0)
    assert isinstance(g, Grade)


@pytest.mark.parametrize(
    "response, gold",
    [
        (r"\boxed{000357}", "357"),
        (r"\boxed{0357}", "357"),
        (r"\boxed{004690}", "4690"),
        (r"\boxed{000000}", "0"),
        (r"\boxed{0}", "0"),
        (r"\boxed{000000000099999}", "99999"),
        (r"\boxed{100000}", "100000"),  # trailing zeros are not touched
    ],
)
def test_zero_padded_integers_are_correct(grader, response, gold):
    """The embedded task answers ``\\boxed{004690}`` for gold 4690: math-verify must grade it correct as is."""
    g = grader.grade(response, gold)
    assert (g.outcome, g.reward) == (O.CORRECT, 1.0)


@pytest.mark.parametrize(
    "response, gold",
    [(r"\boxed{000358}", "357"), (r"\boxed{0035}", "357"), (r"\boxed{3570}", "357")],
)
def test_zero_padded_wrong_answers_stay_wrong(grader, response, gold):
    assert grader.grade(response, gold).outcome is O.WRONG


REWARD_HACKS = [
    r"(((\infty)!)!)!",
    r"((\infty)!)!",
    r"{(((\infty)!)!)!}",
    r"((99 \cdot \infty)!)!",
    r"|\{\ln(0)\}|",
    r"\infty",
    r"\frac{1}{0}",
    r"\Gamma(0)",
]


def test_non_finite_answers_are_never_correct_in_a_fresh_process():
    """math-verify (sympy 1.14) grades e.g. ``(((\\infty)!)!)!`` equal to any number, depending on sympy's cache
    state: in a fresh interpreter, checked in this order, raw ``verify`` says True for some of these. The grader
    must say WRONG for all of them."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys, logging; logging.disable(logging.WARNING)\n"
        "from math_verify import parse, verify\n"
        "from pc_pipelines.rewards import MathGrader\n"
        "hacks = json.loads(sys.argv[1]); g = MathGrader(timeout_s=2.0); out = []\n"
        "for gold in ('357', '2', '12'):\n"
        "    for h in hacks:\n"
        "        raw = verify(parse('\\\\boxed{' + gold + '}'), parse('\\\\boxed{' + h + '}'), timeout_seconds=None)\n"
        "        out.append([h, gold, raw, g.grade('\\\\boxed{' + h + '}', gold).outcome.value])\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, json.dumps(REWARD_HACKS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(rows) == 3 * len(REWARD_HACKS)
    assert [r for r in rows if r[3] == "correct"] == [], rows


@pytest.mark.parametrize(
    "answer, gold",
    [
        (r"\infty", r"\infty"),
        (r"-\infty", r"-\infty"),
        (r"(-\infty, 2)", r"(-\infty, 2)"),
        (r"\{1, \infty\}", r"\{1, \infty\}"),
        (r"\sum_{n=1}^{\infty} 2^{-n}", "1"),  # convergent: finite value
        (r"\int_0^\infty e^{-x} dx", "1"),
    ],
)
def test_legitimate_infinities_still_grade_correct(patient_grader, answer, gold):
    assert patient_grader.grade(rf"\boxed{{{answer}}}", gold).outcome is O.CORRECT


def test_extracted_answer_is_reported(grader):
    assert grader.grade(r"\boxed{ 004690 }", "4690").answer == "004690"
    assert grader.grade("nothing", "4690").answer is None


def test_truncated_scores_zero_even_when_correct():
    g = MathGrader(timeout_s=1.0)
    out = g.grade_batch(
        [r"\boxed{357}", r"\boxed{357}", "long ramble"],
        ["357"] * 3,
        truncated=[True, False, True],
    )
    assert [x.outcome for x in out] == [O.TRUNCATED, O.CORRECT, O.TRUNCATED]
    assert [x.reward for x in out] == [0.0, 1.0, 0.0]
    assert out[0].answer == "357" and out[2].answer is None
    assert g.grade(r"\boxed{357}", "357", truncated=True).outcome is O.TRUNCATED
    penalised = MathGrader(timeout_s=1.0, overlong_reward=-1.0)
    assert penalised.grade(r"\boxed{357}", "357", truncated=True).reward == -1.0
    assert g.stats.outcomes[O.TRUNCATED] == 3


def test_rewards_array_and_math_reward():
    g = MathGrader(timeout_s=1.0)
    r = g.rewards(
        [r"\boxed{357}", r"\boxed{358}", "none", r"\boxed{357}"],
        ["357"] * 4,
        [False, False, False, True],
    )
    assert r.dtype == np.float64
    np.testing.assert_array_equal(r, [1.0, 0.0, 0.0, 0.0])
    assert math_reward(r"\boxed{000357}", "357") == 1.0
    assert math_reward(r"\boxed{358}", "357") == 0.0
    assert math_reward("no answer", "357") == 0.0
    assert default_grader() is default_grader()


def test_overlong_answer_is_unparsable_without_sympy():
    # the timeout is generous: on a loaded machine math-verify may need seconds for the 799-char sum below (what
    # matters is that the 1201-char answer never reaches it, not how fast anything is: no timing asserts)
    g = MathGrader(timeout_s=30.0, max_answer_chars=1000)
    long_answer = "1+" * 600 + "1"  # 1201 chars, and it would even be a number
    out = g.grade(r"\boxed{" + long_answer + "}", "1201")
    assert (out.outcome, out.reward) == (O.UNPARSABLE, 0.0)
    assert g.stats.cache_misses == 0  # never reached math-verify
    ok = g.grade(r"\boxed{" + "+".join(["1"] * 400) + "}", "400")  # 799 chars: verified
    assert ok.outcome is O.CORRECT


def test_100kb_response_is_graded(grader):
    # its grading time is measured by benchmarks/rewards.py, not asserted here
    response = "Let me think. " * 8000 + r"so \boxed{000357}"
    assert len(response) > 100_000
    assert grader.grade(response, "357").outcome is O.CORRECT


def test_non_string_response_is_no_boxed(grader):
    assert grader.grade(None, "357").outcome is O.NO_BOXED  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# cache and stats
# ---------------------------------------------------------------------------------------------------------------


def test_cache_and_batch_dedup_counts():
    g = MathGrader(timeout_s=1.0)
    responses = [
        r"\boxed{357}",
        r"\boxed{357}",
        r"\boxed{358}",
        r"\boxed{357}",
        "none",
        r"\boxed{357}",
    ]
    golds = ["357", "357", "357", "357", "357", "12"]
    first = g.grade_batch(responses, golds)
    assert [x.outcome for x in first] == [
        O.CORRECT,
        O.CORRECT,
        O.WRONG,
        O.CORRECT,
        O.NO_BOXED,
        O.WRONG,
    ]
    s = g.stats
    assert (s.cache_hits, s.cache_misses, s.batch_duplicates) == (
        0,
        3,
        2,
    )  # 3 distinct pairs verified once each
    second = g.grade_batch(responses, golds)
    assert second == first
    s = g.stats
    assert (s.cache_hits, s.cache_misses, s.batch_duplicates) == (
        5,
        3,
        2,
    )  # all 5 verifiable responses hit
    assert s.outcomes == {
        O.CORRECT: 6,
        O.WRONG: 4,
        O.NO_BOXED: 2,
        O.UNPARSABLE: 0,
        O.TIMEOUT: 0,
        O.TRUNCATED: 0,
    }
    assert s.graded == 12
    assert s.as_dict()["cache_hits"] == 5 and s.as_dict()["outcome_correct"] == 6


def test_cache_disabled_and_lru_bound():
    off = MathGrader(timeout_s=1.0, cache_size=0)
    off.grade(r"\boxed{357}", "357")
    off.grade(r"\boxed{357}", "357")
    assert (off.stats.cache_hits, off.stats.cache_misses) == (0, 2)

    lru = MathGrader(timeout_s=1.0, cache_size=2)
    for a in ("1", "2", "3"):  # "1" is evicted
        lru.grade(rf"\boxed{{{a}}}", "2")
    lru.grade(r"\boxed{3}", "2")
    lru.grade(r"\boxed{2}", "2")
    assert (lru.stats.cache_hits, lru.stats.cache_misses) == (2, 3)
    lru.grade(r"\boxed{1}", "2")
    assert (lru.stats.cache_hits, lru.stats.cache_misses) == (2, 4)


def test_timeouts_are_outcomes_and_are_cached():
    g = MathGrader(timeout_s=0.3)
    g.check_gold("357")  # parse the gold outside the timed region
    t0, cpu0 = time.perf_counter(), time.thread_time()
    first = g.grade(SLOW_ANSWER, "357")
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    assert (first.outcome, first.reward, first.answer) == (O.TIMEOUT, 0.0, "9^{9^{9}}")
    assert 0.3 <= cpu < 0.3 + SLACK_S  # the deadline is CPU time: it took what it was allowed, and stopped
    assert wall < wall_backstop(0.3)  # and a CPU-burning input is stopped in bounded wall time, however busy the machine
    again = g.grade_batch([SLOW_ANSWER] * 64, ["357"] * 64)  # remembered: no second timeout (cache_misses stays 1)
    assert {x.outcome for x in again} == {O.TIMEOUT}
    assert (g.stats.cache_hits, g.stats.cache_misses, g.stats.outcomes[O.TIMEOUT]) == (
        64,
        1,
        65,
    )
    fresh = MathGrader(timeout_s=0.3)  # within one batch, the repeated pair is verified (and times out) once
    fresh.check_gold("357")
    assert {x.outcome for x in fresh.grade_batch([SLOW_ANSWER] * 32, ["357"] * 32)} == {O.TIMEOUT}
    assert (fresh.stats.cache_misses, fresh.stats.batch_duplicates) == (1, 31)
    assert g.grade(r"\boxed{357}", "357").outcome is O.CORRECT  # the grader is fine afterwards


# Ordinary answers and golds: arithmetic (padded, as the arith task's models write them) and evaluation-set forms.
ORDINARY = [
    (r"\boxed{04690}", "4690"),
    (r"\boxed{357}", "357"),
    (r"\boxed{0.5}", r"\frac{1}{2}"),
    (r"\boxed{3\sqrt{2}}", r"3\sqrt{2}"),
    (r"\boxed{(3, 7)}", "(3, 7)"),
    (r"\boxed{1+x^2}", "x^2+1"),
]


def test_a_verdict_does_not_depend_on_wall_time_passing_without_cpu_use(monkeypatch):
    """A starved process (2 cores at load 13) sees wall time pass while it computes nothing; the deadlines are CPU
    time, so a correct answer stays CORRECT (under wall-clock deadlines every one here was a cached TIMEOUT).
    math-verify stays real: each verification is only preceded by a wait that uses no CPU."""
    import math_verify

    real_verify = math_verify.verify

    def descheduled_then_verify(*args, **kwargs):
        time.sleep(0.3)  # wall time passes, no CPU is used: 3 x the grader's deadline
        return real_verify(*args, **kwargs)

    g = MathGrader(timeout_s=0.1)
    for _, gold in ORDINARY:
        g.check_gold(gold)
    monkeypatch.setattr(math_verify, "verify", descheduled_then_verify)
    out = g.grade_batch([a for a, _ in ORDINARY], [gold for _, gold in ORDINARY])
    assert [x.outcome for x in out] == [O.CORRECT] * len(ORDINARY)


def test_a_stopped_worker_process_still_gives_the_verdict():
    """The worker process's deadline (its own, and the parent's hard kill) is CPU time too: a worker that is not
    scheduled for longer than timeout + grace (SIGSTOP here) is neither killed nor graded TIMEOUT."""
    import os
    import threading

    with MathGrader(timeout_s=0.1, isolation="process") as g:
        g.grade_batch([r"\boxed{0}"] * len(ORDINARY), [gold for _, gold in ORDINARY])  # golds checked, worker warm
        pid = g._worker._proc.pid
        os.kill(pid, signal.SIGSTOP)
        resume = threading.Timer(1.5, os.kill, (pid, signal.SIGCONT))  # > the 0.6 s hard deadline, in wall time
        resume.start()
        try:
            out = g.grade_batch([a for a, _ in ORDINARY], [gold for _, gold in ORDINARY])
        finally:
            resume.join()  # the worker runs again whatever happened
        assert [x.outcome for x in out] == [O.CORRECT] * len(ORDINARY)
        assert g.stats.worker_restarts == 0


def test_a_call_past_the_wall_clock_backstop_is_retried_once_and_never_cached(monkeypatch):
    """The wall-clock backstop guards against a hang, it is no verdict: hit once, the call runs again; hit twice,
    the response is graded TIMEOUT but the pair is not cached (graded anew next time)."""
    import math_verify

    from pc_pipelines.rewards import _verify as v

    real_verify = math_verify.verify
    hangs = {"left": 1}

    def hang_then_verify(*args, **kwargs):
        if hangs["left"] > 0:
            hangs["left"] -= 1
            time.sleep(5.0)  # interrupted by the backstop (shortened below); no CPU used
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(v, "WALL_BACKSTOP_MIN_S", 0.3)
    monkeypatch.setattr(v, "WALL_BACKSTOP_FACTOR", 1.0)
    g = MathGrader(timeout_s=0.2)
    g.check_gold("357")
    monkeypatch.setattr(math_verify, "verify", hang_then_verify)
    assert g.grade(r"\boxed{357}", "357").outcome is O.CORRECT  # one hang: retried, graded
    hangs["left"] = 2
    assert g.grade(r"\boxed{0357}", "357").outcome is O.TIMEOUT  # two: a timeout...
    assert g.grade(r"\boxed{0357}", "357").outcome is O.CORRECT  # ...not remembered
    assert (g.stats.cache_hits, g.stats.cache_misses) == (0, 3)


# ---------------------------------------------------------------------------------------------------------------
# gold and argument errors
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_gold", ["}{", "", "   ", r"\frac{1}{"])
def test_unparsable_gold_raises_value_error(bad_gold):
    g = MathGrader(timeout_s=1.0)
    with pytest.raises(ValueError, match="dataset error") as err:
        g.grade(r"\boxed{1}", bad_gold)
    assert repr(bad_gold.strip()) in str(err.value)
    with pytest.raises(ValueError, match="cannot be graded"):
        g.check_gold(bad_gold)
    with pytest.raises(ValueError):  # also when the response has no box at all: the gold is checked first
        g.grade_batch(["no box", "no box"], ["357", bad_gold])


@pytest.mark.parametrize(
    "good_gold",
    ["357", r"\frac{1}{2}", r"\frac12", "$x^2$", r"\boxed{12}", "0.5", " 42 ", r"\pi"],
)
def test_good_golds_pass_check(good_gold):
    MathGrader(timeout_s=1.0).check_gold(good_gold)


def test_mismatched_lengths_raise():
    g = MathGrader(timeout_s=1.0)
    with pytest.raises(ValueError, match="2 responses but 1 golds"):
        g.grade_batch(["a", "b"], ["1"])
    with pytest.raises(ValueError, match="truncated"):
        g.grade_batch(["a", "b"], ["1", "1"], truncated=[True])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_s": 0},
        {"timeout_s": float("inf")},
        {"cache_size": -1},
        {"overlong_reward": float("nan")},
        {"max_answer_chars": 0},
        {"isolation": "thread"},
    ],
)
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError, match="MathGrader"):
        MathGrader(**kwargs)


# ---------------------------------------------------------------------------------------------------------------
# threads, worker process, signals
# ---------------------------------------------------------------------------------------------------------------


def test_grading_from_a_non_main_thread_works_and_respects_the_timeout():
    with MathGrader(timeout_s=0.5) as g:
        warm, _ = run_in_thread(lambda: g.grade_batch([r"\boxed{000357}", r"\boxed{358}"], ["357", "357"]))
        assert [x.outcome for x in warm] == [O.CORRECT, O.WRONG]
        cpu0 = g._worker._cpu_s()
        slow, wall = run_in_thread(lambda: g.grade(SLOW_ANSWER, "357"))
        assert slow.outcome is O.TIMEOUT and slow.reward == 0.0
        assert g._worker._cpu_s() - cpu0 < 0.5 + SLACK_S  # the worker's deadline is its CPU time
        assert wall < wall_backstop(0.5)
        after, _ = run_in_thread(lambda: g.grade_batch([r"\boxed{0357}", SLOW_ANSWER], ["357", "357"]))
        assert [x.outcome for x in after] == [
            O.CORRECT,
            O.TIMEOUT,
        ]  # the timeout came from the cache
        with pytest.raises(ValueError, match="dataset error"):
            run_in_thread(lambda: g.grade(r"\boxed{1}", "}{"))
        assert g.stats.worker_restarts == 0  # the worker's own alarm handled the timeout


def test_worker_is_killed_and_replaced_past_the_hard_deadline():
    """With the worker's alarm off (tests only), only the parent's hard deadline stops a runaway verification."""
    with MathGrader(timeout_s=0.3) as g:
        g._worker_alarm = False
        run_in_thread(lambda: g.grade(r"\boxed{1}", "357"))  # start the worker outside the timed call
        out, wall = run_in_thread(lambda: g.grade_batch([r"\boxed{357}", SLOW_ANSWER, r"\boxed{000357}"], ["357"] * 3))
        assert [x.outcome for x in out] == [O.CORRECT, O.TIMEOUT, O.CORRECT]
        assert g.stats.worker_restarts == 1
        assert wall < 10.0  # one hard deadline (0.8 s) + one worker start
        nxt, _ = run_in_thread(lambda: g.grade(r"\boxed{12}", "12"))
        assert nxt.outcome is O.CORRECT


def test_process_isolation_on_the_main_thread():
    with MathGrader(timeout_s=0.5, isolation="process") as g:
        out = g.grade_batch([r"\boxed{000357}", r"\boxed{358}", SLOW_ANSWER], ["357"] * 3)
        assert [x.outcome for x in out] == [O.CORRECT, O.WRONG, O.TIMEOUT]
        assert g.stats.cache_misses == 3


@pytest.mark.parametrize("sig, timer, lowest", [
    (signal.SIGALRM, signal.ITIMER_REAL, 95.0),  # the wall-clock backstop borrows SIGALRM (pytest-timeout's)
    (signal.SIGPROF, signal.ITIMER_PROF, 90.0),  # the CPU-time deadline SIGPROF (a sampling profiler's): less the
], ids=["sigalrm", "sigprof"])                  # CPU time used meanwhile
def test_previous_handler_and_timer_are_restored(sig, timer, lowest):
    """An outer handler and timer of either signal the guard borrows are given back as found; an outer timer that
    expires while the guard holds it still fires, right after."""
    fired = []

    def outer(signum, frame):
        fired.append(signum)

    old = signal.signal(sig, outer)
    try:
        signal.setitimer(timer, 100.0)
        g = MathGrader(timeout_s=0.2)
        assert g.grade(SLOW_ANSWER, "357").outcome is O.TIMEOUT
        assert g.grade(r"\boxed{357}", "357").outcome is O.CORRECT
        assert signal.getsignal(sig) is outer
        remaining, _ = signal.getitimer(timer)
        assert lowest < remaining <= 100.0
        assert fired == []
        signal.setitimer(timer, 0.05)
        assert g.grade(r"\boxed{9^{9^{10}}}", "357").outcome is O.TIMEOUT
        _busy(0.05)  # CPU time passes, so wall time does too: either timer has expired
        assert fired == [sig]
    finally:
        signal.setitimer(timer, 0)
        signal.signal(sig, old)


def _busy(seconds: float) -> None:
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        pass


class _SlowFinalizer:
    def __del__(self):
        _busy(0.4)


class _Referent:
    pass


def _finalized_by_del():
    _SlowFinalizer()  # finalized at once, and the 0.1 s deadline lands inside its __del__


def _finalized_by_weakref_callback():
    import weakref

    obj = _Referent()
    ref = weakref.ref(obj, lambda _r: _busy(0.4))  # noqa: F841 - the callback runs when obj dies
    del obj


@pytest.mark.parametrize("finalize", [_finalized_by_del, _finalized_by_weakref_callback], ids=["__del__", "weakref"])
def test_a_deadline_inside_a_finalizer_is_neither_reported_nor_lost(finalize):
    """Python cannot raise out of a finalizer: it hands the exception to sys.unraisablehook and carries on. CI saw
    pytest's hook fail on such a deadline (formatting a sympy-deep traceback: RecursionError). The guard must keep
    it away from the hook, and the re-fire must still stop the work that follows."""
    from pc_pipelines.rewards._verify import AlarmGuard

    def work():
        finalize()
        while True:
            pass

    seen = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda args: seen.append(args.exc_type)
    try:
        with AlarmGuard() as guard:
            t0 = time.monotonic()
            ok, out = guard.run(work, 0.1)
            wall = time.monotonic() - t0
        restored = sys.unraisablehook
    finally:
        sys.unraisablehook = old_hook
    assert (ok, out) == (False, None)
    assert wall < 0.4 + SLACK_S  # a re-fire stopped the loop (after the finalizer's busy 0.4 s at the latest)
    assert seen == []
    assert restored is not None and restored.__name__ == "<lambda>"  # the previous hook is back after the guard


def test_other_unraisables_still_reach_the_previous_hook():
    from pc_pipelines.rewards._verify import AlarmGuard

    class Broken:
        def __del__(self):
            raise ValueError("from a finalizer")

    seen = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda args: seen.append(args.exc_type)
    try:
        with AlarmGuard() as guard:
            ok, _ = guard.run(lambda: Broken() and None, 5.0)
    finally:
        sys.unraisablehook = old_hook
    assert ok is True
    assert seen == [ValueError]


def test_a_gold_that_misses_its_first_deadline_is_parsed_again_before_it_is_called_too_slow():
    """CI on a busy 2-core machine once quarantined a MinervaMath gold whose parse took over the 5 s gold deadline
    (271 of 272 rows kept). A missed deadline now gets one retry under a long one; only a second miss is refused."""
    from pc_pipelines.rewards import _verify as v

    class FirstTryLate:  # the guard's contract: (False, None) when the deadline passed first
        backstop_hit = False  # the CPU-time deadline, not the wall-clock backstop

        def __init__(self, late: int) -> None:
            self.late, self.deadlines = late, []

        def run(self, fn, timeout_s, *args):
            self.deadlines.append(timeout_s)
            return (False, None) if len(self.deadlines) <= self.late else (True, fn(*args))

    once = FirstTryLate(late=1)
    ok, parsed = v.gold_under_guard(v.GoldCache(8), once, "\\frac{1}{2}", 2.0)
    assert ok and parsed and once.deadlines == [v.GOLD_MIN_TIMEOUT_S, v.GOLD_RETRY_TIMEOUT_S]
    twice = FirstTryLate(late=2)
    ok, reason = v.gold_under_guard(v.GoldCache(8), twice, "\\frac{1}{2}", 2.0)
    assert not ok and reason == "parsing it took longer than the 5 s timeout, and 60 s on a retry"
    hung = FirstTryLate(late=2)
    hung.backstop_hit = True  # both runs ended on the wall-clock backstop: no verdict on the gold, none remembered
    cache = v.GoldCache(8)
    ok, reason = v.gold_under_guard(cache, hung, "\\frac{1}{2}", 2.0)
    assert not ok and v.HUNG_NOTE in reason and cache.get("\\frac{1}{2}") is None
    assert v.gold_deadline(2.0) == v.GOLD_MIN_TIMEOUT_S + v.GOLD_RETRY_TIMEOUT_S
