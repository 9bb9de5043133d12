"""The persistent compilation cache of the package's commands.

What a command compiles (the engine's prefill and decode programs, the train step, the
evaluation's programs) is written to disk and loaded, not compiled again, by the next command
that needs the same program on the same devices: a resumed run, the evaluation after training,
a restarted server, a second recipe of the same model. On 2 CPU cores SmolLM2's programs take
a minute or more to compile in every process without it.

Where: ``$JAX_COMPILATION_CACHE_DIR`` when set (JAX's own variable), else ``xla/`` under the
package's cache directory (``$AGENTIC_JAX_CACHE``, ``$XDG_CACHE_HOME/agentic_jax`` or
``~/.cache/agentic_jax``, `agentic_jax.cache.default_cache_dir`).
``AGENTIC_JAX_COMPILE_CACHE=0`` turns it off (``$JAX_COMPILATION_CACHE_DIR``, when set, is
JAX's own switch and stays on). JAX keeps only programs that took
at least a second to compile and evicts the least recently used past `MAX_BYTES`; a cache it
cannot read or write is skipped with a warning, never an error. The cache runs code: like
JAX's, it must not be a directory others can write to.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

MAX_BYTES = 4 << 30
_OFF = ("0", "false", "off", "no")


def enable_compile_cache() -> str | None:
    """Turns JAX's persistent compilation cache on for this process (before its first
    compilation); returns its directory, or None when ``AGENTIC_JAX_COMPILE_CACHE`` turns it
    off. A directory already configured (``JAX_COMPILATION_CACHE_DIR``, or set in code) is
    kept."""
    if os.environ.get("AGENTIC_JAX_COMPILE_CACHE", "1").strip().lower() in _OFF:
        return None
    import jax

    from agentic_jax.cache import default_cache_dir  # the package's cache

    directory = jax.config.jax_compilation_cache_dir
    if not directory:
        directory = str(default_cache_dir() / "xla")
        jax.config.update("jax_compilation_cache_dir", directory)
    if jax.config.jax_compilation_cache_max_size < 0:
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    logger.info("compiled programs are kept in %s (AGENTIC_JAX_COMPILE_CACHE=0 turns it off)",
                directory)
    return directory
