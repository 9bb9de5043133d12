"""The engine in bfloat16: a float32 policy sampled in bfloat16 samples what the bfloat16 model
scores, the given weights stay untouched, and on CPU no program converts the KV pool or the
weights to float32 behind its back (XLA:CPU's bfloat16 scatter / gather / dynamic-slice / dot
did, at ten times the cost of a float32 step)."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.models.layers import dense
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine import paged_model as pm

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)
_RNG = np.random.default_rng(1)
PROMPTS = [_RNG.integers(3, 64, n).tolist() for n in (3, 9, 17, 30)]
NEW = 24


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(5))


def _bf16_model(model):
    cfg = dataclasses.replace(CFG, dtype="bfloat16", param_dtype="bfloat16")
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    state = jax.tree.map(lambda x: x.astype(jnp.bfloat16), nnx.state(model))
    return nnx.merge(graphdef, state)


def _greedy(model, dtype):
    engine = Engine(model, EngineConfig(num_slots=2, page_size=4, max_seq_len=64, dtype=dtype,
                                        decode_steps=8, sampling=SamplingParams(0.0)))
    keys = jax.random.split(jax.random.key(0), len(PROMPTS))
    for i, p in enumerate(PROMPTS):
        engine.submit(Request(i, tuple(p), NEW, keys[i]))
    return {e.request_id: e for e in engine.run()}, engine


@pytest.fixture(scope="module")
def sampled(model):
    return _greedy(model, "bfloat16")


def test_a_float32_policy_sampled_in_bfloat16_follows_the_bfloat16_model(model, sampled):
    events, engine = sampled
    reference = _bf16_model(model)
    for i, prompt in enumerate(PROMPTS):
        tokens = events[i].tokens
        assert len(tokens) == NEW
        seq = jnp.asarray([prompt + tokens[:-1]])
        logits = reference(seq)[0, len(prompt) - 1:].astype(jnp.float32)
        logprobs = jax.nn.log_softmax(logits)
        chosen = logprobs[jnp.arange(NEW), jnp.asarray(tokens)]
        # Greedy: each token is the bfloat16 model's argmax, up to bfloat16 rounding of near ties.
        assert np.all(np.asarray(logprobs.max(-1) - chosen) < 0.05)
        np.testing.assert_allclose(events[i].logprobs, chosen, atol=0.05)
    # What the engine computes in, and what it was given.
    assert engine.model_cfg.dtype == "bfloat16"
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(engine.params))


def test_bfloat16_engines_of_a_float32_and_a_bfloat16_model_agree(model, sampled):
    events, _ = sampled
    again, engine = _greedy(_bf16_model(model), "auto")
    assert engine.model_cfg.dtype == "bfloat16"
    assert {i: e.tokens for i, e in again.items()} == {i: e.tokens for i, e in events.items()}


def test_float32_engine_is_unchanged_by_the_option(model):
    auto, _ = _greedy(model, "auto")
    f32, engine = _greedy(model, "float32")
    assert engine.model_cfg is model.cfg
    assert {i: e.tokens for i, e in auto.items()} == {i: e.tokens for i, e in f32.items()}
    for i in auto:
        np.testing.assert_array_equal(auto[i].logprobs, f32[i].logprobs)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype"):
        EngineConfig(dtype="float16")


def _float32_shapes(hlo: str) -> set[tuple[int, ...]]:
    return {tuple(int(d) for d in m.split(",") if d)
            for m in re.findall(r"f32\[([0-9,]*)\]", hlo)}


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's bfloat16 lowering")
@pytest.mark.parametrize("layer_arrays", [False, True], ids=["stacked", "layer-arrays"])
def test_bfloat16_decode_never_widens_the_pool_or_the_weights(model, layer_arrays):
    # Shapes large enough that XLA:CPU sends the matmuls to its library, as a real model's.
    cfg = dataclasses.replace(CFG, vocab_size=512, hidden_size=128, intermediate_size=384,
                              num_layers=3, head_dim=32)
    engine = Engine(Transformer(cfg, rngs=nnx.Rngs(0)),
                    EngineConfig(num_slots=2, page_size=4, max_seq_len=64, dtype="bfloat16",
                                 layer_arrays=layer_arrays))
    runner = engine.runner
    assert runner.kv.k.dtype == jnp.uint16        # bfloat16 bit patterns
    captured = {}
    decode = pm.decode_jit

    def capture(*args, **kwargs):
        captured["hlo"] = decode.lower(*args, **kwargs).compile().as_text()
        return decode(*args, **kwargs)

    pm.decode_jit = capture
    try:
        engine.submit(Request(0, (5, 6, 7), 4, jax.random.key(0)))
        engine.run()
    finally:
        pm.decode_jit = decode
    wide = _float32_shapes(captured["hlo"])
    # The pool, the embedding, the head and every weight matrix of every layer (norm scales are
    # widened, and small).
    weights = runner._weights
    assert weights.head.shape == (128, 512)            # the tied head, transposed
    assert len(weights.layers or ()) == (cfg.num_layers if layer_arrays else 0)
    checked = [("pool", runner.kv.k), ("head", weights.head)]
    checked += [(jax.tree_util.keystr(path), leaf)
                for path, leaf in jax.tree_util.tree_leaves_with_path(weights.state)
                if not (leaf.ndim == 2 and "blocks" in jax.tree_util.keystr(path))]
    checked += [(f"layer {i}", leaf) for i, layer in enumerate(weights.layers or ())
                for leaf in layer]
    for name, array in checked:
        if array.ndim < 2:
            continue
        shape = tuple(array.shape)
        layer = shape[1:] if "blocks" in name or name == "pool" else shape
        assert shape not in wide and layer not in wide, f"{name} {shape} is widened"


def test_dense_in_bfloat16_accumulates_in_float32_and_returns_bfloat16():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4, 256)), jnp.bfloat16)
    kernel = jnp.asarray(rng.standard_normal((256, 64)), jnp.bfloat16)
    out = dense(x, kernel)
    assert out.dtype == jnp.bfloat16
    exact = np.asarray(x, np.float64) @ np.asarray(kernel, np.float64)
    # Rounded once at the end: within a bfloat16 half-ulp (plus float32 summation) of exact.
    np.testing.assert_allclose(np.asarray(out, np.float64), exact, rtol=2 ** -8, atol=1e-3)
    if jax.default_backend() == "cpu":
        hlo = jax.jit(dense).lower(x, kernel).compile().as_text()
        assert (256, 64) not in _float32_shapes(hlo)
