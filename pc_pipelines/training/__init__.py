"""The embedded policy update: GRPO advantages and verl's clipped policy loss on a causal LM (docs/DESIGN.md section 3).

Importing this package pulls in torch; verl is imported lazily, on the first advantage or loss computation.
"""

from .trainer import (
    ADV_EPSILON,
    PolicyTrainer,
    RolloutBatch,
    TrainStats,
    clipped_policy_loss,
    grpo_advantages,
    grpo_token_advantages,
    lr_at_step,
    make_actor_config,
)

__all__ = [
    "ADV_EPSILON",
    "PolicyTrainer",
    "RolloutBatch",
    "TrainStats",
    "clipped_policy_loss",
    "grpo_advantages",
    "grpo_token_advantages",
    "lr_at_step",
    "make_actor_config",
]
