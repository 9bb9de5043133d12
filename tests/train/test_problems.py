"""The held-out set of a run over several stages."""

from agentic_jax.data.problem import Problem
from agentic_jax.training.problems import held_out


def _problems(stage: str, n: int) -> list[Problem]:
    return [Problem(id=f"{stage}-{i}", stage=stage, difficulty=0.0, question=f"{stage} {i}",
                    answer="1", solution_code="", tests="", direct_solution="", kind="k")
            for i in range(n)]


def test_one_stage_is_the_first_problems():
    test = _problems("arithmetic", 10)
    assert held_out(test, 4) == test[:4]
    assert held_out(test, 40) == test


def test_stages_take_turns_and_a_short_stage_leaves_its_share_to_the_rest():
    a, b = _problems("arithmetic", 10), _problems("algebra", 3)
    picked = held_out(a + b, 8)
    assert [p.id for p in picked] == ["arithmetic-0", "algebra-0", "arithmetic-1", "algebra-1",
                                      "arithmetic-2", "algebra-2", "arithmetic-3",
                                      "arithmetic-4"]
    assert held_out(a + b, 100) == [p for pair in zip(a, b) for p in pair] + a[3:]
    assert held_out(a + b, 0) == []


def test_eval_limit_keeps_the_first_problems_of_each_benchmark(tmp_path):
    import json

    from agentic_jax.config import read_config
    from agentic_jax.training.problems import load_problems
    from configs import math_ppo

    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + 1?",
                                        "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}) + "\n"
                            for i in range(5)))
    config = math_ppo.get_config("smoke")
    config.eval.benchmarks = f"gsm8k={path}"
    config.eval.limit = 2
    problems = load_problems(read_config(config)).benchmarks["gsm8k"]
    assert [p.answer for p in problems] == ["1", "2"]
    config.eval.limit = 0
    assert len(load_problems(read_config(config)).benchmarks["gsm8k"]) == 5
