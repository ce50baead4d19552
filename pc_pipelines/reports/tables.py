"""The reports' numbers as text: counts and ratios (:func:`format_count`, :func:`format_ratio`, shared with the
studies) and the Markdown tables, rollouts to target (paper Table 2) and the per-method summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..store.schema import COMPARED_RUN_RULE
from .curves import MethodSummary
from .style import method_label


def format_count(v: Any) -> str:
    """Rollouts with thousands separators; ``None`` (never reached the target) as ``never``."""
    return "never" if v is None else f"{int(v):,}"


def format_ratio(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_reached(rollouts: Any, run_id: str | None) -> str:
    """A method's cell of Table 2: ``no run`` (the family has no run of it for the seed), ``never`` (its run did
    not reach the target) or the rollouts."""
    return "no run" if run_id is None else format_count(rollouts)


def format_target(v: Any) -> str:
    return "-" if v is None else f"{v:.4f}"


def significant(v: float | None, digits: int = 4) -> float | None:
    """``v`` rounded to ``digits`` significant digits (for tables that print floats as they are)."""
    return None if v is None else float(f"{v:.{digits}g}")


def length_note(seed_row: Mapping[str, Any]) -> str | None:
    """Words for a seed whose compared runs differ in length (``Store.report()``'s ``steps``), else None."""
    steps = {m: n for m, n in (seed_row.get("steps") or {}).items() if n is not None}
    if len(set(steps.values())) <= 1:
        return None
    return ("runs of different lengths (" + ", ".join(f"{method_label(m)} {n}" for m, n in steps.items())
            + " steps): each cost is to the common target, but the ratios compare runs given unequal budgets")


def compared_runs_lines(fam: Mapping[str, Any]) -> list[str]:
    """One line per seed: the run compared for each method (or ``no run``) and its steps, then a line per seed whose
    runs differ in length."""
    lines = []
    for s in fam["seeds"]:
        runs, steps = s.get("runs") or {}, s.get("steps") or {}
        cells = [f"{method_label(m)} " + (f"{runs[m]} ({steps[m]} steps)" if runs.get(m) else "no run")
                 for m in ("grpo", "dapo", "pc")]
        lines.append(f"seed {s['seed']}: " + ", ".join(cells))
        note = length_note(s)
        if note:
            lines.append(f"seed {s['seed']}: note: {note}")
    return lines


TARGET_NOTE = (
    "Target = min(GRPO peak, PC peak) mean eval accuracy of each seed; rollouts = cumulative sampled rollouts at a "
    "method's first eval at or above the target (*never*: its run did not reach it; *no run*: the family has no run "
    "of that method for the seed); GRPO/PC and DAPO/PC = those costs over PC's (paper Table 2). Runs compared: "
    f"{COMPARED_RUN_RULE}."
)


def rollouts_to_target_markdown(report: Mapping[str, Any]) -> str:
    """``Store.report()``'s dict as Markdown: one table per family (seed, target, rollouts per method, ratios) with
    a median row, then the run compared for each method and seed (and a note where their lengths differ)."""
    if not report:
        return (
            "No family has both a GRPO and a PC run with eval results yet, so there is no target accuracy "
            "(min(GRPO peak, PC peak)) to measure rollouts against.\n"
        )
    parts = []
    for family, fam in report.items():
        lines = [
            f"### Family `{family}`: sampled rollouts to reach the target accuracy",
            "",
            "| seed | target | GRPO | DAPO | PC | GRPO/PC | DAPO/PC |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in fam["seeds"]:
            r, runs = s["rollouts"], s.get("runs") or {}
            cells = [format_reached(r[m], runs.get(m, m)) for m in ("grpo", "dapo", "pc")]
            lines.append(
                f"| {s['seed']} | {format_target(s['target'])} | {' | '.join(cells)} | "
                f"{format_ratio(s['grpo_over_pc'])} | {format_ratio(s['dapo_over_pc'])} |"
            )
        lines.append(
            f"| median | | | | | {format_ratio(fam['median_grpo_over_pc'])} | "
            f"{format_ratio(fam['median_dapo_over_pc'])} |"
        )
        lines += ["", "Runs compared:", ""] + [f"- {ln}" for ln in compared_runs_lines(fam)]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n\n" + TARGET_NOTE + "\n"


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def summary_markdown(summary: Sequence[MethodSummary]) -> str:
    lines = [
        "| family | method | seeds | steps | sampled rollouts | trained rollouts | final accuracy | peak accuracy |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| `{s.family}` | {method_label(s.method)} | {', '.join(map(str, s.seeds))} | {_num(s.steps, ',.0f')} | "
            f"{_num(s.total_sampled_rollouts, ',.0f')} | {_num(s.total_trained_rollouts, ',.0f')} | "
            f"{_num(s.final_accuracy, '.4f')} | {_num(s.peak_accuracy, '.4f')} |"
        )
    return "\n".join(lines) + "\n\nMeans over a method's seeds; accuracy = mean eval accuracy over the benchmarks.\n"

