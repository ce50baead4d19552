"""Where a training segment runs, and where its checkpoint is evaluated.

* :class:`LocalComputeResource`: in the Dagster process, :func:`pc_pipelines.run.run_segment` (the embedded default).
* :class:`PipesComputeResource` implementations run the same segment as a process of its own, the in-pod entrypoint
  ``pilot-commit train-segment`` (:mod:`pc_pipelines.cli.segment`), and read back what it reports through Dagster
  Pipes (one custom message per step, the materialization at the end):

  - :class:`SubprocessComputeResource`: ``PipesSubprocessClient`` on this machine (isolation without a cluster;
    what the tests drive for real);
  - :class:`K8sComputeResource`: one GPU pod through dagster-k8s's ``PipesK8sClient``, built from
    :func:`pc_pipelines_dagster.resources.kube.segment_pod_spec`;
  - :class:`KubeRayComputeResource`: a multi-node KubeRay ``RayJob`` through dagster-ray's
    ``PipesKubeRayJobClient``, built from :func:`pc_pipelines_dagster.resources.kube.segment_rayjob` (experimental: the verl recipe);
  - :class:`~resources.ray_job.RayJobComputeResource` (its own module): a job on a running Ray cluster, by the
    address of its job server, through dagster-ray's ``PipesRayJobClient`` (a local head in the tests, a KubeRay
    cluster's head service on Kubernetes).

Every implementation returns a :class:`~pc_pipelines.run.SegmentResult`, so the ``training_segment`` asset does
not care where the segment ran. ``evaluate`` is the same for the ``segment_eval`` asset: in process, or
``pilot-commit eval-segment`` through the same Pipes client (a GPU pod on Kubernetes: a real model's mean@32 on six
benchmarks is GPU work, not the Dagster run pod's), returning an :class:`~pc_pipelines.evaluation.EvalResult`. The
step rows themselves reach the store as Parquet step logs written by the process that trained (on a shared volume
for pods), never through Pipes.

Every implementation takes one :class:`~pc_pipelines.run.segment_attempt.SegmentRequest`; the process that trains
(this one, or the launched ``train-segment``) checks it, takes the run's writer lock and records the attempt
(:func:`~pc_pipelines.run.segment_attempt.train_requested_segment`). Refused by that lock (another process writes the
run), a launched one records nothing, sends the Pipes custom message ``{"refused": {...}}``
(:data:`~pc_pipelines.run.REFUSED`) and exits 2; ``run_segment`` then raises :class:`LaunchRefused` (a
``RunBusyError``) with the launched process's message. The messages arrive through the client's own message reader
class with :class:`StepTap` mixed in (:func:`tapped_reader`), passed to the client as its ``message_reader``.
"""

from __future__ import annotations

import functools
import sys
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, Failure, MetadataValue, PipesMessageReader
from pydantic import Field, model_validator

from pc_pipelines.evaluation import EvalResult
from pc_pipelines.rollout import DEFAULT_ENGINE, ENGINES, EngineFactory
from pc_pipelines.rollout.registry import GPU_IMAGE_ENGINE, launch_device_problem
from pc_pipelines.run import (
    REFUSED,
    STEP_KEYS,
    RunSpec,
    SegmentResult,
    StepRecord,
    evaluate_checkpoint,
    run_segment,
    with_task,
)
from pc_pipelines.run.segment_attempt import (
    SegmentRequest,
    load_requested_run,
    record_failed_launch,
    train_requested_segment,
)
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


class StepTap(PipesMessageReader):
    """A Pipes message reader that also hands each message its launched process reports to ``on_message`` as it
    arrives, while the process still runs (the asset's live progress, a refusal's reason). Mixed in before a
    client's own reader class (:func:`tapped_reader`): every message still goes to Dagster's handler first,
    unchanged; ``on_message`` errors are logged, never raised into the reader's thread."""

    on_message: Callable[[dict], None] | None = None
    log: Any = None

    @contextmanager
    def read_messages(self, handler) -> Iterator[Any]:
        with super().read_messages(_TappedHandler(handler, self._tapped) if self.on_message else handler) as params:
            yield params

    def _tapped(self, message: dict) -> None:
        try:
            self.on_message(message)
        except Exception as exc:  # progress is a view: a bad row must not stop the training it reports on
            if self.log is not None:
                self.log.warning(f"a message of the launched process not shown: {type(exc).__name__}: {exc}")


