"""Training runs in Dagster: the ``start_run`` job, the ``training_segment`` and ``segment_eval`` assets
partitioned by ``<run>/seg-NNNN``, and the sensor that advances runs segment by segment.

Thin: the segment arithmetic and the sensor's decisions live in :mod:`pc_pipelines.segments`, the training in
:func:`pc_pipelines.run.run_segment` (through the compute resource), the evaluation in
:func:`pc_pipelines.run.evaluate_checkpoint`. The store's ``segments`` table is the run's plan and each segment's last outcome;
Dagster's partitions mirror it. Partitions added by hand in the UI carry no config, so the assets refuse any key
the store has no plan for.
"""


import logging
from dataclasses import replace
from typing import Literal

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    Config,
    DagsterRunStatus,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    Failure,
    MaterializeResult,
    MetadataValue,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset,
    define_asset_job,
    job,
    op,
    sensor,
)
from pydantic import Field

from pc_pipelines.allocation import check_config, training_methods
from pc_pipelines.config import parse_overrides, resolve
from pc_pipelines.errors import ConfigError, RunError
from pc_pipelines.run import (
    StepRecord,
    TrainingRun,
    checkpoint_at,
    list_checkpoints,
    load_training_run,
    prepare_run,
    task_for,
    verify_checkpoint,
)
from pc_pipelines.segments import (
    Action,
    RunView,
    SegmentError,
    SegmentPlan,
    SegmentView,
    decide,
    parse_partition_key,
    partition_key,
    resume_step,
)
from pc_pipelines.store import Store, StoreError
from pc_pipelines.store.names import RUN_ID_RULE, RunIdError, validate_run_id
from resources import CheckpointResource, ComputeResource, DataResource, RolloutEngineResource, StoreResource

from .data import benchmarks, deepmath, polaris
from .embedded import arith_task, base_policy

log = logging.getLogger(__name__)

SEGMENTS = DynamicPartitionsDefinition(name="training_segments")
DATASETS = ("auto", "embedded", "deepmath", "polaris")
RUN_TAG = "pc/run"  # one training segment in flight per run: the run queue limits this tag per unique value


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
    dataset: str = Field(
        default="auto",
        description="Training data: embedded (the synthetic task), deepmath or polaris (prepared by their data assets; "
        "evaluated on the held-out split and the prepared benchmarks; needs policy_path), or auto: embedded when the "
        "preset has a task section, else deepmath.",
    )


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
    overrides = parse_overrides(config.overrides)
    if overrides.get("training.keep_every", config.segment_steps) != config.segment_steps:
        raise Failure(
            f"overrides: training.keep_every={overrides['training.keep_every']!r} would be ignored: a segmented run "
            f"keeps every segment boundary (keep_every = segment_steps = {config.segment_steps}). Fix: drop the "
            "override, or change segment_steps."
        )
    overrides["training.keep_every"] = config.segment_steps
    try:
        cfg = resolve(config.preset, overrides, method=config.method, seed=config.seed, family=config.family)
        check_config(cfg.allocator)  # the strategy names against their registries, before the warm start
    except ConfigError as exc:  # the message names the setting and the fix: no traceback
        raise Failure(f"configuration error: {exc}", allow_retries=False) from None
    try:  # before the warm start: a bad name fails in a second, naming the field (the store checks it again)
        validate_run_id(config.run_name if config.run_name is not None else cfg.default_run_id(),
                        field="start_run config run_name" if config.run_name is not None
                        else "default run id (from start_run config family)")
    except RunIdError as exc:
        raise Failure(str(exc)) from None
    plan = SegmentPlan(config.segment_steps, config.total_steps)
    if config.dataset not in DATASETS:
        raise Failure(f"dataset {config.dataset!r} is not one of {DATASETS}. Fix: pick one of them.")
    dataset = config.dataset if config.dataset != "auto" else ("embedded" if cfg.task is not None else "deepmath")
    try:
        run = prepare_run(
            cfg, checkpoints.runs_root(), config.run_name, policy_path=config.policy_path, cache_dir=config.cache_dir,
            progress=lambda s, loss: s % 200 == 0 and context.log.info("warm start SFT step %d loss %.4f", s, loss),
            task=_task_for(dataset, cfg, data),
        )
    except RunError as exc:
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


