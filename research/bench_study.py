"""The rollout-efficiency study on the reproducible benchmark (issue 16 point 3): one command, three resumable parts.

    make study-bench                                   # every part below, the docs section and the headline (resumable)
    .venv/bin/python research/bench_study.py tune      # GRPO at n = 16 / 32 / 64 on the tuning seeds 100, 101
    .venv/bin/python research/bench_study.py main      # the reported seeds 8, 9, 10: every method and the ablation
    .venv/bin/python research/bench_study.py repro     # GRPO-64 vs our PC again under the other CPU kernels
    .venv/bin/python research/bench_study.py report    # re-render the section from the store, no training

Design (the study's hygiene):
* every run resolves from the FROZEN ``bench`` preset (pc_pipelines/presets/bench.yaml: the regime calibrated on
  GRPO alone before any PC run) and trains ``STEPS`` = 120 steps from the shipped warm start;
* GRPO's best group size among 16 / 32 / 64 is chosen on the tuning seeds only (the size that reaches the common
  target, min over sizes of each size's peak, with the fewest sampled rollouts, median over tuning seeds) and frozen
  in ``GRPO_BEST_N`` below before the reported seeds run; the reported seeds 8, 9, 10 never tune anything (the
  float32 studies reported seeds 0-2, then 3-7: their numbers are history in docs/BENCHMARKS.md);
* the runs train in float64 (the preset's ``training.dtype``): a seed gives the same run under any CPU's kernels,
  which float32 did not (its reproducibility row missed twice, 24% and 18%);
* methods: GRPO at n = 64, GRPO at its best n, DAPO (n = 64), the paper's PC (16 pilot + 48 commit, fixed band
  [0.125, 0.75], evict solved prompts) and our default PC (the four strategies of the preset: adaptive band, survival
  sampling, sequential pilots 4 + 12, commits of mean 16 split by pilot std); the eviction ablation is the paper's PC
  with ``allocator.evict=false`` (real runs; the paper's section 6.3 counts steps needing a second round);
* ratios are rollouts to target (``study.versus``: target = min(baseline peak, PC peak) per seed, cost = cumulative
  SAMPLED rollouts at the first eval at or above it) on curves smoothed by a trailing mean over ``SMOOTH`` = 3 evals,
  per seed and median;
* the reproducibility row re-runs the primary comparison (GRPO at n = 64 vs our PC, the reported seeds) under the CPU kernels
  this machine did NOT pick (``ATEN_CPU_CAPABILITY=default`` on an AVX2 or AVX-512 machine; each run records the
  kernels it used in its lineage) and compares the medians;
* everything goes into one store, ``benchmarks/out/bench.duckdb`` (git-ignored); re-running a part only finishes what
  is missing (runs resume from their checkpoints).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

# research/ is a package imported from the checkout (never by pc_pipelines); benchmarks/_report.py writes the docs
# sections of benchmarks/, research/ and reliability/ alike.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _report import docs_link, machine, write_section

from pc_pipelines.reports import RunCurves, format_count, format_ratio
from pc_pipelines.store import Store
from research import study

ROOT = Path(__file__).resolve().parent.parent
PRESET = "bench"
STEPS = 120
# Fresh for the float64 study: the float32 studies (history) reported 0-2 (SMOOTH was chosen on their
# reproducibility row) and 3-7; nothing was ever tuned on either.
SEEDS = (8, 9, 10)
# More seeds for the primary comparison (GRPO at n = 64 vs our PC) only, in main and in the reproducibility row. The
# float32 study added 6 and 7 after its 3-seed row missed; in float64 the other kernels give the same runs, so none.
PRIMARY_EXTRA_SEEDS: tuple[int, ...] = ()
TUNE_SEEDS = (100, 101)
TUNE_SIZES = (16, 32, 64)
# Frozen from `tune` in float32 before any reported-seed GRPO-best run (docs/BENCHMARKS.md, history): n = 16 reached
# the common target with 3.1-4.4x fewer sampled rollouts than n = 64 on both tuning seeds (n = 32: 1.8-2.0x). Kept
# for the float64 study (the tuning runs are re-run in float64 and the table says whether the rule still agrees).
GRPO_BEST_N: int | None = 16
# Accuracy curves are compared smoothed: each eval's accuracy is the trailing mean of it and the 2 evals before it (30
# steps at eval_every 10; `study.smoothed`). Chosen before the study on reported seeds 3-5, from the previous study's
# reproducibility row (seeds 0-2, docs/BENCHMARKS.md history): raw crossings put its two medians 24% apart, because a
# near-flat curve's first crossing of its noisy peak moves 10-20 steps with a +-0.01 drift; smoothed over 3 evals
# they were 3% apart. The paper compares raw evals (at 32 trials each on its small benchmarks).
SMOOTH = 3
OTHER_ISA = "default"  # ATEN_CPU_CAPABILITY of the reproducibility row: the portable kernels, not AVX2 / AVX-512

PAPER_PC = ("allocator.band_strategy=static", "allocator.sampling_strategy=fixed", "allocator.pilot_strategy=single",
            "allocator.commit_strategy=uniform")
# name -> (method, overrides of the bench preset). Run ids are bench-<name>-s<seed>.
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpo": ("grpo", ()),
    "dapo": ("dapo", ()),
    "pc-paper": ("pc", PAPER_PC),
    "pc": ("pc", ()),
    "pc-paper-noevict": ("pc", (*PAPER_PC, "allocator.evict=false")),
}
LABELS = {"grpo": "GRPO n=64", "dapo": "DAPO", "pc-paper": "paper PC", "pc": "our PC (four strategies)",
          "pc-paper-noevict": "paper PC, eviction off"}

log = logging.getLogger("bench_study")


def grpo_n_job(n: int, seed: int, family: str, steps: int = STEPS) -> study.StudyJob:
    name = "grpo" if n == 64 else f"grpo-n{n}"
    return study.StudyJob(f"{family}-{name}-s{seed}", "grpo", seed, steps, PRESET, family,
                          () if n == 64 else (f"allocator.n={n}",))


def tune_jobs(seeds=TUNE_SEEDS, sizes=TUNE_SIZES, steps: int = STEPS) -> list[study.StudyJob]:
    return [grpo_n_job(n, s, "bench-tune", steps) for s in seeds for n in sizes]


def main_jobs(seeds=SEEDS, best_n: int | None = GRPO_BEST_N, steps: int = STEPS,
              variants=tuple(VARIANTS), primary_seeds=PRIMARY_EXTRA_SEEDS) -> list[study.StudyJob]:
    """Every variant on ``seeds``, GRPO at its best n too; the primary pair (GRPO-64, our PC) also on ``primary_seeds``."""
    pairs = [(s, name) for s in seeds for name in variants]
    pairs += [(s, name) for s in primary_seeds if s not in seeds for name in ("grpo", "pc") if name in variants]
    jobs = [study.StudyJob(f"bench-{name}-s{s}", VARIANTS[name][0], s, steps, PRESET, "bench", VARIANTS[name][1])
            for s, name in pairs]
    if best_n is not None and best_n != 64:
        jobs += [grpo_n_job(best_n, s, "bench", steps) for s in seeds]
    return jobs


def repro_jobs(seeds=SEEDS, steps: int = STEPS) -> list[study.StudyJob]:
    env = (("ATEN_CPU_CAPABILITY", OTHER_ISA),)
    return [study.StudyJob(f"bench-isa-{name}-s{s}", VARIANTS[name][0], s, steps, PRESET, "bench-isa",
                           VARIANTS[name][1], env) for s in seeds for name in ("grpo", "pc")]


# ---- choosing GRPO's group size on the tuning seeds ------------------------------------------------------------
@dataclass(frozen=True)
class SizeRow:
    n: int
    seed: int
    peak: float | None
    last: float | None
    rollouts: int | None
    """Cumulative sampled rollouts at the first eval at or above the seed's common target (None: never)."""
    target: float | None


