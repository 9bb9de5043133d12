"""The engine's device programs (`paged_model.prefill_jit`, `decode_jit`, `copy_pages_jit`, the
jits `ModelRunner` calls) lower for CUDA and TPU with the Pallas decode kernel, a tiny model in
bfloat16 at the runner's bucketed shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from agentic_jax.kernels.paged_attention import PagePairs
from agentic_jax.models import Transformer, get_preset
from agentic_jax.parallel import make_mesh, param_shardings
from agentic_jax.rollout.engine import paged_model as pm
from agentic_jax.rollout.engine.paged_kv import ChunkRows, init_paged_kv
from tests.kernels.lowering import ACCELERATORS, abstract, lowered_text, traced_for

ROWS, CHUNK, TABLE, PAGES, PAGE_SIZE, PAIRS = 8, 16, 8, 64, 16, 64


def _i32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.int32)


def _model(head_dim: int, num_kv_heads: int = 2):
    """(graphdef, abstract state, config) of a tiny bfloat16 model, nothing allocated."""
    cfg = get_preset("tiny-0.2m", vocab_size=256, head_dim=head_dim, num_kv_heads=num_kv_heads,
                     dtype="bfloat16", param_dtype="bfloat16")
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    return graphdef, state, cfg


def _decode_args(rows: int):
    slots = pm.SlotState(_i32(rows), _i32(rows), _i32(rows),
                         jax.ShapeDtypeStruct((rows,), bool),
                         jax.ShapeDtypeStruct((rows, 2), jnp.uint32), _i32(rows, 4))
    sampling = jax.ShapeDtypeStruct((rows,), jnp.float32)
    return (slots, _i32(rows, TABLE), PagePairs(_i32(PAIRS), _i32(PAIRS), _i32(PAIRS)),
            sampling, sampling, _i32(), None)


def _decode_text(graphdef, weights, kv, platform: str) -> str:
    return lowered_text(pm.decode_jit, graphdef, weights, kv, *_decode_args(ROWS),
                        platform=platform, num_steps=4, top_k=0, use_filter=True,
                        attention_impl="pallas")


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
def test_prefill_decode_and_page_copies_lower(backend, platform, custom_call):
    graphdef, state, cfg = _model(head_dim=128)
    with traced_for(backend):
        assert pm.resolve_decode_impl("auto")[0] == "pallas"
        weights = jax.eval_shape(lambda s: pm.engine_weights(s, cfg), state)
        kv = jax.eval_shape(lambda: init_paged_kv(cfg, PAGES, PAGE_SIZE))
        # Nothing on an accelerator is held as CPU bfloat16 bit patterns (`as_bits`).
        assert {x.dtype for x in jax.tree.leaves((weights, kv))} == {jnp.dtype(jnp.bfloat16)}
        prefill = lowered_text(pm.prefill_jit, graphdef, weights, kv, _i32(4, CHUNK), _i32(4),
                               _i32(4), _i32(4, TABLE), platform=platform)
        decode = _decode_text(graphdef, weights, kv, platform)
        copies = lowered_text(pm.copy_pages_jit, kv, _i32(4), _i32(4), platform=platform)
    assert custom_call not in prefill  # chunks attend through the XLA gather path
    assert decode.count(custom_call) == 1  # one kernel in the scanned block
    assert custom_call not in copies


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
def test_decode_of_head_dim_64_lowers(backend, platform, custom_call):
    """SmolLM2's and Qwen2.5-0.5B's head dim: Triton on GPU, the XLA path on TPU (Mosaic's
    paged kernel needs a multiple of 128)."""
    graphdef, state, cfg = _model(head_dim=64)
    with traced_for(backend):
        weights = jax.eval_shape(lambda s: pm.engine_weights(s, cfg), state)
        kv = jax.eval_shape(lambda: init_paged_kv(cfg, PAGES, PAGE_SIZE))
        decode = _decode_text(graphdef, weights, kv, platform)
    assert decode.count(custom_call) == (1 if platform == "cuda" else 0)


@pytest.mark.parametrize("backend, platform, custom_call", [
    ACCELERATORS[0],
    pytest.param(*ACCELERATORS[1].values, id="tpu", marks=pytest.mark.xfail(
        strict=True, raises=NotImplementedError,
        reason="Mosaic kernels cannot be automatically partitioned: the decode program over "
               "a sampler mesh of several devices needs the paged kernel in a shard_map")),
])
def test_decode_over_a_sampler_mesh_lowers(backend, platform, custom_call):
    """A disaggregated sampler's layout (`Placement.rollout_mesh`): weights and pool split over
    four devices on the "tensor" axis."""
    graphdef, state, cfg = _model(head_dim=128, num_kv_heads=4)
    mesh = make_mesh(1, 1, 4, devices=jax.devices()[:4])
    with traced_for(backend):
        weights = jax.eval_shape(lambda s: pm.engine_weights(s, cfg), state)
        weights = weights._replace(state=abstract(weights.state, param_shardings(state, mesh)))
        kv = init_paged_kv(cfg, PAGES, PAGE_SIZE, mesh)
        kv = abstract(kv, jax.tree.map(lambda x: x.sharding, kv))
        decode = _decode_text(graphdef, weights, kv, platform)
    assert decode.count(custom_call) == 1


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
def test_speculative_decode_lowers(backend, platform, custom_call):
    """The program `accelerator_report.py --checks=speculative` compiles: k = 4 prompt-lookup
    drafts verified a step, attention of several queries a row over the page pairs (the XLA
    path, so no paged kernel in it), SmolLM2's head dim."""
    graphdef, state, cfg = _model(head_dim=64)
    with traced_for(backend):
        weights = jax.eval_shape(lambda s: pm.engine_weights(s, cfg), state)
        kv = jax.eval_shape(lambda: init_paged_kv(cfg, PAGES, PAGE_SIZE))
        text = lowered_text(pm.decode_jit, graphdef, weights, kv, *_decode_args(ROWS),
                            _i32(ROWS, 512), platform=platform, num_steps=4, top_k=0,
                            use_filter=False, attention_impl="pallas", speculative_tokens=4)
    assert custom_call not in text
    assert "tensor<8x20xi32>" in text  # num_steps x (k + 1) tokens a row come back


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
def test_mixed_prefill_decode_lowers(backend, platform, custom_call):
    """A decode program with a prefill chunk in its first step (`EngineConfig.mixed_prefill`):
    that step's decode rows read through the paged kernel and the chunk through the XLA
    gather path, then the loop's steps as before."""
    graphdef, state, cfg = _model(head_dim=128)
    chunk = ChunkRows(_i32(1, CHUNK), _i32(1, CHUNK), jax.ShapeDtypeStruct((1, CHUNK), bool),
                      _i32(1, TABLE))
    with traced_for(backend):
        weights = jax.eval_shape(lambda s: pm.engine_weights(s, cfg), state)
        kv = jax.eval_shape(lambda: init_paged_kv(cfg, PAGES, PAGE_SIZE))
        text = lowered_text(pm.decode_jit, graphdef, weights, kv, *_decode_args(ROWS), None,
                            chunk, platform=platform, num_steps=4, top_k=0, use_filter=False,
                            attention_impl="pallas")
    assert text.count(custom_call) == 2  # the mixed first step's kernel and the loop's