class _TappedHandler:
    """Dagster's message handler as a reader sees it, with each message also given to ``tap`` after the handler
    (what Dagster's own composite reader does for its children: a proxy that delegates the rest)."""

    def __init__(self, handler, tap: Callable[[dict], None]) -> None:
        self.handler, self.tap = handler, tap

    def handle_message(self, message) -> None:
        self.handler.handle_message(message)
        self.tap(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handler, name)


@functools.cache
def _tapping(reader_class: type) -> type:
    return type(f"StepTap{reader_class.__name__}", (StepTap, reader_class), {})


def tapped_reader(reader_class: type, on_message: Callable[[dict], None] | None, log, **kwargs) -> PipesMessageReader:
    """A ``reader_class(**kwargs)`` (the client's own default reader) that also hands each message to
    ``on_message`` (:class:`StepTap`); passed to the client as its ``message_reader``."""
    reader = _tapping(reader_class)(**kwargs)
    reader.on_message, reader.log = on_message, log
    return reader


class LaunchMessages:
    """What a launched ``train-segment`` sends, as each Pipes message arrives (a :func:`tapped_reader`'s
    ``on_message``): each step goes to ``on_step`` (``shown`` keeps its number), a refusal by the run's writer lock
    (:data:`~pc_pipelines.run.REFUSED`) is kept in ``refusal``; anything else is Dagster's alone."""

    def __init__(self, on_step: Callable[[StepRecord], None] | None) -> None:
        self.on_step = on_step
        self.shown: set[int] = set()
        self.refusal: dict[str, Any] | None = None

    def __call__(self, message: dict) -> None:
        payload = (message.get("params") or {}).get("payload") if message.get("method") == "report_custom_message" else None
        if not isinstance(payload, dict):
            return
        if isinstance(payload.get(REFUSED), dict):
            self.refusal = payload[REFUSED]
        elif "step" in payload:
            rec = StepRecord.from_json(payload)
            self.shown.add(rec.step)
            if self.on_step:
                self.on_step(rec)


def _reported(meta: dict[str, Any], key: str) -> Any:
    """The plain value of ``key`` in a materialization the launched process reported (None when absent)."""
    return getattr(meta.get(key), "value", meta.get(key))


class ComputeResource(ConfigurableResource):
    """Where a segment trains: one call, :meth:`run_segment`, taking the :class:`SegmentRequest`. In this process or
    in a launched one, :func:`~pc_pipelines.run.segment_attempt.train_requested_segment` checks the request, takes
    the run's writer lock and records the attempt, once, in the process that trains."""

    @abstractmethod
    def run_segment(self, request: SegmentRequest, store: Store, context: Any = None,
                    on_step: Callable[[StepRecord], None] | None = None, engine_factory: EngineFactory | None = None,
                    stop: StopFlag | None = None) -> SegmentResult:
        """Train the segment ``request`` names (its paths: this process's); see :func:`pc_pipelines.run.run_segment`.
        ``store``: the caller's store session. ``context`` is the asset's execution context (Pipes clients launch
        and report through it; the local compute ignores it). ``on_step``: each step as it is done (or reported).
        ``engine_factory``: the in-process rollout engine (a launched process builds its own). ``stop``: a stop
        flag the local compute looks at between steps (a launched process handles its own signals)."""

    @abstractmethod
    def starting(self, restoring: str) -> str:
        """What a segment's second start-up phase does here (``restoring``: the checkpoint, or the base policy)."""

    @abstractmethod
    def evaluate(self, run: RunSpec, store: Store, step: int, engine_factory: EngineFactory | None = None,
                 context: Any = None, data_dir: str = "runs/data") -> EvalResult:
        """Mean@k of ``run``'s checkpoint after ``step`` (:func:`~pc_pipelines.run.evaluate_checkpoint`; the task
        from ``data_dir`` where it runs); the caller writes the rows to the store."""


