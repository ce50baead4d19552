"""A training run: its light spec (:class:`RunSpec`: id, resolved config, directory, base policy, lineage) and, where
it trains, the spec with its task (:class:`TrainingRun`).

:func:`prepare_run` makes a :class:`TrainingRun` from a config (the embedded task and warm start, or a prepared
dataset and a given policy). A run the ``start_run`` job registered in the store is read back by
:func:`load_run_spec` (no torch, no dataset: what the Dagster process needs to launch a segment elsewhere) and given
its task by :func:`with_task` where it trains (:func:`load_training_run`: both). The run's directory is set once,
``<runs_root>/<run_id>``, by :func:`run_dir_of`. Building a spec changes nothing on disk but the embedded warm
start's cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import RunConfig, from_dict
from ..data.task import TaskData
from ..errors import RunError
from ..store import RunRecord

SAMPLING_PLAN = "sampling_plan.json"
"""The file in a run's directory that records the engine settings its rollouts were drawn with (the run's
``sampling_plan``, kept from start to end: :func:`~.local.keep_sampling_plan`)."""

def run_dir_of(runs_root: str | Path, run_id: str) -> Path:
    """The directory of run ``run_id`` (checkpoints, TensorBoard, its lock): ``<runs_root>/<run_id>``, absolute."""
    return Path(runs_root).resolve() / run_id


class _RunPaths:
    """What a run's directory holds, and its store record: shared by :class:`RunSpec` and :class:`TrainingRun`."""

    run_id: str
    config: RunConfig
    run_dir: Path
    policy_path: Path
    lineage: dict[str, Any]

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.run_dir / "tensorboard"

    def record(self) -> RunRecord:
        lineage = {"policy": str(self.policy_path), "run_dir": str(self.run_dir), **self.lineage}
        return RunRecord.for_config(self.config, self.run_id, "train", lineage)


@dataclass(frozen=True)
class RunSpec(_RunPaths):
    """A run without its task: id, resolved config, directory, base policy and lineage. Loading one imports
    neither torch nor a dataset (what an orchestrator that trains elsewhere needs)."""

    run_id: str
    config: RunConfig
    run_dir: Path
    policy_path: Path
    lineage: dict[str, Any] = field(default_factory=dict)
    planned_steps: int | None = None


@dataclass(frozen=True)
class TrainingRun(_RunPaths):
    """A run where it trains: its spec's fields and its task (prompts, eval sets)."""

    run_id: str
    config: RunConfig
    run_dir: Path
    policy_path: Path
    task: TaskData
    lineage: dict[str, Any] = field(default_factory=dict)
    planned_steps: int | None = None  # the run's total as its command asked (train --steps); None: not recorded


