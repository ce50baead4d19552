"""Issue 52: a fair test of allocation at small groups. PC whose trained group is 8 rollouts or fewer against GRPO-4
(GRPO's best size on `bench`, frozen by issue 42's tuning), every arm measured the same way.

    .venv/bin/python research/small_groups.py tune [--store S] [--workers N]   # tuning runs, seeds 100 and 101
    .venv/bin/python research/small_groups.py tune --no-run [--write F]        # the rule's table and choice
    .venv/bin/python research/small_groups.py study [--store S] [--workers N]  # fresh seeds 19-23 (resumable)
    .venv/bin/python research/small_groups.py status [--store S]               # where each run stands

**One measurement for every arm** (fixed here before any run): every run evaluates every :data:`EVAL_EVERY` sampled
rollouts (``training.eval_every_rollouts``: after each step whose cumulative sampled rollouts cross a multiple of
it), and stops at the first step at or past :data:`BUDGET` sampled rollouts, whatever its method; the primary metric
is the sampled rollouts at the first smoothed evaluation (trailing mean of :data:`SMOOTH` evals, as the earlier
studies) at or above the fixed target :data:`TARGET` (chosen before the runs from the tuning seeds' earlier GRPO and
PC plateaus: 0.716-0.745); the second table is the smoothed accuracy at the equal sampled budgets
:data:`EQUAL_BUDGETS` (the first evaluation at or past each).

**The grid** (:data:`PC_BUDGETS`): PC budgets whose trained group is 4 or 8 rollouts (single pilots of 2 + commits of
2; sequential pilots of 2 + 2 + commits of 4; single pilots of 4 + commits of 4), at b_t 16 and, for groups of 4,
with twice the prompts a step (b_t 32: the trained rollouts of the groups of 8); each without and with the frozen
history prior (issue 42's candidate A, ``prior_study.PRIOR_CANDIDATES['A']``), and each without the prior as
**commits only** (``allocator.train_pilots=false``: pilots screen, only commits train), which measures what training
on band-conditioned pilots costs or gains. Commit sizes are uniform (n - n_pilot), as the paper's; eviction is off
(amended after the first runs: :data:`NO_EVICTION`).

**The rule** (:func:`choose`), fixed before any run: lowest median over the tuning seeds of sampled rollouts to the
fixed target (a seed where the run never reaches it within the budget costs infinity); ties to the higher median
smoothed accuracy at 30,720 sampled rollouts. The choice is frozen in :data:`PC_SMALL_BEST`, then the fresh seeds
:data:`STUDY_SEEDS` run GRPO-4, the choice and its twin with the other prior setting.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pc_pipelines.reports import RunCurves
from pc_pipelines.store import Store
from research.study import ratio, ratio_cell

ROOT = Path(__file__).resolve().parent.parent
PRESET = "bench"
STORE = "/work/s52/s52.duckdb"
OUT = "/work/s52/runs"
TUNE_SEEDS = (100, 101)  # the only seeds that tune
STUDY_SEEDS = (19, 20, 21, 22, 23)  # fresh: 0-18 were reported by earlier studies, 100 and 101 tune
TUNE_FAMILY = "small-tune"
STUDY_FAMILY = "small-study"

# ---- one measurement for every arm, fixed before any run --------------------------------------------------------
EVAL_EVERY = 1_280
"""Sampled rollouts between evaluations, the same for every arm (20 GRPO-4 steps; ~5 PC-small steps)."""
BUDGET = 40_960
"""Every run stops at the first step at or past this many sampled rollouts (32 evaluation intervals)."""
TARGET = 0.725
"""The fixed held-out target (mean over lengths 1-6, smoothed), chosen before the runs: between the tuning seeds'
earlier GRPO-16 plateaus (0.716-0.730) and PC's (0.727-0.745)."""
EQUAL_BUDGETS = (15_360, 30_720)
SMOOTH = 3
MEASURE = (f"training.eval_every_rollouts={EVAL_EVERY}",)

GRPO_N = 4  # frozen by issue 42's tuning (research/prior_study.py GRPO_BEST_N)

# ---- the grid, fixed before any run -------------------------------------------------------------------------------
UNIFORM = ("allocator.commit_strategy=uniform",)
PC_BUDGETS: dict[str, tuple[str, ...]] = {
    # trained group 4 = 2 pilot + 2 commit rollouts; 64 trained rollouts a step (GRPO-4's whole step)
    "p2c2": ("allocator.n=4", "allocator.n_pilot=2", "allocator.pilot_strategy=single", *UNIFORM),
    # the same groups, twice the prompts a step: 128 trained rollouts, as the groups of 8 below
    "p2c2-b32": ("allocator.n=4", "allocator.n_pilot=2", "allocator.pilot_strategy=single", *UNIFORM,
                 "allocator.train_batch=32"),
    # trained group 8 = sequential pilots 2 + 2 (a flat first wave decides early) + 4 commits
    "p2s2c4": ("allocator.n=8", "allocator.n_pilot=4", "allocator.pilot_strategy=sequential", "allocator.pilot_wave=2",
               *UNIFORM),
    # trained group 8 = single pilots of 4 + 4 commits
    "p4c4": ("allocator.n=8", "allocator.n_pilot=4", "allocator.pilot_strategy=single", *UNIFORM),
}
COMMITS_ONLY = ("allocator.train_pilots=false",)


