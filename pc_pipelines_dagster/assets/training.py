"""The ``training`` asset group: ``training_segment``, one segment of a training run per partition
(``<run>/seg-NNNN``), trained from the previous segment's checkpoint through the compute resource.

Thin: the segment arithmetic lives in :mod:`pc_pipelines.run.segments`, the training in
:func:`pc_pipelines.run.run_segment` (in process, or a launched process through the compute resource). The store's
``segments`` table is the run's plan and each segment's last outcome; Dagster's partitions mirror it. Partitions
added by hand in the UI carry no config, so the assets refuse any key the store has no plan for.
"""

import base64
import time

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetSpec,
    DynamicPartitionsDefinition,
    Failure,
    IntMetadataValue,
    MaterializeResult,
    MetadataValue,
    asset,
)

from pc_pipelines.data.registry import TRAINING, datasets
from pc_pipelines.errors import RunError, installed_command, shell_command
from pc_pipelines.run import RunSpec, StepRecord, list_checkpoints, load_run_spec
from pc_pipelines.run.lifecycle import segments_finished
from pc_pipelines.run.progress import SegmentProgress
from pc_pipelines.run.segment_attempt import SegmentRequest
from pc_pipelines.run.segments import SegmentError, parse_partition_key, partition_key, resume_step
from pc_pipelines.run.stopping import StopRequested, process_stop
from pc_pipelines.steps import segment_name
from pc_pipelines.store import RunBusyError, Store, StoreError
from pc_pipelines.store.runlock import describe
from pc_pipelines_dagster.resources import (
    CheckpointResource,
    ComputeResource,
    DataResource,
    RolloutEngineResource,
    StoreResource,
)

from .commands import sql_command
from .embedded import base_policy

SEGMENTS = DynamicPartitionsDefinition(name="training_segments")
TRAINING_DATA = [AssetKey(d.asset_key) for d in datasets(TRAINING)]
ADVANCED_BY_TAG = "pc/advanced_by"  # who requested a segment's Dagster run (the sensor and the schedule set it)
"""The assets that prepare what a run may train on (the registry's training datasets: arith_task, deepmath, ...)."""
NOT_CURVES = frozenset({"step", "segment", "segments", "segment_step", "segment_steps", "run_step", "run_steps",
                        "eta_s", "steps_run", "resumed_after_step", "first_step", "last_step"})
"""Numbers that count or name a place (which step, which segment, how many): shown as text, so Dagster's Plots tab,
which draws every number by partition or by time, leaves them out."""
SEGMENT_PROGRESS = AssetSpec(
    "segment_progress",
    group_name="training",
    partitions_def=SEGMENTS,
    description=(
        "Where each training segment stands, on its own partition's page (Partitions -> `<run>/seg-NNNN`): "
        "`training_segment` records one materialization of its partition here after every step it trains (step k "
        "of N, the run's step of its total, rewards, rollouts, seconds a step, ETA), so the page shows the segment's "
        "progress while it trains and its last step after. Dagster's partition page lists only materializations, "
        "which `training_segment` makes once its segment is done. Nothing else writes this asset."),
)
"""The partition-scoped view of a segment's progress: an external asset (no code of its own) that ``training_segment``
materializes, one event per step, for the partition it trains."""


def as_metadata(values: dict) -> dict:
    """``values`` as Dagster metadata: the :data:`NOT_CURVES` numbers (by the last part of the key, so a launched
    process's ``reported/steps_run`` too) as text, the rest as they are."""
    def shown(key: str, value):
        number = value.value if isinstance(value, IntMetadataValue) else value
        if key.rsplit("/", 1)[-1] in NOT_CURVES and isinstance(number, int) and not isinstance(number, bool):
            return MetadataValue.text(str(number))
        return value
    return {k: shown(k, v) for k, v in values.items()}


# ---- loading a run back from the store ----------------------------------------------------------------------------
def segment_row(st: Store, key: str) -> tuple[str, int, dict, dict]:
    """A partition key's run id, segment index, run row and segment row; a Failure naming the fix when the store
    has no plan for it."""
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


def run_spec(run: dict, checkpoints: CheckpointResource) -> RunSpec:
    """The stored run's :class:`RunSpec` (no torch, no dataset), its directory under the checkpoint resource's root."""
    try:
        return load_run_spec(run, checkpoints.runs_root())
    except RunError as exc:
        raise Failure(str(exc)) from exc


def _on_step(context: AssetExecutionContext, progress: SegmentProgress):
    """Per step: the step line in the run's log, an observation of the segment's partition and a materialization of
    its ``segment_progress`` partition, both carrying the same numbers (step k of N, run step of total, rewards,
    rollouts, seconds a step, ETA): the UI's live progress while the segment trains, on the partition's page. Called
    in this process, or as a launched process's Pipes messages arrive."""
    def on_step(rec: StepRecord) -> None:
        now = progress.observe(rec)
        context.log.info(now.line())
        metadata = as_metadata(now.metadata())
        context.log_event(AssetObservation(asset_key=context.asset_key, partition=context.partition_key,
                                           metadata=metadata))
        context.log_event(AssetMaterialization(asset_key=SEGMENT_PROGRESS.key, partition=context.partition_key,
                                               metadata=metadata))
    return on_step


