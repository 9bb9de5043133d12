"""`training.recompute_old_logprobs`: "auto" takes PPO's old log-probs from the update's own
forward only where one optimizer step consumes the batch and nothing needs them first; False is
refused elsewhere, before anything is written; a training run with either gives the same steps."""

import json
import os
import shutil

import pytest
from train_testing import tiny_config

from agentic_jax.config import ConfigError, read_config, resolve_old_logprobs

GRPO_ONE_UPDATE = {"rl.algorithm": "grpo", "model.value_head": False,
                   "training.ppo_epochs": 1, "training.minibatches": 1}


def _choice(**overrides):
    return resolve_old_logprobs(read_config(tiny_config(**{**GRPO_ONE_UPDATE, **overrides})))


def test_auto_skips_the_pass_only_where_it_is_exact():
    chosen = _choice()
    assert not chosen.recompute and "update's own forward" in chosen.line
    for extra in ({"training.ppo_epochs": 2}, {"training.minibatches": 2},
                  {"rl.is_level": "token"}, {"rl.kl_coef": 0.1, "rl.kl_in_reward": True},
                  {"training.recompute_old_logprobs": "true"},
                  # PPO's critic: GAE needs the values of the same pass.
                  {"rl.algorithm": "ppo", "model.value_head": True}):
        chosen = _choice(**extra)
        assert chosen.recompute and chosen.line == "", extra
    # A KL loss term works from the update's forward (the reference pass stays).
    assert not _choice(**{"rl.kl_coef": 0.1}).recompute


def test_false_is_refused_where_it_is_not_exact():
    assert not _choice(**{"training.recompute_old_logprobs": "false"}).recompute
    with pytest.raises(ConfigError, match=r"training.recompute_old_logprobs: .*ppo_epochs=2"):
        _choice(**{"training.ppo_epochs": 2, "training.recompute_old_logprobs": "false"})
    with pytest.raises(ConfigError, match=r"training.recompute_old_logprobs: .*importance"):
        _choice(**{"rl.is_level": "token", "training.recompute_old_logprobs": "false"})
    with pytest.raises(ConfigError, match="training.recompute_old_logprobs: expected auto"):
        _choice(**{"training.recompute_old_logprobs": "sometimes"})


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # two training runs; the update itself: tests/rl/test_update_forward_logprobs.py
def test_a_run_with_either_gives_the_same_steps(tmp_path):
    """Three GRPO steps of the tiny model: the same tokens sampled, rewards, losses and gradient
    norms (up to float rounding) with the pass of their own and without it. The second run
    takes the first one's finished warm start (it resumes at its end), so both start alike."""
    from train_testing import train

    runs = {}
    for setting in ("true", "auto"):
        workdir = str(tmp_path / setting)
        if runs:   # the first run's finished warm start, which the second resumes at its end
            shutil.copytree(tmp_path / "true" / "warmstart", tmp_path / setting / "warmstart")
        # A short warm start, after which some episodes give an answer and the others the
        # format penalty: rewards differ within groups, so the gradient is not 0.
        train(tiny_config(**GRPO_ONE_UPDATE, **{
            "training.total_steps": 3, "training.batch_size": 4, "rl.group_size": 4,
            "warmstart.enabled": True, "warmstart.steps": 8, "warmstart.batch_size": 8,
            "warmstart.lr": 3e-2, "warmstart.shipped": False, "rl.format_penalty": 0.5,
            "training.recompute_old_logprobs": setting}), workdir, progress=False)
        runs[setting] = _metrics(workdir)
    warm = [json.loads((tmp_path / name / "summary.json").read_text())["warmstart"]
            for name in runs]
    assert warm[0]["warmstart/loss"] == warm[1]["warmstart/loss"]  # one warm-started policy
    assert [r["step"] for r in runs["auto"]] == [1, 2, 3]
    # The first update compiles its step (counted; later ones may for a new packed row count).
    for run in runs.values():
        assert run[0]["time_update_compiles"] >= 1
        assert 0 < run[0]["time_update_compile_s"] <= run[0]["time_update_s"]
        for step in run:   # the packed rows computed (the 8 data shards' multiple), and
            # the share of their token slots in use (the rule itself: tests/rl/test_packing.py)
            assert step["update_rows"] >= 8 and step["update_rows"] % 8 == 0
            assert 0.2 < step["update_fill"] <= 1
    for own, recomputed in zip(runs["auto"], runs["true"]):
        assert own["grad_norm"] > 0
        for key in ("tokens", "reward", "response_length", "num_episodes"):
            assert own[key] == recomputed[key], key
        for key in ("loss", "policy_loss", "grad_norm", "entropy"):
            assert own[key] == pytest.approx(recomputed[key], rel=1e-3, abs=1e-6), key
        # The sampler and the trainer hold the same weights: either way their log-probs differ
        # by float rounding alone (two compiled programs round differently, so the rounding
        # figures themselves are not compared with each other).
        for key, bound in (("mismatch_kl", 1e-8), ("mismatch_max_abs", 1e-4),
                           ("logprob_mismatch", 1e-4)):
            assert own[key] < bound and recomputed[key] < bound, (key, own, recomputed)
        assert own["approx_kl"] == 0.0
