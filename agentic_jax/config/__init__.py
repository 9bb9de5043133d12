"""The run's config, read and checked: `read_config` turns a ``configs/*.py`` ConfigDict into
one typed `RunConfig` (`run_config`) of per-group records (`groups`). Below every package that
takes the record (inference, serve, training, evaluation); it imports none of them."""

from agentic_jax.config.run_config import (
    AUTO_IS_CAP,
    ConfigError,
    OffPolicyChoice,
    RunConfig,
    read_config,
    read_group,
    resolve_off_policy,
    resolve_old_logprobs,
)

__all__ = [
    "AUTO_IS_CAP",
    "ConfigError",
    "OffPolicyChoice",
    "RunConfig",
    "read_config",
    "read_group",
    "resolve_off_policy",
    "resolve_old_logprobs",
]
