"""Rollout engines: the :class:`RolloutEngine` protocol and its implementations (see :mod:`.base`)."""

from .base import (
    FINISH_LENGTH,
    FINISH_STOP,
    RequestOutput,
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    check_outputs,
    derive_seed,
)
from .ray_engine import RayRolloutEngine  # imports ray only when an engine is built
from .transformers_engine import RoundPlan, TransformersEngine, naive_generate, plan_round

__all__ = [
    "FINISH_LENGTH",
    "FINISH_STOP",
    "RayRolloutEngine",
    "RequestOutput",
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "RoundPlan",
    "SamplingParams",
    "TransformersEngine",
    "check_outputs",
    "derive_seed",
    "naive_generate",
    "plan_round",
]
