"""Runs compared by step and by rollouts: held-out accuracy and mean reward of several runs (a family's, or the runs
a user names) on one figure, one labelled line per run (``<run id> (<method>)``), training step 1 first and the
evaluation before training at step 0 with 0 rollouts. The rows are those of :func:`compare_query`, one SQL query
over the store that the ``run_comparison`` asset and ``pilot-commit compare`` also print; the same runs' TensorBoard
logs overlay with :func:`tensorboard_overlay_command`. :func:`compare_runs` is the whole use case (the figure, its
query, the TensorBoard command) that both render.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..durable import check_user_output
from ..errors import brief, shell_command, sql_string
from ..store import Store
from ..store.names import shown_path
from .plots import save_figure
from .style import method_color, method_key, method_label

PANELS = (("accuracy", "step"), ("accuracy", "cumulative_rollouts"),
          ("mean_reward", "step"), ("mean_reward", "cumulative_rollouts"))
TITLES = {"accuracy": "held-out accuracy", "mean_reward": "mean reward", "step": "training step",
          "cumulative_rollouts": "cumulative sampled rollouts"}
LINESTYLES = ("-", "--", ":", "-.")


class CompareError(ValueError):
    """Nothing to compare: no such family or run, or no step recorded yet (the message names the fix)."""


def compare_query(family: str | None = None, run_ids: Sequence[str] | None = None) -> str:
    """The SQL of the comparison: per run (``family``'s runs, or ``run_ids``, or every run) one row per training
    step (``step`` counted from 1; ``cumulative_rollouts``: sampled through it; ``accuracy``: the mean over the
    held-out sets where that step was evaluated, else NULL) and a row at step 0 for an evaluation before training."""
    if run_ids:
        where = f"r.run_id IN ({', '.join(sql_string(r) for r in run_ids)})"
    elif family is not None:
        where = f"r.family = {sql_string(family)}"
    else:
        where = "true"
    return ("SELECT r.run_id, r.method, r.family, s.step, "
            "sum(s.sampled_rollouts) OVER (PARTITION BY s.run_id ORDER BY s.step) AS cumulative_rollouts, "
            "s.mean_reward, e.accuracy "
            "FROM runs r JOIN steps s USING (run_id) "
            "LEFT JOIN eval_curve e ON e.run_id = s.run_id AND e.step = s.step "
            f"WHERE {where} "
            "UNION ALL SELECT r.run_id, r.method, r.family, 0 AS step, 0 AS cumulative_rollouts, NULL AS mean_reward, "
            "e.accuracy FROM runs r JOIN eval_curve e USING (run_id) "
            f"WHERE e.step = 0 AND {where} "
            "ORDER BY run_id, step")


@dataclass(frozen=True)
class RunLine:
    """One run's line: its points as :func:`compare_query` returns them (NULL as NaN)."""

    run_id: str
    method: str
    family: str
    step: tuple[int, ...]
    cumulative_rollouts: tuple[int, ...]
    mean_reward: tuple[float, ...]
    accuracy: tuple[float, ...]

    @property
    def label(self) -> str:
        return f"{self.run_id} ({method_label(self.method)})"

    def points(self, y: str, x: str) -> tuple[list[float], list[float]]:
        """The (x, y) points where ``y`` has a value."""
        xs, ys = getattr(self, x), getattr(self, y)
        pairs = [(a, b) for a, b in zip(xs, ys, strict=True) if not math.isnan(b)]
        return [a for a, _ in pairs], [b for _, b in pairs]


def _f(v) -> float:
    return math.nan if v is None else float(v)


def load_comparison(store: Store, family: str | None = None, run_ids: Sequence[str] | None = None) -> list[RunLine]:
    """The runs' lines, ordered by method (the registry's order) then run id; :class:`CompareError` naming the
    missing runs, or saying that nothing has a step yet."""
    if run_ids:
        known = {r["run_id"] for r in store.query(
            f"SELECT run_id FROM runs WHERE run_id IN ({', '.join('?' for _ in run_ids)})", list(run_ids))}
        missing = [r for r in run_ids if r not in known]
        if missing:
            raise CompareError(f"no run {', '.join(brief(r) for r in missing)} in the store {shown_path(store.path)}. "
                               f"Fix: name runs that `{shell_command('pilot-commit', 'runs', '--store', store.path)}` "
                               "lists.")
    rows = store.query(compare_query(family, run_ids))
    by_run: dict[str, list[dict]] = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    if not by_run:
        which = f"family {brief(family)}" if family is not None and not run_ids else "the runs asked for"
        raise CompareError(f"{which} in the store {shown_path(store.path)} has no recorded step yet, so there is "
                           "nothing to compare. Fix: train or simulate runs first, or name other runs (`"
                           f"{shell_command('pilot-commit', 'runs', '--store', store.path)}`).")
    lines = [RunLine(run_id=rid, method=rs[0]["method"], family=rs[0]["family"],
                     step=tuple(int(r["step"]) for r in rs),
                     cumulative_rollouts=tuple(int(r["cumulative_rollouts"]) for r in rs),
                     mean_reward=tuple(_f(r["mean_reward"]) for r in rs), accuracy=tuple(_f(r["accuracy"]) for r in rs))
             for rid, rs in by_run.items()]
    return sorted(lines, key=lambda ln: (method_key(ln.method), ln.run_id))


def tensorboard_dirs(store: Store, run_ids: Sequence[str]) -> dict[str, str]:
    """The TensorBoard folder of each run that has one (a trained run's ``<run_dir>/tensorboard``, where it
    exists), by run id."""
    if not run_ids:
        return {}
    rows = store.query("SELECT run_id, json_extract_string(lineage_json, '$.run_dir') AS run_dir FROM runs "
                       f"WHERE run_id IN ({', '.join('?' for _ in run_ids)}) ORDER BY run_id", list(run_ids))
    out = {}
    for r in rows:
        if r["run_dir"] and (Path(r["run_dir"]) / "tensorboard").is_dir():
            out[r["run_id"]] = str(Path(r["run_dir"]) / "tensorboard")
    return out


def tensorboard_overlay_command(dirs: dict[str, str], exe: str = "tensorboard") -> str | None:
    """One ``tensorboard --logdir_spec name:dir,...`` command, shell-quoted, that overlays the runs by step
    (``None`` without a run that has TensorBoard logs); ``exe``: how to type TensorBoard (``installed_command``)."""
    if not dirs:
        return None
    return shell_command(exe, "--logdir_spec", ",".join(f"{rid}:{d}" for rid, d in dirs.items()))


def plot_comparison(lines: Sequence[RunLine], path: str | Path, title: str) -> Path:
    """:func:`comparison_figure` as a PNG at ``path``; returns ``path``."""
    fig = comparison_figure(lines, title)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare_runs` drew: the runs' lines, the PNG, the SQL behind it (:func:`compare_query`) and the
    TensorBoard command overlaying the same runs (None: none of them has TensorBoard logs)."""

    lines: list[RunLine]
    path: Path
    query: str
    tensorboard: str | None

    @property
    def run_ids(self) -> list[str]:
        return [ln.run_id for ln in self.lines]


def runs_drawn(runs: int) -> str:
    """What a comparison drew, in words (the end of its title; ``pilot-commit compare``'s ``wrote`` line)."""
    return f"{runs} runs by step and by cumulative rollouts"


def compared_subject(family: str | None, run_ids: Sequence[str] | None) -> str:
    """What a comparison shows, in words: ``family <f>``, ``the runs named`` or ``every run``."""
    if run_ids:
        return "the runs named"
    return f"family {family}" if family is not None else "every run"


def compare_runs(store: Store, out: str | Path, family: str | None = None, run_ids: Sequence[str] | None = None,
                 which: str | None = None, tensorboard: str = "tensorboard") -> Comparison:
    """Compare ``family``'s runs (or ``run_ids``, or every run) into the PNG ``out``, titled
    ``<which>: <`runs_drawn`>`` (``which`` default: :func:`compared_subject`); ``tensorboard``: how to type TensorBoard in the command.
    ``out`` is refused before anything is read when it is what the store reads, a folder, a disk
    (:class:`~pc_pipelines.durable.OutputRefused`). Raises :class:`CompareError` (nothing to compare) and OSError
    (the PNG could not be written)."""
    check_user_output(out, store.own_paths())  # never over the store it reads
    lines = load_comparison(store, family, run_ids)
    path = plot_comparison(lines, out, f"{which or compared_subject(family, run_ids)}: {runs_drawn(len(lines))}")
    command = tensorboard_overlay_command(tensorboard_dirs(store, [ln.run_id for ln in lines]), tensorboard)
    return Comparison(lines=lines, path=path, query=compare_query(family, run_ids), tensorboard=command)


def comparison_figure(lines: Sequence[RunLine], title: str):
    """The four panels (accuracy and mean reward, by step and by cumulative rollouts), one labelled line per run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    fig = Figure(figsize=(12.0, 8.0), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2).ravel()
    seen: dict[str, int] = {}
    styles = {}
    for ln in lines:
        styles[ln.run_id] = LINESTYLES[seen.get(ln.method, 0) % len(LINESTYLES)]
        seen[ln.method] = seen.get(ln.method, 0) + 1
    for ax, (y, x) in zip(axes, PANELS, strict=True):
        for ln in lines:
            xs, ys = ln.points(y, x)
            ax.plot(xs, ys, label=ln.label, color=method_color(ln.method), linestyle=styles[ln.run_id],
                    marker="o" if y == "accuracy" or len(xs) <= 30 else None, markersize=3, linewidth=1.4)
        if not any(ln.points(y, x)[0] for ln in lines):
            ax.text(0.5, 0.5, f"no {TITLES[y]} recorded (simulated runs record none)", ha="center",
                    transform=ax.transAxes, fontsize=9, color="0.4")
        ax.set_title(f"{TITLES[y]} by {TITLES[x]}", fontsize=10)
        ax.set_xlabel(TITLES[x], fontsize=9)
        ax.grid(True, alpha=0.3)
        if x == "cumulative_rollouts":
            ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))  # 64,000: no 1e4 offset
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 2.5
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(title, fontsize=12)
    return fig
