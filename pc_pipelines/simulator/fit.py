"""Fit the simulator to real runs: the initial pass-rate mix from a run's first visits, the held-out mix from its
first evaluation, and the ``fitted`` learning law (:mod:`.model`) from what each step trained against the held-out
accuracy it measured. Numpy only; the store is read once, by :func:`read_runs`, and every fit takes arrays.

**The pass-rate mix** (:func:`fit_mix`). Each prompt's first visit in a run (its first pilot wave or full group, within
the first ``mix_steps`` steps: the policy has barely moved) gives ``k`` correct of ``n``. The difficulty logit is
a Normal (one component) or a mix of two; the marginal likelihood of ``k`` integrates the binomial over it by
Gauss-Hermite quadrature, maximized by Nelder-Mead. Both are fitted; the two-component mix is kept only when it lowers
the AIC by more than 10 (the data ask for it), and the fit reports the observed and the predicted share of each
``k`` (the residuals).

**The held-out mix** (:func:`fit_eval_mix`). The benchmark's held-out accuracy is the mean over benchmarks
(lengths) of very different difficulty; the fit takes their spread as the std of the benchmarks' logits at the first
evaluation (before training), and the mean so that ``mean sigmoid(e_j)`` is that evaluation's accuracy.

**The learning law** (:func:`fit_law`). Skill after step t is the sum of the law's gains over the run's measured
trained groups (reward std and size of each group, from ``pass_rate_history``): no simulation is needed, the fit
replays what the run trained. Predicted accuracy ``mean_j sigmoid(s + e_j)`` over the held-out mix is compared to
every measured evaluation of every fitted run; least squares over the law's parameters (Nelder-Mead on logs).
Three forms are fitted on the same data and compared by their residual sum of squares and AIC:

* ``linear``: the hand-set law's form, ``gain = rate * sum(sigma)``;
* ``snr-1``: the normalized-step law with noise variance ``v / n`` per group (independent rollouts);
* ``snr``: the same with ``v / n**gamma``, gamma free.

Why this form, from the data (the benchmark's tuning seeds, ``research/sim_fit_tuning.json``): GRPO at n = 2, 4,
8 and 16 (1.2, 2.1, 3.4 and 4.7 informative groups a step) and our PC (16 a step, groups of 16) were fitted together.
The linear form cannot tell a group of 2 from a group of 16 with the same reward std and fits worst; ``snr`` (gamma
free, 1.9) beats ``snr-1`` by 47 in AIC and ``linear`` by 62. Its noise scale v goes to its bound (exp(15)): the data
put every measured step in the law's noise-dominated limit, where the gain is ``law_rate / sqrt(v) * S / sqrt(sum
sigma_i^2 / n_i^gamma)`` (for k alike groups ``~ sqrt(k) * n^(gamma / 2)``): sublinear in informative groups, as the
diagnostic in docs/STUDIES.md found, but not flat above ~7 a step; the flattening the curves show comes from the skill
cap (gains fade as skill nears ``law_skill_cap``), not from the signal term. Only ``law_rate / sqrt(v)`` is
identified there; a noise floor c is not identified by group sizes 2-16 (fitted free, it changes the SSE by < 1e-4),
so it stays 0 and group sizes above 16 are an extrapolation (:attr:`LawFit.at_bound` names parameters at a bound).

**Terms beyond the form** (issue 57), added by forward selection on the chosen form (:func:`select_terms`), each kept
only when the data support it: a round fits the chosen law with each remaining term added (from the kept fit's
optimum and a few starts where the term acts) and keeps the one that lowers the AIC most, **if by more than
AIC_MARGIN (10)**, the form's criterion; it stops when no term does. The terms (SimConfig fields, applied alike by
the simulator): ``law_cap_pc`` and ``law_cap_prior``, multipliers of the skill cap for PC runs and for runs with the
history prior (``allocator.screen_strategy=posterior``, read from the run's stored config), tried only when the runs
hold both sides; ``law_noise_floor`` free (``snr`` forms); ``law_gain_max``, the update's saturation ``g / (1 +
g / law_gain_max)`` of a step's mean gain. Under ``snr`` the normalized step is itself a saturation, so
``law_gain_max`` is there nearly a rescaling of the rate and v and the criterion rarely keeps it; under ``linear`` it
is what bends the gain. On the small-groups study's 26 tuning runs (GRPO-4 and 12 PC budgets on seeds 100-101,
research/planner_validation.py) the form is ``snr-1`` with v at its bound (noise-dominated), and forward selection
keeps ``law_cap_pc`` (AIC lower by 38: PC's plateau 1.9x GRPO's cap of 0.45 logits); ``law_cap_prior`` (9.3 more)
and the floor (7.4) fall under the margin, ``law_gain_max`` changes nothing. What the terms buy as a decision tool
(regret, rank correlation, interval coverage): docs/STUDIES.md, ``planner-validation``.
The step noise (``law_step_noise``) and the evaluation noise are then estimated by moments from the residuals: a
random walk in skill makes residuals of the same run correlated (their covariance grows with the summed per-step
noise share ``V / (S^2 + V)``); evaluation noise does not.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import brief, shell_command, sql_string
from ..store import Store, StoreError
from ..store.names import shown_path
from .model import cap_factor, saturate, signal_share

_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(64)
_GH_W = _GH_W / _GH_W.sum()  # expectation over a standard Normal
_LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, 4097)))])

AIC_MARGIN = 10.0
"""A richer form (two mix components, a free gamma) is kept only when it lowers the AIC by more than this."""


# ---- reading the store --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunObservations:
    """What the fits need of one run, as arrays."""

    run_id: str
    method: str
    seed: int
    steps: int
    group_step: np.ndarray  # per trained group: its step
    group_sigma: np.ndarray  # its reward std (population std of its rewards)
    group_size: np.ndarray  # its rollouts
    eval_step: np.ndarray  # step indices of the evaluations (stored step - 1: -1 = before training)
    eval_accuracy: np.ndarray  # mean over the run's benchmarks
    first_step: np.ndarray  # per prompt: the step of its first visit
    first_n: np.ndarray  # rollouts of that visit
    first_correct: np.ndarray  # correct among them
    benchmark_start: dict[str, float] = field(default_factory=dict)  # accuracy per benchmark before training
    sampled_per_step: float = 0.0
    num_prompts: int = 0  # the training pool (task.num_prompts, else sim.num_prompts)
    preset: str = ""  # the run's preset
    screen_strategy: str = "none"  # allocator.screen_strategy of the run's config (posterior: the history prior)


_GROUPS_SQL = """
SELECT o.step, o.prompt_id, max(o.n + coalesce(k.evidence_n, 0)) AS n,
       max(o.n_correct + coalesce(k.p_hat * k.evidence_n, 0)) AS c
