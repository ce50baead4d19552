"""Reports over a store: the rollouts-to-target table (paper Table 2) as Markdown, per-run curves, PNG plots and a
per-method summary (docs/DESIGN.md section 6). A plain library: the CLI (``pilot-commit report --plots DIR``) and the
Dagster report asset both call :func:`build_report`.

Curves are read from the store's views, for the latest run of each (family, method, seed), exactly the runs
``rollouts_to_target`` compares:

* eval accuracy (mean over the run's benchmarks, view ``eval_curve``) vs cumulative sampled rollouts and vs steps;
* per step (view ``steps``): mean reward std of the trained groups and the informative share (trained groups whose
  rewards are not all equal).

Steps on the plots' x axes are counted from 1: the store's step ``k`` (0-based) is training step ``k + 1``, and an
eval after step ``k``'s update sits at ``k + 1``; the eval before training (store step -1) sits at 0.

matplotlib is imported only when plots are drawn, through its object API (``Figure`` + the Agg canvas): no
``pyplot``, no ``matplotlib.use``, no change to the process's backend or rcParams.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .allocation import training_methods
from .store import Store, StoreError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

METHOD_ORDER = tuple(training_methods())  # grpo, dapo, pc: the registry's order
METHOD_COLORS = {"grpo": "#1f77b4", "dapo": "#ff7f0e", "pc": "#2ca02c", "oracle": "#7f7f7f"}
METHOD_LABELS = {"grpo": "GRPO", "dapo": "DAPO", "pc": "PC", "oracle": "oracle"}
OTHER_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PLOT_NAMES = ("accuracy_vs_rollouts", "accuracy_vs_steps", "reward_std_per_step", "informative_share_per_step")
RUN_GID = "run:"  # gid prefix of a run's line on a plot (the target lines carry "target:")
TARGET_GID = "target:"


class ReportError(StoreError):
    """Nothing to report (no runs or no eval results yet); the message says what to run first."""


# ---- formatting -------------------------------------------------------------------------------------------------
def format_count(v: Any) -> str:
    """Rollouts with thousands separators; ``None`` (never reached the target) as ``never``."""
    return "never" if v is None else f"{int(v):,}"


def format_ratio(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}x"


# The efficiency study's committed result on the `bench` preset: data the package ships (package-data), read here with
# no research code; written only when asked, by `research/bench_study.py --results` (`make study-bench`): its medians,
# seeds and reproducibility row. Short runs such as `make demo` print it beside their own table.
STUDY_RESULTS = Path(__file__).resolve().parent / "presets" / "bench.results.json"


def study_headline(path: str | Path = STUDY_RESULTS) -> str:
    """One paragraph: the committed study's median rollout ratios, its seeds, preset and run length."""
    import json

    try:
        res = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return "No efficiency study is committed yet (`make bench-efficiency` writes it)."
    med = res["medians"]
    ours = ", ".join(f"{k.split(' / ')[0]} {format_ratio(v)}" for k, v in med.items() if k.endswith("our PC"))
    paper = ", ".join(f"{k.split(' / ')[0]} {format_ratio(v)}" for k, v in med.items() if k.endswith("paper PC"))
    rep = res.get("reproducibility") or {}
    rep_txt = (f" Re-run under the {rep['other_kernels']} CPU kernels: GRPO64 / our PC {format_ratio(rep['median_other'])}"
               f" (main {format_ratio(rep['median_main'])})." if rep.get("median_other") is not None else "")
    seeds = ", ".join(map(str, res.get("core_seeds") or res["seeds"]))
    if res.get("core_seeds") and res["core_seeds"] != res["seeds"]:
        seeds += f" (GRPO64 / our PC on {', '.join(map(str, res['seeds']))})"
    smooth = res.get("smooth_evals", 1)
    curves = f" on curves smoothed over {smooth} evals" if smooth > 1 else ""
    dtype = f" in {res['dtype']}" if res.get("dtype") else ""
    return (f"The study (`make bench-efficiency`, docs/BENCHMARKS.md): preset `{res['preset']}`{dtype}, {res['steps']} steps a "
            f"run, seeds {seeds}; median rollouts-to-target ratio{curves}, baseline / PC "
            f"(> 1: PC needed fewer sampled rollouts): our PC {ours}; the paper's PC {paper}.{rep_txt}")


