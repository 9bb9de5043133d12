"""One tiny policy (built, not trained or downloaded) for every serving test, and a live
server of it for a module's API tests."""

import pytest

from agentic_jax.episodes.open import open_run
from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import live_server
from tests.train.train_testing import tiny_config


@pytest.fixture(scope="session")
def tiny_policy():
    policy = open_run(tiny_config())
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def server(tiny_policy):
    """(base_url, service) of the tiny policy served as "tiny": up to 4 choices of 64 tokens,
    no idle wait."""
    limits = ServeLimits(max_n=4, max_tokens=64, max_batch_rows=4, max_queue=8,
                         batch_wait_ms=0, request_timeout_s=120)
    with live_server(tiny_policy, limits, model_name="tiny") as (url, service):
        yield url, service
