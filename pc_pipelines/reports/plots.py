"""The report's PNG plots: four figures per family (:data:`PLOT_NAMES`), one line per run coloured by method, each
seed's target accuracy dashed on the accuracy plots.

Steps on the plots' x axes are the stored steps (from 1; an eval after step ``k``'s update sits at ``k``, the eval
before training at 0): :mod:`pc_pipelines.steps`.

matplotlib is imported only when plots are drawn, through its object API (``Figure`` + the Agg canvas): no
``pyplot``, no ``matplotlib.use``, no change to the process's backend or rcParams.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..durable import write_user_output
from ..store import Store
from .curves import RunCurves, check_curves, load_curves
from .style import method_color, method_label

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

PLOT_NAMES = ("accuracy_vs_rollouts", "accuracy_vs_steps", "reward_std_per_step", "informative_share_per_step")
RUN_GID = "run:"  # gid prefix of a run's line on a plot (the target lines carry "target:")
TARGET_GID = "target:"


def _targets(report: Mapping[str, Any], family: str) -> dict[int, float]:
    fam = report.get(family)
    return {int(s["seed"]): float(s["target"]) for s in fam["seeds"] if s["target"] is not None} if fam else {}


def new_figure(title: str, xlabel: str, ylabel: str):
    """A report figure (fixed size, grid, titled axes) drawn off-screen: (figure, axes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas for this figure only; the process's backend is left alone
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def make_figures(
    curves: Sequence[RunCurves], targets: Mapping[int, float] | None = None, family: str | None = None
) -> dict[str, Figure]:
    """The four figures of one family's runs, by plot name (:data:`PLOT_NAMES`). Each run is one line (gid
    ``run:<run_id>``), coloured by method, labelled once per method; each seed's target accuracy is a dashed
    horizontal line (gid ``target:<seed>``) on the accuracy plots."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    from matplotlib.transforms import blended_transform_factory

    family = family or (curves[0].family if curves else "")
    targets = dict(targets or {})
    n_seeds: dict[str, int] = {}
    for c in curves:
        n_seeds[c.method] = n_seeds.get(c.method, 0) + 1
    specs = {
        "accuracy_vs_rollouts": (
            "eval accuracy vs cumulative sampled rollouts", "cumulative sampled rollouts",
            "mean eval accuracy (over benchmarks)", lambda c: (c.eval_rollouts, c.eval_accuracy), True),
        "accuracy_vs_steps": (
            "eval accuracy vs training steps", "training step (0 = before training)",
            "mean eval accuracy (over benchmarks)", lambda c: (list(c.eval_step), c.eval_accuracy), True),
        "reward_std_per_step": (
            "mean reward std of trained groups per step", "training step",
            "mean reward std of trained groups", lambda c: (list(c.step), c.reward_std), False),
        "informative_share_per_step": (
            "informative share of trained groups per step", "training step",
            "share of trained groups with reward std > 0",
            lambda c: (list(c.step), c.informative_share), False),
    }
    figures: dict[str, Figure] = {}
    for name, (title, xlabel, ylabel, data, is_eval) in specs.items():
        fig, ax = new_figure(f"{family}: {title}", xlabel, ylabel)
        labelled: set[str] = set()
        drawn = 0
        for c in curves:
            x, y = data(c)
            if not len(x):
                continue
            label = method_label(c.method) + (f" ({n_seeds[c.method]} seeds)" if n_seeds[c.method] > 1 else "")
            if c.method in labelled:
                label = f"_{label} seed {c.seed}"  # a leading underscore keeps it out of the legend
            labelled.add(c.method)
            ax.plot(
                list(x), list(y), color=method_color(c.method), label=label, gid=f"{RUN_GID}{c.run_id}",
                linewidth=1.6 if is_eval else 1.0, alpha=0.9, marker="o" if is_eval else None, markersize=3,
            )
            drawn += 1
        if is_eval and drawn:
            distinct = sorted(set(targets.values()))
            for i, (seed, t) in enumerate(sorted(targets.items())):
                label = (
                    f"target {t:.3f} = min(GRPO peak, PC peak)"
                    if len(distinct) == 1
                    else "target per seed = min(GRPO peak, PC peak)"
                )
                ax.axhline(t, color="0.35", linestyle="--", linewidth=1.0, gid=f"{TARGET_GID}{seed}",
                           label=label if i == 0 else f"_target seed {seed}")
                if len(distinct) > 1:  # name each seed's line at the right edge
                    ax.text(1.0, t, f" s{seed}", transform=blended_transform_factory(ax.transAxes, ax.transData),
                            va="center", ha="left", fontsize="x-small", color="0.35")
        if name == "accuracy_vs_rollouts":
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if name == "informative_share_per_step":
            ax.set_ylim(-0.02, 1.02)
        if drawn:
            ax.legend(loc="best", fontsize="small")
        else:
            what = "eval results" if is_eval else "steps"
            ax.text(0.5, 0.5, f"no {what} recorded yet", ha="center", va="center", transform=ax.transAxes)
        figures[name] = fig
    return figures


def _safe_name(family: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", family).strip("._") or "family"


def save_figure(fig: Figure, path: str | Path, reads: Iterable[tuple[str | Path, str]] = ()) -> Path:
    """Write ``fig`` as a PNG at ``path`` by :func:`~pc_pipelines.durable.write_user_output`'s rule (a file written
    whole, a symlink written through, ``/dev/stdout`` or a FIFO streamed into, a folder or a disk refused with
    :class:`~pc_pipelines.durable.OutputRefused`, and so is a path among ``reads``, what the command reads, e.g.
    ``Store.own_paths()``); returns ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_user_output(path, buf.getvalue(), reads)
    return Path(path)


def plot_all(curves: Sequence[RunCurves], report: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The four PNGs of every family of ``curves`` in ``out_dir`` (``report``: ``Store.report()``, for the targets)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    families = sorted({c.family for c in curves})
    paths = []
    for fam in families:
        fam_curves = [c for c in curves if c.family == fam]
        prefix = f"{_safe_name(fam)}_" if len(families) > 1 else ""
        for name, fig in make_figures(fam_curves, _targets(report, fam), fam).items():
            paths.append(save_figure(fig, out_dir / f"{prefix}{name}.png"))
    return paths


def write_plots(store: Store, out_dir: str | Path, family: str | None = None) -> list[Path]:
    """Write the four PNGs per family into ``out_dir`` (prefixed ``<family>_`` when there are several families);
    returns their paths. Raises :class:`ReportError` when the store has no runs or no eval results."""
    curves = load_curves(store, family)
    check_curves(store, curves, family)
    return plot_all(curves, store.report(family), Path(out_dir))

