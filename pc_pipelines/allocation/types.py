"""The allocator's vocabulary: requests it emits, decisions it takes, groups it hands to the trainer, its ledger.

Everything here is plain data (numpy arrays and frozen dataclasses). The allocator never sees tokens or tensors:
a rollout is an integer id the allocator assigned when it asked for it, and a reward.

Rollout ids are assigned in request order from one counter, so a request ``r`` with ``n`` rollouts owns the
contiguous ids ``[r.rollout_start, r.rollout_start + n)``. Worked example: an engine call with requests
``(prompt 7, n=4)`` then ``(prompt 2, n=2)`` issued when the counter stands at 100 gives prompt 7 the ids
100..103 and prompt 2 the ids 104..105; the counter then stands at 106. The loop keys its payload sidecar
(token ids, logprobs, text) by these ids.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .buffer import BufferEntry


class Stage(enum.IntEnum):
    """Why a rollout was sampled. Stored as its integer code in columnar data, as its name in the store."""

    PILOT = 0  # PC screening rollouts (n_pilot per fresh prompt)
    COMMIT = 1  # PC rollouts for prompts taken from the replay buffer
    FULL = 2  # GRPO / DAPO: a whole group of n rollouts for a fresh prompt

    @property
    def label(self) -> str:
        return self.name.lower()


class Decision(enum.IntEnum):
    """What the allocator did with one observed group. Band and eviction are independent: see ``evicted``."""

    KEPT = 0  # PC pilot with p_lower <= p_hat <= p_upper: into the replay buffer
    SKIPPED_EASY = 1  # p_hat > p_upper (PC) or all rollouts correct (DAPO filter)
    DEFERRED_HARD = 2  # p_hat < p_lower (PC) or all rollouts wrong (DAPO filter)
    TRAINED = 3  # the group is part of this step's training batch
    SURPLUS = 4  # DAPO: informative, but b_t groups were already kept this step (sampled, never trained)
    SCREENED_BY_PRIOR = 5  # drawn, then skipped without a rollout: the history prior predicted it useless (n = 0)
    CONTINUED = 6  # a sequential pilot's first wave that decided nothing: the prompt went on to its later wave, whose
    #                row holds the decision (over every wave's rollouts: its ``evidence_n`` and ``p_hat``)

    @property
    def label(self) -> str:
        return self.name.lower()


class Rule(enum.IntEnum):
    """Which rule took a decision (the reason's kind; the values it compared are in the same row and step)."""

    NONE = 0  # no screening rule: a trained group, or a GRPO/DAPO full group
    BAND = 1  # PC's keep band on the whole pilot (the static band, or the part of an adaptive band inside it)
    ADAPTIVE_BAND = 2  # kept only because the adaptive band was widened to fill the batch
    EARLY_WAVE = 3  # sequential pilots: the first wave's rewards were all equal and outside the band
    PRIOR_EASY = 4  # the history prior (``screen_strategy``) skipped it before any rollout: posterior above the band
    PRIOR_HARD = 5  # the same, posterior below the band (GRPO / DAPO: the side of 0.5)

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """Ask the engine for ``n`` rollouts of ``prompt_id`` (ids ``rollout_start .. rollout_start + n - 1``)."""

    prompt_id: int
    n: int
    stage: Stage
    rollout_start: int
    wave: int = 0

    @property
    def rollout_ids(self) -> np.ndarray:
        return np.arange(self.rollout_start, self.rollout_start + self.n, dtype=np.int64)


@dataclass(frozen=True)
class EngineCall:
    """One inference pass: all requests of it go to the rollout engine together.

    Stored as columns (one entry per request) because a paper-scale PC round holds ~500 requests and the
    allocator's bookkeeping budget is a couple of milliseconds per step. Iterate it for request objects.
    """

    step: int
    round: int
    index: int  # engine call number within the step, from 0
    prompt_ids: np.ndarray  # int64 [R]
    n: np.ndarray  # int64 [R], may differ per request
    stages: np.ndarray  # int8 [R], Stage codes
    rollout_starts: np.ndarray  # int64 [R]
    waves: np.ndarray  # int16 [R]

    def __len__(self) -> int:
        return int(self.prompt_ids.shape[0])

    def __iter__(self) -> Iterator[GenerationRequest]:
        for p, n, s, r, w in zip(
            self.prompt_ids.tolist(),
            self.n.tolist(),
            self.stages.tolist(),
            self.rollout_starts.tolist(),
            self.waves.tolist(),
        ):
            yield GenerationRequest(prompt_id=p, n=n, stage=Stage(s), rollout_start=r, wave=w)

    @property
    def total_rollouts(self) -> int:
        return int(self.n.sum())


@dataclass(frozen=True)
class TrainedGroup:
    """One GRPO group of the training batch: the rollouts of one prompt that are normalized together.

    For paper PC the group is the prompt's stored pilot rollouts plus its fresh commit rollouts; for GRPO and
    DAPO it is one request's rollouts. The group is held as spans of rollout ids with their rewards (one span
    per request that contributed), so building a batch costs no copying; ``rollout_ids`` and ``rewards`` are
    the aligned concatenations.
    """

    prompt_id: int
    spans: tuple[tuple[int, int], ...]  # (rollout_start, count) per contributing request, pilot first
    reward_parts: tuple[np.ndarray, ...]  # aligned with spans
    born: int  # step whose pilot admitted the prompt (== trained step for GRPO/DAPO)
    lag: int  # trained step - born: how many policy updates separate the pilot from this update
    n_pilot: int  # members from the pilot stage (0 for GRPO/DAPO)
    n_commit: int  # members from the commit stage (0 for GRPO/DAPO)

    @property
    def rollout_ids(self) -> np.ndarray:
        return np.concatenate([np.arange(s, s + c, dtype=np.int64) for s, c in self.spans])

    @property
    def rewards(self) -> np.ndarray:
        return np.concatenate(self.reward_parts).astype(np.float64, copy=False)

    @property
    def size(self) -> int:
        return sum(c for _, c in self.spans)

    @property
    def reward_std(self) -> float:
        return float(self.rewards.std())


@dataclass(frozen=True)
class Observations:
    """Per-group observations of one step, as columns (one row per observed request or trained group).

    This is what the store's ``prompt_observations`` table receives. ``decision`` and ``evicted`` are separate
    columns because they are separate decisions: a kept prompt can also be marked for eviction. ``returned`` marks a
    pilot row whose prompt came back from the easy pool (``easy_pool`` eviction): ``evicted`` then says whether it was
    solved again (back to the pool) or not (back in the stream from the next epoch).
    """

    prompt_id: np.ndarray  # int64
    round: np.ndarray  # int16
    call: np.ndarray  # int16
    stage: np.ndarray  # int8 Stage
    n: np.ndarray  # int32 rollouts observed in this row (its own wave's only: a row per pilot wave)
    n_correct: np.ndarray  # float64: sum of rewards (the number correct for binary rewards)
    evidence_n: np.ndarray  # int32: rollouts the row's decision read: n, except a later pilot wave's row, whose
    #                         decision read every wave of its round (the first wave's own row is ``continued``)
    evidence_correct: np.ndarray  # float64: their sum of rewards
    decision: np.ndarray  # int8 Decision
    evicted: np.ndarray  # bool: marked solved, leaves the pool from the next epoch
    lag: np.ndarray  # int32: for TRAINED rows, trained step - born; else 0
    wave: np.ndarray  # int16: the last pilot wave the row's rollouts came from (0 = first; sequential pilots)
    rule: np.ndarray  # int8 Rule: which rule took the decision
    returned: np.ndarray  # bool: a solved prompt drawn back from the easy pool (pilot rows only)
    # The history prior's view of a prompt it skipped (``screened_by_prior`` rows; NaN / 0 on every other row):
    prior_useful: np.ndarray  # float64: predicted chance the group is useful (PC: pilot in band; else informative)
    prior_mean: np.ndarray  # float64: posterior mean pass rate
    prior_evidence: np.ndarray  # float64: the prompt's own discounted rollouts behind the posterior
    prior_observations: np.ndarray  # int32: observed groups of the prompt behind the posterior (undiscounted)
    # The keep band in force when the row was decided (PC pilot rows screened by the band, NaN on every other row):
    # an adaptive band can widen between a step's rounds, so a row's band is its round's, not the step's widest.
    band_lower: np.ndarray  # float64
    band_upper: np.ndarray  # float64

    def __len__(self) -> int:
        return int(self.prompt_id.shape[0])

    @property
    def p_hat(self) -> np.ndarray:
        """The pass rate the row's decision read (over ``evidence_n`` rollouts; 0 for a row without rollouts)."""
        return np.divide(self.evidence_correct, self.evidence_n, out=np.zeros_like(self.evidence_correct),
                         where=self.evidence_n > 0)

    @staticmethod
    def concat(parts: list[Observations]) -> Observations:
        if not parts:
            return Observations.empty()
        return Observations(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Observations)})

    @staticmethod
    def empty() -> Observations:
        return Observations(
            prompt_id=np.zeros(0, np.int64),
            round=np.zeros(0, np.int16),
            call=np.zeros(0, np.int16),
            stage=np.zeros(0, np.int8),
            n=np.zeros(0, np.int32),
            n_correct=np.zeros(0, np.float64),
            evidence_n=np.zeros(0, np.int32),
            evidence_correct=np.zeros(0, np.float64),
            decision=np.zeros(0, np.int8),
            evicted=np.zeros(0, bool),
            lag=np.zeros(0, np.int32),
            wave=np.zeros(0, np.int16),
            rule=np.zeros(0, np.int8),
            returned=np.zeros(0, bool),
            prior_useful=np.zeros(0, np.float64),
            prior_mean=np.zeros(0, np.float64),
            prior_evidence=np.zeros(0, np.float64),
            prior_observations=np.zeros(0, np.int32),
            band_lower=np.zeros(0, np.float64),
            band_upper=np.zeros(0, np.float64),
        )


