"""math-verify calls under a deadline: an in-process SIGALRM guard (main thread) and a killable worker process.

Internal to ``pc_pipelines.rewards``; see ``pc_pipelines/rewards/math.py`` for the design and the public API.

Everything here speaks in plain strings (outcome names, error messages) so that the worker process and the
parent exchange only small picklable tuples; sympy objects never cross the process boundary.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from ..errors import shell_command
from .normalize import normalize

log = logging.getLogger(__name__)

T = TypeVar("T")

# Outcome names exchanged between the verifier and the grader (values of math.GradeOutcome).
CORRECT, WRONG, UNPARSABLE, TIMEOUT = "correct", "wrong", "unparsable", "timeout"
HUNG = "hung"
"""Not a verdict: the call hit the wall-clock backstop twice without using up its CPU-time deadline (the process was
stopped or starved for minutes). Graded as a timeout, never cached."""
HUNG_NOTE = "without using its CPU-time deadline (process stopped or starved; not cached)"

GOLD_MIN_TIMEOUT_S = 5.0
"""A gold is parsed once per distinct gold, under max(timeout_s, 5 s): a load spike must not turn a good gold
into a "dataset error"."""

GOLD_RETRY_TIMEOUT_S = 60.0
"""A gold that misses its first deadline is parsed once more under this one before it is called too slow: on a
busy machine (CI running two test suites on 2 cores) a benchmark gold that takes ~5 ms idle once took over 5 s, and
a good problem was quarantined. A gold that really hangs costs this once (the result is cached)."""

WALL_BACKSTOP_MIN_S = 60.0
WALL_BACKSTOP_FACTOR = 30.0
"""Deadlines are CPU time (see AlarmGuard); the wall-clock limit behind one of ``t`` CPU seconds is
``max(WALL_BACKSTOP_MIN_S, WALL_BACKSTOP_FACTOR * t)``: a hang guard, never reached by a loaded machine's slowness."""

_MAX_TIMER_S = 1e6
"""setitimer's limit here (a larger value overflows time_t): ~11 days, i.e. no deadline."""

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_REFIRE_S = 0.05
"""After the deadline the timer re-fires every 50 ms (of CPU time), in case library code swallowed the first exception with a
bare ``except:`` and carried on computing."""


class GoldError(Exception):
    """A gold answer math-verify cannot parse (a dataset error); the grader turns it into a ValueError."""


class _Deadline(BaseException):
    """Raised by the SIGALRM handler. A BaseException on purpose: math-verify and sympy catch ``Exception``
    broadly (and math-verify also catches its own TimeoutException, silently returning False / []), and a
    timeout must reach us, not be mistaken for "wrong" or "unparsable"."""


# --------------------------------------------------------------------------------------------------------------
# SIGALRM guard (main thread only)
# --------------------------------------------------------------------------------------------------------------


def alarm_available() -> bool:
    """True when SIGALRM-based deadlines work here: POSIX, and the calling thread is the main thread."""
    return (
        hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
    ) and threading.current_thread() is threading.main_thread()


def wall_backstop(timeout_s: float) -> float:
    """The wall-clock limit behind a CPU-time deadline of ``timeout_s``: only a hang guard (a call that waits without
    computing), far beyond what load can stretch a deadline to (2 cores at load 13 give a process ~15 % of a core)."""
    return max(WALL_BACKSTOP_MIN_S, WALL_BACKSTOP_FACTOR * timeout_s)


