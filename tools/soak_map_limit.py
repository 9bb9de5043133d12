"""Serves waves of requests of many shapes with a tiny engine and no warm-up, so that every wave
compiles new programs on demand, and prints the process's memory mappings against the kernel's
``vm.max_map_count`` as it goes: the check that the engine's memory-map watch keeps a CPU server
alive where LLVM would otherwise fail to map a program and the process die (SIGSEGV).

    sudo sysctl -w vm.max_map_count=10500        # the default 65,530 takes hours to reach
    AGENTIC_JAX_COMPILE_CACHE=0 python tools/soak_map_limit.py
    sudo sysctl -w vm.max_map_count=65530

Measured so (60 waves): before the watch the process died with "LLVM compilation error: Cannot
allocate memory"; with it, three or four drops of the compiled programs and every wave served.
"""

from __future__ import annotations

import argparse
import logging
import time

import jax
import numpy as np
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.engine import runner
from agentic_jax.utils.memory import memory_maps

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    engine = Engine(Transformer(CFG, rngs=nnx.Rngs(3)),
                    EngineConfig(num_slots=48, page_size=8, max_seq_len=512, decode_steps=4,
                                 prefill_chunk=256, prefill_rows=4))
    rng = np.random.default_rng(args.seed)
    keys = iter(jax.random.split(jax.random.key(args.seed), 48 * args.waves))
    start = time.perf_counter()
    print(f"start: mappings {memory_maps()} (in use, limit)", flush=True)
    for wave in range(args.waves):
        for i in range(int(rng.integers(1, 48))):
            prompt = rng.integers(3, 64, int(rng.integers(1, 400))).tolist()
            engine.submit(Request((wave, i), tuple(prompt), int(rng.integers(1, 60)), next(keys)))
        engine.run()
        if wave % 10 == 9 or wave == args.waves - 1:
            print(f"wave {wave + 1}: mappings {memory_maps()}, programs "
                  f"{runner._compiled_programs()}, drops {runner.MAP_WATCH.drops}, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    print(f"served {args.waves} waves; the watch dropped the programs "
          f"{runner.MAP_WATCH.drops} times")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
