"""Held-out evaluation: sampled results do not depend on chunking or on how hosts split the set."""

import numpy as np
import pytest
from train_testing import tiny_config

from agentic_jax.config import read_config
from agentic_jax.episodes import sampling
from agentic_jax.episodes.policy import build_policy
from agentic_jax.evaluation import held_out
from agentic_jax.parallel import distributed

K = 2


@pytest.fixture(scope="module")
def policy():
    p, _ = build_policy(read_config(tiny_config(**{"data.eval_size": 6})))
    yield p
    p.close()


def _evaluate(policy, problems, batch_size, **kwargs):
    cfg = held_out.EvalConfig(batch_size=batch_size, temperature=1.0, num_samples=K)
    return held_out.evaluate(policy, problems, tools=True, cfg=cfg, **kwargs)


def test_sampled_evaluation_is_the_same_in_chunks_and_in_shares(policy, monkeypatch):
    problems = policy.problems.test
    assert len(problems) == 6
    whole = _evaluate(policy, problems, batch_size=4)
    assert whole["num_problems"] == 6 and {"pass@1", f"pass@{K}"} <= whole.keys()
    assert _evaluate(policy, problems, batch_size=5) == whole

    # Two "hosts" with 4 and 2 problems: each evaluates its share, the gather joins their rows
    # in order, and both get the single-host result.
    tables = []

    def gather_as_host(table):
        tables.append(table)
        if len(tables) == 1:
            return table  # host 0's own view is discarded below
        return {k: np.concatenate([t[k] for t in tables]) for k in table}

    for host in (0, 1):
        monkeypatch.setattr(sampling, "process_slice",
                            lambda n, host=host: distributed.process_slice(n, host, 2))
        monkeypatch.setattr(held_out, "gather_rows", gather_as_host)
        result = _evaluate(policy, problems, batch_size=3)
    assert result == whole


def test_run_settings_are_one_training_step_per_agent_call(policy):
    # pass@k samples at temperature 1 even though rollout.eval_temperature is greedy.
    cfg = held_out.eval_config(policy, num_samples=K)
    assert cfg.temperature == 0.0 and cfg.num_samples == K
    default = held_out.evaluate(policy, tools=True, cfg=cfg)
    assert default == _evaluate(policy, policy.problems.test, batch_size=cfg.batch_size)
