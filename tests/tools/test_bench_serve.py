"""tools/bench_serve.py: the long requests' context and the settings it serves with, without a
server."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools"))

import bench_serve  # noqa: E402


class WordTokenizer:
    def encode(self, text):
        return text.split()


def test_the_long_context_holds_the_tokens_asked_for():
    assert bench_serve._context(WordTokenizer(), 0) == ""
    text = bench_serve._context(WordTokenizer(), 100)
    assert 100 <= len(text.split()) < 100 + 17 and text.endswith(".\n")


def test_the_served_config_takes_the_length_budget_and_preset(monkeypatch):
    seen = {}

    def load_policy(config, workdir, overrides=None):
        seen.update(config=config, workdir=workdir, overrides=overrides)
        return type("Loaded", (), {"policy": "policy"})()

    import agentic_jax.serve
    monkeypatch.setattr(agentic_jax.serve, "load_policy", load_policy)
    assert bench_serve._policy(None, max_length=900, step_tokens=256, preset="tiny-1m") == "policy"
    config = seen["config"]
    assert (config.training.max_length, config.rollout.step_tokens, config.model.preset) == \
        (900, 256, "tiny-1m")
    bench_serve._policy("runs/x", max_length=900, step_tokens=256)
    assert seen["workdir"] == "runs/x"
    assert seen["overrides"] == {"rollout.step_tokens": 256, "training.max_length": 900}
