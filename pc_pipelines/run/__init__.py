"""The run layer: one training run's spec, records, checkpoints and its segment driver over a backend.

* :mod:`.training_run`: :class:`RunSpec` (id, resolved config, directory, base policy, lineage; read back from the
  store by :func:`load_run_spec` without torch or data) and :class:`TrainingRun` (the spec with its task, built by
  :func:`prepare_run` or :func:`with_task`; :func:`load_training_run`: both);
* :mod:`.records`: :class:`StepRecord` and :class:`SegmentResult` and their JSON for Dagster Pipes;
* :mod:`.checkpoints`: the checkpoint layout, listing, verification, retention and the run's own saved state;
* :mod:`.driver`: :func:`run_segment`, ONE driver for every backend (:mod:`.backend`: the protocol; :mod:`.step_loop`: the one step loop), with the
  local backend (:mod:`.local`) by default; :mod:`.checkpoint_eval`: the evaluation of a saved checkpoint;
* :mod:`.segments`: how a run is cut into Dagster partitions and what the sensor trains next (pure, no Dagster);
* :mod:`.start`: the one way a training run starts (the CLI's ``train`` and the ``start_run`` job);
* :mod:`.lifecycle`: how every writer of a run (the driver, the simulator) holds it and records its end, and the one
  place a run becomes ``finished``; :mod:`.stopping`: clean stops on signals and the status an error ends a run with;
* :mod:`.segment_attempt`: :class:`~.segment_attempt.SegmentRequest` and the one place a Dagster segment's attempt is
  checked, locked and recorded, in whichever process trains it.

Importing this package does not import torch: the local backend does, when a segment runs.
"""

from .checkpoint_eval import evaluate_checkpoint
from .checkpoints import (
    checkpoint_at,
    latest_checkpoint,
    list_checkpoints,
    newest_intact_checkpoint,
    stale_checkpoints,
    verify_checkpoint,
)
from .driver import open_run, run_segment
from .records import REFUSED, STEP_KEYS, SegmentResult, StepRecord, Totals
from .training_run import (
    RunSpec,
    TrainingRun,
    load_run_spec,
    load_training_run,
    prepare_run,
    run_dir_of,
    task_for,
    with_task,
)

__all__ = [
    "REFUSED",
    "STEP_KEYS",
    "RunSpec",
    "SegmentResult",
    "StepRecord",
    "Totals",
    "TrainingRun",
    "checkpoint_at",
    "evaluate_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "load_run_spec",
    "load_training_run",
    "newest_intact_checkpoint",
    "open_run",
    "prepare_run",
    "run_dir_of",
    "run_segment",
    "stale_checkpoints",
    "task_for",
    "verify_checkpoint",
    "with_task",
]
