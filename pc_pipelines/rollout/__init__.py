"""Rollout engines: the :class:`RolloutEngine` protocol and its implementations (see :mod:`.base`).

Importing the package is light (no torch): the engines are imported from their modules,
:class:`~.transformers_engine.TransformersEngine` and :class:`~.vllm_engine.VLLMEngine`.
"""

from .base import (
    FINISH_LENGTH,
    FINISH_STOP,
    EngineFactory,
    RequestOutput,
    Rollout,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    check_outputs,
    derive_seed,
)

__all__ = [
    "FINISH_LENGTH",
    "FINISH_STOP",
    "EngineFactory",
    "RequestOutput",
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "SamplingParams",
    "check_outputs",
    "derive_seed",
]