FROM pass_rate_history o
LEFT JOIN pass_rate_history k ON k.run_id = o.run_id AND k.prompt_id = o.prompt_id AND o.stage = 'commit'
     AND k.stage = 'pilot' AND k.decision = 'kept' AND k.step = o.step - o.lag
WHERE o.run_id = ? AND o.decision = 'trained'
GROUP BY ALL ORDER BY o.step, o.prompt_id"""
_FIRST_SQL = """
SELECT step, n, n_correct FROM (
  SELECT step, n, n_correct, row_number() OVER (PARTITION BY prompt_id ORDER BY step, round, wave) AS visit
  FROM pass_rate_history WHERE run_id = ? AND n > 0 AND stage IN ('pilot', 'full'))
WHERE visit = 1 ORDER BY step"""


def read_runs(store: Store, run_ids: Sequence[str]) -> list[RunObservations]:
    """The fits' data of ``run_ids`` from ``store``, read-only (a run that is missing or has no steps is refused).

    One reading session for all of it, and every array cut at the last step counted: a run still writing (issue 54:
    its next step and evaluation landed between two queries, and the law indexed an evaluation past its steps) is
    read as it stood when the session opened."""
    return store.reading(lambda con: [_read_run(store, con, run_id) for run_id in run_ids])


def _read_run(store: Store, con: Any, run_id: str) -> RunObservations:
    def query(sql: str) -> list[tuple]:
        return con.execute(sql, [run_id]).fetchall()

    meta = query("SELECT method, seed, config_json FROM runs WHERE run_id = ?")
    (k, last, sampled), = query("SELECT count(*), max(step), avg(sampled_rollouts) FROM steps WHERE run_id = ?")
    if not meta or not k:
        raise StoreError(f"run {brief(run_id)} is not in {shown_path(store.path)} or has no steps. Fix: name a "
                         f"run that `{shell_command('pilot-commit', 'runs', '--store', store.path)}` lists with "
                         "steps.")
    pool, preset, screen = _config(store, run_id, meta[0][2])
    # The fit's arrays index steps from 0 (index = stored step - 1, steps count from 1 in the store).
    steps = int(last)  # a step left out as damaged still has its place on the step axis
    g = [(r[0] - 1, *r[1:]) for r in query(_GROUPS_SQL) if r[0] - 1 < steps]
    n = np.array([r[2] for r in g], dtype=np.float64)
    p = np.array([r[3] for r in g], dtype=np.float64) / np.maximum(n, 1)
    ev = query("SELECT step, avg(accuracy) FROM eval_results WHERE run_id = ? GROUP BY step ORDER BY step")
    ev = [(r[0] - 1, r[1]) for r in ev if r[0] - 1 < steps]
    bench = query("SELECT benchmark, accuracy FROM eval_results WHERE run_id = ? AND step = 0")
    first = [(r[0] - 1, *r[1:]) for r in query(_FIRST_SQL) if r[0] - 1 < steps]
    return RunObservations(
        run_id=run_id, method=meta[0][0], seed=int(meta[0][1]), steps=steps,
        group_step=np.array([r[0] for r in g], dtype=np.int64), group_sigma=np.sqrt(p * (1 - p)),
        group_size=n, eval_step=np.array([r[0] for r in ev], dtype=np.int64),
        eval_accuracy=np.array([r[1] for r in ev], dtype=np.float64),
        first_step=np.array([r[0] for r in first], dtype=np.int64),
        first_n=np.array([r[1] for r in first], dtype=np.int64),
        first_correct=np.rint([r[2] for r in first]).astype(np.int64),
        benchmark_start={r[0]: float(r[1]) for r in bench},
        sampled_per_step=float(sampled or 0.0), num_prompts=pool, preset=preset, screen_strategy=screen,
    )


def _config(store: Store, run_id: str, config_json: Any) -> tuple[int, str, str]:
    """(the training pool's size: task.num_prompts, else sim.num_prompts; the preset; allocator.screen_strategy,
    ``none`` when absent) of a run's recorded config,
    or a StoreError with the fix when the config is not a JSON object naming a pool (issue 54: a traceback)."""
    try:
        cfg = json.loads(config_json) if isinstance(config_json, str) else None
    except ValueError:
        cfg = None
    pool = None
    if isinstance(cfg, dict):
        for part in ("task", "sim"):
            value = cfg.get(part) if isinstance(cfg.get(part), dict) else {}
            if isinstance(value.get("num_prompts"), int) and not isinstance(value.get("num_prompts"), bool) \
                    and value["num_prompts"] >= 1:
                pool = value["num_prompts"]
                break
    if pool is None:
        what = "is not a JSON object" if not isinstance(cfg, dict) else "names no training pool (task.num_prompts or sim.num_prompts)"
        query = "SELECT run_id, config_json FROM runs WHERE run_id = " + sql_string(run_id)
        raise StoreError(f"run {brief(run_id)}: its recorded config in {shown_path(store.path)} {what}; the fit "
                         "needs its pool size. Fix: fit on runs whose config the store holds whole (see "
                         f"`{shell_command('pilot-commit', 'sql', '--store', store.path, query)}`), or record the run "
                         "again.")
    preset = cfg.get("preset", "")
    alloc = cfg.get("allocator") if isinstance(cfg.get("allocator"), dict) else {}
    screen = alloc.get("screen_strategy", "none")
    return int(pool), preset if isinstance(preset, str) else "", screen if isinstance(screen, str) else "none"


# ---- a small optimizer ------------------------------------------------------------------------------------------
def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], step: float = 0.5, iters: int = 600,
                tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """Minimize ``f`` from ``x0`` (the standard simplex method; deterministic). Returns (x, f(x))."""
    x0 = np.asarray(x0, dtype=np.float64)
    d = x0.size
    pts = [x0] + [x0 + step * np.eye(d)[i] for i in range(d)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= tol * (abs(vals[0]) + tol):
            break
        centre = np.mean(pts[:-1], axis=0)
        xr = centre + (centre - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centre + 2 * (centre - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * (pts[-1] - centre)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = int(np.argmin(vals))
    return pts[i], float(vals[i])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) past float64's range is inf: the sigmoid is 0, no warning printed
        return 1.0 / (1.0 + np.exp(-x))


# ---- the pass-rate mix ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MixFit:
    """A fitted difficulty mix, in :class:`~pc_pipelines.config.SimConfig`'s terms (difficulty = minus the logit)."""

    difficulty_mean: float
    difficulty_spread: float
    difficulty_mix_weight: float
    difficulty_mean_2: float
    difficulty_spread_2: float
    loglik: float
    aic: float
    aic_one_normal: float
    observations: int
    residuals: list[dict]  # per group size n and count k: observed and predicted share

    def sim_fields(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("difficulty_mean", "difficulty_spread", "difficulty_mix_weight",
                                              "difficulty_mean_2", "difficulty_spread_2")}


