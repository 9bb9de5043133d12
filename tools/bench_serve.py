"""Benchmark the chat server on a mix of short and long requests: how long a short request
waits while long ones run, and the total throughput, at several numbers of concurrent clients.

    python tools/bench_serve.py [--clients=1,8,32] [--long_tokens=64] [--short_tokens=4]
                                [--long_prompt_tokens=0] [--step_tokens=0] [--preset=P]
                                [--baseline=PATH_TO_OTHER_CHECKOUT] [--workdir=RUN]

Serves the built-in tiny model as built (configs/math_ppo.py:smoke, greedy, so every request
runs to its token limit; ``--preset`` another built-in size) on a loopback uvicorn server, or
``--workdir``'s policy. First the
solo latency of a short request (nothing else running); then, for each client count C, C
clients each send ``--rounds`` requests back to back, every fourth of them long (the clients
are staggered, so long ones run all the time); with ``--long_prompt_tokens=N`` a long request
also carries about N tokens of context before its question, so its prefill is long too (the
run's ``max_length`` grows to hold it). ``--step_tokens`` sets the engine's per-step token
budget (`EngineConfig.step_tokens`, decode first) where the package has one. Prints, per C: short-request p50 / p99 latency,
p99 over the solo latency, and completion tokens/s over all requests. Then, with
``--heavy=N``, fairness: one client (its own API key) keeps N long requests in flight while
another sends ``--rounds`` short ones back to back; prints the light client's p50 / p99 beside
the heavy one's, and how many requests of each were refused (429). The mixed phases' clients
run as coroutines in a process of their own, as a server's clients do (client threads in the
server's process would share its interpreter lock and cores with the rollout worker).

``--baseline=DIR`` runs this same script on another checkout of the package (e.g. a worktree
of an earlier commit) in a subprocess first, so the two servers are measured in one run on
one machine, and prints the ratios. Each phase runs once unmeasured (compilation).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _policy(workdir: str | None, *, max_length: int = 0, step_tokens: int = 0,
            preset: str = ""):
    from agentic_jax.serve import load_policy
    from configs.math_ppo import get_config

    config = get_config() if workdir else get_config("smoke")
    overrides = {}
    if step_tokens and "step_tokens" in config.rollout:   # a package without it: its own way
        overrides["rollout.step_tokens"] = step_tokens
    if workdir:   # the run's recorded config (this package's defaults where it predates them)
        if max_length:
            overrides["training.max_length"] = max_length
        return load_policy(config, workdir, overrides).policy
    config.warmstart.enabled = False
    config.environment.num_workers = 1
    config.model.preset = preset or config.model.preset
    config.training.max_length = max(config.training.max_length, max_length)
    for path, value in overrides.items():
        config.rollout[path.split(".")[1]] = value
    return load_policy(config, None).policy


def _context(tokenizer, tokens: int) -> str:
    """About ``tokens`` tokens of filler context (numbers) for a long request's prompt."""
    if tokens <= 0:
        return ""
    words, text = [], ""
    while len(tokenizer.encode(text)) < tokens:
        words += [str((37 * j) % 1000) for j in range(len(words), len(words) + 16)]
        text = "Data: " + " ".join(words) + ".\n"
    return text


