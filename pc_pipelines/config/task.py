"""The embedded task's typed configuration: the synthetic addition task's pool, digit lengths and splits.

The task itself (what the numbers mean, how the splits are drawn) is :mod:`pc_pipelines.data.arith`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import check_finite, field_error


@dataclass(frozen=True)
class ArithTaskConfig:
    num_prompts: int = 4000
    """RL training prompt pool size."""
    min_digits: int = 1
    """Shortest RL prompt (digits of the longer operand)."""
    max_digits: int = 6
    """Longest RL prompt; operands are zero-padded to this width."""
    heldout_per_length: int = 100
    """Held-out problems per digit length (the evaluation split, reported per length)."""
    sft_examples: int = 60_000
    """Size of the SFT warm-start set."""
    sft_max_digits: int = 3
    """The warm start sees mostly problems up to this many digits..."""
    sft_long_share: float = 0.006
    """...and this share of longer ones (up to max_digits), so long prompts start hard but learnable."""
    data_seed: int = 0
    """Fixes the splits. Not the run seed: every method and seed of a study trains and is evaluated on one task."""
    length_weights: str | None = None
    """The RL pool's mix of digit lengths: one non-negative weight per length from min_digits to max_digits, comma
    separated (``"1,2,2"`` with lengths 4-6: a fifth of 4-digit prompts). None (default): every length equally often.
    Like num_prompts and min_digits, it is not a field the warm start depends on."""

    def __post_init__(self) -> None:
        check_finite(self)
        if self.num_prompts < 1:
            raise field_error(self, "num_prompts", "must be >= 1", "set num_prompts to at least the train batch")
        if not 1 <= self.min_digits <= self.max_digits:
            raise field_error(self, "min_digits", f"must lie in [1, max_digits={self.max_digits}]", "e.g. min_digits=1, max_digits=5")
        if self.max_digits > 12:
            raise field_error(self, "max_digits", "must be <= 12 (responses are sized for it)", "use at most 12 digits")
        if not 1 <= self.sft_max_digits <= self.max_digits:
            raise field_error(self, "sft_max_digits", f"must lie in [1, max_digits={self.max_digits}]", "e.g. 3 with max_digits=5")
        if not 0.0 <= self.sft_long_share <= 1.0:
            raise field_error(self, "sft_long_share", "must lie in [0, 1]", "e.g. 0.04")
        if self.heldout_per_length < 1:
            raise field_error(self, "heldout_per_length", "must be >= 1", "e.g. 100")
        if self.data_seed < 0:
            raise field_error(self, "data_seed", "must be >= 0", "e.g. 0")
        if self.sft_examples < 1:
            raise field_error(self, "sft_examples", "must be >= 1", "e.g. 60000")
        if self.length_weights is not None:
            self._check_length_weights()

    def _check_length_weights(self) -> None:
        lengths = self.max_digits - self.min_digits + 1
        example = ",".join(["1"] * lengths)
        raw = self.length_weights
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise field_error(self, "length_weights", "must be comma-separated numbers", f'e.g. "{example}"')
        # A single weight parses as a number (YAML / --set): keep the field a string, as stored.
        object.__setattr__(self, "length_weights", str(raw).strip())
        parts = [p.strip() for p in self.length_weights.split(",")]
        try:
            weights = [float(p) for p in parts]
        except ValueError:
            raise field_error(self, "length_weights", "must be comma-separated numbers",
                              f'e.g. "{example}" (one weight per length {self.min_digits}-{self.max_digits})') from None
        if len(weights) != lengths:
            raise field_error(self, "length_weights",
                              f"has {len(weights)} weight(s) for the {lengths} lengths {self.min_digits}-{self.max_digits}",
                              f'give one weight per length from min_digits to max_digits, e.g. "{example}"')
        if any(not (w >= 0.0) or w == float("inf") for w in weights):
            raise field_error(self, "length_weights", "weights must be finite and >= 0",
                              f'e.g. "{example}"; 0 leaves a length out')
        if sum(weights) <= 0.0:
            raise field_error(self, "length_weights", "has no positive weight, so the pool would be empty",
                              f'give at least one length a positive weight, e.g. "{example}"')

    def length_probabilities(self) -> list[float] | None:
        """The share of each length min_digits..max_digits in the RL pool (None: uniform, drawn as before the field
        existed)."""
        if self.length_weights is None:
            return None
        weights = [float(p) for p in self.length_weights.split(",")]
        return [w / sum(weights) for w in weights]

    @property
    def width(self) -> int:
        """Operand width after zero padding (derived: the longest operand any split holds)."""
        return self.max_digits

    def to_dict(self) -> dict:
        return asdict(self)

    def sft_fields(self) -> dict:
        """The fields the SFT warm start depends on (the RL pool's size and range are not among them)."""
        d = self.to_dict()
        d.pop("num_prompts")
        d.pop("min_digits")
        d.pop("length_weights")
        return d