# ---- loading a run back from the store ----------------------------------------------------------------------------
def _segment_row(st: Store, key: str) -> tuple[str, int, dict, dict]:
    try:
        run_id, k = parse_partition_key(key)
    except SegmentError as exc:
        raise Failure(str(exc)) from exc
    run = st.get_run(run_id)
    rows = {r["segment"]: r for r in st.segments(run_id)} if run else {}
    if k not in rows:
        raise Failure(
            f"partition {key!r} has no training run behind it: {'no run ' + repr(run_id) if not run else 'no segment ' + str(k)}"
            " in the store. Partitions added by hand in the UI carry no config. Fix: launch the `start_run` job "
            "(method, preset, overrides, seed, segment_steps, total_steps); it registers the run and adds its partitions."
        )
    return run_id, k, run, rows[k]


def _training_run(run: dict, checkpoints: CheckpointResource, data: DataResource) -> TrainingRun:
    try:
        tr = load_training_run(run, checkpoints.runs_root(), data.out_dir)
    except RunError as exc:
        raise Failure(str(exc)) from exc
    return replace(tr, run_dir=checkpoints.run_dir(tr.run_id))


def _log_step(context: AssetExecutionContext):
    def on_step(rec: StepRecord) -> None:
        led = rec.ledger
        msg = (f"step {rec.step}: rollouts {led['sampled_rollouts']} (cumulative {rec.cumulative_rollouts:,}), "
               f"reward std {rec.reward_std:.3f}, informative {led['informative_share']:.2f}, "
               f"loss {rec.loss if rec.loss is None else round(rec.loss, 4)}, rounds {led['rounds']}")
        if rec.eval_accuracy is not None:
            msg += f", held-out accuracy {rec.eval_accuracy:.3f}"
        context.log.info(msg)
    return on_step


# ---- training_segment ------------------------------------------------------------------------------------------
@asset(
    group_name="training",
    partitions_def=SEGMENTS,
    deps=[base_policy, arith_task, deepmath, polaris],
    kinds={"pytorch", "duckdb"},
)
def training_segment(
    context: AssetExecutionContext,
    store: StoreResource,
    checkpoints: CheckpointResource,
    compute: ComputeResource,
    engine: RolloutEngineResource,
    data: DataResource,
) -> MaterializeResult:
    """Train one segment of a run from the previous segment's checkpoint; its steps go to the store."""
    st = store.get()
    run_id, k, run, seg = _segment_row(st, context.partition_key)
    first, last = int(seg["first_step"]), int(seg["last_step"])
    tr = _training_run(run, checkpoints, data)
    have = [s for s, _ in list_checkpoints(tr.checkpoint_dir)]
    try:
        start = resume_step(first, last, have, done=seg["status"] == "done")
    except SegmentError as exc:
        raise Failure(f"{context.partition_key}: {exc} ({partition_key(run_id, k - 1)})") from exc
    context.log.info("%s: steps %d..%d from %s", context.partition_key, first, last,
                     "the base policy" if start < 0 else f"the checkpoint after step {start}")
    st.segment_started(run_id, k, context.run.run_id)
    try:
        result = compute.run_segment(tr, st, from_step=start, until_step=last, on_step=_log_step(context),
                                     engine_factory=engine.build, context=context)
    except BaseException as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        st.segment_failed(run_id, k, reason[:2000])
        if isinstance(exc, (RunError, StoreError)):  # refused (another writer, no intact checkpoint): say why
            raise Failure(f"{context.partition_key}: {exc}") from exc
        raise
    st.segment_done(run_id, k, result.cumulative_rollouts, result.last_eval_accuracy, result.mean_reward_std)
    if all(r["status"] == "done" for r in st.segments(run_id)):
        st.set_status(run_id, "finished")
    steps = st.query(
        "SELECT step, sampled_rollouts, mean_reward_std, informative_share FROM steps WHERE run_id = ? "
        "AND step BETWEEN ? AND ? ORDER BY step", [run_id, first, last])
    metadata = {
        "run_id": run_id,
        "method": tr.config.method,
        "steps": f"{first}..{last}",
        "steps_run": result.steps_run,
        "resumed_from_step": start,
        "cumulative_rollouts": result.cumulative_rollouts,
        "segment_rollouts": int(sum(r["sampled_rollouts"] for r in steps)),
        "eval_accuracy": MetadataValue.float(result.last_eval_accuracy) if result.last_eval_accuracy is not None
        else MetadataValue.text("no evaluation in this segment"),
        "mean_reward_std": MetadataValue.float(result.mean_reward_std or 0.0),
        "informative_share": MetadataValue.float(
            sum(r["informative_share"] for r in steps) / len(steps) if steps else 0.0),
        "checkpoint": MetadataValue.path(str(result.checkpoint)),
        "tensorboard": MetadataValue.path(str(result.tensorboard_dir)),
    }
    # A segment launched outside this process (Pipes) adds what it reported: per-step rows, its own summary.
    metadata.update({k if k not in metadata else f"reported/{k}": v for k, v in result.reported.items()})
    return MaterializeResult(metadata=metadata)


