r"""Soak the server with hostile requests mixed into normal ones: every hostile request must get
a bounded 4xx (or a bounded 200), and the normal ones keep their latency.

    python tools/soak_hostile.py [--seconds=120] [--clients=4] [--url=http://127.0.0.1:8000
        --pid=PID]

Without ``--url`` it starts ``python -m agentic_jax.serve`` on the built-in tiny model
(configs/math_ppo.py:smoke, as built) on a free loopback port. ``clients`` threads each send
normal requests (chat, /health, a derivation, practice) while one thread cycles through the
hostile ones. Prints, per kind, the status codes and the slowest reply; the normal requests'
latency percentiles; and the server's resident memory before and after. Exit status 1 when a
hostile request got a 5xx or no reply within its bound, or a normal one failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import subprocess
import sys
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON = {"Content-Type": "application/json"}
# (name, method, path, body or raw text, extra headers, seconds its reply may take)
HOSTILE = [
    ("nested JSON", "POST", "/v1/chat/completions", "[" * 100_000, JSON, 5),
    ("nested JSON line", "POST", "/api/grade", {"format": "jsonl", "text": "[" * 50_000}, {}, 10),
    ("foreign Origin", "POST", "/api/derivation", {"text": "x"},
     {"Origin": "http://attacker.example"}, 5),
    ("text/plain POST", "POST", "/v1/chat/completions", '{"messages": []}',
     {"Content-Type": "text/plain"}, 5),
    ("DNS-rebound Host", "GET", "/health", None, {"Host": "attacker.example"}, 5),
    ("plot of a 4,400-digit number", "POST", "/api/plot", {"text": "10^4400 x"}, {}, 10),
    ("(a practice problem first)", "POST", "/api/practice/next", {"learner": "soak"}, {}, 10),
    ("gamma of a half-integer", "POST", "/api/practice/answer",
     {"learner": "soak", "answer": "gamma(2000001/2)"}, {}, 10),
    ("derivation with 10^(10^7)", "POST", "/api/derivation",
     {"text": "x = 10^{10^7}\nx = 1\n(x+1)^{3000} = 0\nx = -1"}, {}, 10),
    ("formula cells", "POST", "/api/grade", {"format": "csv", "text":
     "question,answer,student_answer\nq,1,=HYPERLINK(\"http://x\")\nq,-3,-3\n"}, {}, 30),
]
NORMAL = [
    ("chat", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 16}, {}),
    ("health", "GET", "/health", None, {}),
    ("derivation", "POST", "/api/derivation", {"text": "(x+1)^2\n= x^2 + 2x + 1"}, {}),
    ("practice", "POST", "/api/practice/next", {"learner": "soak"}, {}),
]


def _send(client: httpx.Client, method: str, path: str, body, headers: dict) -> tuple[int, float]:
    start = time.monotonic()
    if isinstance(body, str):
        r = client.request(method, path, content=body, headers=headers)
    else:
        r = client.request(method, path, json=body, headers=headers)
    return r.status_code, time.monotonic() - start


def _start_server() -> tuple[str, subprocess.Popen]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentic_jax.serve", f"--port={port}",
         f"--config={ROOT}/configs/math_ppo.py:smoke", "--config.warmstart.enabled=False",
         "--config.environment.num_workers=1"], cwd=ROOT, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(1)
    proc.kill()
    raise RuntimeError("the server did not start")


def _rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (the sandboxes' processes), in MB."""
    pids = [pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], text=True,
                                                   capture_output=True).stdout.split()]
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            continue
    return total / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--url", default=None)
    parser.add_argument("--pid", type=int, default=None)
    args = parser.parse_args(argv)
    proc = None
    url, pid = args.url, args.pid
    if url is None:
        url, proc = _start_server()
        pid = proc.pid
    try:
        # Compile, and start both sandboxes, before memory is first read.
        with httpx.Client(base_url=url, timeout=600) as client:
            for _, method, path, body, headers, *_ in NORMAL + HOSTILE:
                _send(client, method, path, body, headers)
        rss_before = _rss_mb(pid) if pid else None
        hostile, normal, failures = _soak(url, args.seconds, args.clients)
        rss_after = _rss_mb(pid) if pid else None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    _report(hostile, normal, failures, rss_before, rss_after)
    return 1 if failures else 0


def _soak(url: str, seconds: float, clients: int):
    hostile: dict[str, list] = collections.defaultdict(list)
    normal: dict[str, list] = collections.defaultdict(list)
    failures: list[str] = []
    stop = time.monotonic() + seconds

    def attacker():
        with httpx.Client(base_url=url, timeout=120) as client:
            while time.monotonic() < stop:
                for name, method, path, body, headers, bound_s in HOSTILE:
                    status, took = _send(client, method, path, body, headers)
                    hostile[name].append((status, took))
                    if status >= 500 or took > bound_s:
                        failures.append(f"{name}: {status} after {took:.1f} s")

    def user(i: int):
        with httpx.Client(base_url=url, timeout=120) as client:
            while time.monotonic() < stop:
                name, method, path, body, headers = NORMAL[i % len(NORMAL)]
                i += 1
                status, took = _send(client, method, path, body, headers)
                normal[name].append((status, took))
                if status != 200:
                    failures.append(f"normal {name}: {status}")

    threads = [threading.Thread(target=attacker)] + [
        threading.Thread(target=user, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return hostile, normal, failures


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _report(hostile, normal, failures, rss_before, rss_after) -> None:
    print("hostile requests (status: count, slowest reply):")
    for name, replies in hostile.items():
        counts = collections.Counter(s for s, _ in replies)
        print(f"  {name:<32} {dict(counts)}, slowest {max(t for _, t in replies):.2f} s")
    print("normal requests (count, p50 / p95 / max latency):")
    for name, replies in normal.items():
        times = [t for _, t in replies]
        print(f"  {name:<12} {len(times):5d}  {_percentile(times, 0.5):.3f} / "
              f"{_percentile(times, 0.95):.3f} / {max(times):.3f} s")
    if rss_before is not None:
        print(f"server resident memory (with its children): {rss_before:.0f} MB before, "
              f"{rss_after:.0f} MB after")
    print(f"{len(failures)} failure(s)" + "".join(f"\n  {f}" for f in failures[:20]))


if __name__ == "__main__":
    sys.exit(main())
