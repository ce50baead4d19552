"""The evaluation of a run's saved checkpoint: mean@k of an HF model directory (a checkpoint's, or one a backend
exported) on the run's eval sets, seeded as the driver's own evaluation of that step, so both give the same
numbers (what the ``segment_eval`` asset and ``pilot-commit eval-segment`` run).

This module loads the run's saved policy and its engine; the scoring itself (mean@k of any policy on eval sets,
shared with the driver's periodic evaluation) is :mod:`pc_pipelines.evaluation`, in the components layer below."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..errors import RunError
from ..evaluation import EvalResult, eval_seed, evaluate_sets
from ..rewards import MathGrader
from ..rollout import DEFAULT_ENGINE, EngineFactory, close_engine, get_engine, sampling_plan
from .checkpoints import checkpoint_at
from .training_run import SAMPLING_PLAN, TrainingRun

log = logging.getLogger(__name__)


def evaluate_policy(run: TrainingRun, policy_dir: Path, step: int, engine_factory: EngineFactory | None = None,
                    device: str = "cpu") -> EvalResult:
    """Mean@k of the HF model at ``policy_dir`` on ``run``'s eval sets with the run's eval settings and the seed
    of :func:`~pc_pipelines.evaluation.eval_seed` for ``step``. ``engine_factory`` builds the rollout engine from
    (model, tokenizer); None: the registry's default engine (transformers) on ``device``."""
    from ..training.base_policy import load_policy

    cfg = run.config.training
    model, tok = load_policy(policy_dir, dtype=cfg.dtype)
    if engine_factory is not None:
        engine = engine_factory(model, tok)
    else:
        engine = get_engine(DEFAULT_ENGINE).build(model, tok, device)
    try:
        warn_if_other_plan(run, engine)
        with MathGrader(overlong_reward=cfg.overlong_reward) as grader:
            return evaluate_sets(engine, grader, run.task.eval_sets, cfg.eval_samples, cfg.eval_temperature,
                                 cfg.eval_top_p, cfg.max_response_length, eval_seed(run.config.seed, step))
    finally:
        close_engine(engine)


def evaluate_checkpoint(run: TrainingRun, step: int, engine_factory: EngineFactory | None = None,
                        device: str = "cpu") -> EvalResult:
    """:func:`evaluate_policy` of ``run``'s checkpoint after ``step``. Where it runs is the compute resource's
    choice (in process, or ``pilot-commit eval-segment`` in a GPU pod)."""
    path = checkpoint_at(run.checkpoint_dir, step)
    if path is None:
        raise RunError(f"{run.run_id}: no checkpoint after step {step} in {run.checkpoint_dir}. Fix: train the "
                       "segment that ends at that step first (materialize its training_segment).")
    return evaluate_policy(run, path / "policy", step, engine_factory, device)


def warn_if_other_plan(run: TrainingRun, engine) -> bool:
    """Warn (and return True) when ``engine`` draws with other settings than the run recorded: its mean@k is still
    valid, but it will not equal the driver's own evaluation of that step (another chunk size, other draws)."""
    plan = sampling_plan(engine)
    try:
        recorded = json.loads((Path(run.run_dir) / SAMPLING_PLAN).read_text())
    except (OSError, ValueError):
        return False  # nothing recorded (or unreadable: the next training segment says so and how to fix it)
    if plan is None or recorded == plan:
        return False
    log.warning("%s: this evaluation's engine draws with %s, the run's own evaluations with %s: the numbers are a "
                "valid mean@k but will not equal the run's evaluation of this step. Fix: evaluate with the run's engine "
                "settings (max_batch_sequences, PC_ROLLOUT_CHUNK).", run.run_id, json.dumps(plan, sort_keys=True),
                json.dumps(recorded, sort_keys=True))
    return True
