"""Saved warm starts: a run whose warm-start recipe has a saved result loads exactly that result,
any other recipe trains, and the package's saved results are those of the default recipe."""

import dataclasses
import json
import types

import jax
import numpy as np
import pytest
from flax import nnx

from agentic_jax.config import read_config
from agentic_jax.training import warmstart, warmstart_results
from agentic_jax.training.builders import build_run
from configs.math_ppo import get_config


def _copy(params):
    """A copy to train from: the train step donates (deletes) the parameters it is given."""
    return jax.tree.map(lambda x: x.copy(), params)


def _leaves(params):
    return {k: np.asarray(v) for k, v in nnx.to_flat_state(params)}


@pytest.fixture(scope="module")
def default_run():
    """The default command's run (seed 0), as built in these tests' 8 simulated devices."""
    run, state = build_run(read_config(get_config()))
    yield run, state
    run.policy.close()


def _with(run, *, cfg=None, policy=None):
    """``run`` seen with another config or policy (what `recipe` and `warm_start` read)."""
    return types.SimpleNamespace(cfg=cfg or run.cfg, policy=policy or run.policy,
                                 row_multiple=run.row_multiple, shardings=run.shardings)


def test_recipe_follows_what_the_warm_start_depends_on(default_run):
    run, _ = default_run
    # A 4-step warm start draws 64 problems: a quick digest.
    cfg = dataclasses.replace(run.cfg, warmstart=dataclasses.replace(run.cfg.warmstart, steps=4))
    run = _with(run, cfg=cfg)
    base = warmstart.recipe(run)
    assert warmstart.recipe(run) == base  # deterministic
    rl_only = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, lr=1.0))
    assert warmstart.recipe(_with(run, cfg=rl_only)) == base
    for changed in (
        dataclasses.replace(cfg, warmstart=dataclasses.replace(cfg.warmstart, lr=1.0)),
        dataclasses.replace(cfg, warmstart=dataclasses.replace(cfg.warmstart, steps=5)),
        dataclasses.replace(cfg, seed=cfg.seed + 1),
        dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, max_length=95)),
    ):
        assert warmstart.recipe(_with(run, cfg=changed)) != base
    # Another prompt text (a template, a tokenizer) changes the examples' digest.
    reworded = types.SimpleNamespace(
        **{k: getattr(run.policy, k) for k in ("problems", "tokenizer", "mesh", "model_cfg")},
        make_prompt=lambda problem: run.policy.make_prompt(problem) + [1])
    assert (warmstart.recipe(_with(run, policy=reworded))["examples"] != base["examples"])


def test_saved_result_is_found_by_its_recipe_and_loads_bit_for_bit(default_run, tmp_path,
                                                                   monkeypatch):
    run, state = default_run
    # Any parameters stand for a trained result (other than the model's own initialisation).
    trained = jax.tree.map(lambda x: x + 0.5, state.params)
    metrics = {"warmstart/loss": 0.25, "warmstart/examples": 64.0,
               "warmstart/tool_fraction": 0.3, "warmstart/time_s": 12.5}
    wanted = warmstart.recipe(run)
    root = tmp_path / "shipped"
    warmstart_results.save_result(root / "a", trained, wanted, metrics, made_by="test")
    assert warmstart_results.find_shipped(wanted, root) == root / "a"
    assert warmstart_results.find_shipped({**wanted, "lr": 1.0}, root) is None
    assert warmstart_results.find_shipped(wanted, tmp_path / "missing") is None
    loaded = warmstart_results.load_result(root / "a", state.params, run.shardings.state)
    expected, got = _leaves(trained), _leaves(loaded)
    assert expected.keys() == got.keys()
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=str(key))
    # A run with warmstart.shipped loads it instead of training; its metrics say so.
    monkeypatch.setattr(warmstart_results, "SHIPPED_DIR", root)
    shipped_run = _with(run, cfg=dataclasses.replace(
        run.cfg, warmstart=dataclasses.replace(run.cfg.warmstart, shipped=True)))
    params, info = warmstart.warm_start(shipped_run, _copy(state.params), progress=False)
    for key, value in _leaves(params).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=str(key))
    assert info["warmstart/shipped"] == 1.0
    assert info["warmstart/loss"] == 0.25 and info["warmstart/trained_s"] == 12.5
    # Without warmstart.shipped (or with no result of its recipe) the run trains: it goes on
    # to build its examples, stopped here.
    class Trains(Exception):
        pass

    def stop(*args, **kwargs):
        raise Trains

    monkeypatch.setattr(warmstart, "build_examples", stop)
    unshipped = _with(run, cfg=dataclasses.replace(
        run.cfg, warmstart=dataclasses.replace(run.cfg.warmstart, shipped=False)))
    with pytest.raises(Trains):
        warmstart.warm_start(unshipped, state.params, progress=False)
    with pytest.raises(Trains):  # a watched warm start trains, saved result or not
        warmstart.warm_start(shipped_run, state.params, progress=False,
                             on_step=lambda *args: None)
    monkeypatch.setattr(warmstart_results, "SHIPPED_DIR", tmp_path / "empty")
    with pytest.raises(Trains):
        warmstart.warm_start(shipped_run, state.params, progress=False)


