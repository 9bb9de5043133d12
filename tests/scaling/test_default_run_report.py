"""tools/default_run_report.py: the README section and figure come from the runs' own files."""

import json
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _held_out(acc: float, code: float, length: float) -> dict:
    return {"accuracy": acc, "code_use_rate": code, "response_length": length,
            "accuracy/arithmetic": acc, "accuracy/algebra": acc / 2, "num_problems": 128.0}


def _fake_run(path: Path, seed: int, final_acc: float) -> None:
    path.mkdir()
    config = {"seed": seed, "warmstart": {"steps": 3500},
              "training": {"total_steps": 6, "batch_size": 32},
              "rl": {"group_size": 4},
              "data": {"kinds": ["sum", "quadratic"], "stages": ["arithmetic", "algebra"],
                       "scheduler_threshold": 0.7, "scheduler_ahead": 0.25}}
    (path / "config.json").write_text(json.dumps({"config": config, "num_params": 896897}))
    summary = {"num_params": 896897, "steps": 6, "wall_time_s": 601.0, "peak_rss_mb": 2200.0,
               "warmstart": {"warmstart/tool_fraction": 0.3},
               "initial": {"tools": _held_out(0.03, 0.0, 45.0),
                           "direct": _held_out(0.0, 0.0, 40.0)},
               "final": {"tools": _held_out(final_acc, 0.99, 47.5),
                         "direct": _held_out(0.0, 0.0, 41.0)}}
    (path / "summary.json").write_text(json.dumps(summary))
    with open(path / "metrics.jsonl", "w") as f:
        for step in range(1, 7):
            f.write(json.dumps({"step": step, "accuracy": step / 10, "code_use_rate": step / 7,
                                "accuracy/algebra": step / 20, "stage": "arithmetic",
                                "response_length": 40 + step}) + "\n")
    with open(path / "transcripts.jsonl", "w") as f:
        for step, code in ((0, False), (6, True)):
            for stage in ("arithmetic", "algebra", "arithmetic"):
                response = ("Let me compute it with Python.\n```python\nprint(2 + 3)\n```"
                            if code else "Let me write it out.\n2 + 3 = 6.")
                f.write(json.dumps({"step": step, "source": "eval", "stage": stage,
                                    "prompt": "Problem: Compute 2 + 3.\nSolution:\n",
                                    "response": response, "correct": code,
                                    "reference": "5"}) + "\n")


