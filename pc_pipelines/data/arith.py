"""The embedded default's verifiable task: zero-padded addition with a controllable spread of difficulty.

Why this task (docs/DESIGN.md section 4): the comparison of allocators is only meaningful if the run holds a
skill RL can *learn and transfer* within minutes on a CPU, so that prompts move from "hard" through the pass-rate
band to "solved" as in the paper's Figure 1. Sharpening an over-smoothed policy or memorised facts RL cannot reach
both make the comparison meaningless (a prototype measured exactly that). What worked in a prototype, and what
this module builds:

* **Addition only**, operands **zero-padded** to a fixed width ``W`` (``00123+04567``): every digit sits at a
  fixed position, so the model learns position-wise digit addition plus carries, far faster than with ragged
  operands.
* **Difficulty = digit length** ``L`` = the longer operand's number of significant digits. The SFT warm start sees
  mostly ``L <= sft_max_digits`` (3), plus a small share ``sft_long_share`` of longer problems; RL prompts span
  ``1 .. max_digits`` (5). Long problems exercise high-position digits and long carry chains the warm start has
  rarely seen: they start hard, and RL can teach them (the prototype's greedy accuracy went 0.84 -> 0.90).
* The **response** is the zero-padded sum inside ``\\boxed{}`` (width ``W + 1``), e.g. ``\\boxed{004690}``;
  math-verify grades it numerically against the unpadded gold ``4690``.

Everything is seeded: ``build_splits(config)`` returns the same RL pool, held-out split and SFT set for the
same config (its ``data_seed``). The held-out split has ``heldout_per_length`` problems per digit length and shares no
(a, b) pair with the RL pool or the SFT set, except where a digit length has too few pairs to keep them apart
(1-digit addition has only 100 ordered pairs: those are reported as overlapping, not hidden).

Worked example (W = 5): a = 123 (L=3), b = 4567 (L=4) -> L = 4, question ``00123+04567``, prompt
``00123+04567 Let's think step by step and output the final answer within \\boxed{}.``, gold ``4690``, target
response ``\\boxed{004690}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config.task import ArithTaskConfig


@dataclass(frozen=True)
class ArithProblems:
    """A split as columns: problem ``i`` is ``a[i] + b[i]`` of digit length ``digits[i]``."""

    a: np.ndarray  # int64
    b: np.ndarray  # int64
    digits: np.ndarray  # int8
    width: int
    ids: np.ndarray = field(default=None)  # type: ignore[assignment]  # stable ids within the split

    def __post_init__(self) -> None:
        if self.ids is None:
            object.__setattr__(self, "ids", np.arange(len(self.a), dtype=np.int64))

    def __len__(self) -> int:
        return int(self.a.shape[0])

    def question(self, i: int) -> str:
        w = self.width
        return f"{int(self.a[i]):0{w}d}+{int(self.b[i]):0{w}d}"

    def gold(self, i: int) -> str:
        return str(int(self.a[i]) + int(self.b[i]))

    def target(self, i: int) -> str:
        """The SFT target response: the zero-padded sum (width W + 1) in ``\\boxed{}``."""
        return f"\\boxed{{{int(self.a[i]) + int(self.b[i]):0{self.width + 1}d}}}"

    def questions(self) -> list[str]:
        return [self.question(i) for i in range(len(self))]

    def golds(self) -> list[str]:
        return [self.gold(i) for i in range(len(self))]

    def subset(self, idx: np.ndarray) -> ArithProblems:
        return ArithProblems(self.a[idx], self.b[idx], self.digits[idx], self.width, self.ids[idx])

    def keys(self) -> np.ndarray:
        """One int per ordered pair (a, b), for disjointness checks."""
        return self.a * (10 ** self.width) + self.b


@dataclass(frozen=True)
class ArithSplits:
    train: ArithProblems  # RL prompt pool (prompt id = index)
    heldout: ArithProblems  # evaluation split, heldout_per_length per digit length
    sft: ArithProblems  # warm-start set
    heldout_overlap: dict[int, int]  # digit length -> held-out problems whose pair also occurs in train or SFT


def _operands(rng: np.random.Generator, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each digit length L: one operand with exactly L significant digits, the other with 1..L, order random."""
    k = len(lengths)
    lo = np.where(lengths == 1, 0, 10 ** (lengths - 1))
    hi = 10**lengths
    long_ = lo + (rng.random(k) * (hi - lo)).astype(np.int64)
    other_len = 1 + (rng.random(k) * lengths).astype(np.int64)
    lo2 = np.where(other_len == 1, 0, 10 ** (other_len - 1))
    hi2 = 10**other_len
    short = lo2 + (rng.random(k) * (hi2 - lo2)).astype(np.int64)
    swap = rng.random(k) < 0.5
    a = np.where(swap, short, long_).astype(np.int64)
    b = np.where(swap, long_, short).astype(np.int64)
    return a, b


