"""`open_run` opens a policy for inference from the model, tokenizer, template and tool
settings alone: it builds none of the run's data, and serves the same replies as the policy
training builds (with its problems) from the same config and checkpoint."""

import threading

import pytest

from agentic_jax.config import read_config
from agentic_jax.episodes.open import open_run
from agentic_jax.inference import InferencePolicy
from agentic_jax.rl.state import restore_params
from agentic_jax.rollout import SamplingParams
from agentic_jax.serve import Job, RolloutWorker, ServeLimits, load_policy
from agentic_jax.episodes.policy import build_policy
from agentic_jax.inference import publish
from tests.train.train_testing import tiny_config, train

_TWO_STEPS = {"training.total_steps": 2}  # past the tiny config's one warm-up step
_MESSAGES = [{"role": "user", "content": "What is 12 + 30?"}]


def _seeded_replies(policy) -> list[list[int]]:
    """Two sampled choices of one seeded chat request, served by the worker."""
    worker = RolloutWorker(policy, ServeLimits())
    done, out = threading.Event(), {}
    job = Job(prompt=policy.chat_prompt(_MESSAGES), n=2, sampling=SamplingParams(temperature=1.0),
              max_new_tokens=32, seed=7, on_update=lambda *_: None,
              on_finish=lambda episodes, error: (out.update(episodes=episodes, error=error),
                                                 done.set()))
    worker.submit(job)
    try:
        assert done.wait(120), "no reply"
    finally:
        worker.close()
    assert out["error"] is None
    return [list(e.response_tokens) for e in out["episodes"]]


def _no_data(monkeypatch):
    """Makes every way to the run's problems fail loudly."""
    def refuse(*args, **kwargs):
        raise AssertionError("opening a policy for inference loaded training data")

    for target in ("agentic_jax.episodes.problems.load_problems",
                   "agentic_jax.episodes.problems.load_source",
                   "agentic_jax.episodes.problems.load_benchmarks",
                   "agentic_jax.episodes.problems.benchmark_problems",
                   "agentic_jax.data.sources.load_source",
                   "agentic_jax.data.curriculum.generate_curriculum",
                   "agentic_jax.data.benchmarks.load_benchmarks"):
        monkeypatch.setattr(target, refuse)


def test_a_config_opens_without_data_and_replies_as_the_training_policy(monkeypatch):
    config = tiny_config()
    trained_side, _ = build_policy(read_config(config))
    try:
        expected = _seeded_replies(trained_side)
    finally:
        trained_side.close()
    _no_data(monkeypatch)
    policy = open_run(config)
    try:
        assert type(policy) is InferencePolicy and not hasattr(policy, "problems")
        assert policy.step is None
        assert _seeded_replies(policy) == expected
    finally:
        policy.close()



def test_the_configured_tools_reach_the_loop():
    policy = open_run(tiny_config(**{"environment.tools": ("calculator", "python")}))
    try:
        tools = policy.rollout_service().toolset.tools
        assert [t.name for t in tools] == ["calculator", "python"]
        assert tools[1].sandbox is policy.sandbox
        # Built once per policy, not per loop (training opens a loop every step).
        assert policy.rollout_service().toolset.tools == tools
    finally:
        policy.close()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("run"))
    train(tiny_config(**_TWO_STEPS), workdir, progress=False)
    return workdir


@pytest.mark.slow  # `serve --workdir` opens a run the same way in test_serve_command
def test_a_run_opens_its_newest_checkpoint_without_data(tiny_run, monkeypatch):
    trained_side, params = build_policy(read_config(tiny_config(**_TWO_STEPS)))
    try:
        params, step = restore_params(tiny_run, params, trained_side.state_shardings)
        publish(trained_side, params)
        expected = _seeded_replies(trained_side)
    finally:
        trained_side.close()
    _no_data(monkeypatch)
    loaded = load_policy(None, tiny_run)
    try:
        assert loaded.step == loaded.policy.step == step == 2
        assert _seeded_replies(loaded.policy) == expected
    finally:
        loaded.policy.close()


def test_a_workdir_without_checkpoints_or_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoints/ directory"):
        open_run(workdir=str(tmp_path))
    with pytest.raises(ValueError, match="^--workdir or --config"):
        open_run()
