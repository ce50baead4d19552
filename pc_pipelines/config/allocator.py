"""The allocator's typed configuration: the paper's settings (b_t, n, the band, d, ...) and PC's strategy choices.

A plain frozen dataclass: each field is documented where it is declared, and a value that can never work fails
at construction with a :class:`ConfigError` naming the field and the fix. Names of methods and strategies are
checked against their registries where the allocator is built (:func:`pc_pipelines.allocation.check_config`),
not here. Derived numbers (``b_g``, ``n_commit``) are properties, so a config cannot contradict itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import ConfigError, brief, check_finite, field_error

STRATEGY_KINDS = ("band", "sampling", "pilot", "commit", "eviction")
"""PC's five decisions; each has a ``<kind>_strategy`` field naming a registered strategy."""

OVERSAMPLE_MAX = 100.0
"""The largest oversample s: b_g = ceil(s * b_t) prompts are drawn per round (the paper uses 3)."""

PC_ONLY_FIELDS = ("n_pilot", "eviction_strategy", "return_share", "train_pilots")
"""Allocator settings that only Pilot-Commit reads: a run of another method given one of them explicitly is
refused (it would be ignored), and a preset's value of them is dropped for such a run."""


@dataclass(frozen=True)
class AllocatorConfig:
    method: str = "pc"
    """Allocation method: ``grpo``, ``dapo`` or ``pc`` (Pilot-Commit), or any registered method."""
    train_batch: int = 128
    """b_t: prompts (groups) per training step."""
    n: int = 64
    """Rollouts per trained group. GRPO and DAPO sample n per prompt; PC trains n_pilot + n_commit = n."""
    n_pilot: int | None = None
    """PC: pilot rollouts per screened prompt. None means n // 4 (the paper's 16+48 and 32+96 splits)."""
    oversample: float = 3.0
    """s: the sampling batch b_g = ceil(s * b_t) fresh prompts per round (DAPO and PC pilots)."""
    p_lower: float = 0.125
    """PC keep band, lower edge (inclusive): pilots with p_hat below it are deferred as too hard."""
    p_upper: float = 0.75
    """PC keep band, upper edge (inclusive): pilots with p_hat above it are skipped as too easy."""
    p_solve: float = 1.0
    """PC eviction threshold: a pilot with p_hat >= p_solve leaves the prompt pool from the next epoch."""
    evict: bool = True
    """PC: evict solved prompts (set False for the eviction-off ablation)."""
    max_age: int = 4
    """d: a buffered pilot is trained with lag (steps since its pilot) at most d, then expires."""
    max_rounds: int = 10
    """Generation rounds per step before the step trains on what it has (shortfall). PC needs >= 2."""
    binding: bool = True
    """PC: one engine call per round holding the commits of buffered prompts and the next pilots (paper's
    binding). False runs the pilot call, the filter, then a separate commit call (two calls per round)."""
    selection: str = "max_variance"
    """PC replay-buffer selection strategy: ``max_variance`` (default), ``most_recent``, ``random``."""
    train_pilots: bool = True
    """PC: a kept prompt's trained group is its pilot rollouts plus its commits (the paper). False: commits only,
    the pilots only screen (an ablation: the pilots that kept a prompt were chosen for landing in the band, so
    training on them conditions the group's baseline on that choice; commits-only groups are unconditioned draws).
    Each commit then needs at least 2 rollouts to have an advantage."""
    seed: int = 0
    """Seeds the prompt stream (shared by every method: common random numbers) and the buffer tie-breaks."""

    # ---- beyond the paper: PC's strategies, see allocation/strategies.py. Defaults = the paper. ----------------
    band_strategy: str = "static"
    """PC keep band: ``static`` (the paper's [p_lower, p_upper]) or ``adaptive`` (widened to fill the batch)."""
    sampling_strategy: str = "fixed"
    """PC pilots per round: ``fixed`` (b_g) or ``survival`` (as many as the survival rate says, at most b_g)."""
    survival_margin: float = 1.25
    """``survival`` sampling: pilot this many times the expected need (1 = exactly the expectation)."""
    pilot_strategy: str = "single"
    """PC pilot waves: ``single`` (n_pilot at once) or ``sequential`` (pilot_wave first, the rest if undecided)."""
    pilot_wave: int = 4
    """``sequential`` pilots: rollouts of the first wave (1 <= pilot_wave < n_pilot)."""
    commit_strategy: str = "uniform"
    """PC commit sizes: ``uniform`` (n_commit each) or ``variance`` (in proportion to the pilot reward std)."""
    commit_mean: int | None = None
    """``variance`` commits: mean commit rollouts per kept prompt (the round's budget / prompts). None: n_commit."""
    commit_min: int = 4
    """``variance`` commits: fewest commit rollouts a kept prompt gets (>= 1)."""
    commit_max: int | None = None
    """``variance`` commits: most commit rollouts a kept prompt gets. None: twice commit_mean."""
    eviction_strategy: str = "strict"
    """PC eviction: ``strict`` (the paper's: a solved prompt never returns) or ``easy_pool`` (solved prompts wait in
    an easy pool and come back as a bounded share of the pilots, and all of them once the stream has none left)."""
    return_share: float = 0.125
    """``easy_pool`` eviction: the share of each round's pilot draw taken from the easy pool (0 < share <= 1), kept
    exact over rounds by a carried fractional credit; only prompts solved in an earlier epoch return, oldest first."""

    # ---- beyond the paper: the history prior, for every method (allocation/screen.py). Default = off. ----------
    screen_strategy: str = "none"
    """Screening drawn prompts before any rollout: ``none`` (the paper: every drawn prompt is piloted / sampled) or
    ``posterior`` (a per-prompt Beta posterior over the pass rate from every observation of the run, discounted
    per step; a prompt confidently useless is skipped without a rollout, recorded as ``screened_by_prior``)."""
    screen_discount: float = 0.9
    """``posterior`` screen: gamma in (0, 1], the weight an observation keeps per step since it was made (1: no
    forgetting). The policy moves, so old pass rates say less."""
    screen_threshold: float = 0.1
    """``posterior`` screen: skip a prompt when its predicted chance of being useful is below this, in (0, 1):
    PC, the chance its pilot lands in the keep band; GRPO / DAPO, the chance its group is not all equal."""
    screen_min_evidence: float = 16.0
    """``posterior`` screen: discounted rollouts of the prompt itself needed before it can be skipped (>= 0)."""
    screen_max_skips: int = 3
    """``posterior`` screen: a prompt skipped this many times in a row is piloted on its next draw (>= 0; 0: no
    cap on consecutive skips, the floor is then ``screen_max_unseen``), so no prompt is starved."""
    screen_max_unseen: int = 0
    """``posterior`` screen: the exploration floor in steps (>= 0; 0: off): a prompt whose last sampled rollout is
    more than this many steps back is piloted on its next draw, however often it is drawn, so every posterior is
    refreshed at least this often. At least one of ``screen_max_skips`` and ``screen_max_unseen`` is on."""
    screen_explore: float = 0.05
    """``posterior`` screen: the share of would-be skips sampled anyway, in [0, 1), drawn from the screen's own
    seeded generator (the prompt stream stays common across methods)."""
    screen_prior_strength: float = 2.0
    """``posterior`` screen: kappa > 0, the pseudo-rollouts of the pooled prior Beta(kappa m, kappa (1 - m)), m the
    discounted pass rate of the prompt's group (the dataset's declared attribute; one group by default)."""
    screen_early_wave: bool = False
    """``posterior`` screen, PC with sequential pilots: a first wave whose rewards are all equal decides its prompt
    early only when the posterior updated with the wave gives the full pilot a chance below ``screen_threshold`` of
    landing in band; otherwise the later wave is sampled (a prompt the history calls middling is not dropped on two
    equal rewards)."""
    screen_early_threshold: float | None = None
    """``posterior`` screen with ``screen_early_wave``: the chance of landing in band a flat first wave needs to go
    on to its later wave, in (0, 1) (None: ``screen_threshold``). Going on costs the later wave's rollouts, so it may
    ask more than a draw's skip does."""
    screen_draw_cap: int = 4
    """``posterior`` screen: a draw of k prompts reads at most ``screen_draw_cap * k`` prompts from the stream
    (>= 2; 0: as many as it needs, the step's draws reading at most one pass over the live pool in all); once it has,
    the rest of the k are taken unscreened (counted per step, ``prior_draw_capped``), so a step never runs short
    because of the prior."""

    # ---- derived numbers -------------------------------------------------------------------------------
    @property
    def sampling_batch(self) -> int:
        """b_g = ceil(s * b_t); the tiny epsilon keeps 3 * 128 at 384, not 385, under float error."""
        return int(math.ceil(self.oversample * self.train_batch - 1e-9))

    @property
    def pilot_n(self) -> int:
        return self.n_pilot if self.n_pilot is not None else max(1, self.n // 4)

    @property
    def commit_n(self) -> int:
        return self.n - self.pilot_n

    @property
    def commit_mean_n(self) -> int:
        return self.commit_mean if self.commit_mean is not None else self.commit_n

    @property
    def commit_max_n(self) -> int:
        return self.commit_max if self.commit_max is not None else 2 * self.commit_mean_n

    @property
    def strategies(self) -> dict[str, str]:
        """PC's strategy choice per kind (band, sampling, pilot, commit, eviction)."""
        return {kind: getattr(self, f"{kind}_strategy") for kind in STRATEGY_KINDS}

    # ---- validation (the registries' checks are in pc_pipelines.allocation.check_config) ------------------------
    def __post_init__(self) -> None:
        check_finite(self)
        for name in ("method", "selection", "screen_strategy", *(f"{kind}_strategy" for kind in STRATEGY_KINDS)):
            if not isinstance(getattr(self, name), str):
                raise field_error(self, name, "must be a name", f"give {name} the name of a registered choice")
        for name in ("train_batch", "n", "max_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise field_error(self, name, "must be an integer", f"pass a whole number like {name}=8")
            if value < 1:
                raise field_error(self, name, "must be at least 1 (counts cannot be zero or negative)", f"set {name} >= 1")
        if isinstance(self.max_age, bool) or not isinstance(self.max_age, int) or self.max_age < 0:
            raise field_error(self, "max_age", "must be an integer >= 0", "set max_age (the paper's d) to 4, or 0 for no lag")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise field_error(self, "seed", "must be an integer >= 0", "pass a non-negative seed")
        if (isinstance(self.oversample, bool) or not isinstance(self.oversample, (int, float))
                or not math.isfinite(self.oversample) or not 1 <= self.oversample <= OVERSAMPLE_MAX):
            raise field_error(self, "oversample",
                              f"must be a number from 1 to {OVERSAMPLE_MAX:g} (b_g = ceil(s * b_t) prompts are drawn "
                              "per round: it must cover b_t and stay a count a round can draw)",
                              f"set oversample in [1, {OVERSAMPLE_MAX:g}], e.g. 3 as the paper")
        for name in ("p_lower", "p_upper", "p_solve"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not (0.0 <= float(value) <= 1.0):
                raise field_error(self, name, "thresholds are pass rates and must lie in [0, 1]", f"set {name} inside [0, 1]")
        if self.p_lower > self.p_upper:
            raise field_error(self,
                "p_lower",
                f"is above p_upper={self.p_upper}, so the keep band is empty",
                "choose p_lower <= p_upper (paper: 0.125 <= 0.75)",
            )
        if self.n_pilot is not None and (isinstance(self.n_pilot, bool) or not isinstance(self.n_pilot, int)):
            raise field_error(self, "n_pilot", "must be an integer", "pass a whole number of pilot rollouts")
        if not isinstance(self.survival_margin, (int, float)) or not (1.0 <= float(self.survival_margin) <= 10.0):
            raise field_error(self, "survival_margin", "must be a number in [1, 10]", "set survival_margin=1.25")
        if (isinstance(self.return_share, bool) or not isinstance(self.return_share, (int, float))
                or not (0.0 < float(self.return_share) <= 1.0)):
            raise field_error(self, "return_share",
                              "must be a number in (0, 1]: the share of a round's pilots drawn from the easy pool",
                              "set return_share=0.125 (one pilot in eight), or choose eviction_strategy=strict "
                              "for no returns")
        for name in ("pilot_wave", "commit_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise field_error(self, name, "must be an integer >= 1", f"set {name} to a whole number >= 1")
        if isinstance(self.screen_discount, bool) or not isinstance(self.screen_discount, (int, float)) or not (
                0.0 < float(self.screen_discount) <= 1.0):
            raise field_error(self, "screen_discount", "must be a number in (0, 1]: the weight an observation keeps "
                              "per step", "set screen_discount=0.9, or 1 for no forgetting")
        for name, fix in (("screen_threshold", "set screen_threshold=0.1"),
                          ("screen_explore", "set screen_explore=0.05, or 0 for none")):
            value = getattr(self, name)
            low_ok = name == "screen_explore"
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    (0.0 <= float(value) if low_ok else 0.0 < float(value)) and float(value) < 1.0):
                raise field_error(self, name, f"must be a number in {'[0, 1)' if low_ok else '(0, 1)'}", fix)
        for name, low, fix in (("screen_min_evidence", 0.0, "set screen_min_evidence=16 (one pilot's rollouts)"),
                               ("screen_prior_strength", 1e-9, "set screen_prior_strength=2")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) < low:
                raise field_error(self, name, f"must be a number {'>= 0' if low == 0 else '> 0'}", fix)
        for name, low, fix in (("screen_max_skips", 0, "set screen_max_skips=3, or 0 with screen_max_unseen > 0"),
                               ("screen_max_unseen", 0, "set screen_max_unseen=10 (steps), or 0 for no time floor"),
                               ("screen_draw_cap", 0, "set screen_draw_cap=4 (at most 3 skips per prompt wanted), "
                                                      "or 0 to read as needed (one pass over the live pool a step)")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise field_error(self, name, f"must be an integer >= {low}", fix)
        if self.screen_draw_cap == 1:
            raise field_error(self, "screen_draw_cap", "must be 0 or >= 2: a cap of 1 lets the prior skip nothing",
                              "set screen_draw_cap=4, or 0 to read as needed (one pass over the live pool a step)")
        v = self.screen_early_threshold
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < float(v) < 1.0):
            raise field_error(self, "screen_early_threshold", "must be a number in (0, 1) or None",
                              "set screen_early_threshold=0.4, or leave it unset for screen_threshold")
        if not isinstance(self.screen_early_wave, bool):
            raise field_error(self, "screen_early_wave", "must be true or false",
                              "set screen_early_wave=true or screen_early_wave=false")
        if self.screen_early_wave and (self.screen_strategy == "none" or self.method != "pc"
                                       or self.pilot_strategy != "sequential"):
            raise field_error(self, "screen_early_wave", "needs PC with sequential pilots and a screen: it decides "
                              f"first pilot waves (method {brief(self.method)}, pilot_strategy "
                              f"{brief(self.pilot_strategy)}, screen_strategy {brief(self.screen_strategy)})",
                              "set screen_early_wave=false, or method=pc pilot_strategy=sequential "
                              "screen_strategy=posterior")
        if self.screen_strategy != "none" and self.screen_max_skips == 0 and self.screen_max_unseen == 0:
            raise field_error(self, "screen_max_skips", "is 0 with screen_max_unseen 0: the prior would have no "
                              "exploration floor and could starve a prompt for the whole run",
                              "set screen_max_unseen=10 (steps) or screen_max_skips=3")
        if not isinstance(self.train_pilots, bool):
            raise field_error(self, "train_pilots", "must be true or false",
                              "set train_pilots=true (the paper) or train_pilots=false (commits only)")
        if not self.train_pilots and self.method == "pc":
            fewest = self.commit_min if self.commit_strategy == "variance" else self.commit_n
            if fewest < 2:
                field = "commit_min" if self.commit_strategy == "variance" else "n"
                raise field_error(self, "train_pilots", f"is false, so a trained group is its commits alone, and "
                                  f"{field} allows a commit of {fewest} rollout: a group of one has no advantage",
                                  "give every commit at least 2 rollouts (commit_min >= 2 with variance commits, "
                                  "n - n_pilot >= 2 with uniform ones), or set train_pilots=true")
        for name in ("commit_mean", "commit_max"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise field_error(self, name, "must be an integer >= 1 or None", f"set {name} >= 1, or leave it unset")

    def check_pool(self, num_prompts: int) -> None:
        """Fail early when the prompt pool cannot feed a batch."""
        if num_prompts < 1:
            raise ConfigError("The prompt pool is empty. Fix: give the allocator at least train_batch prompts.")
        if self.train_batch > num_prompts:
            raise ConfigError(
                f"AllocatorConfig.train_batch={self.train_batch} is larger than the prompt pool ({num_prompts} "
                f"prompts). Fix: lower train_batch to at most {num_prompts} or use a larger dataset."
            )

    # ---- plain-dict round trip (checkpoints, the store, presets) -------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AllocatorConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown allocator setting(s) {unknown}. Fix: use only {sorted(known)}.")
        return cls(**data)

    def replace(self, **changes: Any) -> AllocatorConfig:
        return AllocatorConfig.from_dict({**self.to_dict(), **changes})