def _serve(policy, limits):
    import uvicorn

    from agentic_jax.serve import Service, create_app

    if hasattr(policy.engine, "warmup"):  # what `python -m agentic_jax.serve` does first
        policy.engine.set_sampling(policy.agent_cfg.sampling)
        programs, seconds = policy.engine.warmup()
        print(f"warm-up: {programs} programs in {seconds:.1f} s", file=sys.stderr, flush=True)
    service = Service.start(policy, limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", service, server


def _send(client, url: str, i: int, max_tokens: int) -> tuple[float, int]:
    body = {"messages": [{"role": "user", "content": f"What is {i} + {i + 7}?"}],
            "max_tokens": max_tokens, "temperature": 0}
    start = time.perf_counter()
    r = client.post(f"{url}/v1/chat/completions", json=body, timeout=1800)
    r.raise_for_status()
    return time.perf_counter() - start, r.json()["usage"]["completion_tokens"]


def _keyed(http, url: str, key: str, i: int, max_tokens: int) -> tuple[float, int]:
    """(seconds, HTTP status) of one request as the client with API key ``key``."""
    body = {"messages": [{"role": "user", "content": f"What is {i} + {i + 7}?"}],
            "max_tokens": max_tokens, "temperature": 0}
    start = time.perf_counter()
    r = http.post(f"{url}/v1/chat/completions", json=body, timeout=1800,
                  headers={"Authorization": f"Bearer {key}"})
    return time.perf_counter() - start, r.status_code


def _burst(url: str, heavy: int, rounds: int, long_tokens: int, short_tokens: int) -> dict:
    """The heavy client keeps ``heavy`` long requests in flight (each thread sends the next as
    soon as one is answered or refused) while the light client sends ``rounds`` short ones,
    one after another."""
    import httpx

    done = threading.Event()

    def flood(t: int) -> list[tuple[float, int]]:
        out = []
        while not done.is_set():
            out.append(_keyed(http, url, "heavy", t, long_tokens))
            if out[-1][1] == 429:
                time.sleep(0.01)  # refused at once: a client's retry, not a spin
        return out

    with httpx.Client(limits=httpx.Limits(max_connections=heavy + 1)) as http, \
            cf.ThreadPoolExecutor(heavy) as pool:
        flooding = [pool.submit(flood, t) for t in range(heavy)]
        time.sleep(0.5)
        light = [_keyed(http, url, "light", 1000 + i, short_tokens) for i in range(rounds)]
        done.set()
        heavy_out = [x for f in flooding for x in f.result()]

    def figures(name: str, out: list[tuple[float, int]]) -> dict:
        done = np.asarray([s for s, code in out if code == 200] or [np.nan])
        return {f"{name}_p50_s": float(np.percentile(done, 50)),
                f"{name}_p99_s": float(np.percentile(done, 99)),
                f"{name}_refused": sum(code == 429 for _, code in out),
                f"{name}_requests": len(out)}

    return {**figures("light", light), **figures("heavy", heavy_out), "heavy_in_flight": heavy}


def _mixed(url: str, clients: int, rounds: int, long_tokens: int, short_tokens: int,
           context: str = "") -> dict:
    """C clients, each ``rounds`` requests back to back; request r of client c is long when
    (r + c) % 4 == 0. The clients run in a process of their own (`_client_load`), as clients
    of a server do: client threads inside the server's process would take its interpreter
    lock and its cores from the worker."""
    job = json.dumps([url, clients, rounds, long_tokens, short_tokens, context])
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--_client_load", job],
                          check=True, capture_output=True, text=True)
    results = json.loads(done.stdout.strip().splitlines()[-1])
    wall = results.pop()
    short = np.asarray([s for long, s, _ in results if not long])
    return {"short_p50_s": float(np.percentile(short, 50)),
            "short_p90_s": float(np.percentile(short, 90)),
            "short_p99_s": float(np.percentile(short, 99)),
            "short_requests": int(short.size),
            "long_requests": sum(long for long, _, _ in results),
            "tokens_per_s": sum(t for _, _, t in results) / wall, "seconds": wall}


def _client_load(job: str) -> None:
    """`_mixed`'s clients as coroutines of one asyncio loop; prints [(long, seconds, tokens),
    ..., wall seconds] as JSON."""
    import asyncio

    import httpx

    url, clients, rounds, long_tokens, short_tokens, context = json.loads(job)

    async def client(http, c: int) -> list:
        out = []
        for r in range(rounds):
            long = (r + c) % 4 == 0
            question = f"What is {100 * c + r} + {100 * c + r + 7}?"
            body = {"messages": [{"role": "user",
                                  "content": (context if long else "") + question}],
                    "max_tokens": long_tokens if long else short_tokens, "temperature": 0}
            start = time.perf_counter()
            reply = await http.post(f"{url}/v1/chat/completions", json=body, timeout=1800)
            reply.raise_for_status()
            out.append((long, time.perf_counter() - start,
                        reply.json()["usage"]["completion_tokens"]))
        return out

    async def run() -> list:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(limits=limits) as http:
            start = time.perf_counter()
            per_client = await asyncio.gather(*(client(http, c) for c in range(clients)))
            return [x for xs in per_client for x in xs] + [time.perf_counter() - start]

    print(json.dumps(asyncio.run(run())), flush=True)


