"""Typed, self-validating configuration: one frozen dataclass per section, a run's resolved config, and presets.

The bottom layer with :mod:`pc_pipelines.errors` (stdlib only; YAML is read when a preset is): everything above
may import it, it imports nothing above it. Sections: :class:`AllocatorConfig` (the paper's settings),
:class:`TrainingConfig`, :class:`SimConfig`, :class:`ArithTaskConfig`, :class:`PolicyConfig`; a run's
:class:`RunConfig` holds them with its seed and family, and :func:`resolve` builds it from a preset and overrides.
"""

from .allocator import OVERSAMPLE_MAX, PC_ONLY_FIELDS, STRATEGY_KINDS, AllocatorConfig
from .policy import ARCHS, PolicyConfig
from .presets import PRESET_FORMAT_VERSION, available_presets, load_preset, parse_overrides, resolve
from .run import ADDED_FIELDS, ALL_SECTIONS, NOT_BEHAVIOUR, OPTIONAL_SECTIONS, SECTIONS, RunConfig, from_dict
from .sim import SimConfig
from .task import ArithTaskConfig
from .training import LOSS_AGG_MODES, TrainingConfig

__all__ = [
    "ADDED_FIELDS",
    "ALL_SECTIONS",
    "ARCHS",
    "LOSS_AGG_MODES",
    "NOT_BEHAVIOUR",
    "OPTIONAL_SECTIONS",
    "OVERSAMPLE_MAX",
    "PC_ONLY_FIELDS",
    "PRESET_FORMAT_VERSION",
    "SECTIONS",
    "STRATEGY_KINDS",
    "AllocatorConfig",
    "ArithTaskConfig",
    "PolicyConfig",
    "RunConfig",
    "SimConfig",
    "TrainingConfig",
    "available_presets",
    "from_dict",
    "load_preset",
    "parse_overrides",
    "resolve",
]