# ---- segment_eval ---------------------------------------------------------------------------------------------------
@asset(
    group_name="evaluation",
    partitions_def=SEGMENTS,
    deps=[training_segment, arith_task, deepmath, polaris, benchmarks],
    kinds={"duckdb"},
)
def segment_eval(
    context: AssetExecutionContext,
    store: StoreResource,
    checkpoints: CheckpointResource,
    engine: RolloutEngineResource,
    compute: ComputeResource,
    data: DataResource,
) -> MaterializeResult:
    """Mean@k accuracy of the segment's final checkpoint on the run's benchmarks, into the store's
    ``eval_results``: for the embedded default its held-out split per digit length; for a real dataset its
    500-prompt held-out split and the six benchmarks the ``benchmarks`` asset prepared. It runs where the segments
    run (the compute resource: in process, or ``pilot-commit eval-segment`` in a GPU pod)."""
    st = store.get()
    run_id, k, run, seg = _segment_row(st, context.partition_key)
    last = int(seg["last_step"])
    tr = _training_run(run, checkpoints, data)
    path = checkpoint_at(tr.checkpoint_dir, last)
    if path is None:
        raise Failure(
            f"{context.partition_key}: no checkpoint after step {last} in {tr.checkpoint_dir}. Fix: materialize "
            f"training_segment for {context.partition_key} first."
        )
    problem = verify_checkpoint(path)
    if problem is not None:
        raise Failure(
            f"{context.partition_key}: the checkpoint after step {last} ({path}) is damaged: {problem}. Fix: "
            f"re-materialize training_segment for {context.partition_key} (it replays from the newest intact "
            "checkpoint), then this evaluation."
        )
    try:
        res = compute.evaluate(tr, st, last, engine_factory=engine.build, context=context)
    except RunError as exc:
        raise Failure(str(exc)) from exc
    st.add_eval_results(res.rows(run_id, last))
    rows = ["| benchmark | prompts | k | mean@k |", "|---|---|---|---|"]
    rows += [f"| {name} | {res.n_prompts[name]} | {res.k_of(name)} | {acc:.3f} |" for name, acc in res.accuracy.items()]
    rows.append(f"| **average** | {sum(res.n_prompts.values())} | | **{res.mean:.3f}** |")
    context.log.info("%s: average accuracy %.3f after step %d", context.partition_key, res.mean, last)
    return MaterializeResult(
        metadata={
            "run_id": run_id,
            "step": last,
            "average_accuracy": MetadataValue.float(res.mean),
            "accuracy": MetadataValue.md("\n".join(rows)),
            "k": res.k,
            "temperature": res.temperature,
            "checkpoint": MetadataValue.path(str(path)),
            "compute": type(compute).__name__,
        }
    )


