"""The replay buffer R of pilot survivors, its age limit, and its pluggable selection strategies.

An entry is a prompt whose pilot landed in the keep band, with the ids and rewards of its pilot rollouts (never
their payloads) and ``born``, the step whose pilot admitted it. Invariant: an entry is only ever trained at a
step ``t`` with ``t - born <= d``. ``expire(t)`` runs after step ``t``'s update and drops every entry with
``t + 1 - born > d``, so whatever survives is still trainable at step ``t + 1``.

**One live entry per prompt.** A prompt has at most one entry in R: when a newer pilot of a prompt is kept while
an older entry of the same prompt is still live (a small pool revisits the prompt the next epoch, or a sampling
batch straddles an epoch boundary and holds it twice), the newer entry replaces the older one, as the paper
authors' recipe does (its buffer is keyed by prompt). The newer pilot is the better estimate of the prompt under
the current policy and its lag is smaller. The replaced entry is returned by ``add`` and counted in the ledger as
``buffer_replaced`` (neither popped nor expired: it was never trained and did not age out). Together with the
step's exclusion in ``pop`` (a prompt already trained in this step is not popped again in a later round of the
same step; its fresh entry waits for the next step) no prompt trains twice in one step.

**Across epochs.** R persists across epoch boundaries: Algorithm 1 of the paper sets ``R <- {}`` once, before the
epoch loop, and "prompts in R may come from previous steps"; the authors' recipe empties R at epoch end. We follow
the algorithm: an epoch boundary is an accident of where the stream stands (a sampling batch may even span two
epochs, docs/DESIGN.md section 3), not a policy change, so emptying R there would throw away paid-for pilots that are
still within the lag bound d. The age rule (``expire``) is the only thing that retires an entry; eviction only
stops a prompt from being drawn again (its live entry, if any, still trains).

Selection is a *total* order: with binary rewards and a handful of pilot rollouts, pilot stds tie constantly
(every 4-of-16 prompt has the same std), so each strategy ends its key with a seeded random tie-break drawn when
the entry was admitted. Worked example for ``max_variance`` with entries
``A (std 0.50, born 3, tb 0.7)``, ``B (std 0.50, born 4, tb 0.9)``, ``C (std 0.43, born 4, tb 0.1)``,
``D (std 0.50, born 4, tb 0.2)``: the order is D, B (std 0.5, newest, smaller tie-break first), A, C.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True, slots=True)
class BufferEntry:
    entry_id: int  # unique per allocator; stable key for the store's buffer_state
    prompt_id: int
    born: int
    rollout_start: int  # pilot rollout ids are [rollout_start, rollout_start + n)
    rewards: np.ndarray  # pilot rewards, float64
    std: float  # population std of the pilot rewards (rounded so equal pass rates tie exactly)
    tiebreak: float  # seeded uniform draw at admission
    reward_sum: float  # sum and sum of squares of ``rewards``: cached so a paper-scale step stays under 2 ms
    reward_sq: float
    # Sequential pilots: one (rollout_start, count) per wave, aligned with ``rewards``; empty means the single
    # span (rollout_start, n) of a one-wave pilot (the paper's case, and the checkpoint format before waves).
    spans: tuple[tuple[int, int], ...] = ()

    @property
    def n(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def pilot_spans(self) -> tuple[tuple[int, int], ...]:
        return self.spans or ((self.rollout_start, self.n),)

    @property
    def reward_parts(self) -> tuple[np.ndarray, ...]:
        """``rewards`` split along ``pilot_spans`` (views, no copy)."""
        if not self.spans:
            return (self.rewards,)
        cuts = np.cumsum([c for _, c in self.spans])[:-1]
        return tuple(np.split(self.rewards, cuts))

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry_id": self.entry_id,
            "prompt_id": self.prompt_id,
            "born": self.born,
            "rollout_start": self.rollout_start,
            "rewards": self.rewards.tolist(),
            "std": self.std,
            "tiebreak": self.tiebreak,
            # Kept verbatim: recomputing them in another summation order changes the last bit of the ledger.
            "reward_sum": self.reward_sum,
            "reward_sq": self.reward_sq,
            **({"spans": [list(sp) for sp in self.spans]} if self.spans else {}),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> BufferEntry:
        rewards = np.asarray(d["rewards"], dtype=np.float64)
        return BufferEntry(
            entry_id=int(d["entry_id"]),
            prompt_id=int(d["prompt_id"]),
            born=int(d["born"]),
            rollout_start=int(d["rollout_start"]),
            rewards=rewards,
            std=float(d["std"]),
            tiebreak=float(d["tiebreak"]),
            reward_sum=float(d["reward_sum"]) if "reward_sum" in d else float(rewards.sum()),
            reward_sq=float(d["reward_sq"]) if "reward_sq" in d else float(np.dot(rewards, rewards)),
            spans=tuple((int(a), int(b)) for a, b in d.get("spans", ())),
        )


_STD, _BORN, _TIEBREAK, _PROMPT = (attrgetter(a) for a in ("std", "born", "tiebreak", "prompt_id"))


# ---- selection strategies ---------------------------------------------------------------------------------------
class SelectionStrategy(ABC):
    """Orders buffer entries for commit selection: index 0 is taken first."""

    name: ClassVar[str]

    @abstractmethod
    def order(self, std: np.ndarray, born: np.ndarray, tiebreak: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Return a permutation of ``range(len(std))``."""


