"""Tokenizers: a checkpoint's own, or the built-in byte-level BPE for the tiny models.

The built-in tokenizer is trained with the `tokenizers` library on curriculum text in the tool
format. Every digit is its own token (arithmetic stays learnable for small models), the code
and output fences are single tokens, and <|endoftext|> (end and padding), <|im_start|> and
<|im_end|> are special tokens. It is committed under assets/ and frozen there (the built-in
models' ids and the shipped warm-start results depend on it); tools/build_tokenizer.py builds
it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentic_jax.data import prompts
from agentic_jax.data.curriculum import generate_curriculum
from agentic_jax.errors import UserError

ASSET_DIR = Path(__file__).parent / "assets"
EOS_TOKEN = "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END)
TOOL_TOKENS = ("```python", "```output", "```")
DEFAULT_VOCAB_SIZE = 1024
# Typical sandbox messages, so error text tokenizes compactly too.
_ERROR_SAMPLES = (
    "NameError: name 'x' is not defined",
    "SyntaxError: invalid syntax",
    "ZeroDivisionError: division by zero",
    "TypeError: unsupported operand type(s)",
    "TimeoutError: the code ran past its time limit",
    "ImportError: only sympy, numpy and math can be imported",
)


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """A checkpoint's tokenizer (transformers fast tokenizer), from local files only."""
    from transformers import AutoTokenizer  # heavy import, only when a tokenizer is needed

    if not os.path.isdir(path):
        raise UserError(f"tokenizer path {str(path)!r}: expected a checkpoint directory")
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UserError(f"tokenizer path {str(path)!r}: no loadable tokenizer "
                        f"(tokenizer.json + tokenizer_config.json): {err}") from err


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer puts its BOS token in front of plain text (Llama 3 does, Qwen
    does not), as its own `add_special_tokens=True` encoding shows."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    with_special = tokenizer.encode("a", add_special_tokens=True)
    plain = tokenizer.encode("a", add_special_tokens=False)
    return with_special[:1] == [bos] and plain[:1] != [bos]


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Prompt token ids: the text's tokens, after the BOS token when the tokenizer adds one and
    the text (a chat template's output, say) does not already start with it. No EOS."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if adds_bos(tokenizer) and ids[:1] != [tokenizer.bos_token_id]:
        ids.insert(0, tokenizer.bos_token_id)
    return ids


def stop_token_ids(tokenizer: Any, generation_config: str | os.PathLike[str] | dict | None = None
                   ) -> tuple[int, ...]:
    """Ids that end a response: the tokenizer's EOS, every `eos_token_id` of a
    generation_config.json (a file, its directory, or its dict), and <|im_end|> when the
    tokenizer knows it but its EOS is <|endoftext|> (Qwen base tokenizers with a ChatML
    template). In that order, without repeats."""
    ids: list[int] = []

    def add(value: Any) -> None:
        for token in value if isinstance(value, (list, tuple)) else [value]:
            if token is not None and int(token) not in ids:
                ids.append(int(token))

    add(getattr(tokenizer, "eos_token_id", None))
    add(_generation_config(generation_config).get("eos_token_id"))
    if getattr(tokenizer, "eos_token", None) == EOS_TOKEN:
        im_end = tokenizer.convert_tokens_to_ids(IM_END)
        if im_end is not None and im_end != getattr(tokenizer, "unk_token_id", None):
            add(im_end)
    return tuple(ids)


def turn_end_id(tokenizer: Any, stop_ids: Sequence[int]) -> int:
    """The token that closes an assistant turn: the first of ``stop_ids`` (`stop_token_ids`)
    that the tokenizer's chat template writes after an assistant message (ChatML's
    <|im_end|>, also under a Qwen base tokenizer whose EOS is <|endoftext|>), else the first
    of ``stop_ids``, else the tokenizer's EOS."""
    stop_ids = [int(t) for t in stop_ids] or [int(tokenizer.eos_token_id)]
    if getattr(tokenizer, "chat_template", None):
        reply = "\u2063reply\u2063"  # a text no template writes by itself
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "question"}, {"role": "assistant", "content": reply}],
            tokenize=False)
        after = tokenizer.encode(text[text.rindex(reply) + len(reply):],
                                 add_special_tokens=False)
        for token in after:
            if token in stop_ids:
                return token
    return stop_ids[0]


def _generation_config(source: str | os.PathLike[str] | dict | None) -> dict[str, Any]:
    if source is None or isinstance(source, dict):
        return dict(source or {})
    path = Path(source)
    path = path / "generation_config.json" if path.is_dir() else path
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err})") from err


def builtin_tokenizer() -> Any:
    """The committed byte-level BPE of the built-in tiny models."""
    return load_tokenizer(ASSET_DIR)


def tokenizer_corpus(seed: int = 0) -> list[str]:
    """Training text: prompts and tool/direct responses for the whole curriculum."""
    texts = list(_ERROR_SAMPLES)
    for problem in generate_curriculum(seed):
        texts.append(prompts.format_prompt(problem.question))
        texts.append(prompts.tool_solution_text(problem, problem.answer))
        texts.append(prompts.direct_solution_text(problem))
    return texts


def train_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE,
                    out_dir: str | os.PathLike[str] | None = None) -> Any:
    """Trains the byte-level BPE on `texts`; saves it to `out_dir` when given.

    Training is deterministic: the same texts give the same vocabulary and merges.

    Returns:
      A transformers `PreTrainedTokenizerFast` with the special tokens and ChatML template.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size: expected >= {256 + len(SPECIAL_TOKENS)} (bytes and "
                         f"special tokens), got {vocab_size}")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    bpe.add_tokens([AddedToken(t, normalized=False, special=False) for t in TOOL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
    )
    tokenizer.chat_template = prompts.CHATML_TEMPLATE
    if out_dir is not None:
        _save(tokenizer, Path(out_dir))
    return tokenizer


def _save(tokenizer: Any, out_dir: Path) -> None:
    """Saves an HF tokenizer directory that older transformers releases load as well."""
    tokenizer.save_pretrained(str(out_dir))
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # the name every release knows
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
