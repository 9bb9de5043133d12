"""Files of a benchmark evaluation, under ``DIR/eval/``:

    <name>.json             avg@K, pass@1..pass@K, maj@K, ci95, per subject / level, usage
    <name>.samples.jsonl    the transcripts: one line per problem with its responses and verdicts
    summary.md              one markdown table for all benchmarks
    summary.png             avg@K / pass@K / maj@K with 95% intervals, and pass@k against k
    history.jsonl / .png    the headline figures per training step, when evaluated in training

Each file is written to a temporary name and renamed, so a failure never leaves half a file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from agentic_jax.evaluation.metrics import ProblemScore, Sample


def atomic_write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def headline(result: Mapping) -> dict[str, float]:
    """avg@K, pass@K and maj@K of one benchmark's result."""
    k = result["num_samples"]
    return {key: result[key] for key in (f"avg@{k}", f"pass@{k}", f"maj@{k}")}


def write_result(eval_dir: str, name: str, result: Mapping) -> str:
    """Writes ``eval_dir/<name>.json``; returns its path."""
    path = os.path.join(eval_dir, f"{name}.json")
    atomic_write(path, json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path


def write_transcripts(eval_dir: str, name: str, problems: Sequence, samples:
                      Sequence[Sequence[Sample]], scores: Sequence[ProblemScore]) -> str:
    """Writes ``eval_dir/<name>.samples.jsonl``: id, question, reference and every response
    with its answer and verdict."""
    lines = []
    for problem, problem_samples, score in zip(problems, samples, scores, strict=True):
        lines.append(json.dumps({
            "id": problem.id, "question": problem.question, "reference": problem.answer,
            "majority_correct": score.majority_correct,
            "samples": [{"response": s.response, "answer": a, "correct": c,
                         "tool_calls": s.tool_calls, "response_length": s.response_length}
                        for s, a, c in zip(problem_samples, score.answers, score.correct)],
        }, ensure_ascii=False))
    path = os.path.join(eval_dir, f"{name}.samples.jsonl")
    atomic_write(path, "\n".join(lines) + "\n")
    return path


def _cell(result: Mapping, key: str) -> str:
    low, high = result["ci95"][key]
    return f"{100 * result[key]:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def markdown_table(results: Mapping[str, Mapping]) -> str:
    """One row per benchmark: problems, samples, avg@K, pass@K, maj@K in percent with their
    95% intervals."""
    rows = ["| benchmark | problems | K | avg@K | pass@K | maj@K |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, result in results.items():
        k = result["num_samples"]
        cells = [_cell(result, f"{metric}@{k}") for metric in ("avg", "pass", "maj")]
        rows.append(f"| {name} | {result['num_problems']} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def plot_summary(results: Mapping[str, Mapping], path: str) -> str:
    """Bars of avg@K, pass@K, maj@K per benchmark with 95% intervals (left) and pass@k
    against k (right), in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, curves) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / 3
    for offset, metric in enumerate(("avg", "pass", "maj")):
        keys = [f"{metric}@{r['num_samples']}" for r in results.values()]
        values = [100 * r[k] for r, k in zip(results.values(), keys)]
        errors = [[100 * (r[k] - r["ci95"][k][0]) for r, k in zip(results.values(), keys)],
                  [100 * (r["ci95"][k][1] - r[k]) for r, k in zip(results.values(), keys)]]
        positions = [i + (offset - 1) * width for i in range(len(results))]
        bars.bar(positions, values, width, yerr=errors, capsize=3, label=f"{metric}@K")
    bars.set_xticks(range(len(results)), list(results), rotation=30, ha="right")
    bars.set_ylabel("% of problems")
    bars.set_title("avg@K, pass@K, maj@K (95% bootstrap intervals)")
    bars.set_ylim(0, 118)  # room above 100% for the legend
    bars.legend(ncol=3, loc="upper center")
    for name, result in results.items():
        ks = range(1, result["num_samples"] + 1)
        curves.plot(list(ks), [100 * result[f"pass@{k}"] for k in ks], marker=".", label=name)
    curves.set_xscale("log", base=2)
    curves.set_xlabel("k")
    curves.set_ylabel("pass@k (%)")
    curves.set_title("pass@k")
    curves.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)
    return path


def append_history(eval_dir: str, step: int, results: Mapping[str, Mapping]) -> str:
    """Adds one line {"step", "<benchmark>/avg@K", ...} to ``history.jsonl`` and redraws
    ``history.png`` (avg@K of every benchmark against the step). Lines of this step or later
    go first: a run resumed from an earlier checkpoint redoes those steps."""
    path = os.path.join(eval_dir, "history.jsonl")
    record = {"step": step}
    for name, result in results.items():
        record.update({f"{name}/{k}": v for k, v in headline(result).items()})
    kept = [line for line in _history_lines(path) if json.loads(line)["step"] < step]
    atomic_write(path, "".join(line + "\n" for line in kept + [json.dumps(record)]))
    _plot_history(path, os.path.join(eval_dir, "history.png"))
    return path


def _history_lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def _plot_history(history_path: str, png_path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in _history_lines(history_path)]
    fig, ax = plt.subplots(figsize=(7, 4))
    names = sorted({key for r in records for key in r if "/avg@" in key})
    for key in names:
        points = [(r["step"], 100 * r[key]) for r in records if key in r]
        ax.plot(*zip(*points), marker="o", label=key.replace("/", " "))
    ax.set_xlabel("step")
    ax.set_ylabel("avg@K (%)")
    ax.set_title("benchmarks during training")
    if names:
        ax.legend()
    fig.tight_layout()
    fig.savefig(png_path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(png_path + ".tmp.png", png_path)
