"""Rollout allocation: GRPO, DAPO and Pilot-Commit as pure, numpy-only bookkeeping (DESIGN.md section 3).

This package is where the paper lives. It never sees tokens or tensors, only prompt ids, rollout counts, rollout
ids and rewards, and it imports nothing heavier than numpy. Start with :class:`Allocator` and the method classes
in :mod:`.methods`.
"""

from .allocator import Allocator, AllocatorError, CallResult, StepContext, StepSession
from .buffer import SELECTION_STRATEGIES, BufferEntry, ReplayBuffer, SelectionStrategy, register_selection
from .config import AllocatorConfig, ConfigError, check_finite, field_error
from .methods import METHODS, AllocationMethod, get_method, register_method
from .strategies import STRATEGIES, STRATEGY_KINDS, Strategy, proportional_sizes, register_strategy
from .stream import PromptStream
from .types import (
    Decision,
    EngineCall,
    GenerationRequest,
    Observations,
    Rule,
    Stage,
    StepLedger,
    StepOutcome,
    TrainedGroup,
)

__all__ = [
    "Allocator",
    "AllocatorError",
    "AllocatorConfig",
    "AllocationMethod",
    "BufferEntry",
    "CallResult",
    "ConfigError",
    "Decision",
    "EngineCall",
    "GenerationRequest",
    "METHODS",
    "Observations",
    "PromptStream",
    "ReplayBuffer",
    "Rule",
    "STRATEGIES",
    "STRATEGY_KINDS",
    "Strategy",
    "proportional_sizes",
    "register_strategy",
    "SELECTION_STRATEGIES",
    "SelectionStrategy",
    "Stage",
    "StepContext",
    "StepLedger",
    "StepOutcome",
    "StepSession",
    "TrainedGroup",
    "check_finite",
    "field_error",
    "get_method",
    "register_method",
    "register_selection",
]
