"""The sandboxes the applications run untrusted code in: students' code and reference tests
under the training whitelist; plots with matplotlib added, for the plot tool alone."""

from __future__ import annotations

from agentic_jax.sandbox import Sandbox, SandboxConfig

GRADING_WHITELIST = ("sympy", "numpy", "math")
# matplotlib renders; io and base64 carry the PNG out through stdout.
PLOT_WHITELIST = ("matplotlib", "numpy", "math", "io", "base64")


def grading_sandbox(num_workers: int | None = None) -> Sandbox:
    """For student code and reference tests: the training run's limits and whitelist."""
    return Sandbox(SandboxConfig(timeout_ms=2000, memory_mb=256, whitelist=GRADING_WHITELIST,
                                 num_workers=num_workers))


def plot_sandbox(num_workers: int = 1) -> Sandbox:
    """For plots: matplotlib is imported by the warm workers (a snippet then pays no import);
    the output cap fits a base64 PNG of up to 1.5 MB."""
    return Sandbox(SandboxConfig(timeout_ms=10_000, memory_mb=256, whitelist=PLOT_WHITELIST,
                                 num_workers=num_workers, max_output_bytes=2 << 20,
                                 cache_size=256))
