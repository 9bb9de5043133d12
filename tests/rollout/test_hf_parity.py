"""Greedy decoding equals Hugging Face `generate` on the same weights (tiny random Qwen2 / Llama).

The HF model is made and saved with transformers, then loaded through `from_pretrained`. HF runs
one prompt at a time without padding, so its own padding conventions play no part; the ragged
batch goes through our sampler in one call.
"""

import pytest
import torch
import transformers

from agentic_jax.models import from_pretrained
from agentic_jax.rollout import generate

COMMON = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
          "num_hidden_layers": 2, "max_position_embeddings": 256}
CONFIGS = {
    "qwen2-gqa": lambda: transformers.Qwen2Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    "llama-gqa": lambda: transformers.LlamaConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
        rms_norm_eps=1e-5),
}
# Ragged on purpose: a one-token prompt, and one longer than the sampler's 16-token chunk bucket.
PROMPTS = [[5, 17, 99, 3, 64], [7], [(11 * i) % 128 for i in range(1, 21)], [42, 42, 8]]
NEW_TOKENS = 24


def _randomise(model: torch.nn.Module) -> None:
    """Weights large enough that logits are well separated, so argmax is not decided by
    float32 rounding differences between the two implementations."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.1 * noise if "norm" in name else 0.15 * noise)


def _hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """HF greedy continuation of one unpadded prompt, with no end-of-sequence token."""
    config = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), generation_config=config)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """(HF greedy continuations of PROMPTS, our model loaded from the HF model's directory)."""
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(
        CONFIGS[request.param](), dtype=torch.float32, attn_implementation="eager")
    _randomise(hf)
    hf.eval()
    directory = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(directory)
    expected = [_hf_greedy(hf, p, NEW_TOKENS) for p in PROMPTS]
    return expected, from_pretrained(directory, dtype="float32")


def test_greedy_equals_transformers_generate(case):
    expected, ours = case
    # The comparison means something only if the continuations are not stuck on a few tokens.
    assert len({t for e in expected for t in e}) > 20
    assert generate(ours, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0.0) == expected


def test_stop_token_ends_each_row_after_its_first_occurrence(case):
    free_run, ours = case
    # A token the first row emits mid-way: rows stop at different points, some never.
    stop = free_run[0][NEW_TOKENS // 2]
    # What HF's eos_token_id does to an unpadded greedy run: cut after the first stop token.
    expected = [e[:e.index(stop) + 1] if stop in e else e for e in free_run]
    assert len({len(e) for e in expected}) > 1
    out = generate(ours, PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0.0, stop_tokens=[stop])
    assert out == expected