def smoke_test_note(steps: int) -> str:
    """What a short run's table is and is not (``make demo`` prints it above the study's headline)."""
    return (f"This table is a SMOKE TEST, not a comparison: each method trained {steps} steps, far too few for rollout "
            "efficiency to show (the study runs 120 steps x 3 seeds per method and reads the medians). It shows "
            "that every part of the pipeline ran end to end and what the store records.")


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_color(method: str) -> str:
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return OTHER_COLORS[sum(map(ord, method)) % len(OTHER_COLORS)]  # stable across runs, unlike hash()


def _method_key(method: str) -> tuple[int, str]:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


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


# ---- curves -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunCurves:
    """One run's curves as the store has them. Per-step values the store holds as NULL are NaN."""

    run_id: str
    family: str
    method: str
    seed: int
    eval_step: tuple[int, ...]  # store steps, -1 = before training
    eval_rollouts: tuple[int, ...]  # cumulative sampled rollouts through that step (0 before training)
    eval_accuracy: tuple[float, ...]  # mean over the run's benchmarks
    step: tuple[int, ...]  # store steps (0-based)
    cumulative_sampled: tuple[int, ...]
    cumulative_trained: tuple[int, ...]
    reward_std: tuple[float, ...]  # mean reward std of the step's trained groups
    informative_share: tuple[float, ...]

    @property
    def steps(self) -> int:
        return len(self.step)

    @property
    def total_sampled(self) -> int:
        return self.cumulative_sampled[-1] if self.cumulative_sampled else 0

    @property
    def total_trained(self) -> int:
        return self.cumulative_trained[-1] if self.cumulative_trained else 0

    @property
    def final_accuracy(self) -> float | None:
        return self.eval_accuracy[-1] if self.eval_accuracy else None

    @property
    def peak_accuracy(self) -> float | None:
        return max(self.eval_accuracy) if self.eval_accuracy else None


def _float(v: Any) -> float:
    return math.nan if v is None else float(v)


def load_curves(store: Store, family: str | None = None, latest_only: bool = True) -> list[RunCurves]:
    """The curves of every run (of ``family``, or all) that has steps or evals, ordered by family, method
    (grpo, dapo, pc, others), seed. ``latest_only``: only the latest run of each (family, method, seed), the runs
    ``rollouts_to_target`` compares."""
    runs = store.query("SELECT * FROM runs WHERE ? IS NULL OR family = ?", [family, family])
    # the store's order of registration (runs.seq, v7), never a wall clock; a store not upgraded yet: creation time
    order = {r["run_id"]: i for i, r in enumerate(sorted(
        runs, key=lambda r: (r.get("seq") is not None, r.get("seq") or 0, r["created_at"], r["run_id"])))}
    if latest_only:
        newest: dict[tuple, dict] = {}
        for r in runs:
            key = (r["family"], r["method"], r["seed"])
            if key not in newest or order[r["run_id"]] > order[newest[key]["run_id"]]:
                newest[key] = r
        runs = list(newest.values())
    if not runs:
        return []
    ids = [r["run_id"] for r in runs]
    evals: dict[str, list[dict]] = {}
    for r in store.query(
        "SELECT run_id, step, accuracy, cumulative_sampled FROM eval_curve WHERE list_contains(?, run_id) "
        "ORDER BY run_id, step",
        [ids],
    ):
        evals.setdefault(r["run_id"], []).append(r)
    steps: dict[str, list[dict]] = {}
    for r in store.query(
        """SELECT run_id, step, mean_reward_std, informative_share,
                  sum(sampled_rollouts) OVER w AS cumulative_sampled, sum(trained_rollouts) OVER w AS cumulative_trained
           FROM steps WHERE list_contains(?, run_id)
           WINDOW w AS (PARTITION BY run_id ORDER BY step ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
           ORDER BY run_id, step""",
        [ids],
    ):
        steps.setdefault(r["run_id"], []).append(r)
    out = []
    for r in runs:
        ev, st = evals.get(r["run_id"], []), steps.get(r["run_id"], [])
        if not ev and not st:
            continue  # registered, nothing written yet
        out.append(
            RunCurves(
                run_id=r["run_id"],
                family=r["family"],
                method=r["method"],
                seed=int(r["seed"]),
                eval_step=tuple(int(e["step"]) for e in ev),
                eval_rollouts=tuple(int(e["cumulative_sampled"]) for e in ev),
                eval_accuracy=tuple(float(e["accuracy"]) for e in ev),
                step=tuple(int(s["step"]) for s in st),
                cumulative_sampled=tuple(int(s["cumulative_sampled"] or 0) for s in st),
                cumulative_trained=tuple(int(s["cumulative_trained"] or 0) for s in st),
                reward_std=tuple(_float(s["mean_reward_std"]) for s in st),
                informative_share=tuple(_float(s["informative_share"]) for s in st),
            )
        )
    out.sort(key=lambda c: (c.family, _method_key(c.method), c.seed, order[c.run_id], c.run_id))
    return out