def test_report_writes_the_figure_the_section_and_the_readme_block(tmp_path):
    _fake_run(tmp_path / "s0", 0, 0.93)
    _fake_run(tmp_path / "s1", 1, 0.88)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nbefore\n<!-- default-run:begin -->\nold text\n"
                      "<!-- default-run:end -->\nafter\n")
    out = tmp_path / "results"
    subprocess.run([sys.executable, str(_REPO / "tools" / "default_run_report.py"),
                    str(tmp_path / "s0"), str(tmp_path / "s1"), f"--out_dir={out}",
                    f"--readme={readme}"], check=True, capture_output=True, cwd=_REPO)
    assert (out / "default_run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = (out / "default_run.md").read_text()
    assert "](default_run.png)" in section
    # Accuracy with its Wilson 95% interval (128 held-out problems), and RL's gain with
    # Newcombe's interval of the difference.
    assert ("| accuracy with tools | 0.030 (0.012–0.078) | **0.930** (0.872–0.963) | "
            "0.030 (0.012–0.078) | **0.880** (0.816–0.928) |") in section
    assert "| RL's gain in accuracy with tools (95% interval) |  | +0.900 (+0.8" in section
    assert "| code-use rate | 0.000 | **0.990** | 0.000 | **0.990** |" in section
    assert "seed 0 10 min 01 s, 2.1 GB" in section
    # One accuracy row per stage, naming the config's kinds of it.
    assert "| accuracy, arithmetic (sum) | 0.030 | **0.930** |" in section
    assert "| accuracy, algebra (quadratic) | 0.015 | **0.465** |" in section
    assert ("moves on at 70% rolling accuracy, and until it does 25% of the problems come from "
            "the stages after it)") in section
    # Training curves: means of the first and last five of the six steps.
    assert "code-use rate 0.43 -> 0.57" in section
    assert "accuracy on algebra 0.15 -> 0.20" in section
    assert ("training stayed on arithmetic (its rolling accuracy stayed under the threshold), "
            "with 25% of its problems from algebra.") in section
    # One transcript per stage from the first and the last evaluation.
    assert section.count("````text") == 4 and "step 6" in section
    text = readme.read_text()
    assert "old text" not in text and text.startswith("# x\n\nbefore\n")
    assert text.endswith("<!-- default-run:end -->\nafter\n")
    assert "](results/default_run.png)" in text  # relative to the page that shows it
    assert "| accuracy with tools | 0.030 (0.012–0.078) | **0.930** (0.872–0.963) |" in text


def test_report_leaves_a_readme_without_markers_alone(tmp_path):
    _fake_run(tmp_path / "s0", 0, 0.9)
    readme = tmp_path / "README.md"
    readme.write_text("# nothing to replace\n")
    result = subprocess.run([sys.executable, str(_REPO / "tools" / "default_run_report.py"),
                             str(tmp_path / "s0"), f"--out_dir={tmp_path / 'r'}",
                             f"--readme={readme}"], check=True, capture_output=True, text=True,
                            cwd=_REPO)
    assert readme.read_text() == "# nothing to replace\n"
    assert "left as it is" in result.stdout


def test_report_says_when_the_warm_start_was_loaded(tmp_path):
    _fake_run(tmp_path / "s0", 0, 0.9)
    summary_path = tmp_path / "s0" / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["warmstart"].update({"warmstart/shipped": 1.0, "warmstart/trained_s": 798.1,
                                 "warmstart/time_s": 1.3})
    summary_path.write_text(json.dumps(summary))
    out = tmp_path / "results"
    subprocess.run([sys.executable, str(_REPO / "tools" / "default_run_report.py"),
                    str(tmp_path / "s0"), f"--out_dir={out}", "--readme="],
                   check=True, capture_output=True, cwd=_REPO)
    section = (out / "default_run.md").read_text()
    assert ("the package holds this recipe's result for seed 0, and the run loaded it; "
            "training it took 13 min 18 s") in section
    assert "warmstart.shipped=False" in section


def test_another_recipe_gets_its_own_files_markers_and_run_labels(tmp_path):
    # A one-stage GRPO recipe, full fine-tuning beside LoRA: the real model's section.
    _fake_run(tmp_path / "full", 0, 0.9)
    _fake_run(tmp_path / "lora", 0, 0.8)
    for name, rank in (("full", 0), ("lora", 16)):
        path = tmp_path / name / "config.json"
        record = json.loads(path.read_text())
        record["config"]["rl"]["algorithm"] = "grpo"
        record["config"]["model"] = {"lora_rank": rank}
        record["config"]["data"].update(stages=["arithmetic"], kinds=["product", "power"],
                                        max_difficulty=1.0)
        path.write_text(json.dumps(record))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- default-run:begin -->\nkept\n<!-- default-run:end -->\n"
                      "<!-- smollm2-rl:begin -->\nold\n<!-- smollm2-rl:end -->\n")
    out = tmp_path / "results"
    command = "python -m agentic_jax.train --config=configs/math_ppo.py:smollm2-135m-rl"
    subprocess.run([sys.executable, str(_REPO / "tools" / "default_run_report.py"),
                    str(tmp_path / "full"), str(tmp_path / "lora"), f"--out_dir={out}",
                    f"--readme={readme}", "--name=smollm2_rl", f"--command={command}",
                    "--title=SmolLM2"], check=True, capture_output=True, cwd=_REPO)
    assert (out / "smollm2_rl.png").exists() and not (out / "default_run.png").exists()
    section = (out / "smollm2_rl.md").read_text()
    assert section.startswith(f"`{command}` on 2 CPU cores, runs seed 0; seed 0, LoRA r=16.")
    assert "then 6 GRPO steps of 32 prompts x 4 samples on product, power (arithmetic, " \
           "difficulty up to 100% of its range)." in section
    assert "| held-out (greedy) | seed 0: warm start | seed 0: after RL | seed 0, LoRA r=16: " \
           "warm start | seed 0, LoRA r=16: after RL |" in section
    assert "--name=smollm2_rl" in section
    # One stage: no curriculum to move through, no stages taking turns.
    assert "Curriculum" not in section and "taking turns" not in section
    text = readme.read_text()
    assert "kept" in text and "\nold\n" not in text and "](results/smollm2_rl.png)" in text