train_segment_job = define_asset_job(
    "train_segment",
    selection=[training_segment, segment_eval],
    description="Train one segment and evaluate its final checkpoint (launched by the advance_runs sensor).",
)


# ---- the sensor -----------------------------------------------------------------------------------------------------
_FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
# Dagster's own in-progress run statuses (its private IN_PROGRESS_RUN_STATUSES), from the public enum.
_IN_PROGRESS = (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING,
                DagsterRunStatus.SUSPENDED)


def run_views(st: Store, instance) -> list[RunView]:
    """Each planned run as the sensor sees it. A segment the store says is running whose orchestrator run ended
    (killed worker, cancelled run) is recorded as failed first, so it counts towards the pause limit."""
    views = []
    by_run: dict[str, list[dict]] = {}
    for row in st.segments():
        by_run.setdefault(row["run_id"], []).append(row)
    for run_id, rows in by_run.items():
        run = st.get_run(run_id)
        in_flight = bool(instance.get_run_records(
            filters=RunsFilter(tags={RUN_TAG: run_id}, statuses=list(_IN_PROGRESS)), limit=1))
        for r in rows:
            if r["status"] == "running" and not in_flight and r["orchestrator_run_id"]:
                dr = instance.get_run_by_id(r["orchestrator_run_id"])
                if dr is not None and dr.status in _IN_PROGRESS:
                    in_flight = True  # launched by hand (no run tag) and still going
                elif dr is None or dr.status in _FAILED or dr.status == DagsterRunStatus.SUCCESS:
                    why = "its run was deleted" if dr is None else f"its run {dr.run_id} ended {dr.status.value}"
                    st.segment_failed(run_id, r["segment"], f"segment did not record a result: {why}")
                    r.update(status="failed", consecutive_failures=r["consecutive_failures"] + 1,
                             error=f"segment did not record a result: {why}")
        segs = tuple(SegmentView(r["segment"], r["status"], r["attempts"], r["consecutive_failures"], r["error"])
                     for r in rows)
        views.append(RunView(run_id, run["status"] if run else "failed", segs, in_flight))
    return views


def build_advance_runs_sensor(max_failures: int = 3, interval_s: int = 30, default_running: bool = True):
    """The sensor advancing every active run by one segment at a time; pauses a run after ``max_failures``
    consecutive failures of its next segment (the reason goes to the store and the UI)."""

    @sensor(
        name="advance_runs",
        job=train_segment_job,
        minimum_interval_seconds=interval_s,
        default_status=DefaultSensorStatus.RUNNING if default_running else DefaultSensorStatus.STOPPED,
        description=f"Requests each active run's next training segment; pauses a run after {max_failures} "
                    "consecutive failures.",
    )
    def advance_runs(context: SensorEvaluationContext, store: StoreResource):
        st = store.get(vacuum=False)
        requests, events, notes = [], [], []
        for view in run_views(st, context.instance):
            d = decide(view, max_failures)
            notes.append(f"{d.run_id}: {d.action.value} ({d.reason})")
            if d.action is Action.REQUEST:
                requests.append(RunRequest(run_key=d.run_key, partition_key=d.partition_key,
                                           tags={RUN_TAG: d.run_id}))
            elif d.action is Action.PAUSE:
                st.set_status(d.run_id, "paused", d.reason)
                context.log.warning("paused run %s: %s", d.run_id, d.reason)
                events.append(AssetObservation(asset_key=training_segment.key, partition=d.partition_key,
                                               metadata={"paused": d.reason}))
            elif d.action is Action.FINISH:
                st.set_status(d.run_id, "finished")
        for n in notes:
            context.log.info(n)
        if requests or events:
            return SensorResult(run_requests=requests, asset_events=events)
        return SkipReason("; ".join(notes) or "no training runs: launch the start_run job")

    return advance_runs
