"""The policy's forward pass over token rows, as the update scores them: log-probs, values and
entropies aligned so that index t belongs to token t (`policy_outputs`), the LM head on the
scored columns only (`scored_columns`: the loss mask's) and in pieces along the sequence when a
batch's logits would be large, and `compute_logprobs`, the compiled pass that gives a batch's
old and reference log-probs exactly as the train step computes them.

Rows are split into micro-batches by stride (`split_rows`), so that each draws evenly from every
data shard of a row-sharded batch.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from agentic_jax.rl.losses import logprobs_and_entropy

Array = jax.Array


def cast_floats(tree, dtype: str | None):
    """Floating leaves cast to dtype (None: unchanged)."""
    if dtype is None:
        return tree
    cast = lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x
    return jax.tree.map(cast, tree)


def _shift_right(x: Array) -> Array:
    """[B, T-1, ...] made from prefixes <= t -> [B, T, ...] indexed by the predicted token."""
    pad = [(0, 0), (1, 0)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, pad)


def policy_outputs(
    model: nnx.Module,
    tokens: Array,
    positions: Array | None,
    segment_ids: Array | None,
    temperature: float,
    scored: Array | None = None,
) -> tuple[Array, Array | None, Array]:
    """(logprobs [B, T], values [B, T] | None, entropy [B, T]), float32, aligned so that index t
    belongs to token t chosen after prefix < t (index 0, which has no prefix, is 0).

    scored [B, N] int32 (`scored_columns`): the only columns whose log-prob and entropy are
    needed (the loss mask's); the LM head runs on those N alone and the other columns are 0
    (a padding column T is dropped).
    Prompts and tool outputs are most of an episode's tokens, and the head's [., V] logits
    are most of an update's memory traffic."""
    chex.assert_rank(tokens, 2)
    hidden = model.hidden_states(tokens, positions=positions, segment_ids=segment_ids)
    if scored is None:
        logprobs, entropy = _token_logprobs(model, hidden[:, :-1], tokens[:, 1:], temperature)
        logprobs, entropy = _shift_right(logprobs), _shift_right(entropy)
    else:
        logprobs, entropy = _scored_logprobs(model, hidden, tokens, scored, temperature)
    values = model.head_values(hidden)
    values = None if values is None else _shift_right(values[:, :-1].astype(jnp.float32))
    return logprobs, values, entropy


# The scored columns' count N comes in eighths of the row width T (rounded up to the longest
# row's), so that a run compiles few shapes of the step: prompts are a stable share of the rows.
SCORED_FRACTIONS = 8


def scored_columns(loss_mask: Array, sharding: Any = None) -> Array:
    """[B, T] loss mask -> [B, N] int32 (`policy_outputs`' ``scored``): each row's columns
    t >= 1 with mask > 0, in order, then T (no such column) as padding. N is the most any row
    has, rounded up to a multiple of T / SCORED_FRACTIONS. One scalar is read back to size it.
    sharding: the result's (the mask's rows'), if any."""
    t = loss_mask.shape[1]
    most = int(jax.device_get(_most_scored(loss_mask)))
    step = -(-t // SCORED_FRACTIONS)
    n = min(t, max(1, -(-most // step)) * step)
    return _scored_index(n, sharding)(loss_mask)


@jax.jit
def _most_scored(loss_mask: Array) -> Array:
    return (loss_mask[:, 1:] > 0).sum(axis=1).max(initial=0)


@functools.lru_cache(maxsize=None)
def _scored_index(n: int, sharding: Any):
    def index(loss_mask):
        t = loss_mask.shape[1]
        on = (loss_mask > 0).at[:, 0].set(False)  # token 0 has no prefix: never scored
        return jax.vmap(lambda row: jnp.nonzero(row, size=n, fill_value=t)[0])(on).astype(
            jnp.int32)

    return jax.jit(index) if sharding is None else jax.jit(index, out_shardings=sharding)


def _scored_logprobs(model: nnx.Module, hidden: Array, tokens: Array, scored: Array,
                     temperature: float) -> tuple[Array, Array]:
    """`policy_outputs`' (logprobs, entropy) [B, T] with the head run on the ``scored`` columns
    only: token t is scored from the hidden state at t - 1."""
    t = tokens.shape[1]
    chex.assert_equal_shape_prefix([scored, tokens], 1)
    take = jax.vmap(lambda x, i: x[jnp.clip(i, 0, t - 1)])
    logprobs, entropy = _token_logprobs(model, take(hidden, scored - 1), take(tokens, scored),
                                        temperature)
    # Padding columns (t) fall outside the row and are dropped.
    put = jax.vmap(lambda v, i: jnp.zeros((t,), v.dtype).at[i].set(v, mode="drop"))
    return put(logprobs, scored), put(entropy, scored)


# Logits of a batch are computed whole up to this many elements (256 MiB in float32), else in
# pieces along the sequence of about LOGITS_CHUNK_ELEMENTS each, each piece's logits recomputed
# in the backward pass: a 49k-token vocabulary's [B, T, V] logits, their log-softmax and their
# gradients otherwise dominate an update's memory (several GB for a 135M model).
FULL_LOGITS_MAX_ELEMENTS = 1 << 26
LOGITS_CHUNK_ELEMENTS = 1 << 24


def _token_logprobs(model: nnx.Module, hidden: Array, targets: Array,
                    temperature: float) -> tuple[Array, Array]:
    """(log p[target], entropy) [B, N], in float32, of the LM head on hidden [B, N, E]."""
    b, t, _ = hidden.shape
    vocab = model.cfg.vocab_size
    if b * t * vocab <= FULL_LOGITS_MAX_ELEMENTS:
        logits = model.head_logits(hidden).astype(jnp.float32) / temperature
        return logprobs_and_entropy(logits, targets)
    chunk = min(t, max(8, LOGITS_CHUNK_ELEMENTS // (b * vocab) // 8 * 8))
    pad = -t % chunk
    # [B, T, ...] -> [T / chunk, B, chunk, ...]: pieces along the sequence keep the batch axis
    # (and its sharding) whole.
    pieces = lambda x: jnp.swapaxes(
        jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)).reshape(
            b, -1, chunk, *x.shape[2:]), 0, 1)

    @jax.checkpoint
    def piece(args):
        h, y = args
        logits = model.head_logits(h).astype(jnp.float32) / temperature
        return logprobs_and_entropy(logits, y)

    logprobs, entropy = jax.lax.map(piece, (pieces(hidden), pieces(targets)))
    whole = lambda x: jnp.swapaxes(x, 0, 1).reshape(b, -1)[:, :t]
    return whole(logprobs), whole(entropy)


def context_mesh(mesh: Mesh | None):
    """``mesh`` as the context mesh while a forward pass is traced (None: no context). The
    Pallas attention kernels read it to run on each device's shard (`flash_attention`): a TPU
    refuses to lower them in a program over several devices otherwise."""
    if mesh is None:
        return contextlib.nullcontext()
    return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "temperature", "compute_dtype", "micro_batches", "mesh"),
)
def compute_logprobs(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens: Array,
    positions: Array | None = None,
    segment_ids: Array | None = None,
    *,
    temperature: float = 1.0,
    compute_dtype: str | None = None,
    micro_batches: int = 1,
    mesh: Mesh | None = None,
    scored: Array | None = None,
) -> tuple[Array, Array | None, Array]:
    """Token log-probs, values and entropies of `tokens` [B, T] under the model, exactly as the
    train step computes them (old / reference log-probs); `compute_dtype` as in make_train_step.
    Rows are processed `micro_batches` at a time to bound the [B, T, V] logits' memory.
    mesh: the mesh the arrays are sharded over, if any (`context_mesh`). scored: the columns
    whose log-probs and entropies are computed (`policy_outputs`; None: all)."""
    model = nnx.merge(graphdef, cast_floats(state, compute_dtype))
    inputs = (tokens, positions, segment_ids, scored)
    with context_mesh(mesh):
        if micro_batches == 1:
            return policy_outputs(model, *inputs[:3], temperature, scored)
        chunks = jax.tree.map(lambda x: split_rows(x, micro_batches), inputs)
        outs = jax.lax.map(lambda c: policy_outputs(model, *c[:3], temperature, c[3]), chunks)
    return jax.tree.map(merge_rows, outs)


def split_rows(x: Array, micro_batches: int) -> Array:
    """[B, ...] -> [M, B/M, ...] with micro-batch m = rows m, m+M, m+2M, ... so that each
    micro-batch draws evenly from every data shard of a row-sharded batch."""
    b = x.shape[0]
    if b % micro_batches:
        raise ValueError(f"batch size {b} is not divisible by micro_batches={micro_batches}")
    return jnp.swapaxes(x.reshape(b // micro_batches, micro_batches, *x.shape[1:]), 0, 1)


def merge_rows(x: Array) -> Array:
    """Inverse of split_rows: [M, B/M, ...] -> [B, ...]."""
    return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])
