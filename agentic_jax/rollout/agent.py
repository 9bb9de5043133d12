"""The multi-turn think -> code -> verify loop over a batch of prompts, on the rollout engine.

Every episode is one engine request (its row's PRNG key, so its tokens do not depend on
scheduling). Each row is in one `Phase`:

    DECODING      in the engine: queued, prefilling or decoding in a slot;
    RUNNING_TOOL  paused in the engine (its pages kept) after closing a ```python block, which
                  runs in the sandbox's host thread pool while the other rows keep decoding;
    READY         its ```output block (the result, or a message past the tool budget) waits to
                  be appended: `Engine.resume` writes it into the row's own pages (loss_mask 0,
                  log-prob 0) and queues the row again;
    DONE          ended at EOS, at a closed \\boxed{} answer, or at ``max_length`` tokens.

The engine's pause hook reads a row's current turn after every decode round trip
(`_turn_event`): at the first closed code block or final answer it keeps the tokens up to it and
the row leaves its slot for the next queued row. One round of the loop: collect finished snippets
(RUNNING_TOOL -> READY; waiting only when the engine has nothing to run), hand the ready outputs
to the engine (READY -> DECODING, or DONE when the output fills the budget), then one engine
step, whose events move rows on.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import enum
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from agentic_jax.rollout import tools
from agentic_jax.rollout.constrain import code_constraint
from agentic_jax.rollout.controller import ToolController
from agentic_jax.rollout.engine import Engine, Event, Request
from agentic_jax.rollout.episode import Episode
from agentic_jax.rollout.sampler import SamplingParams
from agentic_jax.utils.timing import PhaseTimer

_DISABLED_MESSAGE = "Tools are disabled: answer directly."
PARTIAL_MODES = ("continue", "abort")


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Args:
    max_length: prompt + response tokens per episode (``training.max_length``).
    max_output_tokens: token budget of one rendered tool output (head + tail kept).
    sampling: temperature / top-p / top-k.
    stop_on_answer: end an episode as soon as its \\boxed{} answer closes.
    stateful: an episode's code blocks share one namespace, as in a notebook (the sandbox
      replays the episode's earlier successful blocks before each new one).
    stop_ids: token ids that end an episode (e.g. `agentic_jax.data.tokenizer.stop_token_ids`
      of a pretrained model); empty: the tokenizer's EOS.
    constrain_code: inside a ```python block, sample only tokens that keep the block valid
      Python (`agentic_jax.rollout.constrain`). For serving and evaluation only: it changes
      the sampling distribution that training's importance ratios assume.
    partial: what unfinished episodes do when new weights arrive during `run` ("continue":
      decode on with them, earlier tokens keep their version and log-probs and their K/V is not
      recomputed; "abort": start again from the prompt with the same key, so every token is
      the new version's).
    """

    max_length: int
    max_output_tokens: int = 32
    sampling: SamplingParams = SamplingParams()
    stop_on_answer: bool = True
    stateful: bool = False
    stop_ids: tuple[int, ...] = ()
    constrain_code: bool = False
    partial: str = "continue"

    def __post_init__(self):
        if self.max_length <= 1:
            raise ValueError(f"max_length: expected > 1, got {self.max_length}")
        if self.max_output_tokens < 4:
            raise ValueError(f"max_output_tokens: expected >= 4, got {self.max_output_tokens}")
        if self.partial not in PARTIAL_MODES:
            raise ValueError(f"partial: expected one of {PARTIAL_MODES}, got {self.partial!r}")


class Phase(enum.Enum):
    DECODING = "decoding"
    RUNNING_TOOL = "running_tool"
    READY = "ready"
    DONE = "done"


class RowSpec(NamedTuple):
    """What the caller knows of one episode before it starts. ``sampling`` (None: the
    config's) and ``key`` (a PRNG key; None: the row's share of `AgentLoop.run`'s rng) let
    rows of one batch sample with their own settings and seeds (serving)."""

    prompt: Sequence[int]
    difficulty: float = 0.5
    stage: str = "default"
    group_id: int = 0
    sampling: SamplingParams | None = None
    key: Any = None


class RolloutResult(NamedTuple):
    """`AgentLoop.run`'s episodes (input order) and its timing and engine statistics (seconds:
    decode_s (engine steps: prefill, tool-output appends and decoding), tool_wait_s,
    rollout_s; accelerator_idle_frac; the engine's `EngineStats.as_metrics` for this run)."""

    episodes: list[Episode]
    timing: dict[str, float]


