"""Prompt encoding with the tokenizer's BOS, and stop tokens from tokenizer + generation config."""

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from agentic_jax.data.tokenizer import (adds_bos, builtin_tokenizer, encode_prompt, stop_token_ids,
                                        turn_end_id)


@pytest.fixture(scope="module")
def llama_style():
    """A tokenizer that puts <|begin_of_text|> before plain text, as Llama 3's does."""
    vocab = {"<|begin_of_text|>": 0, "<|end_of_text|>": 1, "<|eot_id|>": 2, "a": 3, "b": 4,
             "[UNK]": 5}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin_of_text|>",
                                   eos_token="<|end_of_text|>", unk_token="[UNK]",
                                   additional_special_tokens=["<|eot_id|>"])


def test_bos_is_added_once_when_the_tokenizer_adds_one(llama_style):
    assert adds_bos(llama_style)
    assert encode_prompt(llama_style, "a b") == [0, 3, 4]
    # A chat template's output already starts with BOS: not doubled.
    assert encode_prompt(llama_style, "<|begin_of_text|> a") == [0, 3]


def test_no_bos_for_tokenizers_without_one():
    tokenizer = builtin_tokenizer()
    assert not adds_bos(tokenizer)
    text = "Problem: 1+1\nSolution:\n"
    assert encode_prompt(tokenizer, text) == tokenizer.encode(text, add_special_tokens=False)


def test_im_end_stops_when_the_eos_is_endoftext():
    tokenizer = builtin_tokenizer()
    assert tokenizer.eos_token == "<|endoftext|>"
    assert stop_token_ids(tokenizer) == (tokenizer.eos_token_id,
                                         tokenizer.convert_tokens_to_ids("<|im_end|>"))


def test_generation_config_eos_ids_are_added_in_order(llama_style, tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2, 1]}))
    assert stop_token_ids(llama_style) == (1,)
    assert stop_token_ids(llama_style, tmp_path) == (1, 2)
    assert stop_token_ids(llama_style, tmp_path / "generation_config.json") == (1, 2)
    assert stop_token_ids(llama_style, {"eos_token_id": 2}) == (1, 2)
    assert stop_token_ids(llama_style, tmp_path / "absent") == (1,)
    (tmp_path / "generation_config.json").write_text("{")
    with pytest.raises(ValueError, match="generation_config.json: not valid JSON"):
        stop_token_ids(llama_style, tmp_path)


def test_a_turn_ends_with_the_stop_id_the_chat_template_writes(llama_style):
    tokenizer = builtin_tokenizer()  # ChatML under an <|endoftext|> EOS, as Qwen base's
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert turn_end_id(tokenizer, stop_token_ids(tokenizer)) == im_end
    # Llama 3's template closes a turn with <|eot_id|>, its generation config's second EOS.
    llama_style.chat_template = (
        "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
        "{{ m['content'] }}<|eot_id|>{% endfor %}")
    assert turn_end_id(llama_style, (1, 2)) == 2
    assert turn_end_id(llama_style, (1,)) == 1  # not an end id: the first one
    llama_style.chat_template = None
    assert turn_end_id(llama_style, (1, 2)) == 1
    assert turn_end_id(llama_style, ()) == 1  # the EOS
