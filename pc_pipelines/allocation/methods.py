"""Allocation methods: GRPO, DAPO and Pilot-Commit, each a small registered class.

A method describes ONE training step as a generator: it yields an :class:`EngineCall`, receives the rewards
of that call as a :class:`CallResult`, decides, and yields the next call until the step is complete. The
:class:`~pc_pipelines.allocation.allocator.StepContext` it is handed does the bookkeeping (rollout ids, ledger,
observations, buffer, stream), so a method is only its protocol. That keeps DESIGN.md section 3 readable here,
one method per class:

* GRPO: one round of b_t fresh prompts x n; every group is trained (zero-variance groups just get zero advantage).
* DAPO: rounds of b_g fresh prompts x n; keep groups whose rewards are not all equal, in stream order, until b_t
  are kept or ``max_rounds`` is hit; informative groups beyond b_t are sampled but not trained (``surplus``).
* PC, binding on: a round is ONE engine call holding commits for up to (b_t - committed) buffered prompts
  (x n_commit) and pilots for b_g fresh prompts (x n_pilot). Pilots are screened after the call, so step 0
  (empty buffer) always needs a second round. Binding off: per round a pilot call, the screen, then a commit call.

Departures from the paper's recipe, all deliberate (DESIGN.md section 3): shortfall never raises (verl's DAPO
does): at ``max_rounds`` the step trains on what it has and is flagged; a step with zero groups still advances
the step counter so buffer ages advance. A pool exhausted by eviction ends the step early (also a shortfall).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, ClassVar, Generator

import numpy as np

from .types import Decision, EngineCall, Stage

if TYPE_CHECKING:
    from .allocator import CallResult, StepContext
    from .config import AllocatorConfig

StepPlan = Generator[EngineCall, "CallResult", None]

# Inclusive band edges under float error: p_hat = 2/16 must count as inside [0.125, 0.75].
_EPS = 1e-9


class AllocationMethod(ABC):
    """One way of turning engine calls into a training batch. Stateless across steps unless it says so."""

    name: ClassVar[str]
    uses_pilots: ClassVar[bool] = False  # PC-style (pilot/commit, buffer, eviction) or full groups

    def __init__(self, config: "AllocatorConfig") -> None:
        self.config = config

    @abstractmethod
    def plan_step(self, ctx: "StepContext") -> StepPlan:
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
    uses_pilots = True

    def band(self) -> tuple[float, float]:
        return (self.config.p_lower, self.config.p_upper)

    def screen(self, ctx: "StepContext", result: "CallResult", rows: np.ndarray, epochs: np.ndarray) -> None:
        """Band and eviction for pilot rows: two independent decisions (DESIGN.md section 3)."""
        cfg = self.config
        lo, hi = self.band()
        p_hat = result.mean[rows]
        decision = np.where(
            p_hat < lo - _EPS, Decision.DEFERRED_HARD, np.where(p_hat > hi + _EPS, Decision.SKIPPED_EASY, Decision.KEPT)
        ).astype(np.int8)
        evicted = (p_hat >= cfg.p_solve - _EPS) if cfg.evict else np.zeros(rows.shape[0], bool)
        ctx.admit(result, rows[decision == Decision.KEPT])
        ctx.evict(result, rows[evicted], epochs[evicted])
        ctx.observe(result, rows, decision, evicted=evicted)

    def plan_step(self, ctx):
        cfg = self.config
        committed = 0
        while committed < cfg.train_batch and ctx.rounds < cfg.max_rounds:
            if cfg.binding:
                commits = ctx.pop_buffer(cfg.train_batch - committed)
                pilot_ids, pilot_epochs = ctx.draw(cfg.sampling_batch)
                if not commits and pilot_ids.shape[0] == 0:
                    break  # empty buffer and a fully evicted pool: nothing can fill the batch
                ctx.begin_round()
                result = yield ctx.make_call(
                    [
                        (np.array([e.prompt_id for e in commits], np.int64), cfg.commit_n, Stage.COMMIT),
                        (pilot_ids, cfg.pilot_n, Stage.PILOT),
                    ]
                )
                ctx.train_commits(result, np.arange(len(commits)), commits)
                self.screen(ctx, result, np.arange(len(commits), len(result)), pilot_epochs)
            else:
                pilot_ids, pilot_epochs = ctx.draw(cfg.sampling_batch)
                if pilot_ids.shape[0]:
                    ctx.begin_round()
                    result = yield ctx.make_call([(pilot_ids, cfg.pilot_n, Stage.PILOT)])
                    self.screen(ctx, result, np.arange(len(result)), pilot_epochs)
                commits = ctx.pop_buffer(cfg.train_batch - committed)
                if not commits and pilot_ids.shape[0] == 0:
                    break
                if not pilot_ids.shape[0]:
                    ctx.begin_round()  # a commit-only round (the pool is exhausted)
                if commits:
                    result = yield ctx.make_call(
                        [(np.array([e.prompt_id for e in commits], np.int64), cfg.commit_n, Stage.COMMIT)]
                    )
                    ctx.train_commits(result, np.arange(len(commits)), commits)
            committed += len(commits)
