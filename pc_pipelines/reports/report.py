"""The whole report over a store, as the CLI (``pilot-commit report --plots DIR``) and the Dagster report asset show
it: rollouts to target (paper Table 2), the per-method summary and (with an output folder) the plots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store import Store
from .curves import MethodSummary, RunCurves, check_curves, load_curves, summarize
from .plots import plot_all
from .tables import rollouts_to_target_markdown, summary_markdown


@dataclass(frozen=True)
class Report:
    markdown: str
    plots: list[Path]  # empty when no out_dir was given
    report: dict[str, Any]  # Store.report(family): rollouts to target per family and seed, median ratios
    summary: list[MethodSummary]
    curves: list[RunCurves]

    def summary_rows(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.summary]


def build_report(store: Store, out_dir: str | Path | None = None, family: str | None = None) -> Report:
    """Table 2, the per-method summary and (with ``out_dir``) the plots. Raises :class:`ReportError` when the store
    has no runs or no eval results (of ``family``)."""
    curves = load_curves(store, family)
    check_curves(store, curves, family)
    report = store.report(family)
    plots = plot_all(curves, report, Path(out_dir)) if out_dir is not None else []
    summary = summarize(curves)
    md = [
        "## Rollouts to target accuracy",
        "",
        rollouts_to_target_markdown(report).rstrip("\n"),
        "",
        "## Runs per method",
        "",
        summary_markdown(summary).rstrip("\n"),
    ]
    if plots:
        md += ["", "## Plots", ""] + [f"- `{p.name}`" for p in plots]
    return Report(markdown="\n".join(md) + "\n", plots=plots, report=report, summary=summary, curves=curves)
