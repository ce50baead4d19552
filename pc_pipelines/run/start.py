"""Starting a training run: the one way both entry points take (``pilot-commit train`` and the ``start_run`` job).

:func:`check_trainable` refuses, before any work, what no training run can do: a method or strategy name its
registry does not know, or a method that only runs in the simulator (the oracle). :func:`start_training_run` then
checks the run's id (:func:`~pc_pipelines.store.names.run_id_for`) and builds its spec (:func:`~.training_run.prepare_run`:
the task, and the embedded warm start, built on first use). Each entry point keeps only what is its own: the CLI its
flags and its resume / overwrite choice, the Dagster job its segment plan and partitions. Nothing here writes the
store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..allocation import check_config, training_methods
from ..config import RunConfig
from ..data.task import TaskData
from ..errors import ConfigError
from ..store.names import RunIdError, run_id_for
from .training_run import TrainingRun, prepare_run


def check_trainable(cfg: RunConfig) -> None:
    """The config's method and strategy names against their registries, and its method a training method;
    :class:`~pc_pipelines.errors.ConfigError` naming the setting and the fix otherwise."""
    check_config(cfg.allocator)
    if cfg.method not in training_methods():
        raise ConfigError(f"method {cfg.method} is simulator-only. Fix: real training runs one of "
                          f"{', '.join(training_methods())}.")


def start_training_run(cfg: RunConfig, out_dir: str | Path, run_name: str | None = None, *,
              policy_path: str | Path | None = None, cache_dir: str | Path | None = None,
              progress: Callable[[int, float], None] | None = None, task: TaskData | None = None,
              run_name_field: str = "--run-name", before_prepare: Callable[[], object] | None = None,
              config_checked: bool = False) -> TrainingRun:
    """The spec of a new (or resumed) training run of ``cfg`` in ``<out_dir>/<run id>``, after
    :func:`check_trainable` and the run id's check (both before the warm start is built): the one place a training
    run's config and id are checked. ``before_prepare`` is called once they pass, before the spec is built (the CLI
    silences transformers' own progress bars there). ``config_checked``: the caller ran :func:`check_trainable` on
    this ``cfg`` in this process already (the ``start_run`` job's ``check_start_run``); a ``run_name`` it checked
    (a :class:`~pc_pipelines.store.names.RunId`) is taken as it is."""
    if not config_checked:
        check_trainable(cfg)
    try:
        run_id = run_id_for(cfg.default_run_id(), run_name, run_name_field)
    except RunIdError as exc:
        raise ConfigError(str(exc)) from None
    if before_prepare is not None:
        before_prepare()
    return prepare_run(cfg, out_dir, run_name=run_id, policy_path=policy_path, cache_dir=cache_dir,
                       progress=progress, task=task)
