"""The allocator: drives one method step by step and keeps the books.

The world talks to it through a narrow interface::

    allocator = Allocator(config, num_prompts=M)
    session = allocator.begin_step()
    while (call := session.next_call()) is not None:   # an EngineCall: requests (prompt_id, n, stage, wave)
        rewards = engine(call)                          # one reward array per request, in request order
        session.observe(rewards)
    outcome = session.finish()                          # trained groups, ledger, observations

or, equivalently, ``allocator.run_step(engine)``. Prompts are integer ids ``0 .. M-1`` (the loop maps them to
dataset rows). Requests may carry any ``n`` and a ``wave`` number, and a method may issue any number of calls per
round, so strategies with per-prompt rollout counts and multi-wave pilots fit without changing the interface.

State (step counter, rollout-id counter, stream position, evictions, buffer, tie-break generator, method
state) round-trips through :meth:`Allocator.state_dict` as plain JSON between steps; a step is atomic from the
checkpoint's point of view (a crash mid-step replays the step from the last checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config.allocator import AllocatorConfig
from ..errors import field_error
from .buffer import SELECTION_STRATEGIES, BufferEntry, ReplayBuffer
from .methods import METHODS, AllocationMethod, get_method
from .strategies import STRATEGIES
from .stream import PromptStream
from .types import (
    Decision,
    EngineCall,
    Observations,
    Rule,
    Stage,
    StepLedger,
    StepOutcome,
    TrainedGroup,
)

STATE_VERSION = 1


class AllocatorError(RuntimeError):
    """The allocator was driven in a way its protocol does not allow (the message says what to do)."""


def check_config(config: AllocatorConfig) -> None:
    """The checks of ``config`` that need the registries: its method, buffer selection and PC strategies are
    registered names, and the method (with its strategies) accepts the settings (PC: at least one pilot and one
    commit rollout, two rounds, ...). :class:`Allocator` runs it; so do the commands that resolve a config from
    their user, before any work starts. Raises :class:`~pc_pipelines.errors.ConfigError` naming field and fix."""
    if config.method not in METHODS:
        raise field_error(config, "method", "unknown method", f"use one of {sorted(METHODS)}")
    if config.selection not in SELECTION_STRATEGIES:
        raise field_error(config, "selection", "unknown buffer selection strategy",
                          f"use one of {sorted(SELECTION_STRATEGIES)}")
    for kind, registered in STRATEGIES.items():
        if getattr(config, f"{kind}_strategy") not in registered:
            raise field_error(config, f"{kind}_strategy", f"unknown {kind} strategy", f"use one of {sorted(registered)}")
    METHODS[config.method].check_config(config)


def tied_std(total: np.ndarray, sq: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Population std from sums, rounded so that equal pass rates tie exactly in the buffer's total order."""
    mean = total / n
    return np.round(np.sqrt(np.maximum(sq / n - mean**2, 0.0)), 12)


class CallResult:
    """The rewards of one engine call, with per-request statistics computed once, vectorized."""

    __slots__ = ("call", "flat", "offsets", "counts", "sum", "sq", "mean", "std", "min", "max")

    def __init__(self, call: EngineCall, rewards: Sequence[np.ndarray] | np.ndarray) -> None:
        self.call = call
        expected = call.n
        if isinstance(rewards, np.ndarray) and rewards.ndim == 2:
            rewards = list(rewards)  # one row per request
        if isinstance(rewards, np.ndarray) and rewards.ndim == 1 and rewards.dtype != object:
            # Copy: buffered pilots keep views into this array, and an engine may reuse its output buffer.
            flat = np.array(rewards, dtype=np.float64, copy=True)
            if flat.shape[0] != call.total_rollouts:
                raise AllocatorError(
                    f"engine call {call.index} of step {call.step} asked for {call.total_rollouts} rollouts in "
                    f"{len(call)} requests but a flat reward array of {flat.shape[0]} came back. Fix: return one "
                    "reward per requested rollout, in request order."
                )
            counts = expected.copy()
        else:
            if len(rewards) != len(call):
                raise AllocatorError(
                    f"engine call {call.index} of step {call.step} has {len(call)} requests but {len(rewards)} "
                    "reward arrays came back. Fix: return one reward array per request, in request order."
                )
            parts = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rewards]
            counts = np.fromiter((p.shape[0] for p in parts), np.int64, len(parts))
            bad = np.flatnonzero(counts != expected)
            if bad.shape[0]:
                i = int(bad[0])
                raise AllocatorError(
                    f"request {i} of engine call {call.index} (step {call.step}, prompt {int(call.prompt_ids[i])}) "
                    f"asked for {int(expected[i])} rollouts but {int(counts[i])} rewards came back. Fix: the engine "
                    "must return exactly n rollouts per request (score a failed generation as reward 0)."
                )
            flat = np.concatenate(parts) if parts else np.zeros(0)
        if not np.all(np.isfinite(flat)):
            i = int(np.flatnonzero(~np.isfinite(flat))[0])
            raise AllocatorError(
                f"engine call {call.index} of step {call.step}: reward #{i} is {flat[i]}. Fix: rewards must be finite "
                "numbers (score an ungradable rollout as 0)."
            )
        self.flat = flat
        self.counts = counts
        self.offsets = np.zeros(len(call), np.int64)
        if len(call) > 1:
            np.cumsum(counts[:-1], out=self.offsets[1:])
        if len(call):
            self.sum = np.add.reduceat(flat, self.offsets)
            self.sq = np.add.reduceat(flat * flat, self.offsets)
            self.min = np.minimum.reduceat(flat, self.offsets)
            self.max = np.maximum.reduceat(flat, self.offsets)
        else:
            self.sum = self.sq = self.min = self.max = np.zeros(0)
        self.mean = self.sum / counts
        self.std = tied_std(self.sum, self.sq, counts)

    def __len__(self) -> int:
        return len(self.call)

    def rewards(self, i: int) -> np.ndarray:
        o = int(self.offsets[i])
        return self.flat[o : o + int(self.counts[i])]


