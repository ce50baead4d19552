"""Boxed-answer extraction: the content of the LAST ``\\boxed{...}`` (or ``\\fbox{...}``) of a response.

Pure standard library and linear in the length of the response, so a 100 KB model output (or ``\\boxed{``
repeated 10,000 times) costs a few milliseconds at most and never reaches sympy.

Rules (the same as verl's ``last_boxed_only_string``, plus whitespace and ``\\fbox``):

* An opener is ``\\boxed{``, ``\\boxed {`` (any whitespace before the brace) or ``\\fbox{``. ``\\boxedx{`` or
  ``\\boxed 5`` are not openers.
* The LAST opener of the response decides. Its content runs to the matching closing brace, counting nested
  braces; escaped braces ``\\{`` / ``\\}`` (and any other backslash-escaped character) do not count.
* If the last opener is never closed (a truncated or malformed box), there is no answer (``None``): an earlier
  complete box is NOT used instead. ``\\boxed{a \\boxed{b}}`` yields ``b`` (the last opener).
* The content is returned stripped of surrounding whitespace (it may be empty).
"""

from __future__ import annotations

import re

_OPENER = re.compile(r"\\(?:boxed|fbox)\s*\{")
# One token per backslash escape (so an escaped brace is skipped) or per brace; everything else is jumped over.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def extract_boxed(text: str) -> str | None:
    """The stripped content of the last ``\\boxed{...}`` / ``\\fbox{...}`` of ``text``, or None if there is none.

    >>> extract_boxed(r"so \\boxed{1} then \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_boxed(r"\\boxed{12") is None
    True
    """
    if not isinstance(text, str) or "\\" not in text:
        return None
    last = None
    for last in _OPENER.finditer(text):  # noqa: B007 - keeps the last match
        pass
    if last is None:
        return None
    start = last.end()
    depth = 1
    for tok in _BRACE_TOKEN.finditer(text, start):
        t = tok.group()
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0:
                return text[start : tok.start()].strip()
    return None
