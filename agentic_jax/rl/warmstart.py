"""Warm start: supervised training on curriculum solutions before RL.

A policy that has never seen the tool format cannot discover it, so the run begins with a short
supervised phase on reference responses: mostly written-out `direct_solution`s, and a small
fraction (``warmstart.tool_fraction``) of tool-using ones whose ```output blocks hold what the
reference code really printed in the sandbox. Keeping that fraction small leaves the growth of
code use to RL, which is the phenomenon under study.

Examples are tokenised piecewise, exactly as a rollout builds them: the policy's text, then the
tool output block (loss_mask 0, as in RL), then the policy's final answer. The update is the same
compiled step as RL with a vanilla policy-gradient loss and advantage 1, i.e. token-mean
cross-entropy on the policy's tokens.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from agentic_jax.data import prompts as fmt
from agentic_jax.utils import round_up

logger = logging.getLogger(__name__)

_LENGTH_BUCKET = 16


@dataclasses.dataclass(frozen=True)
class WarmStartExample:
    tokens: list[int]
    loss_mask: list[int]
    uses_tool: bool


def build_example(problem: Any, prompt_tokens: list[int], tokenizer: Any, *,
                  tool_output: str | None, max_length: int) -> WarmStartExample | None:
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
        pieces = [(enc(text[:cut]), 1), (enc(block), 0), (enc(text[cut + len(block):]), 1)]
    tokens, mask = list(prompt_tokens), [0] * len(prompt_tokens)
    for piece, m in pieces:
        tokens += piece
        mask += [m] * len(piece)
    if len(tokens) > max_length:
        return None
    return WarmStartExample(tokens, mask, tool_output is not None)


def build_examples(problems: Sequence[Any], *, make_prompt: Callable[[Any], list[int]],
                   tokenizer: Any, run_code: Callable[[list[str]], list[str | None]],
                   tool_fraction: float, max_length: int, seed: int) -> list[WarmStartExample]:
    """Examples for ``problems``; a seeded ``tool_fraction`` of them use the tool.

    ``run_code`` runs reference solutions and returns each one's stdout, or None where it
    failed; such a problem falls back to its direct solution.
    """
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"warmstart.tool_fraction: expected a value in [0, 1], got "
                         f"{tool_fraction}")
    rng = random.Random(seed)
    use_tool = [rng.random() < tool_fraction for _ in problems]
    tool_idx = [i for i, u in enumerate(use_tool) if u]
    results = run_code([problems[i].solution_code for i in tool_idx]) if tool_idx else []
    outputs: dict[int, str] = {}
    for i, stdout in zip(tool_idx, results):
        if stdout is not None and stdout.strip():
            outputs[i] = stdout
    examples = []
    for i, problem in enumerate(problems):
        ex = build_example(problem, make_prompt(problem), tokenizer,
                           tool_output=outputs.get(i), max_length=max_length)
        if ex is not None:
            examples.append(ex)
    if not examples:
        raise ValueError(f"warm start: no example fits training.max_length={max_length}")
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


def _batches(examples: Sequence[WarmStartExample], batch_size: int, steps: int,
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


class WarmStartResult(NamedTuple):
    params: Any                  # the policy's model state after the supervised phase
    metrics: dict[str, float]    # warmstart/ loss, examples, tool_fraction, time_s (wall)


def warm_start(run: Any, params: Any, *, progress: bool = True) -> WarmStartResult:
    """Supervised warm start of the policy ``params`` (a `Run`'s model state).

    Uses the run's mesh and the same step factory as RL, with its own optimizer (``warmstart.lr``
    with a short warmup and cosine decay over ``warmstart.steps``).
    """
    import jax
    from tqdm.auto import tqdm

    from agentic_jax.parallel import process_slice, put_rows
    from agentic_jax.rl.losses import LossConfig
    from agentic_jax.rl.optim import make_optimizer
    from agentic_jax.rl.shardings import init_opt_state, train_shardings
    from agentic_jax.rl.step import make_train_step

    cfg, policy = run.cfg, run.policy
    w, t = cfg.warmstart, cfg.training
    began = time.perf_counter()
    # Rows split over the data shards (which span the processes): round the batch up to them.
    batch_size = round_up(w.batch_size, run.row_multiple)
    share = process_slice(batch_size)  # the rows of every batch this process contributes
    examples = build_examples(
        random.Random(cfg.seed).sample(policy.problems.train,
                                       min(len(policy.problems.train), w.steps * batch_size)),
        make_prompt=policy.make_prompt, tokenizer=policy.tokenizer,
        run_code=lambda codes: run_everywhere(policy.sandbox, codes),
        tool_fraction=w.tool_fraction, max_length=t.max_length, seed=cfg.seed)
    optimizer = make_optimizer(lr=w.lr, warmup_steps=max(1, w.steps // 10),
                               total_steps=w.steps, max_grad_norm=t.max_grad_norm)
    shardings = train_shardings(params, optimizer, policy.mesh, policy.state_shardings,
                                offload_opt_state=t.offload_optimizer)
    loss_cfg = LossConfig(policy_loss="reinforce", value_coef=0.0, value_clip=None)
    step_fn = make_train_step(policy.graphdef, optimizer, loss_cfg, policy.mesh, 1,
                              shardings=shardings)
    opt_state = jax.jit(lambda s: init_opt_state(optimizer, s),
                        out_shardings=shardings.opt_state)(params)
    metrics: dict[str, float] = {}
    batches = _batches(examples, batch_size, w.steps, cfg.seed)
    bar = tqdm(range(w.steps), desc="warm start", disable=not progress, leave=False)
    for i in bar:
        rows = batches[i]
        # Pad to the batch's longest example (rounded up, so only a few shapes compile).
        length = min(t.max_length, round_up(max(len(ex.tokens) for ex in rows), _LENGTH_BUCKET))
        batch = put_rows(pack_batch(rows[share], length=length, pad_id=policy.pad_id),
                         run.batch_sharding)
        params, opt_state, m = step_fn(params, opt_state, batch)
        if i % 20 == 0 or i == w.steps - 1:
            metrics = {k: float(v) for k, v in jax.device_get(m).items()}
            bar.set_postfix(loss=f"{metrics['policy_loss']:.3f}")
    tool_share = sum(e.uses_tool for e in examples) / len(examples)
    return WarmStartResult(params, {"warmstart/loss": metrics.get("policy_loss", float("nan")),
                                    "warmstart/examples": float(len(examples)),
                                    "warmstart/tool_fraction": tool_share,
                                    "warmstart/time_s": time.perf_counter() - began})


def run_everywhere(sandbox: Any, codes: list[str]) -> list[str | None]:
    """Runs snippets in the sandbox -> each one's stdout, or None where it failed. On several
    hosts each runs its share and every host gets every result (so all build the same
    warm-start examples)."""
    from agentic_jax.parallel import gather_rows, gather_texts, process_slice

    local = sandbox.run_batch(codes[process_slice(len(codes))]) if codes else []
    ok = gather_rows(np.asarray([r.ok for r in local], bool))
    stdout = gather_texts([r.stdout if r.ok else "" for r in local])
    return [out if o else None for o, out in zip(ok, stdout)]