def _problems(rng: np.random.Generator, lengths: np.ndarray, width: int) -> ArithProblems:
    lengths = np.asarray(lengths, dtype=np.int64)
    a, b = _operands(rng, lengths)
    return ArithProblems(a, b, lengths.astype(np.int8), width)


def build_splits(config: ArithTaskConfig) -> ArithSplits:
    """The RL pool, the held-out split and the SFT set for ``config`` (seeded by its ``data_seed``)."""
    # One generator per split: the SFT set (hence the base policy) does not depend on the RL pool's size or range.
    held_rng, train_rng, sft_rng = (np.random.default_rng([config.data_seed, 0xA817, k]) for k in range(3))
    w = config.width
    lengths_all = np.arange(config.min_digits, config.max_digits + 1)
    # Held-out first, so its pairs can be kept out of the other splits.
    heldout = _problems(held_rng, np.repeat(np.arange(1, config.max_digits + 1), config.heldout_per_length), w)
    held_keys = set(heldout.keys().tolist())

    def draw_excluding(rng: np.random.Generator, lengths: np.ndarray) -> ArithProblems:
        probs = _problems(rng, lengths, w)
        clash = np.fromiter((k in held_keys for k in probs.keys().tolist()), bool, len(probs))
        # Redraw clashing pairs a few times; short lengths may have too few pairs to avoid every clash.
        for _ in range(8):
            if not clash.any():
                break
            idx = np.flatnonzero(clash)
            a2, b2 = _operands(rng, lengths[idx])
            probs.a[idx], probs.b[idx] = a2, b2
            clash[idx] = np.fromiter((k in held_keys for k in probs.keys()[idx].tolist()), bool, len(idx))
        return probs

    # Uniform lengths are drawn without ``p`` (as before length_weights existed: same pool, same runs).
    shares = config.length_probabilities()
    train = draw_excluding(train_rng, train_rng.choice(lengths_all, size=config.num_prompts)
                           if shares is None else train_rng.choice(lengths_all, size=config.num_prompts, p=shares))
    n_long = int(round(config.sft_examples * config.sft_long_share)) if config.sft_max_digits < config.max_digits else 0
    short_lengths = sft_rng.choice(np.arange(1, config.sft_max_digits + 1), size=config.sft_examples - n_long)
    long_lengths = sft_rng.choice(np.arange(config.sft_max_digits + 1, config.max_digits + 1), size=n_long)
    sft_lengths = sft_rng.permutation(np.concatenate([short_lengths, long_lengths.astype(np.int64)]))
    sft = draw_excluding(sft_rng, sft_lengths.astype(np.int64))
    seen = set(train.keys().tolist()) | set(sft.keys().tolist())
    overlap: dict[int, int] = {}
    for i, key in enumerate(heldout.keys().tolist()):
        if key in seen:
            d = int(heldout.digits[i])
            overlap[d] = overlap.get(d, 0) + 1
    return ArithSplits(train=train, heldout=heldout, sft=sft, heldout_overlap=overlap)


def probe_problems(config: ArithTaskConfig, n: int) -> ArithProblems:
    """``n`` problems of the lengths the SFT set barely covers (``sft_max_digits + 1 .. max_digits``), from a
    stream of their own (neither the RL pool's nor the SFT set's). The SFT warm start's stopping rule measures its
    pass rate on them, so the probe depends only on the fields the warm start depends on (``sft_fields``)."""
    lo = min(config.sft_max_digits + 1, config.max_digits)
    rng = np.random.default_rng([config.data_seed, 0xA817, 3])
    return _problems(rng, rng.choice(np.arange(lo, config.max_digits + 1), size=n), config.width)
