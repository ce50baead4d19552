"""Answer normalization as standard math graders do it, applied only where math-verify parses nothing.

``normalize(s) -> (text, rules)`` returns the rewritten text and the names of the rules that changed it, so the
data loaders can record why a gold was rewritten (``stats["answers_normalized"]``).

The conventions it undoes (``62.5%``, ``np.arcsin(10/13)``, ``-1./3``, ...), when it applies and each rule of
:data:`RULES` with its examples: docs/GRADING.md, "Normalization".
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
