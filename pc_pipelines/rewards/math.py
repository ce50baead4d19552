"""Binary math reward: the last ``\\boxed{...}`` of a response, verified against the gold answer with math-verify.

Public API (re-exported by ``pc_pipelines.rewards``)::

    math_reward(response, gold) -> float                      # 1.0 or 0.0, module-level default grader
    MathGrader(timeout_s=2.0, cache_size=65536, overlong_reward=0.0, *, max_answer_chars=1000, isolation="auto")
        .grade(response, gold, truncated=False) -> Grade
        .grade_batch(responses, golds, truncated=None) -> list[Grade]    # one generation round
        .rewards(responses, golds, truncated=None) -> np.ndarray (float64)
        .check_gold(gold) -> None                                         # raises ValueError for a bad gold
        .graded_gold(gold) -> str                                         # the gold as graded (maybe normalized)
        .stats -> GraderStats                                             # per-outcome counts, cache hits/misses
    GradeOutcome: CORRECT | WRONG | NO_BOXED | UNPARSABLE | TIMEOUT | TRUNCATED
    Grade(reward, outcome, answer)

Model output never makes grading raise or hang (a bad answer scores 0); a gold with no math expression raises
ValueError naming the gold and the fix (a dataset error). What happens to one response, step by step, gold
answers, and why timeouts are CPU time and take two mechanisms (SIGPROF on the main thread, a worker process
elsewhere): docs/GRADING.md.
"""
from __future__ import annotations

import logging
import math as _math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

import numpy as np

from . import _verify as _v
from .extract import extract_boxed
from .normalize import normalize

log = logging.getLogger(__name__)

__all__ = [
    "Grade",
    "GradeOutcome",
    "GraderStats",
    "MathGrader",
    "default_grader",
    "extract_boxed",
    "math_reward",
]


class GradeOutcome(str, Enum):
    """Why a response got its reward. Only CORRECT scores 1.0; TRUNCATED scores the grader's overlong_reward."""

    CORRECT = "correct"
    WRONG = "wrong"
    NO_BOXED = "no_boxed"
    UNPARSABLE = "unparsable"
    TIMEOUT = "timeout"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class Grade:
    reward: float
    outcome: GradeOutcome
    answer: str | None
    """The stripped content of the last complete box, or None if the response has none."""


@dataclass
class GraderStats:
    """Counters since the grader was created (``MathGrader.stats`` returns a copy).

    ``cache_hits``: responses answered from the LRU cache (every response, duplicates included, whose pair was
    already cached when its batch started). ``cache_misses``: distinct pairs actually verified by math-verify
    (= verifications). ``batch_duplicates``: responses whose uncached pair already occurred earlier in the same
    batch (verified once with it, counted in neither). Responses that never reach verification (TRUNCATED, NO_BOXED,
    empty or overlong content) are counted in none of the three.
    """

    outcomes: dict[GradeOutcome, int] = field(default_factory=lambda: {o: 0 for o in GradeOutcome})
    cache_hits: int = 0
    cache_misses: int = 0
    batch_duplicates: int = 0
    worker_restarts: int = 0

    @property
    def graded(self) -> int:
        return sum(self.outcomes.values())

    def as_dict(self) -> dict[str, int]:
        d = {f"outcome_{o.value}": n for o, n in self.outcomes.items()}
        d.update(
            graded=self.graded,
            cache_hits=self.cache_hits,
            cache_misses=self.cache_misses,
            batch_duplicates=self.batch_duplicates,
            worker_restarts=self.worker_restarts,
        )
        return d


_VERIFIED = {
    _v.CORRECT: GradeOutcome.CORRECT,
    _v.WRONG: GradeOutcome.WRONG,
    _v.UNPARSABLE: GradeOutcome.UNPARSABLE,
    _v.TIMEOUT: GradeOutcome.TIMEOUT,
    _v.HUNG: GradeOutcome.TIMEOUT,  # the wall-clock backstop, twice: graded as a timeout but never cached
}

_HARD_DEADLINE_GRACE_S = 0.5