class AlarmGuard:
    """Runs callables under a deadline in CPU seconds of the calling (main) thread, so that a verdict does not depend
    on how busy the machine is: ``setitimer(ITIMER_PROF)`` + SIGPROF, whose handler checks ``time.thread_time()``
    (ITIMER_PROF counts the whole process: CPU used by other threads re-arms it for the rest). Behind it a wall-clock
    backstop, ``setitimer(ITIMER_REAL)`` + SIGALRM at :func:`wall_backstop`, against a call that hangs without
    computing; ``run`` reports that one apart (``backstop_hit``), as it is not a verdict on the input.

    Use as a context manager around a series of calls (the handlers are installed once) and call ``run`` per item.
    Previously installed SIGALRM / SIGPROF handlers and pending ITIMER_REAL / ITIMER_PROF timers (e.g.
    pytest-timeout's) are restored on exit; if such an outer timer would have fired while we held it, it is re-armed
    to fire right away.
    """

    def __init__(self) -> None:
        self._active = False
        self._old_handler: Any = None
        self._old_prof_handler: Any = None
        self._old_timer: tuple[float, float] = (0.0, 0.0)
        self._old_prof_timer: tuple[float, float] = (0.0, 0.0)
        self._entered_at = 0.0
        self._entered_cpu = 0.0
        self._old_unraisablehook: Any = None
        self._cpu_deadline = 0.0  # time.thread_time() at which the running call's deadline passes
        self.backstop_hit = False
        """True when the last ``run`` ended on the wall-clock backstop (not on its CPU-time deadline)."""

    def _handler(self, signum, frame):  # SIGALRM: the wall-clock backstop
        if self._active:
            self.backstop_hit = True
            raise _Deadline()

    def _prof_handler(self, signum, frame):  # SIGPROF: process CPU time passed; the deadline is this thread's
        if not self._active:
            return
        left = self._cpu_deadline - time.thread_time()
        if left > 0:  # other threads' CPU fired it early: wait for the rest of ours
            signal.setitimer(signal.ITIMER_PROF, max(left, 1e-3), _REFIRE_S)
            return
        raise _Deadline()

    def _unraisablehook(self, args) -> None:
        """Drops a deadline that landed where Python cannot raise (a ``__del__``, a weakref or gc callback).

        Such a deadline is lost, not harmful: the timer re-fires every ``_REFIRE_S`` until ``run`` sees one. What
        must not happen is reporting it: the default hook (and pytest's) formats the traceback, which at sympy's
        recursion depth itself fails with RecursionError. Every other unraisable goes to the previous hook.
        """
        if args.exc_type is not None and issubclass(args.exc_type, _Deadline):
            return
        self._old_unraisablehook(args)

    def __enter__(self) -> AlarmGuard:
        if not alarm_available():
            raise RuntimeError("AlarmGuard needs SIGALRM and SIGPROF on the main thread")
        self._old_handler = signal.signal(signal.SIGALRM, self._handler)
        self._old_prof_handler = signal.signal(signal.SIGPROF, self._prof_handler)
        self._old_timer = signal.setitimer(signal.ITIMER_REAL, 0)
        self._old_prof_timer = signal.setitimer(signal.ITIMER_PROF, 0)
        self._entered_at = time.monotonic()
        self._entered_cpu = time.process_time()
        self._old_unraisablehook = sys.unraisablehook
        sys.unraisablehook = self._unraisablehook
        return self

    def __exit__(self, *exc) -> None:
        self._disarm()
        if sys.unraisablehook == self._unraisablehook:  # someone may have replaced it since: leave theirs alone
            sys.unraisablehook = self._old_unraisablehook
        for signum, old in ((signal.SIGALRM, self._old_handler), (signal.SIGPROF, self._old_prof_handler)):
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
        for which, (delay, interval), used in (
            (signal.ITIMER_REAL, self._old_timer, time.monotonic() - self._entered_at),
            (signal.ITIMER_PROF, self._old_prof_timer, time.process_time() - self._entered_cpu),
        ):
            if delay > 0:
                signal.setitimer(which, max(delay - used, 1e-4), interval)

    def _disarm(self) -> None:
        while True:  # a last signal may land inside this block: retry until all three statements ran
            try:
                self._active = False
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
                return
            except _Deadline:
                continue

    def run(self, fn: Callable[..., T], timeout_s: float, *args) -> tuple[bool, T | None]:
        """``(True, fn(*args))``, or ``(False, None)`` if ``timeout_s`` CPU seconds (or the wall-clock backstop,
        then ``backstop_hit`` is True) passed first. Other exceptions propagate."""
        self.backstop_hit = False
        try:
            try:
                self._cpu_deadline = time.thread_time() + timeout_s
                self._active = True
                signal.setitimer(signal.ITIMER_REAL, min(wall_backstop(timeout_s), _MAX_TIMER_S), _REFIRE_S)
                signal.setitimer(signal.ITIMER_PROF, min(timeout_s, _MAX_TIMER_S), _REFIRE_S)
                out = fn(*args)
            finally:
                self._disarm()
        except _Deadline:
            return False, None
        return True, out


