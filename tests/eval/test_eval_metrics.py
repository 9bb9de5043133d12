"""avg@k, unbiased pass@k, maj@k by equivalence class, bootstrap intervals, breakdowns and
the files of a benchmark evaluation."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from agentic_jax.data.problem import Problem
from agentic_jax.evaluation import (
    Sample,
    breakdown,
    evaluate_benchmarks,
    majority_answer,
    pass_at_k,
    score_problem,
    summarize,
    usage,
)


def _problem(i, answer, subject="Algebra", level=1):
    return Problem(id=f"b:{i}", stage="external", difficulty=0.0, question=f"q{i}",
                   answer=answer, solution_code="", tests="", direct_solution="", kind="b",
                   meta={"subject": subject, "level": level})


@pytest.mark.parametrize("n", [1, 3, 5, 6])
def test_pass_at_k_is_the_mean_over_all_k_subsets(n):
    for c in range(n + 1):
        flags = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(flags, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_impossible_counts():
    for n, c, k in ((4, 5, 1), (4, 1, 5), (4, 1, 0)):
        with pytest.raises(ValueError, match="pass@k"):
            pass_at_k(n, c, k)


def test_majority_votes_by_equivalence_class():
    assert majority_answer(["3", "1/2", "0.5", "3", "\\frac12"]) == "1/2"
    assert majority_answer(["4", "5", "5", "4"]) == "4"  # a tie goes to the first class seen
    assert majority_answer([None, None, "7"]) == "7"    # no answer, no vote
    assert majority_answer([None, None]) is None


def test_score_problem_extracts_and_grades():
    samples = [Sample("so \\boxed{0.5}"), Sample("The answer is 1/2."), Sample("no idea"),
               Sample("ignored text", answer="3")]
    score = score_problem(samples, "\\frac{1}{2}")
    assert score.answers == ("0.5", "1/2", None, "3")
    assert score.correct == (True, True, False, False) and score.majority_correct


def test_summarize_keys_values_and_intervals():
    scores = [score_problem([Sample(r) for r in responses], ref) for responses, ref in [
        (["\\boxed{1}", "\\boxed{1}", "\\boxed{2}", "\\boxed{1}"], "1"),
        (["\\boxed{3}", "\\boxed{5}", "\\boxed{3}", "\\boxed{4}"], "5"),
        (["\\boxed{7}", "\\boxed{7}", "\\boxed{7}", "\\boxed{7}"], "7"),
        (["none", "\\boxed{0}", "\\boxed{0}", "\\boxed{8}"], "9"),
    ]]
    result = summarize(scores, seed=0)
    assert result["num_problems"] == 4 and result["num_samples"] == 4
    assert result["avg@4"] == pytest.approx((3 + 1 + 4 + 0) / 16)
    assert result["pass@1"] == pytest.approx(result["avg@4"])
    assert result["pass@4"] == pytest.approx(3 / 4)
    assert result["maj@4"] == pytest.approx(2 / 4)
    assert result["extraction_rate"] == pytest.approx(15 / 16)
    assert set(result["ci95"]) == {"avg@4", "maj@4"} | {f"pass@{k}" for k in range(1, 5)}
    for key, (low, high) in result["ci95"].items():
        assert 0.0 <= low <= result[key] <= high <= 1.0
    assert summarize(scores, seed=0) == result  # seeded: the same intervals every run
    with pytest.raises(ValueError, match="same, non-zero number of samples"):
        summarize(scores + [score_problem([Sample("\\boxed{1}")], "1")])


def test_intervals_narrow_with_more_problems():
    def width(num_problems):
        scores = [score_problem([Sample(f"\\boxed{{{i % 2}}}")], "1") for i in range(num_problems)]
        low, high = summarize(scores, seed=1)["ci95"]["avg@1"]
        return high - low
    assert width(400) < width(40) / 2
    same = [score_problem([Sample("\\boxed{1}")], "1")] * 10
    assert summarize(same)["ci95"]["avg@1"] == [1.0, 1.0]


def test_breakdown_by_subject_and_level_skips_missing_keys():
    scores = [score_problem([Sample("\\boxed{1}")], ref) for ref in ("1", "2", "1")]
    groups = breakdown(scores, ["Algebra", "Geometry", None])
    assert set(groups) == {"Algebra", "Geometry"}
    assert groups["Algebra"]["avg@1"] == 1.0 and groups["Geometry"]["avg@1"] == 0.0


def test_usage_averages_over_samples():
    stats = usage([[Sample("a", tool_calls=2, used_code=True, response_length=10),
                    Sample("b", response_length=30)]])
    assert stats == {"code_use_rate": 0.5, "tool_calls": 1.0, "response_length": 20.0}


def test_evaluate_benchmarks_writes_results_table_png_transcripts_and_history(tmp_path):
    benchmarks = {"math500": [_problem(0, "\\frac{1}{2}", "Algebra", 2),
                              _problem(1, "3", "Geometry", 5)],
                  "aime24": [_problem(2, "033", "", None)]}

    def sample(problems, k):
        # Right on problem 0 and 2 in two of k samples, never on problem 1.
        return [[f"\\boxed{{{p.answer if j < 2 and p.id != 'b:1' else 99}}}" for j in range(k)]
                for p in problems]

    eval_dir = str(tmp_path / "eval")
    results = evaluate_benchmarks(benchmarks, sample, eval_dir, num_samples=4, step=10)
    saved = json.loads(Path(eval_dir, "math500.json").read_text())
    assert saved == json.loads(json.dumps(results["math500"]))
    for key in ("num_problems", "num_samples", "avg@4", "pass@1", "pass@2", "pass@3",
                "pass@4", "maj@4", "ci95", "by_subject", "by_level", "code_use_rate",
                "tool_calls", "response_length"):
        assert key in saved
    assert saved["avg@4"] == pytest.approx(0.25) and saved["pass@4"] == pytest.approx(0.5)
    assert set(saved["by_subject"]) == {"Algebra", "Geometry"} and set(saved["by_level"]) == {
        "2", "5"}
    table = Path(eval_dir, "summary.md").read_text()
    assert "| math500 | 2 | 4 |" in table and "| aime24 | 1 | 4 |" in table
    for png in ("summary.png", "history.png"):
        assert Path(eval_dir, png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = Path(eval_dir, "aime24.samples.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["reference"] == "033" and len(record["samples"]) == 4
    assert [s["correct"] for s in record["samples"]] == [True, True, False, False]
    history = [json.loads(x) for x in Path(eval_dir, "history.jsonl").read_text().splitlines()]
    assert history[0]["step"] == 10 and history[0]["aime24/avg@4"] == pytest.approx(0.5)


def test_sampler_returning_the_wrong_shape_is_a_clear_error(tmp_path):
    benchmarks = {"b": [_problem(0, "1")]}
    with pytest.raises(ValueError, match="1 samples, expected 2"):
        evaluate_benchmarks(benchmarks, lambda ps, k: [["x"]], str(tmp_path), num_samples=2)
    with pytest.raises(ValueError, match="returned 0 rows for 1 problems"):
        evaluate_benchmarks(benchmarks, lambda ps, k: [], str(tmp_path), num_samples=2)
    assert not os.path.exists(tmp_path / "b.json")


def test_write_false_scores_without_files(tmp_path):
    results = evaluate_benchmarks({"b": [_problem(0, "1")]}, lambda ps, k: [["\\boxed{1}"] * k],
                                  str(tmp_path / "eval"), num_samples=2, step=3, write=False)
    assert results["b"]["avg@2"] == 1.0 and not (tmp_path / "eval").exists()


def test_history_keeps_one_line_per_step_when_steps_are_redone(tmp_path):
    benchmarks = {"b": [_problem(0, "1")]}
    eval_dir = str(tmp_path / "eval")

    def at(step, answer):
        evaluate_benchmarks(benchmarks, lambda ps, k: [[f"\\boxed{{{answer}}}"] * k], eval_dir,
                            num_samples=2, step=step)

    at(0, 1), at(5, 1), at(10, 2)
    at(5, 2)  # a run resumed from step 5's checkpoint redoes steps 5 and 10
    history = [json.loads(x) for x in Path(eval_dir, "history.jsonl").read_text().splitlines()]
    assert [(h["step"], h["b/avg@2"]) for h in history] == [(0, 1.0), (5, 0.0)]


def test_a_step_without_history_is_recorded_in_the_results_only(tmp_path):
    eval_dir = tmp_path / "eval"
    results = evaluate_benchmarks({"b": [_problem(0, "1")]}, lambda ps, k: [["\\boxed{1}"] * k],
                                  str(eval_dir), num_samples=2, step=7, history=False)
    assert results["b"]["step"] == 7 and json.loads((eval_dir / "b.json").read_text())["step"] == 7
    assert not (eval_dir / "history.jsonl").exists()


def test_wilson_and_newcombe_intervals_match_the_published_examples():
    from agentic_jax.evaluation.metrics import difference_interval, wilson_interval

    # Newcombe (1998), Statistics in Medicine 17: 81/263 -> 0.2553-0.3662; 0/20 -> 0-0.1611.
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson_interval(0, 20) == pytest.approx((0.0, 0.1611), abs=1e-4)
    # Newcombe (1998), method 10: 56/70 vs 48/80 -> difference 0.2, interval 0.0524-0.3339.
    assert difference_interval(48, 80, 56, 70) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_paired_difference_counts_tests_and_covers():
    from agentic_jax.evaluation.metrics import difference_interval, paired_difference

    a = [True] * 30 + [True] * 2 + [False] * 10 + [False] * 158
    b = [True] * 30 + [False] * 2 + [True] * 10 + [False] * 158
    paired = paired_difference(a, b)
    assert (paired.n, paired.both, paired.only_a, paired.only_b) == (200, 30, 2, 10)
    assert paired.difference == pytest.approx(8 / 200)
    # Exact McNemar: 2 of 12 discordant pairs, two-sided 2 * (1 + 12 + 66) / 4096.
    assert paired.p_value == pytest.approx(158 / 4096)
    lower, upper = paired.interval
    assert lower < paired.difference < upper
    # Agreement on 188 of 200 problems: narrower than the interval for independent samples.
    unpaired = difference_interval(32, 200, 40, 200)
    assert upper - lower < 0.8 * (unpaired[1] - unpaired[0])
    # Identical results: difference 0, p 1, an interval around 0.
    same = paired_difference(a, a)
    assert same.difference == 0 and same.p_value == 1.0
    assert same.interval[0] <= 0 <= same.interval[1]
    with pytest.raises(ValueError):
        paired_difference(a, b[:-1])
    with pytest.raises(ValueError):
        paired_difference([], [])


def test_paired_difference_interval_has_its_coverage():
    """95% intervals over 2,000 simulated pairs of evaluations of 300 problems (accuracies 0.09
    and 0.11, agreeing on most problems, as two checkpoints of one run do) hold the true
    difference about 95% of the time."""
    import numpy as np

    from agentic_jax.evaluation.metrics import paired_difference

    rng = np.random.default_rng(0)
    cells = np.array([0.07, 0.02, 0.04, 0.87])  # both right, a only, b only, neither
    truth = cells[2] - cells[1]
    held = 0
    for counts in rng.multinomial(300, cells, size=2000):
        kinds = np.repeat(np.arange(4), counts)
        paired = paired_difference(np.isin(kinds, (0, 1)), np.isin(kinds, (0, 2)))
        held += paired.interval[0] <= truth <= paired.interval[1]
    assert 0.93 <= held / 2000 <= 0.975


def test_compare_reads_two_evaluation_files_and_refuses_bad_ones(tmp_path):
    import json

    from agentic_jax.errors import UserError
    from agentic_jax.evaluate import compare_evaluations

    def write(name, record):
        path = tmp_path / name
        path.write_text(record if isinstance(record, str) else json.dumps(record))
        return str(path)

    ids = [f"p{i}" for i in range(200)]
    a = write("a.json", {"samples": 1, "outcomes": {"tools": {
        i: int(k < 32) for k, i in enumerate(ids)}}})
    b = write("b.json", {"samples": 1, "outcomes": {"tools": {
        i: int(k < 30 or 100 <= k < 110) for k, i in enumerate(ids)}}})
    (line,) = compare_evaluations(a, b)
    assert line.startswith("tools: 0.160 -> 0.200 on 200 problems: +0.040")
    assert "in A only 2, in B only 10, McNemar p = 0.0386" in line
    for bad, match in [("{not json", "not a readable evaluation"),
                       ({"samples": 1, "outcomes": [1, 0]}, "no per-problem outcomes"),
                       ({"samples": 1, "outcomes": {"tools": {"p0": "right"}}},
                        "different problems"),
                       ({"samples": 1, "outcomes": {"direct": {"p0": 1}}}, "share no"),
                       ([1, 2], "no per-problem outcomes")]:
        with pytest.raises(UserError, match=match):
            compare_evaluations(a, write("bad.json", bad))
    values = write("values.json", {"samples": 1, "outcomes": {"tools": {
        i: "right" for i in ids}}})
    with pytest.raises(UserError, match="one sample per problem"):
        compare_evaluations(a, values)


def test_compare_pools_several_pairs_problem_by_problem(tmp_path):
    import json

    from agentic_jax.errors import UserError
    from agentic_jax.evaluate import compare_evaluations
    import numpy as np

    from agentic_jax.evaluation.metrics import pooled_paired_outcomes

    ids = [f"p{i}" for i in range(200)]

    def write(name, right):
        path = tmp_path / name
        path.write_text(json.dumps({"samples": 1, "outcomes": {"tools": {
            i: int(right(k)) for k, i in enumerate(ids)}}}))
        return str(path)

    # Seed 0 gains 8 problems (+0.04), seed 1 gains 2 (+0.01): pooled +0.025.
    a0, b0 = write("a0.json", lambda k: k < 32), write("b0.json", lambda k: k < 40)
    a1, b1 = write("a1.json", lambda k: k < 30), write("b1.json", lambda k: k < 32)
    lines = compare_evaluations(a0, b0, a1, b1)
    assert len(lines) == 3 and lines[0].startswith("tools: 0.160 -> 0.200")
    assert lines[1].startswith("tools: 0.150 -> 0.160")
    assert lines[2].startswith("tools, pooled over 2 pairs on 200 problems: +0.025 (95% "
                               "interval over problems +0.010 to +0.040)")
    # The interval is the normal one of the per-problem mean differences.
    d = np.array([(k < 40) - (k < 32) + (k < 32) - (k < 30) for k in range(200)]) / 2
    half = 1.96 * d.std(ddof=1) / np.sqrt(200)
    outcomes = [(json.load(open(a))["outcomes"]["tools"], json.load(open(b))["outcomes"]["tools"])
                for a, b in ((a0, b0), (a1, b1))]
    pooled = pooled_paired_outcomes(outcomes)
    assert (pooled.n, pooled.pairs) == (200, 2)
    np.testing.assert_allclose(pooled.interval, (0.025 - half, 0.025 + half))
    with pytest.raises(UserError, match="expected pairs of files"):
        compare_evaluations(a0, b0, a1)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"samples": 1, "outcomes": {"tools": {"q0": 1}}}))
    with pytest.raises(UserError, match="different problems"):
        compare_evaluations(a0, b0, str(other), str(other))
