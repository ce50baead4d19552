"""Reports over a store: the rollouts-to-target table (paper Table 2) as Markdown, per-run curves, PNG plots and a
per-method summary (docs/DESIGN.md section 6). A plain library: the CLI (``pilot-commit report --plots DIR``) and the
Dagster report asset both call :func:`build_report`.

* :mod:`.curves`: what a report reads from the store, per-run curves (:class:`RunCurves`, :func:`load_curves`) and
  their per-method summary (:func:`summarize`); :class:`ReportError` when there is nothing to report yet;
* :mod:`.tables`: numbers as text (:func:`format_count`, :func:`format_ratio`) and the Markdown tables;
* :mod:`.plots`: the PNG figures (:func:`make_figures`, :func:`write_plots`; matplotlib only when they are drawn);
* :mod:`.style`: how every report orders, labels and colours a method;
* :mod:`.headline`: the committed efficiency study's headline, read from the results file the package ships beside it
  (``bench_study_results.json``);
* :mod:`.report`: the whole report (:func:`build_report`);
* :mod:`.timeline`: one run's pass rate per prompt and step with the allocator's decisions (:func:`write_timeline`,
  :func:`load_timeline`; ``pilot-commit timeline`` and the ``pass_rate_timeline`` asset);
* :mod:`.compare`: runs overlaid by step and by rollouts, one labelled line per run (``pilot-commit compare`` and
  the ``run_comparison`` asset).

Every public name is importable from the package: ``from pc_pipelines.reports import build_report``.
"""

from .curves import MethodSummary, ReportError, RunCurves, load_curves, summarize
from .headline import study_headline
from .plots import PLOT_NAMES, RUN_GID, TARGET_GID, make_figures, new_figure, save_figure, write_plots
from .report import Report, build_report
from .style import METHOD_COLORS, METHOD_LABELS, METHOD_ORDER, OTHER_COLORS, method_color, method_label
from .tables import (
    STUDY_RESULTS,
    TARGET_NOTE,
    family_smoke_test,
    format_count,
    format_ratio,
    rollouts_to_target_markdown,
    smoke_test,
    summary_markdown,
)
from .timeline import (
    DECISIONS,
    DEFAULT_TOP,
    TimelineData,
    TimelineError,
    TimelineResult,
    load_timeline,
    make_timeline_figure,
    recent_runs,
    write_timeline,
)

__all__ = [
    "DECISIONS",
    "DEFAULT_TOP",
    "METHOD_COLORS",
    "METHOD_LABELS",
    "METHOD_ORDER",
    "OTHER_COLORS",
    "PLOT_NAMES",
    "RUN_GID",
    "STUDY_RESULTS",
    "TARGET_GID",
    "TARGET_NOTE",
    "MethodSummary",
    "Report",
    "ReportError",
    "RunCurves",
    "TimelineData",
    "TimelineError",
    "TimelineResult",
    "build_report",
    "format_count",
    "format_ratio",
    "load_curves",
    "load_timeline",
    "make_figures",
    "make_timeline_figure",
    "method_color",
    "method_label",
    "new_figure",
    "recent_runs",
    "rollouts_to_target_markdown",
    "save_figure",
    "smoke_test",
    "family_smoke_test",
    "study_headline",
    "summarize",
    "summary_markdown",
    "write_plots",
    "write_timeline",
]
