"""Beyond the paper: Pilot-Commit's pluggable strategies, each a small registered class.

The paper fixes five things that this module makes choices of :class:`~.config.AllocatorConfig`:

============  =====================  ==================================================================
kind          paper (default)        beyond the paper
============  =====================  ==================================================================
``band``      ``static``             ``adaptive``: widen the keep band when the batch would be short
``sampling``  ``fixed`` (b_g)        ``survival``: pilot as many prompts as the survival rate says
``pilot``     ``single`` (n_pilot)   ``sequential``: a cheap first wave decides the obvious prompts
``commit``    ``uniform`` (n_commit) ``variance``: commit rollouts in proportion to the pilot std
``eviction``  ``strict``             ``easy_pool``: solved prompts return as a bounded share of the pilots
============  =====================  ==================================================================

Every strategy is numpy only, deterministic given its inputs, and round-trips its cross-step state through
``state_dict`` (the allocator checkpoints it with the method). Decisions a strategy takes carry their reason in
the observations' ``rule`` column (``band``, ``adaptive_band``, ``early_wave``; a return from the easy pool in the
``returned`` column) and are counted in the ledger.

**Adaptive band.** After a round's pilots are screened with the static band, ``need`` is the number of survivors
the step still lacks (see :meth:`PilotCommit.pilot_need`). When the static survivors fall short, the band is widened
just enough to admit the ``need`` highest-variance outside pilots (largest ``p (1 - p)``, stream order on ties),
then every pilot inside the widened band is kept. Bounds: the widened band always contains the static one (a
prompt the static band keeps is never dropped), and a pilot with ``p_hat`` exactly 0 or 1 is never kept (its group
has no signal). When the static band already fills the batch nothing changes: the buffer's ``max_variance``
selection is what then picks the best of the survivors. The band actually used is recorded per pilot row
(``prompt_observations.band_lower`` / ``band_upper``: its round's, the one its reason quotes) and per step
(``steps.band_lower`` / ``band_upper``: the widest of the step's rounds).

**Survival sampling.** The paper pilots b_g = s * b_t prompts every round. ``survival`` keeps an exponential
average of the share of pilots kept and pilots ``ceil(margin * need / survival)`` prompts, never more than b_g
(the config's ``oversample`` is the ceiling) and none when the buffer already holds what is needed.

**Sequential pilots.** A pilot is split into waves: ``pilot_wave`` rollouts, then ``n_pilot - pilot_wave`` more
for prompts the first wave did not decide. A first wave whose rewards are all equal and whose ``p_hat`` (0 or 1)
lies outside the static band is decided early (deferred hard / skipped easy, ``rule = early_wave``); the saved
rollouts are counted (``steps.pilot_rollouts_saved``). Error bound: a prompt with true pass rate ``p`` is decided
early with probability ``p**w + (1 - p)**w`` (``w = pilot_wave``). Inside the paper band at ``w = 4`` that is at
most 0.59 at the lower edge p = 1/8 and 0.32 at the upper edge p = 3/4, but only 0.125 at p = 1/2, and the loss is
weighted towards the low-variance edges, whose groups carry least gradient (Proposition 1: scale sqrt(p(1-p))).
The full pilot is noisy at the edges too: at p = 1/8 a 16-rollout pilot keeps the prompt only 61% of the time.
An early decision never evicts (eviction needs the full pilot's evidence). Binding is kept: a wave is part of its
round, so a round is the commit call holding the first wave, then a call for the second wave.

**Variance-proportional commits.** The commit budget of a round, ``len(commits) * commit_mean``, is spread over
the popped prompts in proportion to their pilot reward std (Neyman allocation: more rollouts where the group's
advantage estimates are noisiest relative to their signal), each clipped to ``[commit_min, commit_max]``, by
water-filling, with integer sizes from the largest remainders (ties by position). The sizes always sum to the
budget. Groups then differ in size; GRPO normalization stays per group.

**Easy-pool eviction.** The paper's strict eviction retires a prompt for good once a full pilot reaches p_solve;
on a small pool that drains the stream (the ``bench`` preset's 500 prompts: 445-460 evicted, 10 rounds a step).
``easy_pool`` keeps the rule (a solved prompt leaves the fresh stream from the next epoch) but puts the prompt at
the end of an easy pool (FIFO, by eviction order) and lets it come back:

* Rate: each round that draws ``k`` pilots adds ``k * return_share`` to a credit carried across rounds and steps,
  then takes ``floor(credit)`` from the pool and subtracts that from the credit (credit unused for want of
  eligible prompts is dropped, so it stays in [0, 1) and never bursts). Over any run of rounds the returns are at
  most ``return_share`` times the prompts drawn, and at most ``ceil(k * return_share)`` in one round. The rest of
  the draw is fresh stream prompts, as before.
* Eligibility: only prompts solved in an earlier epoch than the stream's current one, oldest first.
* Never short: when the stream has no live prompt left, the rest of the draw comes from the pool, oldest first,
  whatever the epoch, so PC is short of prompts only when the pool is empty too.
* A returned prompt is piloted like any other (band, buffer, commits). If its pilot reaches p_solve again it goes
  back to the end of the pool (``evicted`` again, counted in the ledger's ``evicted``); otherwise (an early-wave
  decision included: eviction needs the full pilot) it is un-evicted and rejoins the stream from the next epoch
  (``PromptStream.unevict``).
* Visible: the pilot row of a returned prompt has ``returned = true`` and its reason starts with ``returned from the
  easy pool;`` (``reasons.py``); ``steps.returned`` counts returns per step.
* State: the pool (prompt ids and the epoch each was solved in, in FIFO order) and the credit, through
  ``state_dict``; the stream checkpoints the un-evictions. A resumed run continues bit for bit.

Worked example: ``return_share = 0.125``, rounds of 12 pilots (1.5 credit each): credit 1.5 -> take 1 (0.5 left),
2.0 -> take 2 (0 left), 1.5 -> take 1: 4 returns in the first 36 pilots (36 * 0.125 = 4.5), never more than
ceil(1.5) = 2 in a round.
"""

