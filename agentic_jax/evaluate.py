r"""Evaluates a run's newest checkpoint on a split, with tools and without, or on benchmarks.

    python -m agentic_jax.evaluate --workdir=DIR [--split=test] [--num_samples=4] [--limit=256]
        [--modes=tools] [--config=configs/math_ppo.py] [--config.data.eval_size=512 ...]
    python -m agentic_jax.evaluate --workdir=DIR --checkpoints=DIR/warmstart [--modes=tools]
    python -m agentic_jax.evaluate --compare=A/eval_test.json,B/eval_test.json[,A2/...,B2/...]
    python -m agentic_jax.evaluate --workdir=DIR --benchmarks=math500=PATH,aime24=PATH \
        [--num_samples=16 --temperature=0.6 --top_p=0.95] [--constrain_code]

The run's own config (``DIR/config.json``) is used; ``--config.*`` flags override it. A
``--workdir`` without checkpoints and a ``--config`` evaluate the config's model as built (a
pretrained model before training, e.g. ``--config=configs/math_ppo.py:smollm2-135m``). On a
split, writes ``DIR/eval_<split>.json``: accuracy with and without tools (``--modes``), pass@k (with
``--num_samples`` > 1), code-use rate, tool calls, response length, overall and per stage,
and each problem's outcome by id; ``--compare`` reads two such files of the same problems and
prints B - A with its paired 95% interval (Newcombe) and McNemar's exact p-value; with several
pairs (a recipe's seeds), also the gain pooled over them.
With ``--benchmarks`` (local files in each benchmark's own layout), writes ``DIR/eval/``:
``<name>.json`` (avg@K, pass@1..K, maj@K with 95% intervals, per subject / level, usage),
``<name>.samples.jsonl``, ``summary.md`` and ``summary.png``; unset sampling flags take the
run's ``eval.*`` values.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Any, Mapping, Sequence

import ml_collections
from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from agentic_jax.commands import variants_usage
from agentic_jax.config.command_line import parse_flags
from agentic_jax.errors import USER_ERRORS, UserError
from agentic_jax.evaluation import markdown_table
from agentic_jax.utils.compile_cache import enable_compile_cache

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A config file (default: the run's recorded config.json).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The run directory (with checkpoints/).")
_SPLIT = flags.DEFINE_enum("split", "test", ["train", "test"], "Which problems to evaluate.")
_MODES = flags.DEFINE_multi_enum(
    "modes", ["tools", "direct"], ["tools", "direct"],
    "On a split: evaluate with the tool loop (tools), without it (direct), or both.")
_NUM_SAMPLES = flags.DEFINE_integer(
    "num_samples", None, "Samples per problem (pass@k when > 1; default 1 on a split, "
    "eval.num_samples on benchmarks).")
_LIMIT = flags.DEFINE_integer(
    "limit", 0, "Evaluate at most this many problems (of each benchmark with --benchmarks; "
    "0: all).")
_BENCHMARKS = flags.DEFINE_string(
    "benchmarks", "", "name=PATH,... local benchmark files to evaluate instead of a split.")
_TEMPERATURE = flags.DEFINE_float("temperature", None,
                                  "Sampling temperature on benchmarks (default eval.temperature).")
_TOP_P = flags.DEFINE_float("top_p", None, "Nucleus sampling on benchmarks (default eval.top_p).")
_COMPARE = flags.DEFINE_list(
    "compare", [], "A.json,B.json: two evaluations of the same problems (eval_<split>.json) "
    "compared paired, B - A with its 95% interval and McNemar's p; more pairs (A2.json,B2.json, "
    "...: seeds) add the gain pooled over them; nothing is evaluated.")
_CHECKPOINTS = flags.DEFINE_string(
    "checkpoints", None, "On a split: evaluate the newest checkpoint of this directory of the "
    "run's (e.g. WORKDIR/warmstart, the warm start's result) instead of WORKDIR/checkpoints; "
    "writes eval_<split>_<its name>.json.")
_CONSTRAIN = flags.DEFINE_boolean(
    "constrain_code", False, "Mask tokens that cannot continue valid Python inside code blocks "
    "(agentic_jax.rollout.constrain; needs llguidance).")


def _open_policy(config, workdir: str, overrides: Mapping[str, Any] | None,
                 constrain_code: bool = False, checkpoints: str | None = None,
                 **eval_settings: Any):
    """The inference policy of ``workdir``'s newest checkpoint (`agentic_jax.episodes.open.open_run`;
    without checkpoints, ``config``'s model as built, step 0). ``eval_settings`` replace fields
    of the run's ``eval.*`` (never evaluated in training here); a bad one is a UserError
    naming its flag."""
    from agentic_jax.episodes.open import has_checkpoints, open_config, run_config

    trained = has_checkpoints(workdir)
    if not trained:
        if config is None:
            raise FileNotFoundError(f"--workdir={workdir!r}: no checkpoints/ directory to "
                                    "evaluate (with --config, the config's model is evaluated "
                                    "as built)")
        # A pretrained model's defaults size max_length to the longest prompt, the
        # benchmarks' included.
        config = ml_collections.ConfigDict(config.to_dict())
        for key in ("benchmarks", "limit"):
            if eval_settings.get(key) is not None:
                config.eval[key] = eval_settings[key]
    cfg = run_config(config, workdir if trained else None, overrides)
    settings = {k: v for k, v in eval_settings.items() if v is not None}
    try:
        cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **settings))
    except ValueError as err:
        raise UserError(f"--{err}") from None
    if not trained:
        os.makedirs(workdir, exist_ok=True)
    if checkpoints and not trained:
        raise FileNotFoundError(f"--checkpoints: {workdir!r} is not a run directory (no "
                                "checkpoints/)")
    policy = open_config(cfg, workdir if trained else None, checkpoints)
    if constrain_code:  # serving / evaluation only: training samples the policy unmasked
        policy = dataclasses.replace(policy, agent_cfg=dataclasses.replace(
            policy.agent_cfg, constrain_code=True))
    return policy


def _with_problems(policy, load):
    """``policy`` with the problems ``load(cfg)`` gives (only those evaluated), their prompts
    checked (`ConfigError` when one does not fit ``training.max_length``)."""
    from agentic_jax.episodes.policy import Policy
    from agentic_jax.episodes.problems import check_prompts

    try:
        problems = load(policy.cfg)
        check_prompts(policy.cfg, policy.tokenizer, problems.every())
    except BaseException:
        policy.close()
        raise
    return Policy.with_problems(policy, problems)


def evaluate_checkpoint(config, workdir: str, *, split: str = "test", num_samples: int = 1,
                        limit: int = 0, overrides: Mapping[str, Any] | None = None,
                        constrain_code: bool = False,
                        modes: Sequence[str] = ("tools", "direct"),
                        checkpoints: str | None = None) -> dict:
    """Loads the newest checkpoint of ``workdir`` and evaluates it on ``split`` in each of
    ``modes`` ("tools": with the tool loop, "direct": without); returns the results.

    ``config`` may be None (the run's recorded config is used; ``overrides`` apply on top).
    Builds only the policy (no optimizer, no training state), reads only its parameters and
    loads only the split it evaluates. ``checkpoints``: take the newest checkpoint of this
    directory of the run's instead (``WORKDIR/warmstart``: the warm start's result, kept after
    RL's checkpoints have replaced step 0); the results go to ``eval_<split>_<its name>.json``.
    """
    from agentic_jax.evaluation.held_out import eval_config, evaluate_outcomes
    from agentic_jax.episodes.problems import Problems, load_problems
    from agentic_jax.utils import write_json

    def load(cfg) -> Problems:
        # The training split as trained on: decontaminated of the run's benchmarks.
        loaded = load_problems(cfg, benchmarks=split == "train" and cfg.data.decontaminate)
        problems = loaded.test if split == "test" else loaded.train
        return Problems([], problems[:limit] if limit else problems, loaded.stages, {})

    modes = tuple(dict.fromkeys(modes))
    if not modes or set(modes) - {"tools", "direct"}:
        raise UserError(f"--modes: expected tools and / or direct, got {list(modes)}")
    policy = _with_problems(_open_policy(config, workdir, overrides, constrain_code,
                                         checkpoints), load)
    step, problems = policy.step or 0, policy.problems.test
    try:
        settings = eval_config(policy, num_samples)
        results: dict[str, Any] = {"step": step, "split": split, "timing": {},
                                   "samples": settings.num_samples, "outcomes": {}}
        for mode in modes:
            began, cpu = time.perf_counter(), time.process_time()
            results[mode], right = evaluate_outcomes(policy, problems, tools=mode == "tools",
                                                     cfg=settings)
            # Each problem's correct samples, by id: two evaluations compare paired (--compare).
            outcomes = {p.id: int(c) for p, c in zip(problems, right)}
            if len(outcomes) != len(problems) or len(right) != len(problems):
                raise RuntimeError(f"evaluate: {len(right)} outcomes for {len(problems)} "
                                   f"problems ({len(outcomes)} distinct ids)")
            results["outcomes"][mode] = outcomes
            results["timing"][mode] = _timing(results[mode], settings.num_samples,
                                              time.perf_counter() - began,
                                              time.process_time() - cpu)
    finally:
        policy.close()
    name = f"eval_{split}.json"
    if checkpoints:
        results["checkpoints"] = os.path.abspath(checkpoints)
        name = f"eval_{split}_{os.path.basename(os.path.normpath(checkpoints))}.json"
    write_json(os.path.join(workdir, name), results)
    return results


def _timing(result: Mapping[str, float], num_samples: int, wall_s: float,
            cpu_s: float) -> dict[str, float]:
    """Wall and CPU seconds of one evaluation and its response tokens (the policy's and the
    tools' output blocks) per wall second."""
    tokens = result["response_length"] * result["num_problems"] * num_samples
    return {"wall_s": wall_s, "cpu_s": cpu_s, "response_tokens": tokens,
            "tokens_per_s": tokens / max(wall_s, 1e-9)}


def evaluate_checkpoint_on_benchmarks(
        config, workdir: str, benchmarks: str, *, num_samples: int | None = None,
        temperature: float | None = None, top_p: float | None = None, limit: int | None = None,
        overrides: Mapping[str, Any] | None = None, constrain_code: bool = False
) -> dict[str, dict]:
    """The newest checkpoint of ``workdir`` on ``benchmarks`` ("name=PATH,..."), with the
    tool loop; writes ``workdir/eval/`` and returns {name: result} (each with the
    checkpoint's ``step``). Unset settings take the run's ``eval.*`` values."""
    from agentic_jax.evaluation.benchmarks import run_benchmarks
    from agentic_jax.episodes.problems import Problems, benchmark_problems

    if not benchmarks:
        raise UserError("--benchmarks: expected name=PATH,..., got ''")
    policy = _open_policy(config, workdir, overrides, constrain_code, benchmarks=benchmarks,
                          num_samples=num_samples, temperature=temperature, top_p=top_p,
                          limit=limit)
    policy = _with_problems(policy, lambda cfg: Problems([], [], [], benchmark_problems(cfg)))
    step = policy.step or 0
    try:
        return run_benchmarks(policy, workdir, policy.cfg.eval, step=step)
    finally:
        policy.close()


def compare_evaluations(*paths: str) -> list[str]:
    """One line per mode both evaluations of a split ran, comparing their per-problem outcomes
    paired (`agentic_jax.evaluation.metrics.paired_outcomes`): B - A. Several pairs (A1, B1,
    A2, B2, ...: a recipe's seeds) give each pair's lines, then per mode the gain pooled over
    the pairs (`pooled_paired_outcomes`)."""
    from agentic_jax.evaluation.metrics import pooled_paired_outcomes

    if len(paths) < 2 or len(paths) % 2:
        raise UserError(f"--compare: expected pairs of files, A.json,B.json[,A2.json,B2.json"
                        f"...], got {len(paths)}")
    pairs = [_compare_pair(paths[i], paths[i + 1]) for i in range(0, len(paths), 2)]
    lines = [line for pair_lines, _ in pairs for line in pair_lines]
    if len(pairs) > 1:
        for mode in ("tools", "direct"):
            both = [outcomes for _, outcomes in pairs if mode in outcomes]
            if len(both) != len(pairs):
                continue
            try:
                r = pooled_paired_outcomes([outcomes[mode] for outcomes in both])
            except ValueError as err:
                raise UserError(f"--compare {mode}: {err}") from None
            lo, hi = r.interval
            lines.append(f"{mode}, pooled over {r.pairs} pairs on {r.n} problems: "
                         f"{r.difference:+.3f} (95% interval over problems {lo:+.3f} to "
                         f"{hi:+.3f})")
    return lines


def _compare_pair(path_a: str, path_b: str) -> tuple[list[str], dict]:
    """`compare_evaluations` of one pair: its lines, and mode -> (outcomes A, outcomes B)."""
    from agentic_jax.evaluation.metrics import paired_outcomes
    from agentic_jax.utils import read_json

    def outcomes_of(path: str) -> tuple[dict, object]:
        try:
            record = read_json(path)
        except (OSError, ValueError) as err:
            raise UserError(f"--compare: {path}: not a readable evaluation ({err})") from None
        outcomes = record.get("outcomes") if isinstance(record, dict) else None
        if not isinstance(outcomes, dict) or not all(isinstance(v, dict)
                                                     for v in outcomes.values()):
            raise UserError(f"--compare: {path}: no per-problem outcomes (an evaluation "
                            "written before they were stored has none: evaluate again)")
        return outcomes, record.get("samples")

    (outcomes_a, samples_a), (outcomes_b, samples_b) = outcomes_of(path_a), outcomes_of(path_b)
    if (samples_a, samples_b) != (1, 1):
        raise UserError(f"--compare: expected one sample per problem in both (outcomes right "
                        f"or wrong), got {samples_a} and {samples_b}; evaluate with "
                        "--num_samples=1")
    lines = []
    for mode in (m for m in ("tools", "direct") if m in outcomes_a and m in outcomes_b):
        try:
            r = paired_outcomes(outcomes_a[mode], outcomes_b[mode])
        except ValueError as err:
            raise UserError(f"--compare {mode}: {err}") from None
        lo, hi = r.interval
        lines.append(f"{mode}: {(r.both + r.only_a) / r.n:.3f} -> {(r.both + r.only_b) / r.n:.3f}"
                     f" on {r.n} problems: {r.difference:+.3f} (95% paired interval {lo:+.3f} "
                     f"to {hi:+.3f}); right in A only {r.only_a}, in B only {r.only_b}, "
                     f"McNemar p = {r.p_value:.3g}")
    if not lines:
        raise UserError("--compare: the two files share no evaluated mode (tools / direct)")
    return lines, {mode: (outcomes_a[mode], outcomes_b[mode]) for mode in ("tools", "direct")
                   if mode in outcomes_a and mode in outcomes_b}


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    if _COMPARE.value:
        try:
            print("\n".join(compare_evaluations(*_COMPARE.value)))
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    if not _WORKDIR.value:
        print("error: --workdir is required", file=sys.stderr)
        return 2
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("agentic_jax").setLevel(logging.INFO)
    enable_compile_cache()
    overrides = config_flags.get_override_values(flags.FLAGS["config"]) if _CONFIG.value else {}
    try:
        if _BENCHMARKS.value:
            results = evaluate_checkpoint_on_benchmarks(
                _CONFIG.value, _WORKDIR.value, _BENCHMARKS.value,
                num_samples=_NUM_SAMPLES.value, temperature=_TEMPERATURE.value,
                top_p=_TOP_P.value, limit=_LIMIT.value or None, overrides=overrides,
                constrain_code=_CONSTRAIN.value)
        else:
            results = evaluate_checkpoint(_CONFIG.value, _WORKDIR.value, split=_SPLIT.value,
                                          num_samples=_NUM_SAMPLES.value or 1,
                                          limit=_LIMIT.value, overrides=overrides,
                                          constrain_code=_CONSTRAIN.value,
                                          modes=_MODES.value, checkpoints=_CHECKPOINTS.value)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if _BENCHMARKS.value:
        print(markdown_table(results), end="")
        print(f"files: {os.path.join(_WORKDIR.value, 'eval')}")
        return 0
    for mode in results["timing"]:
        r = results[mode]
        t = results["timing"][mode]
        print(f"{mode}: accuracy {r['accuracy']:.3f}, code-use {r['code_use_rate']:.3f}, "
              f"tool calls {r['tool_calls']:.2f}, length {r['response_length']:.1f}; "
              f"{t['wall_s']:.0f} s wall, {t['cpu_s']:.0f} s CPU, "
              f"{t['tokens_per_s']:.0f} response tokens/s")
    return 0


if __name__ == "__main__":
    __doc__ += variants_usage()  # absl's --help prints the main module's docstring
    app.run(lambda argv: sys.exit(main(argv)), flags_parser=parse_flags)
