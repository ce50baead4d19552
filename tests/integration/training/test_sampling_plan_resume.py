"""A run resumed with another chunk size would draw other rollouts from the same seeds: it is refused before
anything changes, and resumes with the run's own settings."""

from __future__ import annotations

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.errors import RunError
from pc_pipelines.rollout.transformers_engine import TransformersEngine
from pc_pipelines.run import list_checkpoints, prepare_run, run_segment
from pc_pipelines.store import Store

pytestmark = [pytest.mark.integration]

OVERRIDES = {"task.num_prompts": 8, "allocator.train_batch": 4, "allocator.n": 8, "training.ppo_minibatch": 4,
             "training.eval_every": 100, "training.eval_samples": 1}


def engine(chunk):
    return lambda model, tok: TransformersEngine(model, tok, max_batch_sequences=chunk)


def test_a_resume_with_another_chunk_size_is_refused_and_the_same_one_goes_on(policy_cache, tmp_path):
    run = prepare_run(resolve("embedded", OVERRIDES, method="grpo", seed=0), tmp_path, run_name="r",
                      cache_dir=policy_cache)
    store = Store(tmp_path / "pc.duckdb")
    run_segment(run, store, 1, engine_factory=engine(16))
    with pytest.raises(RunError, match=r"max_batch_sequences\": 16.*max_batch_sequences\": 8.*Fix:"):
        run_segment(run, store, 1, engine_factory=engine(8))
    assert [s for s, _ in list_checkpoints(run.checkpoint_dir)] == [1]
    assert [r["step"] for r in store.query("SELECT step FROM steps WHERE run_id = 'r'")] == [1]
    run_segment(run, store, 1, engine_factory=engine(16))
    assert [r["step"] for r in store.query("SELECT step FROM steps WHERE run_id = 'r' ORDER BY step")] == [1, 2]