# --------------------------------------------------------------------------------------------------------------
# math-verify calls (no timeout of their own: the caller provides it)
# --------------------------------------------------------------------------------------------------------------

_mv_ready = False
_warm = False


def _math_verify():
    """Import math-verify lazily (it imports sympy: ~1 s) and silence its "timeout is disabled" warning, which
    is expected here: we pass ``parsing_timeout=None`` / ``timeout_seconds=None`` and enforce deadlines
    ourselves (its own guard uses ``signal.alarm``, whole seconds only, main thread only, and swallows the
    timeout into a plain False / [])."""
    global _mv_ready
    import math_verify

    if not _mv_ready:

        class _DropTimeoutDisabled(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                return "Timeout is disabled" not in str(record.msg)

        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutDisabled())
        _mv_ready = True
    return math_verify


def warm_up() -> None:
    """First-use costs, paid outside any deadline: importing sympy, compiling math-verify's regexes, the LaTeX
    parser's first run, ``parse_expr``, a first ``verify``. Cold, the first call of a process takes ~0.3-0.5 s,
    which a short timeout would misreport as a TIMEOUT (cached!) or, for a gold, as a dataset error."""
    global _warm
    if _warm:
        return
    mv = _math_verify()
    gold = mv.parse("\\boxed{\\frac{1}{2}}", parsing_timeout=None)
    for text in (
        "\\boxed{1/2}",
        "\\boxed{x^2+1}",
        "\\boxed{0.5}",
        "\\boxed{(1, 2)}",
        "\\boxed{\\{1,2\\}}",
    ):
        mv.verify(gold, mv.parse(text, parsing_timeout=None), timeout_seconds=None)
    _warm = True


def _has_expr(parsed: list) -> bool:
    return any(not isinstance(p, str) for p in parsed)


def gold_latex(gold: str) -> str:
    """The string handed to math-verify for a gold answer: as is if it already carries a ``\\boxed``/``\\fbox``
    or ``$`` delimiters, else wrapped in ``\\boxed{...}`` (bare LaTeX such as ``\\frac12`` or ``x^2`` is not
    extracted by math-verify without a delimiter: ``parse("\\frac12") == []``)."""
    g = gold.strip()
    if "\\boxed" in g or "\\fbox" in g or "$" in g:
        return g
    return "\\boxed{" + g + "}"


def parse_gold(gold: str) -> list:
    """math-verify's parse of a gold answer; raises GoldError if it yields no sympy expression. (A gold that only
    parses once normalized is handled a level up: ``MathGrader`` grades against the normalized string.)"""
    mv = _math_verify()
    if not gold.strip():
        raise GoldError("the gold answer is empty")
    parsed = mv.parse(gold_latex(gold), parsing_timeout=None)
    if not _has_expr(parsed):
        raise GoldError(f"math-verify extracted no math expression from it (parse -> {parsed!r})")
    return parsed


