"""`Policy`: the inference policy (`agentic_jax.inference`: model, tokenizer, rollout engine,
sandbox) with the run's problems, what training and evaluation on problems sample and grade
with; `build_policy` builds it from the typed config."""

from __future__ import annotations

import dataclasses

from flax import nnx

from agentic_jax.config import RunConfig
from agentic_jax.episodes.problems import Problems, check_prompts, load_problems
from agentic_jax.inference.policy import InferencePolicy, build_inference, run_tokenizer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Policy(InferencePolicy):
    """The inference policy with the problems the run draws from: what training and
    evaluation on problems sample and grade with."""

    problems: Problems

    @classmethod
    def with_problems(cls, policy: InferencePolicy, problems: Problems) -> Policy:
        return cls(problems=problems, **{f.name: getattr(policy, f.name)
                                         for f in dataclasses.fields(InferencePolicy)})


def build_policy(cfg: RunConfig) -> tuple[Policy, nnx.State]:
    """The policy's components, its problems and its initial model state (preset init or HF
    weights), published."""
    tokenizer = run_tokenizer(cfg)
    problems = load_problems(cfg)
    check_prompts(cfg, tokenizer, problems.every())  # before anything slow is built
    policy_, params = build_inference(cfg, tokenizer)
    return Policy.with_problems(policy_, problems), params
