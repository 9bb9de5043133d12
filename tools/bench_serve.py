"""Benchmark the chat server: requests/s of concurrent requests (sharing the engine's batches)
against the same requests sent one at a time, in the same run, on a live loopback server.

    python tools/bench_serve.py [--requests=8] [--max_tokens=48] [--workdir=RUN]

Without ``--workdir`` it serves the built-in tiny model as built (configs/math_ppo.py:smoke).
Each mode first runs once unmeasured, so compilation is not counted. Prints requests/s,
completion tokens/s and the engine batches each mode used, and the ratio.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _policy(workdir: str | None):
    from agentic_jax.serve import load_policy
    from configs.math_ppo import get_config

    if workdir:
        return load_policy(None, workdir).policy
    config = get_config("smoke")
    config.warmstart.enabled = False
    config.environment.num_workers = 1
    return load_policy(config, None).policy


def _serve(policy, limits):
    import uvicorn

    from agentic_jax.serve import Service, create_app

    service = Service.start(policy, limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", service, server


def _send(url: str, i: int, max_tokens: int) -> int:
    import httpx

    body = {"messages": [{"role": "user", "content": f"What is {i} + {i + 7}?"}],
            "max_tokens": max_tokens, "temperature": 1.0}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"]


def _measure(url: str, service, n: int, max_tokens: int, concurrent: bool) -> dict:
    runs_before = service.worker.stats.runs
    start = time.perf_counter()
    if concurrent:
        with cf.ThreadPoolExecutor(n) as pool:
            tokens = sum(pool.map(lambda i: _send(url, i, max_tokens), range(n)))
    else:
        tokens = sum(_send(url, i, max_tokens) for i in range(n))
    seconds = time.perf_counter() - start
    return {"requests_per_s": n / seconds, "tokens_per_s": tokens / seconds,
            "engine_runs": service.worker.stats.runs - runs_before, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=48)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    from agentic_jax.serve import ServeLimits

    policy = _policy(args.workdir)
    url, service, server = _serve(policy, ServeLimits(max_batch_rows=args.requests,
                                                      batch_wait_ms=50))
    try:
        results = {}
        for mode in ("sequential", "concurrent"):
            _measure(url, service, args.requests, args.max_tokens, mode == "concurrent")
            results[mode] = _measure(url, service, args.requests, args.max_tokens,
                                     mode == "concurrent")
    finally:
        server.should_exit = True
        service.close()
        policy.close()
    for mode, r in results.items():
        print(f"{mode:>10}: {r['requests_per_s']:.2f} requests/s, {r['tokens_per_s']:.1f} "
              f"completion tokens/s, {r['engine_runs']} engine runs, {r['seconds']:.1f} s")
    ratio = results["concurrent"]["requests_per_s"] / results["sequential"]["requests_per_s"]
    print(f"concurrent / sequential requests/s: {ratio:.2f}x "
          f"({args.requests} requests, max_tokens {args.max_tokens})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