def has_nonfinite(parsed: list) -> bool:
    """True if a parsed expression holds a numeric part whose value is not finite (oo, -oo, zoo, nan), e.g.
    ``\\infty``, ``\\frac{1}{0}``, ``(\\infty)!``, ``\\ln(0)``, ``\\{1, \\infty\\}``, ``(-\\infty, 2)``.

    Each maximal numeric subexpression (``is_number``: no free symbols) is evaluated with ``evalf``; containers
    (sets, tuples, intervals, matrices, relations) and symbolic expressions are searched below. A convergent
    ``\\sum_{n=1}^{\\infty} 2^{-n}`` or ``\\int_0^\\infty e^{-x} dx`` evaluates to a finite number and passes.

    Why: with sympy 1.14, math-verify grades ``(((\\infty)!)!)!`` (also ``((\\infty)!)!``, ``((99 \\cdot \\infty)!)!``,
    ``|\\{\\ln(0)\\}|``, ...) equal to ANY number, depending on the state of sympy's caches (``factorial(oo)`` claims
    to be a finite integer and ``simplify`` then turns the difference into zero). A policy would learn that
    reward hack, so an answer with a non-finite value is never CORRECT against a gold that has none.
    """
    from sympy import Expr, Float, Integral, Limit, Product, S, Sum
    from sympy.matrices import MatrixBase

    bad = (S.Infinity, S.NegativeInfinity, S.ComplexInfinity, S.NaN)

    def nonfinite_value(
        v,
    ) -> bool:  # v: a number, or an evalf result (a + b*I, or unevaluated, e.g. a Limit)
        if v in bad:
            return True
        if isinstance(v, Float):
            return not v.is_finite
        if v.is_Add or v.is_Mul:
            return any(a in bad or (isinstance(a, Float) and not a.is_finite) for a in v.args)
        return False

    stack = [p for p in parsed if not isinstance(p, str)]
    while stack:
        e = stack.pop()
        if isinstance(e, MatrixBase):
            stack.extend(e)
            continue
        if isinstance(e, Expr) and e.is_number:
            if e.is_Number:
                if nonfinite_value(e):
                    return True
                continue
            try:
                v = e.evalf(15)
            except Exception:  # cannot tell: leave it to math-verify
                log.debug("evalf failed in the non-finite check", exc_info=True)
                continue
            if nonfinite_value(v):
                return True
            continue
        if isinstance(e, (Limit, Integral, Sum, Product)):
            continue  # an infinite bound is legitimate; the value, if numeric, was checked above
        stack.extend(getattr(e, "args", ()))
    return False


def check_answer(answer: str, gold_parsed: list) -> str:
    """CORRECT / WRONG / UNPARSABLE for an extracted boxed content against a parsed gold (gold FIRST in verify)."""
    mv = _math_verify()
    parsed = mv.parse("\\boxed{" + answer + "}", parsing_timeout=None)
    if not _has_expr(parsed):  # the golds' fallback, so both sides are read alike (``62.5\\%`` vs gold ``62.5%``)
        normalized, rules = normalize(answer)
        if normalized and rules:
            again = mv.parse("\\boxed{" + normalized + "}", parsing_timeout=None)
            if _has_expr(again):
                parsed = again
    if not parsed:
        return UNPARSABLE
    if mv.verify(gold_parsed, parsed, timeout_seconds=None):
        if has_nonfinite(parsed) and not has_nonfinite(gold_parsed):
            return WRONG  # a math-verify/sympy false positive (see has_nonfinite)
        return CORRECT
    # Only a raw-string fallback (sympy could not parse it) that did not string-match the gold: unparsable.
    return WRONG if _has_expr(parsed) else UNPARSABLE


class GoldCache:
    """Bounded LRU of parsed golds (or their GoldError message); one per process."""

    def __init__(self, size: int = 16384) -> None:
        self.size = size
        self._d: OrderedDict[str, tuple[bool, Any]] = OrderedDict()

    def get(self, gold: str) -> tuple[bool, Any] | None:
        hit = self._d.get(gold)
        if hit is not None:
            self._d.move_to_end(gold)
        return hit

    def put(self, gold: str, value: tuple[bool, Any]) -> None:
        self._d[gold] = value
        self._d.move_to_end(gold)
        while len(self._d) > self.size:
            self._d.popitem(last=False)


def gold_timeout(timeout_s: float) -> float:
    return max(timeout_s, GOLD_MIN_TIMEOUT_S)


