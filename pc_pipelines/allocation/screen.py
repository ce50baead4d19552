"""Beyond the paper: the history prior, a screen of drawn prompts before any rollout (``screen_strategy``).

A run observes every prompt many times (pilots, commits, full groups); the paper's allocator forgets all of it and
pilots each drawn prompt afresh. The ``posterior`` screen keeps, per prompt, a Beta posterior over its pass rate
and skips a drawn prompt whose predicted chance of being useful is confidently low, without a rollout. It works for
every method (the step context asks it in :meth:`~.step.StepContext.draw`): PC's pilots, GRPO's and DAPO's groups.

**Posterior.** Prompt ``i`` holds discounted successes ``a_i`` and failures ``b_i``: after step ``t`` closes,
``a_i = sum over its observed groups at steps s <= t of n_correct * gamma**(t - s)`` (``b_i`` with ``n - n_correct``),
``gamma = screen_discount``. Every observation row of a step counts once (a pilot row holds its pilot rollouts, a
trained commit row its commit rollouts, a GRPO / DAPO row its group), so no rollout is counted twice. The arrays
are discounted lazily: each keeps the step it was last brought to (``a <- a * gamma**(t - t_last)``). Read in step
``T``, the posterior is ``Beta(a + kappa m_g, b + kappa (1 - m_g))`` with every sum over ``s < T`` discounted to
``T``; ``m_g = (A_g + 1) / (A_g + B_g + 2)`` is the discounted pass rate of the prompt's group ``g`` (the same sums
over the group's prompts; one group unless the dataset declares an attribute), ``kappa = screen_prior_strength``.
So a prompt never seen still gets its group's prior, and ``SELECT sum(n_correct * pow(gamma, T - step)) ... WHERE
step < T`` over ``pass_rate_history`` rebuilds ``a`` (docs/DESIGN.md, section 3, "The history prior").

**Usefulness** (exact, no grid): under the posterior, the next group's number correct ``K`` out of ``n`` is
beta-binomial, ``P(K = k) = C(n, k) B(k + alpha, n - k + beta) / B(alpha, beta)``, computed from rising factorials.
PC asks ``P(pilot in band) = sum of P(K = k)`` over the ``k`` of ``n_pilot`` with ``k / n_pilot`` in the static
band; GRPO / DAPO ask ``P(informative) = 1 - P(K = 0) - P(K = n)``. Worked example: Beta(1, 1) makes ``K``
uniform on ``0..n``, so a 16-rollout pilot lands in [0.125, 0.75] with chance 11/17 = 0.647 (k = 2..12).

**Skip rule.** A drawn prompt is skipped when its usefulness is below ``screen_threshold``, its own discounted
evidence ``a + b`` is at least ``screen_min_evidence``, the exploration floors let it go, and the screen's own seeded
uniform is at least ``screen_explore`` (a share of would-be skips sampled anyway). The floors: it has been skipped
fewer than ``screen_max_skips`` times in a row (0: no cap; the next draw pilots it), and its last observed group is
at most ``screen_max_unseen`` steps old (0: no time floor). A prompt drawn every step and skipped by a cap of 3 is
piloted every 4th step however stable its pass rate; the time floor pilots it every ``screen_max_unseen + 1``
steps at most whatever the draw rate, so a prompt never goes longer than that unpiloted. A skipped prompt is not evicted: the stream brings it
back in its next epoch.

**First waves** (``screen_early_wave``, PC's sequential pilots): a first wave whose rewards are all equal decides
its prompt early only when the posterior updated with the wave gives the full pilot a chance below
``screen_threshold`` of landing in band (:meth:`PosteriorScreen.continue_useful`); a prompt the history calls
middling goes on to its later wave (``prior_continued``), since two rollouts of a prompt at p = 0.7 are all right
half the time. Its side is ``easy`` when the posterior mean is above the band's middle (GRPO / DAPO: 0.5),
else ``hard``; both are one decision, ``screened_by_prior``, with the side in its rule (``prior_easy`` / ``prior_hard``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import field_error
from .strategies import Strategy, register_strategy

EPS = 1e-9


class ScreenStrategy(Strategy):
    """Asked by the step context before drawn prompts are sampled; told every step's observations."""

    active = False
    """Whether :meth:`screen` may skip anything (``none``: the draw is exactly the paper's)."""

    def __init__(self, config, num_prompts: int, groups: np.ndarray | None = None, pilots: bool = True) -> None:
        super().__init__(config)
        self.num_prompts = int(num_prompts)
        self.pilots = bool(pilots)

    middle = 0.5
    """A skipped prompt whose posterior mean is above this is on the easy side (``prior_easy``), else hard."""

    def screen(self, ids: np.ndarray, step: int, budget: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(skip mask, the posterior's view of every id: ``useful``, ``mean``, ``evidence``, ``observations``) for
        prompts ``ids`` drawn in step ``step`` (stream order), skipping at most ``budget`` (the first ones)."""
        k = ids.shape[0]
        return np.zeros(k, bool), {}

    def observe(self, step: int, prompt_id: np.ndarray, n: np.ndarray, n_correct: np.ndarray) -> None:
        """Fold the observed groups of step ``step`` (rows with ``n > 0``) into the posterior."""
        return None

    def continue_useful(self, ids: np.ndarray, step: int, k1: np.ndarray, wave: int) -> np.ndarray:
        """PC's sequential pilots: the chance the full pilot lands in band given its first wave (``none``: 0)."""
        return np.zeros(ids.shape[0])

    @property
    def skip_cost(self) -> int:
        """The rollouts a skipped prompt would have cost first (PC: its first pilot wave; else its group)."""
        cfg = self.config
        if not self.pilots:
            return cfg.n
        return cfg.pilot_wave if cfg.pilot_strategy == "sequential" else cfg.pilot_n


@register_strategy("screen", "none")
class NoScreen(ScreenStrategy):
    """The paper: every drawn prompt is piloted (PC) or sampled (GRPO / DAPO)."""


def _rising_log(x: np.ndarray, n: int) -> np.ndarray:
    """``log(x (x + 1) ... (x + j - 1))`` for j = 0..n, per row of ``x`` (shape [k, n + 1])."""
    out = np.zeros((x.shape[0], n + 1))
    np.cumsum(np.log(x[:, None] + np.arange(n)[None, :]), axis=1, out=out[:, 1:])
    return out


def _log_comb(n: int) -> np.ndarray:
    """``log C(n, k)`` for k = 0..n."""
    return np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in range(n + 1)])