def size_rows(curves: dict[tuple[int, int], RunCurves], window: int = SMOOTH) -> list[SizeRow]:
    """Per tuning seed: the common target = min over sizes of each size's peak, and each size's cost to reach it, on
    the curves smoothed over ``window`` evals (peaks and last evals in the rows are the smoothed ones).

    Worked example (one seed): n 16 peaks at .70, n 32 at .74, n 64 at .73; target = .70; if n 16 first reaches .70
    at 30,720 sampled rollouts, n 32 at 40,960 and n 64 at 81,920, n 16 is the cheapest on that seed."""
    rows = []
    for seed in sorted({s for _, s in curves}):
        mine = {n: study.smoothed(c, window) for (n, s), c in curves.items() if s == seed}
        peaks = [c.peak_accuracy for c in mine.values() if c.peak_accuracy is not None]
        target = min(peaks) if peaks else None
        for n, c in sorted(mine.items()):
            rows.append(SizeRow(n, seed, c.peak_accuracy, c.final_accuracy,
                                study.first_at_or_above(c, target) if target is not None else None, target))
    return rows


def choose_size(rows: list[SizeRow]) -> int | None:
    """The size with the lowest median rollouts to the common target (a size that never reached it on a seed counts
    as infinitely expensive there); ties go to the larger median peak."""
    by_n: dict[int, list[SizeRow]] = {}
    for r in rows:
        by_n.setdefault(r.n, []).append(r)
    if not by_n:
        return None

    def key(n: int) -> tuple[float, float]:
        cost = statistics.median(float(r.rollouts) if r.rollouts is not None else math.inf for r in by_n[n])
        return cost, -(study.median([r.peak for r in by_n[n]]) or 0.0)

    return min(by_n, key=key)


