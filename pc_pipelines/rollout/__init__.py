"""Rollout engines: the :class:`RolloutEngine` protocol and its implementations (see :mod:`.base`), registered by
name in :mod:`.registry` (``ENGINES``, ``register_engine``, ``get_engine``, ``engine_factory``).

Importing the package is light (no torch): the engines are imported from their modules,
:class:`~.transformers_engine.TransformersEngine` and :class:`~.vllm_engine.VLLMEngine`, or built by name through
the registry.
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
from .registry import (
    DEFAULT_ENGINE,
    ENGINES,
    EngineSpec,
    engine_factory,
    engine_names,
    get_engine,
    register_engine,
    unregister_engine,
)

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "FINISH_LENGTH",
    "FINISH_STOP",
    "EngineFactory",
    "EngineSpec",
    "RayRolloutEngine",
    "RequestOutput",
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "SamplingParams",
    "check_outputs",
    "close_engine",
    "derive_seed",
    "engine_factory",
    "engine_names",
    "get_engine",
    "register_engine",
    "sampling_plan",
    "unregister_engine",
]


def __getattr__(name: str) -> Any:
    """``RayRolloutEngine`` on first access (its module imports torch, which this package does not)."""
    if name == "RayRolloutEngine":
        from .ray_engine import RayRolloutEngine

        return RayRolloutEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