class LocalComputeResource(ComputeResource):
    """Runs the segment in this process with :func:`pc_pipelines.run.run_segment` (the local backend)."""

    device: str = Field(default="cpu", description="torch device: cpu or cuda.")

    def run_segment(self, request: SegmentRequest, store: Store, context: Any = None,
                    on_step: Callable[[StepRecord], None] | None = None, engine_factory: EngineFactory | None = None,
                    stop: StopFlag | None = None) -> SegmentResult:
        run = with_task(load_requested_run(store, request), request.data_dir)  # the task, before anything is recorded

        def train() -> SegmentResult:
            return run_segment(run, store, from_step=request.from_step, until_step=request.until_step,
                               on_step=on_step, device=self.device, engine_factory=engine_factory, stop=stop,
                               lock_held=True)  # under train_requested_segment's lock

        return train_requested_segment(store, request, run, train, command=_command(context, request))

    def starting(self, restoring: str) -> str:
        return f"restoring {restoring} and starting the rollout engine"

    def evaluate(self, run: RunSpec, store: Store, step: int, engine_factory: EngineFactory | None = None,
                 context: Any = None, data_dir: str = "runs/data") -> EvalResult:
        return evaluate_checkpoint(with_task(run, data_dir), step, engine_factory, self.device)


def _command(context: Any, request: SegmentRequest) -> str:
    """The run lock's ``command``: who trains the segment (the Dagster run and the partition, when in Dagster)."""
    key = getattr(context, "partition_key", None) if context is not None else None
    return (f"dagster training_segment {key} (Dagster run {request.attempt})" if key
            else f"training segment {request.segment} of {request.run_id}")


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

    def seen_here(self, request: SegmentRequest) -> SegmentRequest:
        """``request`` with the paths the launched process sees (this resource's, where set)."""
        return request.seen_from(self.store_path, self.runs_root, self.data_dir)

    def _args(self, command: str, request: SegmentRequest, *specific: str) -> list[str]:
        """``command``'s arguments for ``request`` (its paths as the launched process sees them), with ``specific``."""
        seen = self.seen_here(request)
        return [command, "--store", seen.store, "--run-id", seen.run_id, "--runs-root", seen.runs_root, *specific, "--data-dir", seen.data_dir,
                "--engine", self.engine, "--device", self.device]

    def segment_args(self, request: SegmentRequest) -> list[str]:
        """The ``train-segment`` arguments (after the program name) for ``request``; with its ``segment`` (and
        ``attempt``, the Dagster run) the process records the segment's start and end in the store."""
        args = self._args("train-segment", request, "--until-step", str(request.until_step))
        if request.from_step is not None:
            args += ["--from-step", str(request.from_step)]
        if request.segment is not None:
            args += ["--segment", str(request.segment)]
        if request.attempt is not None:
            args += ["--attempt", request.attempt]
        return args

    def eval_args(self, run: RunSpec, store: Store, step: int) -> list[str]:
        """The ``eval-segment`` arguments for the checkpoint of ``run`` after ``step``."""
        request = SegmentRequest(store=str(store.path), run_id=run.run_id, until_step=step,
                                 runs_root=str(run.run_dir.parent), data_dir=self.data_dir)
        return self._args("eval-segment", request, "--step", str(step))

    @abstractmethod
    def launch(self, context, args: list[str], on_message: Callable[[dict], None] | None = None):
        """Run the entrypoint with ``args`` through a Pipes client; return its ``PipesClientCompletedInvocation``.
        ``on_message``: called with each Pipes message the process sends, as it arrives (the client's message
        reader is a :func:`tapped_reader`)."""

    def launch_eval(self, context, args: list[str]):
        """Run ``eval-segment`` (default: where the segments run, ``launch``)."""
        return self.launch(context, args)

    def starting(self, restoring: str) -> str:
        return f"launching the training process ({type(self).__name__}), which restores {restoring} and starts its " \
               "rollout engine"

    def run_segment(self, request: SegmentRequest, store: Store, context: Any = None,
                    on_step: Callable[[StepRecord], None] | None = None, engine_factory: EngineFactory | None = None,
                    stop: StopFlag | None = None) -> SegmentResult:
        """The launched process checks the request, takes the run's lock and records the attempt itself
        (:func:`~pc_pipelines.run.segment_attempt.train_requested_segment`); this one records only a launch that
        failed before it could (:func:`~pc_pipelines.run.segment_attempt.record_failed_launch`)."""
        if context is None:
            raise Failure(f"{type(self).__name__} runs segments of the training_segment asset (it needs the asset's "
                          "context). Fix: use LocalComputeResource outside Dagster.")
        messages = LaunchMessages(on_step)
        try:
            completed = self.launch(context, self.segment_args(request), on_message=messages)
        except BaseException as exc:
            if messages.refusal is not None:  # the launched process found another writer of the run and did nothing
                lock = store.run_dir(request.run_id) / LOCK_NAME
                raise LaunchRefused(request.run_id, lock, read_holder(lock),
                                    str(messages.refusal.get("message"))) from exc
            try:
                record_failed_launch(store, request, exc, _command(context, request),
                                     stopped_by_launcher=getattr(exc, "stopped_by_launcher", False))
            except Exception as rec_exc:  # the launch's error matters more (a full disk may refuse this)
                context.log.error("%s: could not record the failed launch: %s", request.run_id, rec_exc)
            raise
        rows = [m for m in completed.get_custom_messages() if isinstance(m, dict) and "step" in m]
        records = [StepRecord.from_json(m) for m in rows]
        for rec in records:  # steps a client without a live tap hands over only now
            if on_step and rec.step not in messages.shown:
                on_step(rec)
        meta = completed.get_materialize_result().metadata or {}
        if _reported(meta, "steps_run") is None:
            raise Failure(f"the launched segment of {request.run_id} reported no materialization. Fix: look at its "
                          "log (the pod's or the subprocess's stderr above).")
        reported = {k: v for k, v in meta.items()}
        reported["pipes_steps"] = MetadataValue.json([{k: m.get(k) for k in STEP_KEYS} for m in rows])
        reported.update({f"launch/{k}": v for k, v in (completed.metadata or {}).items()})
        summary = {k: _reported(meta, k) for k in meta}
        return SegmentResult.from_summary(request.run_id, summary, records, request.run_dir() / "tensorboard",
                                          reported)

    def evaluate(self, run: RunSpec, store: Store, step: int, engine_factory: EngineFactory | None = None,
                 context: Any = None, data_dir: str = "runs/data") -> EvalResult:
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

    def launch(self, context, args: list[str], on_message: Callable[[dict], None] | None = None):
        from dagster import PipesSubprocessClient, PipesTempFileMessageReader

        command = [self.python or sys.executable, "-m", "pc_pipelines.cli", *args]
        reader = tapped_reader(PipesTempFileMessageReader, on_message, context.log)
        return PipesSubprocessClient(cwd=self.cwd, message_reader=reader).run(context=context, command=command)


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
                on_message: Callable[[dict], None] | None = None):
        """``pilot-commit <args>`` in one pod of ``pod_spec`` through ``PipesK8sClient``."""
        from dagster_k8s import PipesK8sClient
        from dagster_k8s.pipes import PipesK8sPodLogsMessageReader

        client = PipesK8sClient(load_incluster_config=self.kubeconfig_file is None, kubeconfig_file=self.kubeconfig_file,
                                message_reader=tapped_reader(PipesK8sPodLogsMessageReader, on_message, context.log))
        return client.run(context=context, image=self.image, command=["pilot-commit", *args], namespace=self.namespace,
                          base_pod_meta={"labels": {"app.kubernetes.io/name": "pc-pipelines",
                                                    "app.kubernetes.io/component": component}},
                          base_pod_spec=pod_spec, pod_wait_timeout=self.pod_wait_timeout_s)


class K8sComputeResource(KubeComputeBase):
    """One GPU pod per segment through ``PipesK8sClient`` (the pod spec: :func:`pc_pipelines_dagster.resources.kube.segment_pod_spec`)."""

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

    def launch(self, context, args: list[str], on_message: Callable[[dict], None] | None = None):
        return self.run_pod(context, args, self.pod_spec(), "training-segment", on_message)

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

    def segment_args(self, request: SegmentRequest) -> list[str]:
        args = super().segment_args(request)
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

    def launch(self, context, args: list[str], on_message: Callable[[dict], None] | None = None):
        import shlex

        try:
            from dagster_ray.kuberay import PipesKubeRayJobClient
            from dagster_ray.kuberay.client import RayJobClient
        except ImportError as exc:
            raise Failure("KubeRayComputeResource needs dagster-ray (a default dependency). Fix: pip install -e .") from exc
        from dagster_ray.core.pipes import PipesRayJobMessageReader

        reader = tapped_reader(PipesRayJobMessageReader, on_message, context.log)
        client = PipesKubeRayJobClient(client=RayJobClient(kube_config=self.kubeconfig_file), message_reader=reader)
        return client.run(context=context, ray_job=self.rayjob(shlex.join(["pilot-commit", *args])))
