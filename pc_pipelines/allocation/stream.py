"""The endless prompt stream: a seeded permutation per epoch over the non-evicted pool.

Epoch ``e`` visits the prompts in the order of ``permutation_e = default_rng([seed, e]).permutation(M)``,
skipping prompts evicted before ``e``. Restricting a uniform random permutation to a subset gives a uniform
random permutation of that subset, so this *is* "a seeded permutation of the non-evicted pool", and it has two
properties we want:

* common random numbers: every method with the same seed sees the same order (GRPO, which never evicts, sees
  exactly the stream PC sees minus PC's evicted prompts);
* tiny state: (epoch, position, evictions) rebuilds the stream exactly; no 85K-entry array in a checkpoint.

A sampling batch may span two epochs: ``take(k)`` continues into the next epoch's permutation and never drops a
partial batch. Worked example with M = 5, seed fixed, permutation_0 = [3, 0, 4, 1, 2] and
permutation_1 = [1, 4, 0, 2, 3]: ``take(3)`` -> [3, 0, 4] (pos 3); ``take(3)`` -> [1, 2] from epoch 0 and then [1]
from epoch 1 -> [1, 2, 1] (epoch 1, pos 1). A prompt can therefore appear twice in one batch when a batch
straddles an epoch boundary; everything downstream keys on request, not on prompt, so that is harmless.

Eviction: a prompt drawn in epoch ``e`` and marked solved is excluded from epoch ``e + 1`` on
(``evicted_from[p] = e + 1``). If the stream has already crossed into ``e + 1`` when the decision lands, the
prompt is skipped when its turn comes, so it is never piloted in a later epoch (under strict eviction, the paper's).

Return (``easy_pool`` eviction, ``allocation/strategies.py``): a solved prompt drawn back from the easy pool in epoch
``e`` whose pilot does not reach p_solve again is un-evicted: it rejoins the stream from epoch ``e + 1``
(``back_from[p] = e + 1``; it stays out of the rest of epoch ``e``). A prompt is streamed in epoch ``x`` when
``x < evicted_from[p]`` or ``x >= back_from[p]``; a later eviction starts a new exclusion and clears ``back_from``.
Under strict eviction ``back_from`` is never set, so the stream is exactly the paper's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_NEVER = np.iinfo(np.int64).max


class PromptStream:
    def __init__(self, num_prompts: int, seed: int) -> None:
        self.num_prompts = int(num_prompts)
        self.seed = int(seed)
        self.epoch = 0
        self.pos = 0  # next index into the current epoch's permutation
        self.evicted_from = np.full(self.num_prompts, _NEVER, dtype=np.int64)
        self.back_from = np.full(self.num_prompts, _NEVER, dtype=np.int64)  # un-evicted: streamed again from here
        self._perm: np.ndarray | None = None
        self._perm_epoch = -1

    # ---- reading -------------------------------------------------------------------------------------------
    def permutation(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_prompts)
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def _streamed(self, ids: np.ndarray | slice, epoch: int) -> np.ndarray:
        """Mask: which of ``ids`` epoch ``epoch`` streams (not evicted by then, or back by then)."""
        return (self.evicted_from[ids] > epoch) | (self.back_from[ids] <= epoch)

    def live_count(self, epoch: int | None = None) -> int:
        """Prompts eligible in ``epoch`` (default: the current one)."""
        e = self.epoch if epoch is None else epoch
        return int(np.count_nonzero(self._streamed(slice(None), e)))

    def take(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Next ``k`` prompts and the epoch each was drawn in. Fewer only when every prompt is evicted."""
        ids: list[np.ndarray] = []
        epochs: list[np.ndarray] = []
        need = int(k)
        while need > 0:
            if self.pos >= self.num_prompts:
                self.epoch += 1
                self.pos = 0
                if self.live_count() == 0:
                    break  # the whole pool is solved: nothing left to stream
            perm = self.permutation(self.epoch)
            # Scan a window at a time: at paper scale (85K prompts) slicing the whole tail each round is wasteful.
            window = perm[self.pos : self.pos + max(2 * need, 1024)]
            ok = np.flatnonzero(self._streamed(window, self.epoch))
            if ok.shape[0] >= need:
                picked = window[ok[:need]]
                self.pos += int(ok[need - 1]) + 1
            else:
                picked = window[ok]
                self.pos += int(window.shape[0])
            if picked.shape[0]:
                ids.append(picked)
                epochs.append(np.full(picked.shape[0], self.epoch, dtype=np.int64))
                need -= int(picked.shape[0])
        if not ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(ids).astype(np.int64), np.concatenate(epochs)

    # ---- eviction --------------------------------------------------------------------------------------------
    def evict(self, prompt_ids: np.ndarray, drawn_epochs: np.ndarray) -> None:
        """Exclude each prompt from the epoch after the one it was drawn in (earliest decision wins). A prompt that
        was back in the stream (un-evicted) when drawn starts a new exclusion."""
        if prompt_ids.shape[0] == 0:
            return
        back = self.back_from[prompt_ids] <= drawn_epochs
        if back.any():
            self.evicted_from[prompt_ids[back]] = _NEVER  # the old exclusion is over; this eviction starts anew
        np.minimum.at(self.evicted_from, prompt_ids, drawn_epochs + 1)
        self.back_from[prompt_ids] = _NEVER

    def unevict(self, prompt_ids: np.ndarray, drawn_epochs: np.ndarray) -> None:
        """Take back each prompt's eviction: it is streamed again from the epoch after the one it was drawn in (a
        prompt whose exclusion would only start then is simply never evicted)."""
        if prompt_ids.shape[0] == 0:
            return
        back = np.asarray(drawn_epochs, np.int64) + 1
        never = self.evicted_from[prompt_ids] >= back
        self.evicted_from[prompt_ids[never]] = _NEVER
        self.back_from[prompt_ids[never]] = _NEVER
        self.back_from[prompt_ids[~never]] = back[~never]

    def is_evicted(self, prompt_id: int) -> bool:
        """Marked solved (and not un-evicted since)."""
        return bool(self.evicted_from[prompt_id] != _NEVER and self.back_from[prompt_id] == _NEVER)

    @property
    def evicted_count(self) -> int:
        """Prompts marked solved (and not un-evicted since)."""
        return int(np.count_nonzero((self.evicted_from != _NEVER) & (self.back_from == _NEVER)))

    # ---- state -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        ev = np.flatnonzero(self.evicted_from != _NEVER)
        state = {
            "epoch": self.epoch,
            "pos": self.pos,
            "evicted_prompts": ev.tolist(),
            "evicted_from": self.evicted_from[ev].tolist(),
        }
        back = np.flatnonzero(self.back_from != _NEVER)
        if back.shape[0]:  # only un-evictions (easy_pool) write these: a strict run's state is as it always was
            state["back_prompts"] = back.tolist()
            state["back_from"] = self.back_from[back].tolist()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.pos = int(state["pos"])
        self.evicted_from[:] = _NEVER
        ev = np.asarray(state["evicted_prompts"], dtype=np.int64)
        if ev.shape[0]:
            self.evicted_from[ev] = np.asarray(state["evicted_from"], dtype=np.int64)
        self.back_from[:] = _NEVER
        back = np.asarray(state.get("back_prompts", []), dtype=np.int64)
        if back.shape[0]:
            self.back_from[back] = np.asarray(state["back_from"], dtype=np.int64)
