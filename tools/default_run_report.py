"""The README's Results section and docs/results/ from the default run's own outputs.

  python -m agentic_jax.train --config=configs/math_ppo.py --workdir=runs/default
  python -m agentic_jax.train --config=configs/math_ppo.py --workdir=runs/default_seed1 \\
      --config.seed=1
  python tools/default_run_report.py runs/default runs/default_seed1

Any other recipe's runs the same way, under a name of its own (files NAME.png / NAME.md, README
markers <!-- NAME:begin --> with dashes for underscores), e.g. the real model's:

  python tools/default_run_report.py --name=smollm2_rl \\
      --command="python -m agentic_jax.train --config=configs/math_ppo.py:smollm2-135m-rl" \\
      runs/smollm2_rl runs/smollm2_rl_seed1

Reads each run directory's config.json, summary.json, metrics.jsonl and transcripts.jsonl and
writes:
  docs/results/default_run.png   code-use rate, accuracy and response length against step, one
                                 figure, every seed (the held-out values before and after RL as
                                 markers);
  docs/results/default_run.md    the section itself: the recipe, the held-out table of every
                                 seed, the curves' start and end, and held-out transcripts from
                                 before and after RL;
  README.md or a docs/ guide      the same section, between the markers
                                 <!-- default-run:begin --> and <!-- default-run:end -->, in
                                 whichever page holds them (--readme=PAGE names one).
Nothing else in the page changes; without the markers no page is touched and the tool says so.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Sequence

from absl import app, flags
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agentic_jax.utils import read_json, read_metrics

_OUT_DIR = flags.DEFINE_string("out_dir", "docs/results", "Where the figure and section go.")
_README = flags.DEFINE_string(
    "readme", "auto", "The page to update: a markdown file, 'auto' (README.md or the docs/ guide "
    "that holds the recipe's markers) or '' to skip.")
_NAME = flags.DEFINE_string("name", "default_run",
                            "The recipe's name: file names and the README's markers.")
_COMMAND = flags.DEFINE_string("command", "python -m agentic_jax.train "
                               "--config=configs/math_ppo.py", "The command the runs ran.")
_TITLE = flags.DEFINE_string("title", "The default run", "The figure's title begins so.")
_EDGE = 5  # steps averaged at each end of a training curve


def markers(name: str) -> tuple[str, str]:
    tag = name.replace("_", "-")
    return f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"


BEGIN, END = markers("default_run")


class Run:
    """One run directory's outputs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.config = read_json(os.path.join(path, "config.json"))["config"]
        self.summary = read_json(os.path.join(path, "summary.json"))
        self.records, _ = read_metrics(os.path.join(path, "metrics.jsonl"))
        self.transcripts = _read_jsonl(os.path.join(path, "transcripts.jsonl"))
        self.seed = int(self.config["seed"])
        rank = int(self.config.get("model", {}).get("lora_rank", 0))
        self.tag = f"seed {self.seed}" + (f", LoRA r={rank}" if rank else "")

    def held_out(self, phase: str, mode: str, key: str) -> float:
        return float(self.summary[phase][mode].get(key, float("nan")))

    def curve(self, key: str) -> tuple[list[int], list[float]]:
        pairs = [(r["step"], r[key]) for r in self.records if isinstance(r.get(key), (int, float))]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def ends(self, key: str) -> tuple[float, float]:
        _, values = self.curve(key)
        if not values:
            raise ValueError(f"{self.path}/metrics.jsonl: no {key!r} in any step")
        n = min(_EDGE, len(values))
        return sum(values[:n]) / n, sum(values[-n:]) / n


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(runs: Sequence[Run], out_png: str, title: str = "The default run") -> None:
    fig = Figure(figsize=(9, 6), layout="constrained")
    ax = fig.subplots()
    right = ax.twinx()
    styles = ("-", "--", ":")
    for i, run in enumerate(runs):
        ls, tag = styles[i % len(styles)], run.tag
        last = run.summary["steps"]
        # Training episodes per step as a line, the held-out evaluations before and after RL
        # as circles (filled for the first run).
        for axis, key, color, label in ((ax, "code_use_rate", "C0", "code-use rate"),
                                        (ax, "accuracy", "C2", "accuracy"),
                                        (right, "response_length", "C3", "response length")):
            axis.plot(*run.curve(key), ls, color=color, label=f"{label} ({tag})")
            axis.plot([0, last], [run.held_out("initial", "tools", key),
                                  run.held_out("final", "tools", key)],
                      "o", color=color, markersize=7, markerfacecolor="none" if i else color)
    ax.set(xlabel="RL step", ylabel="rate (training episodes; circles: held-out, greedy)",
           ylim=(-0.02, 1.02))
    right.set_ylabel("response length (tokens; circles: held-out)", color="C3")
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    fig.legend(handles, [h.get_label() for h in handles], fontsize="small",
               loc="outside lower center", ncols=3)
    fig.suptitle(f"{title}: code use, accuracy and response length per RL step")
    os.makedirs(os.path.dirname(out_png) or ".", exist_ok=True)
    FigureCanvasAgg(fig).print_png(out_png)