class StepContext:
    """Per-step bookkeeping handed to the method: ids, ledger, observations, buffer and stream access."""

    def __init__(self, allocator: Allocator, step: int) -> None:
        self.allocator = allocator
        self.config = allocator.config
        self.step = step
        self.ledger = StepLedger(step=step)
        lo, hi = allocator.method.band()
        self.ledger.band_lower, self.ledger.band_upper = lo, hi
        self.groups: list[TrainedGroup] = []
        # Per trained group, aligned with ``groups``: size, reward sum, reward sum of squares (for the ledger's
        # reward std without concatenating reward arrays).
        self._gstats: list[np.ndarray] = []
        self.evicted_prompts: list[int] = []
        self.replaced: list[BufferEntry] = []  # buffer entries a newer pilot of their prompt replaced this step
        self.trained_prompts: set[int] = set()  # prompts already in this step's batch: never popped again
        self._obs: list[Observations] = []
        self.rounds = 0
        self.calls = 0

    # ---- structure -------------------------------------------------------------------------------------------
    def begin_round(self) -> None:
        """Count a generation round. Methods call it just before the round's first engine call, never for a
        round that turns out to have nothing to generate, so ``rounds`` counts rounds that sampled something."""
        self.rounds += 1

    def draw(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, epochs = self.allocator.stream.take(k)
        self.ledger.prompts_consumed += int(ids.shape[0])
        return ids, epochs

    def make_call(self, parts: list[tuple[np.ndarray, int | np.ndarray, Stage]], wave: int = 0) -> EngineCall:
        """Assemble one engine call from (prompt_ids, n, stage) parts and assign contiguous rollout ids."""
        prompt_ids = np.concatenate([np.asarray(p, np.int64) for p, _, _ in parts])
        n = np.concatenate([np.broadcast_to(np.asarray(k, np.int64), (len(p),)) for p, k, _ in parts])
        stages = np.concatenate([np.full(len(p), int(s), np.int8) for p, _, s in parts])
        starts = np.empty(len(prompt_ids), np.int64)
        if len(prompt_ids):
            starts[0] = 0
            np.cumsum(n[:-1], out=starts[1:])
        starts += self.allocator.next_rollout_id
        self.allocator.next_rollout_id += int(n.sum())
        call = EngineCall(
            step=self.step,
            round=self.rounds,
            index=self.calls,
            prompt_ids=prompt_ids,
            n=n,
            stages=stages,
            rollout_starts=starts,
            waves=np.full(len(prompt_ids), wave, np.int16),
        )
        self.calls += 1
        return call

    def account(self, result: CallResult) -> None:
        """Charge every rollout the engine returned to the ledger, by stage."""
        by_stage = np.bincount(result.call.stages, weights=result.counts, minlength=3)
        self.ledger.pilot_rollouts += int(by_stage[Stage.PILOT])
        self.ledger.commit_rollouts += int(by_stage[Stage.COMMIT])
        self.ledger.full_rollouts += int(by_stage[Stage.FULL])

    # ---- decisions -------------------------------------------------------------------------------------------
    def observe(
        self,
        result: CallResult,
        rows: np.ndarray,
        decision: np.ndarray,
        evicted: np.ndarray | None = None,
        lag: np.ndarray | None = None,
        rule: Rule | np.ndarray = Rule.NONE,
    ) -> None:
        """Record one row per request in ``rows`` of one call (columnar) and count the decisions."""
        k = rows.shape[0]
        if k == 0:
            return
        call = result.call
        self.record(
            prompt_id=call.prompt_ids[rows],
            call=call,
            stage=call.stages[rows],
            n=result.counts[rows],
            n_correct=result.sum[rows],
            decision=decision,
            evicted=evicted,
            lag=lag,
            wave=call.waves[rows],
            rule=rule,
        )

    def record(
        self,
        prompt_id: np.ndarray,
        call: EngineCall,
        stage: np.ndarray,
        n: np.ndarray,
        n_correct: np.ndarray,
        decision: np.ndarray,
        evicted: np.ndarray | None,
        lag: np.ndarray | None,
        wave: np.ndarray,
        rule: Rule | np.ndarray,
    ) -> None:
        """Append observation rows (``call`` is the last call the rows' rollouts came from) and count decisions."""
        k = prompt_id.shape[0]
        if k == 0:
            return
        self._obs.append(
            Observations(
                prompt_id=np.asarray(prompt_id, np.int64),
                round=np.full(k, call.round, np.int16),
                call=np.full(k, call.index, np.int16),
                stage=np.asarray(stage, np.int8),
                n=np.asarray(n).astype(np.int32),
                n_correct=np.asarray(n_correct, np.float64),
                decision=decision.astype(np.int8, copy=False),
                evicted=np.zeros(k, bool) if evicted is None else evicted,
                lag=np.zeros(k, np.int32) if lag is None else lag.astype(np.int32),
                wave=np.asarray(wave).astype(np.int16),
                rule=np.broadcast_to(np.asarray(rule, np.int8), (k,)).copy(),
            )
        )
        counts = np.bincount(decision, minlength=len(Decision))
        self.ledger.kept += int(counts[Decision.KEPT])
        self.ledger.skipped_easy += int(counts[Decision.SKIPPED_EASY])
        self.ledger.deferred_hard += int(counts[Decision.DEFERRED_HARD])
        self.ledger.surplus += int(counts[Decision.SURPLUS])

    def train_full(self, result: CallResult, rows: np.ndarray) -> None:
        """GRPO/DAPO: each request in ``rows`` becomes a trained group on its own."""
        call = result.call
        for i, p, start, count in zip(
            rows.tolist(),
            call.prompt_ids[rows].tolist(),
            call.rollout_starts[rows].tolist(),
            result.counts[rows].tolist(),
        ):
            self.trained_prompts.add(p)
            self.groups.append(
                TrainedGroup(
                    prompt_id=p,
                    spans=((start, count),),
                    reward_parts=(result.rewards(i),),
                    born=self.step,
                    lag=0,
                    n_pilot=0,
                    n_commit=0,
                )
            )
        self._gstats.append(np.stack([result.counts[rows], result.sum[rows], result.sq[rows]], axis=1))

    def train_commits(self, result: CallResult, rows: np.ndarray, entries: list[BufferEntry]) -> None:
        """PC: each commit request joins its buffer entry's pilot rollouts into one trained group."""
        if not entries:
            return
        call = result.call
        lags = np.fromiter((self.step - e.born for e in entries), np.int32, len(entries))
        if int(lags.max()) > self.config.max_age:  # invariant: expire() runs after every step
            raise AllocatorError(f"a buffer entry would train with lag {int(lags.max())} > d={self.config.max_age}")
        for i, e, lag, start, count in zip(
            rows.tolist(), entries, lags.tolist(), call.rollout_starts[rows].tolist(), result.counts[rows].tolist()
        ):
            if e.prompt_id in self.trained_prompts:  # invariant: pop_buffer excludes prompts trained this step
                raise AllocatorError(f"prompt {e.prompt_id} would train twice in step {self.step}")
            self.trained_prompts.add(e.prompt_id)
            self.groups.append(
                TrainedGroup(
                    prompt_id=e.prompt_id,
                    spans=(*e.pilot_spans, (start, count)),
                    reward_parts=(*e.reward_parts, result.rewards(i)),
                    born=e.born,
                    lag=lag,
                    n_pilot=e.n,
                    n_commit=count,
                )
            )
        pilot = np.array([(e.n, e.reward_sum, e.reward_sq) for e in entries], np.float64)
        commit = np.stack([result.counts[rows], result.sum[rows], result.sq[rows]], axis=1)
        self._gstats.append(pilot + commit)
        self.observe(result, rows, np.full(rows.shape[0], Decision.TRAINED, np.int8), lag=lags)

    def admit(self, result: CallResult, rows: np.ndarray, earlier: list[tuple[CallResult, np.ndarray]] = ()) -> None:
        """PC: pilot survivors enter the buffer with born = this step and a seeded tie-break.

        ``rows`` index the survivors' last pilot wave in ``result``; ``earlier`` holds (result, rows) of their
        earlier waves, row-aligned with ``rows``, so an entry's pilot is every wave's rollouts, first wave first.
        """
        if rows.shape[0] == 0:
            return
        alloc = self.allocator
        parts = [*earlier, (result, rows)]
        first_id = alloc.next_entry_id
        tiebreaks = alloc.rng.random(rows.shape[0]).tolist()
        rsum = sum(r.sum[w] for r, w in parts)
        rsq = sum(r.sq[w] for r, w in parts)
        std = tied_std(rsum, rsq, sum(r.counts[w] for r, w in parts))
        entries = []
        for j in range(rows.shape[0]):
            spans = tuple((int(r.call.rollout_starts[w[j]]), int(r.counts[w[j]])) for r, w in parts)
            rewards = (
                result.rewards(int(rows[j]))
                if len(parts) == 1
                else np.concatenate([r.rewards(int(w[j])) for r, w in parts])
            )
            entries.append(
                BufferEntry(
                    entry_id=first_id + j,
                    prompt_id=int(result.call.prompt_ids[rows[j]]),
                    born=self.step,
                    rollout_start=spans[0][0],
                    rewards=rewards,
                    std=float(std[j]),
                    tiebreak=tiebreaks[j],
                    reward_sum=float(rsum[j]),
                    reward_sq=float(rsq[j]),
                    spans=spans if len(parts) > 1 else (),
                )
            )
        alloc.next_entry_id += len(entries)
        replaced = alloc.buffer.add(entries)  # one live entry per prompt: the newer pilot replaces the older entry
        self.replaced.extend(replaced)
        self.ledger.buffer_adds += len(entries)
        self.ledger.buffer_replaced += len(replaced)

    def pop_buffer(self, k: int) -> list[BufferEntry]:
        """Up to ``k`` entries in the selection order, never one whose prompt this step already trained."""
        alloc = self.allocator
        taken = alloc.buffer.pop(k, alloc.selection, alloc.rng, self.step, exclude=self.trained_prompts)
        self.ledger.buffer_pops += len(taken)
        return taken

    def evict(self, result: CallResult, rows: np.ndarray, epochs: np.ndarray) -> None:
        if rows.shape[0] == 0:
            return
        ids = result.call.prompt_ids[rows]
        self.allocator.stream.evict(ids, epochs)
        self.evicted_prompts.extend(ids.tolist())
        self.ledger.evicted += int(rows.shape[0])

    # ---- closing -------------------------------------------------------------------------------------------
    def close(self) -> StepOutcome:
        alloc = self.allocator
        led = self.ledger
        led.rounds = self.rounds
        led.engine_calls = self.calls
        led.trained_prompts = len(self.groups)
        led.shortfall = led.trained_prompts < self.config.train_batch
        if self.groups:
            stats = np.concatenate(self._gstats)
            sizes, mean = stats[:, 0], stats[:, 1] / stats[:, 0]
            std = np.sqrt(np.maximum(stats[:, 2] / sizes - mean**2, 0.0))
            led.trained_rollouts = int(sizes.sum())
            led.mean_reward_std = float(std.mean())
            led.informative_share = float(np.mean(std > 1e-9))
            led.lags = [g.lag for g in self.groups]
            led.mean_lag = float(np.mean(led.lags))
            led.max_lag = int(max(led.lags))
        expired = alloc.buffer.expire(self.step)
        led.buffer_expired = len(expired)
        led.buffer_size = len(alloc.buffer)
        led.epoch = alloc.stream.epoch
        return StepOutcome(
            step=self.step,
            groups=self.groups,
            ledger=led,
            observations=Observations.concat(self._obs),
            expired=[(e.prompt_id, e.born) for e in expired],
            evicted_prompts=self.evicted_prompts,
            replaced=[(e.prompt_id, e.born) for e in self.replaced],
        )


class StepSession:
    """One step in progress: ``next_call`` / ``observe`` until no call is left, then ``finish``."""

    def __init__(self, allocator: Allocator) -> None:
        self._allocator = allocator
        self.ctx = StepContext(allocator, allocator.step)
        self._plan = allocator.method.plan_step(self.ctx)
        self._pending: EngineCall | None = None
        self._done = False
        self._finished = False
        self._advance(None)

    def _advance(self, result: CallResult | None) -> None:
        try:
            self._pending = self._plan.send(result)  # type: ignore[arg-type]
        except StopIteration:
            self._pending = None
            self._done = True

    def next_call(self) -> EngineCall | None:
        return self._pending

    def observe(self, rewards: Sequence[np.ndarray] | np.ndarray) -> None:
        if self._pending is None:
            raise AllocatorError("observe() called with no engine call pending. Fix: call next_call() first.")
        result = CallResult(self._pending, rewards)
        self.ctx.account(result)
        self._advance(result)

    def finish(self) -> StepOutcome:
        if not self._done:
            raise AllocatorError(
                "finish() called while an engine call is still pending. Fix: observe() every call next_call() returns."
            )
        if self._finished:
            raise AllocatorError("finish() was already called for this step. Fix: begin_step() for the next one.")
        self._finished = True
        outcome = self.ctx.close()
        self._allocator._end_step()
        return outcome


class Allocator:
    """Owns the cross-step state and runs one registered method."""

    def __init__(self, config: AllocatorConfig, num_prompts: int) -> None:
        check_config(config)
        config.check_pool(num_prompts)
        self.config = config
        self.num_prompts = int(num_prompts)
        self.method: AllocationMethod = get_method(config.method)(config)
        self.selection = SELECTION_STRATEGIES[config.selection]()
        self.stream = PromptStream(num_prompts, config.seed)
        self.buffer = ReplayBuffer(config.max_age)
        # Tie-breaks and random selection draw from their own generator: the prompt stream stays common
        # across methods whatever the buffer does.
        self.rng = np.random.default_rng([config.seed, 0xB0FF])
        self.step = 0
        self.next_rollout_id = 0
        self.next_entry_id = 0
        self._session: StepSession | None = None

    # ---- stepping ----------------------------------------------------------------------------------------------
    def begin_step(self) -> StepSession:
        if self._session is not None:
            raise AllocatorError(f"step {self.step} is still open. Fix: finish() it before beginning another.")
        self._session = StepSession(self)
        return self._session

    def _end_step(self) -> None:
        self._session = None
        self.step += 1

    def run_step(self, engine: Callable[[EngineCall], Sequence[np.ndarray] | np.ndarray]) -> StepOutcome:
        session = self.begin_step()
        try:
            while (call := session.next_call()) is not None:
                session.observe(engine(call))
        except BaseException:
            self.abort_step()
            raise
        return session.finish()

    def abort_step(self) -> None:
        """Forget the open step after a failure. The state is mid-step: restore a checkpoint to go on."""
        self._session = None

    # ---- inspection -----------------------------------------------------------------------------------------------
    def live_rollout_ids(self) -> np.ndarray:
        """Rollout ids still referenced (the buffer's pilots): the sidecar may drop every other payload."""
        if not self.buffer.entries:
            return np.zeros(0, np.int64)
        return np.concatenate(
            [np.arange(s, s + c) for e in self.buffer.entries for s, c in e.pilot_spans]
        )

    # ---- state -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self._session is not None:
            raise AllocatorError("cannot snapshot the allocator mid-step. Fix: checkpoint between steps.")
        return {
            "version": STATE_VERSION,
            "config": self.config.to_dict(),
            "num_prompts": self.num_prompts,
            "step": self.step,
            "next_rollout_id": self.next_rollout_id,
            "next_entry_id": self.next_entry_id,
            "stream": self.stream.state_dict(),
            "buffer": self.buffer.state_dict(),
            "rng": self.rng.bit_generator.state,
            "method": self.method.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Allocator:
        if state.get("version") != STATE_VERSION:
            raise AllocatorError(
                f"allocator state version {state.get('version')!r} is not {STATE_VERSION}. Fix: resume with the "
                "pc-pipelines version that wrote the checkpoint, or start the run afresh."
            )
        alloc = cls(AllocatorConfig.from_dict(state["config"]), int(state["num_prompts"]))
        alloc.step = int(state["step"])
        alloc.next_rollout_id = int(state["next_rollout_id"])
        alloc.next_entry_id = int(state["next_entry_id"])
        alloc.stream.load_state_dict(state["stream"])
        alloc.buffer.load_state_dict(state["buffer"])
        alloc.rng.bit_generator.state = state["rng"]
        alloc.method.load_state_dict(state["method"])
        return alloc
