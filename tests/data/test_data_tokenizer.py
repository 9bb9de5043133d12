"""The built-in byte-level BPE and checkpoint tokenizer loading."""

from __future__ import annotations

import json

import pytest
from transformers import PreTrainedTokenizerFast

from agentic_jax.data import (builtin_tokenizer, direct_solution_text, format_prompt,
                              format_tool_output, generate_curriculum, load_tokenizer,
                              tool_solution_text, train_tokenizer)
from agentic_jax.data.tokenizer import ASSET_DIR, tokenizer_corpus


@pytest.fixture(scope="module")
def tokenizer():
    return builtin_tokenizer()


@pytest.fixture(scope="module")
def texts():
    problems = generate_curriculum(seed=11, sizes={"arithmetic": 150, "algebra": 80,
                                                   "calculus": 80, "proof": 40})
    out = []
    for p in problems:
        out += [format_prompt(p.question), tool_solution_text(p, p.answer),
                direct_solution_text(p)]
    return out


def test_builtin_tokenizer_shape_and_special_tokens(tokenizer):
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert 512 <= len(tokenizer) <= 1024
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert special in tokenizer.all_special_tokens
        assert len(tokenizer.encode(special)) == 1
    for fence in ("```python", "```output", "```"):
        assert len(tokenizer.encode(fence)) == 1
    assert tokenizer.chat_template


def test_every_digit_is_its_own_token(tokenizer):
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode("x = 1234567890 * 55"))
    assert [t for t in pieces if any(c.isdigit() for c in t)] == list("1234567890") + ["5", "5"]
    assert not [t for t in tokenizer.get_vocab() if sum(c.isdigit() for c in t) > 1]


def test_round_trip_is_lossless(tokenizer, texts):
    extra = ["  odd\tspacing\n\n\nand unicode: é ∫ ☃ 😀", "<|im_start|>user\nhi<|im_end|>",
             format_tool_output("Traceback (most recent call last):\n  ValueError: ``` `")]
    for text in texts + extra:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tool_texts_are_compact(tokenizer, texts):
    tool = [t for t in texts if "```python" in t and "Solution:" not in t]
    assert sum(len(tokenizer.encode(t)) for t in tool) < 0.5 * sum(len(t) for t in tool)


def test_training_is_deterministic_and_saves_a_loadable_directory(tmp_path, texts):
    first = train_tokenizer(texts, vocab_size=600, out_dir=tmp_path / "a")
    second = train_tokenizer(texts, vocab_size=600, out_dir=tmp_path / "b")
    assert first.get_vocab() == second.get_vocab()
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (
        tmp_path / "b" / "tokenizer.json").read_text()
    loaded = load_tokenizer(tmp_path / "a")
    assert loaded.get_vocab() == first.get_vocab() and len(loaded) <= 600
    sample = texts[1]
    assert loaded.decode(loaded.encode(sample)) == sample


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["a"], vocab_size=100)
    with pytest.raises(ValueError, match="expected a checkpoint directory"):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no loadable tokenizer"):
        load_tokenizer(tmp_path)


@pytest.mark.slow
def test_committed_asset_is_reproducible(tmp_path):
    train_tokenizer(tokenizer_corpus(seed=0), out_dir=tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads(
            (ASSET_DIR / name).read_text())
