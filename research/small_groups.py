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
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pc_pipelines.reports import RunCurves
from pc_pipelines.store import Store

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


def study_jobs(seeds: Sequence[int] = STUDY_SEEDS) -> list:
    """The fresh seeds' runs: GRPO-4, the frozen choice and its twin with the other prior setting."""
    if PC_SMALL_BEST is None:
        raise ValueError("the PC-small choice is not frozen (PC_SMALL_BEST is None). Fix: run `small_groups.py tune` "
                         "on seeds 100, 101 and freeze its choice first.")
    base = PC_SMALL_BEST.removesuffix("-prior")
    twin = base if PC_SMALL_BEST.endswith("-prior") else f"{base}-prior"
    return [j for s in seeds for j in (grpo_job(s, STUDY_FAMILY), pc_job(PC_SMALL_BEST, s, STUDY_FAMILY),
                                       pc_job(twin, s, STUDY_FAMILY))]


def sampled_so_far(store: Store, run_id: str) -> tuple[int, int]:
    """(steps, cumulative sampled rollouts) of a run in the store; (0, 0) before its first step."""
    if not store.path.exists():
        return 0, 0
    row = store.query("SELECT count(*) AS steps, coalesce(sum(sampled_rollouts), 0) AS sampled FROM steps "
                      "WHERE run_id = ?", [run_id])
    return (int(row[0]["steps"]), int(row[0]["sampled"])) if row else (0, 0)


def next_steps(steps: int, sampled: int, budget: int = BUDGET, first_guess: int = 64) -> int | None:
    """The step count to train a run to next so that it reaches ``budget`` sampled rollouts (None: it has).

    A run's sampled rollouts a step are known only once it trains, so a run goes in chunks: the first to
    ``first_guess`` steps, then to the steps its own mean says reach the budget (at least one more step: a step
    samples at least one rollout, so the count grows and the loop ends). Resumed chunks reproduce the uninterrupted run exactly.

    >>> next_steps(0, 0), next_steps(64, 4096), next_steps(640, 40960)
    (64, 640, None)"""
    if sampled >= budget:
        return None
    if steps == 0:
        return first_guess
    return steps + max(1, math.ceil((budget - sampled) / (sampled / steps)))


