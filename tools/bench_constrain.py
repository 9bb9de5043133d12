r"""Constrained code decoding: the share of closed ```python blocks that parse, and tokens/s,
with and without the grammar mask, in the same run on the same model and keys.

    python tools/bench_constrain.py [--rows=32] [--max_new_tokens=160] [--decode_steps=8]

The model is the built-in tokenizer's tiny random transformer pushed towards opening fences,
newlines and closing fences (no trained policy is needed), so that unmasked it writes many short
blocks of random tokens. Each mode runs once to compile, then ``--repeats`` times measured.
"""

from __future__ import annotations

import argparse
import ast
import time

import jax
import numpy as np
from flax import nnx

from agentic_jax.data.tokenizer import builtin_tokenizer
from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout.constrain import code_constraint
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.tool_text import find_closed_code


def biased_model(tok, seed: int = 0) -> Transformer:
    cfg = ModelConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=False)
    model = Transformer(cfg, rngs=nnx.Rngs(seed))
    opener, fence = tok.convert_tokens_to_ids(["```python", "```"])
    newline = tok.encode("\n", add_special_tokens=False)[0]
    embed, head = np.array(model.embed[...]), np.array(model.lm_head[...])
    embed[:, 0] = 20.0                      # a constant direction in every hidden state
    head[0, :] = 0.0
    head[0, [opener, fence, newline]] = [0.9, 0.9, 1.2]
    model.embed[...], model.lm_head[...] = embed, head
    return model


def run(model, tok, constraint, args) -> dict[str, float]:
    engine = Engine(model, EngineConfig(num_slots=args.rows, page_size=16,
                                        max_seq_len=args.max_new_tokens + 16,
                                        decode_steps=args.decode_steps))
    prompt = tuple(tok.encode("Compute 2 + 3.\n", add_special_tokens=False))
    fence = tok.convert_tokens_to_ids("```")

    def pause(turn):
        return None if find_closed_code(tok.decode(list(turn))) is None else len(turn)

    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), args.rows)))
    for i in range(args.rows):
        engine.submit(Request(i, prompt, args.max_new_tokens, keys[i],
                              stop_tokens=(tok.eos_token_id,), pause=pause,
                              pause_tokens=(fence,), constraint=constraint))
    t0 = time.perf_counter()
    events = engine.run()
    seconds = time.perf_counter() - t0
    closed = parsed = tokens = 0
    for event in events:
        tokens += len(event.tokens)
        found = find_closed_code(tok.decode(event.tokens))
        if found is None:
            continue
        closed += 1
        try:
            ast.parse(found[0])
            parsed += 1
        except SyntaxError:
            pass
    return {"closed": closed, "parsed": parsed, "tokens": tokens, "seconds": seconds,
            "decode_calls": engine.stats.decode_calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--max_new_tokens", type=int, default=160)
    parser.add_argument("--decode_steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    tok = builtin_tokenizer()
    model = biased_model(tok)
    constraint = code_constraint(tok, len(tok))
    results = {}
    for name, c in (("unconstrained", None), ("constrained", constraint)):
        run(model, tok, c, args)                       # compile
        runs = [run(model, tok, c, args) for _ in range(args.repeats)]
        total = {k: sum(r[k] for r in runs) for k in runs[0]}
        results[name] = total
        print(f"{name:>13}: {total['parsed']}/{total['closed']} closed blocks parse "
              f"({total['parsed'] / max(total['closed'], 1):.0%}), "
              f"{total['tokens'] / total['seconds']:.0f} tokens/s, "
              f"{total['decode_calls'] / args.repeats:.0f} decode round trips per run")
    free, masked = results["unconstrained"], results["constrained"]
    ratio = (masked["tokens"] / masked["seconds"]) / (free["tokens"] / free["seconds"])
    print(f"tokens/s constrained / unconstrained: {ratio:.2f}x; mask host time "
          f"{1e3 * constraint.stats.mask_s / max(constraint.stats.masked_tokens, 1):.3f} ms "
          f"per masked token ({constraint.stats.masked_tokens} masked tokens, "
          f"{constraint.stats.failures} matcher failures)")


if __name__ == "__main__":
    main()