def measure(args) -> dict:
    import httpx

    from agentic_jax.serve import ServeLimits

    clients = [int(c) for c in args.clients.split(",")]
    # Room for the long prompt, the chat template and the tool loop's output beside it.
    max_length = args.long_prompt_tokens + args.long_tokens + 128 if args.long_prompt_tokens \
        else 0
    policy = _policy(args.workdir, max_length=max_length, step_tokens=args.step_tokens,
                     preset=args.preset)
    context = _context(policy.tokenizer, args.long_prompt_tokens)
    limits = ServeLimits(max_batch_rows=max(clients), max_queue=4 * max(clients),
                         batch_wait_ms=0)
    url, service, server = _serve(policy, limits)
    try:
        with httpx.Client() as http:
            for tokens in (args.short_tokens, args.long_tokens):     # compile
                _send(http, url, 0, tokens)
            solo = [_send(http, url, i, args.short_tokens)[0] for i in range(args.solo)]
        out = {"solo_short_s": float(np.median(solo)), "clients": {}}
        for c in clients:
            for _ in range(2):                                      # the shapes C needs
                _mixed(url, c, 4, args.long_tokens, args.short_tokens, context)
            out["clients"][c] = _mixed(url, c, args.rounds, args.long_tokens,
                                       args.short_tokens, context)
        if args.heavy:  # once small first: the light client's prompts compile a shape
            _burst(url, 2, 2, args.long_tokens, args.short_tokens)
            out["burst"] = _burst(url, args.heavy, args.rounds, args.long_tokens,
                                  args.short_tokens)
    finally:
        server.should_exit = True
        service.close()
        policy.close()
    return out


def _report(name: str, r: dict) -> None:
    print(f"{name}: solo short request {r['solo_short_s'] * 1e3:.0f} ms")
    for c, m in r["clients"].items():
        print(f"  {int(c):>3} clients: short p50 {m['short_p50_s'] * 1e3:7.0f} ms, p90 "
              f"{m['short_p90_s'] * 1e3:7.0f} ms, p99 "
              f"{m['short_p99_s'] * 1e3:7.0f} ms = {m['short_p99_s'] / r['solo_short_s']:6.2f}x "
              f"solo; {m['tokens_per_s']:7.1f} completion tokens/s "
              f"({m['short_requests']} short, {m['long_requests']} long, "
              f"{m['seconds']:.0f} s)")
    if "burst" in r:
        b = r["burst"]
        print(f"  one client keeping {b['heavy_in_flight']} long requests in flight "
              f"({b['heavy_requests']} sent): the other "
              f"client's short p50 {b['light_p50_s'] * 1e3:.0f} ms, p99 "
              f"{b['light_p99_s'] * 1e3:.0f} ms ({b['light_refused']} of "
              f"{b['light_requests']} refused); the heavy client's p50 "
              f"{b['heavy_p50_s'] * 1e3:.0f} ms, p99 {b['heavy_p99_s'] * 1e3:.0f} ms "
              f"({b['heavy_refused']} refused)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--_client_load"]:
        _client_load(argv[1])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=8, help="requests per client")
    parser.add_argument("--long_tokens", type=int, default=64)
    parser.add_argument("--short_tokens", type=int, default=4)
    parser.add_argument("--solo", type=int, default=8, help="solo short requests timed")
    parser.add_argument("--long_prompt_tokens", type=int, default=0,
                        help="context tokens before a long request's question (0: none)")
    parser.add_argument("--step_tokens", type=int, default=0,
                        help="the engine's per-step token budget (0: the config's)")
    parser.add_argument("--heavy", type=int, default=0,
                        help="long requests one client keeps in flight while another sends short "
                        "ones (0: no such phase)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--preset", default="",
                        help="a built-in model preset to serve as built (default: :smoke's); a "
                        "larger one (tiny-16m) makes prefill cost what it does beside decode "
                        "for a real model")
    parser.add_argument("--baseline", default=None,
                        help="another checkout of the package, measured first in a subprocess")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--package_root", default=HERE,
                        help="the checkout whose agentic_jax is measured (this one)")
    args = parser.parse_args(argv)

    results = {}
    if args.baseline:
        with open(os.devnull, "w") as quiet:
            forwarded = [a for a in argv if not a.startswith(("--baseline", "--json", "--package_root"))]
            out = os.path.join("/tmp", f"bench_serve_baseline_{os.getpid()}.json")
            root = os.path.abspath(args.baseline)
            subprocess.run([sys.executable, os.path.abspath(__file__), *forwarded,
                            f"--json={out}", f"--package_root={root}"], check=True,
                           env=dict(os.environ, PYTHONPATH=root), cwd=root, stderr=quiet)
        with open(out) as f:
            results["baseline"] = json.load(f)
    sys.path.insert(0, os.path.abspath(args.package_root))
    results["this"] = measure(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results["this"], f)
        return 0
    for name, r in results.items():
        _report(name if name == "this" else f"baseline ({args.baseline})", r)
    if "baseline" in results:
        print("this / baseline:")
        base, this = results["baseline"], results["this"]
        for c in this["clients"]:
            b, t = base["clients"][str(c)] if str(c) in base["clients"] else \
                base["clients"][c], this["clients"][c]
            print(f"  {int(c):>3} clients: short p99 {t['short_p99_s'] / b['short_p99_s']:.2f}x, "
                  f"tokens/s {t['tokens_per_s'] / b['tokens_per_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