def run_to_budget(jobs: Sequence, store: Store, out_dir: str | Path, workers: int, budget: int = BUDGET) -> None:
    """Train every job until it has sampled ``budget`` rollouts (chunks of :func:`next_steps`; resumable)."""
    from research import study
    rounds = 0
    while True:
        todo = []
        for j in jobs:
            steps, sampled = sampled_so_far(store, j.run_id)
            want = next_steps(steps, sampled, budget, first_guess=max(8, budget // (16 * _trained_per_step(j))))
            if want is not None:
                todo.append(replace(j, steps=want))
        if not todo:
            return
        rounds += 1
        print(f"[small-groups] round {rounds}: {len(todo)} runs below {budget:,} sampled rollouts", flush=True)
        study.run_jobs(todo, store, out_dir, workers=workers)


def _trained_per_step(job) -> int:
    """n * b_t from the job's overrides (the bench preset's 64 and 16 otherwise). The first chunk assumes 16 sampled
    rollouts a trained one (PC with pilots of 2 on `bench` sampled 14: the first tuning runs, which assumed 8,
    overshot the budget by 60%), so it stays under the budget; the next one is measured."""
    over = dict(o.split("=", 1) for o in job.overrides)
    return int(over.get("allocator.n", 64)) * int(over.get("allocator.train_batch", 16))


# ---- the rule -----------------------------------------------------------------------------------------------------
def at_budget(curve: RunCurves, budget: int) -> float | None:
    """The accuracy of the first evaluation at or past ``budget`` sampled rollouts (None: the run stopped before)."""
    return next((a for r, a in zip(curve.eval_rollouts, curve.eval_accuracy) if r >= budget), None)


def finished(curve: RunCurves | None, budget: int = BUDGET) -> bool:
    return curve is not None and curve.total_sampled >= budget


def cost_row(curve: RunCurves) -> dict:
    """One run's numbers: rollouts to the fixed target (smoothed), accuracies at the equal budgets, per-step costs."""
    from research import study
    sm = study.smoothed(curve, SMOOTH)
    steps = max(curve.steps, 1)
    return {"rollouts": study.first_at_or_above(sm, TARGET), "peak": sm.peak_accuracy,
            **{b: at_budget(sm, b) for b in EQUAL_BUDGETS},
            "sampled_per_step": curve.total_sampled / steps, "trained_per_step": curve.total_trained / steps,
            "sampled_per_trained": curve.total_sampled / max(curve.total_trained, 1), "steps": curve.steps}


def choose(rows: dict[tuple[str, int], dict], names: Sequence[str], seeds: Sequence[int] = TUNE_SEEDS) -> str | None:
    """:data:`RULE` over ``rows`` ((candidate, seed) -> :func:`cost_row`); None while a run is missing."""
    if any((c, s) not in rows for c in names for s in seeds):
        return None

    def key(c: str) -> tuple[float, float]:
        cost = statistics.median(math.inf if rows[(c, s)]["rollouts"] is None else rows[(c, s)]["rollouts"]
                                 for s in seeds)
        acc = [rows[(c, s)][EQUAL_BUDGETS[1]] for s in seeds]
        return cost, -statistics.median(a if a is not None else -math.inf for a in acc)

    return min(names, key=key)


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
                         f"{r['sampled_per_trained']:.2f} | {_fmt(r['rollouts'])} | {_fmt(r[b1], '.3f')} | "
                         f"{_fmt(r[b2], '.3f')} | {_fmt(r['peak'], '.3f')} |")
    return lines


def status(store: Store) -> list[str]:
    lines = []
    for j in tune_jobs():
        steps, sampled = sampled_so_far(store, j.run_id)
        lines.append(f"{j.run_id}: {steps} steps, {sampled:,} of {BUDGET:,} sampled rollouts"
                     f"{' (done)' if sampled >= BUDGET else ''}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="small_groups.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    tu = sub.add_parser("tune", help="the tuning runs on seeds 100, 101 (resumable), then the rule's choice")
    tu.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    tu.add_argument("--out", default=OUT, help="the runs' folder (default %(default)s)")
    tu.add_argument("--workers", type=int, default=1, help="runs at a time (one core each)")
    tu.add_argument("--no-run", action="store_true", help="only read the store and apply the rule")
    sd = sub.add_parser("study", help="the fresh seeds' runs (GRPO-4, the frozen choice, its twin; resumable)")
    sd.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    sd.add_argument("--out", default=OUT, help="the runs' folder (default %(default)s)")
    sd.add_argument("--workers", type=int, default=1, help="runs at a time (one core each)")
    st = sub.add_parser("status", help="each tuning run's sampled rollouts so far")
    st.add_argument("--store", default=STORE, help="the study's store (default %(default)s)")
    args = p.parse_args(argv)
    store = Store(args.store)
    if args.cmd == "status":
        print("\n".join(status(store)))
        return 0
    t0 = time.monotonic()
    if args.cmd == "study":
        Path(args.store).parent.mkdir(parents=True, exist_ok=True)
        run_to_budget(study_jobs(), store, args.out, args.workers)
        print(f"the fresh seeds' runs reached {BUDGET:,} sampled rollouts; {time.monotonic() - t0:.0f} s.")
        return 0
    if not args.no_run:
        Path(args.store).parent.mkdir(parents=True, exist_ok=True)
        run_to_budget(tune_jobs(), store, args.out, args.workers)
    rows = tuning_rows(store)
    print("\n".join(tuning_table(rows)))
    best = choose(rows, list(CANDIDATES))
    print(f"\nRule: {RULE}.\nChoice: {best if best else '(runs missing)'}; {time.monotonic() - t0:.0f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
