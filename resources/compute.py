"""Where a training segment runs, and where its checkpoint is evaluated.

* :class:`LocalComputeResource`: in the Dagster process, :func:`pc_pipelines.run.run_segment` (the embedded default).
* :class:`PipesComputeResource` implementations run the same segment as a process of its own, the in-pod entrypoint
  ``pilot-commit train-segment`` (:mod:`pc_pipelines.cli.segment`), and read back what it reports through Dagster
  Pipes (one custom message per step, the materialization at the end):

  - :class:`SubprocessComputeResource`: ``PipesSubprocessClient`` on this machine (isolation without a cluster;
    what the tests drive for real);
  - :class:`K8sComputeResource`: one GPU pod through dagster-k8s's ``PipesK8sClient``, built from
    :func:`resources.kube.segment_pod_spec`;
  - :class:`KubeRayComputeResource`: a multi-node KubeRay ``RayJob`` through dagster-ray's
    ``PipesKubeRayJobClient``, built from :func:`resources.kube.segment_rayjob` (experimental: the verl recipe);
  - :class:`~resources.ray_job.RayJobComputeResource` (its own module): a job on a running Ray cluster, by the
    address of its job server, through dagster-ray's ``PipesRayJobClient`` (a local head in the tests, a KubeRay
    cluster's head service on Kubernetes).

Every implementation returns a :class:`~pc_pipelines.run.SegmentResult`, so the ``training_segment`` asset does
not care where the segment ran. ``evaluate`` is the same for the ``segment_eval`` asset: in process, or
``pilot-commit eval-segment`` through the same Pipes client (a GPU pod on Kubernetes: a real model's mean@32 on six
benchmarks is GPU work, not the Dagster run pod's), returning an :class:`~pc_pipelines.evaluation.EvalResult`. The
step rows themselves reach the store as Parquet step logs written by the process that trained (on a shared volume
for pods), never through Pipes.

A launched ``train-segment`` refused by the run's writer lock (another process writes the run) exits having done
nothing; its Pipes session closes with the ``RunBusyError``, and ``run_segment`` raises :class:`LaunchRefused` (a
``RunBusyError``) with the launched process's message, so the asset leaves the segment's state as it was.
"""

from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, Failure, MetadataValue, PipesMessageReader
from pydantic import Field, model_validator

from pc_pipelines.evaluation import EvalResult
from pc_pipelines.rollout import DEFAULT_ENGINE, ENGINES, EngineFactory
from pc_pipelines.rollout.registry import GPU_IMAGE_ENGINE, launch_device_problem
from pc_pipelines.run import STEP_KEYS, SegmentResult, StepRecord, TrainingRun, evaluate_checkpoint, run_segment
from pc_pipelines.run.stopping import StopFlag
from pc_pipelines.store import RunBusyError, Store
from pc_pipelines.store.runlock import LOCK_NAME, read_holder

from .engines import EngineName


class LaunchRefused(RunBusyError):
    """A launched ``train-segment`` refused by the run's writer lock: another process writes the run, and the
    launched one did nothing. The message is the launched process's own (it names the holder); ``holder`` is the
    lock's record as the orchestrator reads it afterwards (None once released)."""

    def __init__(self, run_id: str, lock_path: Path, holder: dict[str, Any] | None, message: str) -> None:
        super().__init__(run_id, lock_path, holder)
        self.args = (message,)


def _last_event_id(context) -> int:
    """The storage id of the newest event of the context's Dagster run (0: none)."""
    records = context.instance.get_records_for_run(context.run.run_id, ascending=False, limit=1).records
    return records[0].storage_id if records else 0


def _refused_by_lock(context, after: int) -> str | None:
    """The message of a ``RunBusyError`` the launched process ended with, from the Pipes ``closed`` message the
    client logged as an engine event after event ``after`` (None: it ended otherwise, or sent no such message)."""
    from dagster import DagsterEventType

    records = context.instance.get_records_for_run(context.run.run_id, of_type=DagsterEventType.ENGINE_EVENT).records
    for rec in records:
        event = rec.event_log_entry.dagster_event
        error = getattr(getattr(event, "engine_event_data", None), "error", None)
        if rec.storage_id > after and error is not None and error.cls_name == RunBusyError.__name__:
            message = error.message.strip()  # "pc_pipelines.store.runlock.RunBusyError: run ..."
            head, _, rest = message.partition(": ")
            return rest if head.endswith(RunBusyError.__name__) and rest else message
    return None


