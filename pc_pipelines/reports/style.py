"""How every report shows a method: its place in the order (the registry's: grpo, dapo, pc, then others by name),
its label and its colour, the same in the tables, the plots and the studies' figures."""

from __future__ import annotations

from ..allocation import training_methods

METHOD_ORDER = tuple(training_methods())  # grpo, dapo, pc: the registry's order
METHOD_COLORS = {"grpo": "#1f77b4", "dapo": "#ff7f0e", "pc": "#2ca02c", "oracle": "#7f7f7f"}
METHOD_LABELS = {"grpo": "GRPO", "dapo": "DAPO", "pc": "PC", "oracle": "oracle"}
OTHER_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_color(method: str) -> str:
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return OTHER_COLORS[sum(map(ord, method)) % len(OTHER_COLORS)]  # stable across runs, unlike hash()


def method_key(method: str) -> tuple[int, str]:
    """Sort key: the registry's methods in its order, then any other by name."""
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)