from __future__ import annotations

import math
from abc import ABC
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..config.allocator import STRATEGY_KINDS
from ..errors import field_error

if TYPE_CHECKING:
    from ..config.allocator import AllocatorConfig
    from .buffer import BufferEntry
    from .step import CallResult, StepContext

# Inclusive band edges under float error (the same tolerance as the static band's).
EPS = 1e-9

SCREEN_KIND = "screen"
"""The history prior's kind (``screen.py``): asked by every method's draws, so it is not one of PC's five."""

STRATEGIES: dict[str, dict[str, type[Strategy]]] = {kind: {} for kind in (*STRATEGY_KINDS, SCREEN_KIND)}


class Strategy(ABC):
    """One choice of one of PC's four decisions. Stateless across steps unless it overrides ``state_dict``."""

    kind: ClassVar[str]
    name: ClassVar[str]

    def __init__(self, config: AllocatorConfig) -> None:
        self.config = config

    @classmethod
    def check_config(cls, config: AllocatorConfig) -> None:
        """Refuse settings this strategy cannot run (a :class:`ConfigError` naming the field and the fix)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def register_strategy(kind: str, name: str) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator: make a strategy selectable by ``AllocatorConfig.<kind>_strategy``."""
    if kind not in STRATEGIES:
        raise ValueError(f"unknown strategy kind {kind!r}; kinds: {list(STRATEGY_KINDS)}")

    def deco(cls: type[Strategy]) -> type[Strategy]:
        if name in STRATEGIES[kind] and STRATEGIES[kind][name] is not cls:
            raise ValueError(f"{kind} strategy {name!r} is already registered by {STRATEGIES[kind][name].__name__}")
        cls.kind, cls.name = kind, name
        STRATEGIES[kind][name] = cls
        return cls

    return deco


def make_strategy(kind: str, config: AllocatorConfig) -> Strategy:
    return STRATEGIES[kind][getattr(config, f"{kind}_strategy")](config)


