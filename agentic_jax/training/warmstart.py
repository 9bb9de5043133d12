"""Warm start: supervised training on curriculum solutions before RL.

A policy that has never seen the tool format cannot discover it, so the run begins with a short
supervised phase on reference responses: mostly written-out `direct_solution`s, and a small
fraction (``warmstart.tool_fraction``) of tool-using ones whose ```output blocks hold what the
reference code really printed in the sandbox. Keeping that fraction small leaves the growth of
code use to RL, which is the phenomenon under study.

Examples (`agentic_jax.training.warmstart_data`) are tokenised piecewise, exactly as a rollout
builds them: the prompt in the run's template, the policy's text, then the tool output block
(loss_mask 0, as in RL), then the policy's final answer; a pretrained model's end with its
end-of-turn token (`example_format`). The update is the same compiled step as RL with a vanilla
policy-gradient loss and advantage 1, i.e. token-mean cross-entropy on the policy's tokens; with
LoRA (``model.lora_rank``) only the adapters train, as in RL.

The built-in tiny model learns the format from nothing (3,500 steps). A pretrained chat model
already writes math in prose and only needs to see the tool used: a few hundred examples in its
own chat template (``:smollm2-135m-tools``) take code use from almost never to some of the time.

A warm start is a pure function of its recipe (`recipe`: the seed, the model, the optimiser
settings, the devices and a digest of every example), so its result can be shipped: the package
holds the result of the default recipe for seeds 0 and 1 (``assets/warmstart/``, written by
``tools/build_warmstart.py``; `agentic_jax.training.warmstart_results`), and a run whose recipe
is one of them loads it (``warmstart.shipped``) instead of spending the 13 minutes the tiny
model's 3,500 steps take on 2 CPU cores. Any other recipe trains."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from agentic_jax.data import prompts as fmt
from agentic_jax.training.warmstart_data import ExampleFormat, batches, build_examples, pack_batch
from agentic_jax.training.warmstart_results import find_shipped, load_result, read_info
from agentic_jax.utils import round_up

logger = logging.getLogger(__name__)

_LENGTH_BUCKET = 16
PROGRAMS_FILE = "programs.json"  # the reference programs' outputs (`_Saver`)


class WarmStartResult(NamedTuple):
    params: Any                  # the policy's model state after the supervised phase
    metrics: dict[str, float]    # warmstart/ loss, examples, tool_fraction, time_s (wall)


class _Progress(NamedTuple):
    """How far a warm start has come: what its checkpoints hold besides the arrays."""

    step: int = 0  # steps done
    tokens: int = 0  # padded tokens trained on
    first_loss: float = float("nan")
    loss: float = float("nan")  # the latest step's
    trained_s: float = 0.0  # wall seconds of the warm start, every session's setup included


def _digest(recipe_: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe_, sort_keys=True).encode()).hexdigest()


class _Saver:
    """A warm start's checkpoints (``WORKDIR/warmstart``): parameters and optimizer state in
    the RL checkpoint's layout (with LoRA, the adapters only), the `_Progress` and the digests
    of the recipe and of the examples built, as JSON; the newest kept. The reference programs'
    outputs are kept beside them (`PROGRAMS_FILE`), so a resumed warm start builds exactly the
    examples the first session built, even where a program's run would now end otherwise (a
    timeout on a loaded machine)."""

    def __init__(self, directory: str, every: int, digest: str):
        self.digest, self.every = digest, every
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.checkpointer: Any = None  # a Checkpointer, opened by `restore` when the loop begins

    def remembered(self, run_code: Callable[[list[str]], list[str | None]]
                   ) -> Callable[[list[str]], list[str | None]]:
        """``run_code`` that answers from the kept outputs and keeps the new ones."""
        from agentic_jax.parallel import agree, is_main_process
        from agentic_jax.utils import read_json, write_json

        path = os.path.join(self.directory, PROGRAMS_FILE)

        def read() -> dict[str, str | None]:
            try:
                known = read_json(path)
            except (OSError, ValueError) as err:
                known = err
            if not isinstance(known, dict):
                logger.warning("warm start: %s is not a readable record of program outputs "
                               "(%s); the programs run again", path, known)
                return {}
            return known

        def run(codes: list[str]) -> list[str | None]:
            # Process 0 decides, so that every host makes the same (collective) sandbox calls.
            known = read() if agree(os.path.exists(path)) else {}
            missing = [c for c in dict.fromkeys(codes) if c not in known]
            if missing:
                known.update(zip(missing, run_code(missing)))
                if is_main_process():
                    write_json(path, known)
            return [known[c] for c in codes]

        return run

    @staticmethod
    def _state(params: Any, opt_state: Any, step: int) -> Any:
        from agentic_jax.rl.state import TrainState

        return TrainState(params=params, opt_state=opt_state, ref_params=None,
                          step=np.asarray(step, np.int32), rng=np.zeros(2, np.uint32))

    def _other(self, why: str = "") -> Exception:
        from agentic_jax.config import ConfigError

        return ConfigError(
            f"{self.directory}: holds a warm start of another recipe (its model, data, seed, "
            f"examples or optimiser settings differ){why}; remove it, or use another "
            "--workdir, to train this one")

    def restore(self, params: Any, opt_state: Any, shardings: Any,
                examples: str) -> tuple[Any, Any, _Progress] | None:
        """The newest checkpoint as (params, opt_state, progress), None when there is none;
        one of another recipe or of other examples (``examples``: their digest) is refused."""
        from agentic_jax.rl.state import from_pure, to_pure
        from agentic_jax.utils.checkpoint import NoRestorableCheckpoint

        from agentic_jax.utils import Checkpointer

        like = self._state(params, opt_state, 0)
        self.checkpointer = Checkpointer(self.directory, every_steps=self.every, keep=1)
        try:
            restored = self.checkpointer.restore_latest(to_pure(like), set_aside=True)
        except NoRestorableCheckpoint as err:
            raise self._other(f", or is damaged ({err})") from None
        if restored is None:
            return None
        meta = restored.meta
        if meta.get("recipe") != self.digest or meta.get("examples") != examples:
            raise self._other()
        state = from_pure(restored.state, like, shardings)
        fields = {k: meta[k] for k in _Progress._fields if k in meta}
        return state.params, state.opt_state, _Progress(**fields)

    def save(self, params: Any, opt_state: Any, progress: _Progress, examples: str) -> None:
        """After `restore`."""
        from agentic_jax.rl.state import to_pure

        meta = {**progress._asdict(), "recipe": self.digest, "examples": examples}
        self.checkpointer.maybe_save(progress.step, to_pure(self._state(
            params, opt_state, progress.step)), meta, force=True)

    def close(self, quiet: bool = False) -> None:
        """Waits for a save in flight; ``quiet``: its error is logged, not raised (another one
        is on its way up)."""
        if self.checkpointer is None:
            return
        try:
            self.checkpointer.close()
        except Exception:  # noqa: BLE001 - reported; the first error propagates
            if not quiet:
                raise
            logger.exception("warm start: the last checkpoint save failed as well")


def _examples_digest(examples: list[Any]) -> str:
    """SHA-256 of every built example's tokens and loss mask, in order."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(np.asarray(ex.tokens, np.int64).tobytes() + b"|")
        digest.update(np.asarray(ex.loss_mask, np.float32).tobytes() + b"/")
    return digest.hexdigest()