def prepare_run(
    config: RunConfig,
    out_dir: str | Path,
    run_name: str | None = None,
    policy_path: str | Path | None = None,
    cache_dir: str | Path | None = None,
    progress: Callable[[int, float], None] | None = None,
    task: TaskData | None = None,
) -> TrainingRun:
    """A :class:`TrainingRun` for ``config`` in ``<out_dir>/<run_name>``.

    Without ``task``: the embedded task's data and base policy (built and cached on first use unless
    ``policy_path`` names an HF model directory). With ``task`` (a real dataset prepared by the Dagster data
    assets, see :func:`pc_pipelines.data.prepared_task.load_prepared_task`): that task and the HF model at
    ``policy_path``."""
    import torch

    from ..data.task import embedded_task

    template = config.training.prompt_template
    # The CPU kernels PyTorch picked (AVX512 / AVX2 / DEFAULT; ATEN_CPU_CAPABILITY overrides): float results differ
    # between them, so a run says which it used (the benchmark's reproducibility row compares two).
    lineage: dict[str, Any] = {"cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if task is None:
        if config.task is None:
            raise RunError(
                f"preset {config.preset!r} has no embedded task section: without a prepared dataset the local loop "
                "trains the embedded task only (real datasets come through the Dagster data assets and the start_run "
                "job's `dataset`). Fix: use --preset embedded."
            )
        task = embedded_task(config.task, template)
    elif policy_path is None:
        raise RunError("a run on a prepared dataset needs policy_path: a local Hugging Face causal LM directory.")
    if policy_path is None:
        from ..training.base_policy import ensure_base_policy, read_meta  # torch: only when a warm start is needed

        if config.policy is None:
            raise RunError("no policy given and the preset has no policy section. Fix: pass --policy DIR.")
        policy_path = ensure_base_policy(config.task, config.policy, template, cache_dir=cache_dir, progress=progress)
        lineage["base_policy_recipe"] = read_meta(policy_path).get("recipe_hash")
    run_id = run_name or config.default_run_id()
    return TrainingRun(
        run_id=run_id,
        config=config,
        run_dir=run_dir_of(out_dir, run_id),
        policy_path=Path(policy_path).resolve(),
        task=task,
        lineage=lineage,
    )


def task_for(dataset: str, config: RunConfig, data_dir: str | Path) -> TaskData | None:
    """The task of a run on ``dataset``, a training dataset of the registry (:mod:`pc_pipelines.data.registry`):
    None for the embedded task (:func:`prepare_run` builds it), else what its spec loads (the prepared dataset under
    ``data_dir``). Raises :class:`RunError` saying how to fix a missing one."""
    from ..data.readers import DatasetError
    from ..data.registry import TRAINING, dataset_names, load_task

    names = dataset_names(TRAINING)
    if dataset not in names:
        raise RunError(f"dataset {dataset!r} is not one of {names}. Fix: start the run with one of them.")
    try:
        return load_task(dataset, config, data_dir)
    except DatasetError as exc:
        raise RunError(str(exc)) from exc


def load_run_spec(run: dict[str, Any], runs_root: str | Path) -> RunSpec:
    """The :class:`RunSpec` of a store ``runs`` row registered by ``start_run``: its stored config and lineage, its
    base policy (lineage ``policy``), its directory ``<runs_root>/<run_id>``. Imports neither torch nor a dataset."""
    cfg = from_dict(json.loads(run["config_json"]))
    lineage = json.loads(run["lineage_json"] or "{}")
    if "policy" not in lineage:
        raise RunError(f"run {run['run_id']!r} has no base policy in its lineage. Fix: start it with the start_run job.")
    return RunSpec(run_id=run["run_id"], config=cfg, run_dir=run_dir_of(runs_root, run["run_id"]),
                   policy_path=Path(lineage["policy"]).resolve(), lineage=lineage)


def with_task(spec: RunSpec, data_dir: str | Path) -> TrainingRun:
    """``spec`` with its task: the prepared dataset its lineage names under ``data_dir`` (:func:`task_for`), or the
    embedded task built from its config. Where the run trains (this loads the data)."""
    from ..data.registry import EMBEDDED

    task = task_for(spec.lineage.get("dataset", EMBEDDED), spec.config, data_dir)
    if task is None:
        from ..data.task import embedded_task

        if spec.config.task is None:
            raise RunError(f"run {spec.run_id!r} has no dataset in its lineage and its config no embedded task "
                           "section. Fix: start it with the start_run job (its `dataset`).")
        task = embedded_task(spec.config.task, spec.config.training.prompt_template)
    return TrainingRun(run_id=spec.run_id, config=spec.config, run_dir=spec.run_dir, policy_path=spec.policy_path,
                       task=task, lineage=spec.lineage, planned_steps=spec.planned_steps)


def load_training_run(run: dict[str, Any], runs_root: str | Path, data_dir: str | Path) -> TrainingRun:
    """The :class:`TrainingRun` of a store ``runs`` row registered by ``start_run``: :func:`load_run_spec` and
    :func:`with_task`."""
    return with_task(load_run_spec(run, runs_root), data_dir)
