"""A budget planner (issue 44 point 3, first version): from the first steps of runs in a store, fit the simulator
(:mod:`.fit`: the pass-rate mix and the ``fitted`` law), then simulate candidate budgets (GRPO at several group
sizes, PC at several pilot / commit sizes) and rank them by predicted sampled rollouts to a common target: the
lowest smoothed peak among the candidates (the tuning rule of the studies), per seed, the median over seeds.

How far to trust it is what docs/STUDIES.md's "The simulator's fitted law against the measured benchmark" measured:
the order of the methods, not their ratios within 25%, and group sizes outside those the fitted runs trained are an
extrapolation. Not yet: an interval from refitting on resampled steps, a plot, a Dagster asset.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..config import resolve
from ..errors import ConfigError, brief
from ..store.rollouts_to_target import first_reaching
from .fit import RunObservations, fit_simulator
from .model import Simulation

SMOOTH = 3
"""Evaluations in the trailing mean of a curve (the studies' smoothing)."""


@dataclass(frozen=True)
class Candidate:
    name: str
    method: str
    overrides: tuple[tuple[str, object], ...]  # ("allocator.n", 16), ...

    def set_flags(self) -> list[str]:
        out = []
        for k, v in self.overrides:
            out += ["--set", f"{k}={v}"]
        return out


def default_candidates() -> list[Candidate]:
    """GRPO at n in {8, 16, 32, 64}; PC with pilots 8 in waves of 2 or 16 in waves of 4, commits of mean 8 or 16."""
    out = [Candidate(f"GRPO n={n}", "grpo", (("allocator.n", n),)) for n in (8, 16, 32, 64)]
    for pilot, wave in ((8, 2), (16, 4)):
        for commit in (8, 16):
            out.append(Candidate(f"PC p{wave}+{pilot - wave}/c{commit}", "pc",
                                 (("allocator.n_pilot", pilot), ("allocator.pilot_wave", wave),
                                  ("allocator.commit_mean", commit))))
    return out


def first_steps(run: RunObservations, steps: int) -> RunObservations:
    """``run`` as it stood after its first ``steps`` steps (its groups, evaluations and first visits before them)."""
    g = run.group_step < steps
    e = run.eval_step < steps
    f = run.first_step < steps
    return replace(run, steps=min(steps, run.steps), group_step=run.group_step[g], group_sigma=run.group_sigma[g],
                   group_size=run.group_size[g], eval_step=run.eval_step[e], eval_accuracy=run.eval_accuracy[e],
                   first_step=run.first_step[f], first_n=run.first_n[f], first_correct=run.first_correct[f])


@dataclass(frozen=True)
class PlanRow:
    candidate: Candidate
    sampled_per_step: float
    rollouts_to_target: float | None  # median over seeds; None: never reached on most seeds
    reached: int  # seeds on which it reached the target


def simulate_curve(preset: str, cand: Candidate, sim_fields: dict, seed: int, steps: int,
                   eval_every: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(cumulative sampled at each evaluation, smoothed accuracy, sampled per step) of one candidate on one seed."""
    over = {k: v for k, v in cand.overrides}
    over.update({f"sim.{k}": v for k, v in sim_fields.items()})
    cfg = resolve(preset, overrides=over, method=cand.method, seed=seed)
    sim = Simulation(cfg.allocator, cfg.sim)
    rollouts, acc = [0], [sim.population.accuracy()]
    for st in sim.run(steps):
        if (st.outcome.step + 1) % eval_every == 0:
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


def plan(runs: Sequence[RunObservations], preset: str, fit_steps: int, horizon: int, seeds: Sequence[int],
         candidates: Sequence[Candidate] | None = None) -> tuple[dict, list[PlanRow]]:
    """Fit on the first ``fit_steps`` steps of ``runs``, then :func:`rank` the candidates over ``horizon`` steps.

    A run with fewer than ``fit_steps`` steps is refused (ConfigError), naming its steps and the fix."""
    short = [r for r in runs if r.steps < fit_steps]
    if short:
        r = min(short, key=lambda x: x.steps)
        raise ConfigError(f"--fit-steps {fit_steps}: run {brief(r.run_id)} has only {r.steps} steps. "
                          f"Fix: pass --fit-steps {max(r.steps, 1)} or less, or leave that run out (--runs).")
    fit = fit_simulator([first_steps(r, fit_steps) for r in runs], mix_steps=fit_steps)
    return fit.to_dict(), rank(preset, fit.sim, candidates or default_candidates(), seeds, horizon)
