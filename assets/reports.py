"""The report assets (group ``reports``): paper Table 2 (rollouts to the target accuracy) as a Markdown table and
the plots people would rather look at than read (accuracy vs cumulative rollouts, vs steps, mean reward std and
informative share per step; one curve per method), all built by :mod:`pc_pipelines.reports` from the store."""


import base64

from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, MetadataValue, asset
from pydantic import Field

from pc_pipelines.reports import ReportError, build_report
from resources import StoreResource

from .evaluation import segment_eval


class ReportConfig(Config):
    family: str | None = Field(default=None, description="Report one run family only (default: every family).")
    out_dir: str = Field(default="runs/reports", description="Where the PNG plots are written.")


def _embedded(path) -> str:
    """A plot inlined as a data URI, so the asset's Markdown metadata shows it in the UI."""
    return f"![{path.stem}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"


@asset(group_name="reports", deps=[segment_eval], kinds={"duckdb"})
def rollouts_report(context: AssetExecutionContext, config: ReportConfig, store: StoreResource) -> MaterializeResult:
    """Rollouts to target per family and seed (GRPO/PC and DAPO/PC ratios), a summary per method, and the plots."""
    try:
        rep = build_report(store.get(vacuum=False), config.out_dir, config.family)
    except ReportError as exc:
        raise Failure(str(exc)) from exc
    context.log.info("report: %d runs, plots in %s", len(rep.curves), config.out_dir)
    return MaterializeResult(
        metadata={
            "rollouts_to_target": MetadataValue.md(rep.markdown),
            "plots": MetadataValue.md("\n\n".join(_embedded(p) for p in rep.plots)),
            "plot_dir": MetadataValue.path(str(rep.plots[0].parent.resolve()) if rep.plots else config.out_dir),
            "runs": len(rep.curves),
            "summary": MetadataValue.json(rep.summary_rows()),
            "ratios": MetadataValue.json({fam: {k: v for k, v in d.items() if k.startswith("median_")}
                                          for fam, d in rep.report.items()}),
        }
    )
