"""Rollout engines: the :class:`RolloutEngine` protocol and its implementations (see :mod:`.base`).

Importing the package is light (no torch): the engines are imported from their modules,
:class:`~.transformers_engine.TransformersEngine` and :class:`~.vllm_engine.VLLMEngine`.
:class:`~.ray_engine.RayRolloutEngine` is also exported here, lazily: ``pc_pipelines.rollout.RayRolloutEngine``
imports its module (and torch) on first access; Ray itself only when an engine is built.
"""

from typing import Any

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
    close_engine,
    derive_seed,
    sampling_plan,
)

__all__ = [
    "FINISH_LENGTH",
    "FINISH_STOP",
    "EngineFactory",
    "RayRolloutEngine",
    "RequestOutput",
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "SamplingParams",
    "check_outputs",
    "close_engine",
    "derive_seed",
    "sampling_plan",
]


def __getattr__(name: str) -> Any:
    """``RayRolloutEngine`` on first access (its module imports torch, which this package does not)."""
    if name == "RayRolloutEngine":
        from .ray_engine import RayRolloutEngine

        return RayRolloutEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