def tap_steps(client, on_step: Callable[[StepRecord], None] | None, log) -> bool:
    """Make ``client`` (a Pipes client this resource just built) hand each step its launched segment reports to
    ``on_step`` as the message arrives, while the process still runs: the asset's live progress. Every message still
    goes to Dagster's handler first, unchanged; ``on_step`` errors are logged, never raised into the reader's thread.

    The client's message reader (``message_reader`` or ``_message_reader``, whatever its class) gets, on this
    instance only, a ``read_messages`` that sees the handler's ``handle_message`` through. False when the client
    keeps no reader there (its steps then arrive when the process ends)."""
    if on_step is None:
        return False
    reader = next((r for r in (getattr(client, a, None) for a in ("message_reader", "_message_reader"))
                   if isinstance(r, PipesMessageReader)), None)
    if reader is None:
        return False
    read_messages = reader.read_messages

    def step_of(message) -> None:
        payload = (message.get("params") or {}).get("payload") if message.get("method") == "report_custom_message" else None
        if isinstance(payload, dict) and "step" in payload:
            try:
                on_step(StepRecord.from_json(payload))
            except Exception as exc:  # progress is a view: a bad row must not stop the training it reports on
                log.warning(f"step progress of a launched segment not shown: {type(exc).__name__}: {exc}")

    @contextmanager
    def tapped(handler):
        handle = handler.handle_message

        def handle_message(message) -> None:
            handle(message)
            step_of(message)

        handler.handle_message = handle_message
        with read_messages(handler) as params:
            yield params

    reader.read_messages = tapped
    return True


def _reported(meta: dict[str, Any], key: str) -> Any:
    """The plain value of ``key`` in a materialization the launched process reported (None when absent)."""
    return getattr(meta.get(key), "value", meta.get(key))


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
        context: Any = None,
        stop: StopFlag | None = None,
    ) -> SegmentResult:
        """Advance ``run`` by ``steps`` steps or through ``until_step``, from the checkpoint after ``from_step``
        (None: the latest); see :func:`pc_pipelines.run.run_segment`. ``context`` is the asset's execution
        context (Pipes clients launch and report through it; the local compute ignores it). ``stop``: a stop flag
        the local compute looks at between steps (a launched process handles its own signals)."""

    @abstractmethod
    def evaluate(self, run: TrainingRun, store: Store, step: int, engine_factory: EngineFactory | None = None,
                 context: Any = None) -> EvalResult:
        """Mean@k of ``run``'s checkpoint after ``step``
        (:func:`~pc_pipelines.run.evaluate_checkpoint`); the caller writes the rows to the store."""


class LocalComputeResource(ComputeResource):
    """Runs the segment in this process with :func:`pc_pipelines.run.run_segment` (the local backend)."""

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
        context: Any = None,
        stop: StopFlag | None = None,
    ) -> SegmentResult:
        return run_segment(run, store, steps, resume=True, on_step=on_step, device=self.device,
                           engine_factory=engine_factory, from_step=from_step, until_step=until_step, stop=stop)

    def evaluate(self, run: TrainingRun, store: Store, step: int, engine_factory: EngineFactory | None = None,
                 context: Any = None) -> EvalResult:
        return evaluate_checkpoint(run, step, engine_factory, self.device)