STARTUP_PHASES = 2
"""A segment's start-up, reported on its ``segment_progress`` partition before its first step (the model's load
and the engine's start take a minute or more): 1, loading the run's config and training data; 2, restoring its
checkpoint (or the base policy) and starting the rollout engine."""


def _starting(context: AssetExecutionContext, run_id: str, k: int, segments: int, phase: int, doing: str,
              started: float) -> None:
    """Start-up phase ``phase`` of :data:`STARTUP_PHASES` of segment ``k``: a line in the run's log and a
    materialization of its ``segment_progress`` partition saying what it does now (the step lines follow)."""
    progress = (f"{run_id}: segment {segment_name(k)} of {segments}, starting ({phase} of {STARTUP_PHASES}): "
                f"{doing}")
    context.log.info(progress)
    context.log_event(AssetMaterialization(asset_key=SEGMENT_PROGRESS.key, partition=context.partition_key, metadata={
        "progress": progress, "phase": f"start-up {phase} of {STARTUP_PHASES}: {doing}",
        "since_start": f"{time.monotonic() - started:.1f} s"}))


def advanced_by(tags: dict[str, str]) -> str:
    """Who requested this Dagster run: the ``advance_runs`` sensor, a schedule, or a person (UI, CLI, backfill)."""
    if tags.get(ADVANCED_BY_TAG):
        return tags[ADVANCED_BY_TAG]
    if tags.get("dagster/sensor_name"):
        return f"sensor:{tags['dagster/sensor_name']}"
    if tags.get("dagster/schedule_name"):
        return f"schedule:{tags['dagster/schedule_name']}"
    if tags.get("dagster/backfill"):
        return f"backfill:{tags['dagster/backfill']}"
    return "by hand (UI, CLI or API)"


def _progress_metadata(st: Store, tr: RunSpec, first: int, last: int, k: int) -> dict[str, MetadataValue]:
    """The run so far as a small inline plot (this segment shaded), the SQL behind it and the TensorBoard command."""
    from pc_pipelines.reports.run_plot import load_run_progress, plot_run_progress, run_progress_query

    out: dict[str, MetadataValue] = {}
    query = run_progress_query(tr.run_id)
    out["sql"] = MetadataValue.md(f"```\n{sql_command(st.path, query)}\n```")  # short lines: the table fits
    out["tensorboard_command"] = MetadataValue.md(
        f"```\n{shell_command(installed_command('tensorboard', from_cwd=False), '--logdir', tr.tensorboard_dir)}\n```")
    try:
        png = plot_run_progress(load_run_progress(st, tr.run_id), tr.run_dir / "plots" / f"seg-{k:04d}.png",
                                highlight=(first, last))
    except Exception as exc:  # a plot never fails a trained segment: say why it is missing
        out["run_plot"] = MetadataValue.text(f"no plot: {type(exc).__name__}: {exc}")
        return out
    data = base64.b64encode(png.read_bytes()).decode()
    out["run_plot"] = MetadataValue.md(f"![{tr.run_id} so far](data:image/png;base64,{data})")
    out["run_plot_path"] = MetadataValue.path(str(png))
    return out


def _refused(key: str, exc: RunBusyError, seg: dict) -> Failure:
    """The step's failure for a materialization refused by the run's writer lock: nothing was recorded. The
    message names the holder (pid, host, command) and the fix."""
    holder = exc.holder or {}
    return Failure(
        f"{key}: refused, another process writes this run: {exc} Nothing was recorded: the segment is still "
        f"{seg['status']} ({seg['attempts']} attempt(s)). In Dagster: the advance_runs sensor requests nothing for "
        f"this run while that process holds it and goes on once it is done; re-materialize {key} by hand only "
        "after that.",
        metadata={"refused_by": describe(exc.holder) if exc.holder else str(exc),
                  "holder_pid": str(holder.get("pid", "unknown")), "holder_host": str(holder.get("host", "unknown")),
                  "segment_status": seg["status"]},
        allow_retries=False,
    )