# Called with (row index, its episode so far, "model" | "tool" | "done") as the episode grows.
UpdateHook = Callable[[int, Episode, str], None]
# Polled between engine steps: new (weights, policy version) for the engine, or None.
WeightFeed = Callable[[], "tuple[Any, int] | None"]


class _TurnEvent(NamedTuple):
    cut: int            # turn tokens kept: up to the token completing the event
    code: str | None    # the closed block's code, or None for a final answer


@dataclasses.dataclass
class _Row:
    episode: Episode
    phase: Phase = Phase.DECODING
    event: _TurnEvent | None = None     # the turn event the pause hook found
    tool: cf.Future | None = None       # RUNNING_TOOL: the snippet's future
    tool_code: str = ""                 # RUNNING_TOOL: the snippet
    tool_started: float = 0.0
    history: list[str] = dataclasses.field(default_factory=list)  # blocks that ran cleanly
    output: list[int] = dataclasses.field(default_factory=list)  # READY: tokens to append

    @property
    def length(self) -> int:
        return len(self.episode.prompt_tokens) + len(self.episode.response_tokens)


class AgentLoop:
    """Runs batches of tool-using episodes.

    Args:
      engine: the `Engine` the policy samples with (its ``max_seq_len`` at least
        ``cfg.max_length``); it must hold no sequence when `run` starts.
      tokenizer: a Hugging Face tokenizer (``encode``/``decode``, ``eos_token_id``).
      sandbox: an `agentic_jax.sandbox.Sandbox` (``submit(code, timeout_ms=)`` -> Future).
      controller: the `ToolController` deciding budgets and timeouts (read, not changed: the
        caller updates it from the finished episodes).
    """

    def __init__(self, engine: Engine, tokenizer: Any, sandbox: Any,
                 controller: ToolController, cfg: AgentConfig):
        if engine.cfg.max_seq_len < cfg.max_length:
            raise ValueError(f"rollout engine max_seq_len {engine.cfg.max_seq_len} < "
                             f"max_length {cfg.max_length}")
        self.engine, self.tokenizer, self.sandbox = engine, tokenizer, sandbox
        self.controller, self.cfg = controller, cfg
        self.end_ids = tuple(_end_ids(tokenizer, cfg.stop_ids))
        self.pause_ids = _pause_ids(tokenizer)
        self.constraint = (code_constraint(tokenizer, engine.model_cfg.vocab_size)
                           if cfg.constrain_code else None)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def run(self, specs: Sequence[RowSpec], rng: jax.Array, *, row_offset: int = 0,
            total_rows: int | None = None, on_update: UpdateHook | None = None,
            weights: WeightFeed | None = None) -> RolloutResult:
        """Rolls out one episode per spec.

        Row b samples with ``jax.random.split(rng, total_rows)[row_offset + b]``: a host that
        rolls out rows [row_offset, row_offset + len(specs)) of a larger batch draws exactly
        what one process rolling out the whole batch would. ``on_update(b, episode, kind)`` is
        called as episode b grows: "model" (a turn's model tokens), "tool" (a tool output
        appended), "done" (finished, with the last turn's tokens; ``episode.finish_reason`` set,
        ``text`` not yet). ``weights()`` is polled before every engine step; new weights take
        effect at once, and unfinished episodes go on as ``cfg.partial`` says.
        """
        self._on_update = on_update or (lambda b, episode, kind: None)
        n = len(specs)
        total_rows = n if total_rows is None else total_rows
        if row_offset < 0 or row_offset + n > total_rows:
            raise ValueError(f"rows [{row_offset}, {row_offset + n}) are not inside a batch of "
                             f"{total_rows}")
        rows = [self._new_row(i, spec) for i, spec in enumerate(specs)]
        engine = self.engine
        engine.set_sampling(self.cfg.sampling)
        engine.reset_stats()
        keys = np.asarray(jax.random.key_data(
            jax.random.split(rng, total_rows)[row_offset:row_offset + n]))
        timer = PhaseTimer()
        aborted = 0
        try:
            row_keys = [keys[b] if spec.key is None else np.asarray(jax.random.key_data(spec.key))
                        for b, spec in enumerate(specs)]
            for b, (row, spec) in enumerate(zip(rows, specs)):
                engine.submit(self._request(b, row, row_keys[b], spec.sampling))
            while any(r.phase is not Phase.DONE for r in rows):
                new = weights() if weights is not None else None
                if new is not None:
                    engine.update_params(*new)
                    if self.cfg.partial == "abort":
                        aborted += self._restart_unfinished(rows, row_keys, specs)
                self._collect_tools(rows, timer)
                self._append_outputs(rows)
                if not engine.has_work and any(r.phase is Phase.DECODING for r in rows):
                    raise RuntimeError("rollout: episodes wait to decode but the engine holds "
                                       "no work for them")
                if engine.has_work:
                    with timer("decode_s"):
                        events = engine.step()
                    for event in events:
                        self._on_event(rows[event.request_id], event)
                        self._on_update(event.request_id, rows[event.request_id].episode,
                                        "done" if rows[event.request_id].phase is Phase.DONE
                                        else "model")
        finally:
            for b in range(n):  # after an error, rows left in the engine free their pages
                engine.abort(b)
        for row in rows:
            row.episode.text = self.decode(row.episode.response_tokens)
        timing = dict(_timing(timer), **engine.stats.as_metrics())
        if weights is not None:
            timing["aborted_tokens"] = float(aborted)
        return RolloutResult([r.episode for r in rows], timing)

    def _new_row(self, i: int, spec: RowSpec) -> _Row:
        if len(spec.prompt) >= self.cfg.max_length:
            raise ValueError(f"prompt {i} has {len(spec.prompt)} tokens; training.max_length "
                             f"is {self.cfg.max_length}")
        if len(spec.prompt) == 0:
            raise ValueError(f"prompt {i} is empty")
        stats = self.sandbox.stats() if hasattr(self.sandbox, "stats") else {}
        workers = max(1.0, float(stats.get("workers", 1)))
        decision = self.controller.decide(
            difficulty=spec.difficulty, stage=spec.stage,
            backlog_per_worker=float(stats.get("backlog", 0.0)) / workers,
            latency_ms=float(stats.get("latency_ms_p50", 0.0)))
        return _Row(Episode(prompt_tokens=list(spec.prompt), tool_budget=decision.tool_budget,
                            timeout_ms=decision.timeout_ms, stage=spec.stage,
                            difficulty=spec.difficulty, group_id=spec.group_id))

    def _restart_unfinished(self, rows: list[_Row], keys: Sequence[np.ndarray],
                            specs: Sequence[RowSpec]) -> int:
        """Aborts every unfinished episode and queues it again from its prompt (same key, tool
        budget and timeout; a running snippet's result is dropped); returns the model tokens
        thrown away."""
        dropped = 0
        for b, row in enumerate(rows):
            if row.phase is Phase.DONE:
                continue
            old = row.episode
            dropped += old.num_model_tokens
            self.engine.abort(b)
            rows[b] = _Row(Episode(prompt_tokens=old.prompt_tokens, tool_budget=old.tool_budget,
                                   timeout_ms=old.timeout_ms, stage=old.stage,
                                   difficulty=old.difficulty, group_id=old.group_id))
            self.engine.submit(self._request(b, rows[b], keys[b], specs[b].sampling))
        return dropped

    def _request(self, b: int, row: _Row, key: np.ndarray,
                 sampling: SamplingParams | None) -> Request:
        def pause(turn: Sequence[int]) -> int | None:
            row.event = self._turn_event(list(turn))
            return None if row.event is None else row.event.cut

        prompt = tuple(row.episode.prompt_tokens)
        return Request(request_id=b, prompt=prompt,
                       max_new_tokens=self.cfg.max_length - len(prompt), key=key,
                       stop_tokens=self.end_ids, pause=pause, pause_tokens=self.pause_ids,
                       sampling=sampling, constraint=self.constraint)

    # ------------------------------------------------------------------ DECODING

    def _on_event(self, row: _Row, event: Event) -> None:
        """A row left its slot: DECODING -> RUNNING_TOOL | READY | DONE."""
        ep = row.episode
        ep.add_model_tokens(event.tokens, event.logprobs, event.values, event.versions)
        if event.kind == "finished":
            _finish(row, "eos" if event.reason == "stop" else "length", void=True)
            return
        turn, row.event = row.event, None
        if turn.code is None:
            self.engine.release(event.request_id)
            _finish(row, "answer")
        elif ep.num_tool_calls < ep.tool_budget:
            ep.num_tool_calls += 1
            row.phase, row.tool_started = Phase.RUNNING_TOOL, time.perf_counter()
            row.tool_code = turn.code
            history = {"history": tuple(row.history)} if self.cfg.stateful else {}
            row.tool = self.sandbox.submit(turn.code, timeout_ms=ep.timeout_ms, **history)
        else:
            message = tools.BUDGET_MESSAGE if ep.tool_budget > 0 else _DISABLED_MESSAGE
            self._ready(row, tools.render_message(message, self.tokenizer))

    def _turn_event(self, turn: list[int]) -> _TurnEvent | None:
        """The turn's first completed event: a closed code block or (with stop_on_answer) a
        closed final answer; None while neither has happened."""
        def happened(text: str) -> bool:
            return tools.find_closed_code(text) is not None or (
                self.cfg.stop_on_answer and tools.has_final_answer(text))

        if not happened(self.decode(turn)):
            return None
        cut = tools.first_prefix_with(turn, self.decode, happened)
        code = tools.find_closed_code(self.decode(turn[:cut]))
        return _TurnEvent(cut, None if code is None else code[0])

    # ------------------------------------------------------------------ RUNNING_TOOL

    def _collect_tools(self, rows: list[_Row], timer: PhaseTimer) -> None:
        """RUNNING_TOOL -> READY for every finished snippet; waits for one when the engine has
        nothing to run and no output is ready."""
        running = [r for r in rows if r.phase is Phase.RUNNING_TOOL]
        if not running:
            return
        if not self.engine.has_work and not any(r.phase is Phase.READY for r in rows):
            with timer("tool_wait_s"):
                cf.wait([r.tool for r in running], return_when=cf.FIRST_COMPLETED)
        for row in running:
            if row.tool.done():
                self._tool_finished(row)

    def _tool_finished(self, row: _Row) -> None:
        result, ep = row.tool.result(), row.episode
        ep.tool_ms += (time.perf_counter() - row.tool_started) * 1e3
        if not result.ok:
            ep.num_tool_failures += 1
            ep.tool_errors.append(str(result.error))
        elif self.cfg.stateful:
            row.history.append(row.tool_code)
        row.tool = None
        self._ready(row, tools.render_tool_result(result, self.tokenizer,
                                                  max_tokens=self.cfg.max_output_tokens))

    @staticmethod
    def _ready(row: _Row, output: list[int]) -> None:
        row.phase, row.output = Phase.READY, output

    # ------------------------------------------------------------------ READY

    def _append_outputs(self, rows: list[_Row]) -> None:
        """READY -> DECODING (the output resumes the row in the engine) or DONE (the output
        reached max_length)."""
        for b, row in enumerate(rows):
            if row.phase is not Phase.READY:
                continue
            room = self.cfg.max_length - row.length
            row.episode.add_tool_tokens(row.output[:room])
            self._on_update(b, row.episode, "tool")
            if len(row.output) >= room:
                self.engine.release(b)
                _finish(row, "length")
                self._on_update(b, row.episode, "done")
            else:
                self.engine.resume(b, row.output)
                row.phase = Phase.DECODING
            row.output = []


def _finish(row: _Row, reason: str, void: bool = False) -> None:
    row.phase = Phase.DONE
    row.episode.finish_reason = reason
    row.episode.void_turn = row.episode.void_turn or void


def _end_ids(tokenizer: Any, stop_ids: Sequence[int]) -> list[int]:
    """The ids that end an episode: ``stop_ids``, or the tokenizer's EOS when there are none."""
    if stop_ids:
        return [int(t) for t in stop_ids]
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def _pause_ids(tokenizer: Any) -> tuple[int, ...]:
    """The closing code fence when the tokenizer has it as one token (the built-in one): a slot
    stops its round trip there, so the snippet starts without waiting for the round to end."""
    fence = tokenizer.encode(tools.CODE_CLOSE, add_special_tokens=False)
    return (int(fence[0]),) if len(fence) == 1 else ()


def _timing(timer: PhaseTimer) -> dict[str, float]:
    """The timer's phases, the rollout's wall time and the accelerator's idle fraction."""
    total = timer.elapsed
    busy = timer["decode_s"]
    return dict(timer.seconds, rollout_s=total,
                accelerator_idle_frac=max(0.0, 1.0 - busy / total) if total > 0 else 0.0)
