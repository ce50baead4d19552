"""The reports' numbers as text: counts and ratios (:func:`format_count`, :func:`format_ratio`, shared with the
studies), Table 2's rows as every report shows them (:func:`target_rows`: the CLI's table, the report asset's, the
Markdown) and the Markdown tables, rollouts to target (paper Table 2) and the per-method summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..store.schema import COMPARED_RUN_RULE
from .curves import MethodSummary
from .style import method_label

# The efficiency study's committed result on the `bench` preset: data the package ships (package-data), read with no
# research code; written only when asked, by `research/bench_study.py --results` (`make study-bench`): its medians,
# seeds and reproducibility row. Short runs such as `make demo` print it beside their own table.
STUDY_RESULTS = Path(__file__).resolve().parent / "bench_study_results.json"


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


COMPARED_METHODS = ("grpo", "dapo", "pc")
"""Table 2's method columns, in order."""


def target_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``Store.report()``'s dict as Table 2's rows, each family's seeds then its ``median`` row: ``family``, ``seed``,
    ``target`` and the two ratios (numbers as stored: each report formats them), a cell per method of
    :data:`COMPARED_METHODS` (:func:`format_reached`; empty on the median row), ``runs_compared``, ``note`` (a smoke
    test, runs of different lengths) and ``missing_steps`` (> 0: a compared run lacks steps)."""
    rows = []
    for family, fam in report.items():
        caveat = family_smoke_test(fam)  # a smoke test says so on each row that shows a ratio
        for s in fam["seeds"]:
            r, runs, steps = s["rollouts"], s.get("runs") or {}, s.get("steps") or {}
            rows.append({
                "family": family, "seed": s["seed"], "target": s["target"],
                **{m: format_reached(r[m], runs.get(m, m)) for m in COMPARED_METHODS},
                "grpo_over_pc": s["grpo_over_pc"], "dapo_over_pc": s["dapo_over_pc"],
                "runs_compared": ", ".join(f"{m}: {runs[m]} ({steps[m]} steps)" if runs.get(m) else f"{m}: no run"
                                           for m in COMPARED_METHODS),
                "note": "; ".join(n for n in (caveat, length_note(s)) if n), "missing_steps": s.get("missing_steps") or 0,
            })
        rows.append({
            "family": family, "seed": "median", "target": None, **{m: "" for m in COMPARED_METHODS},
            "grpo_over_pc": fam["median_grpo_over_pc"], "dapo_over_pc": fam["median_dapo_over_pc"],
            "runs_compared": "", "note": caveat or "",
            "missing_steps": max([s.get("missing_steps") or 0 for s in fam["seeds"]], default=0),
        })
    return rows


def target_table_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """A :func:`target_rows` row as the text tables show it: seed, target, the method cells, the two ratios."""
    target = "" if row["seed"] == "median" else format_target(row["target"])
    return (str(row["seed"]), target, *(row[m] for m in COMPARED_METHODS), format_ratio(row["grpo_over_pc"]),
            format_ratio(row["dapo_over_pc"]))


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
            *([f"**{caveat}.**", ""] if (caveat := family_smoke_test(fam)) else []),
            "| seed | target | GRPO | DAPO | PC | GRPO/PC | DAPO/PC |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        lines += ["|" + "|".join(f" {c} " if c else " " for c in target_table_cells(row)) + "|"
                  for row in target_rows({family: fam})]
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


def study_scale(path: str | Path = STUDY_RESULTS) -> tuple[int, int]:
    """(seeds, steps a run) the committed study reads its medians from; (3, 120) when no study is committed."""
    import json

    try:
        res = json.loads(Path(path).read_text())
        return len(res.get("core_seeds") or res["seeds"]), int(res["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return 3, 120


def smoke_test(seeds: int, steps: int | tuple[int, int], path: str | Path = STUDY_RESULTS) -> str | None:
    """THE rule for every screen that shows a rollout ratio (``pilot-commit report``, the ``rollouts_report`` asset,
    ``make demo``): a ratio read from fewer seeds, or from shorter runs, than the committed study's is a smoke test,
    and this is what the screen says beside it; None when the runs are as many and as long as the study's.
    ``steps``: the compared runs' steps a run (or its shortest and longest)."""
    lo, hi = (steps, steps) if isinstance(steps, int) else steps
    want_seeds, want_steps = study_scale(path)
    if seeds >= want_seeds and lo >= want_steps:
        return None
    length = f"{lo} steps" if lo == hi else f"{lo} to {hi} steps"
    return (f"SMOKE TEST, not a comparison: each method trained {length} on {seeds} seed{'s' if seeds != 1 else ''}, "
            f"too few for rollout efficiency to show (the study runs {want_steps} steps x {want_seeds} seeds per "
            "method and reads the medians)")


def family_smoke_test(fam: Mapping[str, Any], path: str | Path = STUDY_RESULTS) -> str | None:
    """:func:`smoke_test` of one family of ``Store.report()``: its seeds, and its compared runs' steps."""
    steps = [n for s in fam.get("seeds") or [] for n in (s.get("steps") or {}).values() if n is not None] or [0]
    return smoke_test(len(fam.get("seeds") or []), (min(steps), max(steps)), path)
