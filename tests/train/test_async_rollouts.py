"""The rollout producer against a stand-in rollout with random delays: no token is more than
max_staleness versions older than the trainer, K = 0 is the synchronous order, drains hold the
producer back, a failed rollout reaches the trainer. Every fully_async case runs both ways: a
step's rollout after the previous one's (``rollout.stream_steps=False``, a stand-in `collect`)
and steps streaming side by side through one open loop (a stand-in `StepStream`)."""

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


def fake_run(mode, bound, stream=False):
    cfg = types.SimpleNamespace(rl=types.SimpleNamespace(async_mode=mode, dynamic_sampling=False),
                                staleness=types.SimpleNamespace(max_staleness=bound,
                                                                stream_steps=stream))
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


class FakeStream:
    """Steps side by side, at most ``slots`` of them: every round each open step samples one
    token (recording the engine's version after taking new weights), and the oldest steps
    hand over once they have ``tokens`` each."""

    def __init__(self, run, rng, tokens=3, slots=2, log=None):
        self.engine, self.rng, self.tokens, self.slots, self.log = (
            run.policy.engine, rng, tokens, slots, log)
        self.steps, self.streamed = {}, []

    @property
    def open(self):
        return bool(self.steps)

    @property
    def room(self):
        return len(self.steps) < self.slots

    def admit(self, step):
        if self.log is not None:
            self.log.append(("start", step))
        self.streamed.append(self.open)
        self.steps[step] = []

    def advance(self, weights):
        new = weights()
        if new is not None:
            self.engine.update_params(*new)
        for versions in self.steps.values():
            versions.append(self.engine.version)
        time.sleep(self.rng.uniform(0, 0.004))
        done = []
        while self.steps and len(next(iter(self.steps.values()))) >= self.tokens:
            step = next(iter(self.steps))
            versions = self.steps.pop(step)
            ep = Episode(prompt_tokens=[1], response_tokens=[2] * len(versions),
                         loss_mask=[1] * len(versions), versions=versions)
            done.append((step, Experience([ep], {}, {}, [], {})))
        return done

    def close(self):
        self.steps.clear()


def pipeline_for(monkeypatch, rng, mode, bound, stream, steps, drains=lambda s: False,
                 log=None):
    """A producer over the stand-in rollout (``stream``: the stand-in open loop)."""
    run = fake_run(mode, bound, stream)
    if stream:
        fake = FakeStream(run, rng, log=log)
        monkeypatch.setattr(async_rollouts, "StepStream", lambda run, step_key: fake)
    else:
        fake = None
        monkeypatch.setattr(async_rollouts, "collect", fake_collect(rng, log=log))
    return RolloutPipeline(run, 1, steps, lambda step: step, drains), fake


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


@pytest.mark.parametrize("mode, bound, stream", [
    ("fully_async", 1, False), ("fully_async", 2, False), ("one_step_off", 3, False),
    ("fully_async", 1, True), ("fully_async", 2, True)])
@pytest.mark.parametrize("seed", range(2))
def test_staleness_never_exceeds_the_bound(monkeypatch, mode, bound, stream, seed):
    rng = random.Random(seed)
    pipeline, fake = pipeline_for(monkeypatch, rng, mode, bound, stream, 10)
    metrics = train(pipeline, 10, rng)
    lag = min(bound, 1) if mode == "one_step_off" else bound
    assert max(m["staleness_max"] for m in metrics) <= lag
    assert metrics[0]["staleness_max"] == 0      # step 1 samples with the starting policy
    if mode == "one_step_off":  # weights switch only between rollouts: one version each
        assert all(m["staleness_max"] == m["staleness_mean"] for m in metrics)
    if stream:  # step 2's gate is open from the start, so it enters beside step 1
        assert fake.streamed[:2] == [False, True] and len(fake.streamed) == 10


@pytest.mark.parametrize("stream", [False, True])
def test_zero_staleness_is_the_synchronous_order(monkeypatch, stream):
    rng, log = random.Random(0), []
    pipeline, fake = pipeline_for(monkeypatch, rng, "fully_async", 0, stream, 5, log=log)
    metrics = train(pipeline, 5, rng, log)
    assert log == [("start", 1)] + [e for s in range(1, 5)
                                    for e in (("release", s), ("start", s + 1))] + [
        ("release", 5)]
    assert all(m == {"staleness_mean": 0.0, "staleness_max": 0.0} for m in metrics)


@pytest.mark.parametrize("stream", [False, True])
def test_drain_steps_hold_the_next_rollout_back(monkeypatch, stream):
    rng, log = random.Random(1), []
    pipeline, _ = pipeline_for(monkeypatch, rng, "fully_async", 2, stream, 6,
                               drains=lambda s: s % 3 == 0, log=log)
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


def test_a_failed_streamed_rollout_reaches_the_trainer_and_closes_the_loop(monkeypatch):
    run = fake_run("fully_async", 1, stream=True)
    fake = FakeStream(run, random.Random(0))
    closed = []

    def broken(weights):
        raise ValueError("engine gone")

    fake.advance, fake.close = broken, lambda: closed.append(True)
    monkeypatch.setattr(async_rollouts, "StepStream", lambda run, step_key: fake)
    pipeline = RolloutPipeline(run, 1, 3, lambda s: s, lambda s: False)
    with pytest.raises(RuntimeError, match="rollout producer failed") as err:
        pipeline.next(1)
    assert isinstance(err.value.__cause__, ValueError) and closed == [True]
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
