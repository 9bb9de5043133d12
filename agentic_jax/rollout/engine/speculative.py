"""Speculative decoding with prompt-lookup drafts (no second model): tool-using episodes copy
text their context already holds (a printed result into the answer, the problem's numbers into
the code), so a row's next tokens are guessed as those that followed the latest earlier
occurrence of its last few tokens, and the model verifies k guesses a row in one step.

Each step of `decode_loop` runs the row's last token and its drafts d_1..d_m (m <= k) at
positions length..length+m and samples the token after each of them exactly as a plain decode
step would (`sample_tokens`, key fold_in(key, position)). Draft d_i is accepted while it equals
the token sampled before it; the first sample that differs, or the one after the last draft,
is emitted too. For a point-mass draft this is the standard rejection rule: d_i is accepted
with probability p_i(d_i) (= min(1, p/q)), and on rejection the emitted token is drawn from p_i
with d_i removed and renormalised. Every emitted token is the one a plain decode step would
sample at its position, from the target model's own distribution, with its log-prob, value and
top log-probs computed as a plain step computes them; greedy rows emit the argmax, as without
drafts. A rejected draft's K/V is overwritten later (the length advances by the emitted count).

The drafts come from a window of each row's last `DRAFT_WINDOW` context tokens, kept on the
device and updated inside the loop; the host fills it (`context_window`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agentic_jax.rollout.sampling import sample_tokens, top_logprobs as top_k_logprobs

# Context tokens a row's drafts are looked up in (its last ones).
DRAFT_WINDOW = 512


def context_window(token_lists: Sequence[Sequence[int]], rows: int,
                   width: int = DRAFT_WINDOW) -> np.ndarray:
    """int32 [rows, width]: row i's last ``width`` tokens of ``token_lists[i]``, right-aligned,
    -1 before them and in rows past the lists."""
    out = np.full((rows, width), -1, np.int32)
    for i, tokens in enumerate(token_lists):
        tail = tokens[-width:]
        out[i, width - len(tail):] = tail
    return out


def draft_tokens(window: jax.Array, *, ngram: int, k: int) -> tuple[jax.Array, jax.Array]:
    """Prompt-lookup drafts: for each row, the latest earlier occurrence in ``window`` [S, W]
    of its last ``ngram`` tokens (else of fewer, down to one) and the up to ``k`` tokens that
    followed it. Returns (drafts int32 [S, k], how many are real int32 [S]; 0: no match)."""
    rows, width = window.shape
    ends = jnp.arange(width - 1)                      # where an earlier occurrence ends
    match = jnp.ones((rows, width - 1), bool)
    best = jnp.full((rows,), -1, jnp.int32)
    for t in range(ngram):
        # shifted[:, j] = window[:, j - t]: the occurrence ending at j, t tokens back
        shifted = jnp.pad(window[:, :width - 1 - t], ((0, 0), (t, 0)), constant_values=-1)
        match = match & (shifted == window[:, width - 1 - t][:, None]) & (shifted >= 0)
        latest = jnp.max(jnp.where(match, ends, -1), axis=-1).astype(jnp.int32)
        best = jnp.where(latest >= 0, latest, best)   # the longest suffix that matches
    index = best[:, None] + 1 + jnp.arange(k)
    real = (best[:, None] >= 0) & (index < width)
    drafts = jnp.take_along_axis(window, jnp.minimum(index, width - 1), axis=1)
    return jnp.where(real, drafts, 0).astype(jnp.int32), real.sum(-1).astype(jnp.int32)


# forward(tokens [S, T], positions [S, T], valid [S, T], kv) -> (logits f32 [S, T, V],
# values f32 [S, T], kv): the model over the paged pool.
Forward = Callable[[jax.Array, jax.Array, jax.Array, object], tuple[jax.Array, jax.Array, object]]


def decode_loop(forward: Forward, kv, slots, window: jax.Array, temperature, top_p,
                return_after, *, num_steps: int, k: int, ngram: int, top_k: int,
                use_filter: bool, top_logprobs: int = 0) -> tuple:
    """Up to ``num_steps`` speculative steps of the live slots in one `lax.while_loop`, each
    emitting 1..k+1 tokens a row (`paged_model._decode`'s contract otherwise: stop ids and
    budgets cut a row's run, the loop ends early after ``return_after`` slots stopped).

    Returns (tokens, logprobs, values [S, num_steps * (k + 1)], count, stopped, steps, slots,
    kv, drafted [S], accepted [S], top_logprobs, top_ids): drafted counts the drafts verified,
    accepted those emitted.
    """
    num_slots, width = slots.live.shape[0], k + 1
    out_width = num_steps * width
    offs = jnp.arange(width)
    row_ids = jnp.arange(num_slots)[:, None]
    temperature = jnp.asarray(temperature, jnp.float32)
    top_p = jnp.asarray(top_p, jnp.float32)
    flat_t = jnp.repeat(temperature, width) if temperature.ndim == 1 else temperature
    flat_p = jnp.repeat(top_p, width) if top_p.ndim == 1 else top_p
    zeros = jnp.zeros((num_slots, out_width))
    counts = jnp.zeros((num_slots,), jnp.int32)
    init = (jnp.int32(0), kv, slots, window, zeros.astype(jnp.int32), zeros, zeros, counts,
            jnp.zeros((num_slots,), bool), jnp.int32(0), counts, counts)
    if top_logprobs:
        tops = jnp.zeros((num_slots, out_width, top_logprobs))
        init += (tops, tops.astype(jnp.int32))

    def cond(carry):
        step, _, st, _, _, _, _, _, _, ended = carry[:10]
        return (step < num_steps) & jnp.any(st.live) & (ended < return_after)

    def body(carry):
        step, kv, st, win, toks, lps, vals, count, stopped, ended, drafted, accepted = carry[:12]
        live = st.live
        drafts, num = draft_tokens(win, ngram=ngram, k=k)
        num = jnp.where(live, jnp.clip(num, 0, st.budget - 1), 0)   # never past the budget
        tokens = jnp.concatenate([st.last_token[:, None], drafts], axis=1)
        positions = st.length[:, None] + offs
        valid = live[:, None] & (offs[None, :] <= num[:, None])
        logits, values, kv = forward(tokens, positions, valid, kv)
        keys = jax.vmap(lambda key, pos: jax.vmap(jax.random.fold_in, (None, 0))(key, pos))(
            jax.random.wrap_key_data(st.keys), positions + 1)
        flat_logits = logits.reshape(num_slots * width, -1)
        tok, lp = sample_tokens(flat_logits, keys.reshape(-1), temperature=flat_t,
                                top_k=top_k, top_p=flat_p, use_filter=use_filter)
        tok, lp = tok.reshape(num_slots, width), lp.reshape(num_slots, width)
        agree = (tok[:, :k] == drafts) & (offs[None, :k] < num[:, None])
        agreed = jnp.cumprod(agree, axis=1).sum(-1).astype(jnp.int32)
        in_run = offs[None, :] <= agreed[:, None]
        is_stop = jnp.any(tok[:, :, None] == st.stop_ids[:, None, :], axis=-1) & in_run
        hit_stop = live & jnp.any(is_stop, axis=-1)
        emit = jnp.where(hit_stop, jnp.argmax(is_stop, axis=-1) + 1, agreed + 1)
        emit = jnp.where(live, emit, 0).astype(jnp.int32)
        emitted = offs[None, :] < emit[:, None]
        where = jnp.where(emitted, count[:, None] + offs, out_width)   # out_width: dropped
        toks = toks.at[row_ids, where].set(tok, mode="drop")
        lps = lps.at[row_ids, where].set(lp, mode="drop")
        vals = vals.at[row_ids, where].set(values, mode="drop")
        last = jnp.take_along_axis(tok, jnp.maximum(emit - 1, 0)[:, None], axis=1)[:, 0]
        budget = st.budget - emit
        done = hit_stop | (live & (budget <= 0))
        grown = jnp.concatenate([win, jnp.where(emitted, tok, -1)], axis=1)
        win = jnp.take_along_axis(grown, jnp.arange(win.shape[1])[None, :] + emit[:, None],
                                  axis=1)
        st = st._replace(last_token=jnp.where(emit > 0, last, st.last_token),
                         length=st.length + emit, budget=budget, live=live & ~done)
        out = (step + 1, kv, st, win, toks, lps, vals, count + emit, stopped | hit_stop,
               ended + jnp.sum(done), drafted + num, accepted + jnp.minimum(agreed, emit))
        if top_logprobs:
            top_lps, top_ids = carry[12:]
            step_lps, step_ids = top_k_logprobs(flat_logits, top_logprobs)
            shape = (num_slots, width, top_logprobs)
            out += (top_lps.at[row_ids, where].set(step_lps.reshape(shape), mode="drop"),
                    top_ids.at[row_ids, where].set(step_ids.reshape(shape), mode="drop"))
        return out

    carry = jax.lax.while_loop(cond, body, init)
    step, kv, slots, _, toks, lps, vals, count, stopped, _, drafted, accepted = carry[:12]
    tops = carry[12:] if top_logprobs else (None, None)
    return (toks, lps, vals, count, stopped, step, slots, kv, drafted, accepted) + tuple(tops)