def _pick_transcripts(run: Run) -> tuple[list[dict], list[dict]]:
    """Held-out transcripts at the first and the last evaluation, one problem per stage: one
    whose verdict or tool use changed between the two when there is one, else the stage's
    first."""
    evals = [t for t in run.transcripts if t.get("source") == "eval"]
    if not evals:
        return [], []
    first, last = min(t["step"] for t in evals), max(t["step"] for t in evals)

    def by_problem(step: int) -> dict[tuple[str, str], dict]:
        out: dict[tuple[str, str], dict] = {}
        for t in evals:
            if t["step"] == step:
                out.setdefault((t.get("stage", ""), t["prompt"]), t)
        return out

    before_at, after_at = by_problem(first), by_problem(last)

    def changed(key: tuple[str, str]) -> bool:
        a, b = before_at[key], after_at.get(key)
        return b is not None and (a["correct"] != b["correct"] or
                                  ("```python" in a["response"]) != ("```python" in b["response"]))

    before, after = [], []
    for stage in dict.fromkeys(stage for stage, _ in before_at):
        keys = [k for k in before_at if k[0] == stage]
        pick = next((k for k in keys if changed(k)), keys[0])
        before.append(before_at[pick])
        later = after_at.get(pick) or next((t for k, t in after_at.items() if k[0] == stage),
                                           None)
        if later is not None:
            after.append(later)
    return before, after


def _transcript_block(t: dict) -> str:
    verdict = "correct" if t["correct"] else f"wrong (reference {t['reference']})"
    prompt = re.sub(r"<\|[^|]*\|>", "", t["prompt"]).rstrip("\n")
    # Four backticks: the transcript holds ``` fences of its own.
    return f"````text\n{prompt}\n{t['response'].rstrip()}\n````\n{verdict}"


def _fmt_time(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(round(seconds % 60)):02d} s"


def _shipped_note(runs: Sequence[Run]) -> str:
    """How the runs got their warm start: loaded (the package's saved result of the recipe)
    or trained."""
    loaded = [r for r in runs if r.summary.get("warmstart", {}).get("warmstart/shipped")]
    if not loaded:
        return ""
    trained = ", ".join(_fmt_time(r.summary["warmstart"]["warmstart/trained_s"]) for r in loaded)
    return (f" (the package holds this recipe's result for seed{'s' if len(loaded) > 1 else ''} "
            f"{', '.join(str(r.seed) for r in loaded)}, and the run{'s' if len(loaded) > 1 else ''}"
            f" loaded it; training it took {trained} on the same machine, and "
            "`--config.warmstart.shipped=False` trains it again)")


def _ahead_note(config: dict) -> str:
    ahead = config["data"].get("scheduler_ahead", 0.0)
    if not ahead or len(config["data"]["stages"]) < 2:
        return ""
    return f", and until it does {ahead:.0%} of the problems come from the stages after it"


def _kinds_note(config: dict, stage: str) -> str:
    """The run's kinds of ``stage`` in parentheses (" (sum, product)"); "" when it names none."""
    from agentic_jax.data.curriculum import kinds

    try:
        generated = kinds(stage)
    except KeyError:  # not a curriculum stage
        return ""
    own = [k for k in config["data"].get("kinds") or () if k in generated]
    return f" ({', '.join(own)})" if own else ""


def _runs_note(runs: Sequence[Run]) -> str:
    """"seeds 0, 1 (the second with `--config.seed=1`)", or the runs' tags when they differ in
    more than the seed."""
    if all(r.tag == f"seed {r.seed}" for r in runs):
        seeds = ", ".join(str(r.seed) for r in runs)
        return (f"seed{'s' if len(runs) > 1 else ''} {seeds}"
                + (" (the second with `--config.seed=1`)" if len(runs) > 1 else ""))
    return "runs " + "; ".join(r.tag for r in runs)


