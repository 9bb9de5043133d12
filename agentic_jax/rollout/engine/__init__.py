"""The rollout engine: continuous batching over a paged KV cache with shared prompt prefixes.

A fixed number of decode slots serve a queue of requests (prompt x sample). Each sequence's K/V
lives in fixed-size pages of one pool (per layer [Hkv, pages, page_size, D]) named by its block
table; pages are taken as it grows and returned when it ends, and the pool is sized from a
budget (``kv_pages`` or ``kv_cache_mb``), not from batch x max_len. Requests with the same prompt
share the prompt's pages (prefilled once, reference counted; the partial last page is copied when
a sample forks from it); with ``prefix_caching`` the full pages of prefilled prompts also stay
after their requests end, for any later prompt that starts with the same tokens
(`prefix_cache.PrefixCache`). When a sequence leaves its slot (finished, or paused for a tool) the
next queued request takes it; newcomers' prompts are prefilled in chunks between decode round
trips; when pages run out the newest sequence is preempted (pages freed, context recomputed
later) with no change to any result, because the token at position p of a sequence is drawn with
fold_in(request.key, p), whatever the slot count, page size, arrival order or preemptions.

    from agentic_jax.rollout.engine import Engine, EngineConfig, Request

    engine = Engine(model, EngineConfig(num_slots=32, page_size=16, kv_pages=2048,
                                        max_seq_len=1024))
    engine.submit(Request(request_id=i, prompt=tokens, max_new_tokens=384, key=key_i,
                          stop_tokens=(eos,), pause=hook))
    events = engine.step()        # one admission + prefill chunk + decode round trip
    events = engine.run()         # step until nothing is queued or decoding
    # Event(request_id, kind="finished" | "paused", reason="stop" | "length" | "pause",
    #       tokens=[model tokens of the turn], logprobs=f32 [n] (untempered), values=f32 [n],
    #       top_logprobs=k most likely (id, log-prob) a token when sampling.top_logprobs = k)
    engine.resume(i, tool_output_tokens)   # a paused sequence continues after these tokens
    engine.release(i)                      # or ends, freeing its pages
    engine.stats                  # EngineStats: slot utilisation, pages in use / peak / pool,
                                  # preemptions, prefix hits, prefill_s / decode_s

The pause hook (`PauseHook`) is how the tool loop stops a sequence that closed a ```python
block: after every decode round trip it gets the turn's model tokens and returns None or the
number of tokens to keep; later tokens are discarded (their K/V slots are simply overwritten).
The sequence keeps its pages while paused; `resume` appends the tool output into them (those
positions are not model tokens: no log-probs, loss mask 0 for the trainer) and re-queues it.

Inside, `Engine` is a facade over two parts: a host-only `scheduler.Scheduler` (admission,
prefill and decode round trips, preemption) over a `slot_table.SlotTable` (queue, slots,
finishing and pausing, statistics) and its `page_manager.PageManager` (the pool, shared
prefixes, forks), which import no JAX; and a `runner.ModelRunner`, which owns
the weights and the KV pool and turns the scheduler's decisions into `paged_model` calls
(`runner_api.Runner` is the interface between them).
"""

from agentic_jax.rollout.engine.engine import Engine
from agentic_jax.rollout.engine.pages import PagePool, page_bytes, pool_size
from agentic_jax.rollout.engine.types import EngineConfig, EngineStats, Event, PauseHook, Request

__all__ = ["Engine", "EngineConfig", "EngineStats", "Event", "PagePool", "PauseHook", "Request",
           "page_bytes", "pool_size"]
