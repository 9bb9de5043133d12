"""`python -m agentic_jax.serve --workdir=RUN` on a tiny trained run, as a user starts it."""

import concurrent.futures as cf
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.train.train_testing import tiny_config, train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_command_serves_a_trained_run(tmp_path):
    workdir = str(tmp_path / "run")
    train(tiny_config(**{"training.total_steps": 2}), workdir, progress=False)
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "agentic_jax.serve", f"--workdir={workdir}",
                             f"--port={port}"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                health = httpx.get(f"{url}/health", timeout=2).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(1)
        assert health["model"] == "run@2"
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "What is 6 * 7?"}], "max_tokens": 8})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0
        # SIGTERM while a request runs: it is answered, then the server exits on its own.
        with cf.ThreadPoolExecutor(1) as pool:
            running = pool.submit(httpx.post, f"{url}/v1/chat/completions", timeout=120, json={
                "messages": [{"role": "user", "content": "What is 6 * 7?"}], "max_tokens": 64})
            time.sleep(0.3)
            proc.terminate()
            signalled = time.monotonic()
            assert running.result().status_code == 200
        assert proc.wait(timeout=60) == 0
        assert time.monotonic() - signalled < 35  # --drain_s (30) at most, plus the exit
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_a_workdir_without_checkpoints_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agentic_jax.serve",
                             f"--workdir={tmp_path}"], check=False, capture_output=True,
                            text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert result.returncode == 2
    assert "no checkpoints/ directory to serve" in result.stderr