# ---- Pipes -------------------------------------------------------------------------------------------------------
class PipesComputeResource(ComputeResource):
    """Runs ``pilot-commit train-segment`` outside this process and reads its Pipes reports back.

    The launched process builds its own rollout engine (``engine``), so an in-process ``engine_factory`` is not
    used. Paths default to the orchestrator's own (right for a subprocess); a pod sees the shared volume under its
    own mount, set with ``store_path`` / ``runs_root`` / ``data_dir``."""

    engine: EngineName = Field(
        default=DEFAULT_ENGINE, description="Rollout engine of the launched process, one registered in "
                                            "pc_pipelines/rollout/registry.py: "
                                            + " or ".join(spec.summary for spec in ENGINES.values()) + "."
    )
    device: str = Field(default="cpu", description="torch device of the launched process: cpu or cuda.")
    store_path: str | None = Field(
        default=None, description="The store's DuckDB file as the launched process sees it (None: the orchestrator's)."
    )
    runs_root: str | None = Field(
        default=None, description="Directory of run directories as the launched process sees it (None: the orchestrator's)."
    )
    data_dir: str = Field(default="runs/data", description="Prepared datasets as the launched process sees them.")

    def _args(self, command: str, run: TrainingRun, store: Store, *specific: str) -> list[str]:
        """``command``'s arguments for ``run`` as the launched process sees its paths, with ``specific`` ones."""
        return [command, "--store", self.store_path or str(Path(store.path).resolve()),
                "--run-id", run.run_id, "--runs-root", self.runs_root or str(run.run_dir.parent),
                *specific, "--data-dir", self.data_dir, "--engine", self.engine, "--device", self.device]

    def segment_args(self, run: TrainingRun, store: Store, from_step: int | None, until_step: int) -> list[str]:
        """The ``train-segment`` arguments (after the program name) for one segment of ``run``."""
        args = self._args("train-segment", run, store, "--until-step", str(until_step))
        if from_step is not None:
            args += ["--from-step", str(from_step)]
        return args

    def eval_args(self, run: TrainingRun, store: Store, step: int) -> list[str]:
        """The ``eval-segment`` arguments for the checkpoint of ``run`` after ``step``."""
        return self._args("eval-segment", run, store, "--step", str(step))

    @abstractmethod
    def launch(self, context, args: list[str], on_step: Callable[[StepRecord], None] | None = None):
        """Run the entrypoint with ``args`` through a Pipes client; return its ``PipesClientCompletedInvocation``.
        ``on_step``: called with each step the process reports, as it arrives (:func:`tap_steps`)."""

    def launch_eval(self, context, args: list[str]):
        """Run ``eval-segment`` (default: where the segments run, ``launch``)."""
        return self.launch(context, args)

    def run_segment(
        self,
        run: TrainingRun,
        store: Store,
        steps: int | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
        engine_factory: EngineFactory | None = None,
        from_step: int | None = None,
        until_step: int | None = None,
        context: Any = None,
        stop: StopFlag | None = None,
    ) -> SegmentResult:
        if context is None or until_step is None:
            raise Failure(f"{type(self).__name__} runs segments of the training_segment asset (it needs the asset's "
                          "context and until_step). Fix: use LocalComputeResource for step counts outside Dagster.")
        after = _last_event_id(context)
        shown: set[int] = set()

        def live(rec: StepRecord) -> None:
            shown.add(rec.step)
            if on_step:
                on_step(rec)

        try:
            completed = self.launch(context, self.segment_args(run, store, from_step, until_step), on_step=live)
        except Exception as exc:
            message = _refused_by_lock(context, after)
            if message is not None:  # the launched process found another writer of the run and did nothing
                lock = store.run_dir(run.run_id) / LOCK_NAME
                raise LaunchRefused(run.run_id, lock, read_holder(lock), message) from exc
            raise
        rows = [m for m in completed.get_custom_messages() if isinstance(m, dict) and "step" in m]
        records = [StepRecord.from_json(m) for m in rows]
        for rec in records:  # steps a client without a live tap hands over only now
            if on_step and rec.step not in shown:
                on_step(rec)
        meta = completed.get_materialize_result().metadata or {}
        if _reported(meta, "steps_run") is None:
            raise Failure(f"the launched segment of {run.run_id} reported no materialization. Fix: look at its log "
                          "(the pod's or the subprocess's stderr above).")
        reported = {k: v for k, v in meta.items()}
        reported["pipes_steps"] = MetadataValue.json([{k: m.get(k) for k in STEP_KEYS} for m in rows])
        reported.update({f"launch/{k}": v for k, v in (completed.metadata or {}).items()})
        summary = {k: _reported(meta, k) for k in meta}
        return SegmentResult.from_summary(run.run_id, summary, records, run.tensorboard_dir, reported)

    def evaluate(self, run: TrainingRun, store: Store, step: int, engine_factory: EngineFactory | None = None,
                 context: Any = None) -> EvalResult:
        if context is None:
            raise Failure(f"{type(self).__name__} evaluates for the segment_eval asset (it needs the asset's context). "
                          "Fix: use LocalComputeResource, or pc_pipelines.run.evaluate_checkpoint, outside Dagster.")
        completed = self.launch_eval(context, self.eval_args(run, store, step))
        report = _reported(completed.get_materialize_result().metadata or {}, "eval")
        if not isinstance(report, dict):
            raise Failure(f"the launched evaluation of {run.run_id} after step {step} reported no result. Fix: look at "
                          "its log (the pod's or the subprocess's stderr above).")
        return EvalResult.from_json(report)