class MathGrader:
    """Grades responses against gold answers; see the module docstring for the rules."""

    def __init__(
        self,
        timeout_s: float = 2.0,
        cache_size: int = 65536,
        overlong_reward: float = 0.0,
        *,
        max_answer_chars: int = 1000,
        isolation: Literal["auto", "process"] = "auto",
    ) -> None:
        if not (isinstance(timeout_s, (int, float)) and _math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"MathGrader timeout_s={timeout_s!r}: must be a finite number > 0 (seconds), e.g. 2.0")
        if not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"MathGrader cache_size={cache_size!r}: must be an int >= 0 (0 disables the cache)")
        if not (isinstance(overlong_reward, (int, float)) and _math.isfinite(overlong_reward)):
            raise ValueError(f"MathGrader overlong_reward={overlong_reward!r}: must be a finite number, e.g. 0.0")
        if not isinstance(max_answer_chars, int) or max_answer_chars < 1:
            raise ValueError(f"MathGrader max_answer_chars={max_answer_chars!r}: must be an int >= 1, e.g. 1000")
        if isolation not in ("auto", "process"):
            raise ValueError(f"MathGrader isolation={isolation!r}: must be 'auto' or 'process'")
        self.timeout_s = float(timeout_s)
        self.cache_size = cache_size
        self.overlong_reward = float(overlong_reward)
        self.max_answer_chars = max_answer_chars
        self.isolation = isolation
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._golds_inline = _v.GoldCache()  # gold -> (True, parsed) | (False, reason), parsed in this process
        self._golds_worker = _v.GoldCache()  # gold -> (True, None) | (False, reason), as the worker found them
        self._stats = GraderStats()
        self._worker: _v.Worker | None = None
        self._worker_alarm = True  # tests only: False leaves the worker's timeouts to the parent's hard kill
        self._finalizer: weakref.finalize | None = None

    # -- public ------------------------------------------------------------------------------------------------
    def grade(self, response: str, gold: str, truncated: bool = False) -> Grade:
        return self.grade_batch([response], [gold], [truncated])[0]

    def rewards(
        self,
        responses: Sequence[str],
        golds: Sequence[str],
        truncated: Sequence[bool] | None = None,
    ) -> np.ndarray:
        return np.fromiter(
            (g.reward for g in self.grade_batch(responses, golds, truncated)),
            dtype=np.float64,
        )

    def grade_batch(
        self,
        responses: Sequence[str],
        golds: Sequence[str],
        truncated: Sequence[bool] | None = None,
    ) -> list[Grade]:
        """Grades of one generation round, in order. ``truncated[i]`` is True when response i stopped on the
        length limit. Raises ValueError only for mismatched lengths or an unparsable gold (dataset errors)."""
        n = len(responses)
        if len(golds) != n:
            raise ValueError(f"grade_batch: {n} responses but {len(golds)} golds; pass one gold per response")
        if truncated is not None and len(truncated) != n:
            raise ValueError(f"grade_batch: {n} responses but {len(truncated)} truncated flags")
        gold_keys = [g.strip() if isinstance(g, str) else str(g).strip() for g in golds]
        with self._lock:
            use_worker = self.isolation == "process" or not _v.alarm_available()
            forms = self._check_golds(dict.fromkeys(gold_keys), use_worker)
            gold_keys = [forms[g] for g in gold_keys]  # a gold that parses only normalized is graded normalized

            grades: list[Grade | None] = [None] * n
            pending: dict[tuple[str, str], list[int]] = {}
            st = self._stats
            for i in range(n):
                resp = responses[i]
                answer = extract_boxed(resp) if isinstance(resp, str) else None
                if truncated is not None and truncated[i]:
                    grades[i] = Grade(self.overlong_reward, GradeOutcome.TRUNCATED, answer)
                elif answer is None:
                    grades[i] = Grade(0.0, GradeOutcome.NO_BOXED, None)
                elif not answer or len(answer) > self.max_answer_chars:
                    grades[i] = Grade(0.0, GradeOutcome.UNPARSABLE, answer)
                else:
                    key = (answer, gold_keys[i])
                    if key in pending:
                        pending[key].append(i)
                        st.batch_duplicates += 1
                        continue
                    hit = self._cache_get(key)
                    if hit is not None:
                        st.cache_hits += 1
                        grades[i] = self._grade_of(hit, answer)
                    else:
                        pending[key] = [i]

            if pending:
                keys = list(pending)
                st.cache_misses += len(keys)
                names = self._verify_worker(keys) if use_worker else self._verify_inline(keys)
                for key, name in zip(keys, names):
                    if name != _v.HUNG:
                        self._cache_put(key, name)
                    if name == _v.TIMEOUT:
                        log.info(
                            "math grading timed out after %.3g s on answer %.80r",
                            self.timeout_s,
                            key[0],
                        )
                    grade = self._grade_of(name, key[0])
                    for i in pending[key]:
                        grades[i] = grade

            for g in grades:
                st.outcomes[g.outcome] += 1  # type: ignore[union-attr]
            if self._worker is not None:
                st.worker_restarts = self._worker.restarts
        log.debug("graded %d responses (%d verified)", n, len(pending))
        return grades  # type: ignore[return-value]

    def check_gold(self, gold: str) -> None:
        """Raises ValueError (naming the gold and the fix) if math-verify cannot parse this gold answer, neither as
        written nor normalized (``normalize.normalize``)."""
        self.graded_gold(gold)

    def graded_gold(self, gold: str) -> str:
        """The gold string this grader grades against: ``gold`` stripped if math-verify parses it, else its
        normalized form (``62.5%`` -> ``62.5``, ``np.arcsin(x)`` -> ``\\arcsin(x)``; ``normalize.py``) if that
        parses. Raises ValueError (naming the gold and the fix) if neither does."""
        key = gold.strip() if isinstance(gold, str) else str(gold).strip()
        with self._lock:
            return self._check_golds({key: None}, self.isolation == "process" or not _v.alarm_available())[key]

    @property
    def stats(self) -> GraderStats:
        with self._lock:
            s = self._stats
            return GraderStats(
                dict(s.outcomes),
                s.cache_hits,
                s.cache_misses,
                s.batch_duplicates,
                s.worker_restarts,
            )

    def close(self) -> None:
        """Stops the worker process, if one was started (a later off-main-thread call starts a new one)."""
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------------
    def _grade_of(self, name: str, answer: str) -> Grade:
        outcome = _VERIFIED[name]
        return Grade(1.0 if outcome is GradeOutcome.CORRECT else 0.0, outcome, answer)

    def _cache_get(self, key: tuple[str, str]) -> str | None:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
        return hit

    def _cache_put(self, key: tuple[str, str], name: str) -> None:
        if self.cache_size <= 0:
            return
        self._cache[key] = name
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _get_worker(self) -> _v.Worker:
        if self._worker is None:
            self._worker = _v.Worker(self.timeout_s, _HARD_DEADLINE_GRACE_S, use_alarm=self._worker_alarm)
            self._finalizer = weakref.finalize(self, self._worker.close)
        return self._worker

    def _check_golds(self, golds: dict[str, None], use_worker: bool) -> dict[str, str]:
        """gold -> the string graded against it (itself, or its normalized form when only that parses); raises
        ValueError when some gold parses neither way."""
        bad = self._gold_reasons(golds, use_worker)
        forms = {g: g for g in golds}
        if bad:
            retry = {g: t for g in bad for t, rules in (normalize(g),) if rules and t}
            bad_again = self._gold_reasons(dict.fromkeys(retry.values()), use_worker) if retry else {}
            still = {}
            for g, reason in bad.items():
                t = retry.get(g)
                if t is not None and t not in bad_again:
                    forms[g] = t
                else:
                    still[g] = reason + (f"; nor from its normalized form {t!r}" if t is not None else "")
            bad = still
        if bad:
            gold, reason = next(iter(bad.items()))
            more = f" (and {len(bad) - 1} more unparsable golds in this batch)" if len(bad) > 1 else ""
            raise ValueError(
                f"gold answer {gold!r} cannot be graded: {reason}{more}. This is a dataset error, not a model "
                f"error. Fix the gold so that math-verify parses it (e.g. '357', '\\frac{{1}}{{2}}', '$x^2$'; check "
                f"with math_verify.parse({_v.gold_latex(gold)!r})), or drop the row in the data loader "
                "(MathGrader.check_gold raises this same error)."
            )
        return forms

    def _gold_reasons(self, golds: dict[str, None], use_worker: bool) -> dict[str, str]:
        """gold -> why math-verify cannot parse it as written, for the golds that fail (each parsed once, cached)."""
        bad: dict[str, str] = {}
        if use_worker:
            unknown = [g for g in golds if self._golds_worker.get(g) is None]
            if unknown:
                for g, reason in self._get_worker().check_golds(unknown).items():
                    if reason is not None and _v.HUNG_NOTE in reason:
                        bad[g] = reason  # not a verdict on the gold: not remembered
                    else:
                        self._golds_worker.put(g, (reason is None, reason))
            for g in golds:
                if g in bad:
                    continue
                ok, reason = self._golds_worker.get(g)  # type: ignore[misc]
                if not ok:
                    bad[g] = reason
        else:
            unknown = [g for g in golds if self._golds_inline.get(g) is None]
            if unknown:
                _v.warm_up()
                with _v.AlarmGuard() as guard:
                    for g in unknown:
                        ok, val = _v.gold_under_guard(self._golds_inline, guard, g, self.timeout_s)
                        if not ok and _v.HUNG_NOTE in val:
                            bad[g] = val  # not a verdict on the gold: not remembered (gold_under_guard)
            for g in golds:
                if g in bad:
                    continue
                ok, val = self._golds_inline.get(g)  # type: ignore[misc]
                if not ok:
                    bad[g] = val
        return bad

    def _verify_inline(self, keys: list[tuple[str, str]]) -> list[str]:
        out = []
        _v.warm_up()
        with _v.AlarmGuard() as guard:
            for answer, gold in keys:
                ok, parsed = _v.gold_under_guard(self._golds_inline, guard, gold, self.timeout_s)
                out.append(_v.answer_under_guard(guard, answer, parsed, self.timeout_s) if ok else _v.UNPARSABLE)
        return out

    def _verify_worker(self, keys: list[tuple[str, str]]) -> list[str]:
        worker = self._get_worker()
        out = worker.grade_pairs(keys)
        self._stats.worker_restarts = worker.restarts
        return out


_default: MathGrader | None = None
_default_lock = threading.Lock()


def default_grader() -> MathGrader:
    """The module-level grader behind ``math_reward`` (defaults: 2 s timeout, 65536-entry cache)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathGrader()
        return _default


def math_reward(response: str, gold: str) -> float:
    """1.0 if the last ``\\boxed{...}`` of ``response`` equals ``gold`` under math-verify, else 0.0. Never raises
    on model output, never hangs (2 s timeout); raises ValueError only if the gold itself cannot be parsed."""
    return default_grader().grade(response, gold).reward
