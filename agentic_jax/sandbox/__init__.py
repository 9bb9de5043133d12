"""Secure execution of model-written Python: static checks, warm forked workers, OS isolation.

    from agentic_jax.sandbox import Sandbox, SandboxConfig, ExecResult
    with Sandbox(SandboxConfig(timeout_ms=500, memory_mb=100)) as sb:
        sb.run("print(6 * 7)").stdout   # "42\n"
"""

from agentic_jax.sandbox.sandbox import Sandbox
from agentic_jax.sandbox.session import Session
from agentic_jax.sandbox.types import HINTS, ExecResult, SandboxConfig

__all__ = ["HINTS", "ExecResult", "Sandbox", "SandboxConfig", "Session"]
