"""The engine's device programs: prefill and decode over the paged KV cache (`paged_kv`), and
the weights as they take them.

Slot state follows the "feed the last token" convention: ``length`` positions have K/V in the
pool and ``last_token`` (at position ``length``) has not been run yet. A decode step runs it,
writes its K/V, and samples the token at position length + 1 with fold_in(key, length + 1):
a token's draw depends on its request's key and its position alone, not on batching or
scheduling.

All programs are module-level jits with the graph definition static and the pool donated, so
engines of equal models share compilations and decoding allocates no new cache memory.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from agentic_jax.kernels import cpu_native
from agentic_jax.kernels.paged_attention import PagePairs, as_bits, from_bits
from agentic_jax.models import ModelConfig
from agentic_jax.models.layers import dense
from agentic_jax.rollout.engine import speculative
from agentic_jax.rollout.engine.paged_kv import ChunkRows, PagedKV, forward_paged
from agentic_jax.rollout.sampling import sample_tokens, top_logprobs as top_k_logprobs


def with_dtype(graphdef: nnx.GraphDef, params: nnx.State, cfg: ModelConfig, dtype: str
               ) -> tuple[nnx.GraphDef, ModelConfig]:
    """The graph definition and config of the same model computing in ``dtype`` and keeping
    its weights in it ("auto": the model's own settings), e.g. a float32 policy sampled in
    bfloat16; its weights are `engine_weights`."""
    if dtype == "auto" or dtype == cfg.dtype == cfg.param_dtype:
        return graphdef, cfg
    new_cfg = dataclasses.replace(cfg, dtype=dtype, param_dtype=dtype)
    model_type = type(nnx.merge(graphdef, params))
    new_graphdef, abstract = nnx.split(nnx.eval_shape(lambda: model_type(new_cfg,
                                                                         rngs=nnx.Rngs(0))))
    if jax.tree.structure(abstract) != jax.tree.structure(params):
        raise ValueError(f"rollout engine: cannot compute {model_type.__name__} in {dtype}: "
                         f"its state does not rebuild from its config")
    return new_graphdef, new_cfg


class EngineWeights(NamedTuple):
    """The weights as the engine's programs take them (`engine_weights`).

    state: the model's state, floating weights in the engine's dtype as `as_bits`; its stacked
      blocks are empty placeholders when ``layers`` holds them.
    layers: with ``layer_arrays`` on CPU, the blocks' leaves one layer at a time (a tuple per
      layer, in the order of the stacked state's leaves); None otherwise.
    head: a 16-bit tied LM head as its own [E, V] matrix (`head_weights`), or None.
    """

    state: nnx.State
    layers: tuple[tuple[jax.Array, ...], ...] | None
    head: jax.Array | None


def engine_weights(params: nnx.State, cfg: ModelConfig, *,
                   layer_arrays: bool = False) -> EngineWeights:
    """The weights as the engine's programs take them: floating ones in ``cfg``'s parameter
    dtype, stored as `as_bits`, converted once per `update_params`, not in every call.

    With ``layer_arrays`` on CPU (`EngineConfig.layer_arrays`) the stacked blocks are split
    into one array per layer, and the programs run the layers unrolled: XLA:CPU copies a
    layer's slice of a stacked weight out of the stack before a matmul reads it (a dynamic
    slice inside a scan and a static slice unrolled alike); a separate array is read in place
    (a float32 SmolLM2 decode step 76 -> 69 ms). The split costs a copy of the
    blocks while the engine holds weights (`sleep` drops it) and the unrolled programs' larger
    code. Otherwise, and always on GPU / TPU, the programs scan over the stack.
    """
    def prepare(x):
        if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != cfg.weight_dtype:
            x = x.astype(cfg.weight_dtype)
        return as_bits(x)

    state = jax.tree.map(prepare, params)
    head = head_weights(state, cfg)
    if not layer_arrays or jax.default_backend() != "cpu":
        return EngineWeights(state, None, head)
    stacked = jax.tree.leaves(state["blocks"])
    layers = tuple(tuple(leaf[i] for leaf in stacked) for i in range(cfg.num_layers))
    state["blocks"] = jax.tree.map(lambda x: jnp.zeros((0,), x.dtype), state["blocks"])
    return EngineWeights(state, layers, head)


def head_weights(state: nnx.State, cfg: ModelConfig) -> jax.Array | None:
    """A 16-bit tied LM head as its own [E, V] matrix (`as_bits`), or None (the model's head).
    XLA:CPU has no bfloat16 matmul against a transposed operand: through ``embed.T`` it widens
    the whole table to float32 in every call and multiplies in float32."""
    if (not cfg.tie_word_embeddings or jnp.dtype(cfg.compute_dtype).itemsize >= 4
            or jax.default_backend() != "cpu"):
        return None
    return as_bits(jnp.transpose(from_bits(state["embed"][...])).astype(cfg.compute_dtype))


def _merge(graphdef: nnx.GraphDef, weights: EngineWeights):
    """The model over `engine_weights`: all but the blocks and the embedding back in their
    dtype (`paged_kv.forward_paged` unpacks a layer at a time, and the embedded rows; a 16-bit tied
    head is read from ``weights.head`` on CPU)."""
    unpacked = {name: sub if name in ("blocks", "embed") else jax.tree.map(from_bits, sub)
                for name, sub in weights.state.items()}
    return nnx.merge(graphdef, nnx.State(unpacked))


class SlotState(NamedTuple):
    """Per decode slot [S]: last_token, length (positions with K/V), budget (tokens it may still
    generate), live (decoding), keys (uint32 PRNG key data [S, 2]), stop_ids [S, K] (pad -1)."""

    last_token: jax.Array
    length: jax.Array
    budget: jax.Array
    live: jax.Array
    keys: jax.Array
    stop_ids: jax.Array


class DecodeOut(NamedTuple):
    """tokens / logprobs / values [S, N] (first count[s] valid), count [S], stopped [S] (emitted a
    stop id), steps (decode steps run), and the updated slot state and pool; with
    ``top_logprobs`` = K > 0, top_logprobs float32 / top_ids int32 [S, N, K], the K most likely
    tokens at each step (else None); with speculation, drafted / accepted int32 [S], the drafts
    verified and those emitted (else None)."""

    tokens: jax.Array
    logprobs: jax.Array
    values: jax.Array
    count: jax.Array
    stopped: jax.Array
    steps: jax.Array
    slots: SlotState
    kv: PagedKV
    top_logprobs: jax.Array | None = None
    top_ids: jax.Array | None = None
    drafted: jax.Array | None = None
    accepted: jax.Array | None = None


def resolve_decode_impl(impl: str, devices: int = 1) -> tuple[str, str]:
    """(the decode attention, why) for an engine over ``devices`` devices: "auto" -> "pallas"
    on GPU/TPU; on CPU "native" (`kernels.cpu_native`, the pool read in place) on one device
    where the kernel builds, else "xla". "native" where it cannot run is a ValueError."""
    backend = jax.default_backend()
    if impl in ("auto", "native") and backend in ("gpu", "cuda", "rocm", "tpu"):
        if impl == "native":
            raise ValueError(f"attention_impl='native' is a CPU kernel; this is {backend}")
        return "pallas", f"{backend}: the Pallas decode kernel"
    if impl in ("auto", "native"):
        ok, why = cpu_native.available()
        if devices > 1:   # a custom call has no sharding rule: XLA would gather the pool
            ok, why = False, f"the engine spans {devices} devices"
        if not ok and impl == "native":
            raise ValueError(f"attention_impl='native' cannot run here: {why}")
        return ("native", why) if ok else ("xla", f"the native kernel is off: {why}")
    return impl, "as configured"


def _prefill(graphdef, weights: EngineWeights, kv: PagedKV, tokens, start, chunk_lens,
             block_tables) -> PagedKV:
    """Writes K/V of tokens [R, C] (row r's first chunk_lens[r], from position start[r])."""
    model = _merge(graphdef, weights)
    width = tokens.shape[1]
    positions = start[:, None] + jnp.arange(width, dtype=jnp.int32)
    valid = jnp.arange(width)[None, :] < chunk_lens[:, None]
    _, kv = forward_paged(model, tokens, positions, valid, kv, block_tables,
                          layers=weights.layers)
    return kv


def _decode(graphdef, weights: EngineWeights, kv: PagedKV, slots: SlotState, block_tables,
            pairs: PagePairs, temperature, top_p, return_after, allowed=None, window=None,
            chunk: ChunkRows | None = None, *, num_steps: int, top_k: int, use_filter: bool,
            attention_impl: str, top_logprobs: int = 0, speculative_tokens: int = 0,
            ngram: int = 3) -> DecodeOut:
    """Up to ``num_steps`` decode steps of the live slots in one `lax.while_loop`.

    ``temperature`` / ``top_p``: float32 [S], each slot's own (see `sample_tokens`).
    ``allowed``: optional int32 [S, ceil(V / 32)] allowed-token bitmasks (see `sample_tokens`),
    the same at every step (the engine passes one with ``num_steps=1``); None compiles the
    unmasked program.

    Attention reads ``pairs`` (every page of every live slot, covering the whole round trip)
    when ``attention_impl`` is "xla" or with speculative steps, the block tables otherwise.

    A slot stops after a stop id or when its budget is spent. The loop ends early once
    ``return_after`` slots have stopped (so the host can refill them) or none is live.

    ``top_logprobs`` (static) > 0 also records the most likely tokens of every step
    (`sampling.top_logprobs`); 0 compiles the program without them.

    ``speculative_tokens`` (static) = k > 0 with ``window`` (int32 [S, W], each row's last
    context tokens, `speculative.context_window`): each step verifies up to k prompt-lookup
    drafts a row (`speculative.decode_loop`; attention over ``pairs``) and emits 1..k+1
    tokens, the output holding num_steps * (k + 1) of them; not with ``allowed``.

    ``chunk`` (`paged_kv.ChunkRows`): prefill chunks whose K/V the first step writes in the
    same forward as the decode rows (vLLM's mixed batch: one pass over the weights for both);
    not with speculation. Every live row decodes its first step before the loop's checks.
    """
    model, head = _merge(graphdef, weights), weights.head
    if speculative_tokens and chunk is not None:
        raise ValueError("decode: a prefill chunk does not ride with speculative steps")
    if speculative_tokens:
        def forward(tokens, positions, valid, kv):
            hidden, kv = forward_paged(model, tokens, positions, valid, kv, block_tables,
                                       pairs=pairs, layers=weights.layers)
            return (_head_logits(model, head, hidden), _head_values(model, hidden), kv)

        out = speculative.decode_loop(
            forward, kv, slots, window, temperature, top_p, return_after, num_steps=num_steps,
            k=speculative_tokens, ngram=ngram, top_k=top_k, use_filter=use_filter,
            top_logprobs=top_logprobs)
        return DecodeOut(*out[:8], top_logprobs=out[10], top_ids=out[11], drafted=out[8],
                         accepted=out[9])
    use_pairs = pairs if attention_impl == "xla" else None
    num_slots = slots.live.shape[0]
    zeros = jnp.zeros((num_slots, num_steps))
    init = (jnp.int32(0), kv, slots, zeros.astype(jnp.int32), zeros, zeros,
            jnp.zeros((num_slots,), jnp.int32), jnp.zeros((num_slots,), bool), jnp.int32(0))
    if top_logprobs:
        tops = jnp.zeros((num_slots, num_steps, top_logprobs))
        init += (tops, tops.astype(jnp.int32))

    def cond(carry):
        step, _, st, _, _, _, _, _, ended = carry[:9]
        return (step < num_steps) & jnp.any(st.live) & (ended < return_after)

    def body(carry, chunk=None):
        step, kv, st, toks, lps, vals, count, stopped, ended = carry[:9]
        hidden, kv = forward_paged(model, st.last_token[:, None], st.length[:, None],
                                   st.live[:, None], kv, block_tables,
                                   decode_impl=attention_impl, pairs=use_pairs,
                                   layers=weights.layers, chunk=chunk)
        logits = _head_logits(model, head, hidden)[:, 0]
        values = _head_values(model, hidden)[:, 0]
        keys = jax.vmap(jax.random.fold_in)(jax.random.wrap_key_data(st.keys), st.length + 1)
        tok, lp = sample_tokens(logits, keys, temperature=temperature, top_k=top_k,
                                top_p=top_p, use_filter=use_filter, allowed=allowed)
        live = st.live
        toks = toks.at[:, step].set(jnp.where(live, tok, 0))
        lps = lps.at[:, step].set(jnp.where(live, lp, 0.0))
        vals = vals.at[:, step].set(jnp.where(live, values, 0.0))
        hit_stop = live & jnp.any(tok[:, None] == st.stop_ids, axis=-1)
        budget = st.budget - live
        done = hit_stop | (live & (budget <= 0))
        st = st._replace(last_token=jnp.where(live, tok, st.last_token),
                         length=st.length + live, budget=budget, live=live & ~done)
        out = (step + 1, kv, st, toks, lps, vals, count + live, stopped | hit_stop,
               ended + jnp.sum(done))
        if top_logprobs:
            top_lps, top_ids = carry[9:]
            step_lps, step_ids = top_k_logprobs(logits, top_logprobs)
            out += (top_lps.at[:, step].set(jnp.where(live[:, None], step_lps, 0.0)),
                    top_ids.at[:, step].set(jnp.where(live[:, None], step_ids, 0)))
        return out

    if chunk is not None:
        init = body(init, chunk)
    carry = jax.lax.while_loop(cond, body, init)
    step, kv, slots, toks, lps, vals, count, stopped, _ = carry[:9]
    return DecodeOut(toks, lps, vals, count, stopped, step, slots, kv, *carry[9:])


def _head_logits(model, head: jax.Array | None, hidden: jax.Array) -> jax.Array:
    """hidden [S, T, E] -> float32 logits [S, T, V] (a 16-bit tied head from ``head``)."""
    if head is None:
        return model.head_logits(hidden)
    return dense(hidden, from_bits(head), preferred_element_type=jnp.float32)


def _head_values(model, hidden: jax.Array) -> jax.Array:
    """hidden [S, T, E] -> float32 values [S, T] (zeros without a value head)."""
    values = model.head_values(hidden)
    return jnp.zeros(hidden.shape[:2]) if values is None else values


def _copy_pages(kv: PagedKV, src, dst) -> PagedKV:
    """Copies pages src [n] -> dst [n] in every layer (dst == num_pages is a no-op)."""
    return PagedKV(k=kv.k.at[:, :, dst].set(kv.k[:, :, src], mode="drop"),
                   v=kv.v.at[:, :, dst].set(kv.v[:, :, src], mode="drop"))


prefill_jit = jax.jit(_prefill, static_argnums=(0,), donate_argnums=(2,))
decode_jit = jax.jit(_decode, static_argnums=(0,), donate_argnums=(2, 3),
                     static_argnames=("num_steps", "top_k", "use_filter", "attention_impl",
                                      "top_logprobs", "speculative_tokens", "ngram"))
copy_pages_jit = jax.jit(_copy_pages, donate_argnums=(0,))