def warm_start(run: Any, params: Any, *, progress: bool = True,
               on_step: Callable[[int, Any, dict[str, Any]], None] | None = None,
               directory: str | None = None) -> WarmStartResult:
    """Supervised warm start of the policy ``params`` (a `Run`'s model state).

    Uses the run's mesh and the same step factory as RL, with its own optimizer (``warmstart.lr``
    with a short warmup and cosine decay over ``warmstart.steps``).

    ``on_step(step, params, info)``, when given, is called after every step (1-based) with the
    new parameters and ``info``: the step's metrics (device arrays), ``tokens`` (padded tokens
    trained on so far) and ``examples``. A watched warm start always trains, never loads a
    saved result.

    ``directory`` (a run's ``WORKDIR/warmstart``), with ``warmstart.checkpoint_every`` > 0:
    the phase's parameters and optimizer state are saved there every so many steps and at its
    end, and a warm start finding one of its own recipe there resumes from it: the same batches
    in the same order, so the result is the uninterrupted one's. A checkpoint of another recipe
    is refused (`ConfigError`), never trained on.
    """
    import jax
    from tqdm.auto import tqdm

    from agentic_jax.parallel import process_slice, put_rows
    from agentic_jax.rl.forward import scored_columns
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
    if w.shipped and on_step is None:
        found = find_shipped(recipe(run))
        if found is not None:
            logger.info("warm start: loading %s, the saved result of this exact recipe", found)
            params = load_result(found, params, run.shardings.state)
            stored = dict(read_info(found)["metrics"])
            stored["warmstart/trained_s"] = stored.pop("warmstart/time_s", float("nan"))
            return WarmStartResult(params, {**stored, "warmstart/shipped": 1.0,
                                            "warmstart/time_s": time.perf_counter() - began})
    saver = None
    run_code = lambda codes: run_everywhere(policy.sandbox, codes)  # noqa: E731
    if directory is not None and w.checkpoint_every > 0:
        # model.path names the weights a pretrained model starts from (the recipe holds only
        # its architecture): another checkpoint of the same shape is another warm start.
        saver = _Saver(directory, w.checkpoint_every,
                       _digest({**recipe(run), "model_path": cfg.model.path}))
        run_code = saver.remembered(run_code)
    counts: dict[str, int] = {}
    examples = build_examples(
        _problems(run), make_prompt=policy.make_prompt, tokenizer=policy.tokenizer,
        run_code=run_code, tool_fraction=w.tool_fraction, max_length=t.max_length,
        seed=cfg.seed, layout=example_format(run), stats=counts)
    logger.info("warm start: %d examples; of %d chosen to use the tool, %d programs ran and %d "
                "printed the reference answer", counts["examples"], counts["tool_chosen"],
                counts["tool_ran"], counts["tool_kept"])
    optimizer = make_optimizer(lr=w.lr, warmup_steps=max(1, w.steps // 10),
                               total_steps=w.steps, max_grad_norm=t.max_grad_norm)
    shardings = train_shardings(params, optimizer, policy.mesh, policy.state_shardings,
                                offload_opt_state=t.offload_optimizer)
    loss_cfg = LossConfig(policy_loss="reinforce", value_coef=0.0, value_clip=None)
    step_fn = make_train_step(policy.graphdef, optimizer, loss_cfg, policy.mesh, 1,
                              shardings=shardings)
    opt_state = jax.jit(lambda s: init_opt_state(optimizer, s),
                        out_shardings=shardings.opt_state)(params)
    built = _examples_digest(examples) if saver is not None else ""
    try:
        progress_ = _Progress()
        resumed = saver.restore(params, opt_state, shardings, built) if saver else None
        if resumed is not None:
            params, opt_state, progress_ = resumed
            logger.info("warm start: resuming at step %d of %d from %s", progress_.step,
                        w.steps, directory)
        order = batches(examples, batch_size, w.steps, cfg.seed)
        bar = tqdm(range(progress_.step, w.steps), desc="warm start", disable=not progress,
                   leave=False, initial=progress_.step, total=w.steps)
        first_loss, last_loss, tokens = progress_.first_loss, progress_.loss, progress_.tokens
        previous = None  # the step before this one's metrics (device arrays)
        began -= progress_.trained_s  # the time of earlier sessions counts
        for i in bar:
            rows = order[i]
            # Pad to the batch's longest example (rounded up, so only a few shapes compile).
            longest = max(len(ex.tokens) for ex in rows)
            length = min(t.max_length, round_up(longest, _LENGTH_BUCKET))
            batch = put_rows(pack_batch(rows[share], length=length, pad_id=policy.pad_id),
                             run.batch_sharding)
            batch["scored"] = scored_columns(batch["loss_mask"], run.batch_sharding)
            params, opt_state, m = step_fn(params, opt_state, batch)
            tokens += length * len(rows)
            if on_step is not None:
                on_step(i + 1, params,
                        {"metrics": m, "tokens": tokens, "examples": len(examples)})
            if previous is not None:
                # Waits for the previous step while this one runs: the bar shows the real
                # rate, not the dispatch's, and the device never waits for the host.
                bar.set_postfix(loss=f"{float(previous['policy_loss']):.3f}")
            previous = m
            if i == 0:
                first_loss = float(m["policy_loss"])
            if saver is not None and ((i + 1) % w.checkpoint_every == 0 or i + 1 == w.steps):
                last_loss = float(m["policy_loss"])
                saver.save(params, opt_state, _Progress(
                    i + 1, tokens, first_loss, last_loss, time.perf_counter() - began), built)
        if previous is not None:
            last_loss = float(previous["policy_loss"])
    except BaseException:
        if saver is not None:
            saver.close(quiet=True)  # a save in flight finishes; this error stays the one raised
        raise
    if saver is not None:
        saver.close()
    tool_share = sum(e.uses_tool for e in examples) / len(examples)
    return WarmStartResult(params, {"warmstart/loss": last_loss,
                                    "warmstart/first_loss": first_loss,
                                    "warmstart/examples": float(len(examples)),
                                    "warmstart/tool_fraction": tool_share,
                                    "warmstart/programs_ran": float(counts["tool_ran"]),
                                    "warmstart/programs_kept": float(counts["tool_kept"]),
                                    "warmstart/time_s": time.perf_counter() - began})


def example_format(run: Any) -> ExampleFormat:
    """The built-in model's format, or for a pretrained model (``model.path``) that of its
    rollouts: output blocks as the agent renders them, and the response closed by the token
    that ends its turn: in a chat template's prompts (``data.template`` other than zero and
    short) the template's own (`data.tokenizer.turn_end_id`), else the first end id (EOS)."""
    from agentic_jax.data.tokenizer import turn_end_id

    cfg, policy = run.cfg, run.policy
    if not cfg.model.path:
        return ExampleFormat()
    stop_ids = policy.agent_cfg.stop_ids or (policy.tokenizer.eos_token_id,)
    chat = cfg.data.template not in ("zero", "short")
    end = turn_end_id(policy.tokenizer, stop_ids) if chat else int(stop_ids[0])
    return ExampleFormat(output_tokens=cfg.environment.max_output_tokens, end_ids=(end,))


def _problems(run: Any) -> list[Any]:
    """The training problems a warm start draws its examples from (seeded by the run): its own
    set aside (``warmstart.disjoint``), else the run's training set."""
    cfg, problems = run.cfg, run.policy.problems
    train = problems.warmstart or problems.train
    batch_size = round_up(cfg.warmstart.batch_size, run.row_multiple)
    return random.Random(cfg.seed).sample(train, min(len(train), cfg.warmstart.steps * batch_size))


def examples_digest(run: Any) -> str:
    """SHA-256 of the token ids of every problem's prompt and of both of its responses (the
    tool-using one with the reference answer standing in for the sandbox's output): it changes
    with the problems, the templates, the solution texts and the tokenizer."""
    policy = run.policy
    digest = hashlib.sha256()
    for problem in _problems(run):
        texts = (fmt.direct_solution_text(problem),
                 fmt.tool_solution_text(problem, str(problem.answer)))
        ids = [policy.make_prompt(problem)] + [
            list(policy.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
        digest.update(np.asarray([x for part in ids for x in part + [-1]], np.int64).tobytes())
    return digest.hexdigest()


def recipe(run: Any) -> dict[str, Any]:
    """Everything a warm start's result depends on, as plain JSON values: equal recipes give
    the same parameters (on the same kind of device)."""
    import jax

    cfg, policy = run.cfg, run.policy
    w, t = cfg.warmstart, cfg.training
    layout = example_format(run)
    # The built-in format is left out, so that the saved results' recipes stay what they were.
    extra = {} if layout == ExampleFormat() else {"format": layout._asdict()}
    return json.loads(json.dumps({
        **extra,
        "seed": cfg.seed,
        "model": dataclasses.asdict(policy.model_cfg),
        "steps": w.steps, "batch_size": round_up(w.batch_size, run.row_multiple), "lr": w.lr,
        "tool_fraction": w.tool_fraction, "max_length": t.max_length,
        "max_grad_norm": t.max_grad_norm,
        "devices": {"platform": jax.devices()[0].platform, "count": jax.device_count(),
                    "processes": jax.process_count(), "mesh": dict(policy.mesh.shape)},
        "examples": examples_digest(run),
    }))


def run_everywhere(sandbox: Any, codes: list[str]) -> list[str | None]:
    """Runs snippets in the sandbox -> each one's stdout, or None where it failed. On several
    hosts each runs its share and every host gets every result (so all build the same
    warm-start examples)."""
    from agentic_jax.parallel import gather_rows, gather_texts, process_slice

    local = sandbox.run_batch(codes[process_slice(len(codes))]) if codes else []
    ok = gather_rows(np.asarray([r.ok for r in local], bool))
    stdout = gather_texts([r.stdout if r.ok else "" for r in local])
    return [out if o else None for o, out in zip(ok, stdout)]
