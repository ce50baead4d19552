"""Count calls of a function as the code under test sees it (tests that say "each check once")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def count_calls(monkeypatch, seen: Counter, key: str, targets: Iterable[object], attr: str) -> None:
    """Count every call of ``attr`` under ``seen[key]``, through one wrapper patched into each of ``targets`` (the
    modules that imported the name, since ``from x import f`` binds a copy, or a class for a method). Refuses targets
    that do not all hold the same object, so a test cannot count a different function than it names."""
    targets = list(targets)
    original = getattr(targets[0], attr)
    other = [t for t in targets if getattr(t, attr) is not original]
    assert not other, f"{attr} in {[getattr(t, '__name__', t) for t in other]} is not the same object as in {targets[0]}"

    def counted(*args, **kwargs):
        seen[key] += 1
        return original(*args, **kwargs)

    for t in targets:
        monkeypatch.setattr(t, attr, counted)