# ---- band ----------------------------------------------------------------------------------------------------------
class BandStrategy(Strategy):
    def keep(self, p_hat: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
        """Return (kept mask, kept-only-by-widening mask, band used) for one round's screened pilots."""
        lo, hi = self.config.p_lower, self.config.p_upper
        static = (p_hat >= lo - EPS) & (p_hat <= hi + EPS)
        return static, np.zeros_like(static), (lo, hi)


@register_strategy("band", "static")
class StaticBand(BandStrategy):
    """The paper's band [p_lower, p_upper], whatever the batch needs."""


@register_strategy("band", "adaptive")
class AdaptiveBand(BandStrategy):
    """Widen the band to admit the ``need`` highest-variance pilots outside it (never p_hat of 0 or 1).

    Worked example: band [0.125, 0.75], need 3, static survivors 1 (p = 0.5), outside pilots p = 0.0, 0.0625,
    0.8125, 0.875, 1.0. Candidates (0 < p < 1): 0.0625 (var 0.059), 0.8125 (0.152), 0.875 (0.109); the 2 missing
    are 0.8125 and 0.875, so the band becomes [0.125, 0.875] and keeps 0.5, 0.8125, 0.875.
    """

    def keep(self, p_hat, need):
        unchanged = super().keep(p_hat, need)
        static, _, (lo, hi) = unchanged
        missing = need - int(static.sum())
        candidate = ~static & (p_hat > EPS) & (p_hat < 1.0 - EPS)
        idx = np.flatnonzero(candidate)
        if missing <= 0 or idx.shape[0] == 0:
            return unchanged
        var = p_hat[idx] * (1.0 - p_hat[idx])
        chosen = idx[np.lexsort((idx, -var))[:missing]]  # highest variance first, stream order on ties
        new_lo = min(lo, float(p_hat[chosen].min()))
        new_hi = max(hi, float(p_hat[chosen].max()))
        widened = candidate & (p_hat >= new_lo - EPS) & (p_hat <= new_hi + EPS)
        return static | widened, widened, (new_lo, new_hi)


# ---- sampling ------------------------------------------------------------------------------------------------------
class SamplingStrategy(Strategy):
    def pilots(self, need: int) -> int:
        """Fresh prompts to pilot this round, given the survivors the step still lacks."""
        return self.config.sampling_batch

    def update(self, screened: int, kept: int) -> None:
        """Learn from one round's screen (``kept`` of ``screened`` pilots survived)."""
        return None

    def summary(self) -> float | None:
        """The current survival estimate, for the ledger (None when the strategy keeps none)."""
        return None


@register_strategy("sampling", "fixed")
class FixedSampling(SamplingStrategy):
    """The paper's b_g = ceil(s * b_t) pilots every round."""


@register_strategy("sampling", "survival")
class SurvivalSampling(SamplingStrategy):
    """Pilot ``ceil(margin * need / survival)`` prompts (at most b_g; none if nothing is needed).

    ``survival`` is an exponential average (weight 1/2 on the newest round) of kept / screened, starting at
    b_t / b_g (what the paper's s assumes). Worked example: b_t 16, b_g 48, margin 1.25, survival 0.40, need 10:
    ceil(1.25 * 10 / 0.40) = 32 pilots instead of 48.
    """

    def __init__(self, config):
        super().__init__(config)
        self.survival = config.train_batch / config.sampling_batch

    def pilots(self, need):
        if need <= 0:
            return 0
        want = math.ceil(self.config.survival_margin * need / max(self.survival, 1e-6) - 1e-9)
        return int(min(self.config.sampling_batch, max(1, want)))

    def update(self, screened, kept):
        if screened > 0:
            self.survival = 0.5 * self.survival + 0.5 * (kept / screened)

    def summary(self):
        return self.survival

    def state_dict(self):
        return {"survival": self.survival}

    def load_state_dict(self, state):
        self.survival = float(state["survival"])


# ---- pilot waves ---------------------------------------------------------------------------------------------------
class PilotStrategy(Strategy):
    def waves(self) -> tuple[int, ...]:
        """Rollouts per pilot wave; they sum to n_pilot."""
        return (self.config.pilot_n,)

    def decided_early(self, mean: np.ndarray, rmin: np.ndarray, rmax: np.ndarray) -> np.ndarray:
        """Mask of first-wave pilots decided without a second wave (rewards all equal, p_hat outside the band)."""
        return np.zeros(mean.shape[0], bool)


@register_strategy("pilot", "single")
class SinglePilot(PilotStrategy):
    """The paper: n_pilot rollouts per screened prompt in one go."""


@register_strategy("pilot", "sequential")
class SequentialPilot(PilotStrategy):
    """``pilot_wave`` rollouts first; the rest only for prompts the first wave left undecided."""

    @classmethod
    def check_config(cls, config):
        if config.pilot_wave >= config.pilot_n:
            raise field_error(config, "pilot_wave", f"leaves no second wave (n_pilot={config.pilot_n})",
                              f"set pilot_wave < n_pilot, e.g. pilot_wave={max(1, config.pilot_n // 4)}")

    def waves(self):
        w = self.config.pilot_wave
        return (w, self.config.pilot_n - w)

    def decided_early(self, mean, rmin, rmax):
        cfg = self.config
        flat = rmax <= rmin  # every reward of the wave equal: p_hat is exactly the reward value (0 or 1 when binary)
        outside = (mean < cfg.p_lower - EPS) | (mean > cfg.p_upper + EPS)
        return flat & outside


# ---- commit sizes --------------------------------------------------------------------------------------------------
class CommitStrategy(Strategy):
    def sizes(self, entries: list[BufferEntry]) -> np.ndarray:
        """Commit rollouts per popped entry (int64, aligned with ``entries``)."""
        return np.full(len(entries), self.config.commit_n, np.int64)


@register_strategy("commit", "uniform")
class UniformCommit(CommitStrategy):
    """The paper: n_commit rollouts for every kept prompt."""


@register_strategy("commit", "variance")
class VarianceCommit(CommitStrategy):
    """``len(entries) * commit_mean`` rollouts spread in proportion to the pilot std, within [min, max]."""

    @classmethod
    def check_config(cls, config):
        if not (config.commit_min <= config.commit_mean_n <= config.commit_max_n):
            raise field_error(config, "commit_mean",
                              f"must lie in [commit_min={config.commit_min}, commit_max={config.commit_max_n}]",
                              "choose commit_min <= commit_mean <= commit_max")

    def sizes(self, entries):
        cfg = self.config
        std = np.fromiter((e.std for e in entries), np.float64, len(entries))
        return proportional_sizes(std, len(entries) * cfg.commit_mean_n, cfg.commit_min, cfg.commit_max_n)


def proportional_sizes(weight: np.ndarray, budget: int, floor: int, cap: int) -> np.ndarray:
    """Integers in [floor, cap] summing to ``budget`` (clipped to [k floor, k cap]), proportional to ``weight``.

    Water-filling: give every item ``floor``, spread the rest in proportion to weight, clamp items that exceed
    ``cap`` and respread what they gave back; all-zero weights spread evenly. Integers come from the largest
    remainders, ties to the earlier item. Worked example: weights (0.5, 0.25, 0), budget 24, floor 4, cap 16:
    4 each leaves 12, split 2:1 -> (12, 8, 4) before clamping; nothing exceeds 16, so (12, 8, 4).
    """
    k = weight.shape[0]
    if k == 0:
        return np.zeros(0, np.int64)
    budget = int(min(max(budget, k * floor), k * cap))
    w = np.maximum(weight.astype(np.float64), 0.0)
    if w.sum() <= 0:
        w = np.ones(k)
    alloc = np.full(k, float(floor))
    free = np.ones(k, bool)
    rest = float(budget - k * floor)
    for _ in range(k):  # each pass clamps at least one item or stops
        share = w[free] / w[free].sum() if w[free].sum() > 0 else np.full(int(free.sum()), 1.0 / free.sum())
        trial = alloc.copy()
        trial[free] = floor + rest * share
        over = free & (trial > cap)
        if not over.any():
            alloc = trial
            break
        alloc[over] = cap
        rest -= float((cap - floor) * over.sum())
        free &= ~over
        if not free.any():
            break
    base = np.floor(alloc + 1e-9).astype(np.int64)
    short = budget - int(base.sum())
    if short > 0:
        frac = alloc - base
        frac[base >= cap] = -1.0  # a capped item takes no remainder
        order = np.lexsort((np.arange(k), -frac))
        base[order[:short]] += 1
    return base


# ---- eviction ------------------------------------------------------------------------------------------------------
class EvictionStrategy(Strategy):
    def draw(self, ctx: StepContext, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A round's ``k`` pilot prompts: (ids, the epoch each was drawn in, mask of those back from the easy pool).
        Fewer only when nothing is left to draw."""
        ids, epochs = ctx.draw(k)
        return ids, epochs, np.zeros(ids.shape[0], bool)

    def settle(self, ctx: StepContext, result: CallResult, rows: np.ndarray, epochs: np.ndarray,
               evicted: np.ndarray, returned: np.ndarray) -> None:
        """After pilots ``rows`` of ``result`` are decided (``ctx.evict`` already done for the ``evicted`` ones):
        what becomes of the solved and the returned prompts. ``epochs``, ``evicted``, ``returned`` align with rows."""
        return None


@register_strategy("eviction", "strict")
class StrictEviction(EvictionStrategy):
    """The paper: a prompt whose pilot reaches p_solve leaves the stream from the next epoch, for good."""

    @classmethod
    def check_config(cls, config):
        default = type(config)().return_share
        if config.return_share != default:  # the default counts as unset: presets spell it out with strict
            raise field_error(config, "return_share",
                              "is an easy_pool setting: strict eviction never brings a solved prompt back, so it "
                              "would be ignored", f"drop it (or leave it at its default {default}), or set "
                              "eviction_strategy=easy_pool")


@register_strategy("eviction", "easy_pool")
class EasyPoolEviction(EvictionStrategy):
    """Solved prompts wait in a FIFO easy pool; ``return_share`` of each round's pilots come back from it (a carried
    credit makes the share exact), and all of them once the stream has no live prompt left (module docstring)."""

    def __init__(self, config):
        super().__init__(config)
        self.pool = np.zeros(0, np.int64)  # prompt ids, oldest eviction first
        self.pool_epochs = np.zeros(0, np.int64)  # the epoch each was drawn in when it was solved
        self.credit = 0.0

    @classmethod
    def check_config(cls, config):
        if not config.evict:
            raise field_error(config, "eviction_strategy",
                              "needs eviction on: with evict=False no prompt is marked solved, so the easy pool "
                              "stays empty", "set evict=true, or eviction_strategy=strict")

    def _take(self, eligible: np.ndarray, count: int) -> np.ndarray:
        """Remove and return the first ``count`` eligible pool prompts (FIFO order)."""
        idx = np.flatnonzero(eligible)[: max(count, 0)]
        taken = self.pool[idx]
        if idx.shape[0]:
            keep = np.ones(self.pool.shape[0], bool)
            keep[idx] = False
            self.pool, self.pool_epochs = self.pool[keep], self.pool_epochs[keep]
        return taken

    def draw(self, ctx, k):
        if k <= 0:
            return super().draw(ctx, k)
        epoch = ctx.epoch
        self.credit += k * self.config.return_share
        quota = math.floor(self.credit)
        self.credit -= quota
        back = self._take(self.pool_epochs < epoch, quota)
        ids, epochs = ctx.draw(k - back.shape[0])
        short = k - back.shape[0] - ids.shape[0]
        if short > 0:  # the stream has no live prompt left: the rest comes from the pool, whatever the epoch
            back = np.concatenate([back, self._take(np.ones(self.pool.shape[0], bool), short)])
        ctx.ledger.returned += int(back.shape[0])
        # A returned prompt counts as drawn where the stream stands after the draw: solved again, it is eligible
        # once the stream has moved past that epoch; not solved again, it is streamed from the next one.
        drawn = np.full(back.shape[0], ctx.epoch, np.int64)
        return (np.concatenate([ids, back]), np.concatenate([epochs, drawn]),
                np.concatenate([np.zeros(ids.shape[0], bool), np.ones(back.shape[0], bool)]))

    def settle(self, ctx, result, rows, epochs, evicted, returned):
        if evicted.any():  # solved (fresh or returned): to the end of the pool, once per prompt
            ids, eps = result.call.prompt_ids[rows[evicted]], epochs[evicted]
            _, first = np.unique(ids, return_index=True)
            first.sort()
            new = first[~np.isin(ids[first], self.pool)]
            self.pool = np.concatenate([self.pool, ids[new]])
            self.pool_epochs = np.concatenate([self.pool_epochs, eps[new].astype(np.int64)])
        again = returned & ~evicted  # back from the pool, not solved again: back in the stream from the next epoch
        ctx.unevict(result, rows[again], epochs[again])

    def state_dict(self):
        return {"pool": self.pool.tolist(), "pool_epochs": self.pool_epochs.tolist(), "credit": self.credit}

    def load_state_dict(self, state):
        self.pool = np.asarray(state["pool"], np.int64).reshape(-1)
        self.pool_epochs = np.asarray(state["pool_epochs"], np.int64).reshape(-1)
        self.credit = float(state["credit"])
