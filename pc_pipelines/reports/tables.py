"""The reports' numbers as text: counts and ratios (:func:`format_count`, :func:`format_ratio`, shared with the
studies) and the Markdown tables, rollouts to target (paper Table 2) and the per-method summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .curves import MethodSummary
from .style import method_label


def format_count(v: Any) -> str:
    """Rollouts with thousands separators; ``None`` (never reached the target) as ``never``."""
    return "never" if v is None else f"{int(v):,}"


def format_ratio(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}x"


TARGET_NOTE = (
    "Target = min(GRPO peak, PC peak) mean eval accuracy of each seed; rollouts = cumulative sampled rollouts at a "
    "method's first eval at or above the target (*never*: not reached); GRPO/PC and DAPO/PC = those costs over PC's "
    "(paper Table 2)."
)


def rollouts_to_target_markdown(report: Mapping[str, Any]) -> str:
    """``Store.report()``'s dict as Markdown: one table per family (seed, target, rollouts per method, ratios) with
    a median row."""
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
            r = s["rollouts"]
            lines.append(
                f"| {s['seed']} | {s['target']:.4f} | {format_count(r['grpo'])} | {format_count(r['dapo'])} | "
                f"{format_count(r['pc'])} | {format_ratio(s['grpo_over_pc'])} | {format_ratio(s['dapo_over_pc'])} |"
            )
        lines.append(
            f"| median | | | | | {format_ratio(fam['median_grpo_over_pc'])} | "
            f"{format_ratio(fam['median_dapo_over_pc'])} |"
        )
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

