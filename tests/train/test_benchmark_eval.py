"""Benchmarks wired into the run: a training set from a file in a dataset's own layout,
decontamination against the benchmarks, evaluation during training (history), the evaluate
command on benchmark files, and sampling that is the same however hosts split it."""

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from train_testing import tiny_config, train

from agentic_jax.config import read_config
from agentic_jax.episodes.gather import pack_episodes, unpack_episodes
from agentic_jax.episodes.policy import build_policy
from agentic_jax.episodes.problems import load_problems
from agentic_jax.episodes import sampling as sampling_lib
from agentic_jax.episodes.sampling import sample_episodes
from agentic_jax.rollout import SamplingParams

# Whole training runs: part of the slow suite (pytest -m slow).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLANTED = "Compute 7 times 6."
# MATH500's columns; GSM8K's question / "... #### n" answer.
MATH500 = [
    {"problem": PLANTED, "solution": "$7 \\cdot 6 = \\boxed{42}$", "answer": "42",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"},
    {"problem": "What is 12 + 30?", "solution": "$\\boxed{42}$", "answer": "42",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/2.json"},
    {"problem": "What is 9 - 4?", "solution": "$\\boxed{5}$", "answer": "5",
     "subject": "Algebra", "level": 2, "unique_id": "test/algebra/3.json"},
]
GSM8K = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
     "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
    {"question": "A box holds 5 pens. How many pens are in 2 boxes?",
     "answer": "2 * 5 = <<2*5=10>>10\n#### 10"},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _training_rows():
    """MATH-train layout (no answer column: the solution's boxed answer), one row a spaced
    copy of a MATH500 question."""
    rows = [{"problem": f"What is {a} + {b}?", "solution": f"$\\boxed{{{a + b}}}$",
             "level": f"Level {1 + a % 5}", "type": "Prealgebra"}
            for a, b in [(1, 2), (3, 5), (4, 9), (6, 11), (2, 13), (8, 1), (7, 7), (5, 20)]]
    rows.insert(3, {"problem": "Compute  7 times 6 .", "solution": "$\\boxed{42}$",
                    "level": "Level 1", "type": "Prealgebra"})
    return rows


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("benchmarks")
    return {"train": _jsonl(d / "math_train.jsonl", _training_rows()),
            "math500": _jsonl(d / "math500.jsonl", MATH500),
            "gsm8k": _jsonl(d / "gsm8k.jsonl", GSM8K)}


def _config(files, **overrides):
    values = {"data.source": f"file:{files['train']}", "data.stages": ("external",),
              "data.kinds": (), "eval.benchmarks": f"math500={files['math500']},"
                                                   f"gsm8k={files['gsm8k']}",
              "eval.num_samples": 2, **overrides}
    return tiny_config(**values)


@pytest.fixture(scope="module")
def bench_run(files, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("bench_run"))
    train(_config(files, **{"eval.every_steps": 3, "data.decontaminate": True}), workdir,
          progress=False)
    return workdir


def test_training_evaluates_the_benchmarks_into_a_history(bench_run):
    eval_dir = os.path.join(bench_run, "eval")
    with open(os.path.join(eval_dir, "history.jsonl")) as f:
        history = [json.loads(line) for line in f]
    # The starting policy, every eval.every_steps, and the last step.
    assert [h["step"] for h in history] == [0, 3, 4]
    assert {"math500/avg@2", "math500/pass@2", "math500/maj@2", "gsm8k/avg@2"} <= set(history[0])
    assert open(os.path.join(eval_dir, "history.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(eval_dir, "math500.json")) as f:
        result = json.load(f)
    assert result["step"] == 4 and result["num_problems"] == 3 and result["num_samples"] == 2
    assert {"avg@2", "pass@1", "pass@2", "maj@2", "ci95", "by_subject"} <= set(result)
    with open(os.path.join(bench_run, "metrics.jsonl")) as f:
        records = {r["step"]: r for r in map(json.loads, f)}
    assert "eval/gsm8k/avg@2" in records[3] and "eval/gsm8k/avg@2" not in records[2]
    assert records[4]["eval/math500/pass@2"] == result["pass@2"]


def test_a_file_source_is_split_and_decontaminated(files, caplog):
    with caplog.at_level(logging.INFO, logger="agentic_jax"):
        kept = load_problems(read_config(_config(files)))
        dropped = load_problems(read_config(_config(files, **{"data.decontaminate": True})))
    train_questions = {p.question for p in kept.train + kept.test}
    assert len(train_questions) == 9 and len(kept.test) == 1  # test_fraction 0.1 of 9
    assert all(p.stage == "external" and p.meta["layout"] == "math" for p in kept.train)
    planted = [p for p in kept.train if "7 times 6" in p.question]
    assert planted and planted[0].answer == "42"  # from the boxed solution
    assert not [p for p in dropped.train if "7 times 6" in p.question]
    assert len(dropped.train) == len(kept.train) - 1 and dropped.test == kept.test
    summaries = [r.getMessage() for r in caplog.records if "decontamination" in r.getMessage()]
    assert len(summaries) == 2 and all("1 of" in s and "math500: 1" in s for s in summaries)
    assert "gsm8k: 0" in summaries[0] and summaries[1].endswith("; dropped")
    assert set(kept.benchmarks) == {"math500", "gsm8k"}
    assert [p.answer for p in kept.benchmarks["gsm8k"]] == ["7", "10"]


def test_evaluate_command_on_benchmark_files(bench_run, files, tmp_path):
    # A GSM8K file of another name than the run's, in parquet.
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = str(tmp_path / "gsm8k_test.parquet")
    pq.write_table(pa.Table.from_pylist(GSM8K), parquet)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-m", "agentic_jax.evaluate", f"--workdir={bench_run}",
         f"--benchmarks=m500={files['math500']},gsm={parquet}", "--num_samples=3",
         "--temperature=0.8", "--top_p=0.9"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| m500 | 3 | 3 |" in result.stdout and "| gsm | 2 | 3 |" in result.stdout
    eval_dir = Path(bench_run) / "eval"
    gsm = json.loads((eval_dir / "gsm.json").read_text())
    assert gsm["num_samples"] == 3 and gsm["step"] == 4 and "pass@3" in gsm["ci95"]
    lines = (eval_dir / "gsm.samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["reference"] for line in lines] == ["7", "10"]
    assert all(len(json.loads(line)["samples"]) == 3 for line in lines)
    assert (eval_dir / "summary.md").read_text().startswith("| benchmark |")
    # The command evaluates; it does not add to the training history.
    history = (eval_dir / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [0, 3, 4]

    bad = subprocess.run(
        [sys.executable, "-m", "agentic_jax.evaluate", f"--workdir={bench_run}",
         f"--benchmarks=m500={files['math500']}", "--top_p=0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert bad.returncode == 2 and len(errors) == 1 and "--top_p" in errors[0], bad.stderr[-2000:]


def _sampled(episode):
    """What a sample is, without the figures that vary with the batch shape or the clock
    (log-probabilities and values in the last bits, tool wall time)."""
    return dataclasses.replace(episode, logprobs=[], values=[], tool_ms=0.0)


@pytest.fixture(scope="module")
def policy(files):
    p, _ = build_policy(read_config(_config(files)))
    yield p
    p.close()


def test_sampled_episodes_are_the_same_in_host_shares(policy, monkeypatch):
    from agentic_jax.parallel import distributed

    problems = policy.problems.benchmarks["math500"]
    sampling = SamplingParams(temperature=1.0, top_p=0.9)

    def sample(batch_size):
        return sample_episodes(policy, problems, num_samples=2, tools=True,
                               sampling=sampling, batch_size=batch_size)

    whole = [_sampled(e) for e in sample(4)]
    assert len(whole) == 6 and [_sampled(e) for e in sample(5)] == whole
    assert [e.group_id for e in whole] == [0, 0, 1, 1, 2, 2]  # the problem's index
    # Two "hosts" with 2 and 1 problems: each packs its own episodes; the packs joined in
    # host order unpack to both hosts' episodes, field for field and bit for bit.
    packs, local = [], []

    def gather_as_host(episodes):
        local.extend(episodes)
        packs.append(pack_episodes(episodes))
        return episodes

    for host in (0, 1):
        monkeypatch.setattr(sampling_lib, "process_slice",
                            lambda n, host=host: distributed.process_slice(n, host, 2))
        monkeypatch.setattr(sampling_lib, "gather_episodes", gather_as_host)
        sample(3)
    joined = {name: {key: np.concatenate([p[name][key] for p in packs]) for key in packs[0][name]}
              for name in packs[0]}
    gathered = unpack_episodes(joined)
    assert gathered == local and [_sampled(e) for e in gathered] == whole
    # Only 32-bit words, bytes and bools travel (JAX narrows 64-bit values without x64).
    dtypes = {a.dtype for part in packs[0].values() for a in part.values()}
    assert dtypes <= {np.dtype(t) for t in ("int32", "uint32", "uint8", "bool")}, dtypes


def test_a_config_recorded_before_the_eval_group_is_one_clear_error():
    from agentic_jax.config import ConfigError

    config = tiny_config()
    del config["eval"]
    with pytest.raises(ConfigError, match=r"^eval: the config has no 'eval' group .*--config="):
        read_config(config)
