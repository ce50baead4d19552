"""``pilot-commit train-segment`` / ``eval-segment``: one training segment of a registered run, or the evaluation of
its checkpoint, as a process of its own.

This is the in-pod entrypoint of the scale path (docs/DESIGN.md section 4). The Dagster ``training_segment`` asset
launches it through a Pipes client (``PipesK8sClient`` for one GPU pod, dagster-ray's ``PipesKubeRayJobClient`` for
a multi-node RayJob, its ``PipesRayJobClient`` for a job on an existing Ray cluster, ``PipesSubprocessClient`` on one
machine) instead of calling :func:`~.run.run_segment` in the orchestrator's process. It is a thin command line over the run layer, and calls the very same
:func:`~.run.run_segment` the local compute uses:

1. the flags make one :class:`~.run.segment_attempt.SegmentRequest` (``--run-id`` checked once, by argparse), the
   store is opened once (:func:`~.run.segment_attempt.open_store`) and the run read back from it (its resolved
   config and lineage, registered by the ``start_run`` job); the run directory is ``<runs-root>/<run-id>``;
2. :func:`~.run.segment_attempt.train_requested_segment`, the same the in-process compute uses, checks the request
   against the run's plan (``--segment K`` trains exactly segment K's steps; nothing recorded otherwise), takes the
   run's writer lock and, with ``--segment`` (the asset passes it, and ``--attempt``, its Dagster run), records this
   attempt's start and at the end done, stopped or failed: the process that trains a segment owns its row. Before
   that, ``--device`` (``cuda`` where torch sees none) and ``--runs-root`` (a file) are checked; a segment is
   recorded done only when every one of its steps is in the store;
3. the task is rebuilt (embedded, or the prepared dataset under ``--data-dir``) and ``run_segment`` trains steps
   ``--from-step + 1 .. --until-step``, writing the step logs to the store;
4. each step is reported, and at the end the segment's materialization.

**Refused.** When another process holds the run's writer lock, the command records nothing, sends the Pipes custom
message ``{"refused": {"message": ..., "holder": ...}}`` (:data:`~.run.REFUSED`; launched by Pipes) and exits 2 with
the message (naming the holder and the fix) on stderr.

**Reporting.** Launched by a Pipes client (``DAGSTER_PIPES_CONTEXT`` is set by it), each step goes to Dagster as
a Pipes custom message (the step's JSON, as ``pilot-commit train --json`` prints it; the asset logs it and shows it
as the segment's progress as it arrives), and the end of
the segment as the asset materialization (steps, rollouts, accuracy, checkpoint). Run by hand, the same JSON lines
go to stdout and the summary as a last JSON line with ``"segment": true``. ``dagster_pipes`` is the dependency-free
half of the Pipes protocol (it does not import Dagster) and is imported only in the first case.

``eval-segment`` is the same for the ``segment_eval`` asset: it evaluates the checkpoint after ``--step`` with
:func:`~.run.evaluate_checkpoint` on the engine it is given (vLLM on a GPU pod) and reports the
:class:`~.evaluation.EvalResult` as the materialization (by hand: one JSON line); the asset writes ``eval_results``,
so the store keeps one writer for them.

Paths are those of the process that runs it: in a pod, the PVC's mount (``k8s/README.md``): the store file, run
directories and prepared data must sit at the same paths in the Dagster run pod and the training pod.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..data.registry import TRAINING, datasets
from ..errors import RunError, brief
from ..rollout import DEFAULT_ENGINE, ENGINES, EngineFactory, engine_names, get_engine
from ..run import (
    REFUSED,
    RunSpec,
    SegmentResult,
    StepRecord,
    evaluate_checkpoint,
    run_segment,
    with_task,
)
from ..run.segment_attempt import SegmentRequest, load_requested_run, open_store, train_requested_segment
from ..run.stopping import StopRequested, stop_on_signals
from ..store import RunBusyError, Store, StoreError
from ..store.names import RunIdError, validate_run_id
from .exits import OK, exit_status


def engine_factory(name: str, device: str) -> EngineFactory:
    """The rollout engine ``--engine`` names (one of the registry's, :mod:`pc_pipelines.rollout.registry`) on
    ``device``; its module (and vllm, say) is imported when the engine is built."""
    try:
        spec = get_engine(name)
    except ValueError:
        raise RunError(f"--engine {brief(name)}: use one of {engine_names()}.") from None
    return lambda model, tokenizer: spec.build(model, tokenizer, device)


# ---- reporting ----------------------------------------------------------------------------------------------------
class PlainReporter:
    """Run by hand: one JSON line per step on stdout, then the summary line (``"segment": true``)."""

    def __init__(self, out=None) -> None:
        self.out = out or sys.stdout

    def step(self, rec: StepRecord) -> None:
        self.out.write(json.dumps(rec.to_json()) + "\n")
        self.out.flush()

    def finish(self, result: SegmentResult) -> None:
        self.out.write(json.dumps({"segment": True, **result.summary()}) + "\n")
        self.out.flush()

    def refused(self, exc: RunBusyError) -> None:
        """By hand the refusal is the exit code and the message on stderr alone."""


class PipesReporter:
    """Launched by a Pipes client: per-step custom messages and log lines, the materialization at the end."""

    def __init__(self, pipes) -> None:
        self.pipes = pipes

    def step(self, rec: StepRecord) -> None:
        # No log line of its own: the orchestrator logs the step as it arrives, with the segment's progress.
        self.pipes.report_custom_message(rec.to_json())

    def finish(self, result: SegmentResult) -> None:
        meta = result.summary()
        typed = {k: ({"raw_value": v, "type": "path"} if k in ("checkpoint", "tensorboard") and v else v)
                 for k, v in meta.items()}
        self.pipes.report_asset_materialization(metadata=typed)

    def refused(self, exc: RunBusyError) -> None:
        """Another process holds the run: the orchestrator learns it from this message (:data:`~.run.REFUSED`)."""
        self.pipes.report_custom_message({REFUSED: {"message": str(exc), "holder": exc.holder}})


def _check_device(device: str) -> None:
    """Refuse (:class:`RunError`, before the store is touched) a ``--device`` torch cannot use on this machine:
    not a device name, or ``cuda`` where torch sees no CUDA device (issue 54: a traceback from deep in the model's
    load)."""
    if device == "cpu":
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise RunError(f"--device {brief(device)} is not a torch device. Fix: pass cpu or cuda (cuda:N for one "
                       "GPU).") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise RunError(f"--device {brief(device)}: torch sees no CUDA device on this machine (torch "
                           f"{torch.__version__}); nothing was trained or recorded. Fix: run it where a GPU is (the "
                           "GPU image, a pod with a GPU), or pass --device cpu.")
        if dev.index is not None and dev.index >= count:
            raise RunError(f"--device {brief(device)}: this machine has {count} CUDA device(s) (cuda:0..cuda:"
                           f"{count - 1}). Fix: pass one of them.")


def _check_runs_root(runs_root: str) -> None:
    """Refuse a ``--runs-root`` that cannot hold run folders (a file, or a file above it) before anything is
    recorded."""
    path = Path(runs_root).absolute()
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                what = "is" if p == path else f"lies under {p}, which is"
                raise RunError(f"--runs-root {brief(runs_root)} {what} a file, not a folder, so no run folder "
                               "(checkpoints, TensorBoard) can go there; nothing was trained or recorded. Fix: pass "
                               "the folder holding <run-id>/ (the checkpoint resource's root), or a new path.")
            return


def _request(args: argparse.Namespace) -> SegmentRequest:
    """The :class:`~.run.segment_attempt.SegmentRequest` the flags describe (``--run-id`` checked by argparse)."""
    return SegmentRequest(store=args.store, run_id=args.run_id, until_step=getattr(args, "until_step", 0),
                          from_step=getattr(args, "from_step", None), segment=getattr(args, "segment", None),
                          attempt=getattr(args, "attempt", None), runs_root=args.runs_root, data_dir=args.data_dir)


def _load(args: argparse.Namespace) -> tuple[Store, SegmentRequest, RunSpec]:
    """The process's one store session, the request and the spec of the registered run the arguments name
    (``RunError`` with the fix when either is missing, or when ``--device`` or ``--runs-root`` cannot work here)."""
    _check_device(args.device)
    _check_runs_root(args.runs_root)
    request = _request(args)
    store = open_store(request.store)
    return store, request, load_requested_run(store, request)


def _run(args: argparse.Namespace, reporter: Callable[[], Any], stop=None) -> SegmentResult:
    store, request, spec = _load(args)
    rep = reporter()
    engines = engine_factory(args.engine, args.device)

    def train() -> SegmentResult:
        run = with_task(spec, args.data_dir)
        backend = None  # the local backend
        if args.backend == "verl":  # experimental: the verl recipe on a Ray cluster (GPU nodes)
            from ..run.verl import VerlBackend

            backend = VerlBackend(run, engine_factory=engines, device=args.device, nnodes=args.nnodes,
                                  gpus_per_node=args.gpus_per_node, overrides=args.recipe_set)
        return run_segment(run, store, from_step=args.from_step, until_step=args.until_step, on_step=rep.step,
                           device=args.device, engine_factory=engines, stop=stop, backend=backend, lock_held=True)

    # checked against the plan, the run's lock taken and the attempt recorded in one place, as in process
    result = train_requested_segment(store, request, spec, train, command="pilot-commit train-segment",
                                     on_refused=rep.refused)
    rep.finish(result)
    return result


def _launched_by_pipes() -> bool:
    try:
        from dagster_pipes import PipesEnvVarParamsLoader

        return PipesEnvVarParamsLoader().is_dagster_pipes_process()  # reads the env now, at run time
    except ImportError:  # an image without dagster-pipes still runs plainly
        return False


def _line_buffered_stdout() -> None:
    """Write stdout line by line. Pipes clients that read messages from the process's log (a pod's log for
    ``PipesK8sClient``, the Ray job's log for ``PipesRayJobClient``) get them from stdout, one JSON line each, and
    ``dagster_pipes`` writes a message as two writes (the JSON, then the newline) without flushing. Redirected to a
    file, stdout is block-buffered: the steps would arrive only when the process ends (never if it is killed), and
    a buffer flush could cut a line in two with the merged stderr between the halves. Unbuffered (``python -u``,
    ``PYTHONUNBUFFERED``), the JSON and its newline are two system calls, with the same risk. Line-buffered without
    write-through, each message reaches the log as ONE write, when its newline is written."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True, write_through=False)


def code_origin(name: str) -> str:
    """The first line a Pipes-launched command logs: which code and interpreter run it. On a cluster the package may
    come from the image or be shipped with the job (a Ray runtime environment's ``py_modules`` puts its copy first on
    the path): the orchestrator's log says which ran. The code named is the ``pc_pipelines`` package's directory."""
    return f"pilot-commit {name}: code {Path(__file__).resolve().parents[1]}, python {sys.executable}"


def _main(name: str, work: Callable[[Any], None]) -> int:
    """Run ``work(pipes)`` inside a Pipes session when launched by a Pipes client, else ``work(None)``; a
    ``RunError`` or a store refusal (another writer holds the run, say) becomes exit code 2 with its message (which
    says how to fix it) on stderr; a stop (SIGTERM, as Kubernetes sends to a pod it deletes, or Ctrl-C) exits
    128 + the signal after one line."""

    try:
        if _launched_by_pipes():
            from dagster_pipes import open_dagster_pipes

            _line_buffered_stdout()
            with open_dagster_pipes() as pipes:
                pipes.log.info(code_origin(name))
                work(pipes)
        else:
            work(None)
    except (RunError, StoreError) as exc:
        sys.stderr.write(f"pilot-commit {name}: {exc}\n")
        return exit_status(exc)
    except StopRequested as exc:
        sys.stderr.write(f"pilot-commit {name}: {exc.reason}\n")
        return exit_status(exc)
    return OK


def cmd_train_segment(args: argparse.Namespace) -> int:
    with stop_on_signals() as stop:
        return _main("train-segment",
                     lambda pipes: _run(args, (lambda: PipesReporter(pipes)) if pipes else PlainReporter, stop))


def eval_report(result, step: int) -> dict[str, Any]:
    """What ``eval-segment`` reports: the step, the average and the whole :class:`~.evaluation.EvalResult`."""
    return {"step": step, "average_accuracy": result.mean, "eval": result.to_json()}


def cmd_eval_segment(args: argparse.Namespace) -> int:
    def work(pipes) -> None:
        _, _, spec = _load(args)
        run = with_task(spec, args.data_dir)
        result = evaluate_checkpoint(run, args.step, engine_factory(args.engine, args.device), args.device)
        report = eval_report(result, args.step)
        if pipes is None:
            sys.stdout.write(json.dumps(report) + "\n")
            return
        pipes.log.info(f"{run.run_id} step {args.step}: average accuracy {result.mean:.4f} over "
                       f"{len(result.accuracy)} sets")
        pipes.report_asset_materialization(metadata={**report, "eval": {"raw_value": report["eval"], "type": "json"}})

    return _main("eval-segment", work)


def _run_id_arg(value: str) -> str:
    """argparse ``type`` of ``--run-id``: a name no run can have is refused before the store is opened."""
    try:
        return validate_run_id(value, field="--run-id")
    except RunIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common_args(p) -> None:
    p.add_argument("--store", required=True, help="the store's DuckDB file, where the run is registered")
    p.add_argument("--run-id", required=True, type=_run_id_arg, help="the run (registered by the start_run job)")
    p.add_argument("--runs-root", required=True, help="directory holding <run-id>/ (checkpoints, TensorBoard)")
    prepared = " / ".join(d.name for d in datasets(TRAINING) if d.generic)
    p.add_argument("--data-dir", default="runs/data", help=f"prepared datasets (runs on {prepared})")
    p.add_argument("--engine", choices=engine_names(), default=DEFAULT_ENGINE,
                   help="rollout engine: " + " or ".join(spec.summary for spec in ENGINES.values()))
    p.add_argument("--device", default="cpu", help="torch device of the policy: cpu or cuda")


def add_parsers(sub) -> None:
    """``train-segment`` and ``eval-segment``."""
    p = sub.add_parser(
        "train-segment",
        help="train one segment of a registered run (the in-pod entrypoint; reports through Dagster Pipes)",
        description=__doc__.split("\n\n")[0],
    )
    _common_args(p)
    p.add_argument("--until-step", type=int, required=True, help="the segment's last step (inclusive)")
    p.add_argument("--from-step", type=int, default=None,
                   help="start from the checkpoint after this step (0: the base policy; default: the latest)")
    p.add_argument("--segment", type=int, default=None,
                   help="the run's segment this trains (its row in the store's segment plan): its start and end are "
                        "recorded there (the training_segment asset passes it)")
    p.add_argument("--attempt", default=None,
                   help="with --segment: the Dagster run making this attempt, recorded on the segment's row")
    p.add_argument("--backend", choices=("local", "verl"), default="local",
                   help="local: the backend of `pilot-commit train` (default); verl: the verl recipe on a Ray "
                        "cluster (GPU nodes, experimental; resumable, evaluates with --engine on exported weights)")
    p.add_argument("--nnodes", type=int, default=1, help="verl backend: GPU nodes of the Ray cluster")
    p.add_argument("--gpus-per-node", type=int, default=8, help="verl backend: GPUs per node")
    p.add_argument("--recipe-set", action="append", default=[], metavar="KEY=VALUE",
                   help="verl backend: Hydra override of the recipe config (repeatable)")
    p.set_defaults(func=cmd_train_segment)

    p = sub.add_parser(
        "eval-segment",
        help="evaluate a registered run's checkpoint after one step (the in-pod entrypoint of segment_eval)",
        description="Mean@k of the run's checkpoint after --step on its eval sets, with the run's eval settings and "
                    "seed (equal to the training loop's own evaluation of that step). Launched by a Pipes client it "
                    "reports the result as the materialization; by hand it prints it as one JSON line. It does not "
                    "write the store: the segment_eval asset does.",
    )
    _common_args(p)
    p.add_argument("--step", type=int, required=True, help="the checkpoint: the one taken after this step")
    p.set_defaults(func=cmd_eval_segment)
