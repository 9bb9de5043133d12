"""RL math and the compiled update: advantage estimators, losses, filters, optimizer, train step,
and the train batch built from graded episodes (`experience`). The run that drives them is
`agentic_jax.training`; its config is read by `agentic_jax.config`."""

from agentic_jax.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageConfig,
    get_advantage_estimator,
    masked_whiten,
    token_level_rewards,
)
from agentic_jax.rl.aggregation import AGGREGATIONS, Pooled, aggregate
from agentic_jax.rl.filters import (
    FilterConfig,
    episode_filter,
    kept_indices,
    mask_episodes,
    nonuniform_group_mask,
)
from agentic_jax.rl.forward import compute_logprobs
from agentic_jax.rl.kl import KL_ESTIMATORS, kl_estimate, kl_penalized_rewards
from agentic_jax.rl.losses import (
    POLICY_LOSSES,
    LossConfig,
    explained_variance,
    logprobs_and_entropy,
    loss_terms,
    objective,
)
from agentic_jax.rl.optim import current_lr, make_optimizer
from agentic_jax.rl.shardings import TrainShardings, init_opt_state, train_shardings
from agentic_jax.rl.step import TrainBatch, make_train_step

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageConfig",
    "FilterConfig",
    "LossConfig",
    "Pooled",
    "TrainBatch",
    "TrainShardings",
    "aggregate",
    "compute_logprobs",
    "current_lr",
    "episode_filter",
    "explained_variance",
    "get_advantage_estimator",
    "init_opt_state",
    "kept_indices",
    "kl_estimate",
    "kl_penalized_rewards",
    "logprobs_and_entropy",
    "loss_terms",
    "make_optimizer",
    "make_train_step",
    "mask_episodes",
    "masked_whiten",
    "nonuniform_group_mask",
    "objective",
    "token_level_rewards",
    "train_shardings",
]