def _log_fact(upto: int) -> np.ndarray:
    """log(i!) for i in 0..``upto`` (at least): the table, grown when a group is larger than 4096 rollouts."""
    global _LOG_FACT
    if upto >= _LOG_FACT.shape[0]:
        _LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, upto + 1, dtype=np.float64)))])
    return _LOG_FACT


def _binom_logpmf(k: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    table = _log_fact(int(n.max()) if n.size else 0)  # an observation of 5,000 rollouts is legal (issue 54)
    log_choose = table[n] - table[k] - table[n - k]
    return log_choose[:, None] + k[:, None] * np.log(p) + (n - k)[:, None] * np.log1p(-p)


def _mix_probs(k: np.ndarray, n: np.ndarray, comps: Sequence[tuple[float, float, float]]) -> np.ndarray:
    """P(k | n) under a mix of logit Normals ``(weight, mean logit, std)``."""
    total = np.zeros(k.shape[0])
    for w, mu, sd in comps:
        like = np.exp(_binom_logpmf(k, n, _sigmoid(mu + sd * _GH_X)[None, :]))
        total += w * (like @ _GH_W)
    return total


def _components(theta: np.ndarray, two: bool) -> list[tuple[float, float, float]]:
    if not two:
        return [(1.0, theta[0], math.exp(theta[1]))]
    w = float(_sigmoid(np.array(theta[4])))
    return [(1 - w, theta[0], math.exp(theta[1])), (w, theta[2], math.exp(theta[3]))]


def fit_mix(n: np.ndarray, k: np.ndarray) -> MixFit:
    """The difficulty mix that makes ``k`` correct of ``n`` (one per prompt's first visit) most likely."""
    n = np.asarray(n, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    if n.size == 0 or np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise StoreError("the mix fit needs first visits with 0 <= correct <= rollouts >= 1 (none given, or a bad "
                         "row). Fix: fit on runs whose pass_rate_history has pilot or full groups in their first steps.")
    p_hat = (k.mean() + 0.5) / (n.mean() + 1)
    start1 = np.array([math.log(p_hat / (1 - p_hat)), math.log(2.0)])

    def nll(theta: np.ndarray, two: bool) -> float:
        if np.any(np.abs(theta) > 12):
            return 1e12
        return -float(np.log(np.maximum(_mix_probs(k, n, _components(theta, two)), 1e-300)).sum())

    one, f1 = nelder_mead(lambda t: nll(t, False), start1, step=0.5)
    start2 = np.array([one[0] - 1.5, one[1] - 0.3, one[0] + 1.5, one[1] - 0.3, 0.0])
    two, f2 = nelder_mead(lambda t: nll(t, True), start2, step=0.7, iters=1500)
    aic1, aic2 = 2 * 2 + 2 * f1, 2 * 5 + 2 * f2
    use_two = aic2 < aic1 - AIC_MARGIN
    comps = _components(two if use_two else one, use_two)
    # the component with more weight is the first (the simulator's difficulty_mean / difficulty_spread)
    comps = sorted(comps, key=lambda c: -c[0])
    residuals = []
    for size in sorted(set(n.tolist())):
        at = n == size
        ks = np.arange(size + 1)
        pred = _mix_probs(ks, np.full(size + 1, size), comps)
        obs = np.bincount(k[at], minlength=size + 1) / at.sum()
        residuals += [{"n": size, "k": int(j), "observed": float(obs[j]), "predicted": float(pred[j]),
                       "prompts": int(at.sum())} for j in ks]
    (w1, mu1, sd1) = comps[0]
    (w2, mu2, sd2) = comps[1] if len(comps) > 1 else (0.0, 0.0, 1.0)
    return MixFit(difficulty_mean=-float(mu1), difficulty_spread=float(sd1), difficulty_mix_weight=float(w2),
                  difficulty_mean_2=-float(mu2), difficulty_spread_2=float(sd2),
                  loglik=-(f2 if use_two else f1), aic=aic2 if use_two else aic1, aic_one_normal=aic1,
                  observations=int(n.size), residuals=residuals)


def first_visits(runs: Sequence[RunObservations], mix_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) of every prompt's first visit within the first ``mix_steps`` steps of each run, pooled."""
    n = [r.first_n[r.first_step < mix_steps] for r in runs]
    k = [r.first_correct[r.first_step < mix_steps] for r in runs]
    return np.concatenate(n) if n else np.zeros(0, np.int64), np.concatenate(k) if k else np.zeros(0, np.int64)


# ---- the held-out mix -------------------------------------------------------------------------------------------
def fit_eval_mix(benchmark_start: Sequence[float]) -> tuple[float, float]:
    """(eval_difficulty_mean, eval_difficulty_spread) from the benchmarks' accuracies before training: spread = the
    std of their logits, mean such that the Normal's expected pass rate is their mean accuracy."""
    acc = np.clip(np.asarray(benchmark_start, dtype=np.float64), 1e-3, 1 - 1e-3)
    if acc.size == 0:
        raise StoreError("no evaluation before training (step 0) in the fitted runs. Fix: fit on runs that "
                         "evaluated before training.")
    spread = float(np.log(acc / (1 - acc)).std())
    target = float(acc.mean())
    lo, hi = -12.0, 12.0  # expected pass rate rises with the mean logit: bisect
    for _ in range(80):
        mid = (lo + hi) / 2
        if float(_expected_accuracy(np.array(0.0), -mid, spread)) < target:
            lo = mid
        else:
            hi = mid
    return -(lo + hi) / 2, spread


def _expected_accuracy(skill: np.ndarray, eval_mean: float, eval_spread: float) -> np.ndarray:
    return _sigmoid(np.asarray(skill)[..., None] - eval_mean + eval_spread * _GH_X) @ _GH_W


THETA_BOUND = 15.0
"""The law fit searches each positive parameter's log within +-THETA_BOUND (gamma within [0, 6])."""


# ---- the learning law -------------------------------------------------------------------------------------------
LAW_FORMS = ("linear", "snr-1", "snr")
_FORM_START = {"linear": [math.log(1e-4), math.log(1.0)], "snr-1": [math.log(0.003), math.log(1.0), math.log(10.0)],
               "snr": [math.log(0.003), math.log(1.0), math.log(10.0), 1.0]}
LAW_TERMS = ("law_cap_pc", "law_cap_prior", "law_noise_floor", "law_gain_max")
"""The terms forward selection may add to the chosen form (module docstring): PC's and the history prior's plateau
(multipliers of the skill cap), a free noise floor (the ``snr`` forms only), the update's saturation."""
_TERM_START = {"law_cap_pc": lambda p: 0.0, "law_cap_prior": lambda p: 0.0,
               "law_noise_floor": lambda p: math.log(1e-2),
               "law_gain_max": lambda p: math.log(3 * (p.get("law_rate") or p.get("global_rate") * 16))}


def _term_starts(runs: Sequence[RunObservations], law: LawFit, term: str) -> list[list[float]]:
    """Where a fit with ``term`` added starts its search: ``law``'s optimum with the term near neutral, and (the
    search is local) a few points where the term acts: a plateau multiplier of 0.7 or 1.4 with the cap reset to 1.5x
    the highest skill ``law`` reaches (with the cap far above the runs, a multiplier moves nothing), a floor of 1 or
    30, a saturation at 0.3x or 0.1x the largest gain; and the form's own start beside the term's (a form with few
    group sizes can sit in a limit, e.g. gamma 0 where v is itself a floor, from which no local step finds the
    term)."""
    base = list(law.theta)
    p = law.params
    fresh = _FORM_START[law.form] + [law.theta[len(_FORM_START[law.form]) + i] for i in range(len(law.terms))]
    out = [base + [_TERM_START[term](p)]]
    if term == "law_noise_floor":
        out += [fresh + [math.log(c)] for c in (1.0, 30.0)]
    else:
        out.append(fresh + [_TERM_START[term](_params(law.form, np.array(fresh), law.terms))])
    if term in ("law_cap_pc", "law_cap_prior"):
        top = max(float(np.cumsum(_gains(r, law.form, p)[0]).max(initial=0.0)) for r in runs)
        cap = math.log(min(max(1.5 * top, 1e-3), p["law_skill_cap"] or math.inf))
        out += [[base[0], cap, *base[2:], math.log(m)] for m in (0.7, 1.4)]
    elif term == "law_noise_floor":
        out += [base + [math.log(c)] for c in (1.0, 30.0)]
    else:
        top = max(float(_gains(r, law.form, p)[0].max(initial=0.0)) for r in runs) or 1e-6
        out += [base + [math.log(f * top)] for f in (0.3, 0.1)]
    return out


@dataclass(frozen=True)
class LawFit:
    form: str
    params: dict[str, float | None]  # SimConfig law fields (global_rate for the linear form)
    sse: float
    aic: float
    evaluations: int
    per_run: list[dict]  # run_id, evaluations, rmse, bias (mean measured - predicted)
    at_bound: list[str] = field(default_factory=list)  # parameters the optimizer left at a search bound
    terms: tuple[str, ...] = ()  # the LAW_TERMS fitted beside the form's own parameters
    theta: tuple[float, ...] = ()  # the optimum's search coordinates (a richer fit starts from them)


@dataclass(frozen=True)
class _Replay:
    """A run's law inputs, summed per step once (a fit evaluates the law thousands of times)."""

    signal: np.ndarray  # per step: S, the summed reward stds
    sizes: np.ndarray  # the distinct group sizes
    sigma2: np.ndarray  # per step x size: the summed sigma^2 of that size's groups
    eval_index: np.ndarray  # per evaluation: its index on the skill path (0 = before training)
    accuracy: np.ndarray
    pc: bool
    prior: bool


def _replay(run: RunObservations) -> _Replay:
    steps = run.steps
    sizes, which = np.unique(np.maximum(run.group_size, 1.0), return_inverse=True)
    sigma2 = np.zeros((steps, sizes.size))
    np.add.at(sigma2, (run.group_step, which), run.group_sigma ** 2)
    # float even when no group trained in these steps (numpy's bincount of nothing is int64: issue 54)
    signal = np.bincount(run.group_step, weights=run.group_sigma, minlength=steps)[:steps].astype(np.float64)
    return _Replay(signal, sizes, sigma2, run.eval_step + 1, run.eval_accuracy, run.method == "pc",
                   run.screen_strategy == "posterior")


def _gains(run: RunObservations | _Replay, form: str, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the law's mean gain (saturated) and its noise share V / (S^2 + V) scaled by the saturation^2."""
    r = run if isinstance(run, _Replay) else _replay(run)
    s = r.signal
    if form == "linear":
        raw = p["global_rate"] * s
        return saturate(raw, p.get("law_gain_max")), np.zeros_like(s)
    noise = p.get("law_noise_floor", 0.0) + p["law_noise_scale"] / r.sizes ** p["law_noise_power"]
    v = r.sigma2 @ noise if r.sizes.size else np.zeros_like(s)
    raw = p["law_rate"] * signal_share(s, v)
    gains = saturate(raw, p.get("law_gain_max"))
    scale = np.divide(gains, raw, out=np.ones_like(raw), where=raw > 0)
    noise_share = np.divide(v, s * s + v, out=np.zeros_like(v), where=(s * s + v) > 0)
    return gains, noise_share * scale ** 2


def _cap(r: RunObservations | _Replay, p: dict) -> float | None:
    cap = p.get("law_skill_cap")
    if cap is None:
        return None
    if isinstance(r, _Replay):
        return cap * (p.get("law_cap_pc", 1.0) if r.pc else 1.0) * (p.get("law_cap_prior", 1.0) if r.prior else 1.0)
    return cap * cap_factor(p.get("law_cap_pc", 1.0), p.get("law_cap_prior", 1.0), r.method, r.screen_strategy)


def skill_path(gains: np.ndarray, cap: float | None) -> np.ndarray:
    """Skill after each step from per-step gains, with the cap's damping ``gain * (1 - s / cap)``."""
    if cap is None:
        return np.cumsum(gains)
    return cap * (1 - np.cumprod(np.clip(1 - gains / cap, 0.0, None)))


def predicted_accuracy(run: RunObservations | _Replay, form: str, p: dict, eval_mean: float,
                       eval_spread: float) -> np.ndarray:
    r = run if isinstance(run, _Replay) else _replay(run)
    gains, _ = _gains(r, form, p)
    path = np.concatenate([[0.0], skill_path(gains, _cap(r, p))])
    return _expected_accuracy(path[r.eval_index], eval_mean, eval_spread)


def _params(form: str, theta: np.ndarray, terms: Sequence[str] = ()) -> dict:
    if form == "linear":
        p = {"global_rate": math.exp(theta[0]), "law_skill_cap": math.exp(theta[1])}
        base = 2
    else:
        p = {"law_rate": math.exp(theta[0]), "law_skill_cap": math.exp(theta[1]), "law_noise_floor": 0.0,
             "law_noise_scale": math.exp(theta[2]), "law_noise_power": 1.0 if form == "snr-1" else float(theta[3])}
        base = 3 if form == "snr-1" else 4
    p.update({"law_cap_pc": 1.0, "law_cap_prior": 1.0, "law_gain_max": None})
    for i, term in enumerate(terms):
        p[term] = math.exp(theta[base + i])
    return p


def _names(form: str, terms: Sequence[str]) -> list[str]:
    base = {"linear": ["global_rate", "law_skill_cap"], "snr-1": ["law_rate", "law_skill_cap", "law_noise_scale"],
            "snr": ["law_rate", "law_skill_cap", "law_noise_scale", "law_noise_power"]}[form]
    return base + list(terms)


def fit_law(runs: Sequence[RunObservations], eval_mean: float, eval_spread: float, form: str,
            terms: Sequence[str] = (), start: Sequence[float] | None = None) -> LawFit:
    """Least squares of the measured held-out accuracy on the law's replay of what each run trained: ``form``'s own
    parameters and the :data:`LAW_TERMS` named in ``terms``, from ``start`` (search coordinates) when given."""
    if form not in LAW_FORMS:
        raise ValueError(f"law form {form!r} is not one of {', '.join(LAW_FORMS)}")
    bad = [t for t in terms if t not in LAW_TERMS or (t == "law_noise_floor" and form == "linear")]
    if bad:
        raise ValueError(f"law term(s) {bad} are not among {', '.join(LAW_TERMS)} for the {form} form")
    if start is None:  # the form's start, and for snr a second (the simplex is local: gamma 0 is a trap)
        starts = [list(_FORM_START[form])] + ([[math.log(0.01), math.log(1.0), math.log(100.0), 2.0]]
                                              if form == "snr" else [])
        fits = [fit_law(runs, eval_mean, eval_spread, form, terms,
                        start=base + [_TERM_START[t](_params(form, np.array(base))) for t in terms])
                for base in starts]
        return min(fits, key=lambda f: f.sse)
    replays = [_replay(r) for r in runs]
    mean_evals = float(np.mean([len(r.eval_step) - 1 for r in runs]))
    gamma = 3 if form == "snr" else None

    def sse(theta: np.ndarray) -> float:  # every run weighs the same, however many evaluations it has
        if np.any(np.abs(theta) > THETA_BOUND) or (gamma is not None and not 0 <= theta[gamma] <= 6):
            return 1e9
        p = _params(form, theta, terms)
        return float(sum(((predicted_accuracy(r, form, p, eval_mean, eval_spread) - r.accuracy)[1:] ** 2).mean()
                         for r in replays) * mean_evals)

    best, f = nelder_mead(sse, start, step=0.7, iters=2000)
    for _ in range(2):  # restart at the optimum: the simplex can stall on a ridge
        best, f = nelder_mead(sse, best, step=0.3, iters=2000)
    p = _params(form, best, terms)
    m = sum(len(r.eval_step) - 1 for r in runs)
    per_run = []
    for r, rp in zip(runs, replays):
        res = (rp.accuracy - predicted_accuracy(rp, form, p, eval_mean, eval_spread))[1:]
        per_run.append({"run_id": r.run_id, "evaluations": int(res.size), "rmse": float(np.sqrt((res ** 2).mean())),
                        "bias": float(res.mean())})
    names = _names(form, terms)
    at_bound = [names[i] for i, t in enumerate(best) if abs(t) >= THETA_BOUND - 0.05 and i != gamma]
    if gamma is not None and (best[gamma] <= 0.01 or best[gamma] >= 5.99):
        at_bound.append("law_noise_power")
    # a law that replays every evaluation exactly (every one 1.0, say) has sse 0: its AIC is the floor's
    return LawFit(form=form, params=p, sse=f, aic=m * math.log(max(f, 1e-300) / m) + 2 * len(best), evaluations=m,
                  per_run=per_run, at_bound=at_bound, terms=tuple(terms), theta=tuple(float(t) for t in best))


def candidate_terms(runs: Sequence[RunObservations], form: str) -> list[str]:
    """The :data:`LAW_TERMS` the runs can identify under ``form``: a plateau multiplier only when the runs hold both
    sides (PC and not; the prior and not), the noise floor only in an ``snr`` form."""
    out = []
    for term, side in (("law_cap_pc", [r.method == "pc" for r in runs]),
                       ("law_cap_prior", [r.screen_strategy == "posterior" for r in runs])):
        if any(side) and not all(side):
            out.append(term)
    if form != "linear":
        out.append("law_noise_floor")
    return out + ["law_gain_max"]


def select_terms(runs: Sequence[RunObservations], law: LawFit, eval_mean: float, eval_spread: float,
                 terms: Sequence[str]) -> tuple[LawFit, list[dict]]:
    """Forward selection from ``law``: each round fits every remaining term of ``terms`` beside those kept (from the
    kept fit's optimum) and keeps the one that lowers the AIC most, if by more than :data:`AIC_MARGIN`; stops when
    none does. Returns (the final fit, one record per term tried: term, round, aic_drop, kept)."""
    log: list[dict] = []
    remaining = list(terms)
    rnd = 0
    while remaining:
        rnd += 1
        tries = {}
        for term in remaining:
            fits = [fit_law(runs, eval_mean, eval_spread, law.form, (*law.terms, term), start=start)
                    for start in _term_starts(runs, law, term)]
            tries[term] = min(fits, key=lambda f: f.sse)
        best = min(tries, key=lambda t: tries[t].aic)
        for term, fit in tries.items():
            log.append({"term": term, "round": rnd, "aic_drop": law.aic - fit.aic,
                        "kept": term == best and law.aic - fit.aic > AIC_MARGIN})
        if law.aic - tries[best].aic <= AIC_MARGIN:
            break
        law = tries[best]
        remaining.remove(best)
    return law, log


def noise_moments(runs: Sequence[RunObservations], law: LawFit, eval_mean: float,
                  eval_spread: float) -> tuple[float, float]:
    """(law_step_noise, eval_noise) by moments of the residuals (see the module docstring)."""
    p = law.params
    cross, weight, sq, walk = 0.0, 0.0, 0.0, 0.0
    for run in runs:
        r = _replay(run)
        gains, q = _gains(r, law.form, p)
        path = np.concatenate([[0.0], skill_path(gains, _cap(r, p))])
        s = path[r.eval_index]
        eps = 1e-4
        slope = (_expected_accuracy(s + eps, eval_mean, eval_spread) - _expected_accuracy(s, eval_mean, eval_spread))
        slope = slope / eps
        rate = p.get("law_rate", 0.0)
        walk_var = np.concatenate([[0.0], np.cumsum(rate * rate * q)])[r.eval_index] * slope ** 2
        res = r.accuracy - _expected_accuracy(s, eval_mean, eval_spread)
        res, walk_var = res[1:], walk_var[1:]
        for i in range(res.size):
            cross += float((res[i] * res[i + 1:]).sum())
            weight += float(walk_var[i] * (res.size - i - 1))
        sq += float((res ** 2).sum())
        walk += float(walk_var.sum())
    count = sum(len(r.eval_step) - 1 for r in runs)
    eta2 = max(0.0, cross / weight) if weight > 0 else 0.0
    eval_var = max(0.0, (sq - eta2 * walk) / max(count, 1))
    return math.sqrt(eta2), math.sqrt(eval_var)


@dataclass
class SimFit:
    """Everything one fit found: the SimConfig fields to set (``sim``) and how well each part fits."""

    runs: list[str]
    sim: dict[str, float | str | None]
    mix: MixFit
    eval_mix: tuple[float, float]
    laws: dict[str, LawFit]
    chosen: str
    law: LawFit | None = None  # the chosen form with the terms forward selection kept (None: the form's own fit)
    term_log: list[dict] = field(default_factory=list)  # every term tried: term, round, aic_drop, kept

    @property
    def kept_terms(self) -> tuple[str, ...]:
        return self.law.terms if self.law is not None else ()

    def terms_line(self) -> str:
        """What forward selection kept and dropped, with the AIC each changed (``sim-fit`` prints it)."""
        if not self.term_log:
            return "law terms: none tried"
        last = {}
        for t in self.term_log:
            last[t["term"]] = t
        kept = [t for t in self.term_log if t["kept"]]
        dropped = [t for name, t in last.items() if not any(k["term"] == name for k in kept)]
        say = lambda ts: ", ".join(f"{t['term']} ({t['aic_drop']:+.1f})" for t in ts) or "none"  # noqa: E731
        return (f"law terms kept (AIC lower by): {say(kept)}; dropped (AIC lower by at most {AIC_MARGIN:g}, or "
                f"higher): {say(dropped)}")

    def to_dict(self) -> dict:
        return {"runs": self.runs, "sim": self.sim, "chosen_form": self.chosen,
                "kept_terms": list(self.kept_terms), "term_log": self.term_log,
                "mix": asdict(self.mix), "eval_mix": {"eval_difficulty_mean": self.eval_mix[0],
                                                      "eval_difficulty_spread": self.eval_mix[1]},
                "laws": {k: asdict(v) for k, v in self.laws.items()},
                "law": asdict(self.law) if self.law is not None else None}


def fit_simulator(runs: Sequence[RunObservations], mix_steps: int = 20,
                  forms: Sequence[str] = LAW_FORMS, terms: Sequence[str] | None = LAW_TERMS,
                  fixed_terms: Sequence[str] = ()) -> SimFit:
    """Fit the mix (first visits within ``mix_steps``), the held-out mix and every law form; choose the form with
    the lowest AIC (a richer form only when it beats the simpler by :data:`AIC_MARGIN`), then add the ``terms``
    forward selection keeps (:func:`select_terms`; ``()`` or None: none tried, the law as before issue 57), or, with
    ``fixed_terms``, fit exactly those (a refit of a law whose terms were already chosen)."""
    short = [r.run_id for r in runs if len(r.eval_step) < 2 or r.eval_step[0] != -1]
    if not runs or short:
        raise StoreError(f"run(s) {brief(short)} lack an evaluation before training or after it (the law is fitted "
                         "on the held-out accuracy). Fix: fit on runs evaluated before training (step 0) and at least once more."
                         if short else "no runs to fit. Fix: name at least one run with --runs.")
    mix = fit_mix(*first_visits(runs, mix_steps))
    bench: dict[str, list[float]] = {}
    for r in runs:
        for b, a in r.benchmark_start.items():
            bench.setdefault(b, []).append(a)
    eval_mean, eval_spread = fit_eval_mix([float(np.mean(v)) for v in bench.values()])
    laws = {form: fit_law(runs, eval_mean, eval_spread, form) for form in forms}
    chosen = forms[0]
    for form in forms[1:]:
        if laws[form].aic < laws[chosen].aic - AIC_MARGIN:
            chosen = form
    law, term_log = laws[chosen], []
    if fixed_terms:
        law = fit_law(runs, eval_mean, eval_spread, chosen, tuple(fixed_terms))
    elif terms:
        tried = [t for t in candidate_terms(runs, chosen) if t in terms]
        law, term_log = select_terms(runs, law, eval_mean, eval_spread, tried)
    fit = SimFit(runs=[r.run_id for r in runs], sim={}, mix=mix, eval_mix=(eval_mean, eval_spread), laws=laws,
                 chosen=chosen, law=law if (terms or fixed_terms) else None, term_log=term_log)
    fit.sim = law_sim_fields(runs, fit, law)
    return fit


def law_sim_fields(runs: Sequence[RunObservations], fit: SimFit, law: LawFit) -> dict[str, float | str | None]:
    """The SimConfig fields of ``fit`` with ``law`` (its chosen law, or another of its laws: the form alone, say),
    the step and evaluation noise estimated for that law."""
    eval_mean, eval_spread = fit.eval_mix
    step_noise, eval_noise = noise_moments(runs, law, eval_mean, eval_spread)
    sim: dict[str, float | str | None] = {"num_prompts": max(r.num_prompts for r in runs),
                                          **fit.mix.sim_fields(), "eval_difficulty_mean": eval_mean,
                                          "eval_difficulty_spread": eval_spread, "eval_noise": eval_noise}
    if law.form == "linear":
        sim.update(law="linear", **law.params)
    else:
        sim.update(law="fitted", **law.params, law_step_noise=step_noise)
    return sim
