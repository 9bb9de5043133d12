r"""How well a warm start has taught copying, measured along the way.

    python tools/warmstart_probe.py --config=configs/math_ppo.py --evals=500,1000,2000 \
        [--config.warmstart.steps=2500 ...] [--pool=60000,20000] --out=probe.json
    python tools/warmstart_probe.py --config=configs/math_ppo.py --init_from=RUN --out=probe.json

Trains the config's warm start (as `training.warmstart.warm_start` does; no RL) and, after each
step in ``--evals`` and the last, scores the held-out problems' reference responses teacher-forced:
a problem counts when the greedy choice is right at every token of its code block ("code"), of
the final answer read from the tool's output ("answer"), of both ("tool_ok"), and of the whole
written-out response ("direct_ok"), overall and per kind. This is what greedy decoding would
write once the response has taken the tool path, without sampling. ``--pool=A,G`` generates A
arithmetic and G algebra problems instead of the curriculum's default sizes; ``--init_from``
scores a run's newest checkpoint instead of training. Results go to ``--out`` (JSON), one
record per evaluation.
"""

from __future__ import annotations

import collections
import json
import sys
import time

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file (+ ':variant').")
_OUT = flags.DEFINE_string("out", None, "JSON file to write.")
_EVALS = flags.DEFINE_list("evals", [], "Warm-start steps after which to score.")
_POOL = flags.DEFINE_string("pool", "", "arithmetic,algebra problem counts of the curriculum.")
_INIT_FROM = flags.DEFINE_string("init_from", "", "Score this run's newest checkpoint instead.")


def _reference_rows(policy, problems, outputs):
    """(kind, tool-response tokens, their part ids, written-out tokens, part ids) per problem:
    parts 1 code block, 2 final answer, 3 written-out response, 0 the rest."""
    from agentic_jax.data import prompts as fmt

    def enc(text):
        return list(policy.tokenizer.encode(text, add_special_tokens=False))

    rows = []
    for problem, output in zip(problems, outputs, strict=True):
        if output is None:
            continue
        text, block = fmt.tool_solution_text(problem, output), fmt.format_tool_output(output)
        cut = text.index(block)
        head = text[:cut]
        start = head.index(fmt.CODE_OPEN) + len(fmt.CODE_OPEN)
        prompt = policy.make_prompt(problem)
        tokens, parts = list(prompt), [0] * len(prompt)
        for piece, part in ((head[:start], 0), (head[start:], 1), (block, 0),
                            (text[cut + len(block):], 2)):
            ids = enc(piece)
            tokens += ids
            parts += [part] * len(ids)
        direct = enc(fmt.direct_solution_text(problem))
        rows.append((problem.kind, tokens, parts, list(prompt) + direct,
                     [0] * len(prompt) + [3] * len(direct)))
    return rows


def _scorer(policy, rows):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from agentic_jax.utils import round_up

    width = round_up(max(max(len(r[1]), len(r[3])) for r in rows), 16)

    def arrays(t, p):
        tokens = np.zeros((len(rows), width), np.int32)
        parts = np.zeros((len(rows), width), np.int32)
        for n, row in enumerate(rows):
            tokens[n, :len(row[t])], parts[n, :len(row[p])] = row[t], row[p]
        return tokens, parts

    tool, tool_parts = arrays(1, 2)
    direct, direct_parts = arrays(3, 4)

    @jax.jit
    def greedy_right(state, tokens):
        logits = nnx.merge(policy.graphdef, state).forward(tokens).logits[:, :-1]
        right = jnp.argmax(logits, -1) == tokens[:, 1:]
        return jnp.pad(right, ((0, 0), (1, 0)), constant_values=True)

    def score(state):
        ok_tool = np.asarray(greedy_right(state, jnp.asarray(tool)))
        ok_direct = np.asarray(greedy_right(state, jnp.asarray(direct)))
        by_kind = collections.defaultdict(list)
        for n, row in enumerate(rows):
            code = ok_tool[n][tool_parts[n] == 1].all()
            answer = ok_tool[n][tool_parts[n] == 2].all()
            by_kind[row[0]].append((code, answer, code and answer,
                                    ok_direct[n][direct_parts[n] == 3].all()))
        every = [v for values in by_kind.values() for v in values]

        def mean(values, i):
            return round(float(np.mean([v[i] for v in values])), 3)

        out = {name: mean(every, i)
               for i, name in enumerate(("code", "answer", "tool_ok", "direct_ok"))}
        out.update({f"{kind}/tool_ok": mean(v, 2) for kind, v in sorted(by_kind.items())})
        return out

    return score


def main(argv: list[str]) -> int:
    if len(argv) > 1 or _CONFIG.value is None or not _OUT.value:
        print("usage: warmstart_probe.py --config=CONFIG --out=FILE [--evals=N,...]",
              file=sys.stderr)
        return 2
    if _POOL.value:
        from agentic_jax.data import curriculum

        arithmetic, algebra = (int(x) for x in _POOL.value.split(","))
        curriculum.DEFAULT_SIZES.update(arithmetic=arithmetic, algebra=algebra)
    from agentic_jax.config import read_config
    from agentic_jax.rl import state as state_lib
    from agentic_jax.training import warmstart as ws
    from agentic_jax.training.builders import build_run

    cfg = read_config(_CONFIG.value)
    run, state = build_run(cfg)
    policy, w = run.policy, cfg.warmstart
    records = []

    def record(step, params, extra):
        records.append({"step": step, **extra, **score(params)})
        print(json.dumps(records[-1]), flush=True)
        with open(_OUT.value, "w") as f:
            json.dump({"argv": sys.argv[1:], "records": records}, f, indent=1)

    try:
        test = policy.problems.test
        outputs = ws.run_everywhere(policy.sandbox, [p.solution_code for p in test])
        score = _scorer(policy, _reference_rows(policy, test, outputs))
        params = state.params
        if _INIT_FROM.value:
            params, step = state_lib.restore_params(_INIT_FROM.value, params, run.shardings.state)
            record(int(step), params, {"init_from": _INIT_FROM.value})
            return 0
        evals = {int(x) for x in _EVALS.value} | {w.steps}
        began = time.perf_counter()

        def on_step(step, params, info):
            if step in evals:
                record(step, params, {"examples": info["examples"], "tokens": info["tokens"],
                                      "loss": round(float(info["metrics"]["policy_loss"]), 4),
                                      "train_s": round(time.perf_counter() - began, 1)})

        ws.warm_start(run, params, progress=False, on_step=on_step)
    finally:
        policy.close()
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
