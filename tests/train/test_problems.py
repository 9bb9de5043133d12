"""The held-out set of a run over several stages."""

from agentic_jax.data.problem import Problem
from agentic_jax.episodes.problems import held_out


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
    from agentic_jax.episodes.problems import load_problems
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


def _gsm8k_dir(tmp_path, n_train: int, n_test: int):
    import json

    def row(i):
        return json.dumps({"question": f"Ann has {i} apples and buys {i + 3} more. How many "
                                       f"apples does Ann have in case {i}?",
                           "answer": f"{i}+{i + 3} = <<{i}+{i + 3}={2 * i + 3}>>{2 * i + 3}\n"
                                     f"#### {2 * i + 3}"}) + "\n"
    (tmp_path / "train.jsonl").write_text("".join(row(i) for i in range(n_train)))
    (tmp_path / "test.jsonl").write_text("".join(row(1000 + i) for i in range(n_test)))
    return tmp_path


def test_the_gsm8k_recipe_sets_its_warm_start_apart_from_rl_and_the_test_set(tmp_path, caplog):
    import logging

    from agentic_jax.config import read_config
    from agentic_jax.episodes.problems import load_problems
    from configs import math_ppo

    config = math_ppo.get_config("smollm2-135m-gsm8k")
    assert (config.data.source, config.data.eval_size) == ("gsm8k", 1319)
    assert config.warmstart.disjoint and config.warmstart.tool_fraction == 1.0
    # Which problems go where does not depend on the model: the tiny one stands in, so the test
    # runs where the real model's package is not installed.
    config.model = math_ppo.get_config("smoke").model
    config.data.source = f"gsm8k:{_gsm8k_dir(tmp_path, 30, 12)}"
    config.warmstart.steps, config.warmstart.batch_size = 2, 4
    with caplog.at_level(logging.INFO):
        problems = load_problems(read_config(config))
    assert len(problems.warmstart) == 8 and len(problems.train) == 22
    assert not {p.id for p in problems.warmstart} & {p.id for p in problems.train}
    assert len(problems.test) == 12  # the whole test split: eval_size 1319 >= 12
    assert all(p.solution_code for p in problems.warmstart)
    line = next(r.getMessage() for r in caplog.records if "set aside" in r.getMessage())
    assert "8 problems set aside, RL draws from the other 22" in line
    # The 13-gram check against the held-out split is logged (it finds nothing here: every
    # fixture question shares a template, but the numbers differ in every 13-gram) ...
    line = next(r.getMessage() for r in caplog.records if "13-grams" in r.getMessage())
    assert "0 of 30 training problems overlap an evaluation set (held-out: 0); dropped" in line
    # ... and a training problem that copies a test question is dropped before the split.
    test_file = tmp_path / "test.jsonl"
    copied = test_file.read_text().splitlines()[0]
    (tmp_path / "train.jsonl").write_text((tmp_path / "train.jsonl").read_text() + copied + "\n")
    with caplog.at_level(logging.INFO):
        cleaned = load_problems(read_config(config))
    assert len(cleaned.warmstart) + len(cleaned.train) == 30
    assert "1 of 31 training problems overlap" in caplog.records[-2].getMessage()
    (tmp_path / "train.jsonl").write_text("\n".join(
        (tmp_path / "train.jsonl").read_text().splitlines()[:-1]) + "\n")
    # Seeded: the same seed sets the same problems aside, another seed others.
    again = load_problems(read_config(config))
    assert [p.id for p in again.warmstart] == [p.id for p in problems.warmstart]
    config.seed = 1
    assert [p.id for p in load_problems(read_config(config)).warmstart] != [
        p.id for p in problems.warmstart]
    # Without disjoint the warm start draws from the training set, as every other recipe does.
    config.warmstart.disjoint = False
    assert load_problems(read_config(config)).warmstart == []


def test_a_dataset_source_without_the_external_stage_is_one_clear_error():
    import pytest

    from agentic_jax.config import ConfigError, read_config
    from configs import math_ppo

    config = math_ppo.get_config("smoke")
    config.data.source = "gsm8k"
    with pytest.raises(ConfigError, match=r"data.stages: expected \('external',\)"):
        read_config(config)
