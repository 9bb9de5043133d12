"""Overlapped rollouts end to end on the tiny config: max_staleness = 0 is the synchronous run
exactly, a one_step_off run killed with a rollout in flight resumes to the same numbers as one
never stopped, and fully_async keeps every step within its staleness bound (both partial-rollout
modes). The off-policy weights are on by default in these modes (rl.is_level=auto), their
statistics in every step's metrics, and rl.is_level=none turns them off."""

import json
import os

import pytest
from train_testing import comparable, tiny_config, train

from agentic_jax.evaluation.benchmarks import evaluate_in_training
from agentic_jax.evaluation.held_out import evaluate
from agentic_jax.training.evaluators import Evaluators
from agentic_jax.utils import read_metrics

pytestmark = pytest.mark.slow  # several training runs


def _config(**overrides):
    # An entropy bonus gives every update a gradient, so each version's weights differ.
    return tiny_config(**{"rl.entropy_coef": 0.01, **overrides})


def _records(workdir):
    records, skipped = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    assert skipped == 0
    return records


IS_METRICS = ("is_weight_mean", "is_weight_max", "is_clipped_frac", "is_masked_frac")


def _recorded_off_policy(workdir):
    with open(os.path.join(workdir, "config.json")) as f:
        rl = json.load(f)["config"]["rl"]
    return rl["is_level"], rl["is_cap"]


POOL_KEYS = ("engine_pages_in_use_mean", "engine_kv_peak_frac", "engine_pages_peak")


def _without(record: dict, keys) -> dict:
    return {k: v for k, v in record.items() if k not in keys}


def test_zero_staleness_is_the_synchronous_run(tmp_path):
    train(_config(), str(tmp_path / "sync"), progress=False)
    sync = [comparable(r) for r in _records(str(tmp_path / "sync"))]
    assert all(r["staleness_max"] == 0 for r in sync)
    for mode in ("one_step_off", "fully_async"):
        workdir = str(tmp_path / mode)
        train(_config(**{"rl.async_mode": mode, "rollout.max_staleness": 0}), workdir,
              progress=False)
        records = _records(workdir)
        if mode == "fully_async":  # its steps went through the open loop, one at a time
            assert [r.pop("rollout_streamed") for r in records] == [0.0] * len(records)
        # The async producer gives the engine its own copy of the weights before step 1, which
        # drops the prefix cache's pages of the initial evaluation: only the pool's occupancy
        # at step 1 may differ.
        records = [comparable(r) for r in records]
        assert records[1:] == sync[1:], mode
        assert _without(records[0], POOL_KEYS) == _without(sync[0], POOL_KEYS), mode


def test_one_step_off_killed_mid_queue_resumes_exactly(tmp_path):
    config = _config(**{"rl.async_mode": "one_step_off"})
    whole = str(tmp_path / "whole")
    train(config, whole, progress=False)
    records = _records(whole)
    # Checkpoints at 2 and 4 drain the queue: steps 1 and 3 sample with the trainer's weights.
    assert [r["staleness_max"] for r in records] == [0, 1, 0, 1]
    assert records[3]["mismatch_max_abs"] > 1e-3 > records[2]["mismatch_max_abs"]
    # rl.is_level=auto: truncated token-level weights, recorded as resolved for the resume.
    assert _recorded_off_policy(whole) == ("token", 2.0)
    for r in records:
        assert all(k in r for k in IS_METRICS), r.keys()
        assert 0 < r["is_weight_max"] <= 2.0 and r["is_masked_frac"] == 0
    assert records[2]["is_weight_max"] < 1 + 1e-4 < records[3]["is_weight_max"]

    killed = str(tmp_path / "killed")

    def die_at_step_3(policy, workdir, step, total):
        if step == 3:  # after step 3's update, with step 4's rollout running
            raise KeyboardInterrupt
        return evaluate_in_training(policy, workdir, step, total)

    with pytest.raises(KeyboardInterrupt):
        train(config, killed, progress=False,
              evaluators=Evaluators(held_out=evaluate, benchmarks=die_at_step_3))
    train(config, killed, progress=False)
    assert [comparable(r) for r in _records(killed)] == [comparable(r) for r in records]