def tune_section(store: Store, jobs: list[study.StudyJob], cmd: str, wall_s: float | None) -> tuple[str, int | None]:
    curves = study.curves_by_run(store, [j.run_id for j in jobs])
    by = {(_size(j), j.seed): curves[j.run_id] for j in jobs if j.run_id in curves}
    rows = size_rows(by)
    best = choose_size(rows)
    lines = [
        "### GRPO's group size, chosen on the tuning seeds",
        "",
        f"Command: `{cmd}`. Wall time: {_wall(wall_s)}. GRPO at n = 16, 32, 64 on tuning seeds "
        f"{', '.join(str(s) for s in sorted({j.seed for j in jobs}))}, {jobs[0].steps if jobs else 0} steps each, b_t 16 "
        "(so n = 16 samples a quarter of n = 64's rollouts per step). Per seed the common target is the lowest of the "
        f"three peaks; cost = sampled rollouts at the first eval at or above it. Accuracies are smoothed (trailing mean "
        f"over {SMOOTH} evals, `SMOOTH`), as in every ratio below.",
        "",
        "| n | seed | peak | last | target | rollouts to target | vs n = 64 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ref = {r.seed: r.rollouts for r in rows if r.n == 64}
    for r in sorted(rows, key=lambda r: (r.n, r.seed)):
        ratio = ref.get(r.seed) / r.rollouts if ref.get(r.seed) and r.rollouts else None
        lines.append(f"| {r.n} | {r.seed} | {_acc(r.peak)} | {_acc(r.last)} | {_acc(r.target)} | "
                     f"{format_count(r.rollouts)} | {format_ratio(ratio)} |")
    frozen = (f"Frozen: `GRPO_BEST_N = {GRPO_BEST_N}` (research/bench_study.py)." if GRPO_BEST_N is not None else
              "Not frozen yet: set `GRPO_BEST_N` in research/bench_study.py to the choice before `main`.")
    lines += ["", f"Choice by the rule (lowest median rollouts to target, ties to the higher peak): **n = {best}**. "
              + frozen, ""]
    return "\n".join(lines), best


def _size(job: study.StudyJob) -> int:
    for kv in job.overrides:
        if kv.startswith("allocator.n="):
            return int(kv.split("=", 1)[1])
    return 64


# ---- the study tables -------------------------------------------------------------------------------------------
def _acc(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _wall(wall_s: float | None) -> str:
    return f"{wall_s / 60:.1f} min" if wall_s is not None else "(not re-run: `report` re-renders from the store)"


def ratio_table(store: Store, jobs: list[study.StudyJob], best_n: int | None) -> tuple[list[str], dict[str, float | None]]:
    """Per seed and median: GRPO64/PC, GRPObest/PC, DAPO/PC for both PCs. Returns the lines and the medians."""
    ids = {(_variant(j), j.seed): j.run_id for j in jobs}
    curves = study.curves_by_run(store, list(ids.values()))
    seeds = sorted({j.seed for j in jobs})
    best_name = "grpo" if best_n in (None, 64) else f"grpo-n{best_n}"
    cols = []  # (label, pc variant, baseline variant)
    for pc in ("pc-paper", "pc"):
        for base, label in (("grpo", "GRPO64"), (best_name, f"GRPO{best_n or 64}"), ("dapo", "DAPO")):
            cols.append((f"{label} / {'paper PC' if pc == 'pc-paper' else 'our PC'}", pc, base))
    vals: dict[str, list[float | None]] = {c[0]: [] for c in cols}
    rows = []
    for s in seeds:
        cells = []
        for label, pc, base in cols:
            a, b = curves.get(ids.get((pc, s), "")), curves.get(ids.get((base, s), ""))
            v = study.versus(a, b, window=SMOOTH).grpo_over if a is not None and b is not None else None
            vals[label].append(v)
            cells.append(format_ratio(v))
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
    medians = {label: study.median(v) for label, v in vals.items()}
    head = "| seed | " + " | ".join(c[0] for c in cols) + " |"
    lines = [head, "|---:|" + "---:|" * len(cols), *rows,
             "| **median** | " + " | ".join(f"**{format_ratio(medians[c[0]])}**" for c in cols) + " |"]
    return lines, medians


def _variant(job: study.StudyJob) -> str:
    prefix = f"{job.family}-"
    return job.run_id[len(prefix):].rsplit("-s", 1)[0]


def epochs(store: Store, run_ids: list[str]) -> dict[str, float]:
    """Prompts consumed / pool size per run: how many times the run cycled the RL pool."""
    consumed = {r["run_id"]: float(r["c"]) for r in store.query(
        "SELECT run_id, coalesce(sum(prompts_consumed), 0) AS c FROM steps WHERE list_contains(?, run_id) GROUP BY run_id",
        [run_ids])}
    return {r["run_id"]: consumed.get(r["run_id"], 0.0) / json.loads(r["config_json"])["task"]["num_prompts"]
            for r in store.query("SELECT run_id, config_json FROM runs WHERE list_contains(?, run_id)", [run_ids])}


def repro_lines(store: Store, main: list[study.StudyJob], isa: list[study.StudyJob],
                core_seeds: tuple[int, ...] = SEEDS) -> list[str]:
    """The primary comparison (GRPO64 / our PC) under this machine's kernels and under the other ones, over every
    seed it ran on and over the ``core_seeds`` (the seeds of every variant) alone."""
    def medians(jobs):
        ids = {(_variant(j), j.seed): j.run_id for j in jobs}
        curves = study.curves_by_run(store, list(ids.values()))
        per = {}
        for s in sorted({j.seed for j in jobs}):
            a, b = curves.get(ids.get(("pc", s), "")), curves.get(ids.get(("grpo", s), ""))
            if a is not None and b is not None:
                per[s] = study.versus(a, b, window=SMOOTH).grpo_over
        return per, study.median(list(per.values()))

    caps = {r["run_id"]: json.loads(r["lineage_json"] or "{}").get("cpu_capability", "?") for r in store.query(
        "SELECT run_id, lineage_json FROM runs WHERE list_contains(?, run_id)", [[j.run_id for j in main + isa]])}
    m_per, m_med = medians([j for j in main if _variant(j) in ("grpo", "pc")])
    i_per, i_med = medians(isa)
    seeds = sorted({j.seed for j in main})
    kern = lambda jobs: "/".join(sorted({caps.get(j.run_id, "?") for j in jobs if j.run_id in caps})) or "?"  # noqa: E731
    main_kern = kern([j for j in main if _variant(j) in ("grpo", "pc")])
    lines = ["| run set | CPU kernels | " + " | ".join(f"seed {s}" for s in seeds) + " | median GRPO64 / our PC |",
             "|---|---|" + "---:|" * len(seeds) + "---:|",
             f"| main | {main_kern} | " + " | ".join(format_ratio(m_per.get(s)) for s in seeds) +
             f" | {format_ratio(m_med)} |",
             f"| reproducibility | {kern(isa)} | " + " | ".join(format_ratio(i_per.get(s)) for s in seeds) +
             f" | {format_ratio(i_med)} |"]
    summary = {"main_kernels": main_kern, "other_kernels": kern(isa), "median_main": m_med, "median_other": i_med,
               "relative_difference": abs(i_med - m_med) / m_med if m_med and i_med else None}
    if summary["relative_difference"] is not None:
        diff = summary["relative_difference"]
        lines += ["", f"Medians over seeds {', '.join(map(str, sorted(m_per)))} differ by {diff:.0%} "
                  f"({'within' if diff <= 0.15 else 'NOT within'} the 15% asked)."]
    core = [s for s in core_seeds if s in m_per and s in i_per]
    if core and len(core) < len(m_per):
        cm, ci = study.median([m_per[s] for s in core]), study.median([i_per[s] for s in core])
        cd = abs(ci - cm) / cm if cm and ci else None
        summary.update({"core_seeds": core, "median_main_core": cm, "median_other_core": ci,
                        "relative_difference_core": cd})
        lines += [f"Over seeds {', '.join(map(str, core))} alone (every variant's seeds): {format_ratio(cm)} and "
                  f"{format_ratio(ci)}" + (f", {cd:.0%} apart ({'within' if cd <= 0.15 else 'NOT within'} 15%)."
                                           if cd is not None else ".")]
    return lines, summary


def study_section(store: Store, img_dir: Path, main: list[study.StudyJob], isa: list[study.StudyJob],
                  best_n: int | None, cmd: str, walls: dict[str, float | None], tune_text: str,
                  core_seeds: tuple[int, ...] = SEEDS) -> tuple[str, dict]:
    """The docs section and the headline numbers (``pc_pipelines/presets/bench.results.json``, which `make demo`
    prints)."""
    ids = [j.run_id for j in main]
    stats = study.run_stats(store, ids)
    eps = epochs(store, ids)
    table, medians = ratio_table(store, main, best_n)
    seeds = sorted({j.seed for j in main})
    rep_lines, rep = repro_lines(store, main, isa, tuple(core_seeds))
    cfg = _preset()
    lines = [
        "## The rollout-efficiency study on the benchmark (`research/bench_study.py`, issue 16)",
        "",
        f"Command: `{cmd}` (or `make bench-efficiency`). Machine: {machine()}. Wall time per part: "
        + ", ".join(f"{k} {_wall(v)}" for k, v in walls.items()) +
        "; 2 runs at a time, each torch process on 1 thread. Store: `benchmarks/out/bench.duckdb` "
        "(`pilot-commit report --store benchmarks/out/bench.duckdb --family bench`).",
        "",
        f"Setting: the frozen `bench` preset ({preset_setting(cfg)}) from the shipped warm start, "
        f"{main[0].steps if main else 0} steps per run, reported seeds {', '.join(map(str, seeds))} (never used for "
        f"tuning; every variant on {', '.join(map(str, core_seeds))}, the primary pair GRPO n=64 and our PC on all). "
        "Ratios are rollouts to target on smoothed curves (each eval's accuracy = the mean of it and the "
        f"{SMOOTH - 1} evals before it): target = min(baseline peak, PC peak) per seed, cost = sampled rollouts at the "
        "first smoothed eval at or above it; > 1 means PC needed fewer sampled rollouts.",
        "",
        tune_text,
        "### Rollouts to target, per seed and median",
        "",
        *table,
        "",
        *([f"Median GRPO64 / our PC over seeds {', '.join(map(str, core_seeds))} alone: "
           f"{format_ratio(rep.get('median_main_core'))}.", ""] if set(seeds) - set(core_seeds) else []),
        "### Per run: second rounds, eviction, prompts consumed, epochs",
        "",
        _stats_table([stats[j.run_id] for j in main if j.run_id in stats], eps, main),
        "",
        "Steps > 1 round = share of steps that needed a second generation round (paper 6.3: 35.8% without eviction, "
        f"4.5% with); epochs = prompts consumed / {cfg.task.num_prompts:,} (the RL pool).",
        "",
        "### Where the rollouts went (all seeds, per step)",
        "",
    ]
    parts = study.rollout_breakdown(store, ids)
    groups: dict[str, list[str]] = {}
    for j in main:
        groups.setdefault(LABELS.get(_variant(j), f"GRPO n={best_n}"), []).append(j.run_id)
    table_b = {v: study.RolloutBreakdown.total(v, [parts[r] for r in rids if r in parts])
               for v, rids in groups.items() if any(r in parts for r in rids)}
    lines += [study.breakdown_markdown(table_b).strip(), ""]
    lines += ["### Reproducibility: the primary comparison under the other CPU kernels", "",
              f"The GRPO64 / our PC comparison re-run with `ATEN_CPU_CAPABILITY={OTHER_ISA}` (the scalar kernels: "
              "they round differently from the machine's AVX2 / AVX-512 ones; in float32 the runs part after tens of "
              f"steps, in float64 the differences stay ~1e-16); the runs train in {cfg.training.dtype}, and each "
              "run's lineage records the kernels it used.", "", *rep_lines, ""]
    curves = study.curves_by_run(store, ids)
    plot_curves: dict[str, list] = {}
    for j in main:
        if j.run_id in curves:
            plot_curves.setdefault(LABELS.get(_variant(j), f"GRPO n={best_n}"), []).append(curves[j.run_id])
    plot = study.plot_variants(plot_curves, Path(img_dir) / "bench_accuracy_vs_rollouts.png",
                               "bench: held-out accuracy vs sampled rollouts")
    per_step = study.plot_per_step([stats[j.run_id] for j in main if j.run_id in stats and _variant(j) in
                                    ("pc-paper", "pc-paper-noevict")], Path(img_dir) / "bench_rounds_per_step.png",
                                   "rounds")
    lines += ["### Plots", "", f"![bench accuracy vs rollouts]({docs_link(plot)})",
              f"![bench rounds per step, paper PC with and without eviction]({docs_link(per_step)})", ""]
    results = {"preset": PRESET, "dtype": cfg.training.dtype, "steps": main[0].steps if main else 0, "seeds": seeds,
               "core_seeds": sorted(s for s in core_seeds if s in seeds), "grpo_best_n": best_n,
               "medians": medians, "reproducibility": rep, "smooth_evals": SMOOTH, "command": "make bench-efficiency"}
    return "\n".join(lines) + "\n", results


def _preset():
    from pc_pipelines.config import resolve

    return resolve(PRESET, {}, method="pc", seed=0, family="bench")


def preset_setting(c) -> str:
    """The frozen regime in words, from the resolved preset ``c`` (so the text cannot drift from what ran)."""
    a = c.allocator
    return (f"RL on {c.task.num_prompts:,} prompts of {c.task.min_digits}-{c.task.max_digits} digits, training "
            f"temperature {c.training.temperature:g}, b_t {a.train_batch}, n = {a.n}, b_g = {a.train_batch * a.oversample:g}, "
            f"{c.training.dtype}")


def _stats_table(stats: list[study.RunStats], eps: dict[str, float], jobs: list[study.StudyJob]) -> str:
    var = {j.run_id: _variant(j) for j in jobs}
    lines = ["| run | variant | seed | steps | sampled | trained | steps > 1 round | evicted | prompts consumed "
             "| epochs | fill of b_t | informative | compute |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in sorted(stats, key=lambda s: (s.seed, list(VARIANTS).index(var[s.run_id]) if var[s.run_id] in VARIANTS
                                          else len(VARIANTS))):
        lines.append(
            f"| `{s.run_id}` | {LABELS.get(var[s.run_id], var[s.run_id].replace('grpo-n', 'GRPO n='))} | {s.seed} | {s.steps} | {s.sampled_rollouts:,} "
            f"| {s.trained_rollouts:,} | {s.multi_round_share:.1%} | {s.evicted:,} | {s.prompts_consumed:,} | "
            f"{eps.get(s.run_id, math.nan):.1f} | {s.fill_rate:.3f} | {s.informative_share:.3f} | "
            f"{s.compute_s / 60:.1f} min |")
    return "\n".join(lines)



# ---- command ----------------------------------------------------------------------------------------------------
def _run(jobs, args) -> float:
    t0 = time.monotonic()
    study.run_jobs(jobs, Store(args.store), args.out, workers=args.workers, cache_dir=args.cache_dir,
                   show_progress=not args.quiet)
    return time.monotonic() - t0


def part_wall(store: Store, jobs: list[study.StudyJob]) -> float | None:
    """Wall seconds a part took as its runs recorded it: the union over its runs of the spans they were running
    (:func:`running_spans`, from each run's creation and its steps' write times), so a part finished in two
    invocations counts neither the time between them nor a run's own time dead between a kill and its resume."""
    if not Path(store.path).exists():
        return None
    ids = [j.run_id for j in jobs]
    created = {r["run_id"]: float(r["c"]) for r in store.query(
        "SELECT run_id, epoch(created_at) AS c FROM runs WHERE list_contains(?, run_id)", [ids]) if r["c"] is not None}
    writes: dict[str, list[float]] = {}
    for r in store.query("SELECT run_id, epoch(written_at) AS w FROM steps WHERE list_contains(?, run_id) "
                         "ORDER BY run_id, step", [ids]):
        if r["w"] is not None:
            writes.setdefault(r["run_id"], []).append(float(r["w"]))
    return union_seconds([span for rid, c in created.items() for span in running_spans(c, writes.get(rid, []))])


GAP_FACTOR, GAP_FLOOR_S = 10.0, 120.0


def running_spans(created: float, writes: list[float]) -> list[tuple[float, float]]:
    """The spans a run was running: from its creation to its first step's write, then between consecutive step
    writes, leaving out any span longer than ``GAP_FACTOR`` times the run's median span and ``GAP_FLOOR_S`` (the
    run was killed and resumed later: an evaluation every few steps costs a few steps' time, not ten).

    Worked example: created at 0, steps written at 5, 10, 15, 1015, 1020 -> spans [0, 5], [5, 10], [10, 15],
    [1015, 1020] (median 5 s; the 1000 s from 15 to 1015 is a gap) = 20 s of running."""
    times = [created, *sorted(writes)]
    spans = [(a, b) for a, b in zip(times, times[1:]) if b >= a]
    if not spans:
        return []
    limit = max(GAP_FACTOR * statistics.median(b - a for a, b in spans), GAP_FLOOR_S)
    return [(a, b) for a, b in spans if b - a <= limit]


def union_seconds(spans: list[tuple[float, float]]) -> float | None:
    """Total length of the union of ``spans`` (start, end); None when there are none."""
    if not spans:
        return None
    first, *rest = sorted(spans)
    total, (lo, hi) = 0.0, first
    for a, b in rest:
        if a > hi:
            total, lo, hi = total + hi - lo, a, b
        else:
            hi = max(hi, b)
    return total + hi - lo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--store", default=str(ROOT / "benchmarks/out/bench.duckdb"), help="the study's store")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/bench-runs"), help="run directories")
    ap.add_argument("--img-dir", default=str(ROOT / "docs/img/bench"), help="where the PNGs go")
    ap.add_argument("--write", default=str(ROOT / "docs/BENCHMARKS.md"), help="the Markdown file to update ('' = none)")
    ap.add_argument("--results", default="",
                    help="write the headline numbers as JSON into this file (default: none). `make study-bench` names "
                    "the package's data file pc_pipelines/presets/bench.results.json, the headline `make demo` prints")
    ap.add_argument("--cache-dir", help="the base policy cache (default: the shipped warm start)")
    ap.add_argument("--workers", type=int, default=2, help="runs at a time (default 2: one per core)")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"steps per run (default {STEPS}, the frozen length)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help=f"reported seeds (default {' '.join(map(str, SEEDS))})")
    ap.add_argument("--primary-seeds", type=int, nargs="*", default=list(PRIMARY_EXTRA_SEEDS),
                    help="more seeds for the primary pair only, GRPO-64 and our PC (default none)")
    ap.add_argument("--tune-seeds", type=int, nargs="+", default=list(TUNE_SEEDS), help="tuning seeds (100 101)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(TUNE_SIZES), help="GRPO group sizes to tune")
    ap.add_argument("--best-n", type=int, default=GRPO_BEST_N, help="GRPO's frozen best size (default GRPO_BEST_N)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), help="main's variants")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="an override for EVERY run (tests shrink the runs with it; the study uses none)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("part", choices=["all", "tune", "main", "repro", "report"], nargs="?", default="all",
                    help="which part to run (default all: tune, main, repro, then the section)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    store = Store(args.store)
    tune = tune_jobs(args.tune_seeds, args.sizes, args.steps)
    main_ = main_jobs(args.seeds, args.best_n, args.steps, args.variants, args.primary_seeds)
    isa = repro_jobs(sorted({*args.seeds, *args.primary_seeds}), args.steps)
    if args.overrides:
        tune, main_, isa = ([replace(j, overrides=(*j.overrides, *args.overrides)) for j in jobs]
                            for jobs in (tune, main_, isa))
    if args.part in ("all", "tune"):
        _run(tune, args)
    if args.part in ("all", "main"):
        if args.best_n is None:
            raise SystemExit("bench_study.py: GRPO's best group size is not frozen yet. Fix: run `bench_study.py tune`, "
                             "read its choice, set GRPO_BEST_N in research/bench_study.py (or pass --best-n N).")
        _run(main_, args)
    if args.part in ("all", "repro"):
        _run(isa, args)
    walls = {"tune": part_wall(store, tune), "main": part_wall(store, main_), "repro": part_wall(store, isa)}
    common = f"--steps {args.steps} --seeds {' '.join(map(str, args.seeds))}" + (
        f" --primary-seeds {' '.join(map(str, args.primary_seeds))}" if args.primary_seeds else "")
    tune_text, best = tune_section(store, tune, f"python research/bench_study.py tune --steps {args.steps} "
                                   f"--tune-seeds {' '.join(map(str, args.tune_seeds))}", walls["tune"])
    if args.part == "tune" or args.best_n is None:
        print(tune_text)
        if args.best_n is None:
            print(f"\nFreeze it: set GRPO_BEST_N = {best} in research/bench_study.py, then run `bench_study.py main`.")
        elif best != args.best_n:
            print(f"\nThe rule picks n = {best} on these runs, but n = {args.best_n} is frozen: the study keeps the "
                  "frozen size (a choice is never re-made after the reported seeds ran).")
        return 0
    body, results = study_section(store, Path(args.img_dir), main_, isa, args.best_n,
                                  f"python research/bench_study.py {common}", walls, tune_text,
                                  core_seeds=tuple(args.seeds))
    print(body)
    if args.write:
        write_section(Path(args.write), "bench-study", body)
    if args.results:
        Path(args.results).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
