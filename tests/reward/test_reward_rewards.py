"""compute_reward (outcome reward and optional penalties) and grade_batch."""

import types

import pytest

from agentic_jax.reward import (
    RewardConfig,
    RewardInfo,
    compute_reward,
    grade_batch,
    overlong_penalty,
)


def test_pure_outcome_reward_by_default():
    assert compute_reward(r"so \boxed{\frac{1}{2}}", "0.5") == RewardInfo(
        reward=1.0, correct=True, has_answer=True, extracted=r"\frac{1}{2}"
    )
    wrong = compute_reward(
        r"\boxed{3}",
        "4",
        num_tool_calls=3,
        num_tool_failures=3,
        response_length=100,
        max_length=100,
    )
    assert (wrong.reward, wrong.correct, wrong.has_answer) == (0.0, False, True)
    missing = compute_reward("I give up", "4")
    assert (missing.reward, missing.has_answer, missing.extracted) == (0.0, False, None)


def test_format_penalty_only_without_an_answer():
    cfg = RewardConfig(format_penalty=0.5)
    assert compute_reward("nothing", "4", cfg=cfg).reward == -0.5
    assert compute_reward(r"\boxed{4}", "4", cfg=cfg).reward == 1.0


def test_tool_failure_penalty_when_most_calls_failed():
    cfg = RewardConfig(tool_failure_penalty=0.2)
    assert (
        compute_reward(r"\boxed{4}", "4", cfg=cfg, num_tool_calls=4, num_tool_failures=3).reward
        == 0.8
    )
    assert (
        compute_reward(r"\boxed{4}", "4", cfg=cfg, num_tool_calls=4, num_tool_failures=2).reward
        == 1.0
    )
    assert compute_reward(r"\boxed{4}", "4", cfg=cfg).reward == 1.0
    with pytest.raises(ValueError, match="num_tool_failures"):
        compute_reward("", "4", num_tool_calls=1, num_tool_failures=2)


@pytest.mark.parametrize(
    "length,expected", [(50, 0.0), (80, 0.0), (90, 0.5), (99, 0.95), (100, 1.0)]
)
def test_soft_overlong_penalty(length, expected):
    cfg = RewardConfig(overlong_penalty=1.0, overlong_buffer=20)
    assert overlong_penalty(length, 100, cfg) == pytest.approx(expected)
    info = compute_reward(r"\boxed{4}", "4", cfg=cfg, response_length=length, max_length=100)
    assert info.reward == pytest.approx(1.0 - expected)


def test_hard_overlong_penalty_without_buffer():
    cfg = RewardConfig(overlong_penalty=0.3)
    assert overlong_penalty(99, 100, cfg) == 0.0
    assert overlong_penalty(100, 100, cfg) == 0.3
    assert overlong_penalty(100, None, cfg) == 0.0


@pytest.mark.parametrize(
    "field,value",
    [("format_penalty", -1.0), ("overlong_buffer", -1), ("tool_failure_threshold", 1.5)],
)
def test_bad_config_is_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        RewardConfig(**{field: value})


def test_verification_decides_correctness_when_enabled():
    problem = types.SimpleNamespace(
        answer="x**3/3", kind="antiderivative", meta={"expression": "x**2"}
    )

    response = r"\boxed{\frac{x^3}{3} + 7}"
    assert not compute_reward(response, problem.answer).correct
    info = compute_reward(
        response, problem.answer, cfg=RewardConfig(use_verification=True), problem=problem
    )
    assert info.correct and info.reward == 1.0


def test_grade_batch_preserves_order():
    responses = [rf"\boxed{{{k}}}" for k in range(24)] + ["no answer"]
    references = [str(k if k % 3 else k + 1) for k in range(24)] + ["1"]
    infos = grade_batch(
        responses,
        references,
        max_workers=3,
        response_lengths=[10] * 25,
        max_length=10,
        cfg=RewardConfig(overlong_penalty=0.25),
    )
    assert [i.correct for i in infos] == [k % 3 != 0 for k in range(24)] + [False]
    assert [i.extracted for i in infos] == [str(k) for k in range(24)] + [None]
    assert all(i.overlong_penalty == 0.25 for i in infos)


def test_grade_batch_checks_lengths():
    with pytest.raises(ValueError, match="references"):
        grade_batch(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="response_lengths"):
        grade_batch(["a"], ["a"], response_lengths=[1, 2])