@pytest.mark.parametrize("bound, partial, stream", [(1, "abort", True), (2, "continue", True),
                                                   (1, "continue", False)])
def test_fully_async_stays_within_the_bound(tmp_path, bound, partial, stream):
    workdir = str(tmp_path / "run")
    train(_config(**{"rl.async_mode": "fully_async", "rollout.max_staleness": bound,
                     "rollout.partial": partial, "rollout.stream_steps": stream,
                     "training.total_steps": 5, "checkpoint.every_steps": 5}),
          workdir, progress=False)
    records = _records(workdir)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    if stream:
        # Steps 2 .. bound + 1 may start before any update: they enter the engine beside
        # step 1 (4 episodes a step, 32 decode slots).
        streamed = [r["rollout_streamed"] for r in records]
        assert streamed[:bound + 1] == [0.0] + [1.0] * bound, streamed
    else:
        assert all("rollout_streamed" not in r for r in records)
    for r in records:
        assert 0 <= r["staleness_mean"] <= r["staleness_max"] <= bound
        assert 0 < r["is_weight_mean"] and r["is_weight_max"] <= 2.0
        assert 0 <= r["is_clipped_frac"] <= 1 and r["is_masked_frac"] == 0
    assert max(r["staleness_max"] for r in records) >= 1   # it did overlap
    assert _recorded_off_policy(workdir) == ("token", 2.0)


def test_is_level_none_turns_the_correction_off(tmp_path):
    workdir = str(tmp_path / "run")
    # Step 1's update has lr 0 (warmup), so step 3 is the first to sample with older weights.
    train(_config(**{"rl.async_mode": "one_step_off", "rl.is_level": "none",
                     "training.total_steps": 3, "checkpoint.every_steps": 3}), workdir,
          progress=False)
    records = _records(workdir)
    assert [r["staleness_max"] for r in records] == [0, 1, 1]
    assert records[2]["mismatch_max_abs"] > 1e-3  # off-policy, and not corrected
    assert not any(k in r for r in records for k in IS_METRICS)
    assert _recorded_off_policy(workdir) == ("none", 0.0)


@pytest.mark.parametrize("mode", ["sync", "one_step_off"])
def test_disaggregated_placement_trains_as_colocated(tmp_path, mode):
    """2 sampler + 6 trainer devices against one mesh of all 8: the weights reach the sampler's
    devices after every update, so the episodes, losses and staleness are those of the
    colocated run; only float rounding differs (the meshes reduce in other orders)."""
    runs = {}
    for name, devices in (("colocated", 0), ("disaggregated", 2)):
        workdir = str(tmp_path / name)
        train(_config(**{"rl.async_mode": mode, "mesh.rollout_devices": devices}), workdir,
              progress=False)
        runs[name] = [comparable(r) for r in _records(workdir)]
    assert len(runs["disaggregated"]) == len(runs["colocated"]) == 4
    for colocated, disaggregated in zip(runs["colocated"], runs["disaggregated"]):
        assert colocated.keys() == disaggregated.keys()
        # The update's rows are padded to a multiple of the trainer's data shards: 8 devices
        # colocated, 6 beside the sampler's 2.
        assert colocated["update_rows"] % 8 == 0 and disaggregated["update_rows"] % 6 == 0
        for key, value in _without(colocated, ("update_rows", "update_fill")).items():
            if not isinstance(value, float):
                assert disaggregated[key] == value, key
                continue
            # A sampler left on old weights would show here as a mismatch of order 1e-3.
            tolerance = 1e-5 if key.startswith(("mismatch", "logprob_mismatch")) else 1e-4
            assert disaggregated[key] == pytest.approx(value, rel=1e-4, abs=tolerance), key
