"""Grading episodes: answer equivalence, or the verification layer with the problem's tests run
in the sandbox (rl.reward_check = "verify")."""

import dataclasses

import pytest

from agentic_jax.data import Problem
from agentic_jax.episodes.grading import grade
from agentic_jax.reward import RewardConfig
from agentic_jax.rollout import Episode
from agentic_jax.sandbox import Sandbox, SandboxConfig

SEVEN = Problem(id="sum-7", stage="arithmetic", difficulty=0.1, question="What is 3 + 4?",
                answer="7", solution_code="print(3 + 4)",
                tests="assert ANSWER.strip() == '7'", direct_solution="3 + 4 = 7",
                kind="sum")
# The same problem whose tests accept nothing: only a run of the tests can tell them apart.
REJECTING = dataclasses.replace(SEVEN, id="sum-7-strict", tests="raise AssertionError('no')")


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(num_workers=1)) as sb:
        yield sb


def _episodes(*texts):
    return [Episode(prompt_tokens=[1], text=t) for t in texts]


def test_grade_mode_reads_the_answer_only(sandbox):
    eps = _episodes(r"so \boxed{7}", r"so \boxed{7}", r"so \boxed{8}", "no answer")
    grade(eps, [SEVEN, REJECTING, SEVEN, SEVEN], RewardConfig(), sandbox=sandbox)
    assert [e.correct for e in eps] == [True, True, False, False]
    assert [e.answered for e in eps] == [True, True, True, False]
    assert [e.reward for e in eps] == [1.0, 1.0, 0.0, 0.0]


def test_verify_mode_runs_the_problems_tests(sandbox):
    eps = _episodes(r"so \boxed{7}", r"so \boxed{7}", r"so \boxed{8}")
    grade(eps, [SEVEN, REJECTING, SEVEN], RewardConfig(use_verification=True),
          sandbox=sandbox)
    assert [e.correct for e in eps] == [True, False, False]
    assert [e.reward for e in eps] == [1.0, 0.0, 0.0]
