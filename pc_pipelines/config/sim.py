"""The scale simulator's typed configuration: its prompt population and how training moves pass rates.

The model these numbers drive is documented in :mod:`pc_pipelines.simulator.model`. Two learning laws: ``linear``
(the hand-set law, the default: every existing output is made by it) and ``fitted`` (per-step progress saturating in
the step's signal, with gradient noise that shrinks with group size; its ``law_*`` numbers come from
``pilot-commit sim-fit``, :mod:`pc_pipelines.simulator.fit`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import check_finite, field_error

LAWS = ("linear", "fitted")
"""The learning laws :mod:`pc_pipelines.simulator.model` implements."""


@dataclass(frozen=True)
class SimConfig:
    num_prompts: int = 85_000
    """Training prompt pool size (DeepMath-103K without binary questions has about 85K)."""
    difficulty_mean: float = 1.5
    """Mean difficulty logit: the average prompt starts at pass rate sigmoid(-difficulty_mean)."""
    difficulty_spread: float = 2.5
    """Std of the difficulty logits: the spread of initial pass rates (0 = all alike)."""
    local_rate: float = 0.5
    """Per-prompt logit gain per unit of trained group reward std (both laws)."""
    global_rate: float = 1e-4
    """``linear`` law: shared-skill logit gain per unit of trained group reward std (transfer to every prompt)."""
    eval_prompts: int = 2_000
    """Held-out population for the accuracy curve."""
    seed: int = 0
    """Seeds the population and the reward draws (the allocator has its own seed in AllocatorConfig)."""

    # ---- added with the fitted law (issue 44); the defaults reproduce the linear law's runs exactly ------------
    law: str = "linear"
    """How training moves shared skill: ``linear`` (global_rate x the sum of trained reward stds) or ``fitted``
    (law_rate x the step's signal share S / sqrt(S^2 + V), see simulator.model)."""
    law_rate: float = 0.003
    """``fitted``: shared-skill logit gain of a step whose gradient is all signal (the saturation level), >= 0."""
    law_noise_floor: float = 0.0
    """``fitted``: c, a trained group's gradient noise variance (in units of its signal^2) that no size removes."""
    law_noise_scale: float = 1.0
    """``fitted``: v, the part of a group's noise variance that shrinks with its size n as v / n**law_noise_power."""
    law_noise_power: float = 1.0
    """``fitted``: gamma, how fast a group's noise variance shrinks with its size (1: independent rollouts), >= 0."""
    law_step_noise: float = 0.0
    """``fitted``: eta, the std (in units of sqrt(V) / sqrt(S^2 + V)) of a step's random skill change: 0 = a step
    gains exactly its mean; the noise falls as groups grow (V shrinks), >= 0."""
    law_skill_cap: float | None = None
    """Both laws: the shared skill (logits) at which gains stop: a step's gain is scaled by 1 - skill / cap
    (None: no cap), > 0."""
    difficulty_mix_weight: float = 0.0
    """Share of the prompts whose difficulty logit comes from a second Normal (difficulty_mean_2, difficulty_spread_2);
    0 = one Normal, as before. In [0, 1)."""
    difficulty_mean_2: float = 0.0
    """Second component: mean difficulty logit (pass rate sigmoid(-difficulty_mean_2))."""
    difficulty_spread_2: float = 1.0
    """Second component: std of its difficulty logits, >= 0."""
    eval_difficulty_mean: float | None = None
    """Held-out population's mean difficulty logit (None: the training mix, as before)."""
    eval_difficulty_spread: float | None = None
    """Held-out population's std of difficulty logits (None: the training mix's), >= 0."""
    eval_noise: float = 0.0
    """Std of Gaussian noise added to each reported accuracy (a measured evaluation's noise; 0: the exact
    expectation, as before), >= 0."""

    # ---- added with issue 57's law terms; the defaults leave every earlier run's law as it was ---------------------
    law_cap_pc: float = 1.0
    """Both laws: the skill cap's multiplier for a PC run (its plateau may differ from GRPO's: the groups it trains
    are chosen in band); 1 = the same cap, > 0. Applied only with a law_skill_cap."""
    law_cap_prior: float = 1.0
    """Both laws: the skill cap's multiplier for a run with the history prior (allocator.screen_strategy=posterior);
    1 = the same cap, > 0. Applied only with a law_skill_cap."""
    law_gain_max: float | None = None
    """Both laws: the saturation of a step's mean skill gain g (the trainer clips every update): g becomes
    g / (1 + g / law_gain_max) (None: no saturation), > 0."""

    def __post_init__(self) -> None:
        check_finite(self)
        for name in ("num_prompts", "eval_prompts"):
            if getattr(self, name) < 1:
                raise field_error(self, name, "must be >= 1", f"set {name} >= 1")
        for name in ("difficulty_spread", "local_rate", "global_rate", "law_rate", "law_noise_floor",
                     "law_noise_scale", "law_noise_power", "law_step_noise", "difficulty_spread_2", "eval_noise"):
            if getattr(self, name) < 0:
                raise field_error(self, name, "must be >= 0", "use a value >= 0")
        if self.law not in LAWS:
            raise field_error(self, "law", f"is not a learning law ({', '.join(LAWS)})", "use linear or fitted")
        if self.law_skill_cap is not None and self.law_skill_cap <= 0:
            raise field_error(self, "law_skill_cap", "must be > 0", "use a positive cap, or leave it empty (no cap)")
        for name in ("law_cap_pc", "law_cap_prior"):
            if getattr(self, name) <= 0:
                raise field_error(self, name, "must be > 0", f"use a positive multiplier ({name}=1 leaves the cap as "
                                  "it is)")
        if self.law_gain_max is not None and self.law_gain_max <= 0:
            raise field_error(self, "law_gain_max", "must be > 0", "use a positive gain, or leave it empty (no "
                              "saturation)")
        if not 0 <= self.difficulty_mix_weight < 1:
            raise field_error(self, "difficulty_mix_weight", "must be in [0, 1)", "use a share in [0, 1)")
        if self.eval_difficulty_spread is not None and self.eval_difficulty_spread < 0:
            raise field_error(self, "eval_difficulty_spread", "must be >= 0", "use a value >= 0, or leave it empty")
        if self.law_noise_floor + self.law_noise_scale == 0 and self.law == "fitted":
            raise field_error(self, "law_noise_scale", "and law_noise_floor are both 0 (a step would be all signal "
                              "whatever it trained)", "give law_noise_scale a value > 0")

    def to_dict(self) -> dict:
        return asdict(self)
