"""The evaluation of a run's saved policy: mean@k of an HF model directory (a checkpoint's, or one a backend
exported) on the run's eval sets, seeded as the driver's own evaluation of that step, so both give the same
numbers (what the ``segment_eval`` asset and ``pilot-commit eval-segment`` run)."""

from __future__ import annotations

from pathlib import Path

from ..errors import RunError
from ..evaluation import EvalResult, eval_seed, evaluate_sets
from ..rewards import MathGrader
from ..rollout import EngineFactory, close_engine
from .checkpoints import checkpoint_at
from .spec import TrainingRun


def evaluate_policy(run: TrainingRun, policy_dir: Path, step: int, engine_factory: EngineFactory | None = None,
                    device: str = "cpu") -> EvalResult:
    """Mean@k of the HF model at ``policy_dir`` on ``run``'s eval sets with the run's eval settings and the seed
    of :func:`~pc_pipelines.evaluation.eval_seed` for ``step``. ``engine_factory`` builds the rollout engine from
    (model, tokenizer); None: the transformers engine on ``device``."""
    from ..rollout.transformers_engine import TransformersEngine
    from ..training.base_policy import load_policy

    cfg = run.config.training
    model, tok = load_policy(policy_dir, dtype=cfg.dtype)
    engine = engine_factory(model, tok) if engine_factory is not None else TransformersEngine(model, tok, device=device)
    try:
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
