"""Offline validation of the scale path's Kubernetes objects (no cluster here):

* every core-kind manifest in ``k8s/`` and the pod the code builds for ``PipesK8sClient`` (through dagster-k8s's own
  ``build_pod_body``) with ``kubernetes-validate --strict`` (unknown fields are errors);
* the RayJob in ``k8s/rayjob.yaml`` and the one ``KubeRayComputeResource`` builds against the KubeRay CRD schemas
  in ``k8s/schemas/kuberay/`` (``v1`` ``openAPIV3Schema``, made strict: an object schema with properties
  accepts no other field unless it says ``x-kubernetes-preserve-unknown-fields``), their ``rayClusterSpec`` against
  the RayCluster CRD's spec, and their pod templates as core ``PodTemplate``s;
* the Helm values against the chart keys this project relies on (the chart's own values schema is not available
  offline: see k8s/README.md), and the values' environment against the resources the code location builds."""

import copy
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from pc_pipelines_dagster.resources import K8sComputeResource, KubeRayComputeResource, k8s_resources

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"
SCHEMAS = K8S / "schemas" / "kuberay"
K8S_VERSION = "1.33.0"
CORE_FILES = ["storage.yaml", "rbac.yaml", "training-segment-pod.yaml"]


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def strict_crd_schema(path: Path) -> dict:
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 1-2 MB each
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def tighten(node):
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for v in node.values():
                tighten(v)
        elif isinstance(node, list):
            for v in node:
                tighten(v)

    tighten(schema)
    return schema


@pytest.fixture(scope="module")
def crds():
    if not SCHEMAS.is_dir():
        pytest.fail(f"KubeRay CRD schemas missing at {SCHEMAS} (byte-identical KubeRay copies; k8s/schemas/kuberay/README.md)")
    return {"RayJob": strict_crd_schema(SCHEMAS / "ray.io_rayjobs.yaml"),
            "RayCluster": strict_crd_schema(SCHEMAS / "ray.io_rayclusters.yaml")}


def validate_core(doc: dict) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def validate_rayjob(job: dict, crds: dict) -> None:
    jsonschema.validate(job, crds["RayJob"])
    jsonschema.validate({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "x"},
                         "spec": job["spec"]["rayClusterSpec"]}, crds["RayCluster"])
    cluster = job["spec"]["rayClusterSpec"]
    for template in [cluster["headGroupSpec"]["template"], *[g["template"] for g in cluster["workerGroupSpecs"]]]:
        validate_core({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})


@pytest.mark.parametrize("name", CORE_FILES)
def test_core_manifests_validate_strictly(name):
    found = docs(name)
    assert found
    for doc in found:
        validate_core(doc)


def test_strict_validation_catches_a_typo():
    pod = docs("training-segment-pod.yaml")[0]
    pod["spec"]["containers"][0]["resource"] = pod["spec"]["containers"][0].pop("resources")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(pod)


