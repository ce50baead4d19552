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
from .transformers_engine import TransformersEngine, naive_generate

__all__ = [
    "FINISH_LENGTH",
    "FINISH_STOP",
    "RequestOutput",
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "SamplingParams",
    "TransformersEngine",
    "check_outputs",
    "derive_seed",
    "naive_generate",
]
