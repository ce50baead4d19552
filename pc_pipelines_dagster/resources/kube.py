"""Kubernetes objects of a training segment, built as plain dicts (no API calls, so tests validate them offline).

* :func:`segment_pod_spec`: the ``base_pod_spec`` handed to ``PipesK8sClient`` (it fills in the pod's name, the
  first container's image and command, and the Pipes environment).
* :func:`segment_rayjob`: the KubeRay ``RayJob`` (``ray.io/v1``) handed to dagster-ray's ``PipesKubeRayJobClient``
  (it adds the Pipes environment to ``runtimeEnvYAML`` and labels).

Both follow the static manifests in ``k8s/`` (the pod template and ``rayjob.yaml``) that an operator applies by
hand: GPU requests equal to limits, tolerations and a node selector for GPU nodes, a memory-backed ``/dev/shm``,
the shared PVC for the store, run directories and data, a non-root user with every capability dropped, no service
account token (the training process needs no Kubernetes API), and no secrets: credentials such as a Hugging Face or
W&B token come from a Secret the operator creates, referenced by name (``k8s/README.md``).
"""

from __future__ import annotations

from typing import Any

DATA_VOLUME = "data"
SHM_VOLUME = "dshm"


def volumes(cfg) -> list[dict[str, Any]]:
    return [
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": cfg.pvc_claim}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": cfg.shm_size}},
    ]


def volume_mounts(cfg) -> list[dict[str, Any]]:
    return [{"name": DATA_VOLUME, "mountPath": cfg.mount_path}, {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]


def pod_security(cfg) -> dict[str, Any]:
    uid = cfg.run_as_user
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def resources(cpu: str, memory: str, gpus: int) -> dict[str, Any]:
    amount = {"cpu": cpu, "memory": memory}
    if gpus:
        amount["nvidia.com/gpu"] = str(gpus)
    return {"requests": dict(amount), "limits": dict(amount)}


def env(cfg) -> list[dict[str, Any]]:
    """Caches on the shared volume (model downloads survive pods), HOME writable by the non-root user."""
    root = cfg.mount_path.rstrip("/")
    return [{"name": "HF_HOME", "value": f"{root}/hf-cache"}, {"name": "HOME", "value": "/tmp"}]


def segment_pod_spec(cfg, *, cpu: str | None = None, memory: str | None = None, gpus: int | None = None) -> dict[str, Any]:
    """The pod spec of one training segment or evaluation (``cfg``: a :class:`pc_pipelines_dagster.resources.compute.KubeComputeBase`;
    ``cpu`` / ``memory`` / ``gpus`` default to its ``cpu`` / ``memory`` / ``gpus``)."""
    cpu, memory = cpu or cfg.cpu, memory or cfg.memory
    gpus = cfg.gpus if gpus is None else gpus
    return {
        "serviceAccountName": cfg.service_account,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "nodeSelector": dict(cfg.node_selector),
        "tolerations": [dict(t) for t in cfg.tolerations],
        "securityContext": pod_security(cfg),
        "volumes": volumes(cfg),
        "containers": [{
            "name": "trainer",
            "resources": resources(cpu, memory, gpus),
            "volumeMounts": volume_mounts(cfg),
            "env": env(cfg),
            "securityContext": container_security(),
        }],
    }


def _ray_pod(cfg, name: str, res: dict[str, Any], ports: list[dict[str, Any]] | None, gpu: bool) -> dict[str, Any]:
    container = {"name": name, "image": cfg.image, "resources": res, "volumeMounts": volume_mounts(cfg),
                 "env": env(cfg), "securityContext": container_security()}
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {"serviceAccountName": cfg.service_account, "automountServiceAccountToken": False,
                            "securityContext": pod_security(cfg), "volumes": volumes(cfg), "containers": [container]}
    if gpu:
        spec["nodeSelector"] = dict(cfg.node_selector)
        spec["tolerations"] = [dict(t) for t in cfg.tolerations]
    return {"metadata": {"labels": {"app.kubernetes.io/name": "pc-pipelines",
                                    "app.kubernetes.io/component": f"ray-{name.split('-')[-1]}"}},
            "spec": spec}


def segment_rayjob(cfg, entrypoint: str, name: str | None = None) -> dict[str, Any]:
    """The RayJob of one multi-node segment (``cfg``: a :class:`pc_pipelines_dagster.resources.compute.KubeRayComputeResource`): a
    CPU head running the driver (``entrypoint``) and ``cfg.workers`` GPU workers; the cluster is deleted when the
    job finishes. ``name`` None lets dagster-ray name it."""
    ports = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
             {"containerPort": 10001, "name": "client"}]
    meta: dict[str, Any] = {"namespace": cfg.namespace, "labels": {"app.kubernetes.io/name": "pc-pipelines"}}
    if name:
        meta["name"] = name
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta,
        "spec": {
            "entrypoint": entrypoint,
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 0,
            "rayClusterSpec": {
                "rayVersion": cfg.ray_version,
                "headGroupSpec": {
                    "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
                    "template": _ray_pod(cfg, "ray-head", resources(cfg.head_cpu, cfg.head_memory, 0), ports, gpu=False),
                },
                "workerGroupSpecs": [{
                    "groupName": "gpu",
                    "replicas": cfg.workers,
                    "minReplicas": cfg.workers,
                    "maxReplicas": cfg.workers,
                    "rayStartParams": {},
                    "template": _ray_pod(cfg, "ray-worker", resources(cfg.worker_cpu, cfg.worker_memory,
                                                                      cfg.gpus_per_worker), None, gpu=True),
                }],
            },
        },
    }
