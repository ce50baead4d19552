"""The code location's jobs: ``start_run`` registers a training run (its config, its segment plan in the store, one
partition per segment) and ``train_segment`` trains and evaluates one segment (the ``advance_runs`` sensor launches
it, one partition at a time)."""

from dataclasses import replace
from typing import Literal

from dagster import Config, Failure, OpExecutionContext, define_asset_job, job, op
from pydantic import Field

from pc_pipelines.allocation import training_methods
from pc_pipelines.config import parse_overrides, resolve
from pc_pipelines.data.registry import EMBEDDED, TRAINING, auto_dataset, dataset_names, datasets, or_list
from pc_pipelines.errors import ConfigError, RunError
from pc_pipelines.run import task_for
from pc_pipelines.run.segments import SegmentPlan, partition_key
from pc_pipelines.run.start import check_trainable, start_training_run
from pc_pipelines.store.names import RUN_ID_RULE, RunIdError, run_id_for
from resources import CheckpointResource, DataResource, StoreResource

from .evaluation import segment_eval
from .training import SEGMENTS, training_segment


def dataset_choices() -> tuple[str, ...]:
    """start_run's ``dataset`` values: ``auto`` and the registry's training datasets (read when a run starts)."""
    return ("auto", *dataset_names(TRAINING))


def _dataset_help() -> str:
    real = [d.name for d in datasets(TRAINING) if d.name != EMBEDDED]
    return (f"Training data: {EMBEDDED} (the synthetic task), {or_list(real)} (prepared by their data assets; evaluated "
            "on the held-out split and the prepared benchmarks; needs policy_path), or auto: embedded when the preset "
            f"has a task section, else {auto_dataset(False)}.")


# ---- start_run ----------------------------------------------------------------------------------------------------
class StartRunConfig(Config):
    method: Literal[tuple(training_methods())] = Field(  # type: ignore[valid-type]
        description=f"Allocation method, one of the registered training methods: {', '.join(training_methods())}."
    )
    preset: str = Field(default="embedded", description="Versioned preset file (`pilot-commit presets`).")
    overrides: list[str] = Field(
        default_factory=list, description="--set style overrides, e.g. allocator.n_pilot=8 or training.lr=2e-4."
    )
    seed: int = Field(default=0, ge=0, description="Fixes data order, sampling and init.")
    family: str | None = Field(default=None, description="Groups runs compared in one report (default: the preset's).")
    segment_steps: int = Field(default=10, ge=1, le=100_000, description="Training steps per segment (partition).")
    total_steps: int = Field(default=50, ge=1, le=10_000_000, description="Training steps of the whole run.")
    run_name: str | None = Field(
        default=None, description=f"Run id (default: <family>-<method>-s<seed>-<config hash>); {RUN_ID_RULE}."
    )
    policy_path: str | None = Field(
        default=None, description="An HF causal LM directory to start from (default: the embedded SFT warm start)."
    )
    cache_dir: str | None = Field(default=None, description="Warm-start cache (default ~/.cache/pc-pipelines).")
    dataset: str = Field(default="auto", description=_dataset_help())


def _task_for(dataset: str, cfg, data: DataResource):
    """None for the embedded task (prepare_run builds it), else the prepared dataset's task."""
    try:
        return task_for(dataset, cfg, data.out_dir)
    except RunError as exc:
        raise Failure(str(exc)) from exc


@op(tags={"kind": "duckdb"})
def register_training_run(
    context: OpExecutionContext,
    config: StartRunConfig,
    store: StoreResource,
    checkpoints: CheckpointResource,
    data: DataResource,
) -> str:
    """Resolve the run's config, register it and its segment plan in the store, add its partitions."""
    try:
        overrides = parse_overrides(config.overrides)
        if overrides.get("training.keep_every", config.segment_steps) != config.segment_steps:
            raise ConfigError(
                f"overrides: training.keep_every={overrides['training.keep_every']!r} would be ignored: a segmented "
                f"run keeps every segment boundary (keep_every = segment_steps = {config.segment_steps}). Fix: drop "
                "the override, or change segment_steps."
            )
        overrides["training.keep_every"] = config.segment_steps
        cfg = resolve(config.preset, overrides, method=config.method, seed=config.seed, family=config.family)
        # Before the warm start: a bad name fails in a second, naming the field (start_run checks both again).
        check_trainable(cfg)
        run_id_for(cfg.default_run_id(), config.run_name, field="start_run config run_name")
    except (ConfigError, RunIdError) as exc:  # the message names the setting and the fix: no traceback
        raise Failure(f"configuration error: {exc}", allow_retries=False) from None
    plan = SegmentPlan(config.segment_steps, config.total_steps)
    choices = dataset_choices()
    if config.dataset not in choices:
        raise Failure(f"dataset {config.dataset!r} is not one of {choices}. Fix: pick one of them.")
    dataset = config.dataset if config.dataset != "auto" else auto_dataset(cfg.task is not None)
    try:
        run = start_training_run(
            cfg, checkpoints.runs_root(), config.run_name, policy_path=config.policy_path, cache_dir=config.cache_dir,
            progress=lambda s, loss: s % 200 == 0 and context.log.info("warm start SFT step %d loss %.4f", s, loss),
            task=_task_for(dataset, cfg, data), run_name_field="start_run config run_name",
        )
    except (RunError, ConfigError) as exc:
        raise Failure(str(exc)) from exc
    run = replace(run, run_dir=checkpoints.run_dir(run.run_id), lineage={
        **run.lineage, "preset": config.preset, "overrides": config.overrides, "segment_steps": plan.segment_steps,
        "total_steps": plan.total_steps, "dataset": dataset, "started_by": context.run_id,
    })
    st = store.get()
    st.register_run(run.record())
    st.plan_segments(run.run_id, plan.all_bounds())
    keys = [partition_key(run.run_id, k) for k in range(plan.num_segments)]
    context.instance.add_dynamic_partitions(SEGMENTS.name, keys)
    context.log.info("run %s: %d segments of %d steps registered (%s .. %s)", run.run_id, plan.num_segments,
                     plan.segment_steps, keys[0], keys[-1])
    return run.run_id


@job(description="Register a training run in the store and add its segment partitions; the sensor trains them.")
def start_run():
    register_training_run()


# ---- train_segment -------------------------------------------------------------------------------------------------
train_segment_job = define_asset_job(
    "train_segment",
    selection=[training_segment, segment_eval],
    description="Train one segment and evaluate its final checkpoint (launched by the advance_runs sensor).",
)
