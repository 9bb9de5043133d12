"""The compiled train step on the real policy model: sharding and micro-batch invariance,
skip-on-NaN, log-prob alignment, masking, and that it actually improves the policy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.parallel import make_mesh
from agentic_jax.rl import (
    LossConfig,
    compute_logprobs,
    init_opt_state,
    make_optimizer,
    make_train_step,
    train_shardings,
)

VOCAB, B, T = 64, 8, 16
LR = 3e-3
LOSS = LossConfig(entropy_coef=0.01, kl_coef=0.05, value_clip=0.2, dual_clip=3.0)


@pytest.fixture(scope="module")
def setup():
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=1, value_head=True)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    host_state = jax.tree.map(np.asarray, state)
    optimizer = make_optimizer(LR, warmup_steps=0, total_steps=100, weight_decay=0.01)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (B, T)).astype(np.int32)
    mask = np.zeros((B, T), np.float32)
    mask[:, 4:14] = 1.0
    mask[:, 7:9] = 0.0  # a tool-output span inside the response
    mask[3, 10:] = 0.0
    logprobs, values, _ = compute_logprobs(graphdef, state, jnp.asarray(tokens))
    batch = {
        "tokens": tokens,
        "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
        "loss_mask": mask,
        "old_logprobs": np.asarray(logprobs)
        + rng.normal(scale=0.2, size=(B, T)).astype(np.float32),
        "sampler_logprobs": np.asarray(logprobs),
        "ref_logprobs": np.asarray(logprobs)
        + rng.normal(scale=0.1, size=(B, T)).astype(np.float32),
        "advantages": rng.normal(size=(B, T)).astype(np.float32),
        "returns": rng.normal(size=(B, T)).astype(np.float32),
        "old_values": np.asarray(values),
    }
    single = make_train_step(graphdef, optimizer, LOSS)
    return {
        "graphdef": graphdef,
        "state": host_state,
        "optimizer": optimizer,
        "batch": batch,
        "single": single,
    }


def _fresh(setup):
    state = jax.tree.map(jnp.asarray, setup["state"])
    return state, init_opt_state(setup["optimizer"], state)


def _run(step, state, opt_state, batch, n=2):
    metrics = []
    for _ in range(n):
        state, opt_state, m = step(state, opt_state, batch)
        metrics.append({k: float(v) for k, v in m.items()})
    return state, opt_state, metrics


def test_compute_logprobs_alignment(setup):
    model = nnx.merge(setup["graphdef"], jax.tree.map(jnp.asarray, setup["state"]))
    tokens = jnp.asarray(setup["batch"]["tokens"])
    logprobs, values, entropy = compute_logprobs(setup["graphdef"], nnx.state(model), tokens)
    out = model.forward(tokens)
    logp = jax.nn.log_softmax(out.logits, axis=-1)
    expected = jnp.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    np.testing.assert_allclose(logprobs[:, 1:], expected, atol=1e-5)
    np.testing.assert_allclose(values[:, 1:], out.values[:, :-1], atol=1e-6)
    np.testing.assert_allclose(entropy[:, 1:], -(jnp.exp(logp) * logp).sum(-1)[:, :-1], atol=1e-4)
    assert np.all(np.asarray(logprobs[:, 0]) == 0)
    chunked = compute_logprobs(setup["graphdef"], nnx.state(model), tokens, micro_batches=2)
    for x, y in zip(chunked, (logprobs, values, entropy)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_metrics_of_the_first_step(setup):
    state, opt_state = _fresh(setup)
    batch = dict(setup["batch"], old_logprobs=setup["batch"]["sampler_logprobs"])
    _, _, (m,) = _run(setup["single"], state, opt_state, batch, n=1)
    mask = batch["loss_mask"]
    assert m["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert m["clip_frac"] == 0.0 and m["skipped"] == 0.0
    assert m["logprob_mismatch"] == pytest.approx(0.0, abs=1e-6)
    assert m["policy_loss"] == pytest.approx(
        -(batch["advantages"] * mask).sum() / mask.sum(), rel=1e-5
    )
    assert m["tokens"] == mask.sum() and m["lr"] == pytest.approx(LR)
    assert m["kl_ref"] > 0 and m["grad_norm"] > 0 and m["entropy"] > 3.0
    assert {"value_loss", "explained_variance"} <= m.keys()


def test_micro_batches_and_mesh_match_single_device(setup):
    single = _run(setup["single"], *_fresh(setup), setup["batch"])
    micro_step = make_train_step(setup["graphdef"], setup["optimizer"], LOSS, micro_batches=2)
    micro = _run(micro_step, *_fresh(setup), setup["batch"])

    mesh = make_mesh(2, 2, 2)
    state, _ = _fresh(setup)
    shardings = train_shardings(state, setup["optimizer"], mesh)
    state = jax.device_put(state, shardings.state)
    opt_state = jax.jit(
        lambda s: init_opt_state(setup["optimizer"], s), out_shardings=shardings.opt_state
    )(state)
    mesh_step = make_train_step(
        setup["graphdef"], setup["optimizer"], LOSS, mesh=mesh, micro_batches=2, shardings=shardings
    )
    sharded = _run(mesh_step, state, opt_state, jax.device_put(setup["batch"], shardings.batch))

    initial = jax.tree.leaves(jax.tree.map(jnp.asarray, setup["state"]))
    assert any(not np.allclose(x, y) for x, y in zip(jax.tree.leaves(single[0]), initial))
    for other in (micro, sharded):
        for ma, mb in zip(single[2], other[2]):
            assert ma.keys() == mb.keys()
            for k in ma:
                assert mb[k] == pytest.approx(ma[k], rel=1e-4, abs=1e-5), k
        for x, y in zip(jax.tree.leaves(single[0]), jax.tree.leaves(other[0])):
            np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=5e-5)
    for leaf, want in zip(jax.tree.leaves(sharded[0]), jax.tree.leaves(shardings.state)):
        assert leaf.sharding.is_equivalent_to(want, leaf.ndim)


def test_non_finite_batch_is_skipped(setup):
    state, opt_state = _fresh(setup)
    before = jax.tree.map(np.asarray, (state, opt_state))
    advantages = setup["batch"]["advantages"].copy()
    advantages[2, 5] = np.nan  # on a model token
    bad = dict(setup["batch"], advantages=advantages)
    state, opt_state, (m,) = _run(setup["single"], state, opt_state, bad, n=1)
    assert m["skipped"] == 1.0 and not np.isfinite(m["loss"])
    for x, y in zip(jax.tree.leaves(before), jax.tree.leaves((state, opt_state))):
        np.testing.assert_array_equal(x, np.asarray(y))
    _, _, (m,) = _run(setup["single"], state, opt_state, setup["batch"], n=1)
    assert m["skipped"] == 0.0 and np.isfinite(m["loss"])


def test_tool_and_padding_tokens_do_not_affect_the_update(setup):
    batch = setup["batch"]
    off = batch["loss_mask"] == 0
    noisy = dict(batch)
    for key in ("advantages", "returns", "old_logprobs", "ref_logprobs", "old_values"):
        noisy[key] = np.where(off, 1e4, batch[key]).astype(np.float32)
    clean_state, _, clean_m = _run(setup["single"], *_fresh(setup), batch, n=1)
    noisy_state, _, noisy_m = _run(setup["single"], *_fresh(setup), noisy, n=1)
    assert clean_m == noisy_m
    for x, y in zip(jax.tree.leaves(clean_state), jax.tree.leaves(noisy_state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_updates_raise_logprobs_of_advantaged_tokens(setup):
    batch = setup["batch"]
    sign = np.where(np.arange(T) % 2 == 0, 1.0, -1.0).astype(np.float32)[None].repeat(B, 0)
    batch = dict(
        batch,
        advantages=sign * batch["loss_mask"],
        old_logprobs=batch["sampler_logprobs"],
        ref_logprobs=batch["sampler_logprobs"],
    )
    state, opt_state = _fresh(setup)
    state, _, _ = _run(setup["single"], state, opt_state, batch, n=4)
    new_logprobs, _, _ = compute_logprobs(setup["graphdef"], state, jnp.asarray(batch["tokens"]))
    delta = (np.asarray(new_logprobs) - batch["sampler_logprobs"]) * batch["loss_mask"]
    assert (delta * (sign > 0)).sum() > 0 > (delta * (sign < 0)).sum()


def test_bad_arguments(setup):
    with pytest.raises(ValueError, match="shardings"):
        make_train_step(setup["graphdef"], setup["optimizer"], LOSS, mesh=make_mesh(2, 2, 2))
    with pytest.raises(ValueError, match="micro_batches"):
        make_train_step(setup["graphdef"], setup["optimizer"], LOSS, micro_batches=0)
    state, opt_state = _fresh(setup)
    with pytest.raises(ValueError, match="unknown fields"):
        setup["single"](state, opt_state, dict(setup["batch"], reward=np.zeros(B)))
    odd = make_train_step(setup["graphdef"], setup["optimizer"], LOSS, micro_batches=3)
    with pytest.raises(ValueError, match="divisible"):
        odd(state, opt_state, setup["batch"])


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_master_weights(setup):
    cfg = get_preset(
        "tiny-0.2m",
        vocab_size=VOCAB,
        num_layers=1,
        value_head=True,
        dtype="bfloat16",
        param_dtype="float32",
    )
    graphdef = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))[0]
    f32 = _run(setup["single"], *_fresh(setup), setup["batch"], n=1)
    bf16_step = make_train_step(graphdef, setup["optimizer"], LOSS, compute_dtype="bfloat16")
    bf16 = _run(bf16_step, *_fresh(setup), setup["batch"], n=1)
    assert bf16[2][0]["loss"] == pytest.approx(f32[2][0]["loss"], rel=3e-2, abs=3e-2)
    assert bf16[2][0]["loss"] != f32[2][0]["loss"]
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(bf16[0]))
    for x, y in zip(jax.tree.leaves(bf16[0]), jax.tree.leaves(f32[0])):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=2 * LR)


def test_offloaded_optimizer_state_lives_on_the_host_and_updates_the_same(setup):
    single = _run(setup["single"], *_fresh(setup), setup["batch"])
    mesh = make_mesh(1, 4, 1, devices=jax.devices()[:4])
    state, _ = _fresh(setup)
    shardings = train_shardings(state, setup["optimizer"], mesh, offload_opt_state=True)
    state = jax.device_put(state, shardings.state)
    opt_state = jax.jit(
        lambda s: init_opt_state(setup["optimizer"], s), out_shardings=shardings.opt_state
    )(state)
    step = make_train_step(setup["graphdef"], setup["optimizer"], LOSS, mesh=mesh,
                           shardings=shardings)
    state, opt_state, metrics = _run(step, state, opt_state,
                                     jax.device_put(setup["batch"], shardings.batch))
    kinds = {leaf.sharding.memory_kind for leaf in jax.tree.leaves(opt_state)}
    assert kinds == {"pinned_host"}
    assert {leaf.sharding.memory_kind for leaf in jax.tree.leaves(state)} == {"device"}
    for ma, mb in zip(single[2], metrics):
        for k in ma:
            assert mb[k] == pytest.approx(ma[k], rel=1e-4, abs=1e-5), k
    for x, y in zip(jax.tree.leaves(single[0]), jax.tree.leaves(state)):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=5e-5)