def _curriculum(c: dict) -> bool:
    return c["data"].get("source", "curriculum") == "curriculum"


def _problems_note(c: dict) -> str:
    """What RL trained on: the curriculum's kinds and stages, or the dataset source."""
    if not _curriculum(c):
        return f"the training problems of `data.source={c['data']['source']}`"
    return f"{', '.join(c['data']['kinds'])} {_stages_note(c)}"


def _stages_note(c: dict) -> str:
    stages = c["data"]["stages"]
    if len(stages) == 1:
        return f"({stages[0]}, difficulty up to {c['data']['max_difficulty']:.0%} of its range)"
    return (f"({' then '.join(stages)}: the curriculum moves on at "
            f"{c['data']['scheduler_threshold']:.0%} rolling accuracy{_ahead_note(c)})")


def section(runs: Sequence[Run], figure_path: str,
            command: str = "python -m agentic_jax.train --config=configs/math_ppo.py",
            name: str = "default_run") -> str:
    main = runs[0]
    c = main.config
    ws = main.summary.get("warmstart", {})
    lines = [
        f"`{command}` on 2 CPU cores, {_runs_note(runs)}. A "
        f"{main.summary['num_params'] / 1e6:.1f}M-parameter model is warm-started for "
        f"{c['warmstart']['steps']:,} supervised steps, in which "
        f"{ws.get('warmstart/tool_fraction', float('nan')):.0%} of the examples use the tool"
        f"{_shipped_note(runs)}; then {c['training']['total_steps']} "
        f"{c['rl'].get('algorithm', 'ppo').upper()} steps of {c['training']['batch_size']} "
        f"prompts x {c['rl']['group_size']} samples on {_problems_note(c)}.",
        "",
        "| held-out (greedy) | " + " | ".join(
            f"{r.tag}: warm start | {r.tag}: after RL" for r in runs) + " |",
        "| --- |" + " --- | --- |" * len(runs),
    ]
    rows = (("accuracy with tools", "tools", "accuracy", "{:.3f}"),
            ("code-use rate", "tools", "code_use_rate", "{:.3f}"),
            ("response length (tokens)", "tools", "response_length", "{:.1f}"),
            *((f"accuracy, {stage}{_kinds_note(c, stage)}", "tools", f"accuracy/{stage}",
               "{:.3f}") for stage in c["data"]["stages"] if _curriculum(c)),
            ("accuracy without tools", "direct", "accuracy", "{:.3f}"))
    for label, mode, key, fmt in rows:
        cells = []
        for r in runs:
            before, after = r.held_out("initial", mode, key), r.held_out("final", mode, key)
            if key == "accuracy" and _intervals(r):
                cells += [f"{before:.3f} {_wilson(r, 'initial', mode)}",
                          f"**{after:.3f}** {_wilson(r, 'final', mode)}"]
            else:
                cells += [fmt.format(before), "**" + fmt.format(after) + "**"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if all(_intervals(r) for r in runs):
        cells = []
        for r in runs:
            low, high = _gain_interval(r)
            cells += ["", f"{r.held_out('final', 'tools', 'accuracy') - r.held_out('initial', 'tools', 'accuracy'):+.3f} ({low:+.3f} to {high:+.3f})"]
        lines.append("| RL's gain in accuracy with tools (95% interval) | " + " | ".join(cells)
                     + " |")
    n = int(main.held_out("initial", "tools", "num_problems"))
    turns = ", the stages taking turns" if len(c["data"]["stages"]) > 1 else ""
    lines += ["", f"Held-out: {n} problems{turns}. Wall time and peak memory "
              "(resident set of the training process): " + "; ".join(
                  f"{r.tag} {_fmt_time(r.summary['wall_time_s'])}, "
                  f"{r.summary['peak_rss_mb'] / 1024:.1f} GB" for r in runs
                  if "wall_time_s" in r.summary) + ".", "",
              f"![code use, accuracy and response length vs step]({figure_path})", ""]
    for r in runs:
        reached = list(dict.fromkeys(x["stage"] for x in r.records if "stage" in x))
        ahead = r.config["data"].get("scheduler_ahead", 0.0)
        later = r.config["data"]["stages"][1:]
        preview = (f", with {ahead:.0%} of its problems from {' and '.join(later)}"
                   if ahead and later else "")
        moved = (f"reached {', '.join(reached)}" if len(reached) > 1 else
                 f"stayed on {reached[0]} (its rolling accuracy stayed under the threshold)"
                 f"{preview}" if reached else "")
        if moved and len(r.config["data"]["stages"]) > 1:
            lines.append(f"- Curriculum, {r.tag}: training {moved}.")
    for r in runs:
        parts = []
        for key, label, fmt in (("code_use_rate", "code-use rate", "{:.2f}"),
                                ("accuracy", "accuracy", "{:.2f}"),
                                ("accuracy/algebra", "accuracy on algebra", "{:.2f}"),
                                ("response_length", "response length", "{:.1f}")):
            if key == "accuracy/algebra" and not r.curve(key)[1]:
                continue  # no algebra problem was trained on
            a, b = r.ends(key)
            parts.append(f"{label} {fmt.format(a)} -> {fmt.format(b)}")
        lines.append(f"- Training episodes, {r.tag} (means of the first and last "
                     f"{_EDGE} steps): " + ", ".join(parts) + ".")
    before, after = _pick_transcripts(main)
    for title, picked in (("Before RL", before), ("After RL", after)):
        if picked:
            lines += ["", f"{title} (held-out, {main.tag}, step {picked[0]['step']}):",
                      ""]
            lines += "\n\n".join(_transcript_block(t) for t in picked).split("\n")
    again = "" if name == "default_run" else f"--name={name} --command=\"{command}\" "
    lines += ["", f"Regenerate this section, the figure and docs/results/{name}.md: "
              f"`python tools/default_run_report.py {again}RUN_DIR [RUN_DIR ...]`."]
    return "\n".join(lines).rstrip() + "\n"


def _intervals(run: Run) -> bool:
    """Whether the held-out sets are large enough for intervals to say something (>= 100)."""
    return run.held_out("initial", "tools", "num_problems") >= 100


def _counts(run: Run, phase: str, mode: str) -> tuple[int, int]:
    n = int(run.held_out(phase, mode, "num_problems"))
    return round(run.held_out(phase, mode, "accuracy") * n), n


def _wilson(run: Run, phase: str, mode: str) -> str:
    from agentic_jax.evaluation.metrics import wilson_interval

    low, high = wilson_interval(*_counts(run, phase, mode))
    return f"({low:.3f}–{high:.3f})"


def _gain_interval(run: Run) -> tuple[float, float]:
    """95% interval of the final accuracy with tools minus the initial one (Newcombe's, as for
    independent samples: conservative on the same problems)."""
    from agentic_jax.evaluation.metrics import difference_interval

    return difference_interval(*_counts(run, "initial", "tools"), *_counts(run, "final", "tools"))


def find_page(name: str, pages: list[str] | None = None) -> str | None:
    """The first of README.md and docs/*.md that holds the recipe's markers, or None."""
    import glob

    begin, end = markers(name)
    for page in pages if pages is not None else ["README.md", *sorted(glob.glob("docs/*.md"))]:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        if begin in text and end in text:
            return page
    return None


def update_readme(readme: str, text: str, name: str = "default_run") -> bool:
    begin, end = markers(name)
    with open(readme, encoding="utf-8") as f:
        old = f.read()
    if begin not in old or end not in old:
        return False
    head, rest = old.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(readme, "w", encoding="utf-8") as f:
        f.write(f"{head}{begin}\n{text}{end}{tail}")
    return True


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise app.UsageError("give one or more run directories, seed 0 first")
    runs = [Run(path) for path in argv[1:]]
    out_dir, name, command = _OUT_DIR.value, _NAME.value, _COMMAND.value
    figure, doc = f"{name}.png", f"{name}.md"
    plot(runs, os.path.join(out_dir, figure), _TITLE.value)
    with open(os.path.join(out_dir, doc), "w", encoding="utf-8") as f:
        f.write(section(runs, figure, command, name))
    print(f"wrote {os.path.join(out_dir, figure)} and {os.path.join(out_dir, doc)}")
    page = find_page(name) if _README.value == "auto" else _README.value
    if page:
        # The figure's link is relative to the page that shows it.
        figure_link = os.path.relpath(os.path.join(out_dir, figure), os.path.dirname(page) or ".")
        if update_readme(page, section(runs, figure_link, command, name), name):
            print(f"updated {page}")
        else:
            begin, end = markers(name)
            print(f"{page}: no {begin} ... {end} markers; left as it is")
    elif _README.value == "auto":
        print(f"no page holds the {markers(name)[0]} markers; none updated")


if __name__ == "__main__":
    app.run(main)