def gold_deadline(timeout_s: float) -> float:
    """The longest one gold's parse may take, its retry included (what a parent waits before killing a worker)."""
    return gold_timeout(timeout_s) + GOLD_RETRY_TIMEOUT_S


def gold_under_guard(cache: GoldCache, guard: AlarmGuard, gold: str, timeout_s: float) -> tuple[bool, Any]:
    """``(True, parsed)`` or ``(False, reason)`` for a gold, parsed at most once per cache lifetime, under
    ``gold_timeout(timeout_s)`` (``timeout_s`` is the per-answer timeout)."""
    hit = cache.get(gold)
    if hit is not None:
        return hit
    timeout_s = gold_timeout(timeout_s)
    hung = False
    try:
        ok, parsed = guard.run(parse_gold, timeout_s, gold)
        if not ok:  # a gold that really computes that long, or a hang: once more with a long deadline
            ok, parsed = guard.run(parse_gold, GOLD_RETRY_TIMEOUT_S, gold)
            hung = not ok and guard.backstop_hit
        if ok:
            value = (True, parsed)
        elif hung:
            value = (False, f"parsing it hit the {wall_backstop(GOLD_RETRY_TIMEOUT_S):g} s wall-clock limit {HUNG_NOTE}")
        else:
            value = (False, f"parsing it took longer than the {timeout_s:g} s timeout, and {GOLD_RETRY_TIMEOUT_S:g} s "
                     "on a retry")
    except GoldError as e:
        value = (False, str(e))
    except Exception as e:  # math-verify/sympy internals: any failure is "unparsable gold"
        value = (False, f"parsing it raised {type(e).__name__}: {e}")
    if not hung:
        cache.put(gold, value)
    return value


def answer_under_guard(guard: AlarmGuard, answer: str, gold_parsed: list, timeout_s: float) -> str:
    """The outcome name of one (answer, parsed gold) pair under the deadline; never raises. A run that hits the
    wall-clock backstop is run once more; a second such hit is HUNG (not a verdict)."""
    for _ in range(2):
        try:
            ok, outcome = guard.run(check_answer, timeout_s, answer, gold_parsed)
        except RecursionError:
            return UNPARSABLE
        except Exception:
            log.debug("verification raised; graded unparsable", exc_info=True)
            return UNPARSABLE
        if ok:
            return outcome
        if not guard.backstop_hit:
            return TIMEOUT
        log.warning("math grading hit the wall-clock backstop on answer %.80r %s", answer, HUNG_NOTE)
    return HUNG


# --------------------------------------------------------------------------------------------------------------
# Worker process (used when the caller is not on the main thread)
# --------------------------------------------------------------------------------------------------------------


def worker_cli(fd: int, timeout_s: float, use_alarm: bool) -> None:
    """Entry point of the worker subprocess (see Worker._start): serve requests on the socket ``fd``."""
    logging.basicConfig(
        level=logging.WARNING,
        format="%(levelname)s math-grader-worker %(name)s: %(message)s",
    )
    _worker_main(Connection(fd), timeout_s, use_alarm)


