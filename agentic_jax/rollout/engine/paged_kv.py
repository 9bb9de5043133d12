"""The paged KV cache and the model over it.

The pool holds K and V of every layer as [L, Hkv, P, page_size, D]. A sequence's KV lives in the
pages of its block table (row of int32 [B, W]); position p sits in page table[p // page_size] at
offset p % page_size. A token's K/V is written before its queries read, so attention masked by
position (keys <= the query's position) never sees a stale slot. The model's own blocks run
over it, with `PagedLayer` as their attention's key/value source.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding

from agentic_jax.kernels import cpu_native
from agentic_jax.kernels.paged_attention import (
    PagePairs,
    as_bits,
    from_bits,
    paged_attention_xla,
    paged_decode_attention,
    ragged_decode_attention_xla,
    ragged_multi_query_attention_xla,
)
from agentic_jax.models import ModelConfig
from agentic_jax.models.partitioning import logical_to_mesh_spec
from agentic_jax.models.rope import rope_inverse_frequencies


@struct.dataclass
class PagedKV:
    """k, v: [L, Hkv, P, page_size, D] in the model's compute dtype (stored as `as_bits`)."""

    k: jax.Array
    v: jax.Array

    @property
    def page_size(self) -> int:
        return self.k.shape[3]

    @property
    def num_pages(self) -> int:
        return self.k.shape[2]


def init_paged_kv(cfg: ModelConfig, num_pages: int, page_size: int,
                  mesh: Mesh | None = None) -> PagedKV:
    """A zero pool: uncommitted on the default device, or created in place over ``mesh`` (the
    devices the engine samples on) with kv heads over its "tensor" axis where they divide."""
    shape = (cfg.num_layers, cfg.num_kv_heads, num_pages, page_size, cfg.head_dim)

    def zeros() -> PagedKV:
        return PagedKV(k=as_bits(jnp.zeros(shape, cfg.compute_dtype)),
                       v=as_bits(jnp.zeros(shape, cfg.compute_dtype)))

    if mesh is None:
        return zeros()
    spec = logical_to_mesh_spec(("layers", "kv_heads", None, None, "head_dim"), shape=shape,
                                mesh=mesh)
    return jax.jit(zeros, out_shardings=NamedSharding(mesh, spec))()


class ChunkRows(NamedTuple):
    """Prefill chunks run in the same forward as a decode step (`forward_paged`'s ``chunk``,
    vLLM's mixed batches): tokens / positions int32 [R, C], valid bool [R, C] (the rows' real
    tokens), tables int32 [R, W] (each row's block table)."""

    tokens: jax.Array
    positions: jax.Array
    valid: jax.Array
    tables: jax.Array


@dataclasses.dataclass(frozen=True)
class PagedLayer:
    """One layer of the page pool as the attention's `KVStore` (`models.attention.KVStore`).

    k, v: the pool of every layer [L, Hkv, P, page_size, D] (`as_bits`); layer: this one's
    index. page / offset int32 [B, T]: where each token's K/V goes (page == P: nowhere).
    Attention reads the page ``pairs`` when given (XLA, cost by real length; a decode step,
    T == 1, or a speculative one, T > 1); else for a decode step with ``decode_impl``
    "native" the CPU kernel (`kernels.cpu_native.paged_decode`, the pool read in place), with
    another `paged_decode_attention`, and the block tables [B, W] for a chunk.

    With ``chunk`` (`ChunkRows`) the layer's tokens are one flat row [1, N]: the decode step's
    N - R * C rows, then the chunk rows' R * C tokens. All write their K/V first; the decode
    rows then attend as above, the chunk's tokens over their own rows' block tables.
    """

    k: jax.Array
    v: jax.Array
    layer: jax.Array | int
    page: jax.Array
    offset: jax.Array
    block_tables: jax.Array
    dtype: jnp.dtype
    pairs: PagePairs | None = None
    decode_impl: str | None = None
    chunk: ChunkRows | None = None

    def attend(self, q: jax.Array, k: jax.Array, v: jax.Array,
               positions: jax.Array) -> tuple[jax.Array, PagedLayer]:
        k, v = as_bits(k.astype(self.dtype)), as_bits(v.astype(self.dtype))
        pool_k = self.k.at[self.layer, :, self.page, self.offset].set(k, mode="drop")
        pool_v = self.v.at[self.layer, :, self.page, self.offset].set(v, mode="drop")
        num_pages = pool_k.shape[2]
        if self.chunk is None:
            out = self._read(q, positions, self.page[:, 0] < num_pages, pool_k, pool_v)
        else:
            rows, width = self.chunk.tokens.shape
            n, (heads, dim) = q.shape[1] - rows * width, q.shape[2:]
            decoded = self._read(q[0, :n, None], positions[0, :n, None],
                                 self.page[0, :n] < num_pages, pool_k, pool_v)
            chunk = paged_attention_xla(
                q[0, n:].reshape(rows, width, heads, dim), *self._layer(pool_k, pool_v),
                self.chunk.tables, self.chunk.positions)
            out = jnp.concatenate([decoded.reshape(1, n, heads, dim),
                                   chunk.reshape(1, rows * width, heads, dim)], axis=1)
        return out, dataclasses.replace(self, k=pool_k, v=pool_v)

    def _layer(self, pool_k: jax.Array, pool_v: jax.Array) -> tuple[jax.Array, jax.Array]:
        """This layer's pages [Hkv, P, page_size, D] of K and V."""
        return (jax.lax.dynamic_index_in_dim(pool_k, self.layer, keepdims=False),
                jax.lax.dynamic_index_in_dim(pool_v, self.layer, keepdims=False))

    def _read(self, q: jax.Array, positions: jax.Array, live: jax.Array, pool_k: jax.Array,
              pool_v: jax.Array) -> jax.Array:
        """q [B, T, Hq, D] at positions [B, T] over the pool -> [B, T, Hq, D]; live bool [B]:
        the rows whose first token is valid (the native kernel skips the others)."""
        if self.decode_impl == "native" and self.pairs is None and q.shape[1] == 1:
            # The pool read in place, each row to its own length (`kernels.cpu_native`).
            lengths = jnp.where(live, positions[:, 0] + 1, 0)
            out = cpu_native.paged_decode(q[:, 0], pool_k, pool_v, self.layer,
                                          self.block_tables, lengths)[:, None]
        elif self.pairs is not None and q.shape[1] > 1:
            out = ragged_multi_query_attention_xla(q, pool_k, pool_v, self.pairs, positions,
                                                   layer=self.layer)
        elif self.pairs is not None:  # pages gathered from the whole pool: no layer slice copy
            out = ragged_decode_attention_xla(q[:, 0], pool_k, pool_v, self.pairs,
                                              positions[:, 0], layer=self.layer)[:, None]
        else:
            layer_k, layer_v = self._layer(pool_k, pool_v)
            if self.decode_impl is None:
                out = paged_attention_xla(q, layer_k, layer_v, self.block_tables, positions)
            else:
                out = paged_decode_attention(q[:, 0], layer_k, layer_v, self.block_tables,
                                             positions[:, 0] + 1, impl=self.decode_impl)[:, None]
        return out


