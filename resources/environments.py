"""The resources of each environment the code location runs in, chosen by ``PC_PIPELINES_ENV`` when it loads:
``local`` (the default: everything in the Dagster process, files under ``runs/``) or ``k8s`` (training segments and
evaluations as GPU pods or KubeRay jobs on a shared volume; ``k8s/README.md``)."""

import os

from .compute import K8sComputeResource, KubeRayComputeResource, LocalComputeResource
from .data import DataResource
from .engines import TransformersEngineResource
from .storage import LocalCheckpointResource, StoreResource

ENVIRONMENTS = ("local", "k8s")


def local_resources() -> dict:
    """The embedded environment: everything in this process, files under ``runs/``. The real datasets' paths come
    from ``PC_DEEPMATH_PATH`` / ``PC_POLARIS_PATH`` when set (read when this is called; unset leaves the path empty
    and the asset says how to provide it)."""
    return {
        "store": StoreResource(),
        "checkpoints": LocalCheckpointResource(),
        "engine": TransformersEngineResource(),
        "compute": LocalComputeResource(),
        "data": DataResource(
            deepmath_path=os.environ.get("PC_DEEPMATH_PATH") or None,
            polaris_path=os.environ.get("PC_POLARIS_PATH") or None,
        ),
    }


def k8s_resources(env: dict[str, str] | None = None) -> dict:
    """The Kubernetes environment (``k8s/README.md``): the Dagster run pod and the training pods share the PVC
    mounted at ``/data`` (store ``/data/pc.duckdb``, run directories ``/data/runs``, prepared data ``/data/data``);
    training segments run as pods of ``PC_K8S_IMAGE`` in ``PC_K8S_NAMESPACE`` (default ``pc-pipelines``), one
    GPU pod each (``PC_K8S_COMPUTE=pod``, the default) or a KubeRay RayJob of ``PC_K8S_RAY_WORKERS`` GPU nodes
    (``PC_K8S_COMPUTE=rayjob``, experimental). Evaluation (``segment_eval``) runs ``pilot-commit eval-segment`` in a GPU
    pod of the same image (one pod with the RayJob compute too). ``env``: the variables to read (default
    ``os.environ``)."""
    env = dict(os.environ if env is None else env)
    image = env.get("PC_K8S_IMAGE")
    if not image:
        raise RuntimeError("PC_PIPELINES_ENV=k8s needs PC_K8S_IMAGE, the GPU image built from k8s/Dockerfile. Fix: set "
                           "it in the Helm values' dagster-user-deployments env (k8s/helm/values.yaml).")
    namespace = env.get("PC_K8S_NAMESPACE", "pc-pipelines")
    kind = env.get("PC_K8S_COMPUTE", "pod")
    if kind == "pod":
        compute = K8sComputeResource(image=image, namespace=namespace)
    elif kind == "rayjob":
        compute = KubeRayComputeResource(image=image, namespace=namespace,
                                         workers=int(env.get("PC_K8S_RAY_WORKERS", "2")))
    else:
        raise RuntimeError(f"PC_K8S_COMPUTE={kind!r}: use pod (one GPU pod per segment) or rayjob (multi-node).")
    return {
        "store": StoreResource(path="/data/pc.duckdb"),
        "checkpoints": LocalCheckpointResource(root="/data/runs"),
        "engine": TransformersEngineResource(),  # in-process engines only: segments and evaluations run in pods
        "compute": compute,
        "data": DataResource(
            deepmath_path=env.get("PC_DEEPMATH_PATH") or None,
            polaris_path=env.get("PC_POLARIS_PATH") or None,
            benchmarks_dir=env.get("PC_BENCHMARKS_DIR", "/data/benchmarks"),
            out_dir="/data/data",
        ),
    }


def environment_resources(env: dict[str, str] | None = None) -> dict:
    """The resources of the environment ``PC_PIPELINES_ENV`` names (default ``local``)."""
    env = dict(os.environ if env is None else env)
    name = env.get("PC_PIPELINES_ENV", "local")
    if name not in ENVIRONMENTS:
        raise RuntimeError(f"PC_PIPELINES_ENV={name!r}: use one of {ENVIRONMENTS}.")
    return k8s_resources(env) if name == "k8s" else local_resources()
