"""The multi-turn think -> code -> verify loop over a batch of prompts.

Rows decode together on the accelerator. When a row closes a ```python block, its code goes to
the sandbox's host thread pool and the row leaves the decode set; the other rows keep decoding
while the snippet runs. When the result arrives it is rendered as a ```output block, appended to
the row's tokens (loss_mask 0, log-prob 0) and written into its KV cache, and the row resumes.
An episode ends at EOS, at a closed \\boxed{} answer, or at ``max_length`` tokens; past its tool
budget a code block is answered with a message instead of being run.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import time
from typing import Any, Sequence

import jax
import numpy as np

from agentic_jax.rollout.controller import ToolController
from agentic_jax.rollout.episode import Episode
from agentic_jax.rollout.sampler import Sampler, SamplingParams
from agentic_jax.rollout import tools

_DISABLED_MESSAGE = "Tools are disabled: answer directly."


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Args:
    max_length: prompt + response tokens per episode (``training.max_length``).
    max_output_tokens: token budget of one rendered tool output (head + tail kept).
    decode_chunk: decode steps per device dispatch; smaller reacts faster to finished tools.
    sampling: temperature / top-p / top-k.
    stop_on_answer: end an episode as soon as its \\boxed{} answer closes.
    """

    max_length: int
    max_output_tokens: int = 32
    decode_chunk: int = 32
    sampling: SamplingParams = SamplingParams()
    stop_on_answer: bool = True

    def __post_init__(self):
        if self.max_length <= 1:
            raise ValueError(f"training.max_length must be > 1, got {self.max_length}")
        if self.max_output_tokens < 4:
            raise ValueError(f"environment.max_output_tokens must be >= 4, got "
                             f"{self.max_output_tokens}")
        if self.decode_chunk <= 0:
            raise ValueError(f"decode_chunk must be positive, got {self.decode_chunk}")


@dataclasses.dataclass
class _Row:
    episode: Episode
    prompt_len: int
    turn_start: int = 0     # response index where the current turn begins
    done: bool = False