def forward_paged(model, tokens, positions, valid, kv: PagedKV, block_tables, *,
                  decode_impl: str | None = None, pairs: PagePairs | None = None,
                  layers: tuple[tuple[jax.Array, ...], ...] | None = None,
                  chunk: ChunkRows | None = None):
    """tokens / positions int32 [B, T], valid bool [B, T] -> (hidden [B, T, E], kv).

    The model's own blocks over the pool (`PagedLayer`): valid tokens write their K/V at their
    positions, invalid ones write nothing. The blocks' weights: ``layers``
    (`paged_model.EngineWeights.layers`, run unrolled) when given, else the model's stacked
    blocks in a scan, unpacked from `as_bits` one layer at a time.

    ``chunk`` (`ChunkRows`, with a decode step: T == 1): prefill chunks whose tokens run in the
    same forward, one pass over the weights for both (their K/V written, their hidden states
    dropped); the result is the decode rows' alone.
    """
    cfg = model.cfg
    page_size, num_pages = kv.page_size, kv.num_pages

    def pages(tables, positions, valid):   # out of range where invalid: the write is dropped
        page = jnp.take_along_axis(tables, positions // page_size, axis=1)
        return jnp.where(valid, page, num_pages)

    page = pages(block_tables, positions, valid)
    decode_shape = tokens.shape
    if chunk is not None:
        if decode_shape[1] != 1:
            raise ValueError(f"forward_paged: a chunk rides with a decode step (one token a "
                             f"row), not with {decode_shape[1]}")
        flat = lambda a, b: jnp.concatenate([a.reshape(1, -1), b.reshape(1, -1)], axis=1)
        page = flat(page, pages(chunk.tables, chunk.positions, chunk.valid))
        tokens, positions = flat(tokens, chunk.tokens), flat(positions, chunk.positions)
    inv_freq = rope_inverse_frequencies(cfg)
    graphdef, block_state = nnx.split(model.blocks)
    leaves, treedef = jax.tree.flatten(block_state)
    if layers is not None and len(layers[0]) != len(leaves):
        raise ValueError(f"forward_paged: {len(layers[0])} weights a layer for "
                         f"{len(leaves)} block parameters")
    offset = positions % page_size

    def body(carry, layer_inputs):
        x, pool_k, pool_v = carry
        layer_leaves, layer = layer_inputs
        block = nnx.merge(graphdef, jax.tree.unflatten(treedef, map(from_bits, layer_leaves)))
        store = PagedLayer(pool_k, pool_v, layer, page, offset, block_tables, cfg.compute_dtype,
                           pairs, decode_impl, chunk)
        x, store = block(x, positions, inv_freq, kv_store=store)
        return (x, store.k, store.v), None

    x = from_bits(as_bits(model.embed[...])[tokens]).astype(cfg.compute_dtype)
    if layers is None:
        (x, pool_k, pool_v), _ = jax.lax.scan(
            body, (x, kv.k, kv.v), ([as_bits(leaf) for leaf in leaves],  # (engine_weights are)
                                    jnp.arange(cfg.num_layers)),
            unroll=min(cfg.scan_unroll, cfg.num_layers))
    else:
        carry = (x, kv.k, kv.v)
        for layer, layer_leaves in enumerate(layers):
            carry, _ = body(carry, (list(layer_leaves), layer))
        x, pool_k, pool_v = carry
    if chunk is not None:
        x = x[0, :decode_shape[0]].reshape(*decode_shape, -1)
    return model.final_norm(x), PagedKV(k=pool_k, v=pool_v)
