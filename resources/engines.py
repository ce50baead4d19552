"""Rollout engines as resources: the local backend asks for an engine bound to its policy."""


from abc import abstractmethod

from dagster import ConfigurableResource
from pydantic import Field

from pc_pipelines.rollout import RolloutEngine


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
