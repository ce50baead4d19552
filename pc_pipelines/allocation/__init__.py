"""Rollout allocation: GRPO, DAPO and Pilot-Commit as pure, numpy-only bookkeeping (docs/DESIGN.md section 3).

This package is where the paper lives. It never sees tokens or tensors, only prompt ids, rollout counts, rollout
ids and rewards, and it imports nothing heavier than numpy (its config, :class:`AllocatorConfig`, lives in the
config layer below it). Start with :class:`Allocator` and the method classes in :mod:`.methods`; what a method
may do in a step is :class:`StepContext`, in :mod:`.step` (the step API, imported by methods and allocator alike).
"""

from ..config.allocator import AllocatorConfig
from .allocator import Allocator, check_config
from .buffer import SELECTION_STRATEGIES, BufferEntry, ReplayBuffer, SelectionStrategy, register_selection
from .methods import METHODS, AllocationMethod, get_method, register_method, training_methods
from .step import AllocatorError, CallResult, StepContext, StepSession
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
    "check_config",
    "get_method",
    "register_method",
    "register_selection",
    "training_methods",
]
