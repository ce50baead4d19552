"""Allocation methods: GRPO, DAPO and Pilot-Commit, each a small registered class.

A method describes ONE training step as a generator: it yields an :class:`EngineCall`, receives the rewards
of that call as a :class:`CallResult`, decides, and yields the next call until the step is complete. The
:class:`~pc_pipelines.allocation.step.StepContext` it is handed is all it may touch: its operations (draw prompts,
make engine calls, train, admit to / pop from the buffer, evict, record observations; the table in ``step.py``) do
the bookkeeping (rollout ids, ledger, observations, buffer, stream), so a method is only its protocol. That keeps
docs/DESIGN.md section 3 readable here, one method per class:

* GRPO: one round of b_t fresh prompts x n; every group is trained (zero-variance groups just get zero advantage).
* DAPO: rounds of b_g fresh prompts x n; keep groups whose rewards are not all equal, in stream order, until b_t
  are kept or ``max_rounds`` is hit; informative groups beyond b_t are sampled but not trained (``surplus``).
* PC, binding on: a round is ONE engine call holding commits for up to (b_t - committed) buffered prompts
  (x n_commit) and pilots for b_g fresh prompts (x n_pilot). Pilots are screened after the call, so step 0
  (empty buffer) always needs a second round. Binding off: per round a pilot call, the screen, then a commit call.

The replay buffer R (``buffer.py``) holds at most one live entry per prompt (a newer kept pilot of a prompt
replaces its older entry, counted ``buffer_replaced``), a prompt trained in one round of a step is never popped
again in that step, so no prompt trains twice in one step; and R persists across epoch boundaries as in the
paper's Algorithm 1 (the recipe empties it at epoch end), the age rule alone retiring entries. The reasons are
in ``buffer.py``'s docstring.

Departures from the paper's recipe, all deliberate (docs/DESIGN.md section 3): shortfall never raises (verl's DAPO
does): at ``max_rounds`` the step trains on what it has and is flagged; a step with zero groups still advances
the step counter so buffer ages advance. A pool exhausted by eviction ends the step early (also a shortfall;
``easy_pool`` eviction then draws its pilots back from the easy pool, ``strategies.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..errors import ConfigError, field_error
from .step import CallResult, StepContext, StepPlan
from .strategies import (
    STRATEGIES,
    STRATEGY_KINDS,
    BandStrategy,
    CommitStrategy,
    EvictionStrategy,
    PilotStrategy,
    SamplingStrategy,
    Strategy,
    make_strategy,
)
from .types import Decision, Rule, Stage

if TYPE_CHECKING:
    from ..config.allocator import AllocatorConfig

# Inclusive band edges under float error: p_hat = 2/16 must count as inside [0.125, 0.75].
_EPS = 1e-9


class AllocationMethod(ABC):
    """One way of turning engine calls into a training batch. Stateless across steps unless it says so."""

    name: ClassVar[str]
    uses_pilots: ClassVar[bool] = False  # PC-style (pilot/commit, buffer, eviction) or full groups
    simulator_only: ClassVar[bool] = False  # needs what only the simulator knows (true pass rates)

    def __init__(self, config: AllocatorConfig) -> None:
        self.config = config

    @classmethod
    def check_config(cls, config: AllocatorConfig) -> None:
        """Refuse settings this method cannot run (a :class:`ConfigError` naming the field and the fix). A method
        without pilots refuses PC's eviction settings away from their defaults: it would ignore them."""
        if cls.uses_pilots:
            return
        defaults = type(config)()
        for name in ("eviction_strategy", "return_share"):
            if getattr(config, name) != getattr(defaults, name):
                raise field_error(config, name, f"is a Pilot-Commit setting: a {config.method} run draws no pilots "
                                  "and evicts nothing, so it would be ignored",
                                  f"drop it (default {getattr(defaults, name)!r}), or set method=pc")

    @abstractmethod
    def plan_step(self, ctx: StepContext) -> StepPlan:
        """Yield engine calls for one step; record decisions and trained groups on ``ctx``."""

    def band(self) -> tuple[float | None, float | None]:
        """The keep band this step uses; (None, None) for methods without one."""
        return (None, None)

    # Methods with cross-step state (later strategies) override these; the allocator checkpoints them.
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


METHODS: dict[str, type[AllocationMethod]] = {}


