"""The step API: what one training step of a method may do, and the session that drives it.

Three classes, below :mod:`.methods` and :mod:`.allocator` (both import this module; it imports neither):

* :class:`CallResult`: the rewards of one engine call, with per-request statistics computed once;
* :class:`StepContext`: the operations a method performs in one step (the table below), each doing its own
  bookkeeping (rollout ids, ledger, observations, buffer, stream);
* :class:`StepSession`: one step in progress, as the world drives it (``next_call`` / ``observe`` / ``finish``).

A method's ``plan_step(ctx)`` is a generator (:data:`StepPlan`): it yields an :class:`EngineCall` built by
``ctx.make_call`` and receives its :class:`CallResult`, until the step is complete. It never touches the allocator:
the context is handed only the pieces of the allocator's state a step changes (the prompt stream, the replay
buffer with its selection strategy, the tie-break generator and the id counters), and changes them only through
the operations below.

==========================  =========================================================================================
a method wants to            it calls
==========================  =========================================================================================
know where it stands         ``ctx.config``, ``ctx.step``, ``ctx.rounds`` (rounds begun), ``ctx.buffered()`` (size of R)
draw fresh prompts           ``ctx.draw(k)``: the stream's next ``k`` prompts and the epoch each was drawn in
call the engine              ``ctx.begin_round()``, then ``result = yield ctx.make_call(parts, wave)``
train                        ``ctx.train_full`` (GRPO / DAPO groups), ``ctx.train_commits`` (PC: pilot + commit)
push to / pop the buffer     ``ctx.admit`` (pilot survivors into R), ``ctx.pop_buffer(k)`` (entries to commit)
evict                        ``ctx.evict``: solved prompts leave the stream from the next epoch; ``ctx.unevict``:
                             prompts back from the easy pool, not solved again, rejoin it (``ctx.epoch``: where it is)
record observations          ``ctx.observe`` (rows of one call), ``ctx.record`` (rows pooled over pilot waves)
count what only it knows     ``ctx.ledger`` (DAPO's informative groups, PC's widened band, early decisions, survival,
                             returns from the easy pool)
finish                       return: the session closes the step (buffer expiry, ledger totals, the outcome)
==========================  =========================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..config.allocator import AllocatorConfig
from .buffer import BufferEntry, ReplayBuffer, SelectionStrategy
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


class Screen(Protocol):
    """What a step needs of the history prior (``screen.py``'s strategies; declared here so the step API imports
    no strategy)."""

    active: bool
    pilots: bool
    middle: float

    @property
    def skip_cost(self) -> int: ...

    def screen(self, ids: np.ndarray, step: int, budget: int) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...

    def observe(self, step: int, prompt_id: np.ndarray, n: np.ndarray, n_correct: np.ndarray) -> None: ...


class AllocatorError(RuntimeError):
    """The allocator was driven in a way its protocol does not allow (the message says what to do)."""


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
        """The rewards of request ``i`` (a view into :attr:`flat`)."""
        o = int(self.offsets[i])
        return self.flat[o : o + int(self.counts[i])]


StepPlan = Generator[EngineCall, CallResult, None]
"""One method step: yields engine calls, receives each call's :class:`CallResult` (``AllocationMethod.plan_step``)."""


@dataclass
class IdCounters:
    """The allocator's id counters, advanced by the step that hands ids out (both checkpointed by the allocator)."""

    rollout: int = 0  # the next rollout id: a call's requests own contiguous blocks from here (types.py)
    entry: int = 0  # the next replay-buffer entry id


