"""Constrained code decoding: inside a ```python block, only tokens that can still continue a
block `ast.parse` accepts may be sampled (the grammar is `python_grammar`'s subset).

The grammar engine is llguidance (`pip install agentic_jax[constrain]`): a Lark grammar over
the tokenizer's vocabulary, an Earley parser with a lazy lexer, and one allowed-token bitmask
per step computed on the host (about 0.1 ms for the built-in tokenizer). A row decodes freely
until its turn holds an opening fence; then the engine cuts the turn right after the opener,
primes a `BlockMatcher` with the turn so far, and decodes that row one token per round trip
with the matcher's mask as an input of the compiled sample step, until the block closes.

Only for serving and evaluation: the mask changes the sampling distribution, so PPO's ratios
(which assume the policy's own distribution) would be wrong on masked tokens; training never
sets it. The log-probabilities a masked row reports are still the policy's, unmasked.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Sequence

import numpy as np

from agentic_jax.data.prompts import CODE_OPEN
from agentic_jax.errors import UserError
from agentic_jax.rollout.python_grammar import python_block_grammar
from agentic_jax.rollout.tool_text import first_prefix_with


def bitmask_words(vocab_size: int) -> int:
    """int32 words of one row's allowed-token bitmask: bit j of word i is token 32 * i + j."""
    return -(-vocab_size // 32)


def batch_bitmasks(matchers: Sequence[Any], rows: int, vocab_size: int) -> np.ndarray | None:
    """int32 [rows, bitmask_words(vocab_size)] allowed-token bitmasks of a decode batch whose
    first rows hold ``matchers`` (None: unconstrained, all bits set); None when no row is
    constrained, so that the engine runs its unmasked program."""
    if all(m is None for m in matchers):
        return None
    allowed = np.full((rows, bitmask_words(vocab_size)), -1, np.int32)
    for i, matcher in enumerate(matchers):
        if matcher is not None:
            matcher.fill(allowed[i])
    return allowed


def _llguidance() -> Any:
    try:
        import llguidance
        import llguidance.hf  # noqa: F401  (the Hugging Face tokenizer bridge)
    except ImportError as err:
        raise ImportError("constrained code decoding needs llguidance: "
                          "pip install 'agentic_jax[constrain]'") from err
    return llguidance


@dataclasses.dataclass
class ConstraintStats:
    """blocks: code blocks decoded under the mask; masked_tokens: tokens sampled with a mask;
    mask_s: host seconds spent computing masks; failures: matchers that reached an error state
    (their rows continue unmasked)."""

    blocks: int = 0
    masked_tokens: int = 0
    mask_s: float = 0.0
    failures: int = 0


class CodeConstraint:
    """The compiled grammar for one tokenizer and vocabulary; hands out a `BlockMatcher` per
    turn that opens a code block. Shared by all rows (build it once: `code_constraint`).

    Args:
      tokenizer: a Hugging Face fast tokenizer.
      vocab_size: the model's vocabulary (may exceed the tokenizer's; extra ids are never allowed).
      decode: token ids -> text, as the tool loop reads turns (finds the opening fence).
      max_depth: nesting levels the grammar spells out.
    """

    def __init__(self, tokenizer: Any, vocab_size: int,
                 decode: Callable[[Sequence[int]], str] | None = None, max_depth: int = 4):
        llg = _llguidance()
        self.vocab_size, self.words = vocab_size, bitmask_words(vocab_size)
        self._decode = decode or (lambda ids: tokenizer.decode(list(ids),
                                                               skip_special_tokens=True))
        self._tokenizer = llg.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        grammar = llg.LLMatcher.grammar_from_lark(python_block_grammar(max_depth))
        self._proto = llg.LLMatcher(self._tokenizer, grammar, log_level=0)
        if self._proto.is_error():
            raise UserError(f"python block grammar: {self._proto.get_error()}")
        self.stats = ConstraintStats()

    def start(self, turn: Sequence[int]) -> tuple[int, BlockMatcher] | None:
        """For a turn decoded without a mask: None while it opens no code block; else (n, m):
        keep the turn's first n tokens (up to the one completing the opening fence) and
        decode on under matcher m, which has consumed them."""
        turn = [int(t) for t in turn]
        if CODE_OPEN not in self._decode(turn):
            return None
        cut = first_prefix_with(turn, self._decode, lambda text: CODE_OPEN in text)
        matcher = self._proto.deep_copy()
        # A token that completes the opener may carry bytes the grammar refuses (say a space
        # starting the first line): the matcher then stops before it and the row resamples it.
        kept = matcher.try_consume_tokens(turn[:cut])
        self.stats.blocks += 1
        return kept, BlockMatcher(matcher, self)


class BlockMatcher:
    """One row's grammar state from the start of its turn: `fill` its next token's bitmask,
    `advance` over the token sampled."""

    def __init__(self, matcher: Any, owner: CodeConstraint):
        self._matcher, self._owner = matcher, owner
        self.failed = False

    def fill(self, row: np.ndarray) -> None:
        """Writes the allowed-token bitmask (int32 [words]) of the next token into ``row``; all
        bits set once the matcher has failed (the row then samples unmasked)."""
        if row.shape != (self._owner.words,) or row.dtype != np.int32:
            raise ValueError(f"bitmask row: expected int32 [{self._owner.words}], got "
                             f"{row.dtype} {row.shape}")
        if self.failed or self._matcher.is_error():
            self._fail()
            row[:] = -1
            return
        t0 = time.perf_counter()
        self._matcher.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)
        self._owner.stats.mask_s += time.perf_counter() - t0
        self._owner.stats.masked_tokens += 1

    def advance(self, token: int) -> None:
        if not self.failed and not self._matcher.consume_token(int(token)):
            self._fail()

    def _fail(self) -> None:
        if not self.failed:
            self.failed = True
            self._owner.stats.failures += 1


@functools.lru_cache(maxsize=4)
def code_constraint(tokenizer: Any, vocab_size: int, max_depth: int = 4) -> CodeConstraint:
    """The `CodeConstraint` of a tokenizer and vocabulary, built once per process."""
    return CodeConstraint(tokenizer, vocab_size, max_depth=max_depth)