def register_method(name: str) -> Callable[[type[AllocationMethod]], type[AllocationMethod]]:
    """Class decorator: make a method selectable by ``AllocatorConfig.method`` (like verl's register_adv_est)."""

    def deco(cls: type[AllocationMethod]) -> type[AllocationMethod]:
        if name in METHODS and METHODS[name] is not cls:
            raise ValueError(f"allocation method {name!r} is already registered by {METHODS[name].__name__}")
        cls.name = name
        METHODS[name] = cls
        return cls

    return deco


def get_method(name: str) -> type[AllocationMethod]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown allocation method {name!r}; registered: {sorted(METHODS)}") from None


@register_method("grpo")
class GRPO(AllocationMethod):
    def plan_step(self, ctx):
        ids, _ = ctx.draw(self.config.train_batch)
        if ids.shape[0] == 0:
            return
        ctx.begin_round()
        result = yield ctx.make_call([(ids, self.config.n, Stage.FULL)])
        rows = np.arange(len(result))
        ctx.train_full(result, rows)
        ctx.observe(result, rows, np.full(rows.shape[0], Decision.TRAINED, np.int8))


@register_method("dapo")
class DAPO(AllocationMethod):
    def plan_step(self, ctx):
        cfg = self.config
        kept = 0
        while kept < cfg.train_batch and ctx.rounds < cfg.max_rounds:
            ids, _ = ctx.draw(cfg.sampling_batch)
            if ids.shape[0] == 0:
                break
            ctx.begin_round()
            result = yield ctx.make_call([(ids, cfg.n, Stage.FULL)])
            informative = result.max > result.min  # rewards not all equal
            # The first (b_t - kept) informative groups in stream order are trained; later ones are surplus.
            rank = np.cumsum(informative)
            train = informative & (rank <= cfg.train_batch - kept)
            decision = np.where(
                train,
                Decision.TRAINED,
                np.where(
                    informative,
                    Decision.SURPLUS,
                    np.where(result.mean >= 0.5, Decision.SKIPPED_EASY, Decision.DEFERRED_HARD),
                ),
            ).astype(np.int8)
            ctx.train_full(result, np.flatnonzero(train))
            ctx.observe(result, np.arange(len(result)), decision)
            ctx.ledger.kept += int(informative.sum())
            kept += int(train.sum())