def prior_a(budget: str) -> tuple[str, ...]:
    """Issue 42's frozen history prior (candidate A); its first-wave rule only where pilots come in waves."""
    from research.prior_study import PRIOR_CANDIDATES
    sequential = "allocator.pilot_strategy=sequential" in PC_BUDGETS[budget]
    return tuple(o for o in PRIOR_CANDIDATES["A"] if sequential or not o.startswith("allocator.screen_early_wave"))


# Amended after the first tuning runs (before any run of the other budgets, and before any choice): without the
# prior, PC's strict eviction (bench: p_solve 1) evicts a prompt for good once its pilot is all right, and a pilot of
# 2 is all right for a prompt of pass rate 0.7 one time in two. p2c2 on seeds 100 and 101 (eviction on) trained 24 of
# its 64 rollouts a step from a pool of ever harder prompts, sampled 870-912 a step and fell to held-out 0.33-0.46 at
# 30,720 rollouts (p2c2-co alike), while the prior's twin (issue 42's prior runs with eviction off) reached the
# target. So every candidate runs with eviction off: with and without the prior then differ in the prior alone. The
# runs made with eviction on stay in the store (EVICTING, reported beside the grid, never chosen).
NO_EVICTION = ("allocator.evict=false",)
EVICTING = ("p2c2", "p2c2-co", "p2c2-b32")
"""Runs made before the amendment (eviction on), under the candidate's old name: kept for the record."""
AMENDED_TAG = "-ne"
"""Run-id tag of the amended candidates without the prior (the prior's runs were unchanged: it turns eviction off)."""


def candidates() -> dict[str, tuple[str, ...]]:
    """name -> overrides: every budget without the prior, with it, and commits only (without it); eviction off."""
    out: dict[str, tuple[str, ...]] = {}
    for b, over in PC_BUDGETS.items():
        out[b] = (*over, *NO_EVICTION)
        out[f"{b}-prior"] = (*over, *prior_a(b))
        out[f"{b}-co"] = (*over, *COMMITS_ONLY, *NO_EVICTION)
    return out


CANDIDATES = candidates()
RULE = (f"lowest median over seeds {TUNE_SEEDS[0]} and {TUNE_SEEDS[1]} of sampled rollouts to the fixed target "
        f"{TARGET} (first evaluation, smoothed over {SMOOTH}, at or above it; never within {BUDGET:,}: infinity); "
        f"ties to the higher median smoothed accuracy at {EQUAL_BUDGETS[1]:,}")
# Frozen after the tuning runs (`small_groups.py tune --no-run`, store /work/s52/s52.duckdb, 2026-11-29): median
# sampled rollouts to 0.725 over seeds 100 / 101 (GRPO-4: 26,880 / 25,600):
#   p2c2-prior 16,736 / 23,222 (19,979; 5.7x sampled a trained rollout)   p2s2c4-prior 20,548 / 20,620 (20,584; 3.2x)
#   p4c4 24,644 / 23,308 (23,976)   p2c2 24,320 / 24,672 (24,496)   p2c2-b32-prior 26,112 / 22,592 (24,352)
#   p4c4-prior 24,728 / 32,132   p2s2c4 25,738 / 34,956   p2c2-b32 44,800 / 38,016; commits only: p2s2c4-co
#   42,448 / 27,178, p4c4-co 43,900 / never, p2c2-co and p2c2-b32-co never within 40,960.
PC_SMALL_BEST: str | None = "p2c2-prior"
"""Frozen after the tuning runs: the candidate :data:`RULE` picked (``tune --no-run``)."""


# ---- jobs ---------------------------------------------------------------------------------------------------------
def pc_job(name: str, seed: int, family: str = TUNE_FAMILY, steps: int = 1):
    from research import study
    tag = "" if name.endswith("-prior") else AMENDED_TAG
    return study.StudyJob(f"{family}-{name}{tag}-s{seed}", "pc", seed, steps, PRESET, family,
                          (*MEASURE, *CANDIDATES[name]))


def evicting_job(name: str, seed: int):
    """A run made before the amendment: the candidate's budget with the preset's eviction (on)."""
    from research import study
    over = tuple(o for o in CANDIDATES[name] if o not in NO_EVICTION)
    return study.StudyJob(f"{TUNE_FAMILY}-{name}-s{seed}", "pc", seed, 1, PRESET, TUNE_FAMILY, (*MEASURE, *over))


def grpo_job(seed: int, family: str = TUNE_FAMILY, steps: int = 1):
    from research import study
    return study.StudyJob(f"{family}-grpo-n{GRPO_N}-s{seed}", "grpo", seed, steps, PRESET, family,
                          (*MEASURE, f"allocator.n={GRPO_N}"))


def tune_jobs(seeds: Sequence[int] = TUNE_SEEDS) -> list:
    """GRPO-4 on the tuning seeds (the tuning table's reference), then every candidate, seed by seed."""
    if any(s not in TUNE_SEEDS for s in seeds):
        raise ValueError(f"seeds {list(seeds)}: only {list(TUNE_SEEDS)} may tune. Fix: drop the others.")
    return [*(grpo_job(s) for s in seeds), *(pc_job(c, s) for c in CANDIDATES for s in seeds)]


def study_arms() -> dict[str, str]:
    """The fresh seeds' arms, label -> candidate: the frozen choice, its twin with the other prior setting, and the
    commits-only variant of its budget (the ablation: it differs from the twin without the prior only in that kept
    pilots are not trained). GRPO-4 is the reference of every arm."""
    if PC_SMALL_BEST is None:
        raise ValueError("the PC-small choice is not frozen (PC_SMALL_BEST is None). Fix: run `small_groups.py tune` "
                         "on seeds 100, 101 and freeze its choice first.")
    base = PC_SMALL_BEST.removesuffix("-prior")
    twin = base if PC_SMALL_BEST.endswith("-prior") else f"{base}-prior"
    return {"best": PC_SMALL_BEST, "twin": twin, "commits only": f"{base}-co"}