class AgentLoop:
    """Runs batches of tool-using episodes.

    Args:
      sampler: a `Sampler` whose ``max_len`` is at least ``cfg.max_length``.
      tokenizer: a Hugging Face tokenizer (``encode``/``decode``, ``eos_token_id``).
      sandbox: an `agentic_jax.sandbox.Sandbox` (``submit(code, timeout_ms=)`` -> Future).
      controller: the `ToolController` deciding budgets and timeouts.
    """

    def __init__(self, sampler: Sampler, tokenizer: Any, sandbox: Any,
                 controller: ToolController, cfg: AgentConfig):
        if sampler.max_len < cfg.max_length:
            raise ValueError(f"sampler max_len {sampler.max_len} < max_length {cfg.max_length}")
        self.sampler, self.tokenizer, self.sandbox = sampler, tokenizer, sandbox
        self.controller, self.cfg = controller, cfg
        self.stop_ids = _stop_ids(tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def run(self, prompts: Sequence[Sequence[int]], rng: jax.Array, *,
            difficulties: Sequence[float] | None = None, stages: Sequence[str] | None = None,
            metas: Sequence[dict] | None = None, row_offset: int = 0,
            total_rows: int | None = None) -> tuple[list[Episode], dict[str, float]]:
        """Rolls out one episode per prompt; returns (episodes, timing and tool statistics).

        Row b samples with ``jax.random.split(rng, total_rows)[row_offset + b]``: a host that
        rolls out rows [row_offset, row_offset + len(prompts)) of a larger batch draws exactly
        what one process rolling out the whole batch would.
        """
        n = len(prompts)
        total_rows = n if total_rows is None else total_rows
        if row_offset < 0 or row_offset + n > total_rows:
            raise ValueError(f"rows [{row_offset}, {row_offset + n}) are not inside a batch of "
                             f"{total_rows}")
        difficulties = difficulties if difficulties is not None else [0.5] * n
        stages = stages if stages is not None else ["default"] * n
        rows = [self._new_row(p, d, s, (metas or [{}] * n)[i])
                for i, (p, d, s) in enumerate(zip(prompts, difficulties, stages))]
        for i, row in enumerate(rows):
            if row.prompt_len >= self.cfg.max_length:
                raise ValueError(f"prompt {i} has {row.prompt_len} tokens; training.max_length "
                                 f"is {self.cfg.max_length}")
        timer = _Timer()
        with timer("decode_s"):
            state = self.sampler.prefill([r.episode.prompt_tokens for r in rows])
        lengths = np.asarray([r.prompt_len for r in rows], np.int64)
        row_keys = jax.random.split(rng, total_rows)[row_offset:row_offset + n]
        active = np.ones(n, bool)
        pending: dict[int, tuple[cf.Future, float]] = {}
        ready: dict[int, list[int]] = {}
        while True:
            ready.update(self._harvest(rows, pending, block=not active.any() and not ready,
                                       timer=timer))
            if ready:
                with timer("append_s"):
                    state = self._append(state, rows, ready, lengths, active)
                ready = {}
            if not active.any():
                if not pending:
                    break
                continue
            with timer("decode_s"):
                state, toks, lps, vals, count, _ = self.sampler.decode(
                    state, row_keys, active=active, budget=self.cfg.max_length - lengths,
                    stop_ids=self.stop_ids, params=self.cfg.sampling,
                    num_steps=self.cfg.decode_chunk)
                toks, lps, vals, count = jax.device_get((toks, lps, vals, count))
            for b in np.flatnonzero(active):
                k = int(count[b])
                rows[b].episode.add_model_tokens(toks[b, :k], lps[b, :k], vals[b, :k])
                self._after_decode(b, rows[b], lengths, active, pending, ready)
            state = self.sampler.set_lengths(state, lengths)
        for row in rows:
            row.episode.text = self.decode(row.episode.response_tokens)
            meta = row.episode.meta
            self.controller.observe(meta.get("stage", "default"), row.episode.num_tool_calls,
                                    row.episode.num_tool_failures)
        return [r.episode for r in rows], timer.summary()

    def _new_row(self, prompt: Sequence[int], difficulty: float, stage: str,
                 meta: dict) -> _Row:
        stats = self.sandbox.stats() if hasattr(self.sandbox, "stats") else {}
        workers = max(1.0, float(stats.get("workers", 1)))
        decision = self.controller.decide(
            difficulty=difficulty, stage=stage,
            backlog_per_worker=float(stats.get("backlog", 0.0)) / workers,
            latency_ms=float(stats.get("latency_ms_p50", 0.0)))
        ep = Episode(prompt_tokens=list(prompt), tool_budget=decision.tool_budget,
                     timeout_ms=decision.timeout_ms,
                     meta={**meta, "stage": stage, "difficulty": difficulty})
        return _Row(episode=ep, prompt_len=len(prompt))

    def _after_decode(self, b: int, row: _Row, lengths: np.ndarray, active: np.ndarray,
                      pending: dict, ready: dict) -> None:
        """Decides what a row does next after new model tokens arrived."""
        ep = row.episode
        turn = ep.response_tokens[row.turn_start:]
        text = self.decode(turn)
        code = tools.find_closed_code(text)
        answered = self.cfg.stop_on_answer and tools.has_final_answer(text)
        eos = self.tokenizer.eos_token_id
        if code is not None or answered:
            # Cut the turn where the first event completed; later tokens are discarded.
            def event(t: str) -> bool:
                return tools.find_closed_code(t) is not None or (
                    self.cfg.stop_on_answer and tools.has_final_answer(t))
            cut = tools.first_prefix_with(turn, self.decode, event)
            ep.truncate(row.turn_start + cut)
            lengths[b] = row.prompt_len + len(ep.response_tokens)
            code = tools.find_closed_code(self.decode(ep.response_tokens[row.turn_start:]))
            if code is None:
                self._finish(row, active, b, "answer")
                return
            active[b] = False
            if ep.num_tool_calls < ep.tool_budget:
                ep.num_tool_calls += 1
                future = self.sandbox.submit(code[0], timeout_ms=ep.timeout_ms)
                pending[b] = (future, time.perf_counter())
            else:
                message = tools.BUDGET_MESSAGE if ep.tool_budget > 0 else _DISABLED_MESSAGE
                ready[b] = tools.render_message(message, self.tokenizer)
            return
        lengths[b] = row.prompt_len + len(ep.response_tokens)
        if eos is not None and turn and turn[-1] == eos:
            self._finish(row, active, b, "eos", void=True)
        elif lengths[b] >= self.cfg.max_length:
            self._finish(row, active, b, "length", void=True)

    def _finish(self, row: _Row, active: np.ndarray, b: int, reason: str,
                void: bool = False) -> None:
        row.done = True
        row.episode.finish_reason = reason
        row.episode.void_turn = row.episode.void_turn or void
        active[b] = False

    def _harvest(self, rows: list[_Row], pending: dict, *, block: bool,
                 timer: _Timer) -> dict[int, list[int]]:
        """Collects finished snippets as rendered output tokens; waits for one if ``block``."""
        if not pending:
            return {}
        if block:
            with timer("tool_wait_s"):
                cf.wait([f for f, _ in pending.values()], return_when=cf.FIRST_COMPLETED)
        out = {}
        for b in [b for b, (f, _) in pending.items() if f.done()]:
            future, t0 = pending.pop(b)
            result = future.result()
            ep = rows[b].episode
            ep.tool_ms += (time.perf_counter() - t0) * 1e3
            if not result.ok:
                ep.num_tool_failures += 1
                ep.tool_errors.append(str(result.error))
            out[b] = tools.render_tool_result(result, self.tokenizer,
                                              max_tokens=self.cfg.max_output_tokens)
        return out

    def _append(self, state, rows: list[_Row], ready: dict[int, list[int]],
                lengths: np.ndarray, active: np.ndarray):
        chunks: list[list[int]] = [[] for _ in rows]
        for b, tokens in ready.items():
            row = rows[b]
            room = self.cfg.max_length - int(lengths[b])
            row.episode.add_tool_tokens(tokens[:room])
            lengths[b] += min(len(tokens), room)
            row.turn_start = len(row.episode.response_tokens)
            if len(tokens) >= room:
                self._finish(row, active, b, "length")
                continue
            chunks[b] = tokens
            active[b] = True
        if not any(chunks):
            return state
        return self.sampler.append(state, chunks)


def _stop_ids(tokenizer: Any) -> list[int]:
    """EOS, plus the closing fence when the tokenizer has it as one token (the built-in one)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    fence = tokenizer.encode(tools.CODE_CLOSE, add_special_tokens=False)
    if len(fence) == 1:
        ids.append(int(fence[0]))
    return ids


class _Timer:
    """Accumulates wall time per phase; the summary adds the accelerator idle fraction."""

    def __init__(self):
        self.totals: dict[str, float] = {}
        self.start = time.perf_counter()

    def __call__(self, name: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.totals[name] = timer.totals.get(name, 0.0) + time.perf_counter() - self.t0

        return _Ctx()

    def summary(self) -> dict[str, float]:
        total = time.perf_counter() - self.start
        out = {k: v for k, v in self.totals.items()}
        out["rollout_s"] = total
        busy = out.get("decode_s", 0.0) + out.get("append_s", 0.0)
        out["accelerator_idle_frac"] = max(0.0, 1.0 - busy / total) if total > 0 else 0.0
        return out
