"""One tiny policy (built, not trained or downloaded) for every serving test."""

import pytest

from agentic_jax.rl.builders import build_policy
from agentic_jax.rl.config import read_config
from tests.train.train_testing import tiny_config


@pytest.fixture(scope="session")
def tiny_policy():
    policy, _ = build_policy(read_config(tiny_config()))
    yield policy
    policy.close()
