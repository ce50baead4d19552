"""Where a training segment runs. Local: in the Dagster process (the embedded default). The scale issue adds a
Kubernetes backend that launches the in-pod entrypoint through ``PipesK8sClient``."""


from abc import abstractmethod
from typing import Callable

from dagster import ConfigurableResource
from pydantic import Field

from pc_pipelines.loop import EngineFactory, SegmentResult, StepRecord, TrainingRun, run_segment
from pc_pipelines.store import Store


class ComputeResource(ConfigurableResource):
    @abstractmethod
    def run_segment(
        self,
        run: TrainingRun,
        store: Store,
        steps: int | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
        engine_factory: EngineFactory | None = None,
        from_step: int | None = None,
        until_step: int | None = None,
    ) -> SegmentResult:
        """Advance ``run`` by ``steps`` steps or through ``until_step``, from the checkpoint after ``from_step``
        (None: the latest); see :func:`pc_pipelines.loop.run_segment`."""


class LocalComputeResource(ComputeResource):
    """Runs the segment in this process with :func:`pc_pipelines.loop.run_segment`."""

    device: str = Field(default="cpu", description="torch device: cpu or cuda.")

    def run_segment(
        self,
        run: TrainingRun,
        store: Store,
        steps: int | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
        engine_factory: EngineFactory | None = None,
        from_step: int | None = None,
        until_step: int | None = None,
    ) -> SegmentResult:
        return run_segment(run, store, steps, resume=True, on_step=on_step, device=self.device,
                           engine_factory=engine_factory, from_step=from_step, until_step=until_step)