def test_on_step_sees_every_step_and_its_parameters():
    cfg = read_config(get_config("smoke"))
    cfg = dataclasses.replace(cfg, warmstart=dataclasses.replace(cfg.warmstart, steps=3))
    run, state = build_run(cfg)
    seen = []

    def on_step(step, params, info):
        copies = {k: np.array(v, copy=True) for k, v in _leaves(params).items()}
        seen.append((step, info["tokens"], info["examples"],
                     float(info["metrics"]["policy_loss"]), copies))

    try:
        params, result = warmstart.warm_start(run, _copy(state.params), progress=False,
                                              on_step=on_step)
    finally:
        run.policy.close()
    assert [s[0] for s in seen] == [1, 2, 3]
    assert 0 < seen[0][1] < seen[1][1] < seen[2][1]  # padded tokens so far
    assert seen[0][2] == result["warmstart/examples"]
    assert np.isfinite([s[3] for s in seen]).all()
    first, last = seen[0][4], _leaves(params)
    assert any(not np.array_equal(first[k], last[k]) for k in first)  # parameters of that step
    for key, value in seen[-1][4].items():
        np.testing.assert_array_equal(value, last[key], err_msg=str(key))


def test_a_result_that_does_not_fit_the_model_is_refused(default_run, tmp_path):
    run, state = default_run
    wanted = warmstart.recipe(run)
    flat = dict(nnx.to_flat_state(state.params))
    path = next(iter(flat))
    # One tensor with another shape: named in the error.
    bad = jax.tree.map(lambda x: x, state.params)
    pure = nnx.to_pure_dict(bad)
    node = pure
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = np.zeros((3,), np.float32)
    nnx.replace_by_pure_dict(bad, pure)
    warmstart_results.save_result(tmp_path / "shape", bad, wanted, {}, made_by="test")
    with pytest.raises(ValueError, match="/".join(map(str, path))):
        warmstart_results.load_result(tmp_path / "shape", state.params, run.shardings.state)
    # A damaged record is one clear error, not a crash in the middle of a run.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / warmstart_results.INFO_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="not a readable warm-start record"):
        warmstart_results.find_shipped(wanted, tmp_path)


def _check_shipped(run, state, seed):
    wanted = warmstart.recipe(run)
    found = warmstart_results.SHIPPED_DIR / f"seed{seed}"
    stored = warmstart_results.read_info(found)["recipe"]
    # These tests see 8 simulated devices; the default command sees this machine's one CPU.
    assert stored.pop("devices") == {"platform": "cpu", "count": 1, "processes": 1,
                                     "mesh": {"data": 1, "fsdp": 1, "tensor": 1}}
    wanted.pop("devices")
    assert stored == wanted, json.dumps(
        {k: (stored.get(k), wanted.get(k)) for k in stored.keys() | wanted.keys()
         if stored.get(k) != wanted.get(k)})
    loaded = warmstart_results.load_result(found, state.params, run.shardings.state)
    assert _leaves(loaded).keys() == _leaves(state.params).keys()


def test_the_package_holds_the_default_recipe(default_run):
    """The saved result is what the default command's warm start trains: a change to the
    default recipe (config, problems, texts, tokenizer) must come with new results
    (python tools/build_warmstart.py, see its docstring)."""
    _check_shipped(*default_run, seed=0)


@pytest.mark.slow
def test_the_package_holds_the_default_recipe_for_seed_1():
    config = get_config()
    config.seed = 1
    run, state = build_run(read_config(config))
    try:
        _check_shipped(run, state, seed=1)
    finally:
        run.policy.close()
