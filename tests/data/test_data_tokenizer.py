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
def test_a_rebuild_is_deterministic_and_tokenizes_the_corpus_as_the_committed_asset(tmp_path):
    """The committed asset is frozen (the built-in models' ids and the shipped warm-start
    results depend on it); it was built from an earlier curriculum, so a rebuild from today's
    may break ties between equally frequent merges otherwise. What must hold: a rebuild is
    deterministic, and it splits every text of today's corpus into the committed asset's
    tokens, with the same size, special tokens and configuration."""
    corpus = tokenizer_corpus(seed=0)
    train_tokenizer(corpus, out_dir=tmp_path / "a")
    train_tokenizer(corpus, out_dir=tmp_path / "b")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert json.loads((tmp_path / "a" / "tokenizer_config.json").read_text()) == json.loads(
        (ASSET_DIR / "tokenizer_config.json").read_text())
    rebuilt, committed = (load_tokenizer(path) for path in (tmp_path / "a", ASSET_DIR))
    assert len(rebuilt) == len(committed)
    assert rebuilt.all_special_tokens == committed.all_special_tokens
    differ = [t for t in corpus if rebuilt.tokenize(t) != committed.tokenize(t)]
    assert not differ, f"{len(differ)} of {len(corpus)} texts split otherwise, e.g. {differ[0]!r}"

