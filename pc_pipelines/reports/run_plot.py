"""One training run so far on one small figure: held-out accuracy, mean reward, reward std, informative share and
cumulative sampled rollouts by step (the ``training_segment`` asset attaches it to each segment it materializes).
Its rows are those of :func:`run_progress_query`, the query the asset also prints for ``pilot-commit sql``.

Steps are the stored steps, as on every screen (:mod:`pc_pipelines.steps`: from 1; the evaluation before training
sits at 0), on whole-number ticks; the rollouts axis shows plain counts with
thousands separators (no offset, no scientific notation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import brief, sql_string
from ..store import Store
from ..store.names import shown_path
from .plots import save_figure
from .style import method_color

PANELS = ("held-out accuracy", "mean reward", "reward std", "informative share", "cumulative rollouts")


def run_progress_query(run_id: str) -> str:
    """The SQL of a run's per-step curve (one row per step; ``accuracy``: the mean over the run's held-out sets,
    where that step was evaluated), for ``pilot-commit sql``. ``run_id`` is quoted as a SQL string."""
    return ("SELECT s.step, s.mean_reward, s.mean_reward_std, s.informative_share, s.sampled_rollouts, "
            "sum(s.sampled_rollouts) OVER (ORDER BY s.step) AS cumulative_rollouts, e.accuracy "
            f"FROM steps s LEFT JOIN eval_curve e ON e.run_id = s.run_id AND e.step = s.step "
            f"WHERE s.run_id = {sql_string(run_id)} ORDER BY s.step")


@dataclass(frozen=True)
class RunProgress:
    """A run's per-step curve as :func:`run_progress_query` returns it, and its evaluations (``0``: before
    training). Values the store holds as NULL are NaN."""

    run_id: str
    method: str
    step: tuple[int, ...]
    mean_reward: tuple[float, ...]
    reward_std: tuple[float, ...]
    informative_share: tuple[float, ...]
    cumulative_rollouts: tuple[int, ...]
    eval_step: tuple[int, ...]
    eval_accuracy: tuple[float, ...]


def _f(v) -> float:
    return math.nan if v is None else float(v)


def load_run_progress(store: Store, run_id: str) -> RunProgress:
    """``run_id``'s curve from the store (``KeyError`` naming the run when the store has no such run)."""
    run = store.get_run(run_id)
    if run is None:
        raise KeyError(f"no run {brief(run_id)} in the store {shown_path(store.path)}")
    rows = store.query(run_progress_query(run_id))
    evals = store.query("SELECT step, accuracy FROM eval_curve WHERE run_id = ? ORDER BY step", [run_id])
    return RunProgress(
        run_id=run_id, method=run["method"], step=tuple(int(r["step"]) for r in rows),
        mean_reward=tuple(_f(r["mean_reward"]) for r in rows), reward_std=tuple(_f(r["mean_reward_std"]) for r in rows),
        informative_share=tuple(_f(r["informative_share"]) for r in rows),
        cumulative_rollouts=tuple(int(r["cumulative_rollouts"]) for r in rows),
        eval_step=tuple(int(r["step"]) for r in evals), eval_accuracy=tuple(_f(r["accuracy"]) for r in evals),
    )


def plot_run_progress(progress: RunProgress, path: Path, highlight: tuple[int, int] | None = None) -> Path:
    """The run's five panels (:func:`run_progress_figure`) as a small PNG at ``path`` (about 900 x 330 pixels).
    Returns ``path``."""
    fig = run_progress_figure(progress, highlight)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)


def run_progress_figure(progress: RunProgress, highlight: tuple[int, int] | None = None):
    """The run's five panels as a matplotlib ``Figure`` (one axes per :data:`PANELS` entry, in that order);
    ``highlight`` shades a segment's store steps ``(first, last)``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    fig = Figure(figsize=(11.0, 4.0), dpi=82, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(PANELS))
    x = list(progress.step)
    series = {
        "held-out accuracy": (list(progress.eval_step), progress.eval_accuracy),
        "mean reward": (x, progress.mean_reward),
        "reward std": (x, progress.reward_std),
        "informative share": (x, progress.informative_share),
        "cumulative rollouts": (x, progress.cumulative_rollouts),
    }
    color = method_color(progress.method)
    for ax, name in zip(axes, PANELS, strict=True):
        xs, ys = series[name]
        ax.plot(xs, ys, color=color, marker="o" if name == "held-out accuracy" or len(xs) <= 30 else None,
                markersize=3, linewidth=1.4)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(True, alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 2.5
        if highlight is not None:
            ax.axvspan(highlight[0] - 0.5, highlight[1] + 0.5, color="0.85", zorder=0)
        if name == "cumulative rollouts":
            ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))  # 12,000: no 1e4 offset
    seg = f" (shaded: steps {highlight[0]}..{highlight[1]})" if highlight else ""
    fig.suptitle(f"{progress.run_id} ({progress.method}), {len(progress.step)} steps so far{seg}", fontsize=11)
    return fig
