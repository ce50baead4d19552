"""A training run's spec: its id, resolved config, directory, base policy and task (:class:`TrainingRun`).

:func:`prepare_run` makes one from a config (the embedded task and warm start, or a prepared dataset and a given
policy); :func:`load_training_run` reads back one the ``start_run`` job registered in the store (what the Dagster
assets and the in-pod entrypoint do). Building a spec changes nothing on disk but the embedded warm start's cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import RunConfig, from_dict
from ..data.task import TaskData
from ..errors import RunError
from ..store import RunRecord

SAMPLING_PLAN = "sampling_plan.json"
"""The file in a run's directory that records the engine settings its rollouts were drawn with (the run's
``sampling_plan``, kept from start to end: :func:`~.local.keep_sampling_plan`)."""

@dataclass(frozen=True)
class TrainingRun:
    """A training run: its id, resolved config, directory (checkpoints, TensorBoard) and base policy."""

    run_id: str
    config: RunConfig
    run_dir: Path
    policy_path: Path
    task: TaskData
    lineage: dict[str, Any] = field(default_factory=dict)
    planned_steps: int | None = None  # the run's total as its command asked (train --steps); None: not recorded

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def tensorboard_dir(self) -> Path:
        return self.run_dir / "tensorboard"

    def record(self) -> RunRecord:
        lineage = {"policy": str(self.policy_path), "run_dir": str(self.run_dir), **self.lineage}
        return RunRecord.for_config(self.config, self.run_id, "train", lineage)


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
    assets, see :func:`pc_pipelines.data.prepared.load_prepared_task`): that task and the HF model at
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
        run_dir=Path(out_dir).resolve() / run_id,
        policy_path=Path(policy_path).resolve(),
        task=task,
        lineage=lineage,
    )


def task_for(dataset: str, config: RunConfig, data_dir: str | Path) -> TaskData | None:
    """The task of a run on ``dataset``, a training dataset of the registry (:mod:`pc_pipelines.data.registry`):
    None for the embedded task (:func:`prepare_run` builds it), else what its spec loads (the prepared dataset under
    ``data_dir``). Raises :class:`RunError` saying how to fix a missing one."""
    from ..data.datasets import DatasetError
    from ..data.registry import TRAINING, dataset_names, load_task

    names = dataset_names(TRAINING)
    if dataset not in names:
        raise RunError(f"dataset {dataset!r} is not one of {names}. Fix: start the run with one of them.")
    try:
        return load_task(dataset, config, data_dir)
    except DatasetError as exc:
        raise RunError(str(exc)) from exc


def load_training_run(run: dict[str, Any], runs_root: str | Path, data_dir: str | Path) -> TrainingRun:
    """The :class:`TrainingRun` of a store ``runs`` row registered by ``start_run``: its stored config, its base
    policy (lineage ``policy``), its task, and its directory ``<runs_root>/<run_id>``."""
    from ..data.registry import EMBEDDED

    cfg = from_dict(json.loads(run["config_json"]))
    lineage = json.loads(run["lineage_json"] or "{}")
    if "policy" not in lineage:
        raise RunError(f"run {run['run_id']!r} has no base policy in its lineage. Fix: start it with the start_run job.")
    root = Path(runs_root)
    tr = prepare_run(cfg, root, run["run_id"], policy_path=lineage["policy"],
                     task=task_for(lineage.get("dataset", EMBEDDED), cfg, data_dir))
    return replace(tr, run_dir=root.resolve() / tr.run_id, lineage=lineage)
