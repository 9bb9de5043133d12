"""The open rollout loop: episodes enter and leave one long-lived loop over the engine.

`RolloutService.submit(spec, key)` returns a handle at once, from any thread; `step()` (called
by one driving thread: a training step's collector, the server's worker) admits what was
submitted, moves every live episode on by one round and returns the episodes that finished in
it; `abort(handle)` ends an episode wherever it is (its pages are freed at the next round, a
queued tool call is cancelled and a running one's result dropped). New episodes enter the engine
while others decode, so a short request is not held behind a long one, and a caller streams
work in as earlier episodes free their slots.

Each live episode is in one `Phase`:

    DECODING      in the engine: queued, prefilling or decoding in a slot;
    RUNNING_TOOL  paused in the engine (its pages kept) after a tool call (`environment`),
                  which runs on the host while other episodes keep decoding;
    READY         the call's feedback (or a message past the tool budget) waits to be
                  appended: `Engine.resume` writes it into the episode's own pages (loss_mask 0,
                  log-prob 0) and queues it again;
    DONE          ended at EOS, at a closed \\boxed{} answer, or at its token limit.

The engine's pause hook reads an episode's current turn after every decode round trip: at the
first completed tool call or final answer it keeps the tokens up to it and the episode leaves
its slot for the next queued one. One round: admit submissions and aborts, collect finished
tool calls (RUNNING_TOOL -> READY; waiting only when the engine has nothing to run), hand the
ready feedback to the engine (READY -> DECODING, or DONE when it fills the budget), then one
engine step, whose events move episodes on.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import threading
import time
from typing import Any

import numpy as np

from agentic_jax.rollout import tool_text
from agentic_jax.rollout.environment import Tool, ToolSet
from agentic_jax.rollout.engine import Engine, Event, Request
from agentic_jax.rollout.episode import Episode
from agentic_jax.rollout.live import EpisodeHook, Live, Phase, finish, pause_ids
from agentic_jax.utils.timing import PhaseTimer

DISABLED_MESSAGE = "Tools are disabled: answer directly."

class RolloutService:
    """Args:
      engine: the `Engine` the policy samples with (``max_seq_len`` >= every episode's limit).
      tokenizer: a Hugging Face tokenizer (``encode``/``decode``, ``eos_token_id``).
      tools: the `environment.Tool`s episodes may call, in priority order.
      end_ids: token ids that end an episode.
      max_output_tokens: token budget of one rendered tool output.
      stop_on_answer: end an episode as soon as its \\boxed{} answer closes.
      constraint: the engine's per-request sampling constraint (or None).
    """

    def __init__(self, engine: Engine, tokenizer: Any, tools: list[Tool], *,
                 end_ids: tuple[int, ...], max_output_tokens: int = 32,
                 stop_on_answer: bool = True, constraint: Any = None):
        self.engine, self.tokenizer = engine, tokenizer
        self.toolset = ToolSet(tools, stop_on_answer)
        self.end_ids, self.max_output_tokens = tuple(end_ids), max_output_tokens
        self.pause_ids = pause_ids(tokenizer, self.toolset.pause_texts())
        self.constraint = constraint
        self.timer = PhaseTimer()
        self.live: dict[int, Live] = {}
        self._next = 0
        self._inbox: collections.deque[tuple[str, int, Any]] = collections.deque()
        self._wake = threading.Condition()
        self._interrupted = False

    # ------------------------------------------------------------------ any thread

    def submit(self, episode: Episode, key: np.ndarray, *, max_length: int,
               sampling: Any = None, on_update: EpisodeHook | None = None) -> int:
        """Queues an episode (its prompt, tool budget and timeout already set) to start at the
        next round; returns its handle. ``key``: its PRNG key data; ``max_length``: prompt +
        response tokens; ``sampling``: its `SamplingParams` (None: the engine's)."""
        prompt = episode.prompt_tokens
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= max_length:
            raise ValueError(f"the prompt has {len(prompt)} tokens; max_length is {max_length}")
        if max_length > self.engine.cfg.max_seq_len:
            raise ValueError(f"max_length {max_length} exceeds the rollout engine's max_seq_len "
                             f"{self.engine.cfg.max_seq_len}")
        live = Live(episode, np.asarray(key), max_length, sampling, on_update)
        with self._wake:
            handle, self._next = self._next, self._next + 1
            self._inbox.append(("submit", handle, live))
            self._wake.notify_all()
        return handle

    def abort(self, handle: int) -> None:
        """Ends an episode at the next round, wherever it is (no result is returned for it)."""
        with self._wake:
            self._inbox.append(("abort", handle, None))
            self._wake.notify_all()

    def interrupt(self) -> None:
        """Makes a `step` that waits for a tool call return at once (its caller has work to
        hand in, e.g. a new request)."""
        with self._wake:
            self._interrupted = True
            self._wake.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until there is something to do (a submission, an abort or live episodes);
        False on timeout."""
        with self._wake:
            return self._wake.wait_for(lambda: bool(self._inbox or self.live), timeout)

    @property
    def busy(self) -> bool:
        with self._wake:
            return bool(self._inbox or self.live)

    # ------------------------------------------------------------------ the driving thread

    def step(self) -> list[tuple[int, Episode]]:
        """One round (module docstring); returns (handle, episode) of the episodes that
        finished in it, with their text decoded."""
        self._take_inbox()
        finished: list[tuple[int, Episode]] = []
        self._collect_tools()
        self._append_outputs(finished)
        engine = self.engine
        if not engine.has_work and any(r.phase is Phase.DECODING for r in self.live.values()):
            raise RuntimeError("rollout: episodes wait to decode but the engine holds no work "
                               "for them")
        if engine.has_work:
            with self.timer("decode_s"):
                events = engine.step()
            for event in events:
                live = self.live[event.request_id]
                self._on_event(event.request_id, live, event)
                live.hook("done" if live.phase is Phase.DONE else "model")
                if live.phase is Phase.DONE:
                    finished.append((event.request_id, live.episode))
        for handle, episode in finished:
            del self.live[handle]
            episode.text = self.decode(episode.response_tokens)
        return finished

    def restart(self, handle: int) -> int:
        """Starts a live episode again from its prompt (same key, budget and timeout; a running
        call's result is dropped); returns the model tokens thrown away."""
        live = self.live[handle]
        old = live.episode
        self._drop(handle, live)
        self.live[handle] = Live(
            Episode(prompt_tokens=old.prompt_tokens, tool_budget=old.tool_budget,
                    timeout_ms=old.timeout_ms, stage=old.stage, difficulty=old.difficulty,
                    group_id=old.group_id),
            live.key, live.max_length, live.sampling, live.on_update)
        self.engine.submit(self._request(handle, self.live[handle]))
        return old.num_model_tokens

    def close(self) -> None:
        """Aborts every live episode (an error path: frees their pages and tool calls)."""
        with self._wake:
            self._inbox.clear()
        for handle, live in list(self.live.items()):
            self._drop(handle, live)
        self.live.clear()

    def decode(self, tokens) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def _take_inbox(self) -> None:
        with self._wake:
            commands, self._inbox = list(self._inbox), collections.deque()
        for command, handle, live in commands:
            if command == "submit":
                self.live[handle] = live
                self.engine.submit(self._request(handle, live))
            elif handle in self.live:
                self._drop(handle, self.live.pop(handle))

    def _drop(self, handle: int, live: Live) -> None:
        self.engine.abort(handle)
        if live.tool is not None:
            live.tool.cancel()
            live.tool = None

    def _request(self, handle: int, live: Live) -> Request:
        def pause(turn) -> int | None:
            live.call = self.toolset.first_event(list(turn), self.decode)
            return None if live.call is None else live.call.cut

        prompt = tuple(live.episode.prompt_tokens)
        return Request(request_id=handle, prompt=prompt,
                       max_new_tokens=live.max_length - len(prompt), key=live.key,
                       stop_tokens=self.end_ids, pause=pause, pause_tokens=self.pause_ids,
                       sampling=live.sampling, constraint=self.constraint)

    # ------------------------------------------------------------------ DECODING

    def _on_event(self, handle: int, live: Live, event: Event) -> None:
        """An episode left its slot: DECODING -> RUNNING_TOOL | READY | DONE."""
        ep = live.episode
        ep.add_model_tokens(event.tokens, event.logprobs, event.values, event.versions,
                            event.top_logprobs)
        if event.kind == "finished":
            finish(live, "eos" if event.reason == "stop" else "length", void=True)
            return
        call, live.call = live.call, None
        if call.tool is None:
            self.engine.release(handle)
            finish(live, "answer")
        elif ep.num_tool_calls < ep.tool_budget:
            ep.num_tool_calls += 1
            live.phase, live.tool_started = Phase.RUNNING_TOOL, time.perf_counter()
            live.call = call
            live.tool = call.tool.start(call.payload, timeout_ms=ep.timeout_ms, state=live.state)
            live.tool.add_done_callback(self._notify)
        else:
            message = tool_text.BUDGET_MESSAGE if ep.tool_budget > 0 else DISABLED_MESSAGE
            live.phase = Phase.READY
            live.output = tool_text.render_message(message, self.tokenizer)

    def _notify(self, _future: cf.Future) -> None:
        with self._wake:
            self._wake.notify_all()

    # ------------------------------------------------------------------ RUNNING_TOOL

    def _collect_tools(self) -> None:
        """RUNNING_TOOL -> READY for every finished call; waits for one (or for a submission)
        when the engine has nothing to run and no feedback is ready."""
        running = [r for r in self.live.values() if r.phase is Phase.RUNNING_TOOL]
        if not running:
            return
        if not self.engine.has_work and not any(r.phase is Phase.READY
                                                for r in self.live.values()):
            with self.timer("tool_wait_s"), self._wake:
                self._wake.wait_for(lambda: bool(self._inbox) or self._interrupted
                                    or any(r.tool.done() for r in running))
                self._interrupted = False
        for live in running:
            if live.tool.done():
                self._tool_finished(live)

    def _tool_finished(self, live: Live) -> None:
        result, ep, call = live.tool.result(), live.episode, live.call
        ep.tool_ms += (time.perf_counter() - live.tool_started) * 1e3
        feedback = call.tool.feedback(call.payload, result, tokenizer=self.tokenizer,
                                      max_tokens=self.max_output_tokens, state=live.state)
        if not feedback.ok:
            ep.num_tool_failures += 1
            ep.tool_errors.append(feedback.error)
        live.tool, live.call = None, None
        live.phase, live.output = Phase.READY, feedback.tokens

    # ------------------------------------------------------------------ READY

    def _append_outputs(self, finished: list[tuple[int, Episode]]) -> None:
        """READY -> DECODING (the feedback resumes the episode in the engine) or DONE (it
        reached the episode's token limit)."""
        for handle, live in self.live.items():
            if live.phase is not Phase.READY:
                continue
            room = live.max_length - live.length
            live.episode.add_tool_tokens(live.output[:room])
            live.hook("tool")
            if len(live.output) >= room:
                self.engine.release(handle)
                finish(live, "length")
                live.hook("done")
                finished.append((handle, live.episode))
            else:
                self.engine.resume(handle, live.output)
                live.phase = Phase.DECODING
            live.output = []