def beta_binomial_pmf(alpha: np.ndarray, beta: np.ndarray, n: int, log_comb: np.ndarray | None = None) -> np.ndarray:
    """``P(K = k)``, k = 0..n, for ``K ~ BetaBinomial(n, alpha, beta)`` per row (shape [len(alpha), n + 1]);
    ``log_comb``: :func:`_log_comb` of ``n``, when the caller keeps it."""
    alpha = np.asarray(alpha, np.float64)
    beta = np.asarray(beta, np.float64)
    ra, rb, rab = _rising_log(alpha, n), _rising_log(beta, n), _rising_log(alpha + beta, n)
    k = np.arange(n + 1)
    lc = _log_comb(n) if log_comb is None else log_comb
    return np.exp(lc[None, :] + ra[:, k] + rb[:, n - k] - rab[:, n : n + 1])


@register_strategy("screen", "posterior")
class PosteriorScreen(ScreenStrategy):
    """Per-prompt discounted Beta posterior, pooled prior by group, exploration cap and share (module docstring)."""

    active = True

    @classmethod
    def check_config(cls, config):
        if config.method == "oracle":
            raise field_error(config, "screen_strategy", "has nothing to screen: the oracle draws no prompts",
                              "set screen_strategy=none for method oracle")

    def __init__(self, config, num_prompts, groups=None, pilots=True):
        super().__init__(config, num_prompts, groups, pilots)
        m = self.num_prompts
        self.group = np.zeros(m, np.int64) if groups is None else np.asarray(groups, np.int64).reshape(-1)
        if self.group.shape[0] != m or (m and int(self.group.min()) < 0):
            raise ValueError(f"screen groups: need one group id >= 0 per prompt ({m}), got {self.group.shape[0]}")
        self.num_groups = int(self.group.max()) + 1 if m else 1
        self.a = np.zeros(m)  # discounted successes as of step t_last
        self.b = np.zeros(m)  # discounted failures as of step t_last
        self.t_last = np.zeros(m, np.int64)
        self.seen = np.zeros(m, np.int32)  # observed groups (undiscounted)
        self.skips = np.zeros(m, np.int32)  # consecutive skips
        self.ga = np.zeros(self.num_groups)
        self.gb = np.zeros(self.num_groups)
        self.gt = 0  # the step the group totals are discounted to
        self.rng = np.random.default_rng([config.seed, 0x5C4EE7])
        cfg = config
        if self.pilots:  # the pilot's counts that land in the static band
            n = cfg.pilot_n
            k = np.arange(n + 1) / n
            self.n_useful = n
            self.useful_k = (k >= cfg.p_lower - EPS) & (k <= cfg.p_upper + EPS)
            self.middle = 0.5 * (cfg.p_lower + cfg.p_upper)
        else:  # a group not all equal
            self.n_useful = cfg.n
            self.useful_k = np.ones(cfg.n + 1, bool)
            self.useful_k[[0, cfg.n]] = False
            self.middle = 0.5
        self.log_comb = _log_comb(self.n_useful)

    # ---- the posterior -------------------------------------------------------------------------------------------
    def posterior(self, ids: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(alpha, beta, own discounted evidence) of ``ids`` as read in step ``step`` (sums over steps < step)."""
        gamma = self.config.screen_discount
        w = gamma ** (step - self.t_last[ids]).astype(np.float64)
        a, b = self.a[ids] * w, self.b[ids] * w
        gw = gamma ** float(step - self.gt)
        ga, gb = self.ga * gw, self.gb * gw
        mean_g = (ga + 1.0) / (ga + gb + 2.0)
        kappa = self.config.screen_prior_strength
        g = self.group[ids]
        return a + kappa * mean_g[g], b + kappa * (1.0 - mean_g[g]), a + b

    def useful(self, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Predicted chance the next group is useful (module docstring, "Usefulness")."""
        if alpha.shape[0] == 0:
            return np.zeros(0)
        return beta_binomial_pmf(alpha, beta, self.n_useful, self.log_comb)[:, self.useful_k].sum(axis=1)

    def continue_useful(self, ids: np.ndarray, step: int, k1: np.ndarray, wave: int) -> np.ndarray:
        """PC's sequential pilots: the chance the full pilot of ``ids`` lands in band given its first wave
        (``k1`` correct of ``wave``), under the posterior read in ``step`` updated with that wave: the later
        ``n_pilot - wave`` rollouts are beta-binomial under Beta(alpha + k1, beta + wave - k1)."""
        alpha, beta, _ = self.posterior(ids, step)
        k1 = np.rint(np.asarray(k1, np.float64)).astype(np.int64)
        rest = self.n_useful - int(wave)
        out = np.zeros(ids.shape[0])
        for k in np.unique(k1).tolist():
            sel = k1 == k
            pmf = beta_binomial_pmf(alpha[sel] + k, beta[sel] + (wave - k), rest)
            out[sel] = pmf[:, self.useful_k[k:k + rest + 1]].sum(axis=1)
        return out

    def screen(self, ids, step, budget):
        cfg = self.config
        k = ids.shape[0]
        explore = self.rng.random(k)  # one uniform per drawn prompt, whatever is decided: a fixed draw count
        alpha, beta, evidence = self.posterior(ids, step)
        # Only a prompt every other rule lets go can be skipped: the usefulness of the rest is not needed (NaN).
        can = (evidence >= cfg.screen_min_evidence - EPS) & (explore >= cfg.screen_explore)
        if cfg.screen_max_skips:
            can &= self.skips[ids] < cfg.screen_max_skips
        if cfg.screen_max_unseen:  # the time floor: sampled within the last screen_max_unseen steps
            can &= (step - self.t_last[ids]) <= cfg.screen_max_unseen
        useful = np.full(k, np.nan)
        useful[can] = self.useful(alpha[can], beta[can])
        skip = can & (useful < cfg.screen_threshold)
        # In stream order: at most ``budget`` skips, and a prompt drawn twice in one draw (an epoch boundary inside
        # it) counts its skips one after the other.
        for j in np.flatnonzero(skip):
            p = ids[j]
            if budget <= 0 or (cfg.screen_max_skips and self.skips[p] >= cfg.screen_max_skips):
                skip[j] = False
            else:
                self.skips[p] += 1
                budget -= 1
        self.skips[ids[~skip]] = 0
        info = {"useful": useful, "mean": alpha / (alpha + beta), "evidence": evidence,
                "observations": self.seen[ids].copy()}
        return skip, info

    def observe(self, step, prompt_id, n, n_correct):
        gamma = self.config.screen_discount
        rows = np.flatnonzero(np.asarray(n) > 0)
        if rows.shape[0] == 0:
            return
        ids, inv = np.unique(np.asarray(prompt_id, np.int64)[rows], return_inverse=True)
        succ = np.bincount(inv, weights=np.asarray(n_correct, np.float64)[rows], minlength=ids.shape[0])
        fail = np.bincount(inv, weights=(np.asarray(n, np.float64) - np.asarray(n_correct, np.float64))[rows],
                           minlength=ids.shape[0])
        w = gamma ** (step - self.t_last[ids]).astype(np.float64)
        self.a[ids] = self.a[ids] * w + succ
        self.b[ids] = self.b[ids] * w + fail
        self.t_last[ids] = step
        np.add.at(self.seen, ids, np.bincount(inv, minlength=ids.shape[0]).astype(np.int32))
        gw = gamma ** float(step - self.gt)
        g = self.group[ids]
        self.ga = self.ga * gw + np.bincount(g, weights=succ, minlength=self.num_groups)
        self.gb = self.gb * gw + np.bincount(g, weights=fail, minlength=self.num_groups)
        self.gt = step

    # ---- state ---------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        seen = np.flatnonzero((self.seen > 0) | (self.skips > 0))
        state: dict[str, Any] = {
            "prompts": seen.tolist(),
            "a": self.a[seen].tolist(),
            "b": self.b[seen].tolist(),
            "t_last": self.t_last[seen].tolist(),
            "seen": self.seen[seen].tolist(),
            "skips": self.skips[seen].tolist(),
            "ga": self.ga.tolist(),
            "gb": self.gb.tolist(),
            "gt": self.gt,
            "rng": self.rng.bit_generator.state,
        }
        if self.num_groups > 1:
            state["groups"] = self.group.tolist()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "groups" in state:
            self.group = np.asarray(state["groups"], np.int64)
            self.num_groups = int(self.group.max()) + 1
        ids = np.asarray(state["prompts"], np.int64)
        for name, dtype in (("a", np.float64), ("b", np.float64), ("t_last", np.int64), ("seen", np.int32),
                            ("skips", np.int32)):
            arr = np.zeros(self.num_prompts, dtype)
            arr[ids] = np.asarray(state[name], dtype)
            setattr(self, name, arr)
        self.ga = np.asarray(state["ga"], np.float64)
        self.gb = np.asarray(state["gb"], np.float64)
        self.gt = int(state["gt"])
        self.rng.bit_generator.state = state["rng"]
