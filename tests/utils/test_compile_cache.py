"""The commands' persistent compilation cache: a program one process compiled, the next one
loads from the package's cache directory instead of compiling it; the environment chooses the
directory or turns the cache off."""

import json
import os
import subprocess
import sys

import pytest

_PROBE = r"""
import json, os, sys
import jax, jax.numpy as jnp
from agentic_jax.utils.compile_cache import enable_compile_cache

hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
directory = enable_compile_cache()
if directory:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # keep even this one

@jax.jit
def f(x):
    for _ in range(8):
        x = jnp.tanh(x @ x) + x
    return x

f(jnp.ones((16, 16))).block_until_ready()
print(json.dumps({"directory": directory, "hits": len(hits),
                  "max_size": jax.config.jax_compilation_cache_max_size}))
"""


def _probe(env: dict) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("JAX_COMPILATION_CACHE_DIR", "AGENTIC_JAX_COMPILE_CACHE",
                          "AGENTIC_JAX_CACHE", "JAX_COMPILATION_CACHE_MAX_SIZE",
                          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
    out = subprocess.run([sys.executable, "-c", _PROBE], env={**clean, **env},
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_second_process_loads_what_the_first_compiled(tmp_path):
    env = {"AGENTIC_JAX_CACHE": str(tmp_path)}
    first = _probe(env)
    assert first["directory"] == str(tmp_path / "xla") and first["hits"] == 0
    assert any(name.startswith("jit_f") for name in os.listdir(tmp_path / "xla"))
    assert first["max_size"] == 4 << 30
    second = _probe(env)
    assert second["hits"] >= 1


@pytest.mark.parametrize("off", ["0", "off", "False"])
def test_the_environment_turns_it_off(tmp_path, off):
    got = _probe({"AGENTIC_JAX_CACHE": str(tmp_path), "AGENTIC_JAX_COMPILE_CACHE": off})
    assert got["directory"] is None and not (tmp_path / "xla").exists()


def test_jax_own_variable_wins(tmp_path):
    got = _probe({"AGENTIC_JAX_CACHE": str(tmp_path / "ours"),
                  "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "theirs")})
    assert got["directory"] == str(tmp_path / "theirs")
    assert os.listdir(tmp_path / "theirs") and not (tmp_path / "ours").exists()
