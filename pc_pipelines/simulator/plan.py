"""The budget planner (issue 44 point 3): from the first steps of runs in a store, fit the simulator (:mod:`.fit`:
the pass-rate mix and the ``fitted`` law), then simulate candidate budgets (GRPO at several group sizes, PC at
several pilot / commit sizes) and rank them by predicted sampled rollouts to a common target: the lowest smoothed
peak among the candidates (the tuning rule of the studies), per seed, the median over seeds. The screening predictor
(the history prior, issue 42) is a candidate too, with the rule its study tuned (:data:`HISTORY_PRIOR`).

**The interval** (``resamples`` B > 0). The fit is repeated on B bootstrap replicates of the runs' first steps
(:func:`resample_steps`: whole steps drawn with replacement, each bringing the groups it trained and the first
visits it made; the evaluations stay where they were measured), keeping the law form the full fit chose; each
replicate's simulator ranks every candidate on one seed (replicate b on ``seeds[b % len(seeds)]``). A row's interval
is the 10th-90th percentile of its rollouts to target over the replicates, and "first in k/B" counts the replicates
it won (a tie counts for each tied budget: GRPO n = 8 with and without the prior often reach the target at the same
step): the fit's uncertainty and the simulation's seed noise together, not the law's error (that is what
docs/STUDIES.md's "The simulator's fitted law against the measured benchmark" measured: the order of the methods,
not their ratios within 25%; group sizes outside those the fitted runs trained are an extrapolation).

**Indistinguishable budgets** (issue 57 point 3). A budget whose interval overlaps the best one's is not ranked
against it: its row says ``indistinguishable`` (``vs best``), and :meth:`Plan.verdict_line` names them all, so a
user picks among them by what else matters (sampled rollouts a step, wall time) instead of by the order of points
the data cannot tell apart. Without intervals (``resamples`` 0) the rows say ``-`` and the line says how to get them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..config import resolve
from ..errors import ConfigError, brief
from ..steps import step_number
from ..store import Store, StoreError
from ..store.names import shown_path
from ..store.rollouts_to_target import first_reaching
from .fit import RunObservations, fit_simulator, read_runs
from .model import Simulation

SMOOTH = 3
"""Evaluations in the trailing mean of a curve (the studies' smoothing)."""

SEEDS: tuple[int, ...] = tuple(range(1000, 1016))
"""Simulated seeds of the point predictions (``plan --seeds``, the budget_plan asset's ``seeds``). Sixteen: one
seed's simulated rollouts to target spread by +-30% or more around the median, so with three (the default until
2026-11-30) the median's Monte Carlo error was as large as the gaps being ranked, and the pick flipped between seed
sets on both validated pools (research/planner_validation.py); with 16 it is about a third of one seed's spread.
Budgets closer than that (the small-groups study's fresh pair, 3% apart over 48 seeds) still trade places between
seed sets: their intervals overlap, and the verdict says they are indistinguishable."""

RESAMPLES = 8
"""Refits on resampled steps for the 10-90% intervals (``plan --resamples``, the asset's ``resamples``)."""


@dataclass(frozen=True)
class Candidate:
    name: str
    method: str
    overrides: tuple[tuple[str, object], ...]  # ("allocator.n", 16), ...

    def set_flags(self) -> list[str]:
        out = []
        for k, v in self.overrides:
            out += ["--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
        return out


HISTORY_PRIOR: tuple[tuple[str, object], ...] = (
    ("allocator.screen_strategy", "posterior"), ("allocator.screen_max_skips", 0), ("allocator.screen_max_unseen", 8),
    ("allocator.screen_draw_cap", 0), ("allocator.screen_explore", 0.0), ("allocator.screen_prior_strength", 0.3),
    ("allocator.screen_min_evidence", 4.0), ("allocator.screen_discount", 0.95), ("allocator.screen_threshold", 0.1))
"""The history prior as issue 42's study tuned it on the benchmark (its candidate A, research/prior_study.py; a test
keeps the two equal). The package's defaults rarely fire at the benchmark's scale (16 rollouts of evidence)."""
PC_PRIOR: tuple[tuple[str, object], ...] = (("allocator.screen_early_wave", True), ("allocator.evict", False))
"""PC's part of that rule: first waves decided with the posterior, strict eviction off."""


def default_candidates() -> list[Candidate]:
    """GRPO at n in {8, 16, 32, 64}; PC with sequential pilots of 8 in waves of 2 or 16 in waves of 4, commits of mean
    8 or 16; GRPO n = 8 and PC p2+6/c8 with the history prior (:data:`HISTORY_PRIOR`)."""
    out = [Candidate(f"GRPO n={n}", "grpo", (("allocator.n", n),)) for n in (8, 16, 32, 64)]
    for pilot, wave in ((8, 2), (16, 4)):
        for commit in (8, 16):
            out.append(Candidate(f"PC p{wave}+{pilot - wave}/c{commit}", "pc",
                                 (("allocator.pilot_strategy", "sequential"), ("allocator.n_pilot", pilot),
                                  ("allocator.pilot_wave", wave), ("allocator.commit_mean", commit))))
    out.append(Candidate("GRPO n=8 + prior", "grpo", (*out[0].overrides, *HISTORY_PRIOR)))
    out.append(Candidate("PC p2+6/c8 + prior", "pc", (*out[4].overrides, *HISTORY_PRIOR, *PC_PRIOR)))
    return out


_PLANNABLE_SQL = """
SELECT r.run_id FROM runs r
WHERE (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id) >= $steps
  AND EXISTS (SELECT 1 FROM eval_results e WHERE e.run_id = r.run_id AND e.step = 0)
  AND EXISTS (SELECT 1 FROM eval_results e WHERE e.run_id = r.run_id AND e.step BETWEEN 1 AND $steps)
  AND ($family IS NULL OR r.family = $family)
ORDER BY r.seq, r.run_id"""


def plannable_runs(store: Store, fit_steps: int, family: str | None = None) -> list[str]:
    """The runs (of ``family``, or all) a plan can fit on their first ``fit_steps`` steps: at least that many steps,
    an evaluation before training and one within them; registration order. None: StoreError with the fix."""
    found = [r["run_id"] for r in store.query(_PLANNABLE_SQL, {"steps": fit_steps, "family": family})]
    if found:
        return found
    longest = store.query("SELECT max(k) AS k FROM (SELECT count(*) AS k FROM steps s JOIN runs r USING (run_id) "
                          "WHERE $family IS NULL OR r.family = $family GROUP BY run_id)", {"family": family})
    k = int(longest[0]["k"] or 0) if longest else 0
    which = "" if family is None else f" of family {brief(family)}"
    raise StoreError(f"no run{which} in {shown_path(store.path)} has {fit_steps} steps with an evaluation before "
                     f"training and one within them (the longest has {k} steps). Fix: "
                     + (f"fit on fewer steps (fit_steps {k} or less, with an evaluation within them), or " if k else "")
                     + "train a run with evaluations (training.eval_every) first.")


def first_steps(run: RunObservations, steps: int) -> RunObservations:
    """``run`` as it stood after its first ``steps`` steps (its groups, evaluations and first visits before them)."""
    g = run.group_step < steps
    e = run.eval_step < steps
    f = run.first_step < steps
    return replace(run, steps=min(steps, run.steps), group_step=run.group_step[g], group_sigma=run.group_sigma[g],
                   group_size=run.group_size[g], eval_step=run.eval_step[e], eval_accuracy=run.eval_accuracy[e],
                   first_step=run.first_step[f], first_n=run.first_n[f], first_correct=run.first_correct[f])


def resample_steps(run: RunObservations, rng: np.random.Generator) -> RunObservations:
    """A bootstrap replicate of ``run``: ``run.steps`` steps drawn with replacement, step j of the replicate bringing
    the trained groups and first visits of the step it drew (relabelled j); the evaluations are kept as measured."""
    draw = rng.integers(0, run.steps, run.steps)

    def pick(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (rows of the drawn steps, their new steps)
        order = np.argsort(step, kind="stable")
        lo = np.searchsorted(step[order], draw, "left")
        hi = np.searchsorted(step[order], draw, "right")
        rows = np.concatenate([order[a:b] for a, b in zip(lo.tolist(), hi.tolist())] or [np.zeros(0, np.int64)])
        return rows.astype(np.int64), np.repeat(np.arange(run.steps, dtype=np.int64), hi - lo)

    g, gs = pick(run.group_step)
    f, fs = pick(run.first_step)
    return replace(run, group_step=gs, group_sigma=run.group_sigma[g], group_size=run.group_size[g],
                   first_step=fs, first_n=run.first_n[f], first_correct=run.first_correct[f])


@dataclass(frozen=True)
class PlanRow:
    candidate: Candidate
    sampled_per_step: float
    rollouts_to_target: float | None  # median over seeds; None: never reached on most seeds
    reached: int  # seeds on which it reached the target
    low: float | None = None  # 10th / 90th percentile over the resampled fits (None: reached in under half of them)
    high: float | None = None
    first: int = 0  # resampled fits that ranked it first (ties included)


def simulate_curve(preset: str, cand: Candidate, sim_fields: dict, seed: int, steps: int,
                   eval_every: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(cumulative sampled at each evaluation, smoothed accuracy, sampled per step) of one candidate on one seed."""
    over = {k: v for k, v in cand.overrides}
    over.update({f"sim.{k}": v for k, v in sim_fields.items()})
    cfg = resolve(preset, overrides=over, method=cand.method, seed=seed)
    sim = Simulation(cfg.allocator, cfg.sim)
    rollouts, acc = [0], [sim.population.accuracy()]
    for st in sim.run(steps):
        if step_number(st.outcome.step) % eval_every == 0:
            rollouts.append(st.cumulative_sampled)
            acc.append(st.accuracy)
    a = np.asarray(acc)
    smooth = np.array([a[max(0, i - SMOOTH + 1):i + 1].mean() for i in range(a.size)])
    return np.asarray(rollouts), smooth, sim.cumulative_sampled / steps


def rank(preset: str, sim_fields: dict, candidates: Sequence[Candidate], seeds: Sequence[int], steps: int,
         eval_every: int = 10) -> list[PlanRow]:
    """Every candidate simulated on ``seeds``, ranked by median rollouts to the per-seed common target."""
    curves = {(c.name, s): simulate_curve(preset, c, sim_fields, s, steps, eval_every) for c in candidates
              for s in seeds}
    targets = {s: min(float(curves[(c.name, s)][1].max()) for c in candidates) for s in seeds}
    rows = []
    for c in candidates:
        costs = [first_reaching(curves[(c.name, s)][0], curves[(c.name, s)][1], targets[s]) for s in seeds]
        present = [x for x in costs if x is not None]
        rows.append(PlanRow(c, float(np.mean([curves[(c.name, s)][2] for s in seeds])),
                            statistics.median(present) if 2 * len(present) > len(seeds) else None, len(present)))
    return sorted(rows, key=lambda r: (r.rollouts_to_target is None, r.rollouts_to_target or 0.0))


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` found: the ranked rows, the fit (``SimFit.to_dict()``) and how it was made."""

    runs: tuple[str, ...]
    preset: str
    fit_steps: int
    horizon: int
    seeds: tuple[int, ...]
    resamples: int
    fit: dict
    rows: list[PlanRow] = field(default_factory=list)

    @property
    def best(self) -> Candidate:
        return self.rows[0].candidate

    def train_args(self) -> list[str]:
        """The ``pilot-commit`` arguments that train the best budget (``train --preset ... --set ...``)."""
        return ["train", "--preset", self.preset, "--method", self.best.method, *self.best.set_flags()]

    def header(self) -> str:
        return (f"plan: fitted on the first {self.fit_steps} steps of {len(self.runs)} run(s) ({self.fit['chosen_form']} "
                f"law); preset {self.preset}, {self.horizon} steps, {_seed_list(self.seeds)}; target = "
                f"the lowest smoothed peak; interval: 10-90% over {self.resamples} refits on resampled steps")

    def verdict(self, row: PlanRow) -> str:
        """``row`` against the best (the first row): ``best``; ``indistinguishable`` when both have a 10-90% interval
        and the two overlap; ``worse`` when they do not; ``never`` when it did not reach the target on most seeds;
        ``-`` when there is nothing to compare (no interval: ``resamples`` 0, or reached in under half the refits)."""
        best = self.rows[0]
        if row is best:
            return "best"
        if row.rollouts_to_target is None:
            return "never"
        if None in (row.low, row.high, best.low, best.high):
            return "-"
        return "indistinguishable" if row.low <= best.high and best.low <= row.high else "worse"

    def indistinguishable(self) -> list[Candidate]:
        """The budgets the fit cannot rank against the best (their intervals overlap its), in rank order."""
        return [r.candidate for r in self.rows[1:] if self.verdict(r) == "indistinguishable"]

    def verdict_line(self) -> str:
        """One line on what the ranking can be trusted for: which budgets are indistinguishable from the best."""
        best = self.rows[0]
        if self.resamples == 0 or best.low is None:
            why = "no refits (--resamples 0)" if self.resamples == 0 else "the best reached the target in under half the refits"
            return (f"ranking: one fit's order, with no interval ({why}), so it cannot say which budgets the data tell "
                    "apart. Fix: run with --resamples 20 (the budget_plan asset's resamples) for the 10-90% intervals.")
        tied = self.indistinguishable()
        if not tied:
            return (f"ranking: {best.candidate.name} is ahead of every other budget beyond the 10-90% intervals of "
                    f"{self.resamples} refits.")
        names = ", ".join(c.name for c in tied)
        return (f"ranking: indistinguishable from {best.candidate.name} (their 10-90% intervals overlap its): {names}. "
                "The data do not rank these: choose among them by sampled rollouts a step (or wall time), or refit on "
                "more steps to narrow the intervals.")

    def table(self) -> str:
        """The ranked rows as fixed-width text (what ``pilot-commit plan`` prints)."""
        lines = [f"{'rank':>4} {'budget':<18} {'sampled/step':>12} {'rollouts to target':>18} {'10-90%':>17} "
                 f"{'first in':>8} {'seeds':>5}  vs best"]
        for i, r in enumerate(self.rows, 1):
            lines.append(f"{i:>4} {r.candidate.name:<18} {r.sampled_per_step:>12,.0f} {_num(r.rollouts_to_target):>18} "
                         f"{_interval(r):>17} {f'{r.first}/{self.resamples}':>8} {f'{r.reached}/{len(self.seeds)}':>5}  "
                         f"{self.verdict(r)}")
        return "\n".join(lines)

    def records(self) -> list[dict]:
        """One dict per row, ranked (the Dagster asset's table and JSON)."""
        return [{"rank": i, "budget": r.candidate.name, "method": r.candidate.method,
                 "sampled_per_step": round(r.sampled_per_step, 1), "rollouts_to_target": r.rollouts_to_target,
                 "low": r.low, "high": r.high, "first": r.first, "resamples": self.resamples,
                 "reached": r.reached, "seeds": len(self.seeds), "vs_best": self.verdict(r)}
                for i, r in enumerate(self.rows, 1)]


def _seed_list(seeds: Sequence[int]) -> str:
    """``seeds 1000-1015 (16)`` for a run of consecutive seeds, else every seed."""
    s = list(seeds)
    if len(s) > 2 and s == list(range(s[0], s[0] + len(s))):
        return f"seeds {s[0]}-{s[-1]} ({len(s)})"
    return f"seed{'s' if len(s) > 1 else ''} {' '.join(map(str, s))}"


def _num(v: float | None) -> str:
    return "never" if v is None else f"{v:,.0f}"


def _interval(r: PlanRow) -> str:
    return "-" if r.low is None or r.high is None else f"{r.low:,.0f}-{r.high:,.0f}"


def plan(runs: Sequence[RunObservations], preset: str, fit_steps: int, horizon: int, seeds: Sequence[int],
         candidates: Sequence[Candidate] | None = None, resamples: int = 0, resample_seed: int = 0,
         progress: Callable[[str], None] | None = None) -> Plan:
    """Fit on the first ``fit_steps`` steps of ``runs``, :func:`rank` the candidates over ``horizon`` steps, and
    with ``resamples`` > 0 refit on that many bootstrap replicates for each row's interval (module docstring).

    A run with fewer than ``fit_steps`` steps is refused (ConfigError), naming its steps and the fix."""
    short = [r for r in runs if r.steps < fit_steps]
    if short:
        r = min(short, key=lambda x: x.steps)
        raise ConfigError(f"fit steps {fit_steps}: run {brief(r.run_id)} has only {r.steps} steps. Fix: fit on "
                          f"{max(r.steps, 1)} steps or fewer (`plan --fit-steps`, the budget_plan asset's fit_steps), "
                          "or leave that run out.")
    say = progress or (lambda _msg: None)
    cands = list(candidates or default_candidates())
    cut = [first_steps(r, fit_steps) for r in runs]
    fit = fit_simulator(cut, mix_steps=fit_steps)
    say(f"fitted the {fit.chosen} law; simulating {len(cands)} budgets on {len(seeds)} seed(s)")
    rows = rank(preset, fit.sim, cands, seeds, horizon)
    costs: dict[str, list[float]] = {c.name: [] for c in cands}
    firsts: dict[str, int] = {c.name: 0 for c in cands}
    rng = np.random.default_rng(resample_seed)
    for b in range(resamples):
        refit = fit_simulator([resample_steps(r, rng) for r in cut], mix_steps=fit_steps, forms=(fit.chosen,),
                              terms=None, fixed_terms=fit.kept_terms)
        rep = rank(preset, refit.sim, cands, [seeds[b % len(seeds)]], horizon)
        best = [r.candidate.name for r in rep if r.rollouts_to_target == rep[0].rollouts_to_target]  # ties: all
        for name in best:
            firsts[name] += 1
        for r in rep:
            if r.rollouts_to_target is not None:
                costs[r.candidate.name].append(r.rollouts_to_target)
        say(f"resampled fit {b + 1}/{resamples}: {' = '.join(best)} first")
    out = []
    for r in rows:
        c = costs[r.candidate.name]
        if resamples and 2 * len(c) > resamples:  # reached in most replicates: an interval
            r = replace(r, low=float(np.percentile(c, 10)), high=float(np.percentile(c, 90)))
        out.append(replace(r, first=firsts[r.candidate.name]))
    return Plan(runs=tuple(r.run_id for r in runs), preset=preset, fit_steps=fit_steps, horizon=horizon,
                seeds=tuple(seeds), resamples=resamples, fit=fit.to_dict(), rows=out)


@dataclass(frozen=True)
class Validation:
    """What research/planner_validation.py measured of the planner on one study's real runs (docs/STUDIES.md,
    ``planner-validation``), copied here by hand when it is rerun: the package never imports research/."""

    study: str
    held_out_regret: float  # median over folds: measured cost of the pick / of the best (leave one config out)
    fresh_regret: float  # the same on fresh seeds
    covered: int  # measured medians inside their 10-90% interval, over the held-out and fresh-seed validations
    intervals: int
    caveat: str = ""  # what the numbers do not show, in words
    results: str = ""  # the committed results file these numbers come from (a test keeps them equal)
    fresh_seeds: int = 0  # how many fresh seeds measured fresh_regret (0: not stated)


VALIDATIONS: tuple[Validation, ...] = (
    Validation(
        study="the small-groups study on `bench` (GRPO-4, 12 PC budgets)", held_out_regret=1.03, fresh_regret=1.16,
        covered=14, intervals=17, fresh_seeds=8,
        caveat="on the first 5 of those fresh seeds 1.28x: its pick (PC with the history prior) and the best "
               "(GRPO-4) had overlapping intervals, so plan called them indistinguishable, and the tuning seeds' own "
               "measured pick was the same; 11 of the 17 intervals never close, so they cover by width",
        results="research/planner_validation_s52.json"),
    Validation(
        study="the paper-like pool `bench-paper` (GRPO n 2-64, 7 PC budgets)", held_out_regret=1.14,
        fresh_regret=1.00, covered=12, intervals=17, fresh_seeds=8,
        caveat="held out it picks groups of 2, which it predicts too cheap; fitted on the first sixth of the budget "
               "it predicted nothing reaching a target near the plateau",
        results="research/planner_validation_pr57.json"),
)


def _one(v: Validation) -> str:
    return (f"on {v.study}: median regret {v.held_out_regret:.2f}x on held-out configurations and "
            f"{v.fresh_regret:.2f}x on {f'{v.fresh_seeds} ' if v.fresh_seeds else ''}fresh seeds, 10-90% intervals covered {v.covered} of {v.intervals} measured "
            "medians"
            + (f"; {v.caveat}" if v.caveat else ""))


def trust_line(validations: Validation | Sequence[Validation] = VALIDATIONS) -> str:
    """How far to trust a plan, in words a user can act on (``pilot-commit plan``'s footer, the budget_plan asset)."""
    vs = (validations,) if isinstance(validations, Validation) else tuple(validations)
    return ("validated (regret: measured rollouts to target of the planner's pick / of the best) "
            + "; and ".join(_one(v) for v in vs) + " (docs/STUDIES.md, planner-validation). Where "
            "intervals overlap, the candidates are indistinguishable; outside the validated group sizes and methods, "
            "the ranking is an extrapolation")


TRUST = trust_line()
"""Where the planner's accuracy was measured (``pilot-commit plan`` and the ``budget_plan`` asset say it)."""


def plan_store_runs(store: Store, run_ids: Sequence[str], preset: str | None, fit_steps: int, horizon: int,
                    seeds: Sequence[int], resamples: int = 0, progress: Callable[[str], None] | None = None) -> Plan:
    """The planner's use case over a store (``pilot-commit plan``, the ``budget_plan`` asset): read ``run_ids``
    (:func:`~.fit.read_runs`) and :func:`plan` with ``preset``, by default the first run's (else ``bench``)."""
    runs = read_runs(store, run_ids)
    return plan(runs, preset or runs[0].preset or "bench", fit_steps, horizon, seeds, resamples=resamples,
                progress=progress)


def write_plan_plot(p: Plan, path: str | Path, store: Store) -> Path:
    """:func:`plan_figure` as a PNG at ``path`` (its folder created; never over what ``store`` reads:
    :class:`~pc_pipelines.durable.OutputRefused`); returns ``path``."""
    from ..reports.plots import save_figure

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return save_figure(plan_figure(p), path, store.own_paths())


def plan_figure(p: Plan):
    """The ranked budgets as points with their intervals (rollouts to target), one row each, coloured by method."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import StrMethodFormatter

    from ..reports.style import method_color

    rows = [r for r in p.rows if r.rollouts_to_target is not None]
    fig = Figure(figsize=(8.0, 0.45 * max(len(p.rows), 2) + 1.6), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for y, r in enumerate(rows):
        x = r.rollouts_to_target
        err = None if r.low is None else [[max(x - r.low, 0.0)], [max(r.high - x, 0.0)]]
        ax.errorbar([x], [y], xerr=err, fmt="o", color=method_color(r.candidate.method), capsize=4, markersize=6)
        ax.annotate(f"first in {r.first}/{p.resamples}" if r.first else "", (x, y), textcoords="offset points",
                    xytext=(8, 6), fontsize=8, color="0.3")
    ax.set_yticks(range(len(rows)), [r.candidate.name for r in rows])
    ax.invert_yaxis()  # the best on top
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_xlabel("predicted sampled rollouts to the common target (point: all steps; bar: 10-90% of refits)")
    ax.grid(True, axis="x", alpha=0.3)
    never = [r.candidate.name for r in p.rows if r.rollouts_to_target is None]
    ax.set_title(f"pilot-commit plan: {len(p.runs)} run(s), first {p.fit_steps} steps, preset {p.preset}"
                 + (f"; never reached: {', '.join(never)}" if never else ""), fontsize=10)
    return fig