@dataclass
class StepLedger:
    """What one training step cost and did. Every count is taken from what the engine actually returned."""

    step: int
    epoch: int = 0  # epoch of the prompt stream when the step ended
    rounds: int = 0  # generation rounds (a round with binding on is one engine call; off, two)
    engine_calls: int = 0
    pilot_rollouts: int = 0
    commit_rollouts: int = 0
    full_rollouts: int = 0  # GRPO / DAPO full-group rollouts
    trained_rollouts: int = 0
    trained_prompts: int = 0  # number of trained groups
    prompts_consumed: int = 0  # fresh prompts drawn from the stream
    kept: int = 0  # pilots admitted to the buffer (PC) / informative groups (DAPO)
    skipped_easy: int = 0
    deferred_hard: int = 0
    surplus: int = 0  # DAPO: informative groups sampled beyond b_t
    evicted: int = 0  # prompts marked solved this step
    buffer_adds: int = 0
    buffer_pops: int = 0
    buffer_expired: int = 0
    buffer_replaced: int = 0  # entries replaced by a newer pilot of the same prompt (one live entry per prompt)
    buffer_size: int = 0  # after the step's expiry: previous size + adds - pops - replaced - expired
    shortfall: bool = False  # fewer than b_t groups at max_rounds (or pool exhausted)
    band_lower: float | None = None  # keep band used (None for methods without one; adaptive: widest this step)
    band_upper: float | None = None
    widened: int = 0  # PC adaptive band: pilots kept only because the band was widened
    early_decided: int = 0  # PC sequential pilots: prompts decided by their first wave
    pilot_rollouts_saved: int = 0  # PC sequential pilots: later-wave rollouts not sampled thanks to early decisions
    survival: float | None = None  # PC survival sampling: the survival estimate after the step
    returned: int = 0  # PC easy_pool eviction: solved prompts drawn back from the easy pool for pilots this step
    screened_by_prior: int = 0  # history prior: drawn prompts skipped without a rollout
    prior_rollouts_saved: int = 0  # history prior: the first rollouts those prompts would have cost (PC: the first
    # pilot wave; GRPO / DAPO: the group of n)
    prior_continued: int = 0  # history prior: flat first waves sent on to the later wave (screen_early_wave)
    prior_draw_capped: int = 0  # history prior: prompts sampled unscreened because a draw reached screen_draw_cap
    mean_reward_std: float = 0.0  # mean over trained groups of the group's reward std
    informative_share: float = 0.0  # share of trained groups whose rewards are not all equal
    mean_lag: float = 0.0
    max_lag: int = 0
    lags: list[int] = field(default_factory=list)  # one per trained group, in batch order

    @property
    def sampled_rollouts(self) -> int:
        return self.pilot_rollouts + self.commit_rollouts + self.full_rollouts

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["sampled_rollouts"] = self.sampled_rollouts
        return out


@dataclass(frozen=True)
class StepOutcome:
    """Everything a finished step hands back: the training batch, the ledger, the per-group record, and what the
    store records of the allocator's state after the step (``buffer_entries``, ``evicted_epochs``), so that nothing
    downstream needs the allocator itself."""

    step: int
    groups: list[TrainedGroup]
    ledger: StepLedger
    observations: Observations
    expired: list[tuple[int, int]]  # (prompt_id, born) of buffer entries dropped for age after this step
    evicted_prompts: list[int]  # prompts marked solved this step
    evicted_epochs: np.ndarray  # int64, aligned with evicted_prompts: the first epoch each prompt is out of the stream
    buffer_entries: tuple[BufferEntry, ...]  # the replay buffer's live entries after the step's expiry, admission order
    replaced: list[tuple[int, int]] = field(default_factory=list)  # (prompt_id, born) of entries a newer pilot
    # of the same prompt replaced in the buffer this step (never trained; see buffer.py "One live entry per prompt")

