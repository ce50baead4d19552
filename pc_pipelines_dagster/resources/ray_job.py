"""Training segments and evaluations as jobs on an existing Ray cluster: :class:`RayJobComputeResource`.

The same entrypoint as every Pipes compute (``pilot-commit train-segment`` / ``eval-segment`` with the arguments
:meth:`~resources.compute.PipesComputeResource.segment_args` / ``eval_args`` build), submitted to the cluster's job
server by address through dagster-ray's ``PipesRayJobClient`` (``ray.job_submission.JobSubmissionClient`` under
the hood, plain HTTP to the head's dashboard port, no Ray Client and no ``ray.init`` in the orchestrator):

* **submission**: one Ray job per segment (or evaluation); its entrypoint is the command line, its runtime
  environment carries ``env_vars`` (the Pipes bootstrap variables dagster-ray adds, which tell the entrypoint to
  report through Pipes on stdout, plus :attr:`~RayJobComputeResource.env_vars`) and, only when set, ``working_dir``,
  ``py_modules`` and ``pip``; ``entrypoint_num_cpus`` / ``_gpus`` / ``_memory`` reserve the job's resources, so
  Ray places it on a node that has them;
* **messages**: the entrypoint writes each Pipes message as one JSON line on stdout (line-buffered, see
  :mod:`pc_pipelines.cli.segment`); Ray writes the job's stdout and stderr to the job log, which dagster-ray tails over
  the job server's websocket and turns back into Pipes messages (other lines go to the orchestrator's stdout). The
  per-step custom messages and the final materialization are then handled exactly as for the other Pipes computes
  (:meth:`~resources.compute.PipesComputeResource.run_segment`);
* **failure**: a job that fails, is stopped (``ray job stop``: SIGTERM, so the segment checkpoints after its current
  step when it can, SIGKILL after ``RAY_JOB_STOP_WAIT_TIME_S``, 3 s by default) or dies with its node fails the
  asset (the segment is recorded ``failed``); the retry (the ``advance_runs`` sensor, or a re-materialization)
  resumes from the newest checkpoint inside the segment, as a local segment does. A Dagster run that is
  interrupted stops its job, and so does ``job_timeout_s`` (dagster-ray's client has no time limit of its own).

**Authentication.** Ray 2.60 turns token authentication on for a cluster started where a token exists
(``~/.ray/auth_token``, ``RAY_AUTH_TOKEN``) or with ``RAY_AUTH_MODE=token``: its job server then answers 401 without
``Authorization: Bearer <token>``. The resource sends that header when the orchestrator's environment holds the
token in ``auth_token_env`` (``RAY_AUTH_TOKEN`` by default; a Kubernetes Secret on the Dagster pods), so the token
never enters the Dagster config; a refusal fails the asset saying so.

**Shared storage.** The job reads the run from the store and writes step logs and checkpoints where the
orchestrator reads them: the store file, run directories and prepared data must be at the same paths on the
orchestrator and on every Ray node that can run the job (a directory on this host for a local cluster, a
``ReadWriteMany`` PVC mounted at the same path in the Dagster pods and the Ray pods on Kubernetes), or the
job's own paths are set with ``store_path`` / ``runs_root`` / ``data_dir``. Relative paths are made absolute
against the orchestrator's working directory (a Ray job runs in a working directory of Ray's).

**Code.** The job runs ``pilot-commit`` from its ``PATH`` (or ``<python> -m pc_pipelines.cli`` with ``python``
set): on a local cluster started from this environment that is this very installation, and a real cluster's image
must have this package installed (``k8s/Dockerfile``'s image, as the Ray head and worker image). Newer code can
travel with each job: ``py_modules=[<path of pc_pipelines>]`` (Ray zips the package, uploads it once per content
hash, and puts its copy first on the job's path; the Ray integration test runs every job this way, and the
entrypoint's first Pipes log line names the code it ran). ``pip`` would install dependencies per node and job (not
run here). Results are bit-identical to a local run only on the same CPU kernels and library versions.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shlex
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagster import Failure
from pydantic import Field, model_validator

from pc_pipelines.errors import shell_command
from pc_pipelines.rollout.registry import launch_device_problem

from .compute import PipesComputeResource, tapped_reader

_log = logging.getLogger(__name__)


def _absolute(path: str) -> str:
    return path if Path(path).is_absolute() else str(Path(path).resolve())


class RayJobComputeResource(PipesComputeResource):
    """``pilot-commit train-segment`` / ``eval-segment`` as a job on an existing Ray cluster, through dagster-ray's
    ``PipesRayJobClient`` (module docstring: submission, messages, failures, shared storage, code)."""

    address: str = Field(
        description="The cluster's job server: the head's dashboard HTTP address, e.g. http://127.0.0.1:8265, or "
                    "http://<raycluster>-head-svc.<namespace>.svc:8265 for a KubeRay cluster."
    )
    python: str | None = Field(
        default=None, description="Interpreter with pc_pipelines installed on the Ray nodes, run as `<python> -m "
                                  "pc_pipelines.cli` (None: `pilot-commit` from the job's PATH)."
    )
    env_vars: dict[str, str] = Field(
        default_factory=dict, description="Extra environment of the job (its runtime_env env_vars), e.g. HF_HOME."
    )
    working_dir: str | None = Field(
        default=None, description="runtime_env working_dir (a local directory uploaded to the cluster, or a URI); "
                                  "None: not set (the code is installed on the nodes)."
    )
    py_modules: list[str] = Field(
        default_factory=list, description="runtime_env py_modules, e.g. the path of pc_pipelines to ship the code."
    )
    pip: list[str] = Field(default_factory=list, description="runtime_env pip requirements installed for the job.")
    entrypoint_num_cpus: float = Field(default=1.0, ge=0, description="CPUs reserved for the job's entrypoint.")
    entrypoint_num_gpus: float = Field(default=0.0, ge=0, description="GPUs reserved for the job's entrypoint.")
    entrypoint_memory_bytes: int | None = Field(
        default=None, ge=0, description="Memory (bytes) reserved for the job's entrypoint (None: none)."
    )
    poll_interval_s: float = Field(default=1.0, gt=0, description="How often the job's status is polled.")
    job_timeout_s: float | None = Field(
        default=None, gt=0, description="Stop the job (through the job server) when it runs longer than this many "
                                        "seconds, waiting for resources included; the segment then fails and its retry "
                                        "resumes from the newest checkpoint (None: no limit).",
    )
    auth_token_env: str | None = Field(
        default="RAY_AUTH_TOKEN",
        description="Environment variable of the orchestrator holding the cluster's token (Ray token authentication, "
                    "on by default for clusters started where ~/.ray/auth_token exists): when set, every request "
                    "carries `Authorization: Bearer <token>`. The token itself never goes in the config.",
    )

    @model_validator(mode="after")
    def _engine_and_device(self):
        problem = launch_device_problem(self.engine, self.device)
        if problem is not None:
            raise ValueError(problem)
        if self.device.startswith("cuda") and self.entrypoint_num_gpus <= 0:
            raise ValueError("device='cuda' with entrypoint_num_gpus=0: Ray would place the job without a GPU. Fix: "
                             "set entrypoint_num_gpus (e.g. 1), or device=cpu and engine=transformers.")
        return self

    def _args(self, command, request, *specific: str) -> list[str]:
        args = super()._args(command, request, *specific)
        for flag in ("--store", "--runs-root", "--data-dir"):
            i = args.index(flag) + 1
            args[i] = _absolute(args[i])
        return args

    def entrypoint(self, args: list[str]) -> str:
        """The job's entrypoint: the shell command line of the entrypoint with ``args``."""
        program = [self.python, "-m", "pc_pipelines.cli"] if self.python else ["pilot-commit"]
        return shlex.join([*program, *args])

    def runtime_env(self) -> dict[str, Any]:
        """The job's Ray runtime environment (dagster-ray adds the Pipes variables to its ``env_vars``)."""
        env: dict[str, Any] = {"env_vars": dict(self.env_vars)}
        if self.working_dir:
            env["working_dir"] = self.working_dir
        if self.py_modules:
            env["py_modules"] = list(self.py_modules)
        if self.pip:
            env["pip"] = list(self.pip)
        return env

    def submit_job_params(self, args: list[str]) -> dict[str, Any]:
        """What ``JobSubmissionClient.submit_job`` gets (dagster-ray's ``SubmitJobParams``): the entrypoint, the
        runtime environment, metadata naming the run and the command, a readable submission id
        (``pc-<command>-<run id>-<8 hex>``) and the entrypoint's resources."""
        command = args[0]
        run_id = args[args.index("--run-id") + 1]
        params: dict[str, Any] = {
            "entrypoint": self.entrypoint(args),
            "runtime_env": self.runtime_env(),
            "metadata": {"pc_run_id": run_id, "pc_command": command},
            "submission_id": f"pc-{command}-{re.sub(r'[^A-Za-z0-9_-]', '_', run_id)}-{secrets.token_hex(4)}",
            "entrypoint_num_cpus": self.entrypoint_num_cpus,
        }
        if self.entrypoint_num_gpus:
            params["entrypoint_num_gpus"] = self.entrypoint_num_gpus
        if self.entrypoint_memory_bytes:
            params["entrypoint_memory"] = self.entrypoint_memory_bytes
        return params

    def headers(self) -> dict[str, str] | None:
        """The HTTP headers of every request to the job server: the bearer token from ``auth_token_env`` when set."""
        token = os.environ.get(self.auth_token_env) if self.auth_token_env else None
        return {"Authorization": f"Bearer {token}"} if token else None

    def client(self, on_message: Callable[[dict], None] | None = None, log=None):
        """A fresh ``PipesRayJobClient`` (its message reader follows one job; both its submission client and its
        log reader send :meth:`headers`); its reader hands each message to ``on_message`` as it arrives
        (:func:`~resources.compute.tapped_reader`)."""
        from dagster_ray.core.pipes import PipesRayJobClient, PipesRayJobMessageReader

        headers = self.headers()
        reader = tapped_reader(PipesRayJobMessageReader, on_message, log, job_submission_client_kwargs={
            "headers": headers, "verify": True, "cookies": None, "metadata": None})
        return PipesRayJobClient(address=self.address, headers=headers, poll_interval=self.poll_interval_s,
                                 forward_termination=True, message_reader=reader)

    def _stop_job(self, submission_id: str, timed_out: threading.Event) -> None:
        from ray.job_submission import JobSubmissionClient

        timed_out.set()
        try:
            JobSubmissionClient(self.address, headers=self.headers()).stop_job(submission_id)
        except Exception as exc:  # the job may have just ended; the launch reports what happened
            timed_out.clear()
            _log.warning("could not stop Ray job %s after job_timeout_s=%s: %s", submission_id, self.job_timeout_s, exc)

    def launch(self, context, args: list[str], on_message: Callable[[dict], None] | None = None):
        params = self.submit_job_params(args)
        client = self.client(on_message, context.log)
        timed_out = threading.Event()
        timer = None
        if self.job_timeout_s:
            timer = threading.Timer(self.job_timeout_s, self._stop_job, (params["submission_id"], timed_out))
            timer.daemon = True
            timer.start()
        try:
            return client.run(context=context, submit_job_params=params)
        except ConnectionError as exc:
            raise Failure(f"no Ray job server at {self.address} ({exc}). Fix: start the cluster (`ray start --head "
                          "--dashboard-host 0.0.0.0`) or set the address of its dashboard (port 8265 by default; on "
                          "Kubernetes the head service, http://<raycluster>-head-svc.<namespace>.svc:8265).") from exc
        except Exception as exc:
            if type(exc).__name__ == "AuthenticationError":  # ray.exceptions: a 401 / 403 from the job server
                where = f"${self.auth_token_env}" if self.auth_token_env else "auth_token_env"
                raise Failure(f"the Ray job server at {self.address} refused the request: {exc}\nFix: put the "
                              f"cluster's token in {where} in the orchestrator's environment (on Kubernetes from the "
                              "Secret the cluster's token comes from), or start the cluster with "
                              "RAY_AUTH_MODE=disabled where its network is private.") from exc
            if not (isinstance(exc, RuntimeError) and str(exc).startswith("[pipes] Ray job")):
                raise
            why = (f"The job ran past job_timeout_s={self.job_timeout_s:g} and was stopped. Fix: raise job_timeout_s, "
                   "or make segments shorter (segment_steps). " if timed_out.is_set() else "")
            logs = shell_command("ray", "job", "logs", params["submission_id"], "--address", self.address)
            failure = Failure(f"{exc}\n{why}The job's whole log: `{logs}`. A retry of the segment resumes from its "
                              "newest checkpoint.")
            # stopped by this resource, not by a person: a failed attempt, whatever its process recorded on the stop
            failure.stopped_by_launcher = timed_out.is_set()
            raise failure from exc
        finally:
            if timer is not None:
                timer.cancel()
