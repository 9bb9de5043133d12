"""Native CPU kernels: XLA FFI custom calls compiled on first use.

XLA:CPU runs a decode step's paged attention as gathers and small batched products, about a
third of a SmolLM2 decode step at 1.3 cores (docs/performance.md). ``cpu/paged_decode.cc``
reads each visible key and value once, in place in the pool, spread over XLA's intra-op
threads: `paged_decode` is its entry point, the engine's decode attention on CPU
(``attention_impl`` "native", chosen by "auto" on a one-device CPU engine).

The source is compiled with the host's C++ compiler (``$CXX``, else ``c++``) into the
package's cache (`agentic_jax.cache.default_cache_dir` / ``kernels``), keyed by the
source, the flags, the compiler, jaxlib's version and the CPU, and loaded once a process.
Without a compiler (or with ``$CXX`` naming none), where the cache cannot be written, or with
``AGENTIC_JAX_NATIVE_KERNELS=0``, `available` says why and the engine keeps the XLA path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import filelock
import jax
import jax.numpy as jnp
import numpy as np

from agentic_jax.cache import default_cache_dir
from agentic_jax.kernels.paged_attention import as_bits

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "cpu" / "paged_decode.cc"
TARGET = "agentic_jax_paged_decode"
SYMBOL = "AgenticJaxPagedDecode"
FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp-simd", "-march=native")
ENV_SWITCH = "AGENTIC_JAX_NATIVE_KERNELS"
_lock = threading.Lock()
_registered: list[Path] = []


def _cpu_identity() -> str:
    """What ``-march=native`` compiles for: the CPU's model name and flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


def _compiler() -> str | None:
    """``$CXX`` when set (and only it), else ``c++`` or ``g++`` on PATH."""
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"])
    return shutil.which("c++") or shutil.which("g++")


def library_path(compiler: str) -> Path:
    """Where the compiled kernel lies for this source, these flags, compiler, jaxlib and CPU."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             check=False).stdout
    key = hashlib.sha256("\0".join([
        SOURCE.read_text(encoding="utf-8"), " ".join(FLAGS), version, jax.__version__,
        jax.lib.__version__ if hasattr(jax.lib, "__version__") else "", platform.machine(),
        _cpu_identity()]).encode()).hexdigest()[:20]
    return default_cache_dir() / "kernels" / f"paged_decode-{key}.so"


def _build(compiler: str, out: Path) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        cmd = [compiler, *FLAGS, f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        os.replace(tmp, out)   # atomic: another process sees the old file or the whole new one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.cache
def _load() -> tuple[bool, str]:
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False, f"{ENV_SWITCH}={os.environ[ENV_SWITCH]}"
    compiler = _compiler()
    if compiler is None:
        return False, "no C++ compiler ($CXX, c++ or g++) on PATH"
    try:
        path = library_path(compiler)
        path.parent.mkdir(parents=True, exist_ok=True)
        # One build at a time, across threads and processes (test workers start together).
        with _lock, filelock.FileLock(f"{path}.lock", timeout=600):
            if not path.exists():
                log.info("native kernels: compiling %s -> %s", SOURCE.name, path)
                _build(compiler, path)
            handler = getattr(ctypes.CDLL(str(path)), SYMBOL)
            if not _registered:   # a process registers the target once
                jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler), platform="cpu")
                _registered.append(path)
    except (OSError, RuntimeError, AttributeError, filelock.Timeout) as e:
        return False, f"the native kernel did not build or load: {e}"
    return True, f"compiled with {compiler}, cached at {path}"


def available() -> tuple[bool, str]:
    """(whether the native CPU kernels can run here, why / where they came from). Compiles
    and registers them on the first call of a process."""
    return _load()


def paged_decode(q: jax.Array, k_pool: jax.Array, v_pool: jax.Array, layer: jax.Array | int,
                 block_tables: jax.Array, lengths: jax.Array, *,
                 sm_scale: float | None = None) -> jax.Array:
    """One query a row, q [B, Hq, D], over the first lengths[b] positions of row b's pages
    -> [B, Hq, D] in q's dtype (computed in float32).

    k_pool / v_pool: every layer's pages [L, Hkv, P, ps, D] read in place (``layer`` picks
    one), or one layer's [Hkv, P, ps, D]; float32 or bfloat16 (or bfloat16's `as_bits`
    uint16 patterns). A row with length 0 gives zeros."""
    ok, why = available()
    if not ok:
        raise RuntimeError(f"native paged decode attention is unavailable: {why}")
    if k_pool.ndim == 4:
        k_pool, v_pool, layer = k_pool[None], v_pool[None], 0
    k_pool, v_pool = as_bits(k_pool), as_bits(v_pool)   # bfloat16 -> its uint16 patterns
    if k_pool.dtype not in (jnp.float32, jnp.uint16) or v_pool.dtype != k_pool.dtype:
        raise ValueError(f"native paged decode: pools of {k_pool.dtype} / {v_pool.dtype}; "
                         f"float32 or bfloat16 expected")
    dim = q.shape[-1]
    scale = 1.0 / float(np.sqrt(dim)) if sm_scale is None else float(sm_scale)
    out = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(q.shape, jnp.float32))(
        q.astype(jnp.float32), k_pool, v_pool, jnp.asarray(layer, jnp.int32),
        block_tables.astype(jnp.int32), lengths.astype(jnp.int32), scale=np.float32(scale))
    return out.astype(q.dtype)
