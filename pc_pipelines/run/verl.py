"""The verl segment (experimental; has not run on a GPU cluster): train a run's first segment with the verl recipe
(:mod:`pc_pipelines.training.verl_recipe`) on the Ray cluster this process drives (a KubeRay RayJob's entrypoint).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import RunError
from ..store import Store
from .checkpoints import latest_checkpoint
from .records import SegmentResult, StepRecord
from .spec import TrainingRun


def run_segment_verl(run: TrainingRun, store: Store, from_step: int | None, until_step: int,
                     on_step: Callable[[StepRecord], None] | None = None, nnodes: int = 1, gpus_per_node: int = 8,
                     overrides: Sequence[str] = ()) -> SegmentResult:
    """Experimental: train steps ``.. until_step`` of ``run`` with the verl recipe on the Ray cluster this process
    is the driver of (a KubeRay RayJob's entrypoint). Resuming mid-run is not supported yet: the allocator state and
    the buffered pilots' payloads are not checkpointed with verl's checkpoint, so only a run's first segment
    (``from_step`` -1 or None on a fresh run) can run here."""
    import ray
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig

    from ..allocation import Allocator
    from ..rewards import MathGrader
    from ..store import step_tables
    from ..training import verl_recipe
    from ..training.verl_recipe import PCSettings, compose_recipe_config, run_overrides, trainer_class

    if (from_step is not None and from_step >= 0) or latest_checkpoint(run.checkpoint_dir) is not None:
        raise RunError("the verl backend cannot resume a run yet (experimental). Fix: run later segments with the "
                        "local backend, or start a new run.")
    cfg = compose_recipe_config([*run_overrides(run.config, run.policy_path, nnodes, gpus_per_node),
                                 f"trainer.default_local_dir={run.run_dir / 'verl'}",
                                 f"reward.custom_reward_function.path={Path(verl_recipe.__file__).resolve()}",
                                 "reward.custom_reward_function.name=null_score", *overrides])
    settings = PCSettings.from_config(cfg)
    if not ray.is_initialized():
        ray.init(address="auto")
    runner = BaseTaskRunner()
    _, group_cls = runner.add_actor_rollout_worker(cfg)
    runner.add_reward_model_resource_pool(cfg)
    model_cfg: HFModelConfig = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    trainer = trainer_class()(config=cfg, tokenizer=model_cfg.tokenizer, role_worker_mapping=runner.role_worker_mapping,
                              resource_pool_manager=runner.init_resource_pool_mgr(cfg), ray_worker_group_cls=group_cls)
    trainer.init_workers()
    allocator = Allocator(settings.allocator_config(run.config.seed) if run.config.method == "pc"
                          else run.config.allocator, len(run.task.prompts))
    store.register_run(run.record())
    records, sampled = [], 0
    with MathGrader(overlong_reward=run.config.training.overlong_reward) as grader:
        trainer.pc_setup(allocator, run.task, grader)
        trainer.global_steps = 1
        trainer.checkpoint_manager.update_weights(0)
        while allocator.step <= until_step:
            outcome, metrics = trainer.pc_step()
            sampled += outcome.ledger.sampled_rollouts
            mean_reward = float(np.concatenate([g.rewards for g in outcome.groups]).mean()) if outcome.groups else 0.0
            loss = metrics.get("actor/pg_loss")
            store.writer(run.run_id).write_step(outcome.step, step_tables(run.run_id, outcome, allocator, {
                "loss": loss, "mean_reward": mean_reward, "time_generate_s": metrics.get("timing_s/gen", 0.0)}))
            rec = StepRecord(step=outcome.step, ledger=outcome.ledger.to_dict(), loss=loss, mean_reward=mean_reward,
                             reward_std=outcome.ledger.mean_reward_std, cumulative_rollouts=sampled,
                             timings={"generate": metrics.get("timing_s/gen", 0.0)})
            records.append(rec)
            if on_step:
                on_step(rec)
        trainer._save_checkpoint()
    store.compact(run.run_id)
    return SegmentResult(run_id=run.run_id, first_step=records[0].step if records else 0,
                         last_step=allocator.step - 1, steps_run=len(records), cumulative_rollouts=sampled,
                         last_eval_accuracy=None, mean_reward_std=None, checkpoint=run.run_dir / "verl",
                         tensorboard_dir=run.tensorboard_dir, records=records)

