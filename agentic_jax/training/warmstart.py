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
``tools/build_warmstart.py``), and a run whose recipe is one of them loads it
(``warmstart.shipped``) instead of spending the 13 minutes the tiny model's 3,500 steps take on
2 CPU cores. Any other recipe trains."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from agentic_jax.data import prompts as fmt
from agentic_jax.training.warmstart_data import ExampleFormat, batches, build_examples, pack_batch
from agentic_jax.utils import round_up

logger = logging.getLogger(__name__)

_LENGTH_BUCKET = 16
SHIPPED_DIR = Path(__file__).resolve().parent / "assets" / "warmstart"
WEIGHTS_FILE = "params.safetensors"
INFO_FILE = "warmstart.json"


class WarmStartResult(NamedTuple):
    params: Any                  # the policy's model state after the supervised phase
    metrics: dict[str, float]    # warmstart/ loss, examples, tool_fraction, time_s (wall)


def warm_start(run: Any, params: Any, *, progress: bool = True,
               on_step: Callable[[int, Any, dict[str, Any]], None] | None = None
               ) -> WarmStartResult:
    """Supervised warm start of the policy ``params`` (a `Run`'s model state).

    Uses the run's mesh and the same step factory as RL, with its own optimizer (``warmstart.lr``
    with a short warmup and cosine decay over ``warmstart.steps``).

    ``on_step(step, params, info)``, when given, is called after every step (1-based) with the
    new parameters and ``info``: the step's metrics (device arrays), ``tokens`` (padded tokens
    trained on so far) and ``examples``. A watched warm start always trains, never loads a
    saved result.
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
    if w.shipped and on_step is None:
        found = find_shipped(recipe(run))
        if found is not None:
            logger.info("warm start: loading %s, the saved result of this exact recipe", found)
            params = load_result(found, params, run.shardings.state)
            stored = dict(read_info(found)["metrics"])
            stored["warmstart/trained_s"] = stored.pop("warmstart/time_s", float("nan"))
            return WarmStartResult(params, {**stored, "warmstart/shipped": 1.0,
                                            "warmstart/time_s": time.perf_counter() - began})
    counts: dict[str, int] = {}
    examples = build_examples(
        _problems(run), make_prompt=policy.make_prompt, tokenizer=policy.tokenizer,
        run_code=lambda codes: run_everywhere(policy.sandbox, codes),
        tool_fraction=w.tool_fraction, max_length=t.max_length, seed=cfg.seed,
        layout=example_format(run), stats=counts)
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
    metrics: dict[str, float] = {}
    first_loss = float("nan")
    order = batches(examples, batch_size, w.steps, cfg.seed)
    bar = tqdm(range(w.steps), desc="warm start", disable=not progress, leave=False)
    tokens = 0
    for i in bar:
        rows = order[i]
        # Pad to the batch's longest example (rounded up, so only a few shapes compile).
        length = min(t.max_length, round_up(max(len(ex.tokens) for ex in rows), _LENGTH_BUCKET))
        batch = put_rows(pack_batch(rows[share], length=length, pad_id=policy.pad_id),
                         run.batch_sharding)
        params, opt_state, m = step_fn(params, opt_state, batch)
        tokens += length * len(rows)
        if on_step is not None:
            on_step(i + 1, params, {"metrics": m, "tokens": tokens, "examples": len(examples)})
        if i % 20 == 0 or i == w.steps - 1:
            metrics = {k: float(v) for k, v in jax.device_get(m).items()}
            bar.set_postfix(loss=f"{metrics['policy_loss']:.3f}")
            first_loss = metrics["policy_loss"] if i == 0 else first_loss
    tool_share = sum(e.uses_tool for e in examples) / len(examples)
    return WarmStartResult(params, {"warmstart/loss": metrics.get("policy_loss", float("nan")),
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


# The config groups and fields a warm start's result depends on, as recorded in config.json.
_RECIPE_GROUPS = ("model", "tokenizer", "data", "warmstart", "mesh")
_RECIPE_FIELDS = (("seed",), ("training", "max_length"), ("training", "max_grad_norm"),
                  ("training", "offload_optimizer"))
# Fields of those groups that only RL reads (the scheduler draws RL's problems, not the warm
# start's), and whether a run may load a saved result at all.
_NOT_RECIPE = {"data": ("scheduler_threshold", "scheduler_window", "scheduler_ahead"),
               "warmstart": ("shipped",)}


def config_differences(recorded: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The recipe fields in which two configs (as plain dicts, e.g. a run's config.json) differ;
    RL-only fields of the recipe's groups (`_NOT_RECIPE`) are not among them."""
    out = []
    for group in _RECIPE_GROUPS:
        a, b = dict(recorded.get(group, {})), dict(config.get(group, {}))
        for key in _NOT_RECIPE.get(group, ()):
            a.pop(key, None)
            b.pop(key, None)
        out += [f"{group}.{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    for path in _RECIPE_FIELDS:
        a, b = recorded, config
        for part in path:
            a = a.get(part) if isinstance(a, dict) else None
            b = b.get(part) if isinstance(b, dict) else None
        if a != b:
            out.append(".".join(path))
    return out


def read_info(directory: str | os.PathLike) -> dict[str, Any]:
    """A saved warm start's ``warmstart.json``: its recipe, metrics and how it was made."""
    path = Path(directory) / INFO_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable warm-start record ({err})") from err
    if not isinstance(info, dict) or not {"recipe", "metrics"} <= info.keys():
        raise ValueError(f"{path}: expected the keys 'recipe' and 'metrics'")
    return info


def find_shipped(wanted: dict[str, Any], root: str | os.PathLike | None = None) -> Path | None:
    """The saved warm start under ``root`` (default `SHIPPED_DIR`) whose recipe is ``wanted``,
    or None."""
    root = Path(SHIPPED_DIR if root is None else root)
    if not root.is_dir():
        return None
    for directory in sorted(p for p in root.iterdir() if (p / INFO_FILE).is_file()):
        if read_info(directory)["recipe"] == wanted:
            return directory
    return None


def save_result(directory: str | os.PathLike, params: Any, wanted: dict[str, Any],
                metrics: dict[str, float], made_by: str) -> Path:
    """Writes a warm start's parameters (one safetensors file, the model state's paths as
    keys) and its record; each file goes under a temporary name first, so a failure leaves no
    half-written result."""
    import jax
    from flax import nnx
    from flax.traverse_util import flatten_dict
    from safetensors.numpy import save_file

    if jax.process_count() > 1:
        raise ValueError("save_result: a warm start is saved from one process")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {_key(k): np.asarray(v) for k, v in
               flatten_dict(jax.device_get(nnx.to_pure_dict(params))).items()}
    record = {"recipe": wanted, "metrics": metrics, "made_by": made_by}
    for name, write in ((WEIGHTS_FILE, lambda f: save_file(tensors, f)),
                        (INFO_FILE, lambda f: Path(f).write_text(
                            json.dumps(record, indent=1, sort_keys=True) + "\n"))):
        tmp = directory / f".{name}.tmp"
        write(str(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, directory / name)
    return directory


def load_result(directory: str | os.PathLike, like: Any, shardings: Any) -> Any:
    """The parameters `save_result` wrote, as a model state shaped like ``like`` and placed with
    ``shardings``; any missing, extra or differently shaped tensor is an error."""
    import jax
    from flax import nnx
    from flax.traverse_util import flatten_dict, unflatten_dict
    from safetensors.numpy import load_file

    path = Path(directory) / WEIGHTS_FILE
    loaded = load_file(str(path))
    expected = {_key(k): (k, v) for k, v in flatten_dict(nnx.to_pure_dict(like)).items()}
    if loaded.keys() != expected.keys():
        raise ValueError(f"{path}: tensors {sorted(loaded.keys() ^ expected.keys())} do not "
                         "match the model")
    for name, (_, value) in expected.items():
        got = loaded[name]
        if got.shape != value.shape or got.dtype != value.dtype:
            raise ValueError(f"{path}: {name} is {got.dtype}{list(got.shape)}, the model has "
                             f"{value.dtype}{list(value.shape)}")
    params = jax.tree.map(lambda x: x, like)
    nnx.replace_by_pure_dict(params, unflatten_dict({k: loaded[n]
                                                     for n, (k, _) in expected.items()}))
    return jax.device_put(params, shardings)


def _key(path: tuple[Any, ...]) -> str:
    return "/".join(str(part) for part in path)


def run_everywhere(sandbox: Any, codes: list[str]) -> list[str | None]:
    """Runs snippets in the sandbox -> each one's stdout, or None where it failed. On several
    hosts each runs its share and every host gets every result (so all build the same
    warm-start examples)."""
    from agentic_jax.parallel import gather_rows, gather_texts, process_slice

    local = sandbox.run_batch(codes[process_slice(len(codes))]) if codes else []
    ok = gather_rows(np.asarray([r.ok for r in local], bool))
    stdout = gather_texts([r.stdout if r.ok else "" for r in local])
    return [out if o else None for o, out in zip(ok, stdout)]
