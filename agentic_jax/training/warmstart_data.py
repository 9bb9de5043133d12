"""The warm start's examples and batches: what is trained on, masked and padded.

An example is tokenised piecewise, exactly as a rollout builds an episode: the prompt (loss_mask
0), the policy's text, the tool's ```output block (loss_mask 0, as in RL), the policy's final
answer, and for a pretrained model the token that ends its turn. `ExampleFormat` says how the
last two differ between the built-in model and a pretrained one.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from agentic_jax.data import prompts as fmt
from agentic_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class WarmStartExample:
    tokens: list[int]
    loss_mask: list[int]
    uses_tool: bool


class ExampleFormat(NamedTuple):
    """How a response's environment and end pieces become tokens.

    The default is the built-in model's format, which its saved warm starts were trained on:
    the output block is ``format_tool_output``'s text, and nothing follows the answer (the
    episode ends at the closed \\boxed{}). A pretrained model's examples are its rollouts
    instead: the output block is `rollout.tool_text.render_tool_result`'s tokens within
    ``output_tokens`` (``environment.max_output_tokens``), and the response ends with
    ``end_ids``, its end-of-turn token (SmolLM2's and Qwen's chat ``<|im_end|>``), trained on
    like the rest of the policy's text so that the model still closes its turn.
    """

    output_tokens: int = 0       # > 0: render_tool_result's budget; 0: the built-in format
    end_ids: tuple[int, ...] = ()


class _Printed(NamedTuple):
    """A snippet that ran and printed ``stdout``, as `render_tool_result` reads a result."""

    stdout: str
    ok: bool = True


def output_tokens(stdout: str, tokenizer: Any, layout: ExampleFormat) -> list[int]:
    """The ```output block that follows a code block which printed ``stdout``."""
    if layout.output_tokens:
        from agentic_jax.rollout.tool_text import render_tool_result

        return render_tool_result(_Printed(stdout), tokenizer, max_tokens=layout.output_tokens)
    return list(tokenizer.encode(fmt.format_tool_output(stdout), add_special_tokens=False))


def build_example(problem: Any, prompt_tokens: list[int], tokenizer: Any, *,
                  tool_output: str | None, max_length: int,
                  layout: ExampleFormat = ExampleFormat()) -> WarmStartExample | None:
    """One supervised example; with ``tool_output`` the tool-using response, else the direct one.

    Returns None when the example does not fit in ``max_length`` tokens.
    """
    def enc(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    if tool_output is None:
        pieces = [(enc(fmt.direct_solution_text(problem)), 1)]
    else:
        # The response is policy text, the environment's output block, policy text.
        text = fmt.tool_solution_text(problem, tool_output)
        block = fmt.format_tool_output(tool_output)
        cut = text.index(block)
        pieces = [(enc(text[:cut]), 1), (output_tokens(tool_output, tokenizer, layout), 0),
                  (enc(text[cut + len(block):]), 1)]
    pieces.append((list(layout.end_ids), 1))
    tokens, mask = list(prompt_tokens), [0] * len(prompt_tokens)
    for piece, m in pieces:
        tokens += piece
        mask += [m] * len(piece)
    if len(tokens) > max_length:
        return None
    return WarmStartExample(tokens, mask, tool_output is not None)


def prints_answer(problem: Any, stdout: str) -> bool:
    """Whether a reference program's last printed line grades equal to the problem's answer."""
    from agentic_jax.reward.grader import grade_answer

    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    return bool(lines) and grade_answer(lines[-1].strip(), str(problem.answer))


def build_examples(problems: Sequence[Any], *, make_prompt: Callable[[Any], list[int]],
                   tokenizer: Any, run_code: Callable[[list[str]], list[str | None]],
                   tool_fraction: float, max_length: int, seed: int,
                   layout: ExampleFormat = ExampleFormat(),
                   check: Callable[[Any, str], bool] = prints_answer,
                   stats: dict[str, int] | None = None) -> list[WarmStartExample]:
    """Examples for ``problems``; a seeded ``tool_fraction`` of them use the tool.

    ``run_code`` runs reference solutions and returns each one's stdout, or None where it
    failed. A tool-using example is kept only where its program ran and ``check(problem,
    stdout)`` holds (by default: it printed the answer); otherwise, and for a problem without
    reference code, the problem falls back to its direct solution. ``stats``, when given, gets
    the counts ``tool_chosen`` / ``tool_ran`` / ``tool_kept`` / ``examples``.
    """
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"warmstart.tool_fraction: expected a value in [0, 1], got "
                         f"{tool_fraction}")
    rng = random.Random(seed)
    use_tool = [rng.random() < tool_fraction for _ in problems]
    tool_idx = [i for i, u in enumerate(use_tool) if u and problems[i].solution_code]
    results = run_code([problems[i].solution_code for i in tool_idx]) if tool_idx else []
    outputs: dict[int, str] = {}
    ran = 0
    for i, stdout in zip(tool_idx, results):
        if stdout is not None and stdout.strip():
            ran += 1
            if check(problems[i], stdout):
                outputs[i] = stdout
    examples = []
    for i, problem in enumerate(problems):
        ex = build_example(problem, make_prompt(problem), tokenizer,
                           tool_output=outputs.get(i), max_length=max_length, layout=layout)
        if ex is not None:
            examples.append(ex)
    if not examples:
        raise UserError(f"warm start: no example fits training.max_length={max_length}")
    if stats is not None:
        stats.update(tool_chosen=sum(use_tool), tool_ran=ran, tool_kept=len(outputs),
                     examples=len(examples))
    return examples


def length_grouped_batches(lengths: Sequence[int], batch_size: int, *, seed: int,
                           group: int = 64) -> list[list[int]]:
    """One pass over the examples as batches of indices, grouped by length.

    A seeded shuffle is cut into windows of ``group`` batches; each window is sorted by length
    and cut into batches, and the batches are shuffled again. Examples of similar length share a
    batch, so a batch pads to little more than its own examples (as HF Trainer's
    ``group_by_length``), while every batch is still drawn from across the whole set. Every
    index appears once; the last batch of a pass may be short.
    """
    if batch_size < 1 or group < 1:
        raise ValueError(f"batch_size and group: expected >= 1, got {batch_size}, {group}")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * group
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def batches(examples: Sequence[WarmStartExample], batch_size: int, steps: int,
            seed: int) -> list[list[WarmStartExample]]:
    """``steps`` full batches from passes of `length_grouped_batches`, a fresh order per pass;
    a pass's short batch is left out of it. Fewer examples than a batch are repeated."""
    pool = list(examples) * -(-batch_size // len(examples))
    lengths = [len(ex.tokens) for ex in pool]
    out: list[list[WarmStartExample]] = []
    epoch = 0
    while len(out) < steps:
        for batch in length_grouped_batches(lengths, batch_size, seed=seed * 1000 + epoch):
            if len(batch) == batch_size and len(out) < steps:
                out.append([pool[i] for i in batch])
        epoch += 1
    return out


def pack_batch(examples: Sequence[WarmStartExample], *, length: int,
               pad_id: int) -> dict[str, np.ndarray]:
    """Right-padded arrays for the compiled step: an SFT batch in the RL batch's layout."""
    n = len(examples)
    tokens = np.full((n, length), pad_id, np.int32)
    mask = np.zeros((n, length), np.float32)
    for i, ex in enumerate(examples):
        tokens[i, :len(ex.tokens)] = ex.tokens
        mask[i, :len(ex.loss_mask)] = ex.loss_mask
    zeros = np.zeros((n, length), np.float32)
    return {
        "tokens": tokens,
        "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (n, length)).copy(),
        "loss_mask": mask,
        "old_logprobs": zeros,
        "advantages": mask.copy(),
        "returns": zeros,
    }