class SubprocessComputeResource(PipesComputeResource):
    """``pilot-commit train-segment`` as a subprocess of the Dagster process, through ``PipesSubprocessClient``."""

    python: str | None = Field(
        default=None, description="Python interpreter with pc_pipelines installed (None: the orchestrator's own)."
    )
    cwd: str | None = Field(default=None, description="Working directory of the subprocess (None: the current one).")

    def launch(self, context, args: list[str], on_step: Callable[[StepRecord], None] | None = None):
        from dagster import PipesSubprocessClient

        command = [self.python or sys.executable, "-m", "pc_pipelines.cli", *args]
        client = PipesSubprocessClient(cwd=self.cwd)
        tap_steps(client, on_step, context.log)
        return client.run(context=context, command=command)


class KubeComputeBase(PipesComputeResource):
    """What every Kubernetes launch shares: image, namespace, the shared volume and the pod's placement."""

    image: str = Field(description="The GPU image built from k8s/Dockerfile, e.g. registry.example.com/pc-pipelines-gpu:0.1.0.")
    namespace: str = Field(default="pc-pipelines", description="Namespace the training pods run in.")
    pvc_claim: str = Field(default="pc-pipelines-data", description="PVC holding the store, run directories and data.")
    mount_path: str = Field(default="/data", description="Where the PVC is mounted in the pod (and the Dagster run pod).")
    service_account: str = Field(default="pc-training", description="Service account of the training pod (no API rights needed).")
    run_as_user: int = Field(default=1000, ge=1, description="Non-root UID the pod runs as (the image's `pc` user).")
    shm_size: str = Field(default="16Gi", description="Size of the /dev/shm memory volume (NCCL, dataloaders).")
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"}, description="Node labels the GPU pod needs."
    )
    tolerations: list[dict[str, str]] = Field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        description="Tolerations for tainted GPU nodes.",
    )
    engine: EngineName = Field(default=GPU_IMAGE_ENGINE, description="Rollout engine in the pod.")
    device: str = Field(default="cuda", description="torch device in the pod.")
    store_path: str | None = Field(default="/data/pc.duckdb", description="The store's DuckDB file inside the pod.")
    runs_root: str | None = Field(default="/data/runs", description="Run directories inside the pod.")
    data_dir: str = Field(default="/data/data", description="Prepared datasets inside the pod.")
    kubeconfig_file: str | None = Field(default=None, description="kubeconfig outside the cluster (None: in-cluster config).")
    pod_wait_timeout_s: float = Field(default=24 * 3600, gt=0, description="How long to wait for a pod to finish.")

    @model_validator(mode="after")
    def _paths_on_the_volume(self):
        root = self.mount_path.rstrip("/") + "/"
        for name in ("store_path", "runs_root", "data_dir"):
            value = getattr(self, name)
            if value is None or not value.startswith(root):
                raise ValueError(f"{name}={value!r} is not under mount_path={self.mount_path!r}: the pod would write "
                                 f"where neither Dagster nor the next segment can read. Fix: set {name} under "
                                 f"{root} (e.g. {root}{Path(str(value or 'x')).name}).")
        problem = launch_device_problem(self.engine, self.device)
        if problem is not None:
            raise ValueError(problem)
        return self

    def run_pod(self, context, args: list[str], pod_spec: dict[str, Any], component: str,
                on_step: Callable[[StepRecord], None] | None = None):
        """``pilot-commit <args>`` in one pod of ``pod_spec`` through ``PipesK8sClient``."""
        from dagster_k8s import PipesK8sClient

        client = PipesK8sClient(load_incluster_config=self.kubeconfig_file is None, kubeconfig_file=self.kubeconfig_file)
        tap_steps(client, on_step, context.log)
        return client.run(context=context, image=self.image, command=["pilot-commit", *args], namespace=self.namespace,
                          base_pod_meta={"labels": {"app.kubernetes.io/name": "pc-pipelines",
                                                    "app.kubernetes.io/component": component}},
                          base_pod_spec=pod_spec, pod_wait_timeout=self.pod_wait_timeout_s)