@register_method("pc")
class PilotCommit(AllocationMethod):
    """Pilot-Commit with its five strategies (band, sampling, pilot waves, commit sizes, eviction; the paper's by
    default).

    A round with binding on is one engine call holding the commits of buffered prompts and the FIRST pilot wave
    of fresh prompts; with sequential pilots a second call in the same round samples the later wave for the
    prompts the first left undecided. Binding off: the pilot wave(s), the screen, then the commit call.
    """

    uses_pilots = True

    @classmethod
    def check_config(cls, config: AllocatorConfig) -> None:
        if config.pilot_n < 1:
            raise field_error(config, "n_pilot", "PC needs at least one pilot rollout per prompt to estimate p_hat",
                              "set n_pilot >= 1")
        if config.commit_n < 1:
            raise field_error(config, "n_pilot",
                              f"leaves n_commit = n - n_pilot = {config.commit_n}; PC needs at least one commit rollout",
                              f"set n_pilot < n={config.n} (paper: n=64 as 16+48)")
        if config.max_rounds < 2:
            raise field_error(config, "max_rounds",
                              "PC needs at least 2 rounds: with an empty buffer the first round can only pilot",
                              "set max_rounds >= 2 (default 10)")
        for kind, name in config.strategies.items():
            STRATEGIES[kind][name].check_config(config)

    def __init__(self, config: AllocatorConfig) -> None:
        super().__init__(config)
        self.strategies: dict[str, Strategy] = {kind: make_strategy(kind, config) for kind in STRATEGY_KINDS}
        self.band_strategy: BandStrategy = self.strategies["band"]  # type: ignore[assignment]
        self.sampling: SamplingStrategy = self.strategies["sampling"]  # type: ignore[assignment]
        self.pilot: PilotStrategy = self.strategies["pilot"]  # type: ignore[assignment]
        self.commit: CommitStrategy = self.strategies["commit"]  # type: ignore[assignment]
        self.eviction: EvictionStrategy = self.strategies["eviction"]  # type: ignore[assignment]

    def band(self) -> tuple[float, float]:
        return (self.config.p_lower, self.config.p_upper)

    def state_dict(self) -> dict:
        return {kind: st for kind, s in self.strategies.items() if (st := s.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        for kind, s in self.strategies.items():
            if kind in state:
                s.load_state_dict(state[kind])

    def pilot_need(self, ctx: StepContext, committed: int) -> int:
        """Survivors still lacking: enough to finish this step (b_t - committed, counting this round's commits)
        and to fill the next one (b_t), less what the buffer holds after this round's pops."""
        b_t = self.config.train_batch
        return max(0, (b_t - committed) + b_t - ctx.buffered())

    def screen(
        self,
        ctx: StepContext,
        parts: list[tuple[CallResult, np.ndarray]],
        epochs: np.ndarray,
        need: int,
        returned: np.ndarray,
    ) -> int:
        """Band and eviction for pilots whose waves are done (two independent decisions, docs/DESIGN.md section 3).

        ``parts`` holds (result, rows) per wave, row-aligned; ``epochs`` and ``returned`` (back from the easy pool)
        align with the rows; returns how many were kept.
        """
        cfg = self.config
        last, rows = parts[-1]
        n = sum(r.counts[w] for r, w in parts)
        n_correct = sum(r.sum[w] for r, w in parts)
        p_hat = n_correct / n
        kept, widened, (lo, hi) = self.band_strategy.keep(p_hat, need)
        decision = np.where(
            kept, Decision.KEPT, np.where(p_hat < lo - _EPS, Decision.DEFERRED_HARD, Decision.SKIPPED_EASY)
        ).astype(np.int8)
        evicted = (p_hat >= cfg.p_solve - _EPS) if cfg.evict else np.zeros(rows.shape[0], bool)
        ctx.admit(last, rows[kept], [(r, w[kept]) for r, w in parts[:-1]])
        ctx.evict(last, rows[evicted], epochs[evicted])
        self.eviction.settle(ctx, last, rows, epochs, evicted, returned)
        ctx.record(  # the last wave's own rollouts; the decision read every wave's (its evidence)
            prompt_id=last.call.prompt_ids[rows],
            call=last.call,
            stage=last.call.stages[rows],
            n=last.counts[rows],
            n_correct=last.sum[rows],
            evidence=(n, n_correct),
            decision=decision,
            evicted=evicted,
            lag=None,
            wave=last.call.waves[rows],
            rule=np.where(widened, Rule.ADAPTIVE_BAND, Rule.BAND),
            returned=returned,
            band=(lo, hi),
        )
        led = ctx.ledger
        led.widened += int(widened.sum())
        led.band_lower, led.band_upper = min(led.band_lower, lo), max(led.band_upper, hi)  # set from band()
        return int(kept.sum())

    def finish_pilots(
        self, ctx: StepContext, first: CallResult, rows: np.ndarray, epochs: np.ndarray, need: int,
        returned: np.ndarray,
    ) -> StepPlan:
        """Given the first wave (``rows`` of ``first``): decide early, sample the later wave, screen, learn.
        ``epochs`` and ``returned`` align with ``rows`` (as the eviction strategy's ``draw`` gave them)."""
        waves = self.pilot.waves()
        if rows.shape[0] == 0:
            return
        if len(waves) == 1:
            kept = self.screen(ctx, [(first, rows)], epochs, need, returned)
        else:
            early = self.pilot.decided_early(first.mean[rows], first.min[rows], first.max[rows])
            flat = np.flatnonzero(early)
            go = ctx.prior_continues(first.call.prompt_ids[rows[flat]], first.mean[rows[flat]] * waves[0], waves[0])
            if go is not None:
                early[flat[go]] = False
            e_rows = rows[early]
            if e_rows.shape[0]:
                mean = first.mean[e_rows]
                decision = np.where(mean > 0.5, Decision.SKIPPED_EASY, Decision.DEFERRED_HARD).astype(np.int8)
                ctx.observe(first, e_rows, decision, rule=Rule.EARLY_WAVE, returned=returned[early])
                self.eviction.settle(ctx, first, e_rows, epochs[early], np.zeros(e_rows.shape[0], bool),
                                     returned[early])
                ctx.ledger.early_decided += int(e_rows.shape[0])
                ctx.ledger.pilot_rollouts_saved += int(e_rows.shape[0]) * sum(waves[1:])
            u_rows = rows[~early]
            kept = 0
            if u_rows.shape[0]:  # the first wave's own row (every wave is its own observation), then the later wave
                ctx.observe(first, u_rows, np.full(u_rows.shape[0], Decision.CONTINUED, np.int8))
                second = yield ctx.make_call([(first.call.prompt_ids[u_rows], waves[1], Stage.PILOT)], wave=1)
                kept = self.screen(ctx, [(first, u_rows), (second, np.arange(len(second)))], epochs[~early], need,
                                   returned[~early])
        self.sampling.update(int(rows.shape[0]), kept)

    def plan_step(self, ctx):
        cfg = self.config
        first_wave = self.pilot.waves()[0]
        committed = 0
        while committed < cfg.train_batch and ctx.rounds < cfg.max_rounds:
            if cfg.binding:
                commits = ctx.pop_buffer(cfg.train_batch - committed)
                need = self.pilot_need(ctx, committed + len(commits))
                pilot_ids, pilot_epochs, pilot_returned = self.eviction.draw(ctx, self.sampling.pilots(need))
                if not commits and pilot_ids.shape[0] == 0:
                    break  # empty buffer and a fully evicted pool: nothing can fill the batch
                ctx.begin_round()
                result = yield ctx.make_call(
                    [
                        (np.array([e.prompt_id for e in commits], np.int64), self.commit.sizes(commits), Stage.COMMIT),
                        (pilot_ids, first_wave, Stage.PILOT),
                    ]
                )
                ctx.train_commits(result, np.arange(len(commits)), commits)
                yield from self.finish_pilots(ctx, result, np.arange(len(commits), len(result)), pilot_epochs, need,
                                              pilot_returned)
            else:
                need = self.pilot_need(ctx, committed + min(ctx.buffered(), cfg.train_batch - committed))
                pilot_ids, pilot_epochs, pilot_returned = self.eviction.draw(ctx, self.sampling.pilots(need))
                if pilot_ids.shape[0]:
                    ctx.begin_round()
                    result = yield ctx.make_call([(pilot_ids, first_wave, Stage.PILOT)])
                    yield from self.finish_pilots(ctx, result, np.arange(len(result)), pilot_epochs, need,
                                                  pilot_returned)
                commits = ctx.pop_buffer(cfg.train_batch - committed)
                if not commits and pilot_ids.shape[0] == 0:
                    break
                if not pilot_ids.shape[0]:
                    ctx.begin_round()  # a commit-only round (the pool is exhausted, or nothing was needed)
                if commits:
                    result = yield ctx.make_call(
                        [(np.array([e.prompt_id for e in commits], np.int64), self.commit.sizes(commits), Stage.COMMIT)]
                    )
                    ctx.train_commits(result, np.arange(len(commits)), commits)
            committed += len(commits)
        ctx.ledger.survival = self.sampling.summary()


@register_method("oracle")
class Oracle(AllocationMethod):
    """Simulator-only bound: n rollouts for each of the b_t prompts whose true pass rate is nearest 0.5, no pilots.

    It spends nothing on finding informative prompts, so it is the limit any allocator can reach (the gap to it is
    PC's overhead). Only the simulator knows true pass rates: it sets :attr:`pass_rates`
    (:class:`pc_pipelines.simulator.Simulation`); the real loop has no oracle."""

    simulator_only = True

    def __init__(self, config: AllocatorConfig) -> None:
        super().__init__(config)
        self.pass_rates: Callable[[], np.ndarray] | None = None
        """Every prompt's true pass rate, by prompt id (set by whoever knows them)."""

    def plan_step(self, ctx):
        if self.pass_rates is None:
            raise ConfigError("method 'oracle' needs true pass rates: it only runs inside Simulation.")
        distance = np.abs(self.pass_rates() - 0.5)
        k = self.config.train_batch
        ids = np.argpartition(distance, k - 1)[:k]
        ids = ids[np.lexsort((ids, distance[ids]))]  # nearest first, prompt id breaks ties: a total order
        ctx.begin_round()
        result = yield ctx.make_call([(ids.astype(np.int64), self.config.n, Stage.FULL)])
        rows = np.arange(len(result))
        ctx.train_full(result, rows)
        ctx.observe(result, rows, np.full(rows.shape[0], Decision.TRAINED, np.int8))


def training_methods() -> list[str]:
    """The registered methods a real training run can use (every one but the simulator-only), in registry order."""
    return [name for name, cls in METHODS.items() if not cls.simulator_only]