# ---- summary ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MethodSummary:
    """One method of one family over its seeds; the numbers are means over the seeds' runs (exact with one seed)."""

    family: str
    method: str
    seeds: tuple[int, ...]
    run_ids: tuple[str, ...]
    steps: float
    total_sampled_rollouts: float
    total_trained_rollouts: float
    final_accuracy: float | None  # the last eval's mean accuracy
    peak_accuracy: float | None  # the best eval's mean accuracy

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"], d["run_ids"] = list(self.seeds), list(self.run_ids)
        return d


def _mean(vals: Sequence[float | None]) -> float | None:
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def summarize(curves: Iterable[RunCurves]) -> list[MethodSummary]:
    groups: dict[tuple[str, str], list[RunCurves]] = {}
    for c in curves:
        groups.setdefault((c.family, c.method), []).append(c)
    out = []
    for (family, method), cs in sorted(groups.items(), key=lambda kv: (kv[0][0], _method_key(kv[0][1]))):
        out.append(
            MethodSummary(
                family=family,
                method=method,
                seeds=tuple(c.seed for c in cs),
                run_ids=tuple(c.run_id for c in cs),
                steps=_mean([c.steps for c in cs]),
                total_sampled_rollouts=_mean([c.total_sampled for c in cs]),
                total_trained_rollouts=_mean([c.total_trained for c in cs]),
                final_accuracy=_mean([c.final_accuracy for c in cs]),
                peak_accuracy=_mean([c.peak_accuracy for c in cs]),
            )
        )
    return out


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


# ---- plots ------------------------------------------------------------------------------------------------------
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
            "mean eval accuracy (over benchmarks)", lambda c: ([s + 1 for s in c.eval_step], c.eval_accuracy), True),
        "reward_std_per_step": (
            "mean reward std of trained groups per step", "training step",
            "mean reward std of trained groups", lambda c: ([s + 1 for s in c.step], c.reward_std), False),
        "informative_share_per_step": (
            "informative share of trained groups per step", "training step",
            "share of trained groups with reward std > 0",
            lambda c: ([s + 1 for s in c.step], c.informative_share), False),
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


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically; returns ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)  # a reader never sees half a PNG
    return path


def _no_data_message(store: Store, family: str | None, what: str) -> str:
    scope = f" for family {family!r}" if family else ""
    return (
        f"no {what} in {store.path}{scope} yet, so there is nothing to report. Fix: record runs first, e.g. "
        f"`pilot-commit simulate-demo --store {store.path}` (GRPO, DAPO and PC in the simulator), "
        f"`pilot-commit simulate --store {store.path} --method grpo` (then dapo and pc), or "
        f"`pilot-commit train --store {store.path} ...`; see `pilot-commit runs --store {store.path}`."
    )


def _check_curves(store: Store, curves: Sequence[RunCurves], family: str | None) -> None:
    if not curves:
        raise ReportError(_no_data_message(store, family, "runs"))
    if not any(c.eval_step for c in curves):
        raise ReportError(_no_data_message(store, family, "eval results"))


def _plot_all(curves: Sequence[RunCurves], report: Mapping[str, Any], out_dir: Path) -> list[Path]:
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
    _check_curves(store, curves, family)
    return _plot_all(curves, store.report(family), Path(out_dir))


# ---- the report -------------------------------------------------------------------------------------------------
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
    _check_curves(store, curves, family)
    report = store.report(family)
    plots = _plot_all(curves, report, Path(out_dir)) if out_dir is not None else []
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
