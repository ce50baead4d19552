"""The pass-rate timeline of one run: a heatmap of each prompt's pass rate by step, a marker for what the allocator
decided about the prompt at that step, and below it the decisions of ALL the run's prompts per step.

Read from the store's ``pass_rate_history`` view (one row per observed group: a PC pilot, a PC commit, a GRPO / DAPO
full group), so it works for every method: GRPO's groups are all ``trained``; DAPO's ``trained``, ``surplus``,
``skipped_easy`` or ``deferred_hard``; PC's pilots ``kept``, ``skipped_easy`` or ``deferred_hard`` (possibly
``evicted``, possibly ``returned`` from the easy pool) and its commits ``trained``. With the history prior on
(``screen_strategy``), a drawn prompt it skipped has a row with no rollout, ``screened_by_prior``.

One cell is one prompt at one step. A prompt can have several rows in one step (a PC pilot kept in round 1 and
committed in round 2, a commit of an older pilot and a new pilot of the same prompt, two draws of it across an
epoch boundary); a cell folds them:

* **pass rate** = the pooled ``sum(n_correct) / sum(n)`` over all the step's rows of the prompt: every rollout of
  the prompt sampled in that step, pilot waves and commit alike (a commit of an older step's pilot counts only its
  commit rollouts: the pilot's were counted in its own step);
* **marker** = the step's decision of highest precedence, ``trained`` > ``kept`` > ``surplus`` > ``skipped_easy`` >
  ``deferred_hard`` > ``screened_by_prior`` (:data:`DECISIONS`): whether the prompt reached the update first, then
  whether it was kept for it, then why not (a cell with only a prior skip has a marker on white: no rollout; a first
  pilot wave's ``continued`` row is never a marker: its later wave's row holds the decision). Precedence, not time: a PC round's commits and pilots come from one engine call;
* **frames**, added to the marker: ``evicted`` (red: some row of the step marked the prompt solved) and
  ``returned`` (magenta: it came back from the easy pool that step);
* **blank** (white): the prompt was not sampled at that step.

Which prompts get a row: the ones asked for (in the order given), or the ``top`` most-visited (default
:data:`DEFAULT_TOP`), visits = the number of steps at which the prompt was sampled (or drawn and skipped by the
history prior), ties broken by the lower prompt id, most visited first: a deterministic pick. The lower panel aggregates ALL the run's prompts with the same rule:
per step, one count per decision (stacked; the stack's height is the number of prompts drawn at that step) and
the number of prompts evicted and returned (lines). The figure's title says which prompts the rows are.

Steps on the x axis are the stored steps (from 1), as on every screen (:mod:`pc_pipelines.steps`). matplotlib is used through its object API only (no ``pyplot``), like :mod:`.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import brief, shell_command
from ..store import Store
from ..store.names import shown_path
from ..store.runlock import with_live_status
from .curves import ReportError
from .plots import save_figure
from .style import method_label

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

DEFAULT_TOP = 40
"""Rows of the heatmap when no prompts are asked for: the most-visited prompts."""

RECENT_RUNS = 6
"""How many runs :func:`recent_runs` gives by default (the Dagster asset's timelines without a run named)."""

DECISIONS = ("trained", "kept", "surplus", "skipped_easy", "deferred_hard", "screened_by_prior")
"""The store's decisions in the order of precedence a cell's marker takes (the first one the step has)."""

DECISION_STYLE = {  # marker shape and colour, the same in the heatmap and the lower panel
    "trained": ("o", "#2ca02c"),
    "kept": ("D", "#1f77b4"),
    "surplus": ("s", "#9467bd"),
    "skipped_easy": ("^", "#ff7f0e"),
    "deferred_hard": ("v", "#7f7f7f"),
    "screened_by_prior": ("X", "#17becf"),
}
DECISION_LABELS = {"trained": "trained", "kept": "kept (buffered)", "surplus": "surplus",
                   "skipped_easy": "skipped: easy", "deferred_hard": "deferred: hard",
                   "screened_by_prior": "skipped by prior (no rollout)"}
EVICTED_COLOR = "#d62728"
RETURNED_COLOR = "#e377c2"
CMAP = "viridis"
DPI = 150


class TimelineError(ReportError):
    """No timeline can be drawn as asked (an unknown run, a run without observations, prompts it never sampled);
    the message ends with ``Fix: ...``."""


@dataclass(frozen=True)
class TimelineData:
    """What the figure shows, as arrays. Rows are :attr:`prompt_ids`, columns the store steps :attr:`steps`
    (``first_step .. last_step``, every step, so a step the store lacks is a blank column)."""

    run_id: str
    method: str
    family: str
    seed: int
    prompt_ids: tuple[int, ...]  # the rows, top to bottom
    visits: tuple[int, ...]  # per row: steps at which the prompt was sampled
    picked: str  # "top" (the most-visited) or "chosen" (the prompts asked for)
    total_prompts: int  # distinct prompts the run sampled
    steps: np.ndarray  # int64 [S]: the stored steps (from 1)
    p_hat: np.ndarray  # float64 [R, S]: pooled pass rate; NaN = not sampled
    marker: np.ndarray  # int8 [R, S]: index into DECISIONS; -1 = not sampled
    evicted: np.ndarray  # bool [R, S]
    returned: np.ndarray  # bool [R, S]
    counts: dict[str, np.ndarray]  # decision -> int64 [S]: ALL prompts' cells with that marker, per step
    evicted_counts: np.ndarray  # int64 [S]: prompts evicted per step (all prompts)
    returned_counts: np.ndarray  # int64 [S]: prompts returned per step (all prompts)

    @property
    def observed(self) -> np.ndarray:
        """Prompts sampled per step (all prompts): the height of the lower panel's stack."""
        return sum(self.counts.values())

    def describe(self) -> str:
        """Which prompts the rows are, in words: '40 most-visited of 4,812 prompts'."""
        k = len(self.prompt_ids)
        if self.picked == "top":
            which = "the only prompt" if self.total_prompts == 1 else (
                f"all {k:,}" if k == self.total_prompts else f"{k:,} most-visited of {self.total_prompts:,}")
            return which + ("" if self.total_prompts == 1 else " prompts")
        return f"{k:,} chosen prompt{'s' if k != 1 else ''} of {self.total_prompts:,}"

    def cell(self, prompt_id: int, step: int) -> tuple[float, str | None, bool, bool]:
        """(pass rate, decision, evicted, returned) of ``prompt_id`` at store step ``step``; (NaN, None, False,
        False) when the prompt was not sampled then."""
        r, c = self.prompt_ids.index(prompt_id), int(step - self.steps[0])
        m = int(self.marker[r, c])
        return float(self.p_hat[r, c]), (DECISIONS[m] if m >= 0 else None), bool(self.evicted[r, c]), \
            bool(self.returned[r, c])


@dataclass(frozen=True)
class TimelineResult:
    """A written timeline: where the PNG went and what it shows."""

    path: Path
    run_id: str
    method: str
    prompts: tuple[int, ...]  # the heatmap's rows, top to bottom
    total_prompts: int  # distinct prompts the run sampled (all of them are in the lower panel)
    steps: int  # columns: store steps first_step .. last_step
    first_step: int
    last_step: int
    description: str  # which prompts the rows are, in words

    def shows(self) -> str:
        """What the figure shows, in one line."""
        return (f"run {self.run_id} ({method_label(self.method)}): {self.description} x {self.steps} steps "
                f"(training steps {self.first_step}-{self.last_step}); lower panel: decisions of all "
                f"{self.total_prompts:,} prompts per step")

    def summary(self) -> str:
        """One line: what the figure shows and where it is."""
        return f"{self.shows()} -> {self.path}"


# ---- reading ------------------------------------------------------------------------------------------------------
_MARKER_SQL = "CASE decision " + " ".join(f"WHEN '{d}' THEN {i}" for i, d in enumerate(DECISIONS)) + " END"

_CELLS_SQL = f"""
    SELECT prompt_id, step, sum(n) AS n, sum(n_correct) AS n_correct, min({_MARKER_SQL}) AS marker,
           bool_or(coalesce(evicted, false)) AS evicted, bool_or(coalesce(returned, false)) AS returned
    FROM pass_rate_history WHERE run_id = ? GROUP BY prompt_id, step"""
"""One row per (prompt, step) of the run: the cell, folded by the rules of the module docstring."""


def _runs_newest_first(store: Store) -> list[dict]:
    """Every run (run_id, whether it has observations), newest first: the store's order of registration
    (``runs.seq``, v7), then creation time (a catalog not upgraded yet has no seq), then the id."""
    rows = store.query("""SELECT r.*, EXISTS (SELECT 1 FROM pass_rate_history p WHERE p.run_id = r.run_id) AS observed
                          FROM runs r""")
    rows.sort(key=lambda r: r["run_id"])
    rows.sort(key=lambda r: (r.get("seq") is not None, r.get("seq") or 0, r["created_at"]), reverse=True)
    return rows


def recent_runs(store: Store, limit: int = RECENT_RUNS) -> list[str]:
    """The ``limit`` most recently registered runs that have observations, newest first."""
    return [r["run_id"] for r in _runs_newest_first(store) if r["observed"]][:limit]


def _runs_hint(store: Store) -> str:
    runs = _runs_newest_first(store)
    if not runs:
        return ("the store has no runs yet. Fix: record one first, e.g. "
                f"`{shell_command('pilot-commit', 'simulate', '--store', store.path, '--method', 'pc')}`.")
    names = [r["run_id"] for r in runs[:5]]
    more = (f" (`{shell_command('pilot-commit', 'runs', '--store', store.path)}` lists all {len(runs)})"
            if len(runs) > len(names) else "")
    return f"Fix: name one of its runs, e.g. {', '.join(names)}{more}."


def _no_observations(store: Store, run: dict) -> TimelineError:
    if run["n_steps"]:
        why = f"its {run['n_steps']} recorded step(s) observed no prompt"
    else:
        why = f"it has no recorded step yet (status {run['status']})"
    others = [r for r in recent_runs(store, 5) if r != run["run_id"]]
    pick = f"pick a run that has steps, e.g. {', '.join(others)}" if others else (
        "record a run first, e.g. "
        f"`{shell_command('pilot-commit', 'simulate', '--store', store.path, '--method', 'pc')}`")
    fix = (f"wait for its first step (`{shell_command('pilot-commit', 'runs', '--store', store.path)}`), or {pick}"
           if run["status"] == "running" else pick)
    return TimelineError(f"run {run['run_id']!r} ({method_label(run['method'])}) has no prompt observations "
                         f"(no pass_rate_history rows): {why}, so there is no pass rate to draw. Fix: {fix}.")


def load_timeline(store: Store, run_id: str, prompts: Sequence[int] | None = None,
                  top: int = DEFAULT_TOP) -> TimelineData:
    """The timeline of run ``run_id``: the rows are ``prompts`` (each once, in the order given) or, without them,
    the ``top`` most-visited prompts. Raises :class:`TimelineError` (with its fix) for an unknown run, a run with no
    observations, prompts the run never sampled, or ``top < 1``."""
    chosen = None if prompts is None else list(dict.fromkeys(int(p) for p in prompts))  # each once, in order
    if chosen is not None and not chosen:
        raise TimelineError("no prompt ids were given. Fix: list at least one prompt id, or give none to show the "
                            f"{top} most-visited prompts.")
    if chosen is None and top < 1:
        raise TimelineError(f"top={top}: the heatmap needs at least one row. Fix: ask for top >= 1 (default "
                            f"{DEFAULT_TOP}).")
    runs = store.query(
        """SELECT r.run_id, r.method, r.family, r.seed, r.kind, r.status,
                  (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id) AS n_steps,
                  (SELECT min(step) FROM steps s WHERE s.run_id = r.run_id) AS first_step,
                  (SELECT max(step) FROM steps s WHERE s.run_id = r.run_id) AS last_step
           FROM runs r WHERE r.run_id = ?""", [run_id])
    if not runs:
        raise TimelineError(f"no run {brief(run_id)} in {shown_path(store.path)}: " + _runs_hint(store))
    run = with_live_status(store, runs)[0]  # a run whose writer is gone reads as stopped
    _, rows = store.query_table(_CELLS_SQL, [run_id])
    if not rows:
        raise _no_observations(store, run)
    cols = list(zip(*rows))
    pid = np.asarray(cols[0], np.int64)
    step = np.asarray(cols[1], np.int64)
    n = np.asarray(cols[2], np.float64)
    nc = np.asarray([math.nan if v is None else v for v in cols[3]], np.float64)
    marker = np.asarray([-1 if v is None else v for v in cols[4]], np.int8)
    ev = np.asarray(cols[5], bool)
    ret = np.asarray(cols[6], bool)

    uniq, visits = np.unique(pid, return_counts=True)  # uniq ascending
    if chosen is None:
        order = np.lexsort((uniq, -visits))[:top]  # most visited first, the lower id first among equals
        ids = uniq[order]
        picked = "top"
    else:
        seen = set(uniq.tolist())
        unknown = [p for p in chosen if p not in seen]
        if unknown:
            best = uniq[np.lexsort((uniq, -visits))[:5]].tolist()
            shown = ", ".join(map(str, unknown[:10])) + (f" (+{len(unknown) - 10} more)" if len(unknown) > 10 else "")
            raise TimelineError(
                f"run {run_id!r} never sampled prompt(s) {shown} (it sampled {len(uniq):,} prompts, ids "
                f"{int(uniq[0])}..{int(uniq[-1])}). Fix: choose prompts the run sampled (its most-visited: "
                f"{', '.join(map(str, best))}), or give no prompt list to show the {DEFAULT_TOP} most-visited.")
        ids = np.asarray(chosen, np.int64)
        picked = "chosen"

    first = min(int(step.min()), run["first_step"] if run["first_step"] is not None else int(step.min()))
    last = max(int(step.max()), run["last_step"] if run["last_step"] is not None else int(step.max()))
    steps = np.arange(first, last + 1, dtype=np.int64)
    col = step - first

    counts = {}
    for i, d in enumerate(DECISIONS):
        counts[d] = np.bincount(col[marker == i], minlength=steps.shape[0]).astype(np.int64)
    evicted_counts = np.bincount(col[ev], minlength=steps.shape[0]).astype(np.int64)
    returned_counts = np.bincount(col[ret], minlength=steps.shape[0]).astype(np.int64)

    row_of = {int(p): r for r, p in enumerate(ids.tolist())}
    sel = np.isin(pid, ids)
    r_idx = np.fromiter((row_of[int(p)] for p in pid[sel]), np.int64, int(sel.sum()))
    c_idx = col[sel]
    shape = (ids.shape[0], steps.shape[0])
    p_hat = np.full(shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_hat[r_idx, c_idx] = np.where(n[sel] > 0, nc[sel] / n[sel], np.nan)
    mk = np.full(shape, -1, np.int8)
    mk[r_idx, c_idx] = marker[sel]
    evm = np.zeros(shape, bool)
    evm[r_idx, c_idx] = ev[sel]
    rtm = np.zeros(shape, bool)
    rtm[r_idx, c_idx] = ret[sel]
    visit_of = dict(zip(uniq.tolist(), visits.tolist()))
    return TimelineData(
        run_id=run_id, method=run["method"], family=run["family"], seed=int(run["seed"]),
        prompt_ids=tuple(int(p) for p in ids.tolist()), visits=tuple(int(visit_of[int(p)]) for p in ids.tolist()),
        picked=picked, total_prompts=int(uniq.shape[0]), steps=steps, p_hat=p_hat, marker=mk, evicted=evm,
        returned=rtm, counts=counts, evicted_counts=evicted_counts, returned_counts=returned_counts,
    )


# ---- drawing ------------------------------------------------------------------------------------------------------
def _clamp(v: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, v))


def make_timeline_figure(data: TimelineData) -> Figure:
    """The figure of :func:`load_timeline`'s data: the heatmap with its markers and colorbar on top, the decisions of
    all prompts per step below, one legend for both."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PatchCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    n_rows, n_steps = data.p_hat.shape
    width = _clamp(4.5 + 0.08 * n_steps, 10.0, 26.0)
    row_h = _clamp(9.0 / max(n_rows, 1), 0.06, 0.3)
    heat_h = _clamp(row_h * n_rows, 2.2, 26.0)
    agg_h = 2.4
    fig = Figure(figsize=(width, heat_h + agg_h + 2.3), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, height_ratios=[heat_h, agg_h], width_ratios=[1.0, 0.012])
    ax = fig.add_subplot(grid[0, 0])
    cax = fig.add_subplot(grid[0, 1])
    ax2 = fig.add_subplot(grid[1, 0], sharex=ax)
    fig.add_subplot(grid[1, 1]).set_axis_off()

    x0, x1 = int(data.steps[0]), int(data.steps[-1])  # training steps, as stored
    cmap = colormaps[CMAP].with_extremes(bad="white")
    img = ax.imshow(np.ma.masked_invalid(data.p_hat), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto",
                    interpolation="nearest", extent=(x0 - 0.5, x1 + 0.5, n_rows - 0.5, -0.5), gid="heatmap")
    ax.set_facecolor("white")
    cb = fig.colorbar(img, cax=cax)
    cb.set_label("pass rate", fontsize="small")

    # markers sized to the cells (points): the axes are ~ (width - 2.2) inches wide
    cell_w = (width - 2.2) * 72.0 / max(n_steps, 1)
    cell_h = heat_h * 72.0 / max(n_rows, 1)
    side = max(1.6, 0.62 * min(cell_w, cell_h))
    cols = np.asarray(data.steps, np.int64)
    for i, d in enumerate(DECISIONS):
        rr, cc = np.nonzero(data.marker == i)
        if rr.shape[0]:
            shape, color = DECISION_STYLE[d]
            ax.scatter(cols[cc], rr, s=side**2, marker=shape, c=color, edgecolors="black",
                       linewidths=min(0.5, side / 10), zorder=3, gid=f"decision:{d}")
    for flag, color, inset, gid in ((data.evicted, EVICTED_COLOR, 0.04, "evicted"),
                                    (data.returned, RETURNED_COLOR, 0.16, "returned")):
        rr, cc = np.nonzero(flag)
        if rr.shape[0]:  # a frame around the cell (returned: inside evicted's, when a cell has both)
            size = 1.0 - 2 * inset
            ax.add_collection(PatchCollection(
                [Rectangle((x - 0.5 + inset, y - 0.5 + inset), size, size) for x, y in zip(cols[cc], rr)],
                facecolors="none", edgecolors=color, linewidths=max(0.7, min(1.5, side / 5)), zorder=4, gid=gid))

    ax.set_ylim(n_rows - 0.5, -0.5)
    every = max(1, math.ceil(n_rows / 60))  # at most ~60 row labels
    ticks = list(range(0, n_rows, every))
    ax.set_yticks(ticks, [f"{data.prompt_ids[t]}" for t in ticks], fontsize="x-small" if n_rows > 25 else "small")
    ax.set_ylabel("prompt id" + (" (most visited first)" if data.picked == "top" else ""))
    ax.tick_params(axis="x", labelbottom=False)
    if n_rows <= 120:  # faint row separators: blank cells read as blank, not as a white band
        ax.hlines(np.arange(0.5, n_rows - 0.5), x0 - 0.5, x1 + 0.5, colors="0.88", linewidths=0.4, zorder=1)

    bottom = np.zeros(n_steps, np.int64)
    for d in DECISIONS:
        v = data.counts[d]
        if v.any():
            ax2.bar(cols, v, bottom=bottom, width=1.0, color=DECISION_STYLE[d][1], linewidth=0, gid=f"count:{d}")
        bottom = bottom + v
    for counts, color, gid in ((data.evicted_counts, EVICTED_COLOR, "count:evicted"),
                               (data.returned_counts, RETURNED_COLOR, "count:returned")):
        if counts.any():  # a white underlay keeps the line readable over the bars
            ax2.plot(cols, counts, color="white", linewidth=3.0, drawstyle="steps-mid", alpha=0.8)
            ax2.plot(cols, counts, color=color, linewidth=1.4, drawstyle="steps-mid", gid=gid)
    ax2.set_xlim(x0 - 0.5, x1 + 0.5)
    ax2.set_ylabel("prompts")
    ax2.set_xlabel("training step")
    ax2.set_title(f"all {data.total_prompts:,} prompts: decisions per step (stack height = prompts sampled)",
                  fontsize="small", loc="left")
    ax2.grid(True, axis="y", alpha=0.3)
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))

    present = [d for d in DECISIONS if data.counts[d].any()]
    handles = [Line2D([], [], linestyle="none", marker=DECISION_STYLE[d][0], markerfacecolor=DECISION_STYLE[d][1],
                      markeredgecolor="black", markersize=7, label=DECISION_LABELS[d]) for d in present]
    if data.evicted_counts.any():
        handles.append(Line2D([], [], linestyle="-", marker="s", markerfacecolor="none", markersize=9,
                              color=EVICTED_COLOR, label="evicted (frame; line: count)"))
    if data.returned_counts.any():
        handles.append(Line2D([], [], linestyle="-", marker="s", markerfacecolor="none", markersize=8,
                              color=RETURNED_COLOR, label="returned from easy pool (frame; line: count)"))
    handles.append(Patch(facecolor="white", edgecolor="0.6", label="blank: not sampled that step"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles) if len(handles) <= 4 else math.ceil(len(handles) / 2), fontsize="small",
               frameon=False)

    fig.suptitle(f"{data.run_id} ({method_label(data.method)}, family {data.family}, seed {data.seed}): "
                 "pass rate per prompt and step", fontsize="medium", fontweight="bold")
    lo, hi = min(data.visits), max(data.visits)
    span = f"{lo}" if lo == hi else f"{lo}-{hi}"
    rule = (f"visits = steps sampled: {span}, ties: lower id" if data.picked == "top"
            else f"in the order asked for; visits {span}")
    ax.set_title(
        f"rows: {data.describe()} ({rule}); lower panel: all prompts\n"
        "cell: pooled n_correct / n of the prompt's rollouts in the step; marker: the step's decision "
        "(first of trained > kept > surplus > skipped > deferred > prior)",
        fontsize="small", loc="left")
    return fig


def write_timeline(store: Store, run_id: str, out: str | Path, prompts: Sequence[int] | None = None,
                   top: int = DEFAULT_TOP) -> TimelineResult:
    """Draw run ``run_id``'s timeline (:func:`load_timeline`, :func:`make_timeline_figure`) into the PNG ``out``
    (its folder is created; written whole or not at all). Raises :class:`TimelineError` with its fix."""
    data = load_timeline(store, run_id, prompts, top)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(make_timeline_figure(data), path)
    return TimelineResult(
        path=path, run_id=data.run_id, method=data.method, prompts=data.prompt_ids,
        total_prompts=data.total_prompts, steps=int(data.steps.shape[0]), first_step=int(data.steps[0]),
        last_step=int(data.steps[-1]), description=data.describe(),
    )
