"""A warm start stopped part way resumes from its own checkpoint (``WORKDIR/warmstart``) to
exactly the uninterrupted result, skips training when its checkpoint is the last step's, and
refuses a checkpoint of another recipe."""

import dataclasses
import json
import os
import types

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_jax.config import ConfigError, read_config
from agentic_jax.training import warmstart
from agentic_jax.training.builders import build_run
from configs.math_ppo import get_config


class Stop(Exception):
    pass


def _leaves(params):
    return {k: np.asarray(v) for k, v in nnx.to_flat_state(params)}


@pytest.fixture(scope="module")
def smoke_run():
    cfg = read_config(get_config("smoke"))
    cfg = dataclasses.replace(cfg, warmstart=dataclasses.replace(
        cfg.warmstart, steps=5, checkpoint_every=2))
    run, state = build_run(cfg)
    yield run, state
    run.policy.close()


def _train(run, state, directory, **kwargs):
    copy = jax.tree.map(lambda x: x.copy(), state.params)  # the step donates its input
    return warmstart.warm_start(run, copy, progress=False, directory=str(directory), **kwargs)


def _no_sandbox(sandbox, codes):
    raise AssertionError(f"the sandbox ran {len(codes)} programs again")


@pytest.fixture(scope="module")
def whole(smoke_run, tmp_path_factory):
    """An uninterrupted warm start: its directory, parameters and metrics."""
    run, state = smoke_run
    directory = tmp_path_factory.mktemp("whole")
    params, info = _train(run, state, directory)
    return directory, _leaves(params), info


def test_a_stopped_warm_start_resumes_to_the_uninterrupted_result(smoke_run, whole, tmp_path,
                                                                  monkeypatch):
    run, state = smoke_run
    directory, expected, whole_info = whole
    assert sorted(p.name for p in directory.iterdir() if p.name.isdigit()) == ["5"]

    steps = []

    def stop_at_3(step, params, info):
        steps.append(step)
        if step == 3:  # after step 3's update, before its (absent) save: step 2's is newest
            raise Stop

    with pytest.raises(Stop):
        _train(run, state, tmp_path / "cut", on_step=stop_at_3)
    assert steps == [1, 2, 3]
    # The reference programs' outputs are kept: the resumed warm start builds its examples
    # from them, without the sandbox (whose runs could end otherwise on a loaded machine).
    kept = json.loads((tmp_path / "cut" / warmstart.PROGRAMS_FILE).read_text())
    assert kept and all(isinstance(v, str) for v in kept.values())
    monkeypatch.setattr(warmstart, "run_everywhere", _no_sandbox)
    steps.clear()
    resumed, info = _train(run, state, tmp_path / "cut", on_step=lambda s, p, i: steps.append(s))
    assert steps == [3, 4, 5]  # from step 2's checkpoint, the same batches as before
    got = _leaves(resumed)
    assert expected.keys() == got.keys()
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=str(key))
    for key in ("warmstart/loss", "warmstart/first_loss", "warmstart/examples"):
        assert info[key] == whole_info[key], key
    assert info["warmstart/time_s"] > 0

    # A finished warm start's checkpoint is its result: nothing trains again.
    steps.clear()
    again, again_info = _train(run, state, tmp_path / "cut",
                               on_step=lambda s, p, i: steps.append(s))
    assert steps == []
    for key, value in _leaves(again).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=str(key))
    assert again_info["warmstart/loss"] == whole_info["warmstart/loss"]


def test_a_checkpoint_of_another_recipe_is_refused(smoke_run, whole):
    run, state = smoke_run
    w = run.cfg.warmstart
    other = types.SimpleNamespace(
        cfg=dataclasses.replace(run.cfg, warmstart=dataclasses.replace(w, lr=w.lr / 2)),
        **{k: getattr(run, k) for k in ("policy", "row_multiple", "batch_sharding")})
    with pytest.raises(ConfigError, match="another recipe"):
        _train(other, state, whole[0])


def test_checkpoint_every_is_checked():
    config = get_config("smoke")
    config.warmstart.checkpoint_every = -1
    with pytest.raises(Exception, match="checkpoint_every"):
        read_config(config)


@pytest.mark.slow  # tests/train/test_train_run.py checks --checkpoints on the default suite
def test_evaluate_reads_the_warm_start_result_after_rl_replaced_step_0(tmp_path):
    """``evaluate --checkpoints=WORKDIR/warmstart`` scores the warm start's result exactly as the
    run's own start did, after RL's checkpoints (keep=1) have removed step 0."""
    from agentic_jax.evaluate import evaluate_checkpoint
    from tests.train.train_testing import tiny_config, train

    workdir = str(tmp_path / "run")
    config = tiny_config(**{"warmstart.enabled": True, "warmstart.steps": 3,
                            "warmstart.checkpoint_every": 2, "training.total_steps": 2,
                            "checkpoint.every_steps": 1, "checkpoint.keep": 1})
    summary = train(config, workdir, progress=False)
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2"]
    results = evaluate_checkpoint(None, workdir, checkpoints=os.path.join(workdir, "warmstart"),
                                  modes=["tools"])
    assert results["step"] == 3  # the warm start's last step
    assert results["tools"] == summary["initial"]["tools"]
    assert os.path.exists(os.path.join(workdir, "eval_test_warmstart.json"))
    assert not os.path.exists(os.path.join(workdir, "eval_test.json"))


def test_program_outputs_are_kept_and_a_damaged_record_runs_them_again(tmp_path):
    saver = warmstart._Saver(str(tmp_path), every=1, digest="d")
    ran = []

    def run_code(codes):
        ran.append(list(codes))
        return [None if "bad" in c else f"out of {c}" for c in codes]

    run = saver.remembered(run_code)
    assert run(["a", "bad", "a"]) == ["out of a", None, "out of a"]
    assert ran == [["a", "bad"]]
    assert run(["bad", "b", "a"]) == [None, "out of b", "out of a"]  # only b is new
    assert ran[-1] == ["b"]
    ran.clear()
    assert run(["a", "b"]) == ["out of a", "out of b"] and ran == []
    (tmp_path / warmstart.PROGRAMS_FILE).write_text("{not json")
    assert run(["a"]) == ["out of a"] and ran == [["a"]]
    saver.close()