SELECTION_STRATEGIES: dict[str, type[SelectionStrategy]] = {}


def register_selection(name: str) -> Callable[[type[SelectionStrategy]], type[SelectionStrategy]]:
    def deco(cls: type[SelectionStrategy]) -> type[SelectionStrategy]:
        if name in SELECTION_STRATEGIES:
            raise ValueError(f"selection strategy {name!r} is already registered")
        cls.name = name
        SELECTION_STRATEGIES[name] = cls
        return cls

    return deco


@register_selection("max_variance")
class MaxVariance(SelectionStrategy):
    """Pilot reward std descending, then born descending (freshest pilot), then the seeded tie-break."""

    def order(self, std, born, tiebreak, rng):
        return np.lexsort((tiebreak, -born, -std))  # lexsort: the LAST key is the primary one


@register_selection("most_recent")
class MostRecent(SelectionStrategy):
    """Born descending (smallest lag first), then the seeded tie-break."""

    def order(self, std, born, tiebreak, rng):
        return np.lexsort((tiebreak, -born))


@register_selection("random")
class RandomSelection(SelectionStrategy):
    """Uniformly random among entries, drawn from the allocator's seeded generator at selection time."""

    def order(self, std, born, tiebreak, rng):
        return rng.permutation(std.shape[0])


# ---- the buffer -----------------------------------------------------------------------------------------------
class ReplayBuffer:
    def __init__(self, max_age: int) -> None:
        self.max_age = int(max_age)
        self.entries = []

    @property
    def entries(self) -> list[BufferEntry]:
        """The live entries, in admission order (the ``random`` strategy's order is over this list)."""
        return self._entries

    @entries.setter
    def entries(self, entries: list[BufferEntry]) -> None:
        self._entries = entries
        self._prompts = {e.prompt_id for e in entries}  # live prompts: ``add`` checks clashes at C speed

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entries: list[BufferEntry]) -> list[BufferEntry]:
        """Admit ``entries`` (in order); returns the entries they replaced (one live entry per prompt: a newer
        pilot of a prompt replaces its older entry, including an earlier one of the same ``entries``)."""
        if not entries:
            return []
        newest = {e.prompt_id: e for e in entries}  # a later entry of a prompt wins
        replaced: list[BufferEntry] = []
        if len(newest) < len(entries):  # a prompt twice in one admission: the earlier one is replaced
            replaced = [e for e in entries if newest[e.prompt_id] is not e]
        if self._prompts.isdisjoint(newest):  # the common case: no live entry is replaced
            self._entries.extend(newest.values())
            self._prompts.update(newest)
            return replaced
        live = []
        for e in self._entries:
            if e.prompt_id in newest:
                replaced.append(e)
            else:
                live.append(e)
        live.extend(newest.values())
        self.entries = live
        return replaced

    def pop(
        self,
        k: int,
        strategy: SelectionStrategy,
        rng: np.random.Generator,
        step: int,
        exclude: set[int] | frozenset[int] = frozenset(),
    ) -> list[BufferEntry]:
        """Remove and return the first ``k`` entries in the strategy's order, skipping entries whose prompt is in
        ``exclude`` (prompts already trained in this step: they stay in R for a later step).

        Every entry is trainable at ``step`` because ``expire`` ran after the previous step; the caller
        (``StepContext.train_commits``) re-checks the lag bound, so a broken invariant fails loudly there.
        """
        if k <= 0 or not self.entries:
            return []
        entries, m = self.entries, len(self.entries)
        std = np.fromiter(map(_STD, entries), np.float64, m)  # attrgetter: C-level reads, ~400 entries a step
        born = np.fromiter(map(_BORN, entries), np.int64, m)
        tb = np.fromiter(map(_TIEBREAK, entries), np.float64, m)
        order = strategy.order(std, born, tb, rng)
        if exclude:
            excluded = np.fromiter(map(exclude.__contains__, map(_PROMPT, entries)), bool, m)
            order = order[~excluded[order]]
        chosen = order[:k]
        taken = [self.entries[i] for i in chosen.tolist()]
        keep = np.ones(len(self.entries), bool)
        keep[chosen] = False
        self._entries = [e for e, k_ in zip(self._entries, keep.tolist()) if k_]
        self._prompts.difference_update(e.prompt_id for e in taken)
        return taken

    def expire(self, step: int) -> list[BufferEntry]:
        """After step ``step``'s update: drop entries that would exceed the max age at ``step + 1``."""
        expired = [e for e in self.entries if step + 1 - e.born > self.max_age]
        if expired:
            self._entries = [e for e in self._entries if step + 1 - e.born <= self.max_age]
            self._prompts.difference_update(e.prompt_id for e in expired)
        return expired

    def state_dict(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.entries]

    def load_state_dict(self, state: list[dict[str, Any]]) -> None:
        """Restore a checkpoint's entries. A checkpoint written before the one-entry-per-prompt rule may hold two
        entries of one prompt: the newest (latest born, then latest admitted) is kept, as ``add`` would have."""
        entries = [BufferEntry.from_dict(d) for d in state]
        newest: dict[int, BufferEntry] = {}
        for e in entries:
            b = newest.get(e.prompt_id)
            if b is None or (e.born, e.entry_id) > (b.born, b.entry_id):
                newest[e.prompt_id] = e
        self.entries = [e for e in entries if newest[e.prompt_id] is e]  # order kept: `random` selection uses it
