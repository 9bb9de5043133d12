"""One tiny policy (built, not trained or downloaded) for every serving test."""

import pytest

from agentic_jax.inference import open_run
from tests.train.train_testing import tiny_config


@pytest.fixture(scope="session")
def tiny_policy():
    policy = open_run(tiny_config())
    yield policy
    policy.close()