def study_jobs(seeds: Sequence[int] = STUDY_SEEDS) -> list:
    """The fresh seeds' runs: GRPO-4, the frozen choice, its twin with the other prior setting, commits only."""
    arms = study_arms()
    return [j for s in seeds for j in (grpo_job(s, STUDY_FAMILY), *(pc_job(c, s, STUDY_FAMILY) for c in arms.values()))]


# ---- the rule -----------------------------------------------------------------------------------------------------
def finished(curve: RunCurves | None, budget: int = BUDGET) -> bool:
    return curve is not None and curve.total_sampled >= budget


def cost_row(curve: RunCurves) -> dict:
    """One run's numbers (study.budget_cost): rollouts to TARGET (smoothed, within BUDGET), accuracies at the equal
    budgets, per-step costs."""
    from research import study
    return study.budget_cost(curve, TARGET, BUDGET, SMOOTH, EQUAL_BUDGETS)


def choose(rows: dict[tuple[str, int], dict], names: Sequence[str], seeds: Sequence[int] = TUNE_SEEDS) -> str | None:
    """:data:`RULE` over ``rows`` ((candidate, seed) -> :func:`cost_row`); None while a run is missing."""
    from research import study
    return study.lowest_median(rows, names, seeds, EQUAL_BUDGETS[1])


def tuning_rows(store: Store) -> dict[tuple[str, int], dict]:
    from research import study
    want = {(c, s): pc_job(c, s).run_id for c in CANDIDATES for s in TUNE_SEEDS}
    want |= {(f"grpo-n{GRPO_N}", s): grpo_job(s).run_id for s in TUNE_SEEDS}
    want |= {(f"{c} (eviction on)", s): evicting_job(c, s).run_id for c in EVICTING for s in TUNE_SEEDS}
    curves = study.curves_by_run(store, list(want.values())) if store.path.exists() else {}
    return {k: cost_row(curves[r]) for k, r in want.items() if finished(curves.get(r))}


def _fmt(v, spec: str = ",") -> str:
    if v is None:
        return "-"
    return format(v, spec)


