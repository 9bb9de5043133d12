"""The engine's decode attention on CPU through the native kernel (``attention_impl`` "native",
what "auto" picks on one CPU device) samples what the XLA path does."""

import dataclasses

import numpy as np
import pytest

from agentic_jax.kernels import cpu_native
from agentic_jax.rollout.engine import EngineConfig
from tests.rollout.test_engine import _run, model  # noqa: F401  (the model fixture)

pytestmark = pytest.mark.skipif(not cpu_native.available()[0],
                                reason=f"native kernel: {cpu_native.available()[1]}")


@pytest.mark.parametrize("cfg", [
    EngineConfig(num_slots=4, page_size=8),
    # Preemption: pages freed and written again while rows decode.
    EngineConfig(num_slots=4, page_size=4, kv_pages=26, decode_steps=8),
    EngineConfig(num_slots=3, page_size=4, prefix_caching=True, layer_arrays=True),
    EngineConfig(num_slots=4, page_size=8, mixed_prefill=8),
], ids=["default", "preempting", "prefix-cache-layer-arrays", "mixed-prefill"])
def test_native_decode_samples_what_the_xla_path_does(model, cfg):
    native, engine = _run(model, dataclasses.replace(cfg, attention_impl="native"))
    xla, _ = _run(model, dataclasses.replace(cfg, attention_impl="xla"))
    assert engine.runner.decode_impl == "native"
    # float32: in bfloat16 the XLA path rounds the probabilities to bfloat16 before the value
    # product, the kernel does not, and a sampled token may differ (tests/kernels covers the
    # kernel on bfloat16 pools against a float32 reference).
    atol = 1e-5
    assert native.keys() == xla.keys()
    for i, e in xla.items():
        assert native[i].tokens == e.tokens and native[i].reason == e.reason, i
        np.testing.assert_allclose(native[i].logprobs, e.logprobs, atol=atol)
        np.testing.assert_allclose(native[i].values, e.values, atol=atol)
    assert engine.pages_held == 0


def test_native_decode_programs_differ_by_row_count_alone(model):
    """The kernel reads block tables, not the page-pair list: a program a row count, where the
    XLA path compiles one a pair-list width too."""
    counts = {}
    for impl in ("native", "xla"):
        _, engine = _run(model, EngineConfig(num_slots=4, page_size=4, attention_impl=impl))
        counts[impl] = engine.warmup(64)[0]
    assert counts["native"] < counts["xla"]
