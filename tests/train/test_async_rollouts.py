"""The rollout producer against a stand-in rollout with random delays: no token is more than
max_staleness versions older than the trainer, K = 0 is the synchronous order, drains hold the
producer back, a failed rollout reaches the trainer."""

import random
import threading
import time
import types

import numpy as np
import pytest

from agentic_jax.rollout import Episode
from agentic_jax.training import async_rollouts
from agentic_jax.training.async_rollouts import RolloutPipeline, staleness_metrics
from agentic_jax.training.rollouts import Experience


class FakeEngine:
    def __init__(self):
        self.version, self.params = 0, None

    def update_params(self, params, version=None):
        self.params = params
        if version is not None:
            self.version = version


def fake_run(mode, bound):
    cfg = types.SimpleNamespace(rl=types.SimpleNamespace(async_mode=mode),
                                staleness=types.SimpleNamespace(max_staleness=bound))
    policy = types.SimpleNamespace(engine=FakeEngine(), merge=None, rollout_shardings=None)
    return types.SimpleNamespace(cfg=cfg, policy=policy)


def fake_collect(rng, tokens=3, log=None):
    """A rollout of one episode: before each token it takes new weights (when fed), records the
    engine's version, then waits a random while."""
    def collect(run, key, weights=None):
        if log is not None:
            log.append(("start", key))
        versions = []
        for _ in range(tokens):
            new = weights() if weights is not None else None
            if new is not None:
                run.policy.engine.update_params(*new)
            versions.append(run.policy.engine.version)
            time.sleep(rng.uniform(0, 0.004))
        ep = Episode(prompt_tokens=[1], response_tokens=[2] * tokens, loss_mask=[1] * tokens,
                     versions=versions)
        return Experience([ep], {}, {}, [], {})
    return collect


def train(pipeline, steps, rng, log=None):
    """The trainer's side of the loop; returns every step's staleness metrics."""
    out = []
    for step in range(1, steps + 1):
        experience = pipeline.next(step)
        out.append(staleness_metrics(experience.episodes, step))
        time.sleep(rng.uniform(0, 0.02))   # the update: at times slower than a rollout
        pipeline.publish(np.full(2, step), step)
        if log is not None:
            log.append(("release", step))
        pipeline.release(step)
    pipeline.close()
    return out


@pytest.mark.parametrize("mode, bound", [("fully_async", 1), ("fully_async", 2),
                                         ("one_step_off", 3)])
@pytest.mark.parametrize("seed", range(2))
def test_staleness_never_exceeds_the_bound(monkeypatch, mode, bound, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(async_rollouts, "collect", fake_collect(rng))
    run = fake_run(mode, bound)
    pipeline = RolloutPipeline(run, 1, 10, lambda step: step, lambda step: False)
    metrics = train(pipeline, 10, rng)
    lag = min(bound, 1) if mode == "one_step_off" else bound
    assert max(m["staleness_max"] for m in metrics) <= lag
    assert metrics[0]["staleness_max"] == 0      # step 1 samples with the starting policy
    if mode == "one_step_off":  # weights switch only between rollouts: one version each
        assert all(m["staleness_max"] == m["staleness_mean"] for m in metrics)


def test_zero_staleness_is_the_synchronous_order(monkeypatch):
    rng, log = random.Random(0), []
    monkeypatch.setattr(async_rollouts, "collect", fake_collect(rng, log=log))
    pipeline = RolloutPipeline(fake_run("fully_async", 0), 1, 5, lambda s: s, lambda s: False)
    metrics = train(pipeline, 5, rng, log)
    assert log == [("start", 1)] + [e for s in range(1, 5)
                                    for e in (("release", s), ("start", s + 1))] + [
        ("release", 5)]
    assert all(m == {"staleness_mean": 0.0, "staleness_max": 0.0} for m in metrics)


def test_drain_steps_hold_the_next_rollout_back(monkeypatch):
    rng, log = random.Random(1), []
    monkeypatch.setattr(async_rollouts, "collect", fake_collect(rng, log=log))
    pipeline = RolloutPipeline(fake_run("fully_async", 2), 1, 6, lambda s: s,
                               lambda s: s % 3 == 0)
    assert [pipeline.gate(s) for s in range(1, 7)] == [0, 0, 0, 3, 3, 3]
    metrics = train(pipeline, 6, rng, log)
    # Step 4 starts only after step 3 is released, and then samples with version 3 alone.
    assert log.index(("release", 3)) < log.index(("start", 4))
    assert metrics[3] == {"staleness_mean": 0.0, "staleness_max": 0.0}


def test_a_failed_rollout_reaches_the_trainer(monkeypatch):
    def broken(run, key, weights=None):
        raise ValueError("sandbox gone")

    monkeypatch.setattr(async_rollouts, "collect", broken)
    pipeline = RolloutPipeline(fake_run("one_step_off", 1), 1, 3, lambda s: s, lambda s: False)
    with pytest.raises(RuntimeError, match="rollout producer failed") as err:
        pipeline.next(1)
    assert isinstance(err.value.__cause__, ValueError)
    pipeline.close()


def test_publish_reaches_an_idle_engine_at_once(monkeypatch):
    entered, gate = threading.Event(), threading.Event()

    def waiting(run, key, weights=None):
        entered.set()
        gate.wait()
        return Experience([], {}, {}, [], {})

    monkeypatch.setattr(async_rollouts, "collect", waiting)
    run = fake_run("one_step_off", 1)
    pipeline = RolloutPipeline(run, 1, 1, lambda s: s, lambda s: False)
    entered.wait()
    pipeline.publish(np.ones(2), 1)           # the producer is collecting: deferred
    assert run.policy.engine.version == 0
    gate.set()
    pipeline.next(1)
    pipeline.close()
    assert run.policy.engine.version == 1 and run.policy.engine.params.tolist() == [1, 1]
    trainer_params = np.full(2, 2)
    pipeline.publish(trainer_params, 2)
    assert run.policy.engine.version == 2 and run.policy.engine.params.tolist() == [2, 2]
    # The sampler's own buffers: the train step donates the trainer's.
    assert run.policy.engine.params is not trainer_params
