"""Dagster ``ConfigurableResource``s: one abstract resource per engine with real implementations chosen per
environment in ``pc_pipelines/definitions.py`` (DESIGN.md section 2):

* :class:`StoreResource`: the DuckDB store (catalog + Parquet step logs).
* :class:`CheckpointResource` / :class:`LocalCheckpointResource`: where run directories (checkpoints, TensorBoard)
  live; the scale issue adds a PVC-backed one for Kubernetes pods.
* :class:`RolloutEngineResource` / :class:`TransformersEngineResource`: builds the rollout engine for a policy.
* :class:`ComputeResource`: runs a training segment: :class:`LocalComputeResource` in process, or the in-pod
  entrypoint through Dagster Pipes: :class:`SubprocessComputeResource`, :class:`K8sComputeResource`
  (``PipesK8sClient``), :class:`KubeRayComputeResource` (dagster-ray's ``PipesKubeRayJobClient``).
* :class:`DataResource`: local paths of the real datasets and the benchmark directory (nothing is downloaded).

Resources hold configuration only; the work is done by the ``pc_pipelines`` library.
"""

from .compute import (
    ComputeResource,
    K8sComputeResource,
    KubeRayComputeResource,
    LocalComputeResource,
    PipesComputeResource,
    SubprocessComputeResource,
)
from .data import DataResource
from .engines import RolloutEngineResource, TransformersEngineResource
from .storage import CheckpointResource, LocalCheckpointResource, StoreResource

__all__ = [
    "CheckpointResource",
    "ComputeResource",
    "DataResource",
    "LocalCheckpointResource",
    "K8sComputeResource",
    "KubeRayComputeResource",
    "LocalComputeResource",
    "PipesComputeResource",
    "SubprocessComputeResource",
    "RolloutEngineResource",
    "StoreResource",
    "TransformersEngineResource",
]
