"""Test-wide setup: eight simulated CPU devices, set before JAX is imported anywhere."""

import os
import sys

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