def test_rbac_is_least_privilege():
    found = docs("rbac.yaml")
    assert {d["kind"] for d in found} == {"ServiceAccount", "Role", "RoleBinding"}  # namespaced only
    (role,) = [d for d in found if d["kind"] == "Role"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        assert "secrets" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    training = next(d for d in found if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "pc-training")
    assert training["automountServiceAccountToken"] is False


def test_static_rayjob_validates_against_the_kuberay_crds(crds):
    (job,) = docs("rayjob.yaml")
    validate_rayjob(job, crds)
    bad = copy.deepcopy(job)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2  # typo: the strict CRD schema rejects it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, crds["RayJob"])


def test_the_pod_the_code_builds_validates_and_asks_for_gpus():
    from dagster_k8s.pipes import build_pod_body
    from kubernetes.client import ApiClient

    cfg = K8sComputeResource(image="registry.example.com/pc-pipelines-gpu:0.1.0", gpus=2)
    body = build_pod_body("pc-seg-abc", cfg.image, ["pilot-commit", "train-segment", "--run-id", "r"],
                          {"DAGSTER_PIPES_CONTEXT": "x"}, {"labels": {"app.kubernetes.io/name": "pc-pipelines"}},
                          cfg.pod_spec())
    pod = ApiClient().sanitize_for_serialization(body)
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    validate_core(pod)
    spec = pod["spec"]
    (c,) = spec["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu" and spec["nodeSelector"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == "pc-pipelines-data"
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/data", "/dev/shm"}
    assert spec["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert c["command"][:2] == ["pilot-commit", "train-segment"]


@pytest.mark.parametrize("kind", ["pod", "rayjob"])
def test_segment_eval_runs_eval_segment_in_one_gpu_pod(kind, monkeypatch):
    """Both Kubernetes computes evaluate in one GPU pod (a RayJob's driver sits on a CPU head), with the pod's paths."""
    from types import SimpleNamespace

    from dagster_k8s.pipes import build_pod_body
    from kubernetes.client import ApiClient

    image = "registry.example.com/pc-pipelines-gpu:0.1.0"
    cfg = (K8sComputeResource(image=image, gpus=2) if kind == "pod"
           else KubeRayComputeResource(image=image, workers=4, gpus_per_worker=8, eval_gpus=1))
    seen = {}
    monkeypatch.setattr(type(cfg), "run_pod", lambda self, context, args, spec, component: seen.update(
        args=args, spec=spec, component=component))
    run = SimpleNamespace(run_id="r1", run_dir=Path("/orchestrator/runs/r1"))
    cfg.launch_eval(None, cfg.eval_args(run, SimpleNamespace(path=Path("/orchestrator/pc.duckdb")), 19))
    assert seen["component"] == "segment-eval"
    args = seen["args"]
    assert args[0] == "eval-segment" and args[args.index("--step") + 1] == "19"
    assert [args[args.index(f) + 1] for f in ("--store", "--runs-root", "--data-dir", "--engine", "--device")] == [
        "/data/pc.duckdb", "/data/runs", "/data/data", "vllm", "cuda"]
    body = build_pod_body("pc-eval-abc", image, ["pilot-commit", *args], {"DAGSTER_PIPES_CONTEXT": "x"},
                          {"labels": {"app.kubernetes.io/name": "pc-pipelines"}}, seen["spec"])
    pod = {"apiVersion": "v1", "kind": "Pod", **ApiClient().sanitize_for_serialization(body)}
    validate_core(pod)
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == ("2" if kind == "pod" else "1")
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_the_rayjob_the_code_builds_validates(crds):
    cfg = KubeRayComputeResource(image="registry.example.com/pc-pipelines-gpu:0.1.0", workers=4, gpus_per_worker=8)
    job = cfg.rayjob("pilot-commit train-segment --backend verl")
    job["metadata"]["name"] = "pipes-abc"  # dagster-ray names it
    validate_rayjob(job, crds)
    (workers,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == 4
    assert workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_resource_config_rejects_paths_off_the_volume():
    with pytest.raises(ValueError, match="not under mount_path.*Fix"):
        K8sComputeResource(image="x", runs_root="/tmp/runs")
    with pytest.raises(ValueError, match="gpus=0.*Fix"):
        K8sComputeResource(image="x", gpus=0)


def test_helm_values_use_the_charts_keys_and_select_the_k8s_environment():
    values = yaml.safe_load((K8S / "helm" / "values.yaml").read_text())
    documented = {"global", "serviceAccount", "rbacEnabled", "dagsterWebserver", "dagster-user-deployments",
                  "runLauncher", "dagsterDaemon", "postgresql", "generatePostgresqlPasswordSecret", "computeLogManager",
                  "pythonLogs", "ingress", "imagePullSecrets", "busybox", "telemetry", "migrate", "flower", "redis",
                  "rabbitmq", "scheduler", "nameOverride", "fullnameOverride"}
    assert set(values) <= documented
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert launcher["jobNamespace"] == "pc-pipelines"
    (dep,) = values["dagster-user-deployments"]["deployments"]
    assert dep["dagsterApiGrpcArgs"] == ["--module-name", "pc_pipelines_dagster.definitions"]
    env = {e["name"]: e["value"] for e in dep["env"]}
    res = k8s_resources(env)  # what the code location builds from these values
    assert isinstance(res["compute"], K8sComputeResource) and res["compute"].image == env["PC_K8S_IMAGE"]
    assert res["store"].path.startswith(dep["volumeMounts"][0]["mountPath"] + "/")
    assert launcher["volumeMounts"][0]["mountPath"] == dep["volumeMounts"][0]["mountPath"] == "/data"
    limit = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"][0]
    assert limit["key"] == "pc/run" and limit["limit"] == 1  # one segment in flight per run, as locally


def test_dockerfile_is_non_root_installs_the_pinned_vllm_and_bakes_no_secret():
    text = (K8S / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # the engines under the same pins CI tests on CPU (etc/scale/constraints.txt), vLLM without its declared pins
    assert "COPY etc/scale ./etc/scale" in text
    assert re.search(r"pip install --no-deps -c etc/scale/constraints\.txt vllm\b", text)
    assert re.search(r"pip install -c etc/scale/constraints\.txt \.", text)
    # `pip install .` builds from what was copied: both packages' folders (pyproject.toml's packages.find)
    copied = set(re.findall(r"^COPY\s+(\S+)\s+\./\1$", text, re.M))
    assert {"pc_pipelines", "pc_pipelines_dagster"} <= copied, copied
    for line in re.findall(r"^(?:ENV|ARG)\s+.*$", text, re.M):
        assert not re.search(r"TOKEN|PASSWORD|SECRET|API_KEY", line, re.I), line