class K8sComputeResource(KubeComputeBase):
    """One GPU pod per segment through ``PipesK8sClient`` (the pod spec: :func:`resources.kube.segment_pod_spec`)."""

    gpus: int = Field(default=1, ge=0, le=16, description="GPUs of the pod (requests = limits).")
    cpu: str = Field(default="8", description="CPU of the pod (requests = limits).")
    memory: str = Field(default="64Gi", description="Memory of the pod (requests = limits).")

    @model_validator(mode="after")
    def _gpus_for_cuda(self):
        if self.device.startswith("cuda") and self.gpus < 1:
            raise ValueError("device='cuda' with gpus=0. Fix: request gpus >= 1, or set device=cpu and engine=transformers.")
        return self

    def pod_spec(self) -> dict[str, Any]:
        from .kube import segment_pod_spec

        return segment_pod_spec(self)

    def launch(self, context, args: list[str], on_step: Callable[[StepRecord], None] | None = None):
        return self.run_pod(context, args, self.pod_spec(), "training-segment", on_step)

    def launch_eval(self, context, args: list[str]):
        return self.run_pod(context, args, self.pod_spec(), "segment-eval")  # the same GPU pod shape


class KubeRayComputeResource(KubeComputeBase):
    """A multi-node KubeRay ``RayJob`` per segment through dagster-ray's ``PipesKubeRayJobClient``.

    Experimental until it has run on a GPU cluster: the RayJob's driver runs ``train-segment --backend verl`` (the
    verl recipe, :mod:`pc_pipelines.training.verl_recipe`) on the head, the GPU workers host verl's FSDP and vLLM
    workers. Through dagster-ray (a default dependency)."""

    workers: int = Field(default=2, ge=1, le=256, description="GPU worker pods (nodes) of the Ray cluster.")
    gpus_per_worker: int = Field(default=8, ge=1, le=16, description="GPUs per worker pod (= trainer.n_gpus_per_node).")
    worker_cpu: str = Field(default="64", description="CPU per worker pod.")
    worker_memory: str = Field(default="512Gi", description="Memory per worker pod.")
    head_cpu: str = Field(default="8", description="CPU of the head pod (the driver; no GPU).")
    head_memory: str = Field(default="32Gi", description="Memory of the head pod.")
    ray_version: str = Field(default="2.60.0", description="Ray version in the image (KubeRay's rayVersion).")
    recipe_overrides: list[str] = Field(
        default_factory=list, description="Hydra overrides for the verl recipe, e.g. actor_rollout_ref.model.path=/data/models/qwen."
    )
    eval_gpus: int = Field(default=1, ge=1, le=16, description="GPUs of the single pod that evaluates a checkpoint.")
    eval_cpu: str = Field(default="8", description="CPU of the evaluation pod.")
    eval_memory: str = Field(default="64Gi", description="Memory of the evaluation pod.")

    def segment_args(self, run: TrainingRun, store: Store, from_step: int | None, until_step: int) -> list[str]:
        args = super().segment_args(run, store, from_step, until_step)
        args += ["--backend", "verl", "--nnodes", str(self.workers), "--gpus-per-node", str(self.gpus_per_worker)]
        for o in self.recipe_overrides:
            args += ["--recipe-set", o]
        return args

    def eval_pod_spec(self) -> dict[str, Any]:
        from .kube import segment_pod_spec

        return segment_pod_spec(self, cpu=self.eval_cpu, memory=self.eval_memory, gpus=self.eval_gpus)

    def launch_eval(self, context, args: list[str]):
        """Evaluation needs one GPU and no Ray cluster (the RayJob's driver runs on a CPU head): one pod."""
        return self.run_pod(context, args, self.eval_pod_spec(), "segment-eval")

    def rayjob(self, entrypoint: str) -> dict[str, Any]:
        from .kube import segment_rayjob

        return segment_rayjob(self, entrypoint)

    def launch(self, context, args: list[str], on_step: Callable[[StepRecord], None] | None = None):
        import shlex

        try:
            from dagster_ray.kuberay import PipesKubeRayJobClient
            from dagster_ray.kuberay.client import RayJobClient
        except ImportError as exc:
            raise Failure("KubeRayComputeResource needs dagster-ray (a default dependency). Fix: pip install -e .") from exc
        client = PipesKubeRayJobClient(client=RayJobClient(kube_config=self.kubeconfig_file))
        tap_steps(client, on_step, context.log)
        return client.run(context=context, ray_job=self.rayjob(shlex.join(["pilot-commit", *args])))
