"""The resources of each environment the code location runs in, chosen by ``PC_PIPELINES_ENV`` when it loads:
``local`` (the default: everything in the Dagster process, files under ``runs/``), ``k8s`` (training segments and
evaluations as GPU pods or KubeRay jobs on a shared volume; ``k8s/README.md``) or ``ray`` (segments and evaluations
as jobs on an existing Ray cluster, ``PC_RAY_ADDRESS``, on storage the cluster shares)."""

import os
from pathlib import Path

from .compute import K8sComputeResource, KubeRayComputeResource, LocalComputeResource
from .data import DataResource, data_paths
from .engines import RayRolloutEngineResource, RolloutEngineResource, TransformersEngineResource
from .ray_job import RayJobComputeResource
from .storage import LocalCheckpointResource, StoreResource

ENVIRONMENTS = ("local", "k8s", "ray")


def _positive(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise RuntimeError(f"{name}={raw!r}: must be a whole number >= 1. Fix: set it so, or unset it.")
    return value


def local_engine(env: dict[str, str] | None = None) -> RolloutEngineResource:
    """The local loop's rollout engine: the transformers engine in this process, or with ``PC_ROLLOUT_ACTORS=N``
    its rounds spread over N Ray actors (:class:`RayRolloutEngineResource`; ``PC_ROLLOUT_CHUNK`` sets its
    ``max_batch_sequences``, default 4096, the single engine's: set it to about a round's sequences / N)."""
    env = dict(os.environ if env is None else env)
    if not env.get("PC_ROLLOUT_ACTORS"):
        return TransformersEngineResource()
    return RayRolloutEngineResource(num_actors=_positive(env, "PC_ROLLOUT_ACTORS", 2),
                                    max_batch_sequences=_positive(env, "PC_ROLLOUT_CHUNK", 4096))


def local_resources() -> dict:
    """The embedded environment: everything in this process, files under ``runs/``. The real datasets' paths come
    from ``PC_<NAME>_PATH`` when set (``PC_DEEPMATH_PATH``, ``PC_POLARIS_PATH``, one per generic dataset of the
    registry; read when this is called; unset leaves the path empty and the asset says how to provide it); the
    rollout engine from :func:`local_engine`."""
    return {
        "store": StoreResource(),
        "checkpoints": LocalCheckpointResource(),
        "engine": local_engine(),
        "compute": LocalComputeResource(),
        "data": DataResource(**data_paths(os.environ)),
    }


def env_number(env: dict[str, str], name: str, default: str, kind: type = int, minimum: float = 1):
    """``env[name]`` (or ``default``) as ``kind``, at least ``minimum``; anything else is an error naming the variable
    and the fix (a bad value must not surface as a bare ValueError from deep in the code location's load)."""
    raw = env.get(name, default)
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value != value or value < minimum:  # value != value: NaN
        what = "a whole number" if kind is int else "a number"
        raise RuntimeError(f"{name}={raw!r}: must be {what} >= {minimum:g}. Fix: set it to e.g. {default}, or unset it "
                           f"for the default ({default}).")
    return value


def k8s_resources(env: dict[str, str] | None = None) -> dict:
    """The Kubernetes environment (``k8s/README.md``): the Dagster run pod and the training pods share the PVC
    mounted at ``/data`` (store ``/data/pc.duckdb``, run directories ``/data/runs``, prepared data ``/data/data``);
    training segments run as pods of ``PC_K8S_IMAGE`` in ``PC_K8S_NAMESPACE`` (default ``pc-pipelines``), one
    GPU pod each (``PC_K8S_COMPUTE=pod``, the default) or a KubeRay RayJob of ``PC_K8S_RAY_WORKERS`` GPU nodes
    (``PC_K8S_COMPUTE=rayjob``, experimental). Evaluation (``segment_eval``) runs ``pilot-commit eval-segment`` in a GPU
    pod of the same image (one pod with the RayJob compute too). The benchmarks asset reads the evaluation sets
    shipped in the image unless ``PC_BENCHMARKS_DIR`` names a directory (on the PVC, say). ``env``: the variables to read (default
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
                                         workers=env_number(env, "PC_K8S_RAY_WORKERS", "2"))
    else:
        raise RuntimeError(f"PC_K8S_COMPUTE={kind!r}: use pod (one GPU pod per segment) or rayjob (multi-node).")
    return {
        "store": StoreResource(path="/data/pc.duckdb"),
        "checkpoints": LocalCheckpointResource(root="/data/runs"),
        "engine": TransformersEngineResource(),  # in-process engines only: segments and evaluations run in pods
        "compute": compute,
        "data": DataResource(
            **data_paths(env),
            benchmarks_dir=env.get("PC_BENCHMARKS_DIR") or None,  # unset: the copies in the image
            out_dir="/data/data",
        ),
    }


def ray_resources(env: dict[str, str] | None = None) -> dict:
    """Training segments and evaluations as jobs on an existing Ray cluster (:class:`RayJobComputeResource`):
    ``PC_RAY_ADDRESS`` is its job server (the head's dashboard, e.g. ``http://127.0.0.1:8265``, or a KubeRay head
    service ``http://<raycluster>-head-svc.<ns>.svc:8265``). The store, run directories and prepared data live under
    ``PC_RAY_SHARED_DIR`` (default ``runs``, made absolute here): ``pc.duckdb``, ``<run-id>/``, ``data/``, a
    directory the orchestrator and every Ray node see at the same path. ``PC_RAY_PYTHON`` (default: ``pilot-commit``
    on the job's PATH) and ``PC_RAY_ENTRYPOINT_CPUS`` (default 1) shape the job. ``env``: the variables to read
    (default ``os.environ``)."""
    env = dict(os.environ if env is None else env)
    address = env.get("PC_RAY_ADDRESS")
    if not address:
        raise RuntimeError("PC_PIPELINES_ENV=ray needs PC_RAY_ADDRESS, the Ray cluster's job server (its dashboard, "
                           "e.g. http://127.0.0.1:8265). Fix: set it, or use PC_PIPELINES_ENV=local.")
    shared = Path(env.get("PC_RAY_SHARED_DIR", "runs")).resolve()
    compute = RayJobComputeResource(address=address, python=env.get("PC_RAY_PYTHON") or None,
                                    entrypoint_num_cpus=env_number(env, "PC_RAY_ENTRYPOINT_CPUS", "1", float, 0),
                                    data_dir=str(shared / "data"))
    return {
        "store": StoreResource(path=str(shared / "pc.duckdb")),
        "checkpoints": LocalCheckpointResource(root=str(shared)),
        "engine": TransformersEngineResource(),
        "compute": compute,
        "data": DataResource(
            **data_paths(env),
            out_dir=str(shared / "data"),
        ),
    }


def environment_resources(env: dict[str, str] | None = None) -> dict:
    """The resources of the environment ``PC_PIPELINES_ENV`` names (default ``local``)."""
    env = dict(os.environ if env is None else env)
    name = env.get("PC_PIPELINES_ENV", "local")
    if name not in ENVIRONMENTS:
        raise RuntimeError(f"PC_PIPELINES_ENV={name!r}: use one of {ENVIRONMENTS}.")
    if name == "k8s":
        return k8s_resources(env)
    return ray_resources(env) if name == "ray" else local_resources()
