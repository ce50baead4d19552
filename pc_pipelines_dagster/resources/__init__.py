"""Dagster ``ConfigurableResource``s, one file per kind: an abstract resource per engine and its real
implementations, chosen per environment by :mod:`.environments` (``PC_PIPELINES_ENV``):

* :class:`StoreResource`: the DuckDB store (catalog + Parquet step logs).
* :class:`CheckpointResource` / :class:`LocalCheckpointResource`: where run directories (checkpoints, TensorBoard)
  live (a local directory, or the PVC that Kubernetes pods share).
* :class:`RolloutEngineResource` / :class:`TransformersEngineResource` / :class:`RayRolloutEngineResource` /
  :class:`RegisteredEngineResource`: builds the rollout engine for a policy (in process, or its rounds spread over
  Ray actors; any engine of ``pc_pipelines.rollout.registry`` by name).
* :class:`ComputeResource`: runs a training segment: :class:`LocalComputeResource` in process, or the in-pod
  entrypoint through Dagster Pipes: :class:`SubprocessComputeResource`, :class:`K8sComputeResource`
  (``PipesK8sClient``), :class:`KubeRayComputeResource` (dagster-ray's ``PipesKubeRayJobClient``),
  :class:`RayJobComputeResource` (a job on an existing Ray cluster, dagster-ray's ``PipesRayJobClient``).
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
from .engines import (
    RayRolloutEngineResource,
    RegisteredEngineResource,
    RolloutEngineResource,
    TransformersEngineResource,
)
from .environments import ENVIRONMENTS, environment_resources, k8s_resources, local_resources, ray_resources
from .ray_job import RayJobComputeResource
from .storage import CheckpointResource, LocalCheckpointResource, StoreResource

__all__ = [
    "ENVIRONMENTS",
    "CheckpointResource",
    "ComputeResource",
    "DataResource",
    "LocalCheckpointResource",
    "K8sComputeResource",
    "KubeRayComputeResource",
    "LocalComputeResource",
    "PipesComputeResource",
    "RayRolloutEngineResource",
    "RayJobComputeResource",
    "RegisteredEngineResource",
    "SubprocessComputeResource",
    "RolloutEngineResource",
    "StoreResource",
    "TransformersEngineResource",
    "environment_resources",
    "k8s_resources",
    "local_resources",
    "ray_resources",
]