def tuning_table(rows: dict[tuple[str, int], dict]) -> list[str]:
    b1, b2 = EQUAL_BUDGETS
    lines = [f"| run | seed | sampled / step | trained / step | sampled / trained | rollouts to {TARGET} | "
             f"accuracy at {b1:,} | at {b2:,} | smoothed peak |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in (f"grpo-n{GRPO_N}", *CANDIDATES, *(f"{c} (eviction on)" for c in EVICTING)):
        for s in TUNE_SEEDS:
            r = rows.get((c, s))
            if r is None:
                lines.append(f"| {c} | {s} | (not finished) | | | | | | |")
                continue
            lines.append(f"| {c} | {s} | {r['sampled_per_step']:.0f} | {r['trained_per_step']:.0f} | "
                         f"{r['sampled_per_trained']:.2f} | {_cnt(r['rollouts'] if r['rollouts'] is not None else math.inf)} | {_fmt(r[b1], '.3f')} | "
                         f"{_fmt(r[b2], '.3f')} | {_fmt(r['peak'], '.3f')} |")
    return lines


def status(store: Store) -> list[str]:
    from research import study
    return study.budget_status(store, [*tune_jobs(), *(study_jobs() if PC_SMALL_BEST else [])], BUDGET)


# ---- the fresh seeds' report ----------------------------------------------------------------------------------------
PAYS_RATIO, FAILS_RATIO, ACCURATE_SEEDS = 1.3, 1.0, 4
DECISION = (f"allocation pays on `bench` if the median over the fresh seeds of GRPO-4 / best PC-small (sampled rollouts "
            f"to {TARGET}) is >= {PAYS_RATIO}x and the best PC-small's accuracy at equal sampled budget is at least "
            f"GRPO-4's on {ACCURATE_SEEDS} of {len(STUDY_SEEDS)} seeds (at each of {EQUAL_BUDGETS[0]:,} and "
            f"{EQUAL_BUDGETS[1]:,}); it fails if the median is <= {FAILS_RATIO}x and PC is not at least as accurate on "
            f"{ACCURATE_SEEDS} of {len(STUDY_SEEDS)}; otherwise five more seeds")
"""Issue 52 point 4, stated before the fresh seeds' runs were read (:func:`decide`)."""
SAMPLED_PER_TRAINED_GOAL = 2.0
GRPO = f"grpo-n{GRPO_N}"
STUDY_REGIME = "small-groups"
REPORT_MARKER = "small-groups-study"
TUNING_MARKER = "small-groups-tuning"
VALIDATION_MARKER = "small-groups-validation"


def study_rows(store: Store, seeds: Sequence[int] = STUDY_SEEDS) -> dict[tuple[str, int], dict]:
    """(arm, seed) -> :func:`cost_row` with the run's curve under ``"curve"``, for every finished run of the fresh
    seeds (arm: ``grpo-n4`` or a label of :func:`study_arms`)."""
    from research import study
    want = {(GRPO, s): grpo_job(s, STUDY_FAMILY).run_id for s in seeds}
    want |= {(lab, s): pc_job(c, s, STUDY_FAMILY).run_id for lab, c in study_arms().items() for s in seeds}
    curves = study.curves_by_run(store, list(want.values())) if store.path.exists() else {}
    return {k: {**cost_row(curves[r]), "curve": curves[r]} for k, r in want.items() if finished(curves.get(r))}


def decide(ratios: Sequence[float | None], grpo_acc: dict[int, Sequence[float | None]],
           pc_acc: dict[int, Sequence[float | None]], seeds: Sequence[int] = STUDY_SEEDS) -> dict:
    """:data:`DECISION` on the per-seed ratios (GRPO-4 / best) and accuracies at :data:`EQUAL_BUDGETS` (seed ->
    one accuracy per budget). ``verdict``: ``pays``, ``fails``, ``five more seeds`` or ``open`` (a run missing)."""
    from pc_pipelines.store.rollouts_to_target import median
    complete = (len(ratios) == len(seeds) and all(r is not None for r in ratios)
                and all(a is not None for s in seeds for a in (*grpo_acc.get(s, (None,)), *pc_acc.get(s, (None,)))))
    at_least = [sum(1 for s in seeds if s in pc_acc and s in grpo_acc and None not in (pc_acc[s][i], grpo_acc[s][i])
                    and pc_acc[s][i] >= grpo_acc[s][i]) for i in range(len(EQUAL_BUDGETS))]
    med = median(list(ratios))
    if not complete:
        verdict = "open"
    else:
        accurate = min(at_least) >= ACCURATE_SEEDS
        verdict = ("pays" if med >= PAYS_RATIO and accurate else
                   "fails" if med <= FAILS_RATIO and not accurate else "five more seeds")
    return {"verdict": verdict, "median": med, "at_least_as_accurate": dict(zip(map(str, EQUAL_BUDGETS), at_least))}


def advice(verdict: str, best: str) -> str:
    """What the decision means for a user, in a sentence they can act on."""
    over = " ".join(CANDIDATES[best])
    return {"pays": f"at groups of 4-8 on a pool like `bench`, use PC at `{best}` ({over}): it reaches the target on "
                    f"fewer sampled rollouts than GRPO-4 and is as accurate at equal budget",
            "fails": f"at groups of 4-8 on a pool like `bench`, use GRPO at n = {GRPO_N}: PC's screening at `{best}` "
                     "costs more rollouts than it saves",
            "five more seeds": "no answer yet at groups of 4-8 on a pool like `bench`: the five fresh seeds fall "
                               "between the stated bounds (five more seeds decide)",
            "open": "no answer yet: the fresh seeds' runs are not all finished"}[verdict]


def study_report(store: Store, seeds: Sequence[int] = STUDY_SEEDS) -> tuple[str, dict]:
    """The fresh seeds' section of docs/STUDIES.md and the results file's ``small-groups`` regime (a missing run
    leaves its cells '-' and the decision open, never guessed)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import machine

    from pc_pipelines.store.rollouts_to_target import median
    from research import study
    from research.bench_study import part_wall
    arms = study_arms()
    labels = list(arms)
    rows = study_rows(store, seeds)
    b1, b2 = EQUAL_BUDGETS
    name = {GRPO: f"GRPO-{GRPO_N}", **{lab: f"{c} ({lab})" for lab, c in arms.items()}}

    fixed = [f"| seed | {' | '.join(name[a] for a in (GRPO, *labels))} | "
             + " | ".join(f"GRPO-{GRPO_N} / {arms[lab]}" for lab in labels) + " |",
             "|---:|" + "---:|" * (1 + 2 * len(labels))]
    per: dict[str, dict[int, float | None]] = {lab: {} for lab in labels}
    for s in seeds:
        g = rows.get((GRPO, s))
        cells = [("never" if g["rollouts"] is None else f"{g['rollouts']:,}") if g else "-"]
        for lab in labels:
            r = rows.get((lab, s))
            cells.append(("never" if r["rollouts"] is None else f"{r['rollouts']:,}") if r else "-")
            per[lab][s] = ratio(g["rollouts"], r["rollouts"]) if g and r else None
        fixed.append(f"| {s} | " + " | ".join(cells) + " | " + " | ".join(ratio_cell(per[lab][s]) for lab in labels)
                     + " |")
    medians = {lab: median(list(per[lab].values())) for lab in labels}
    fixed.append("| **median** |" + " |" * (1 + len(labels)) + " "
                 + " | ".join(f"**{ratio_cell(medians[lab])}**" for lab in labels) + " |")

    equal = [f"| seed | budget | {' | '.join(name[a] for a in (GRPO, *labels))} |",
             "|---:|---:|" + "---:|" * (1 + len(labels))]
    acc = {a: {s: tuple(rows[(a, s)][b] if (a, s) in rows else None for b in EQUAL_BUDGETS) for s in seeds}
           for a in (GRPO, *labels)}
    for s in seeds:
        for i, b in enumerate(EQUAL_BUDGETS):
            equal.append(f"| {s} | {b:,} | " + " | ".join(_fmt(acc[a][s][i], ".3f") for a in (GRPO, *labels)) + " |")
    for i, b in enumerate(EQUAL_BUDGETS):
        equal.append(f"| **median** | {b:,} | " + " | ".join(
            f"**{_fmt(median([acc[a][s][i] for s in seeds]), '.3f')}**" for a in (GRPO, *labels)) + " |")
    wins = {lab: [sum(1 for s in seeds if None not in (acc[lab][s][i], acc[GRPO][s][i])
                      and acc[lab][s][i] >= acc[GRPO][s][i]) for i in range(len(EQUAL_BUDGETS))] for lab in labels}

    def curve(arm: str, s: int):
        return rows[(arm, s)]["curve"] if (arm, s) in rows else None
    pair, pair_per, pair_med = study.seed_ratio_table(
        seeds, {f"GRPO-{GRPO_N} / {arms[lab]}": (lab, GRPO) for lab in labels}, curve, window=SMOOTH)

    mech = ["| arm | sampled / step | trained / step | sampled / trained | steps to the budget | smoothed peak |",
            "|---|---:|---:|---:|---:|---:|"]
    spt: dict[str, float | None] = {}
    for a in (GRPO, *labels):
        got = [rows[(a, s)] for s in seeds if (a, s) in rows]
        m = {k: median([r[k] for r in got]) for k in ("sampled_per_step", "trained_per_step", "sampled_per_trained",
                                                     "steps", "peak")}
        spt[a] = m["sampled_per_trained"]
        mech.append(f"| {name[a]} | {_fmt(m['sampled_per_step'], ',.0f')} | {_fmt(m['trained_per_step'], ',.0f')} | "
                    f"{_fmt(m['sampled_per_trained'], '.2f')} | {_fmt(m['steps'], ',.0f')} | {_fmt(m['peak'], '.3f')} |")

    dec = decide([per["best"][s] for s in seeds if per["best"][s] is not None],
                 {s: acc[GRPO][s] for s in seeds if (GRPO, s) in rows},
                 {s: acc["best"][s] for s in seeds if ("best", s) in rows}, seeds)
    co = [rows[("commits only", s)]["rollouts"] if ("commits only", s) in rows else None for s in seeds]
    tw = [rows[("twin", s)]["rollouts"] if ("twin", s) in rows else None for s in seeds]
    co_vs_twin = {s: ratio(t, c) for s, t, c in zip(seeds, tw, co) if (("twin", s) in rows and ("commits only", s) in rows)}
    done = sorted({s for (_, s) in rows})
    walls = {"tuning": part_wall(store, [*tune_jobs(), *(evicting_job(c, s) for c in EVICTING for s in TUNE_SEEDS)]),
             "fresh seeds": part_wall(store, study_jobs(seeds))}
    goal_ratio = medians["best"]
    goals = {
        "ratio": {"goal": f"median GRPO-{GRPO_N} / best PC-small >= {PAYS_RATIO}x (seeds {seeds[0]}-{seeds[-1]})",
                  "value": goal_ratio, "met": None if dec["verdict"] == "open" else bool(goal_ratio >= PAYS_RATIO)},
        "sampled_per_trained": {"goal": f"best PC-small's sampled rollouts per trained rollout <= "
                                        f"{SAMPLED_PER_TRAINED_GOAL}x (median over seeds)",
                                "value": spt["best"],
                                "met": None if spt["best"] is None else bool(spt["best"] <= SAMPLED_PER_TRAINED_GOAL)},
    }

    def status(g):
        return {True: "met", False: "**missed**", None: "open (runs missing)"}[g["met"]]
    hours = {k: "-" if v is None else f"{v / 3600:.1f} h" for k, v in walls.items()}
    body = [
        "## Allocation at small groups: PC with trained groups of 8 or fewer against GRPO-4 (`research/small_groups.py`, "
        "issue 52)",
        "",
        "Command: `.venv/bin/python research/small_groups.py tune --workers 2`, then `study --workers 2`, then "
        "`.venv/bin/python research/small_groups.py report --write docs/STUDIES.md --results "
        "pc_pipelines/reports/bench_study_results.json`",
        f"Machine: {machine(load_average=False)}",
        f"Measured: {time.strftime('%Y-%m-%d')}; wall time (union of the runs' running spans): tuning "
        f"{hours['tuning']}, fresh seeds {hours['fresh seeds']}.",
        "",
        f"`bench` preset, float64; every run evaluates every {EVAL_EVERY:,} sampled rollouts and stops at the first step "
        f"at or past {BUDGET:,}. Fixed target {TARGET} (smoothed over {SMOOTH} evals), chosen before any run. The "
        f"choice **{PC_SMALL_BEST}** was frozen on seeds {TUNE_SEEDS[0]} and {TUNE_SEEDS[1]} by the rule: {RULE}. "
        f"Fresh seeds {', '.join(map(str, seeds))} (finished runs on seeds {', '.join(map(str, done)) or 'none'}).",
        "",
        f"Sampled rollouts to the fixed target {TARGET} (never: not within {BUDGET:,}), and GRPO-{GRPO_N} / arm "
        "(> 1: the arm needed fewer):",
        "",
        *fixed,
        "",
        f"Held-out accuracy (smoothed) at equal sampled budgets (the first evaluation at or past each); the best "
        f"PC-small at least as accurate as GRPO-{GRPO_N} on "
        + ", ".join(f"{w} of {len(seeds)} seeds at {b:,}" for w, b in zip(wins["best"], EQUAL_BUDGETS)) + ":",
        "",
        *equal,
        "",
        "For continuity with the earlier studies, GRPO-4 / arm at the pair's common target (the lower smoothed peak):",
        "",
        *pair,
        "",
        "Per step (medians over the fresh seeds):",
        "",
        *mech,
        "",
        f"Commits only (pilots screen, only commits train) against its twin that trains the kept pilots too "
        f"({arms['twin']}; rollouts to {TARGET}, twin / commits only, > 1: commits only needed fewer): "
        + (", ".join(f"seed {s} {ratio_cell(v)}" for s, v in co_vs_twin.items()) or "(runs missing)")
        + f"; median {ratio_cell(median(list(co_vs_twin.values())))}.",
        "",
        "| goal | measured | status |",
        "|---|---|---|",
        *[f"| {g['goal']} | {ratio_cell(g['value']) if k == 'ratio' else _fmt(g['value'], '.2f') + 'x'} | "
          f"{status(g)} |" for k, g in goals.items()],
        "",
        f"**Decision** (stated before the runs: {DECISION}): **{dec['verdict']}** (median "
        f"{ratio_cell(dec['median'])}; at least as accurate on "
        + ", ".join(f"{w} of {len(seeds)} at {int(b):,}" for b, w in dec["at_least_as_accurate"].items())
        + f"). In short: {advice(dec['verdict'], PC_SMALL_BEST)}.",
    ]
    results = {"preset": PRESET, "dtype": "float64", "family": STUDY_FAMILY, "seeds": done, "core_seeds": list(seeds),
               "grpo_best_n": GRPO_N, "pc_best": {"name": PC_SMALL_BEST, "overrides": list(CANDIDATES[PC_SMALL_BEST])},
               "target": TARGET, "eval_every_rollouts": EVAL_EVERY, "budget": BUDGET, "smooth_evals": SMOOTH,
               "medians": {f"GRPO{GRPO_N} / PC-small {arms[lab]}": medians[lab] for lab in labels},
               "pair_target_medians": pair_med,
               "per_seed": {arms[lab]: {str(s): v for s, v in per[lab].items()} for lab in labels},
               "accuracy_at_budget": {name[a]: {str(b): median([acc[a][s][i] for s in seeds])
                                                for i, b in enumerate(EQUAL_BUDGETS)} for a in (GRPO, *labels)},
               "sampled_per_trained": {name[a]: v for a, v in spt.items()},
               "goals": goals, "decision": dec, "advice": advice(dec["verdict"], PC_SMALL_BEST),
               "wall_s": walls, "command": "research/small_groups.py report"}
    results = study.plain_json(results)
    return "\n".join(body), results


def tuning_section(store: Store) -> str:
    """The tuning runs' table, the rule and its choice: docs/STUDIES.md's tuning section."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import machine

    from research.bench_study import part_wall
    rows = tuning_rows(store)
    wall = part_wall(store, [*tune_jobs(), *(evicting_job(c, s) for c in EVICTING for s in TUNE_SEEDS)])
    best = choose(rows, list(CANDIDATES))
    return "\n".join([
        "## Allocation at small groups: the tuning runs (`research/small_groups.py tune`, issue 52)",
        "",
        "Command: `.venv/bin/python research/small_groups.py tune --workers 2`, then `tune --no-run --write "
        "docs/STUDIES.md`",
        f"Machine: {machine(load_average=False)}",
        f"Wall time (union of the runs' running spans): {'-' if wall is None else f'{wall / 3600:.1f} h'}.",
        "",
        f"Seeds {TUNE_SEEDS[0]} and {TUNE_SEEDS[1]} only; every run evaluates every {EVAL_EVERY:,} sampled rollouts and "
        f"stops at the first step at or past {BUDGET:,}. Candidates: {', '.join(f'`{c}`' for c in CANDIDATES)} "
        f"(`-prior`: the frozen history prior; `-co`: commits only; eviction off), and, made before the amendment "
        f"that turned eviction off, {', '.join(f'`{c}`' for c in EVICTING)} with eviction on (never chosen).",
        "",
        *tuning_table(rows),
        "",
        f"Rule (fixed before any run): {RULE}. Choice: **{best or '(runs missing)'}** (frozen as `PC_SMALL_BEST`).",
    ])


# ---- the fitted simulator against the fresh seeds (issue 52 point 1) ---------------------------------------------------
MIX_STEPS = 20
"""First visits within this many first steps fit the pass-rate mix (``sim-fit``'s default)."""
MAX_SIM_STEPS = 5_000


def fit_on_tuning(store: Store):
    """``sim-fit`` on every tuning run (seeds 100, 101; the per-wave rows of store v10: first waves uncensored)."""
    from pc_pipelines.simulator.fit import fit_simulator, read_runs
    return fit_simulator(read_runs(store, [j.run_id for j in tune_jobs()]), mix_steps=MIX_STEPS)


def simulate_arm(job, sim_fields: dict) -> dict:
    """One fresh-seed job in the simulator with the fitted fields, by the study's protocol (an evaluation before
    training and every :data:`EVAL_EVERY` sampled rollouts, stop at :data:`BUDGET`): :func:`cost_row`'s numbers."""
    from pc_pipelines.config import parse_overrides, resolve
    from pc_pipelines.reports import RunCurves
    from pc_pipelines.simulator import Simulation
    over = parse_overrides(list(job.overrides))
    over.update({f"sim.{k}": v for k, v in sim_fields.items()})
    cfg = resolve(PRESET, overrides=over, method=job.method, seed=job.seed)
    sim = Simulation(cfg.allocator, cfg.sim)
    ev_step, ev_roll, ev_acc = [-1], [0], [sim.population.accuracy()]
    sampled = trained = step = 0
    cum_s, cum_t = [], []
    while sampled < BUDGET and step < MAX_SIM_STEPS:
        st = sim.step()
        before = sampled
        sampled += st.outcome.ledger.sampled_rollouts
        trained += st.outcome.ledger.trained_rollouts
        cum_s.append(sampled)
        cum_t.append(trained)
        if cfg.training.evaluates_after(step, before, sampled):
            ev_step.append(step)
            ev_roll.append(sampled)
            ev_acc.append(st.accuracy)
        step += 1
    curve = RunCurves(run_id=job.run_id, family="sim", method=job.method, seed=job.seed, eval_step=tuple(ev_step),
                      eval_rollouts=tuple(ev_roll), eval_accuracy=tuple(ev_acc), step=tuple(range(step)),
                      cumulative_sampled=tuple(cum_s), cumulative_trained=tuple(cum_t),
                      reward_std=(0.0,) * step, informative_share=(0.0,) * step)
    return cost_row(curve)


def first_wave_shares(store: Store, sim_fields: dict) -> list[tuple[str, float | None, float]]:
    """First waves of 2 at a prompt's first visit in the first :data:`MIX_STEPS` steps of the tuning runs with pilots
    of 2 and no prior: the share with 0, 1 and 2 of 2 correct, measured (the store's per-wave rows) and predicted
    by the fitted mix (``(1-p)^2``, ``2p(1-p)``, ``p^2`` over the simulated pool's pass rates before training)."""
    import numpy as np

    from pc_pipelines.config import parse_overrides, resolve
    from pc_pipelines.simulator import Simulation
    runs = [pc_job(c, s).run_id for c in ("p2c2", "p2s2c4", "p2c2-co", "p2s2c4-co", "p2c2-b32", "p2c2-b32-co")
            for s in TUNE_SEEDS]
    got = {0: 0, 1: 0, 2: 0}
    if store.path.exists():
        for r in store.query(
                "WITH first AS (SELECT run_id, prompt_id, min(step) AS step FROM pass_rate_history "
                "WHERE list_contains(?, run_id) GROUP BY run_id, prompt_id) "
                "SELECT h.n_correct AS k, count(*) AS c FROM pass_rate_history h JOIN first f USING (run_id, prompt_id, "
                "step) WHERE h.stage = 'pilot' AND h.wave = 0 AND h.n = 2 AND h.step < ? GROUP BY 1", [runs, MIX_STEPS]):
            got[int(r["k"])] = int(r["c"])
    total = sum(got.values())
    over = parse_overrides([])
    over.update({f"sim.{k}": v for k, v in sim_fields.items()})
    cfg = resolve(PRESET, overrides=over, method="pc", seed=TUNE_SEEDS[0])
    p = Simulation(cfg.allocator, cfg.sim).population.pass_rates()
    pred = {0: float(np.mean((1 - p) ** 2)), 1: float(np.mean(2 * p * (1 - p))), 2: float(np.mean(p ** 2))}
    return [(f"{k} of 2 correct", got[k] / total if total else None, pred[k]) for k in (0, 1, 2)]


def validation_section(store: Store, seeds: Sequence[int] = STUDY_SEEDS) -> tuple[str, dict]:
    """The fit on the tuning seeds against the fresh seeds' measurements: docs/STUDIES.md's validation section."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import machine

    from pc_pipelines.store.rollouts_to_target import median
    from research import study
    t0 = time.monotonic()
    fit = fit_on_tuning(store)
    arms = study_arms()
    measured = study_rows(store, seeds)
    jobs = {GRPO: {s: grpo_job(s, STUDY_FAMILY) for s in seeds},
            **{lab: {s: pc_job(c, s, STUDY_FAMILY) for s in seeds} for lab, c in arms.items()}}
    pred = {a: {s: simulate_arm(j, fit.sim) for s, j in by_seed.items()} for a, by_seed in jobs.items()}
    name = {GRPO: f"GRPO-{GRPO_N}", **{lab: f"{c} ({lab})" for lab, c in arms.items()}}
    b2 = EQUAL_BUDGETS[1]

    def row(a: str, s: int, which: str) -> dict | None:
        return pred[a][s] if which == "predicted" else measured.get((a, s))

    def med(a: str, key: str, which: str) -> float | None:
        """Median over seeds of one number (rollouts to target: a run that never reaches it counts infinity)."""
        vals = [r[key] for s in seeds if (r := row(a, s, which)) is not None]
        return median([math.inf if v is None else v for v in vals] if key == "rollouts" else vals)

    def ratios(which: str) -> dict[str, float | None]:
        return {lab: median([ratio(g["rollouts"], r["rollouts"]) for s in seeds
                             if (g := row(GRPO, s, which)) is not None and (r := row(lab, s, which)) is not None])
                for lab in arms}
    pr, mr = ratios("predicted"), ratios("measured")
    lines = ["| arm | rollouts to target: predicted | measured | GRPO-4 / arm: predicted | measured | error | "
             f"accuracy at {b2:,}: predicted | measured | sampled / trained: predicted | measured |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a in (GRPO, *arms):
        cells = [_cnt(med(a, "rollouts", "predicted")), _cnt(med(a, "rollouts", "measured"))]
        if a == GRPO:
            cells += ["", "", ""]
        else:
            err = (pr[a] / mr[a] - 1) if pr[a] and mr[a] and math.isfinite(pr[a]) and math.isfinite(mr[a]) else None
            cells += [ratio_cell(pr[a]), ratio_cell(mr[a]), "-" if err is None else f"{err:+.0%}"]
        cells += [_fmt(med(a, b2, "predicted"), ".3f"), _fmt(med(a, b2, "measured"), ".3f"),
                  _fmt(med(a, "sampled_per_trained", "predicted"), ".2f"),
                  _fmt(med(a, "sampled_per_trained", "measured"), ".2f")]
        lines.append(f"| {name[a]} | " + " | ".join(cells) + " |")
    waves = first_wave_shares(store, fit.sim)
    body = [
        "## The simulator fitted on the small-groups tuning runs against the fresh seeds (`research/small_groups.py "
        "validate`, issue 52 point 1)",
        "",
        "Command: `.venv/bin/python research/small_groups.py validate --write docs/STUDIES.md`",
        f"Machine: {machine(load_average=False)}; {time.monotonic() - t0:.0f} s.",
        "",
        f"`sim-fit` on every tuning run (seeds {TUNE_SEEDS[0]}, {TUNE_SEEDS[1]}; store v10's per-wave rows, so a first "
        f"wave of 2 that decided nothing is read as the n = 2 draw it was, no longer pooled with its second wave): law "
        f"form **{fit.chosen}**, fitted fields " + ", ".join(f"`{k}={v:.4g}`" if isinstance(v, float) else f"`{k}={v}`"
                                                          for k, v in fit.sim.items()) + ".",
        "Then each fresh-seed arm simulated on seeds " + ", ".join(map(str, seeds)) + " by the study's protocol "
        f"(an evaluation before training and every {EVAL_EVERY:,} sampled rollouts, smoothed over {SMOOTH}, stop at "
        f"{BUDGET:,}; rollouts to the fixed target {TARGET}, never = infinity) beside the measured runs (medians over "
        "seeds; error = predicted / measured - 1):",
        "",
        *lines,
        "",
        f"First waves of 2 at a prompt's first visit (the tuning runs with pilots of 2 and no prior, first {MIX_STEPS} "
        "steps), measured against the fitted mix:",
        "",
        "| first wave | measured | fitted mix |", "|---|---:|---:|",
        *[f"| {k} | {_fmt(m, '.3f')} | {p:.3f} |" for k, m, p in waves],
    ]
    res = {"fit": fit.to_dict()["sim"], "law": fit.chosen, "predicted_ratios": pr, "measured_ratios": mr,
           "first_waves": {k: {"measured": m, "fitted": p} for k, m, p in waves}}
    return "\n".join(body), study.plain_json(res)


def _cnt(v: float | None) -> str:
    if v is None:
        return "-"
    return "never" if math.isinf(v) else f"{v:,.0f}"


def write_report(store: Store, write: Path | None, results: Path | None) -> str:
    """Print-ready section; also written into ``write``'s section and ``results``' ``small-groups`` regime."""
    from types import SimpleNamespace
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import STUDIES_HEADER, write_section

    from research.bench_study import write_results
    body, res = study_report(store)
    if write:
        write_section(Path(write), REPORT_MARKER, body, STUDIES_HEADER)
    if results:
        write_results(Path(results), SimpleNamespace(name=STUDY_REGIME), res)
    return body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="small_groups.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    tu = sub.add_parser("tune", help="the tuning runs on seeds 100, 101 (resumable), then the rule's choice")
    tu.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    tu.add_argument("--out", default=OUT, help="the runs' folder (default %(default)s)")
    tu.add_argument("--workers", type=int, default=1, help="runs at a time (one core each)")
    tu.add_argument("--no-run", action="store_true", help="only read the store and apply the rule")
    tu.add_argument("--write", type=Path, help="also write the tuning section into this markdown file (docs/STUDIES.md)")
    sd = sub.add_parser("study", help="the fresh seeds' runs (GRPO-4, the frozen choice, its twin; resumable)")
    sd.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    sd.add_argument("--out", default=OUT, help="the runs' folder (default %(default)s)")
    sd.add_argument("--workers", type=int, default=1, help="runs at a time (one core each)")
    rp = sub.add_parser("report", help="the fresh seeds' tables, the goals and the decision (docs/STUDIES.md)")
    rp.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    rp.add_argument("--write", type=Path, help="also write the section into this markdown file (docs/STUDIES.md)")
    rp.add_argument("--results", type=Path, help="also set the regime 'small-groups' in this results file "
                                                 "(pc_pipelines/reports/bench_study_results.json)")
    va = sub.add_parser("validate", help="the simulator fitted on the tuning runs against the fresh seeds")
    va.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    va.add_argument("--write", type=Path, help="also write the section into this markdown file (docs/STUDIES.md)")
    st = sub.add_parser("status", help="each run's sampled rollouts so far (tuning and fresh seeds)")
    st.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    args = p.parse_args(argv)
    from research import study
    store = Store(args.store)
    if args.cmd == "status":
        print("\n".join(status(store)))
        return 0
    if args.cmd == "validate":
        body, _ = validation_section(store)
        if args.write:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from _report import STUDIES_HEADER, write_section
            write_section(Path(args.write), VALIDATION_MARKER, body, STUDIES_HEADER)
        print(body)
        return 0
    if args.cmd == "report":
        print(write_report(store, args.write, args.results))
        return 0
    t0 = time.monotonic()
    if args.cmd == "study":
        Path(args.store).parent.mkdir(parents=True, exist_ok=True)
        study.run_to_budget(study_jobs(), store, args.out, args.workers, BUDGET, label="small-groups")
        print(f"the fresh seeds' runs reached {BUDGET:,} sampled rollouts; {time.monotonic() - t0:.0f} s.")
        return 0
    if not args.no_run:
        Path(args.store).parent.mkdir(parents=True, exist_ok=True)
        study.run_to_budget(tune_jobs(), store, args.out, args.workers, BUDGET, label="small-groups")
    if args.write:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from _report import STUDIES_HEADER, write_section
        write_section(Path(args.write), TUNING_MARKER, tuning_section(store), STUDIES_HEADER)
    rows = tuning_rows(store)
    print("\n".join(tuning_table(rows)))
    best = choose(rows, list(CANDIDATES))
    print(f"\nRule: {RULE}.\nChoice: {best if best else '(runs missing)'}; {time.monotonic() - t0:.0f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
