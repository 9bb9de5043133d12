"""A batch of tool-using episodes: the training and evaluation client of `RolloutService`, and
what every client of the service shares.

`AgentLoop.run(specs, rng)` submits one episode per spec to the open rollout loop
(`agentic_jax.rollout.service`), steps it until every episode has finished and returns them in
input order. Row b samples with its own PRNG key (its share of ``rng``), so its tokens do not
depend on scheduling, on what else is in the engine, or on the slot it lands in.

Shared with the service's other clients (training's step stream, the server's worker):
`build_service` (the loop over an engine with an `AgentConfig`'s end ids, tool-output budget and
code constraint; the tools are the Python sandbox unless ``tools`` says otherwise),
`new_episode` (a row's empty episode with the tool controller's budget) and `poll_weights` (new
weights mid-rollout, and what becomes of the unfinished episodes).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from agentic_jax.rollout.constrain import code_constraint
from agentic_jax.rollout.controller import ToolController
from agentic_jax.rollout.engine import Engine
from agentic_jax.rollout.environment import PythonTool, Tool
from agentic_jax.rollout.episode import Episode
from agentic_jax.rollout.engine.types import SamplingParams
from agentic_jax.rollout.service import RolloutService
from agentic_jax.utils.timing import PhaseTimer

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


class RowSpec(NamedTuple):
    """What the caller knows of one episode before it starts. ``sampling`` (None: the
    config's) and ``key`` (a PRNG key; None: the row's share of `AgentLoop.run`'s rng) let
    rows of one batch sample with their own settings and seeds (serving). ``max_length``:
    prompt + response tokens of this episode (None: the config's); ``tools`` False: the
    episode may call no tool (its calls are answered with a message)."""

    prompt: Sequence[int]
    difficulty: float = 0.5
    stage: str = "default"
    group_id: int = 0
    sampling: SamplingParams | None = None
    key: Any = None
    max_length: int | None = None
    tools: bool = True


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


def build_service(engine: Engine, tokenizer: Any, cfg: AgentConfig,
                  tools: Sequence[Tool] | None = None, sandbox: Any = None) -> RolloutService:
    """The open rollout loop over ``engine`` with ``cfg``'s end ids, tool-output budget, answer
    stop and (``constrain_code``) Python-block constraint. ``tools``: the episodes' tools
    (`agentic_jax.rollout.environment`); None: the Python tool over ``sandbox`` (an
    `agentic_jax.sandbox.Sandbox`)."""
    constraint = (code_constraint(tokenizer, engine.model_cfg.vocab_size)
                  if cfg.constrain_code else None)
    return RolloutService(
        engine, tokenizer,
        list(tools) if tools is not None else [PythonTool(sandbox, cfg.stateful)],
        end_ids=tuple(end_ids(tokenizer, cfg.stop_ids)),
        max_output_tokens=cfg.max_output_tokens, stop_on_answer=cfg.stop_on_answer,
        constraint=constraint)


class AgentLoop:
    """Runs batches of tool-using episodes.

    Args:
      service: the open rollout loop (`build_service`) over the engine the policy samples with
        (its ``max_seq_len`` at least ``cfg.max_length``); it must hold no episode and its
        engine no sequence when `run` starts.
      controller: the `ToolController` deciding budgets and timeouts (read, not changed: the
        caller updates it from the finished episodes).
      sandbox: the sandbox whose load the controller's decisions read (``stats()``); None: idle.
    """

    def __init__(self, service: RolloutService, controller: ToolController, cfg: AgentConfig,
                 sandbox: Any = None):
        max_seq_len = service.engine.cfg.max_seq_len
        if max_seq_len < cfg.max_length:
            raise ValueError(f"rollout engine max_seq_len {max_seq_len} < "
                             f"max_length {cfg.max_length}")
        self.service, self.controller, self.cfg, self.sandbox = service, controller, cfg, sandbox

    def decode(self, tokens: Sequence[int]) -> str:
        return self.service.decode(tokens)

    def run(self, specs: Sequence[RowSpec], rng: jax.Array, *, row_offset: int = 0,
            total_rows: int | None = None, on_update: UpdateHook | None = None,
            weights: WeightFeed | None = None) -> RolloutResult:
        """Rolls out one episode per spec.

        Row b samples with ``jax.random.split(rng, total_rows)[row_offset + b]`` (or its spec's
        key): a host that rolls out rows [row_offset, row_offset + len(specs)) of a larger batch
        draws exactly what one process rolling out the whole batch would. ``on_update(b,
        episode, kind)`` is called as episode b grows: "model" (a turn's model tokens), "tool"
        (a tool output appended), "done" (finished, with the last turn's tokens;
        ``episode.finish_reason`` set, ``text`` not yet). ``weights()`` is polled before every
        engine step; new weights take effect at once, and unfinished episodes go on as
        ``cfg.partial`` says.
        """
        n = len(specs)
        total_rows = n if total_rows is None else total_rows
        if row_offset < 0 or row_offset + n > total_rows:
            raise ValueError(f"rows [{row_offset}, {row_offset + n}) are not inside a batch of "
                             f"{total_rows}")
        service, engine, cfg = self.service, self.service.engine, self.cfg
        if service.busy or engine.seqs:
            raise RuntimeError("AgentLoop.run: the rollout engine is in use")
        episodes = [new_episode(i, spec, self.controller, max_length=cfg.max_length,
                                sandbox=self.sandbox) for i, spec in enumerate(specs)]
        engine.set_sampling(cfg.sampling)
        engine.reset_stats()
        keys = np.asarray(jax.random.key_data(
            jax.random.split(rng, total_rows)[row_offset:row_offset + n]))
        service.timer = timer = PhaseTimer()
        hook = on_update or (lambda b, episode, kind: None)
        handles: dict[int, int] = {}
        aborted, left = 0, n
        try:
            for b, (episode, spec) in enumerate(zip(episodes, specs)):
                key = keys[b] if spec.key is None else np.asarray(jax.random.key_data(spec.key))
                handle = service.submit(
                    episode, key, max_length=spec.max_length or cfg.max_length,
                    sampling=spec.sampling, on_update=functools.partial(_row_hook, hook, b))
                handles[handle] = b
            while left:
                if weights is not None:
                    aborted += sum(poll_weights(service, weights, cfg.partial).values())
                for handle, episode in service.step():
                    episodes[handles[handle]] = episode
                    left -= 1
        finally:
            service.close()  # after an error, episodes left in the engine free their pages
        timing = dict(_timing(timer), **engine.stats.as_metrics())
        if weights is not None:
            timing["aborted_tokens"] = float(aborted)
        return RolloutResult(episodes, timing)


def new_episode(i: int, spec: RowSpec, controller: ToolController, *, max_length: int,
                sandbox: Any = None) -> Episode:
    """Row i's empty episode, with the tool budget and timeout ``controller`` decides under
    ``sandbox``'s load (its ``stats()``; None: idle). ``max_length``: the prompt + response
    tokens of a spec that sets none."""
    max_length = spec.max_length or max_length
    if len(spec.prompt) >= max_length:
        raise ValueError(f"prompt {i} has {len(spec.prompt)} tokens; training.max_length "
                         f"is {max_length}")
    if len(spec.prompt) == 0:
        raise ValueError(f"prompt {i} is empty")
    stats = sandbox.stats() if hasattr(sandbox, "stats") else {}
    workers = max(1.0, float(stats.get("workers", 1)))
    decision = controller.decide(
        difficulty=spec.difficulty, stage=spec.stage,
        backlog_per_worker=float(stats.get("backlog", 0.0)) / workers,
        latency_ms=float(stats.get("latency_ms_p50", 0.0)))
    return Episode(prompt_tokens=list(spec.prompt),
                   tool_budget=decision.tool_budget if spec.tools else 0,
                   timeout_ms=decision.timeout_ms, stage=spec.stage,
                   difficulty=spec.difficulty, group_id=spec.group_id)


def poll_weights(service: RolloutService, weights: WeightFeed, partial: str) -> dict[int, int]:
    """Polls ``weights()``; new weights take effect in the service's engine at once, and with
    ``partial`` "abort" every live episode starts again from its prompt (`AgentConfig.partial`).
    Returns the model tokens thrown away, by handle (empty when nothing restarted)."""
    new = weights()
    if new is None:
        return {}
    service.engine.update_params(*new)
    if partial != "abort":
        return {}
    return {handle: service.restart(handle) for handle in list(service.live)}


def _row_hook(hook: UpdateHook, b: int, episode: Episode, kind: str) -> None:
    hook(b, episode, kind)


def end_ids(tokenizer: Any, stop_ids: Sequence[int]) -> list[int]:
    """The ids that end an episode: ``stop_ids``, or the tokenizer's EOS when there are none."""
    if stop_ids:
        return [int(t) for t in stop_ids]
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def _timing(timer: PhaseTimer) -> dict[str, float]:
    """The timer's phases, the rollout's wall time and the accelerator's idle fraction."""
    total = timer.elapsed
    busy = timer["decode_s"]
    return dict(timer.seconds, rollout_s=total,
                accelerator_idle_frac=max(0.0, 1.0 - busy / total) if total > 0 else 0.0)
