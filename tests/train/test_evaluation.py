"""Held-out evaluation: sampled results do not depend on chunking or on how hosts split the set."""

import numpy as np
import pytest
from train_testing import tiny_config

from agentic_jax.rl import evaluation
from agentic_jax.rl.trainer import Trainer

K = 2


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    t = Trainer(tiny_config(**{"data.eval_size": 6}), str(tmp_path_factory.mktemp("run")))
    yield t
    t.close()


def _evaluate(trainer, problems, batch_size, seed=3, **kwargs):
    e = trainer.config.environment
    cfg = evaluation.EvalConfig(batch_size=batch_size, temperature=1.0, num_samples=K,
                                max_tool_calls=e.max_tool_calls, timeout_ms=e.timeout)
    return evaluation.evaluate(problems, agent_factory=trainer.make_agent,
                               make_prompt=trainer.make_prompt, agent_cfg=trainer.agent_cfg,
                               cfg=cfg, tools=True, seed=seed, stages=trainer.stage_names,
                               **kwargs)


def test_sampled_evaluation_is_the_same_in_chunks_and_in_shares(trainer):
    problems = trainer.test_problems
    assert len(problems) == 6
    whole = _evaluate(trainer, problems, batch_size=4)
    assert whole["num_problems"] == 6 and {"pass@1", f"pass@{K}"} <= whole.keys()
    assert _evaluate(trainer, problems, batch_size=5) == whole

    # Two "hosts" with 4 and 2 problems; the gather joins their rows in order.
    tables = []

    def collect(table):
        tables.append(table)
        return table

    for start, stop in ((0, 4), (4, 6)):
        _evaluate(trainer, problems[start:stop], batch_size=3, gather=collect,
                  job_offset=start * K, job_total=len(problems) * K)
    joined = {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}
    assert evaluation.summarize_table(joined, trainer.stage_names, K) == whole


def test_trainer_evaluate_matches_the_function(trainer):
    # pass@k samples at temperature 1 even though rollout.eval_temperature is greedy.
    direct = _evaluate(trainer, trainer.test_problems, batch_size=5, seed=trainer.config.seed)
    assert trainer.evaluate(tools=True, num_samples=K) == direct