# ---- training_segment ------------------------------------------------------------------------------------------
@asset(
    group_name="training",
    partitions_def=SEGMENTS,
    deps=[base_policy, *TRAINING_DATA],
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
    """Train one segment of a run from the previous segment's checkpoint; its steps go to the store.

    Where it trains is the compute resource's: it gets one :class:`~pc_pipelines.run.segment_attempt.SegmentRequest`
    and, in this process or a launched one (Pipes: a subprocess, a pod, a Ray job), the process that trains checks it,
    takes the run's writer lock and records the attempt (``train_requested_segment``). Refused by that lock (another
    process writes the run), nothing is recorded and the step fails naming the holder.

    In the UI: a segment's progress while it trains is on ``segment_progress`` -> Partitions -> ``<run>/seg-NNNN``
    (one materialization per step); this asset's overview shows the latest segment done in any run, its first
    metadata entry naming the run and the segment."""
    started = time.monotonic()
    st = store.get(vacuum=False)  # this process's one session; only a run's writer deletes its files
    key, attempt = context.partition_key, context.run.run_id
    run_id, k, run, seg = segment_row(st, key)
    plan = st.segments(run_id)
    _starting(context, run_id, k, len(plan), 1, "loading the run's config and training data", started)
    spec = run_spec(run, checkpoints)
    first, last = int(seg["first_step"]), int(seg["last_step"])
    have = [s for s, _ in list_checkpoints(spec.checkpoint_dir)]
    try:
        start = resume_step(first, last, have, done=seg["status"] == "done")
        request = SegmentRequest(store=str(st.path), run_id=run_id, until_step=last, from_step=start, segment=k,
                                 attempt=attempt, runs_root=str(checkpoints.runs_root()), data_dir=data.out_dir)
    except SegmentError as exc:
        raise Failure(f"{key}: {exc} ({partition_key(run_id, k - 1)})") from exc
    except RunError as exc:
        raise Failure(f"{key}: {exc}") from exc
    run_steps = max(int(r["last_step"]) for r in plan)
    state = (f"training segment {segment_name(k)} of {len(plan)} (steps {first}..{last} of {run_steps}) from "
             + ("the base policy" if start < 1 else f"the checkpoint after step {start}")
             + (" (re-materializing a done segment: it stays done)" if seg["status"] == "done" else "")
             + f"; requested {advanced_by(context.run.tags)}")
    context.log.info("%s: %s", key, state)
    context.log_event(AssetObservation(asset_key=context.asset_key, partition=key, metadata={"state": state}))
    progress = SegmentProgress(run_id, k, len(plan), first, last, run_steps)
    was_finished = (st.get_run(run_id) or {}).get("status") == "finished"
    restoring = "the base policy" if start < 1 else f"the checkpoint after step {start}"
    _starting(context, run_id, k, len(plan), 2, compute.starting(restoring) + "; each step's progress follows",
              started)
    try:
        with process_stop() as stop:
            result = compute.run_segment(request, st, context=context, on_step=_on_step(context, progress),
                                         engine_factory=engine.build, stop=stop)
    except RunBusyError as exc:  # another process writes the run: this attempt never happened
        raise _refused(key, exc, segment_row(st, key)[3]) from None
    except StopRequested as exc:  # at a step boundary, with its checkpoint: stopped, not failed
        why = exc.reason.split("; resume it with --resume")[0]
        raise Failure(f"{key}: {why}; the segment is recorded stopped and resumes from that checkpoint when it is "
                      "next materialized", allow_retries=False) from None
    except (RunError, StoreError) as exc:  # refused (no intact checkpoint, ...): say why
        raise Failure(f"{key}: {exc}") from exc
    if segments_finished(st, run_id) and not was_finished:
        context.log.info("run %s: every segment is done; finished", run_id)
    steps = st.query(
        "SELECT step, sampled_rollouts, mean_reward_std, informative_share FROM steps WHERE run_id = ? "
        "AND step BETWEEN ? AND ? ORDER BY step", [run_id, first, last])
    metadata = {
        # first: the overview shows the latest materialization of any run's segment, so it says whose it is
        "materialized": MetadataValue.text(f"{run_id}: segment {segment_name(k)} of {len(plan)} done (run steps "
                                           f"{first}..{last} of {run_steps}); a run's live progress: segment_progress -> "
                                           "Partitions"),
        "run_id": run_id,
        "method": spec.config.method,
        "segment": f"{segment_name(k)} of {len(plan)}",
        "steps": f"{first}..{last}",  # as stored (pc_pipelines/steps.py: one numbering)
        "steps_run": result.steps_run,
        "resumed_after_step": "fresh (the base policy)" if start < 1 else start,
        "advanced_by": advanced_by(context.run.tags),
        "cumulative_rollouts": result.cumulative_rollouts,
        "segment_rollouts": int(sum(r["sampled_rollouts"] for r in steps)),
        "eval_accuracy": MetadataValue.float(round(result.last_eval_accuracy, 4))
        if result.last_eval_accuracy is not None else MetadataValue.text("no evaluation in this segment"),
        "mean_reward_std": MetadataValue.float(round(result.mean_reward_std or 0.0, 4)),
        "informative_share": MetadataValue.float(
            round(sum(r["informative_share"] for r in steps) / len(steps), 4) if steps else 0.0),
        "checkpoint": MetadataValue.path(str(result.checkpoint)),
        "tensorboard": MetadataValue.path(str(result.tensorboard_dir)),
        **_progress_metadata(st, spec, first, last, k),
    }
    # A segment launched outside this process (Pipes) adds what it reported: per-step rows, its own summary.
    metadata.update({k if k not in metadata else f"reported/{k}": v for k, v in result.reported.items()})
    return MaterializeResult(metadata=as_metadata(metadata))