def _worker_main(conn: Connection, timeout_s: float, use_alarm: bool) -> None:
    """Worker loop: on its own main thread, so the SIGALRM guard works here too; the parent's hard deadline is
    only the backstop for work the alarm cannot interrupt (a long C call that never checks signals).

    Requests: ("golds", [gold, ...]) -> one ("gold", gold, error_or_None) per gold;
              ("pairs", [(answer, gold), ...]) -> one ("pair", index, outcome) per pair (golds normally checked
              before; if one is not, its parse is bracketed by ("gold_start",) and ("beat",));
              ("stop",).
    Each reply also serves as a heartbeat that restarts the parent's per-item deadline.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent, which stops us
    warm_up()  # before "ready": the parent's clock does not run yet
    golds = GoldCache()
    huge = 10.0**9
    conn.send(("ready",))
    with AlarmGuard() as guard:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            if msg[0] == "stop":
                return
            if msg[0] == "golds":
                for gold in msg[1]:
                    ok, val = gold_under_guard(golds, guard, gold, timeout_s if use_alarm else huge)
                    conn.send(("gold", gold, None if ok else val))
            elif msg[0] == "pairs":
                for i, (answer, gold) in enumerate(msg[1]):
                    if golds.get(gold) is None:  # not pre-checked here (worker replaced or LRU-evicted)
                        conn.send(("gold_start",))  # the parent allows a gold's budget for the next reply
                        gold_under_guard(golds, guard, gold, timeout_s if use_alarm else huge)
                        conn.send(("beat",))  # and the answer's budget again from here
                    ok, parsed = gold_under_guard(golds, guard, gold, timeout_s if use_alarm else huge)
                    outcome = (
                        answer_under_guard(guard, answer, parsed, timeout_s if use_alarm else huge)
                        if ok
                        else UNPARSABLE
                    )
                    conn.send(("pair", i, outcome))


class WorkerError(RuntimeError):
    """The worker process could not be started (an environment problem, not a grading outcome)."""


class Worker:
    """A single grading subprocess with a hard, killable per-item deadline.

    Started with ``subprocess`` (``python -c "...worker_cli()"``) and a socketpair carrying pickled tuples, not
    with ``multiprocessing``: "fork" from a multi-threaded parent (Dagster) can deadlock the child, and "spawn" /
    "forkserver" re-import the parent's ``__main__``, which breaks (or re-runs) any script without an
    ``if __name__ == "__main__":`` guard. The start-up cost (~1-2 s: importing sympy) is paid once, before the
    first item's clock starts, and again only after a kill; a replacement is started right after a kill so it
    boots in the background. If the parent dies, the worker sees EOF and exits.
    """

    START_TIMEOUT_S = 120.0

    def __init__(self, timeout_s: float, grace_s: float, use_alarm: bool = True) -> None:
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.use_alarm = use_alarm
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._ready = False

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])  # the directory holding the pc_pipelines package
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        code = (
            "import sys; from pc_pipelines.rewards._verify import worker_cli; "
            f"worker_cli(int(sys.argv[1]), {self.timeout_s!r}, {self.use_alarm!r})"
        )
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", code, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        finally:
            theirs.close()
        self._proc, self._conn, self._ready = proc, Connection(ours.detach()), False

    def _ensure_ready(self) -> None:
        if self._proc is None:
            self._start()
        if self._ready:
            return
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._conn.poll(0.1):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    break
                if msg == ("ready",):
                    self._ready = True
                    return
            if self._proc.poll() is not None:
                break
        code = self._proc.poll()
        self.close()
        raise WorkerError(
            f"the math grading worker process did not start within {self.START_TIMEOUT_S:g} s (exit code {code}); "
            f"it runs `{shell_command(sys.executable, '-c', 'from pc_pipelines.rewards._verify import worker_cli')}` "
            "and must be able "
            "to import pc_pipelines and math_verify (see its stderr above)."
        )

    def _kill(self, why: str) -> None:
        log.warning("math grading worker killed (%s); starting a fresh one", why)
        self.close(kill=True)
        self.restarts += 1
        self._start()  # boots in the background while the caller carries on

    def close(self, kill: bool = False) -> None:
        """Stops the worker: politely (it finishes its current item, 0.2 s at most) or, with ``kill``, at once."""
        proc, conn = self._proc, self._conn
        self._proc, self._conn, self._ready = None, None, False
        if kill and proc is not None and proc.poll() is None:
            proc.kill()
        if conn is not None:
            try:
                if not kill and proc is not None and proc.poll() is None:
                    conn.send(("stop",))
            except (OSError, ValueError):
                pass
            conn.close()
        if proc is not None:
            try:
                proc.wait(0.2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # -- requests ----------------------------------------------------------------------------------------------
    def _cpu_s(self) -> float | None:
        """The worker's CPU seconds so far (user + system, from ``/proc``), or None where that cannot be read."""
        try:
            fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLK_TCK
        except (OSError, ValueError, IndexError, AttributeError):
            return None

    def _recv(self, cpu_limit: float) -> tuple[tuple | None, str]:
        """``(reply, "")``, or ``(None, why)`` when the worker used ``cpu_limit`` CPU seconds (why ``"cpu"``), ran
        past the wall-clock backstop ``wall_backstop(cpu_limit)`` (``"wall"``: not a verdict) or died (``"dead"``)
        first. Where the worker's CPU time cannot be read, ``cpu_limit`` is wall-clock time (``"cpu"``)."""
        start_cpu = self._cpu_s()
        start = time.monotonic()
        wall_limit = wall_backstop(cpu_limit) if start_cpu is not None else cpu_limit
        while True:
            waited = time.monotonic() - start
            try:
                if self._conn.poll(max(0.0, min(0.05, wall_limit - waited))):
                    return self._conn.recv(), ""
            except (EOFError, OSError):
                return None, "dead"
            if self._proc.poll() is not None:
                return None, "dead"
            now_cpu = self._cpu_s() if start_cpu is not None else None
            if now_cpu is not None and now_cpu - start_cpu >= cpu_limit:
                return None, "cpu"
            if time.monotonic() - start >= wall_limit:
                return None, "wall" if start_cpu is not None else "cpu"

    def check_golds(self, golds: list[str]) -> dict[str, str | None]:
        """gold -> None (parsable) or the reason it is not. A gold whose parse hangs past the hard deadline is
        reported as not parsable (the worker is replaced); past the wall-clock backstop, with ``HUNG_NOTE``."""
        out: dict[str, str | None] = {}
        todo = list(golds)
        while todo:
            self._ensure_ready()
            self._conn.send(("golds", todo))
            for gold in todo:
                reply, why = self._recv(gold_deadline(self.timeout_s) + self.grace_s)
                if reply is None:
                    out[gold] = (
                        f"parsing it took longer than the {gold_deadline(self.timeout_s):g} s timeout with its retry "
                        "(worker killed)" if why != "wall" else
                        f"parsing it hit the {wall_backstop(gold_deadline(self.timeout_s)):g} s wall-clock limit "
                        f"{HUNG_NOTE}"
                    )
                    self._kill("gold parse past the hard deadline")
                    break
                out[reply[1]] = reply[2]
            todo = [g for g in todo if g not in out]
        return out

    def grade_pairs(self, pairs: list[tuple[str, str]]) -> list[str]:
        """Outcome names for (answer, gold) pairs whose golds were checked; a pair that hits the hard deadline (CPU
        time) or takes the worker down is TIMEOUT, the worker is replaced and the rest are sent again. A pair that
        hits the wall-clock backstop is sent once more, and is HUNG (not a verdict) the second time."""
        out: list[str | None] = [None] * len(pairs)
        pending = list(range(len(pairs)))
        hung_once: set[int] = set()
        while pending:
            self._ensure_ready()
            self._conn.send(("pairs", [pairs[i] for i in pending]))
            done = 0
            for j in range(len(pending)):
                limit = self.timeout_s + self.grace_s
                reply, why = self._recv(limit)
                while reply is not None and reply[0] in ("gold_start", "beat"):
                    if reply[0] == "gold_start":
                        limit = gold_deadline(self.timeout_s) + self.grace_s
                    else:
                        limit = self.timeout_s + self.grace_s
                    reply, why = self._recv(limit)
                if reply is None:
                    i = pending[j]
                    if why == "wall" and i not in hung_once:
                        hung_once.add(i)
                        done = j  # sent again, after a fresh worker starts
                    else:
                        out[i] = HUNG if why == "wall" else TIMEOUT
                        done = j + 1
                    self._kill({"cpu": "answer verification past the hard deadline", "dead": "it died",
                                "wall": f"no reply within the wall-clock limit {HUNG_NOTE}"}[why])
                    break
                out[pending[reply[1]]] = reply[2]
                done = j + 1
            pending = pending[done:]
        return out  # type: ignore[return-value]
