"""The sharded train step and `compute_logprobs` lower for CUDA and TPU on eight devices with the
Pallas flash-attention kernels: each kernel runs on its device's shard (a shard_map under the
step's mesh), which Mosaic requires and which keeps XLA from gathering the batch for Triton."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.parallel import make_mesh
from agentic_jax.rl import (
    LossConfig, compute_logprobs, init_opt_state, make_optimizer, make_train_step,
    train_shardings)
from tests.kernels.lowering import ACCELERATORS, abstract, lowered_text, traced_for

B, T = 16, 128
SHARD_MAP = "sdy.manual_computation"


def _setup(mesh):
    cfg = get_preset("tiny-0.2m", vocab_size=256, head_dim=128, attention_impl="pallas",
                     value_head=True, dtype="bfloat16", param_dtype="float32")
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    optimizer = make_optimizer(1e-3, warmup_steps=0, total_steps=10, weight_decay=0.01)
    shardings = train_shardings(state, optimizer, mesh)
    opt_state = jax.eval_shape(lambda s: init_opt_state(optimizer, s), state)
    return graphdef, optimizer, shardings, state, opt_state


def _batch(sharding):
    def field(dtype):
        return jax.ShapeDtypeStruct((B, T), dtype, sharding=sharding)

    # The LM head on 48 scored columns of each row (`forward.scored_columns`).
    scored = jax.ShapeDtypeStruct((B, 48), jnp.int32, sharding=sharding)
    return dict(tokens=field(jnp.int32), positions=field(jnp.int32), segment_ids=field(jnp.int32),
                scored=scored, **{name: field(jnp.float32) for name in (
                    "loss_mask", "old_logprobs", "advantages", "returns", "old_values",
                    "ref_logprobs")})


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
def test_sharded_train_step_lowers(backend, platform, custom_call):
    """data x fsdp x tensor = 2 x 2 x 2, two micro-batches, bfloat16 compute over float32
    weights, packed rows (segment ids), the LM head on scored columns, a value head and a KL
    term."""
    mesh = make_mesh(2, 2, 2)
    graphdef, optimizer, shardings, state, opt_state = _setup(mesh)
    with traced_for(backend):
        step = make_train_step(graphdef, optimizer, LossConfig(kl_coef=0.05, value_clip=0.2),
                               mesh=mesh, micro_batches=2, shardings=shardings,
                               compute_dtype="bfloat16")
        text = lowered_text(step, abstract(state, shardings.state),
                            abstract(opt_state, shardings.opt_state), _batch(shardings.batch),
                            platform=platform)
    assert text.count(custom_call) == 3  # forward, dq, dkv (the layers are scanned)
    assert SHARD_MAP in text


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
def test_sharded_logprobs_lower(backend, platform, custom_call):
    mesh = make_mesh(1, 8, 1)
    graphdef, _, shardings, state, _ = _setup(mesh)
    tokens = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=shardings.batch)
    with traced_for(backend):
        text = lowered_text(compute_logprobs, graphdef, abstract(state, shardings.state),
                            tokens, tokens, platform=platform, compute_dtype="bfloat16",
                            mesh=mesh)
    assert text.count(custom_call) == 1 and SHARD_MAP in text
