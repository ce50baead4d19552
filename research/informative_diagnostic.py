"""Issue 30 point 1: does held-out accuracy per step depend on the number of informative groups per step on `bench`?

    .venv/bin/python research/informative_diagnostic.py --dry-run       # the planned runs and the time estimate
    .venv/bin/python research/informative_diagnostic.py                 # every part, then the docs section (resumable)
    .venv/bin/python research/informative_diagnostic.py grpo            # GRPO-64 at b_t 8 / 16 / 32 x lr x1 / x3
    .venv/bin/python research/informative_diagnostic.py drop0           # GRPO-64 with zero-advantage groups dropped
    .venv/bin/python research/informative_diagnostic.py pc              # our PC (the preset's) at b_t 16 x lr x1 / x3
    .venv/bin/python research/informative_diagnostic.py report --plots  # re-render the section (and the PNG)
    .venv/bin/python research/informative_diagnostic.py --smoke         # 2 steps at b_t 4, one seed, a temp store

The hypothesis under test (issue 30): with token-mean loss and Adam, zero-advantage groups dilute the gradient's
scale, which Adam normalizes away, so a step is limited by the learning rate, not by how much signal it carries.
Our PC trains only on groups with reward variance and GRPO-64 on ~42% of its groups, yet both gained about the same
held-out accuracy per step in the float64 study. If the hypothesis holds, learning per step stays flat as the
informative groups per step grow (GRPO at b_t 8 -> 32 has ~3.4 -> ~13 of them), rises with the learning rate, and
does not change when the zero-advantage groups are dropped from the loss.

Design (all on the tuning seeds 100, 101 only; nothing here is ever read on the reported seeds):
* every run resolves from the frozen ``bench`` preset and differs only in what the cell varies, ``STEPS`` = 50 steps
  from the shipped warm start, held-out evaluation every ``EVAL_EVERY`` = 5 steps (the study's 10 gives a 50-step
  run too few points for a slope);
* the PPO minibatch is b_t / 2 groups in every GRPO and PC cell, so every step takes the preset's 2 Adam updates
  (16 / 8): with the preset's fixed 8, b_t 32 would take 4 updates a step and learn more per step for that reason
  alone;
* ``grpo``: GRPO n = 64 at b_t 8 / 16 / 32 x learning rate x1 / x3 (the preset's 1e-4 and 3e-4);
* ``drop0``: the same GRPO step with the zero-advantage groups dropped from the loss, without touching the package:
  DAPO with ``oversample=1`` and ``max_rounds=1`` draws the same b_t fresh prompts x 64 in one round (the same prompt
  stream and sampling seeds as GRPO) and trains only the groups whose rewards are not all equal. Its minibatch is
  b_t / 4 groups, so its ~0.42 b_t trained groups take about 2 updates a step with about as many informative groups
  per update as GRPO's: it differs from GRPO mainly by the zero-advantage tokens in the token-mean denominator (the
  dilution). Later steps may draw other rollouts than GRPO's, since the policies part;
* ``pc``: our PC (the preset's four strategies) at b_t 16 x lr x1 / x3: 16 informative groups a step;
* per run, from the store: informative and trained groups per step (``steps``: informative_share x trained_prompts),
  held-out accuracy (``eval_curve``, mean over digit lengths 1-6) and its in-distribution part (``eval_results``,
  the RL pool's lengths 4-6, where the gain concentrates while lengths 1-3 forget), each as start -> last eval and a
  least-squares slope per step over the first ``--fit-steps`` steps with its standard error; accuracy per 1k sampled
  rollouts = that slope / sampled rollouts per step x 1000; and the update's size as the trainer logs it to
  TensorBoard only (``train/grad_norm``: pre-clip gradient norm, mean over the step's minibatches; ``train/ppo_kl``:
  the PPO KL between the policy before the step and during its later minibatches), since the store's ``steps``
  table keeps the loss but neither of these;
* everything goes into one store, ``benchmarks/out/informative.duckdb`` (git-ignored); a run already complete in it
  is not re-run, an interrupted one resumes from its checkpoint; 2 runs at a time, each torch process on 1 thread
  (``study.run_jobs``, as bench_study.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# research/ is a package imported from the checkout (never by pc_pipelines); benchmarks/_report.py writes the docs
# sections of benchmarks/, research/ and reliability/ alike.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _report import STUDIES_HEADER, docs_link, machine, write_section

from pc_pipelines.store import Store
from research import study
from research.bench_study import part_wall

ROOT = Path(__file__).resolve().parent.parent
PRESET = "bench"
FAMILY = "info-diag"
MARKER = "informative-diagnostic"
STEPS = 50
EVAL_EVERY = 5
SEEDS = (100, 101)  # the tuning seeds: the study reports 8, 9, 10 and never tunes on them
GRPO_SIZES = (8, 16, 32)
LR_MULTS = (1.0, 3.0)
PC_SIZES = (16,)
DROP0_SIZES = (16,)
REF = ("grpo", 16, 1.0)  # the preset's own GRPO-64 step: the reference cell of the ratios

VARIANTS: dict[str, str] = {"grpo": "grpo", "grpo-drop0": "dapo", "pc": "pc"}  # variant -> method
LABELS = {"grpo": "GRPO n=64", "grpo-drop0": "GRPO n=64, zero-adv. groups dropped", "pc": "our PC"}
PARTS = {"grpo": ("grpo",), "drop0": ("grpo-drop0",), "pc": ("pc",)}  # part -> variants

# Cost model of a step (float64, one core, the float64 study's fastest runs: GRPO-64 at b_t 16 8.0 min and our PC
# 5.1 min of compute over 120 steps): seconds per sampled rollout (generation + reward) and per trained rollout
# (old log-probs + the update), solved from GRPO's 1,024 sampled = trained (4.0 s a step) and PC's 1,022 sampled /
# 512 trained (2.55 s a step).
S_PER_SAMPLED = 1.08e-3
S_PER_TRAINED = 2.83e-3
GRPO_INFORMATIVE = 0.42  # GRPO-64's informative share of groups on bench (the float64 study: 0.416-0.419)
PC_TRAINED_PER_GROUP = 32  # our PC trains 512 rollouts over 16 groups a step
# One held-out evaluation (600 prompts x 4 samples, float64) and a run's start (the process's imports, the warm
# start): the --smoke run measured 5.1 s an evaluation and 4 s from registration to the first evaluation (medians,
# both cores shared with other work), plus ~10 s of imports before registration that the store does not see.
EVAL_S = 5.0
START_S = 15.0
LOAD_FACTOR = 2.3  # the study's slowest / fastest compute of the same run kind (GRPO-64: 18.4 vs 8.0 min)

log = logging.getLogger("informative_diagnostic")


# ---- the grid -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One run of the diagnostic: a variant at b_t and a multiple of the preset's learning rate, on one seed."""

    variant: str
    b_t: int
    lr_mult: float
    seed: int

    @property
    def method(self) -> str:
        return VARIANTS[self.variant]

    @property
    def ppo_minibatch(self) -> int:
        """b_t / 2 groups (2 updates a step); the drop0 variant trains ~0.42 b_t groups, so b_t / 4 (about 2)."""
        return max(1, self.b_t // 4 if self.variant == "grpo-drop0" else self.b_t // 2)

    @property
    def key(self) -> tuple[str, int, float]:
        return (self.variant, self.b_t, self.lr_mult)

    def run_id(self, family: str = FAMILY) -> str:
        return f"{family}-{self.variant}-b{self.b_t}-lr{self.lr_mult:g}x-s{self.seed}"

    def overrides(self, base_lr: float, eval_every: int = EVAL_EVERY) -> tuple[str, ...]:
        out = [f"allocator.train_batch={self.b_t}", f"training.ppo_minibatch={self.ppo_minibatch}",
               f"training.lr={base_lr * self.lr_mult:g}", f"training.eval_every={eval_every}"]
        if self.variant == "grpo-drop0":
            out += ["allocator.oversample=1", "allocator.max_rounds=1"]
        return tuple(out)

    def job(self, steps: int, base_lr: float, eval_every: int = EVAL_EVERY, family: str = FAMILY) -> study.StudyJob:
        return study.StudyJob(self.run_id(family), self.method, self.seed, steps, PRESET, family,
                              self.overrides(base_lr, eval_every))


def grid(seeds: Sequence[int] = SEEDS, grpo_sizes: Sequence[int] = GRPO_SIZES, lr_mults: Sequence[float] = LR_MULTS,
         pc_sizes: Sequence[int] = PC_SIZES, drop0_sizes: Sequence[int] = DROP0_SIZES,
         parts: Sequence[str] = tuple(PARTS)) -> list[Cell]:
    """The cells of ``parts``, per part and b_t largest first (``study.run_jobs`` starts DAPO, then PC, then GRPO
    jobs, and keeps this order among jobs of one method: the longest GRPO runs start first)."""
    sizes = {"grpo": grpo_sizes, "grpo-drop0": drop0_sizes, "pc": pc_sizes}
    return [Cell(v, b, m, s) for part in parts for v in PARTS[part] for b in sorted(sizes[v], reverse=True)
            for m in lr_mults for s in seeds]


def base_lr() -> float:
    from pc_pipelines.config import resolve

    return float(resolve(PRESET, {}, method="grpo", seed=0, family=FAMILY).training.lr)


# ---- the time estimate --------------------------------------------------------------------------------------------
def step_seconds(cell: Cell, n: int = 64) -> float:
    """A step's compute on one idle core by the cost model (generation + reward per sampled rollout, old log-probs +
    update per trained rollout)."""
    sampled = cell.b_t * n
    trained = {"grpo": sampled, "grpo-drop0": GRPO_INFORMATIVE * sampled,
               "pc": PC_TRAINED_PER_GROUP * cell.b_t}[cell.variant]
    return S_PER_SAMPLED * sampled + S_PER_TRAINED * trained


def run_seconds(cell: Cell, steps: int, eval_every: int = EVAL_EVERY) -> float:
    return START_S + steps * step_seconds(cell) + (1 + steps // eval_every) * EVAL_S


def estimate(cells: Sequence[Cell], steps: int, eval_every: int = EVAL_EVERY, workers: int = 2,
             base: float = 1e-4) -> dict[str, float]:
    """Core seconds and wall seconds of ``cells`` on ``workers`` idle cores, scheduled as ``study.run_jobs`` does
    (its order; one job alone until it has trained a step, then ``workers`` at a time, each on the first free one)."""
    order = [c for _, c in sorted(enumerate(cells), key=lambda ic: (-ic[1].job(steps, base).cost, ic[0]))]
    lengths = [run_seconds(c, steps, eval_every) for c in order]
    if not lengths:
        return {"core_s": 0.0, "wall_s": 0.0, "runs": 0}
    free = [0.0] * workers
    free[0] = lengths[0]
    first_step = START_S + EVAL_S + step_seconds(order[0])
    for i, length in enumerate(lengths[1:]):
        k = min(range(workers), key=lambda w: free[w])
        begin = max(free[k], first_step) if i < workers - 1 else free[k]
        free[k] = begin + length
    return {"core_s": sum(lengths), "wall_s": max(free), "runs": len(lengths)}


def plan_text(cells: Sequence[Cell], steps: int, eval_every: int, base: float, workers: int,
              store: Store | None = None) -> str:
    lines = [f"{len(cells)} runs of {steps} steps (held-out eval every {eval_every}), preset {PRESET}, "
             f"base lr {base:g}:", ""]
    for c in cells:
        j = c.job(steps, base, eval_every)
        done = study._done_steps(store, j.run_id) if store is not None else 0
        lines.append(f"  {j.run_id:<40} {j.method:<5} ~{run_seconds(c, steps, eval_every) / 60:4.1f} min"
                     f"  done {min(done, steps)}/{steps}  {' '.join(j.overrides)}")
    est = estimate(cells, steps, eval_every, workers, base)
    by_part = {p: sum(run_seconds(c, steps, eval_every) for c in cells if c.variant in PARTS[p]) for p in PARTS}
    lines += ["", "Estimate (cost model: float64 step = "
              f"{S_PER_SAMPLED * 1e3:.2f} ms per sampled + {S_PER_TRAINED * 1e3:.2f} ms per trained rollout on one idle "
              f"core; {EVAL_S:g} s an evaluation, {START_S:g} s a start):",
              f"  compute {est['core_s'] / 60:.0f} core-min ("
              + ", ".join(f"{p} {s / 60:.0f}" for p, s in by_part.items() if s) + ")",
              f"  wall on {workers} idle cores: {est['wall_s'] / 60:.0f} min; under a load like the float64 study's "
              f"worst (x{LOAD_FACTOR:g}): {est['wall_s'] * LOAD_FACTOR / 60:.0f} min"]
    return "\n".join(lines)


# ---- per-run numbers ----------------------------------------------------------------------------------------------
def fit_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of ``y`` on ``x`` and its standard error (nan with fewer than 3 points for the error,
    fewer than 2 for the slope). Evaluations are taken as independent (each samples with its own seed), so the
    error covers the evaluation noise, not the run-to-run spread (the seeds show that).

    Worked example: x = (0, 5, 10), y = (.60, .62, .67) -> slope .007 per step, se .00173."""
    n = len(x)
    if n < 2 or len(y) != n:
        return math.nan, math.nan
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx == 0:
        return math.nan, math.nan
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx
    if n < 3:
        return slope, math.nan
    resid = [b - (my + slope * (a - mx)) for a, b in zip(x, y)]
    return slope, math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx)


@dataclass(frozen=True)
class Row:
    """One run's numbers. Slopes are held-out accuracy per training step (x = step, the updates taken)."""

    cell: Cell
    run_id: str
    steps: int
    ppo_minibatch: int
    informative: float
    """Informative groups (reward variance) per step, mean over steps."""
    trained: float
    """Trained groups per step."""
    sampled: float
    """Sampled rollouts per step."""
    start: float
    last: float
    slope: float
    slope_se: float
    start_in: float
    last_in: float
    slope_in: float
    slope_in_se: float
    grad_norm: float = math.nan
    ppo_kl: float = math.nan
    clipped: float = math.nan
    """Share of steps whose mean pre-clip gradient norm exceeds training.grad_clip."""
    compute_s: float = math.nan

    @property
    def gain(self) -> float:
        return self.last - self.start

    @property
    def gain_in(self) -> float:
        return self.last_in - self.start_in

    @property
    def per_1k(self) -> float:
        """Held-out accuracy per 1k sampled rollouts (the slope over the sampled rollouts of a step)."""
        return self.slope / self.sampled * 1000 if self.sampled else math.nan

    @property
    def per_1k_in(self) -> float:
        return self.slope_in / self.sampled * 1000 if self.sampled else math.nan


def curve_numbers(points: Sequence[tuple[int, float]], fit_steps: int) -> tuple[float, float, float, float]:
    """(start, last, slope, se) of eval points (step, accuracy), step 0 = before training, over steps <= fit_steps."""
    pts = sorted((s, a) for s, a in points if s <= fit_steps)
    if not pts:
        return math.nan, math.nan, math.nan, math.nan
    slope, se = fit_slope([s for s, _ in pts], [a for _, a in pts])
    return pts[0][1], pts[-1][1], slope, se


def tb_scalars(tb_dir: Path, tags: Sequence[str]) -> dict[str, dict[int, float]]:
    """TensorBoard scalars of a run (the last value written for each step: a resumed run rewrites its tail);
    empty when the directory or the tensorboard package is missing."""
    if not tb_dir.is_dir():
        return {}
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return {}
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    have = set(acc.Tags().get("scalars", []))
    out: dict[str, dict[int, float]] = {}
    for tag in tags:
        if tag in have:
            vals: dict[int, float] = {}
            for e in sorted(acc.Scalars(tag), key=lambda e: e.wall_time):
                vals[int(e.step)] = float(e.value)
            out[tag] = vals
    return out


def rows_from_store(store: Store, cells: Sequence[Cell], steps: int, fit_steps: int | None = None,
                    family: str = FAMILY, out_dir: Path | None = None) -> list[Row]:
    """A :class:`Row` per cell that has steps in ``store``, read over its first ``steps`` steps. TensorBoard is read
    from each run's directory as its lineage records it (else ``out_dir / run_id``)."""
    if not Path(store.path).exists():
        return []
    fit = min(fit_steps or steps, steps)
    by_id = {c.run_id(family): c for c in cells}
    ids = list(by_id)
    runs = {r["run_id"]: r for r in store.query(
        "SELECT run_id, config_json, lineage_json FROM runs WHERE list_contains(?, run_id)", [ids])}
    per_step: dict[str, list[dict]] = {}
    for r in store.query(
            """SELECT run_id, step, trained_prompts, informative_share, sampled_rollouts,
                      coalesce(time_generate_s, 0) + coalesce(time_reward_s, 0) + coalesce(time_update_s, 0) AS compute_s
               FROM steps WHERE list_contains(?, run_id) AND step <= ? ORDER BY run_id, step""", [ids, steps]):
        per_step.setdefault(r["run_id"], []).append(r)
    evals: dict[str, list[tuple[int, float]]] = {}
    for r in store.query("SELECT run_id, step, accuracy FROM eval_curve WHERE list_contains(?, run_id) AND step <= ? "
                         "ORDER BY run_id, step", [ids, steps]):
        evals.setdefault(r["run_id"], []).append((int(r["step"]), float(r["accuracy"])))
    per_len: dict[str, dict[int, dict[str, float]]] = {}
    for r in store.query("SELECT run_id, step, benchmark, accuracy FROM eval_results WHERE list_contains(?, run_id) "
                         "AND step <= ?", [ids, steps]):
        per_len.setdefault(r["run_id"], {}).setdefault(int(r["step"]), {})[r["benchmark"]] = float(r["accuracy"])
    out = []
    for rid, cell in by_id.items():
        st = per_step.get(rid)
        if not st or rid not in runs:
            continue
        cfg = json.loads(runs[rid]["config_json"])
        lo, hi = int(cfg["task"]["min_digits"]), int(cfg["task"]["max_digits"])
        pool = {f"arith_d{d}" for d in range(lo, hi + 1)}
        inside = [(s, statistics.fmean(a for b, a in accs.items() if b in pool))
                  for s, accs in sorted(per_len.get(rid, {}).items()) if pool & set(accs)]
        info = [float(r["informative_share"] or 0.0) * int(r["trained_prompts"]) for r in st]
        run_dir = json.loads(runs[rid]["lineage_json"] or "{}").get("run_dir")
        run_dir = Path(run_dir) if run_dir else (out_dir / rid if out_dir is not None else None)
        tb = tb_scalars(run_dir / "tensorboard", ("train/grad_norm", "train/ppo_kl")) if run_dir else {}
        # A step whose every group has zero advantage has a zero gradient (no signal, not a small update): left out.
        gn = [v for s, v in tb.get("train/grad_norm", {}).items() if s < steps and math.isfinite(v) and v > 0]
        kl = [v for s, v in tb.get("train/ppo_kl", {}).items() if s < steps and math.isfinite(v)]
        clip = float(cfg["training"].get("grad_clip", 1.0))
        out.append(Row(
            cell=cell, run_id=rid, steps=len(st), ppo_minibatch=int(cfg["training"]["ppo_minibatch"]),
            informative=statistics.fmean(info), trained=statistics.fmean(int(r["trained_prompts"]) for r in st),
            sampled=statistics.fmean(int(r["sampled_rollouts"]) for r in st),
            **dict(zip(("start", "last", "slope", "slope_se"), curve_numbers(evals.get(rid, []), fit))),
            **dict(zip(("start_in", "last_in", "slope_in", "slope_in_se"), curve_numbers(inside, fit))),
            grad_norm=statistics.fmean(gn) if gn else math.nan, ppo_kl=statistics.fmean(kl) if kl else math.nan,
            clipped=sum(g > clip for g in gn) / len(gn) if gn and clip > 0 else math.nan,
            compute_s=sum(float(r["compute_s"]) for r in st)))
    return out


# ---- per-cell summary and the mechanical reading ----------------------------------------------------------------
@dataclass(frozen=True)
class CellMean:
    """A cell's seeds together: means, and the standard error of the mean slope from the runs' fit errors."""

    key: tuple[str, int, float]
    seeds: tuple[int, ...]
    informative: float
    trained: float
    sampled: float
    slope: float
    slope_se: float
    slope_in: float
    slope_in_se: float
    per_seed: tuple[float, ...]
    per_seed_in: tuple[float, ...]
    grad_norm: float
    ppo_kl: float


def _mean(vals: Sequence[float]) -> float:
    xs = [v for v in vals if not math.isnan(v)]
    return statistics.fmean(xs) if xs else math.nan


def _se_of_mean(ses: Sequence[float]) -> float:
    return math.sqrt(sum(s * s for s in ses)) / len(ses) if ses else math.nan


def cell_means(rows: Sequence[Row]) -> dict[tuple[str, int, float], CellMean]:
    groups: dict[tuple[str, int, float], list[Row]] = {}
    for r in rows:
        groups.setdefault(r.cell.key, []).append(r)
    out = {}
    for key, rs in groups.items():
        rs = sorted(rs, key=lambda r: r.cell.seed)
        out[key] = CellMean(
            key, tuple(r.cell.seed for r in rs), _mean([r.informative for r in rs]), _mean([r.trained for r in rs]),
            _mean([r.sampled for r in rs]), _mean([r.slope for r in rs]), _se_of_mean([r.slope_se for r in rs]),
            _mean([r.slope_in for r in rs]), _se_of_mean([r.slope_in_se for r in rs]),
            tuple(r.slope for r in rs), tuple(r.slope_in for r in rs), _mean([r.grad_norm for r in rs]),
            _mean([r.ppo_kl for r in rs]))
    return out


def exponent(slope_a: float, slope_b: float, info_a: float, info_b: float) -> float | None:
    """beta in slope ~ informative^beta between two cells: ln(slope ratio) / ln(informative ratio); None where a
    slope is not positive or the informative groups are equal. beta 0: flat (the step is limited by something
    else, e.g. the learning rate); 0.5: noise averaging (Adam's normalized step gains sqrt(k)); 1: proportional.

    Worked example: slopes .0002 and .0004 at 3.4 and 13.4 informative groups -> beta = ln 2 / ln 3.94 = 0.51."""
    if not (slope_a > 0 and slope_b > 0 and info_a > 0 and info_b > 0) or info_a == info_b:
        return None
    return math.log(slope_b / slope_a) / math.log(info_b / info_a)


BETA_FLAT, BETA_GROWS = 0.25, 0.5  # the reading's thresholds on beta, fixed before any run
LR_RAISES = 1.5  # lr x3 "raises" per-step learning when the slope grows by more than this factor
SAME = (2 / 3, 3 / 2)  # drop0 / GRPO "the same" within this band


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 and not math.isnan(a) and not math.isnan(b) else None


def reading(means: dict[tuple[str, int, float], CellMean], which: str = "in") -> list[str]:
    """The mechanical reading of the grid on one slope (``in``: the pool's lengths, ``all``: every length), with the
    thresholds above; the hand-written reading weighs it against the seeds' spread."""
    def s(m: CellMean) -> float:
        return m.slope_in if which == "in" else m.slope

    def se(m: CellMean) -> float:
        return m.slope_in_se if which == "in" else m.slope_se

    lines = []
    lrs = sorted({k[2] for k in means})
    betas: dict[float, float | None] = {}
    for lr in lrs:
        sizes = sorted(b for v, b, m in means if v == "grpo" and m == lr)
        if len(sizes) < 2:
            continue
        lo, hi = means[("grpo", sizes[0], lr)], means[("grpo", sizes[-1], lr)]
        beta = exponent(s(lo), s(hi), lo.informative, hi.informative)
        betas[lr] = beta
        diff, dse = s(hi) - s(lo), math.hypot(se(hi), se(lo))
        verdict = ("not measurable (a slope <= 0)" if beta is None else
                   "flat: per-step learning does not follow the informative groups" if beta < BETA_FLAT else
                   "grows with the informative groups" if beta >= BETA_GROWS else "between flat and sqrt")
        lines.append(f"- GRPO at lr x{lr:g}, b_t {sizes[0]} -> {sizes[-1]} ({lo.informative:.1f} -> "
                     f"{hi.informative:.1f} informative groups a step): slope {100 * s(lo):+.3f} -> {100 * s(hi):+.3f} "
                     f"per 100 steps (difference {100 * diff:+.3f} +- {100 * dse:.3f}, "
                     f"{'within' if abs(diff) < 2 * dse else 'beyond'} 2 standard errors), beta = "
                     f"{'-' if beta is None else f'{beta:.2f}'}: {verdict}.")
    raises = []
    for b in sorted({k[1] for k in means if k[0] == "grpo"}):
        if len(lrs) >= 2 and ("grpo", b, lrs[0]) in means and ("grpo", b, lrs[-1]) in means:
            r = _ratio(s(means[("grpo", b, lrs[-1])]), s(means[("grpo", b, lrs[0])]))
            raises.append(r)
            lines.append(f"- GRPO at b_t {b}: lr x{lrs[-1]:g} / x{lrs[0]:g} slope ratio "
                         f"{'-' if r is None else f'{r:.2f}'}.")
    for (v, b, lr), m in sorted(means.items()):
        if v in ("grpo-drop0", "pc") and ("grpo", b, lr) in means:
            g = means[("grpo", b, lr)]
            r = _ratio(s(m), s(g))
            lines.append(f"- {LABELS[v]} / GRPO at b_t {b}, lr x{lr:g}: slope ratio {'-' if r is None else f'{r:.2f}'} "
                         f"({m.informative:.1f} vs {g.informative:.1f} informative groups a step).")
    if not betas:
        return [*lines, "- Too few GRPO cells (one b_t) for a reading."]
    ref_lr = 1.0 if 1.0 in betas else min(betas)
    flat = betas[ref_lr] is not None and betas[ref_lr] < BETA_FLAT
    lr_limits = bool(raises) and all(r is not None and r > LR_RAISES for r in raises)
    drop = [_ratio(s(m), s(means[("grpo", b, lr)])) for (v, b, lr), m in means.items()
            if v == "grpo-drop0" and ("grpo", b, lr) in means]
    no_dilution = bool(drop) and all(r is not None and SAME[0] <= r <= SAME[1] for r in drop)
    grows_at = [lr for lr, beta in betas.items() if beta is not None and beta >= BETA_GROWS]
    holds = flat and lr_limits and (no_dilution or not drop)
    lines.append(
        f"- Mechanically (beta < {BETA_FLAT} at the preset's lr, lr x3 raising the slope by > {LR_RAISES}x at every "
        f"b_t, dropping the zero-advantage groups within {SAME[0]:.2f}-{SAME[1]:.2f}x): the hypothesis "
        + ("**holds**" if holds else "**does not hold**") + " on this slope"
        + (f" (flat: {flat}, the lr limits: {lr_limits}, no dilution effect: {no_dilution if drop else 'not run'})"
           + (f"; per-step learning grows with the informative groups at lr x{', x'.join(f'{x:g}' for x in grows_at)}"
              if grows_at else "") + "."))
    return lines


# ---- the section --------------------------------------------------------------------------------------------------
def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _slope(v: float, se: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:+.3f}" + ("" if math.isnan(se) else f" +- {100 * se:.3f}")


def _order(c: Cell) -> tuple:
    return (list(VARIANTS).index(c.variant), c.b_t, c.lr_mult, c.seed)


def table_markdown(rows: Sequence[Row]) -> str:
    """One row per run. Slopes are per 100 steps (+- their fit's standard error); per 1k sampled is the slope per
    step over the sampled rollouts of a step, x 1000, in units of 1e-3 accuracy."""
    lines = [
        "| variant | b_t | lr | seed | minibatch | informative groups / step | trained groups / step | sampled / step "
        "| held-out start -> last (gain) | slope / 100 steps | per 1k sampled (1e-3) | lengths 4-6 start -> last (gain) "
        "| lengths 4-6 slope / 100 steps | lengths 4-6 per 1k sampled (1e-3) | grad norm (clipped) | PPO KL | compute |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: _order(r.cell)):
        c = r.cell
        lines.append(
            f"| {LABELS[c.variant]} | {c.b_t} | x{c.lr_mult:g} | {c.seed} | {r.ppo_minibatch} | {r.informative:.1f} "
            f"| {r.trained:.1f} | {r.sampled:,.0f} | {_f(r.start, '.3f')} -> {_f(r.last, '.3f')} ({_f(r.gain, '+.3f')}) "
            f"| {_slope(r.slope, r.slope_se)} | {_f(1e3 * r.per_1k, '+.3f')} | {_f(r.start_in, '.3f')} -> "
            f"{_f(r.last_in, '.3f')} ({_f(r.gain_in, '+.3f')}) | {_slope(r.slope_in, r.slope_in_se)} "
            f"| {_f(1e3 * r.per_1k_in, '+.3f')} | {_f(r.grad_norm, '.3g')} ({_f(r.clipped, '.0%')}) "
            f"| {_f(r.ppo_kl, '.2e')} | {_f(r.compute_s / 60, '.1f')} min |")
    return "\n".join(lines)


def summary_markdown(means: dict[tuple[str, int, float], CellMean]) -> str:
    ref = means.get(REF)
    lines = [
        "| variant | b_t | lr | seeds | informative groups / step | slope / 100 steps (per seed) | vs GRPO b_t 16 x1 "
        "| lengths 4-6 slope / 100 steps (per seed) | vs GRPO b_t 16 x1 | grad norm | PPO KL |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(means, key=lambda k: (list(VARIANTS).index(k[0]), k[1], k[2])):
        m = means[key]
        seeds = " / ".join(f"{100 * v:+.3f}" for v in m.per_seed)
        seeds_in = " / ".join(f"{100 * v:+.3f}" for v in m.per_seed_in)
        r = _ratio(m.slope, ref.slope) if ref else None
        r_in = _ratio(m.slope_in, ref.slope_in) if ref else None
        lines.append(
            f"| {LABELS[key[0]]} | {key[1]} | x{key[2]:g} | {', '.join(map(str, m.seeds))} | {m.informative:.1f} "
            f"| {_slope(m.slope, m.slope_se)} ({seeds}) | {_f(r, '.2f')} | {_slope(m.slope_in, m.slope_in_se)} "
            f"({seeds_in}) | {_f(r_in, '.2f')} | {_f(m.grad_norm, '.3g')} | {_f(m.ppo_kl, '.2e')} |")
    return "\n".join(lines)


def plot(rows: Sequence[Row], out: Path) -> Path:
    """Slope per 100 steps vs informative groups per step, one marker per run (colour: variant; filled: lr x1,
    hollow: other multiples), all lengths left and the pool's lengths right, with the fits' standard errors."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from pc_pipelines.reports import save_figure

    fig = Figure(figsize=(11, 4.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    colors = {"grpo": "#1f77b4", "grpo-drop0": "#ff7f0e", "pc": "#2ca02c"}
    markers = {1.0: "o", 3.0: "^"}
    for i, (attr, title) in enumerate((("slope", "held-out, digit lengths 1-6"),
                                      ("slope_in", "held-out, the pool's lengths 4-6"))):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.set_title(title)
        ax.set_xlabel("informative groups per step (mean)")
        ax.set_ylabel("accuracy slope per 100 steps")
        ax.grid(True, alpha=0.3)
        ax.axhline(0, color="black", linewidth=0.6)
        seen = set()
        for r in sorted(rows, key=lambda r: _order(r.cell)):
            c, y, e = r.cell, 100 * getattr(r, attr), 100 * getattr(r, attr + "_se")
            label = f"{LABELS[c.variant]}, lr x{c.lr_mult:g}"
            filled = c.lr_mult == 1.0
            ax.errorbar([r.informative], [y], yerr=[0 if math.isnan(e) else e], color=colors[c.variant],
                        marker=markers.get(c.lr_mult, "s"), markersize=6, capsize=2, linestyle="none",
                        markerfacecolor=colors[c.variant] if filled else "white",
                        label=label if label not in seen else f"_{r.run_id}")
            ax.annotate(str(c.b_t), (r.informative, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
            seen.add(label)
        if seen:
            ax.legend(loc="best", fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)


def part_walls(store: Store, jobs: dict[str, list[study.StudyJob]]) -> dict[str, float | None]:
    """Wall seconds of each part as its runs recorded them (bench_study's rule, :func:`part_wall`: the union of the
    spans its runs were running; a kill and resume between does not count)."""
    return {p: part_wall(store, js) for p, js in jobs.items()}


def measured_timing(store: Store, run_ids: Sequence[str]) -> dict[str, float]:
    """What the estimate assumes, as the runs measured it (medians): ``eval_s``, an evaluation after a step (its row's
    time minus the step's write time), and ``start_s``, a run's registration to its first evaluation's end minus one
    evaluation (loading the warm start; the process's imports before registration are not seen). Empty if none."""
    if not Path(store.path).exists():
        return {}
    ids = list(run_ids)
    ev = {(r["run_id"], int(r["step"])): float(r["t"]) for r in store.query(
        "SELECT run_id, step, epoch(max(created_at)) AS t FROM eval_results WHERE list_contains(?, run_id) "
        "GROUP BY run_id, step", [ids])}
    wr = {(r["run_id"], int(r["step"])): float(r["w"]) for r in store.query(
        "SELECT run_id, step, epoch(written_at) AS w FROM steps WHERE list_contains(?, run_id)", [ids])
        if r["w"] is not None}
    created = {r["run_id"]: float(r["c"]) for r in store.query(
        "SELECT run_id, epoch(created_at) AS c FROM runs WHERE list_contains(?, run_id)", [ids])}
    evals = [t - wr[k] for k, t in ev.items() if k[1] >= 1 and k in wr and t >= wr[k]]
    out: dict[str, float] = {}
    if evals:
        out["eval_s"] = statistics.median(evals)
        starts = [t - created[k[0]] - out["eval_s"] for k, t in ev.items() if k[1] == 0 and k[0] in created]
        if starts:
            out["start_s"] = statistics.median(starts)
    return out


def section(rows: Sequence[Row], cmd: str, walls: dict[str, float | None], steps: int, fit_steps: int,
            eval_every: int, base: float, plot_path: Path | None, timing: dict[str, float] | None = None,
            store_path: str = "benchmarks/out/informative.duckdb") -> str:
    means = cell_means(rows)
    wall = ", ".join(f"{p} {w / 60:.1f} min" if w is not None else f"{p} -" for p, w in walls.items())
    timing = timing or {}
    if timing:
        wall += (f" (an evaluation took {timing['eval_s']:.1f} s" + (f", a run's start {timing['start_s']:.0f} s"
                 if "start_s" in timing else "") + ", medians)")
    lines = [
        "## Informative groups per step vs learning per step (`research/informative_diagnostic.py`, issue 30 point 1)",
        "",
        f"Command: `{cmd}`. Machine: {machine()}. Wall time per part (from the runs' step times): {wall}; 2 runs at "
        f"a time, each torch process on 1 thread. Store: `{store_path}`.",
        "",
        f"Setting: the frozen `bench` preset from the shipped warm start, tuning seeds only, {steps} steps a run, "
        f"held-out evaluation every {eval_every} steps (600 prompts x 4 samples at T 0.7). Varied: b_t, the learning "
        f"rate (x1 = the preset's {base:g}) and the variant. The PPO minibatch is b_t / 2 groups for GRPO and PC (2 "
        "Adam updates a step at every b_t, as the preset's 16 / 8) and b_t / 4 for the drop variant (DAPO with "
        "oversample 1 and max_rounds 1: GRPO's b_t prompts x 64, only the groups with reward variance trained, about "
        "2 updates a step). Slopes: least squares of held-out accuracy on the step over the evaluations before step "
        f"{fit_steps} (the one before training included), per 100 steps, +- the fit's standard error (evaluation "
        "noise only); per 1k sampled = slope per step / sampled rollouts per step x 1000, in 1e-3. Lengths 4-6: "
        "the held-out sets of the RL pool's lengths, where training gains (lengths 1-3 can forget). Grad norm: "
        "the trainer's pre-clip gradient norm (TensorBoard `train/grad_norm`, mean over the steps with a nonzero "
        "gradient; in brackets the share of them above `training.grad_clip`, i.e. clipped); PPO KL: TensorBoard `train/ppo_kl` (the policy's move within the step, "
        "~0 on a step's first minibatch); neither is in the store's `steps` table.",
        "",
        "### Per cell (mean over seeds)",
        "",
        summary_markdown(means) if means else "(no runs in the store yet)",
        "",
        "### Mechanical reading (thresholds fixed before the runs; the hand-written reading decides)",
        "",
        "On the slope of the pool's lengths 4-6 (the larger signal):",
        "",
        *(reading(means, "in") if means else ["- (no runs yet)"]),
        "",
        "On the slope of every length (the study's held-out accuracy):",
        "",
        *(reading(means, "all") if means else ["- (no runs yet)"]),
        "",
        "### Per run",
        "",
        table_markdown(rows),
        "",
    ]
    if plot_path is not None:
        lines += [f"![slope vs informative groups per step]({docs_link(plot_path)})", ""]
    return "\n".join(lines)


# ---- command ------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("part", nargs="?", default="all", choices=["all", "run", *PARTS, "report"],
                    help="run: every part's runs in one queue; grpo / drop0 / pc: that part's runs; report: no "
                         "training; all (default): run, then report. Each run part renders the section after.")
    ap.add_argument("--store", default=str(ROOT / "benchmarks/out/informative.duckdb"), help="the diagnostic's store")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/informative-runs"), help="run directories")
    ap.add_argument("--write", default=str(ROOT / "docs/STUDIES.md"), help="the Markdown file ('' = none)")
    ap.add_argument("--img-dir", default=str(ROOT / "docs/img/bench"), help="where --plots writes its PNG")
    ap.add_argument("--plots", action="store_true", help="write the PNG of slope vs informative groups per step")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"steps per run (default {STEPS})")
    ap.add_argument("--fit-steps", type=int, help="fit the slopes over the evaluations before this step (default "
                                                  "--steps)")
    ap.add_argument("--eval-every", type=int, default=EVAL_EVERY, help=f"held-out evaluation cadence ({EVAL_EVERY})")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="seeds (default the tuning seeds)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(GRPO_SIZES), help="GRPO's b_t values")
    ap.add_argument("--lr-mults", type=float, nargs="+", default=list(LR_MULTS), help="multiples of the preset's lr")
    ap.add_argument("--pc-sizes", type=int, nargs="*", default=list(PC_SIZES), help="our PC's b_t values")
    ap.add_argument("--drop0-sizes", type=int, nargs="*", default=list(DROP0_SIZES), help="the drop variant's b_t")
    ap.add_argument("--workers", type=int, default=2, help="runs at a time (default 2: one per core)")
    ap.add_argument("--cache-dir", help="the base policy cache (default: the shipped warm start)")
    ap.add_argument("--dry-run", action="store_true", help="print the planned runs and the time estimate, run nothing")
    ap.add_argument("--smoke", action="store_true", help="2 steps at b_t 4, one seed, lr x1, every variant, into a "
                                                         "temporary store; prints the section, writes no docs")
    ap.add_argument("--smoke-dir", help="--smoke: keep its store and runs here (default: a temporary directory, "
                                        "deleted after)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    tmp = None
    if args.smoke:
        tmp = Path(args.smoke_dir) if args.smoke_dir else Path(tempfile.mkdtemp(prefix="informative-smoke-"))
        tmp.mkdir(parents=True, exist_ok=True)
        args.store, args.out = str(tmp / "smoke.duckdb"), str(tmp / "runs")
        args.write, args.img_dir, args.plots = str(tmp / "STUDIES.md"), str(tmp / "img"), True
        args.steps, args.eval_every, args.seeds, args.lr_mults = 2, 1, [SEEDS[0]], [1.0]
        args.sizes, args.pc_sizes, args.drop0_sizes = [4], [4], [4]
    base = base_lr()
    parts = tuple(PARTS) if args.part in ("all", "run", "report") else (args.part,)
    cells = grid(args.seeds, args.sizes, args.lr_mults, args.pc_sizes, args.drop0_sizes, parts)
    all_cells = grid(args.seeds, args.sizes, args.lr_mults, args.pc_sizes, args.drop0_sizes)
    jobs = [c.job(args.steps, base, args.eval_every) for c in cells]
    store = Store(args.store)
    if args.dry_run:
        print(plan_text(cells, args.steps, args.eval_every, base, args.workers,
                        store if Path(args.store).exists() else None))
        return 0
    t0 = time.monotonic()
    try:
        if args.part != "report":
            print(plan_text(cells, args.steps, args.eval_every, base, args.workers,
                            store if Path(args.store).exists() else None), flush=True)
            study.run_jobs(jobs, store, args.out, workers=args.workers, cache_dir=args.cache_dir,
                           show_progress=not args.quiet)
        fit = args.fit_steps or args.steps
        rows = rows_from_store(store, all_cells, args.steps, fit, out_dir=Path(args.out))
        part_jobs = {p: [c.job(args.steps, base, args.eval_every) for c in all_cells if c.variant in PARTS[p]]
                     for p in PARTS}
        walls = part_walls(store, {p: js for p, js in part_jobs.items() if js})
        png = plot(rows, Path(args.img_dir) / "informative_slope_vs_groups.png") if args.plots and rows else None
        cmd = (f"python research/informative_diagnostic.py --steps {args.steps} --seeds "
               f"{' '.join(map(str, args.seeds))}" + (" --plots" if args.plots else "")
               + (f" --fit-steps {args.fit_steps}" if args.fit_steps else ""))
        if args.smoke:
            cmd = "python research/informative_diagnostic.py --smoke"
        timing = measured_timing(store, [r.run_id for r in rows])
        shown = Path(args.store).resolve()
        shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
        body = section(rows, cmd, walls, args.steps, fit, args.eval_every, base, png, timing, str(shown))
        print(body)
        if args.write:
            write_section(Path(args.write), MARKER, body, STUDIES_HEADER)
        if args.smoke:
            print(f"smoke: {len(rows)} runs reported in {time.monotonic() - t0:.0f} s wall; store {args.store}")
            if not rows or len(rows) != len(cells):
                print("smoke: FAILED, not every run reached the report", file=sys.stderr)
                return 1
    finally:
        if tmp is not None and not args.smoke_dir:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
