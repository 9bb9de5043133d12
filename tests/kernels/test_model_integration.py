"""A tiny model forward with attention_impl="pallas" (interpret mode on CPU) matches "xla"."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from attention_cases import rel_error


def test_pallas_forward_matches_xla():
    cfg = ModelConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, max_seq_len=64,
    )  # fmt: skip
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 24)), jnp.int32)
    outputs = {}
    for impl in ("xla", "pallas"):
        model = Transformer(dataclasses.replace(cfg, attention_impl=impl), rngs=nnx.Rngs(0))
        graphdef, state = nnx.split(model)
        forward = lambda state, tokens: nnx.merge(graphdef, state)(tokens)  # noqa: B023, E731
        uses_kernel = "pallas_call" in str(jax.make_jaxpr(forward)(state, tokens))
        assert uses_kernel == (impl == "pallas")
        outputs[impl] = jax.tree.leaves(forward(state, tokens))
    for pallas_leaf, xla_leaf in zip(outputs["pallas"], outputs["xla"]):
        assert rel_error(pallas_leaf, xla_leaf) <= 1e-5
