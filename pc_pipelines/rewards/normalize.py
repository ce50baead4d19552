"""Answer normalization as standard math graders do it, applied only where math-verify parses nothing.

math-verify reads LaTeX, not the conventions of dataset authors: ``62.5%``, ``np.arcsin(10/13)``, ``-1./3``,
``$m_{\\max }=n^{2}-n-1$``, ``E_{1},E_{2}`` (it takes ``E`` for Euler's number and fails on a subscript),
a stray ``$ $`` in the middle of an expression, ``L_{\\odot}``, ``t(0,4]`` (a lost ``\\in``), ``\\$18.90``, ``5\\text{ cm}``,
``30^\\circ``, ``1,000,000``. Each rule below is one such convention, rewritten the way the usual graders
(Hendrycks MATH's ``strip_string``, the Qwen2.5-Math evaluation harness, lm-eval's minerva normalizer) rewrite it.

**When it applies** (``rewards/_verify.py``): only as a *fallback*, for a gold (``parse_gold``) or an extracted
answer (``check_answer``) whose raw parse yields no math expression. A string math-verify already reads is graded
exactly as before; normalization only turns "cannot be graded" into a grade. Applying the same rules to golds and
answers keeps the comparison symmetric: gold ``62.5%`` normalizes to ``62.5``, and the answer ``\\boxed{62.5\\%}``
(math-verify: no expression) normalizes to ``62.5`` too.

``normalize(s) -> (text, rules)`` returns the rewritten text and the names of the rules that changed it, so the
data loaders can record why a gold was rewritten (``stats["answers_normalized"]``).

Rules, in order (each a small named function; :data:`RULES`):

* ``dollars``: drop ``\\$`` (currency) and every ``$`` (math delimiters, including a stray ``$ $`` mid-expression).
* ``numpy``: ``np.arcsin(x)`` / ``math.log(x)`` / ``np.pi`` -> ``\\arcsin(x)`` / ``\\log(x)`` / ``\\pi``.
* ``text``: ``\\text{...}``, ``\\textbf``, ``\\mathrm``, ``\\mbox`` around a whole answer unwrapped; a trailing
  unit in ``\\text{}`` / ``\\mbox{}`` after a number dropped (``5\\text{ cm}`` -> ``5``).
* ``degrees``: ``^\\circ``, ``^{\\circ}``, ``\\circ``, ``\\degree``, ``°`` dropped.
* ``percent``: ``\\%`` and ``%`` dropped (``62.5%`` -> ``62.5``: the value as the question states it).
* ``thousands``: ``1,000,000`` / ``1{,}000`` / ``32,\\!348`` -> ``1000000`` (only digit groups of three).
* ``trailing_dot``: a decimal point with no digit after it dropped (``-1./3`` -> ``-1/3``; Fortran/numpy style).
* ``symbol_subscript``: a subscript that is one LaTeX command, ``_{\\odot}`` / ``_{\\max }``, -> its letters
  (``_{odot}``, ``_{max}``): a label, not an operator.
* ``euler_subscript``: ``E_{1}`` -> ``\\mathrm{E}_{1}`` (math-verify reads a bare ``E`` as Euler's number ``e``
  and cannot subscript it; ``\\mathrm{E}`` is a plain symbol).
* ``equation_rhs``: ``m_{max}=n^2-n-1`` or ``\\frac{dM}{dt}=...`` -> the right-hand side, when the left is a
  single (possibly subscripted) variable or a derivative ``\\frac{dX}{dt}``: the answer is the value.
* ``membership``: ``t \\in (0,4]`` or ``t(0,4]`` -> ``(0,4]`` (a variable before an interval).
* ``units``: a number followed by a plain unit word (``5 cm``, ``3 meters``) -> the number.

Everything here is plain string processing (no sympy): cheap, and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Rule = tuple[str, Callable[[str], str]]

_UNIT_WORDS = (
    "cm", "m", "mm", "km", "meters", "meter", "metres", "metre", "centimeters", "inches", "inch", "feet", "foot",
    "ft", "miles", "mile", "mph", "seconds", "second", "s", "sec", "minutes", "minute", "min", "hours", "hour", "hrs",
    "days", "day", "weeks", "years", "year", "kg", "g", "grams", "gram", "lb", "lbs", "pounds", "ounces", "units",
    "unit", "degrees", "degree", "dollars", "dollar", "cents", "cent", "square", "sq", "cubic", "liters", "litres",
    "l", "ml", "points", "people", "students", "ways",
)
_NUM = r"-?\d+(?:\.\d+)?"


def _dollars(s: str) -> str:
    return s.replace("\\$", "").replace("$", "")


_NUMPY = re.compile(r"\b(?:np|numpy|math)\.(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|exp|log|ln|pi)\b")


def _numpy(s: str) -> str:
    return _NUMPY.sub(lambda m: "\\" + m.group(1), s)


_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}$")
_TRAILING_UNIT = re.compile(r"^(.*?\d)\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .^0-9/]*\}(\^\{?\d\}?)?$")


def _text(s: str) -> str:
    s = s.strip()
    m = _TEXT_WRAP.match(s)
    if m:
        return m.group(1).strip()
    m = _TRAILING_UNIT.match(s)
    return m.group(1) if m else s


_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°")


def _degrees(s: str) -> str:
    return _DEGREES.sub("", s)


def _percent(s: str) -> str:
    return s.replace("\\%", "").replace("%", "")


_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:(?:,|\{,\}|,\\!)\d{3})+(?:\.\d+)?(?![\d])")


def _thousands(s: str) -> str:
    return _THOUSANDS.sub(lambda m: re.sub(r",\\!|\{,\}|,", "", m.group(0)), s)


_TRAILING_DOT = re.compile(r"(?<=\d)\.(?!\d)")


def _trailing_dot(s: str) -> str:
    return _TRAILING_DOT.sub("", s)


_SYMBOL_SUBSCRIPT = re.compile(r"_\{\s*\\([A-Za-z]+)\s*\}")


def _symbol_subscript(s: str) -> str:
    return _SYMBOL_SUBSCRIPT.sub(lambda m: "_{" + m.group(1) + "}", s)


_EULER_SUBSCRIPT = re.compile(r"(?<![\\A-Za-z])E(?=\s*_)")


def _euler_subscript(s: str) -> str:
    return _EULER_SUBSCRIPT.sub(r"\\mathrm{E}", s)


_LHS = re.compile(
    r"^\s*(?:[A-Za-z](?:_\{[^{}=]*\}|_[A-Za-z0-9])?|\\frac\s*\{\s*d\s*[A-Za-z]*\s*\}\s*\{\s*d\s*[A-Za-z]*\s*\})\s*$"
)


def _equation_rhs(s: str) -> str:
    if s.count("=") != 1 or any(op in s for op in ("\\leq", "\\geq", "<", ">", "\\le ", "\\ge ")):
        return s
    lhs, rhs = s.split("=")
    return rhs.strip() if _LHS.match(lhs) and rhs.strip() else s


_MEMBERSHIP = re.compile(r"^\s*[A-Za-z]\s*(?:\\in\s*)?([\(\[][^()\[\]]*,[^()\[\]]*[\)\]])\s*$")


def _membership(s: str) -> str:
    m = _MEMBERSHIP.match(s)
    return m.group(1) if m else s


_UNITS = re.compile(rf"^\s*({_NUM})\s*(?:{'|'.join(_UNIT_WORDS)})(?:\^\{{?\d\}}?|\^\d)?\s*$")


def _units(s: str) -> str:
    m = _UNITS.match(s)
    return m.group(1) if m else s


RULES: tuple[Rule, ...] = (
    ("dollars", _dollars),
    ("numpy", _numpy),
    ("text", _text),
    ("degrees", _degrees),
    ("percent", _percent),
    ("thousands", _thousands),
    ("trailing_dot", _trailing_dot),
    ("symbol_subscript", _symbol_subscript),
    ("euler_subscript", _euler_subscript),
    ("equation_rhs", _equation_rhs),
    ("membership", _membership),
    ("units", _units),
)


def normalize(s: str) -> tuple[str, tuple[str, ...]]:
    """``s`` rewritten by every rule in :data:`RULES` (in order), and the names of those that changed it."""
    applied = []
    out = s.strip()
    for name, fn in RULES:
        new = fn(out).strip()
        if new != out:
            applied.append(name)
            out = new
    return out, tuple(applied)
