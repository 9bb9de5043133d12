"""Test-wide setup: eight simulated CPU devices, set before JAX is imported anywhere."""

import atexit
import os
import shutil
import sys
import tempfile

# The repository root, so tests can import shared helpers as `tests.<dir>.<module>` and the
# configs as `configs.<name>` whichever directory pytest collects first.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The commands the tests launch keep no compiled programs in the user's cache
# (tests/utils/test_compile_cache.py turns it on in a directory of its own).
os.environ.setdefault("AGENTIC_JAX_COMPILE_CACHE", "0")
# One persistent compilation cache for the whole run, in a fresh temporary directory that the
# test workers (and the commands they launch) share and that goes when the run ends: the tiny
# models' train steps and engine programs recur across test files, and a program another
# worker compiled is loaded instead of compiled again (about an eighth of the suite's time on
# 2 cores). Only programs that took at least half a second to compile are kept. Set up once,
# by the process that starts the workers; a directory already set in the environment is kept.
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _XLA_CACHE = tempfile.mkdtemp(prefix="agentic_jax_tests_xla_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _XLA_CACHE
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    # A size limit turns on JAX's file lock around every read and write of the cache: without
    # it an entry is written in place, and another worker could read it half-written.
    os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(4 << 30))
    atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
