"""A few episodes in full, for a person reading the run: ``transcripts.jsonl`` in the run dir.

One JSON object per line: ``step``, ``source`` ("eval" for the held-out problems at each
evaluation, "train" for a training step's episodes), the problem's ``stage`` and ``kind``,
``prompt`` and ``response`` (decoded text;
the response holds the code blocks and their ```output blocks as the model saw them),
``answer`` (the final answer extracted from the response, or null), ``reference`` (the
problem's answer), ``reward``, ``correct``, ``tool_calls`` and ``finish_reason``.

Writing one reads only episodes already sampled, or samples new ones with keys of their own:
it never changes a run's metrics.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from agentic_jax.data import Problem
from agentic_jax.episodes.grading import grade
from agentic_jax.episodes.policy import Policy
from agentic_jax.episodes.sampling import sample_episodes
from agentic_jax.parallel import is_main_process
from agentic_jax.reward import RewardConfig, extract_answer
from agentic_jax.rollout import Episode, SamplingParams

TRANSCRIPTS = "transcripts.jsonl"
EPISODES_PER_WRITE = 4


def transcript(tokenizer, episode: Episode, problem: Problem, step: int,
               source: str) -> dict:
    """One episode as a transcripts.jsonl record."""
    return {
        "step": int(step), "source": source, "stage": problem.stage, "kind": problem.kind,
        "prompt": tokenizer.decode(list(episode.prompt_tokens), skip_special_tokens=False),
        "response": episode.text, "answer": extract_answer(episode.text),
        "reference": problem.answer, "reward": float(episode.reward),
        "correct": bool(episode.correct), "tool_calls": int(episode.num_tool_calls),
        "finish_reason": episode.finish_reason}


def write(workdir: str, records: Sequence[dict]) -> None:
    """Appends ``records`` to the run's transcripts.jsonl (process 0 only)."""
    if not is_main_process() or not records:
        return
    with open(os.path.join(workdir, TRANSCRIPTS), "a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def from_training(policy: Policy, workdir: str, step: int, episodes: Sequence[Episode],
                  problems: Sequence[Problem]) -> None:
    """EPISODES_PER_WRITE of a training step's graded episodes (``problems[i]`` is episode
    i's), picked with a generator seeded by (seed, step) alone."""
    rng = np.random.default_rng([policy.cfg.seed, step, 1])
    picked = sorted(rng.choice(len(episodes), min(EPISODES_PER_WRITE, len(episodes)),
                               replace=False).tolist()) if episodes else []
    write(workdir, [transcript(policy.tokenizer, episodes[i], problems[i], step, "train")
                    for i in picked])


def from_evaluation(policy: Policy, workdir: str, step: int) -> None:
    """The first EPISODES_PER_WRITE held-out problems with tools at the evaluation temperature
    (collective: every host calls it)."""
    problems = list(policy.problems.test[:EPISODES_PER_WRITE])
    episodes = sample_episodes(policy, problems, num_samples=1, tools=True,
                               sampling=SamplingParams(temperature=policy.cfg.eval_temperature))
    grade(episodes, problems, RewardConfig(use_verification=policy.cfg.reward.use_verification),
          sandbox=policy.sandbox)
    write(workdir, [transcript(policy.tokenizer, e, p, step, "eval")
                    for e, p in zip(episodes, problems)])