class StepContext:
    """One step's operations, for the method's ``plan_step`` (the table in this module's docstring).

    Read: :attr:`config`, :attr:`step`, :attr:`rounds`, :meth:`buffered`. Do: :meth:`draw`, :meth:`begin_round`,
    :meth:`make_call`, :meth:`train_full`, :meth:`train_commits`, :meth:`admit`, :meth:`pop_buffer`, :meth:`evict`,
    :meth:`unevict`, :meth:`observe`, :meth:`record`. Count: :attr:`ledger` (a method adds only counters the context
    cannot see; the context fills every other one). Everything else is the session's (:class:`StepSession`).

    The allocator hands it the state a step changes (``stream``, ``buffer``, ``selection`` with ``rng``, ``ids``);
    nothing else of the allocator is reachable from here.
    """

    def __init__(
        self,
        config: AllocatorConfig,
        step: int,
        band: tuple[float | None, float | None],
        *,
        stream: PromptStream,
        buffer: ReplayBuffer,
        selection: SelectionStrategy,
        rng: np.random.Generator,
        ids: IdCounters,
        screen: Screen | None = None,
    ) -> None:
        self.config = config
        """The allocator's settings (read only)."""
        self.step = step
        """This step's number, from 0."""
        self.ledger = StepLedger(step=step)
        """What this step cost and did. The context counts rollouts, decisions, buffer and stream moves itself."""
        self.ledger.band_lower, self.ledger.band_upper = band
        self._stream = stream
        self._buffer = buffer
        self._selection = selection
        self._rng = rng
        self._ids = ids
        self._screen = screen if screen is not None and screen.active else None
        self._groups: list[TrainedGroup] = []
        # Per trained group, aligned with ``_groups``: size, reward sum, reward sum of squares (for the ledger's
        # reward std without concatenating reward arrays).
        self._gstats: list[np.ndarray] = []
        self._evicted: list[int] = []
        self._replaced: list[BufferEntry] = []  # buffer entries a newer pilot of their prompt replaced this step
        self._trained: set[int] = set()  # prompts already in this step's batch: never popped again
        self._obs: list[Observations] = []
        self._rounds = 0
        self._calls = 0

    # ---- reading -----------------------------------------------------------------------------------------------
    @property
    def rounds(self) -> int:
        """Generation rounds begun so far this step (:meth:`begin_round`)."""
        return self._rounds

    def buffered(self) -> int:
        """How many entries the replay buffer R holds now (after this step's pops and admissions so far)."""
        return len(self._buffer)

    @property
    def epoch(self) -> int:
        """The prompt stream's current epoch (where the next :meth:`draw` starts)."""
        return self._stream.epoch

    # ---- drawing prompts and calling the engine ----------------------------------------------------------------
    def begin_round(self) -> None:
        """Count a generation round. Methods call it just before the round's first engine call, never for a
        round that turns out to have nothing to generate, so ``rounds`` counts rounds that sampled something."""
        self._rounds += 1

    def draw(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` fresh prompts of the stream (int64 ids) and the epoch each was drawn in (for
        :meth:`evict`). Fewer only when eviction has emptied the pool. Counted as ``prompts_consumed``.

        With the history prior on (``screen_strategy``), prompts it skips are recorded (``screened_by_prior``,
        n = 0) and the stream is read on until ``k`` pass, reading at most ``screen_draw_cap * k`` prompts (0: the step's
        draws read at most one pass over the live pool in all); the rest of the ``k`` is then taken unscreened
        (``prior_draw_capped``)."""
        if self._screen is None:
            ids, epochs = self._stream.take(k)
            self.ledger.prompts_consumed += int(ids.shape[0])
            return ids, epochs
        got_ids: list[np.ndarray] = []
        got_epochs: list[np.ndarray] = []
        cap = self.config.screen_draw_cap
        # budget: skips this draw may make. Cap 0: the step's draws read at most one pass over the live pool in all
        # (a prompt read twice in a step would be piloted again in a later round: a kept pilot of a prompt already
        # in the batch can never be popped, so a pool mostly screened out would starve the step round after round)
        need = int(k)
        budget = need * cap - need if cap else max(0, self._stream.live_count() - self.ledger.prompts_consumed - need)
        while need > 0:
            ids, epochs = self._stream.take(need)
            self.ledger.prompts_consumed += int(ids.shape[0])
            if ids.shape[0] == 0:
                break
            if budget > 0:
                skip, info = self._screen.screen(ids, self.step, budget)
                self._record_screened(ids[skip], {key: v[skip] for key, v in info.items()})
                budget -= int(skip.sum())
                ids, epochs = ids[~skip], epochs[~skip]
            else:  # the draw cap is reached: these are sampled unscreened
                self.ledger.prior_draw_capped += int(ids.shape[0])
            got_ids.append(ids)
            got_epochs.append(epochs)
            need -= int(ids.shape[0])
        if not got_ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(got_ids), np.concatenate(got_epochs)

    def prior_continues(self, ids: np.ndarray, k1: np.ndarray, wave: int) -> np.ndarray | None:
        """Of PC's first-wave pilots ``ids`` whose rewards are all equal (``k1`` correct of ``wave``): the mask the
        history prior sends on to the later wave (``screen_early_wave``; None when the prior or the rule is off).
        Counted as ``prior_continued``."""
        if self._screen is None or not self.config.screen_early_wave or ids.shape[0] == 0:
            return None
        cfg = self.config
        level = cfg.screen_threshold if cfg.screen_early_threshold is None else cfg.screen_early_threshold
        go = self._screen.continue_useful(ids, self.step, k1, wave) >= level
        self.ledger.prior_continued += int(go.sum())
        return go

    def _record_screened(self, ids: np.ndarray, info: dict[str, np.ndarray]) -> None:
        """Rows of the prompts the history prior skipped: n = 0, the posterior's view, the side in ``decision``'s
        reason (the posterior mean against the band's middle)."""
        k = ids.shape[0]
        if k == 0:
            return
        screen = self._screen
        assert screen is not None
        self._append(
            Observations(
                prompt_id=ids.astype(np.int64),
                round=np.full(k, self._rounds + 1, np.int16),  # the round the draw is for
                call=np.full(k, self._calls, np.int16),  # the call that would have sampled them
                stage=np.full(k, Stage.PILOT if screen.pilots else Stage.FULL, np.int8),
                n=np.zeros(k, np.int32),
                n_correct=np.zeros(k, np.float64),
                evidence_n=np.zeros(k, np.int32),
                evidence_correct=np.zeros(k, np.float64),
                decision=np.full(k, Decision.SCREENED_BY_PRIOR, np.int8),
                evicted=np.zeros(k, bool),
                lag=np.zeros(k, np.int32),
                wave=np.zeros(k, np.int16),
                rule=np.where(info["mean"] > screen.middle, Rule.PRIOR_EASY, Rule.PRIOR_HARD).astype(np.int8),
                returned=np.zeros(k, bool),
                prior_useful=info["useful"].astype(np.float64),
                prior_mean=info["mean"].astype(np.float64),
                prior_evidence=info["evidence"].astype(np.float64),
                prior_observations=info["observations"].astype(np.int32),
                band_lower=np.full(k, np.nan),
                band_upper=np.full(k, np.nan),
            )
        )
        self.ledger.prior_rollouts_saved += k * screen.skip_cost

    def make_call(self, parts: list[tuple[np.ndarray, int | np.ndarray, Stage]], wave: int = 0) -> EngineCall:
        """Assemble one engine call from (prompt_ids, n, stage) parts and assign contiguous rollout ids.

        ``n`` is one count for the part or one per prompt; ``wave`` is the pilot wave the call samples (0 but for
        a sequential pilot's later wave). Yield the call; the session sends back its :class:`CallResult`."""
        prompt_ids = np.concatenate([np.asarray(p, np.int64) for p, _, _ in parts])
        n = np.concatenate([np.broadcast_to(np.asarray(k, np.int64), (len(p),)) for p, k, _ in parts])
        stages = np.concatenate([np.full(len(p), int(s), np.int8) for p, _, s in parts])
        starts = np.empty(len(prompt_ids), np.int64)
        if len(prompt_ids):
            starts[0] = 0
            np.cumsum(n[:-1], out=starts[1:])
        starts += self._ids.rollout
        self._ids.rollout += int(n.sum())
        call = EngineCall(
            step=self.step,
            round=self._rounds,
            index=self._calls,
            prompt_ids=prompt_ids,
            n=n,
            stages=stages,
            rollout_starts=starts,
            waves=np.full(len(prompt_ids), wave, np.int16),
        )
        self._calls += 1
        return call

    # ---- recording observations --------------------------------------------------------------------------------
    def observe(
        self,
        result: CallResult,
        rows: np.ndarray,
        decision: np.ndarray,
        evicted: np.ndarray | None = None,
        lag: np.ndarray | None = None,
        rule: Rule | np.ndarray = Rule.NONE,
        returned: np.ndarray | None = None,
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
            returned=returned,
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
        returned: np.ndarray | None = None,
        evidence: tuple[np.ndarray, np.ndarray] | None = None,
        band: tuple[float, float] | None = None,
    ) -> None:
        """Append observation rows (``call`` is the call the rows' rollouts came from, ``n`` / ``n_correct`` their
        counts) and count decisions. ``returned`` (default none): rows whose prompt came back from the easy pool;
        ``evidence`` (default ``n``, ``n_correct``): the rollouts and correct ones each row's decision read;
        ``band``: the keep band that decided the rows (PC's screen; None: no band decided them)."""
        k = prompt_id.shape[0]
        if k == 0:
            return
        n = np.asarray(n).astype(np.int32)
        n_correct = np.asarray(n_correct, np.float64)
        evidence_n, evidence_correct = (n, n_correct) if evidence is None else evidence
        self._append(
            Observations(
                prompt_id=np.asarray(prompt_id, np.int64),
                round=np.full(k, call.round, np.int16),
                call=np.full(k, call.index, np.int16),
                stage=np.asarray(stage, np.int8),
                n=n,
                n_correct=n_correct,
                evidence_n=np.asarray(evidence_n).astype(np.int32),
                evidence_correct=np.asarray(evidence_correct, np.float64),
                decision=decision.astype(np.int8, copy=False),
                evicted=np.zeros(k, bool) if evicted is None else evicted,
                lag=np.zeros(k, np.int32) if lag is None else lag.astype(np.int32),
                wave=np.asarray(wave).astype(np.int16),
                rule=np.broadcast_to(np.asarray(rule, np.int8), (k,)).copy(),
                returned=np.zeros(k, bool) if returned is None else np.asarray(returned, bool),
                prior_useful=np.full(k, np.nan),
                prior_mean=np.full(k, np.nan),
                prior_evidence=np.full(k, np.nan),
                prior_observations=np.zeros(k, np.int32),
                band_lower=np.full(k, np.nan if band is None else float(band[0])),
                band_upper=np.full(k, np.nan if band is None else float(band[1])),
            )
        )

    def _append(self, obs: Observations) -> None:
        """Keep ``obs`` for the step's record and count its decisions in the ledger."""
        self._obs.append(obs)
        decision = obs.decision
        counts = np.bincount(decision, minlength=len(Decision))
        self.ledger.kept += int(counts[Decision.KEPT])
        self.ledger.skipped_easy += int(counts[Decision.SKIPPED_EASY])
        self.ledger.deferred_hard += int(counts[Decision.DEFERRED_HARD])
        self.ledger.surplus += int(counts[Decision.SURPLUS])
        self.ledger.screened_by_prior += int(counts[Decision.SCREENED_BY_PRIOR])

    # ---- training ----------------------------------------------------------------------------------------------
    def train_full(self, result: CallResult, rows: np.ndarray) -> None:
        """GRPO/DAPO: each request in ``rows`` becomes a trained group on its own (record its row separately)."""
        call = result.call
        for i, p, start, count in zip(
            rows.tolist(),
            call.prompt_ids[rows].tolist(),
            call.rollout_starts[rows].tolist(),
            result.counts[rows].tolist(),
        ):
            self._trained.add(p)
            self._groups.append(
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
        """PC: each commit request joins its buffer entry's pilot rollouts into one trained group (and its row is
        recorded, ``trained`` with its lag); with ``train_pilots`` off the group is the commit's rollouts alone. ``entries`` are the :meth:`pop_buffer` entries, aligned with ``rows``."""
        if not entries:
            return
        call = result.call
        lags = np.fromiter((self.step - e.born for e in entries), np.int32, len(entries))
        if int(lags.max()) > self.config.max_age:  # invariant: expire() runs after every step
            raise AllocatorError(f"a buffer entry would train with lag {int(lags.max())} > d={self.config.max_age}")
        flat = result.flat
        with_pilots = self.config.train_pilots  # False: commits only (the pilots screened, they do not train)
        for e, lag, start, count, o in zip(
            entries, lags.tolist(), call.rollout_starts[rows].tolist(), result.counts[rows].tolist(),
            result.offsets[rows].tolist(),
        ):
            if e.prompt_id in self._trained:  # invariant: pop_buffer excludes prompts trained this step
                raise AllocatorError(f"prompt {e.prompt_id} would train twice in step {self.step}")
            self._trained.add(e.prompt_id)
            pilots = e.pilot_spans if with_pilots else ()
            self._groups.append(
                TrainedGroup(
                    prompt_id=e.prompt_id,
                    spans=(*pilots, (start, count)),
                    reward_parts=(*(e.reward_parts if with_pilots else ()), flat[o : o + count]),
                    born=e.born,
                    lag=lag,
                    n_pilot=e.n if with_pilots else 0,
                    n_commit=count,
                )
            )
        commit = np.stack([result.counts[rows], result.sum[rows], result.sq[rows]], axis=1)
        if with_pilots:
            commit = commit + np.array([(e.n, e.reward_sum, e.reward_sq) for e in entries], np.float64)
        self._gstats.append(commit)
        self.observe(result, rows, np.full(rows.shape[0], Decision.TRAINED, np.int8), lag=lags)

    # ---- the replay buffer and the stream ----------------------------------------------------------------------
    def admit(self, result: CallResult, rows: np.ndarray, earlier: list[tuple[CallResult, np.ndarray]] = ()) -> None:
        """PC: pilot survivors enter the buffer with born = this step and a seeded tie-break.

        ``rows`` index the survivors' last pilot wave in ``result``; ``earlier`` holds (result, rows) of their
        earlier waves, row-aligned with ``rows``, so an entry's pilot is every wave's rollouts, first wave first.
        A newer entry of a prompt replaces its live one (``buffer_replaced``).
        """
        if rows.shape[0] == 0:
            return
        parts = [*earlier, (result, rows)]
        first_id = self._ids.entry
        tiebreaks = self._rng.random(rows.shape[0]).tolist()
        rsum = sum(r.sum[w] for r, w in parts)
        rsq = sum(r.sq[w] for r, w in parts)
        std = tied_std(rsum, rsq, sum(r.counts[w] for r, w in parts))
        # Per-wave columns as Python lists, once: a paper-scale step admits hundreds of entries (docs/BENCHMARKS.md).
        starts = [r.call.rollout_starts[w].tolist() for r, w in parts]
        counts = [r.counts[w].tolist() for r, w in parts]
        offsets = [r.offsets[w].tolist() for r, w in parts]
        flats = [r.flat for r, _ in parts]
        prompt_ids = result.call.prompt_ids[rows].tolist()
        std_l, rsum_l, rsq_l = std.tolist(), rsum.tolist(), rsq.tolist()
        single = len(parts) == 1
        entries = []
        for j in range(rows.shape[0]):
            if single:
                o = offsets[0][j]
                rewards = flats[0][o : o + counts[0][j]]
                spans: tuple[tuple[int, int], ...] = ()
            else:
                rewards = np.concatenate([f[o[j] : o[j] + c[j]] for f, o, c in zip(flats, offsets, counts)])
                spans = tuple((s_[j], c[j]) for s_, c in zip(starts, counts))
            entries.append(
                BufferEntry(
                    entry_id=first_id + j,
                    prompt_id=prompt_ids[j],
                    born=self.step,
                    rollout_start=starts[0][j],
                    rewards=rewards,
                    std=std_l[j],
                    tiebreak=tiebreaks[j],
                    reward_sum=rsum_l[j],
                    reward_sq=rsq_l[j],
                    spans=spans,
                )
            )
        self._ids.entry += len(entries)
        replaced = self._buffer.add(entries)  # one live entry per prompt: the newer pilot replaces the older entry
        self._replaced.extend(replaced)
        self.ledger.buffer_adds += len(entries)
        self.ledger.buffer_replaced += len(replaced)

    def pop_buffer(self, k: int) -> list[BufferEntry]:
        """Up to ``k`` entries in the selection order, never one whose prompt this step already trained."""
        taken = self._buffer.pop(k, self._selection, self._rng, self.step, exclude=self._trained)
        self.ledger.buffer_pops += len(taken)
        return taken

    def evict(self, result: CallResult, rows: np.ndarray, epochs: np.ndarray) -> None:
        """Mark the prompts of ``rows`` of ``result`` solved: each leaves the stream from the epoch after the one
        it was drawn in (``epochs``, aligned with ``rows``, from :meth:`draw`). A live buffer entry still trains."""
        if rows.shape[0] == 0:
            return
        ids = result.call.prompt_ids[rows]
        self._stream.evict(ids, epochs)
        self._evicted.extend(ids.tolist())
        self.ledger.evicted += int(rows.shape[0])

    def unevict(self, result: CallResult, rows: np.ndarray, epochs: np.ndarray) -> None:
        """Take back the eviction of the prompts of ``rows`` of ``result`` (drawn back from the easy pool, not
        solved again): each rejoins the stream from the epoch after the one it was drawn in (``epochs``)."""
        if rows.shape[0] == 0:
            return
        self._stream.unevict(result.call.prompt_ids[rows], epochs)

    # ---- the session's -----------------------------------------------------------------------------------------
    def _account(self, result: CallResult) -> None:
        """Charge every rollout the engine returned to the ledger, by stage."""
        by_stage = np.bincount(result.call.stages, weights=result.counts, minlength=3)
        self.ledger.pilot_rollouts += int(by_stage[Stage.PILOT])
        self.ledger.commit_rollouts += int(by_stage[Stage.COMMIT])
        self.ledger.full_rollouts += int(by_stage[Stage.FULL])

    def _close(self) -> StepOutcome:
        """End the step: ledger totals, the buffer's expiry, and the outcome (with what the store records of the
        buffer and the stream after the step)."""
        led = self.ledger
        led.rounds = self._rounds
        led.engine_calls = self._calls
        led.trained_prompts = len(self._groups)
        led.shortfall = led.trained_prompts < self.config.train_batch
        if self._groups:
            stats = np.concatenate(self._gstats)
            sizes, mean = stats[:, 0], stats[:, 1] / stats[:, 0]
            std = np.sqrt(np.maximum(stats[:, 2] / sizes - mean**2, 0.0))
            led.trained_rollouts = int(sizes.sum())
            led.mean_reward_std = float(std.mean())
            led.informative_share = float(np.mean(std > 1e-9))
            led.lags = [g.lag for g in self._groups]
            led.mean_lag = float(np.mean(led.lags))
            led.max_lag = int(max(led.lags))
        expired = self._buffer.expire(self.step)
        led.buffer_expired = len(expired)
        led.buffer_size = len(self._buffer)
        led.epoch = self._stream.epoch
        observations = Observations.concat(self._obs)
        if self._screen is not None:
            self._screen.observe(self.step, observations.prompt_id, observations.n, observations.n_correct)
        return StepOutcome(
            step=self.step,
            groups=self._groups,
            ledger=led,
            observations=observations,
            expired=[(e.prompt_id, e.born) for e in expired],
            evicted_prompts=self._evicted,
            evicted_epochs=self._stream.evicted_from[np.asarray(self._evicted, np.int64)],
            buffer_entries=tuple(self._buffer.entries),
            replaced=[(e.prompt_id, e.born) for e in self._replaced],
        )


class StepSession:
    """One step in progress: ``next_call`` / ``observe`` until no call is left, then ``finish``.

    Built by ``Allocator.begin_step``: ``plan_step`` is the method's, ``on_finish`` the allocator's (it advances
    the step counter once the step is closed)."""

    def __init__(
        self, ctx: StepContext, plan_step: Callable[[StepContext], StepPlan], on_finish: Callable[[], None]
    ) -> None:
        self._ctx = ctx
        self._on_finish = on_finish
        self._plan = plan_step(ctx)
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
        """The engine call to run now, or None when the step has no call left (then :meth:`finish`)."""
        return self._pending

    def observe(self, rewards: Sequence[np.ndarray] | np.ndarray) -> None:
        """The rewards of :meth:`next_call`'s call: one array per request in request order, a 2-D array with one
        row per request, or one flat array of every rollout in request order."""
        if self._pending is None:
            raise AllocatorError("observe() called with no engine call pending. Fix: call next_call() first.")
        result = CallResult(self._pending, rewards)
        self._ctx._account(result)
        self._advance(result)

    def finish(self) -> StepOutcome:
        """Close the step (once, after the last call was observed) and hand back its outcome."""
        if not self._done:
            raise AllocatorError(
                "finish() called while an engine call is still pending. Fix: observe() every call next_call() returns."
            )
        if self._finished:
            raise AllocatorError("finish() was already called for this step. Fix: begin_step() for the next one.")
        self._finished = True
        outcome = self._ctx._close()
        self._on_finish()
        return outcome
