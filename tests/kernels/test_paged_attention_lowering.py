"""The paged decode kernels lower for CUDA (Triton) and TPU (Mosaic) at the engine's shapes, and
shapes a compiled kernel refuses take the XLA path instead of failing to lower."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from agentic_jax.kernels import paged_decode_attention
from agentic_jax.kernels.paged_attention import pallas_decode_fits
from tests.kernels.lowering import ACCELERATORS, lowered_text, traced_for

# name: (rows, query heads, kv heads, head dim, page size, table width, dtype),
#       {platform: kernel calls in the lowered program}
CASES = {
    # SmolLM2-135M's heads; Mosaic's paged kernel takes only head dims that are multiples of 128.
    "smollm2_heads": ((8, 9, 3, 64, 16, 6, jnp.bfloat16), {"cuda": 1, "tpu": 0}),
    "qwen2.5_1.5b_heads": ((8, 12, 2, 128, 16, 64, jnp.bfloat16), {"cuda": 1, "tpu": 1}),
    # A table narrower than a compute block and not a power of two (Triton needs one).
    "narrow_table_mha": ((4, 8, 8, 128, 16, 3, jnp.float32), {"cuda": 1, "tpu": 1}),
    # Neither kernel takes a head dim of 80: the XLA path serves it.
    "head_dim_80": ((4, 8, 2, 80, 16, 8, jnp.bfloat16), {"cuda": 0, "tpu": 0}),
}


@pytest.mark.parametrize("backend, platform, custom_call", ACCELERATORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_lowers_for_accelerators(backend, platform, custom_call, name):
    (rows, heads, kv_heads, head_dim, page_size, width, dtype), kernel_calls = CASES[name]
    q = jax.ShapeDtypeStruct((rows, heads, head_dim), dtype)
    pages = jax.ShapeDtypeStruct((kv_heads, 40, page_size, head_dim), dtype)
    tables = jax.ShapeDtypeStruct((rows, width), jnp.int32)
    lengths = jax.ShapeDtypeStruct((rows,), jnp.int32)
    decode = jax.jit(lambda *args: paged_decode_attention(*args, impl="pallas"))
    with traced_for(backend):
        text = lowered_text(decode, q, pages, pages, tables, lengths, platform=platform)
    assert text.count(custom_call) == kernel_calls[platform]
    assert pallas_decode_fits(head_dim, page_size, backend) == bool(kernel_calls[platform])


def test_pallas_decode_fits():
    assert pallas_decode_fits(64, 16, "gpu") and pallas_decode_fits(128, 8, "cuda")
    assert not pallas_decode_fits(80, 16, "gpu") and not pallas_decode_fits(64, 12, "gpu")
    assert pallas_decode_fits(128, 12, "tpu") and pallas_decode_fits(256, 16, "tpu")
    assert not pallas_decode_fits(64, 16, "tpu")
