"""The ``evaluation`` asset group: ``segment_eval``, the mean@k accuracy of a training segment's final
checkpoint on the run's benchmarks, per partition of ``training_segment`` (:func:`pc_pipelines.run.evaluate_checkpoint`
through the compute resource)."""

from dagster import AssetExecutionContext, AssetKey, Failure, MaterializeResult, MetadataValue, asset

from pc_pipelines.data.registry import datasets
from pc_pipelines.errors import RunError
from pc_pipelines.run import checkpoint_at, verify_checkpoint
from pc_pipelines.run.stopping import process_stop
from pc_pipelines_dagster.resources import (
    CheckpointResource,
    ComputeResource,
    DataResource,
    RolloutEngineResource,
    StoreResource,
)

from .training import SEGMENTS, run_spec, segment_row, training_segment

EVAL_DATA = [AssetKey(d.asset_key) for d in datasets()]
"""The assets that prepare what a run trains on and is evaluated with (every dataset of the registry)."""


TENSORBOARD_TAG = "segment_eval"
"""The TensorBoard scalars of the segment-end evaluations: ``segment_eval/accuracy`` (the average, what
``run_comparison`` plots) and ``segment_eval/<benchmark>``, beside the run's training scalars (``eval/...`` are the
training loop's own evaluations, every ``training.eval_every`` steps)."""


def write_tensorboard(tensorboard_dir, step: int, mean: float, accuracy: dict[str, float]):
    """The evaluation's scalars at TensorBoard step ``step`` (the step numbers the run's training scalars use), in
    an event file of their own (``*.segment_eval``) in the run's ``tensorboard_dir``; that folder, or None when
    the run's directory is not on this machine (a launched process's volume)."""
    from pathlib import Path

    from torch.utils.tensorboard import SummaryWriter

    tb_dir = Path(tensorboard_dir)
    if not tb_dir.parent.is_dir():
        return None
    with SummaryWriter(log_dir=str(tb_dir), filename_suffix=f".{TENSORBOARD_TAG}") as tb:
        tb.add_scalar(f"{TENSORBOARD_TAG}/accuracy", mean, step)
        for name, acc in accuracy.items():
            tb.add_scalar(f"{TENSORBOARD_TAG}/{name}", acc, step)
    return tb_dir


@asset(
    group_name="evaluation",
    partitions_def=SEGMENTS,
    deps=[training_segment, *EVAL_DATA],
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
    st = store.get(vacuum=False)  # a segment's session: only a run's writer deletes its files
    run_id, k, run, seg = segment_row(st, context.partition_key)
    last = int(seg["last_step"])
    tr = run_spec(run, checkpoints)
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
        with process_stop():  # a stop asked for meanwhile is honoured once the evaluation is recorded
            res = compute.evaluate(tr, st, last, engine_factory=engine.build, context=context, data_dir=data.out_dir)
    except RunError as exc:
        raise Failure(str(exc)) from exc
    st.add_eval_results(res.rows(run_id, last))
    tensorboard = write_tensorboard(tr.tensorboard_dir, last, res.mean, res.accuracy)
    rows = ["| benchmark | prompts | k | mean@k |", "|---|---|---|---|"]
    rows += [f"| {name} | {res.n_prompts[name]} | {res.k_of(name)} | {acc:.3f} |" for name, acc in res.accuracy.items()]
    rows.append(f"| **average** | {sum(res.n_prompts.values())} | | **{res.mean:.3f}** |")
    context.log.info("%s: average accuracy %.3f after step %d", context.partition_key, res.mean, last)
    return MaterializeResult(
        metadata={
            "run_id": run_id,
            "step": last,  # as stored (pc_pipelines/steps.py: one numbering)
            "average_accuracy": MetadataValue.float(res.mean),
            "accuracy": MetadataValue.md("\n".join(rows)),
            "k": res.k,
            "temperature": res.temperature,
            "checkpoint": MetadataValue.path(str(path)),
            "tensorboard": MetadataValue.path(str(tensorboard)) if tensorboard else MetadataValue.text(
                f"not written: no run directory {tr.run_dir} on this machine"),
            "compute": type(compute).__name__,
        }
    )
