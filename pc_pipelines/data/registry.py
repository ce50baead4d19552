"""The datasets a run can train on or be evaluated with: one registry, as the allocation methods and the rollout
engines have theirs.

Each dataset is registered once, here, by its :class:`~.spec.DatasetSpec` (defined in its own module, next to the
code that loads and prepares it)::

    DATASETS: {name: DatasetSpec}                       register_dataset(spec) / unregister_dataset(name)
    get_dataset(name, role=None) -> DatasetSpec         ValueError naming the registered datasets
    dataset_names(role=None) / datasets(role=None)      registration order; role TRAINING or EVAL
    auto_dataset(has_task) -> str                       start_run's ``auto``: EMBEDDED, else DEFAULT_REAL_DATASET
    load_task(name, run_config, data_dir) -> TaskData | None   how a run gets its task

Readers: the run layer (``task_for``: which names a run may train on and how its task is loaded), the Dagster code
location (one asset, config and set of checks per generic dataset, built by ``pc_pipelines_dagster/assets/data.py``; the
``DataResource`` path settings and their ``PC_<NAME>_PATH`` variables; the ``training_segment`` and ``segment_eval``
deps; ``start_run``'s ``dataset`` choices) and ``--data-dir``'s help.

Adding a dataset: its module (``data/<name>.py``: ``load``, ``prepare`` with :func:`~.prepare.prepare_rows`, and its
``DatasetSpec``) and one line in :data:`_REGISTERED` below. docs/ARCHITECTURE.md, "How to add ...", shows one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import RunError
from .deepmath import DEEPMATH_DATASET
from .evaluation_sets import BENCHMARKS_DATASET
from .polaris import POLARIS_DATASET
from .prepared_task import load_prepared_task
from .spec import EVAL, ROLES, TRAINING, DatasetSpec
from .task import TaskData

EMBEDDED = "embedded"
"""The embedded default's synthetic addition task: built from the preset's ``task`` section by the run itself."""
DEFAULT_REAL_DATASET = "deepmath"
"""What start_run's ``dataset: auto`` trains on when the preset has no embedded task."""

DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Make ``spec`` a dataset runs and the code location know by its name; a name is registered once."""
    if spec.name in DATASETS and DATASETS[spec.name] is not spec:
        raise ValueError(f"dataset {spec.name!r} is already registered; unregister_dataset it first.")
    DATASETS[spec.name] = spec
    return spec


def unregister_dataset(name: str) -> DatasetSpec | None:
    """Remove a dataset (tests that register one for a while); returns its spec, None if it was not registered."""
    return DATASETS.pop(name, None)


def datasets(role: str | None = None) -> tuple[DatasetSpec, ...]:
    """The registered datasets in registration order (``role``: only those of that role)."""
    if role is not None and role not in ROLES:
        raise ValueError(f"role={role!r}: use one of {ROLES}.")
    return tuple(s for s in DATASETS.values() if role is None or s.role == role)


def dataset_names(role: str | None = None) -> tuple[str, ...]:
    return tuple(s.name for s in datasets(role))


def get_dataset(name: str, role: str | None = None) -> DatasetSpec:
    spec = DATASETS.get(name)
    if spec is None or (role is not None and spec.role != role):
        raise ValueError(f"dataset {name!r} is not one of {dataset_names(role)}.")
    return spec


def or_list(names: tuple[str, ...] | list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def auto_dataset(has_task: bool) -> str:
    """start_run's ``dataset: auto``: the embedded task when the preset has a task section, else the default real
    dataset."""
    return EMBEDDED if has_task else DEFAULT_REAL_DATASET


def load_task(name: str, config: Any, data_dir: str | Path) -> TaskData | None:
    """The task of a run on training dataset ``name`` (``config``: its :class:`~pc_pipelines.config.RunConfig`): its
    spec's ``task``, or the prepared files under ``data_dir``. None: the run builds it (the embedded task). Raises
    :class:`~.readers.DatasetError` (files) or :class:`~pc_pipelines.errors.RunError` (settings) with the fix."""
    spec = get_dataset(name, TRAINING)
    if spec.task is not None:
        return spec.task(config, Path(data_dir))
    return load_prepared_task(data_dir, spec.name, config.training.prompt_template)


def _embedded_task(config: Any, data_dir: Path) -> None:
    if config.task is None:
        real = tuple(n for n in dataset_names(TRAINING) if n != EMBEDDED)
        raise RunError(f"preset {config.preset!r} has no embedded task section. Fix: use dataset {or_list(real)} (with "
                       "policy_path), or the embedded preset.")
    return None  # prepare_run builds it from config.task (with the warm start)


EMBEDDED_DATASET = DatasetSpec(
    EMBEDDED, "the embedded addition task",
    "Zero-padded addition: the RL pool, the held-out split (per digit length) and the SFT set, as Parquet.",
    asset="arith_task", location="arith", task=_embedded_task,
)

# ---- the datasets: one line each ----------------------------------------------------------------------------------
_REGISTERED = (
    EMBEDDED_DATASET,
    DEEPMATH_DATASET,
    POLARIS_DATASET,
    BENCHMARKS_DATASET,
)
for _spec in _REGISTERED:
    register_dataset(_spec)

__all__ = [
    "DATASETS",
    "DEFAULT_REAL_DATASET",
    "EMBEDDED",
    "EVAL",
    "TRAINING",
    "DatasetSpec",
    "auto_dataset",
    "dataset_names",
    "datasets",
    "get_dataset",
    "load_task",
    "or_list",
    "register_dataset",
    "unregister_dataset",
]
