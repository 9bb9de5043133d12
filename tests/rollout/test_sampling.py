"""Sampling: `generate`'s greedy tokens equal the full forward's, its log-probs and the engine's
values equal the model's, stops end rows, truncation and draws follow the distribution."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.rollout import SamplingParams, generate
from agentic_jax.rollout.engine import Engine, EngineConfig, Request
from agentic_jax.rollout.sampling import draw_tokens, filter_logits, sample_tokens

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8, value_head=True)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11]]


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(0))


def _greedy_reference(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(jnp.argmax(model(jnp.asarray([seq]))[0, -1])))
    return seq[len(prompt):]


@pytest.mark.slow  # the engine tests check greedy parity by default
def test_greedy_equals_full_forward_ragged(model):
    out = generate(model, PROMPTS, max_new_tokens=8, temperature=0.0)
    assert out == [_greedy_reference(model, p, 8) for p in PROMPTS]


@pytest.mark.slow  # test_logprob_consistency.py checks both by default
def test_logprobs_and_values_match_the_model(model):
    out, lps = generate(model, PROMPTS, max_new_tokens=6, temperature=1.0, seed=3,
                        return_logprobs=True)
    for p, o, lp in zip(PROMPTS, out, lps):
        full = model.forward(jnp.asarray([p + o]))
        ref = jax.nn.log_softmax(full.logits[0, len(p) - 1:-1], -1)[jnp.arange(len(o)),
                                                                     jnp.asarray(o)]
        np.testing.assert_allclose(lp, ref, atol=1e-5)
    engine = Engine(model, EngineConfig(num_slots=3, page_size=4, max_seq_len=32,
                                        sampling=SamplingParams(temperature=0.0)))
    keys = jax.random.split(jax.random.key(0), 3)
    for b, p in enumerate(PROMPTS):
        engine.submit(Request(b, tuple(p), 4, keys[b]))
    for e in engine.run():
        p = PROMPTS[e.request_id]
        full = model.forward(jnp.asarray([p + list(e.tokens)]))
        np.testing.assert_allclose(e.values, full.values[0, len(p) - 1:len(p) + 3], atol=1e-5)


def test_stop_tokens_and_budget(model):
    free = generate(model, PROMPTS, max_new_tokens=10, temperature=0.0)
    stop = free[1][3]
    out = generate(model, PROMPTS, max_new_tokens=10, temperature=0.0, stop_tokens=[stop])
    for f, o in zip(free, out):
        cut = f.index(stop) + 1 if stop in f else len(f)
        assert o == f[:cut]


def test_filter_logits_top_k_top_p():
    logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05]]))
    keep = lambda x: np.isfinite(np.asarray(x)) & (np.asarray(x) > -1e30)
    assert keep(filter_logits(logits, top_k=2, top_p=1.0)).tolist() == [[True, True, False, False]]
    assert keep(filter_logits(logits, top_k=0, top_p=0.7)).tolist() == [[True, True, False, False]]
    assert keep(filter_logits(logits, top_k=0, top_p=0.5)).tolist() == [[True, False, False, False]]
    assert keep(filter_logits(logits, top_k=0, top_p=1.0)).all()


def test_truncated_sampling_stays_in_the_nucleus():
    logits = jnp.tile(jnp.log(jnp.asarray([[0.6, 0.3, 0.07, 0.03]])), (512, 1))
    keys = jax.random.split(jax.random.key(0), 512)
    toks, lps = sample_tokens(logits, keys, temperature=1.0, top_p=0.8, use_filter=True)
    assert set(np.asarray(toks).tolist()) == {0, 1}
    # Log-probs are under the untruncated policy.
    np.testing.assert_allclose(np.asarray(lps), np.log([0.6, 0.3])[np.asarray(toks)], rtol=1e-5)
    greedy, _ = sample_tokens(logits, keys, temperature=0.0)
    assert (np.asarray(greedy) == 0).all()


def _draws(logits: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    keys = jax.random.split(jax.random.key(seed), n)
    return np.asarray(draw_tokens(jnp.tile(jnp.asarray(logits, jnp.float32), (n, 1)), keys))


def test_draws_follow_the_distribution_across_blocks():
    # 600 entries: two whole blocks of 256 and a partial one; masked entries at block edges.
    vocab, n = 600, 6000
    neg = np.finfo(np.float32).min
    heavy = [0, 255, 256, 511, 512, 598]               # first / last entries of each block
    logits = np.full(vocab, np.log(0.04 / (vocab - len(heavy) - 3)), np.float32)
    logits[heavy] = np.log(0.16)
    logits[[5, 300, 599]] = neg
    toks = _draws(logits, n)
    counts = np.bincount(toks, minlength=vocab)
    assert counts[[5, 300, 599]].sum() == 0
    expected = 0.16 * n                                 # 960, sd ~28
    assert np.all(np.abs(counts[heavy] - expected) < 6 * np.sqrt(expected)), counts[heavy]
    light = np.delete(np.arange(vocab), heavy + [5, 300, 599])
    assert abs(counts[light].sum() - 0.04 * n) < 6 * np.sqrt(0.04 * n)
    # Random logits: chi-square over 40 contiguous bins against softmax.
    logits = np.random.default_rng(1).normal(size=vocab).astype(np.float32) * 2
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    toks = _draws(logits, n, seed=1)
    observed = np.bincount(toks // 15, minlength=40)
    expected = np.add.reduceat(probs, np.arange(0, vocab, 15)) * n
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 80, chi2                              # 39 dof: p < 1e-4 beyond 80


def test_a_draw_never_returns_a_zero_probability_entry():
    neg = np.finfo(np.float32).min
    for only in (0, 255, 256, 511, 599):                # one allowed entry anywhere
        logits = np.full(600, neg, np.float32)
        logits[only] = 0.0
        assert set(_draws(logits, 64).tolist()) == {only}
    # A near-certain entry before a tail of masked ones: rounding may not reach past it.
    logits = np.full(600, neg, np.float32)
    logits[:300] = -40.0
    logits[299] = 0.0
    toks = _draws(logits, 4096)
    assert toks.max() <= 299 and np.mean(toks == 299) > 0.99


def test_bad_arguments(model):
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="empty"):
        generate(model, [[1], []], max_new_tokens=4)


def test_per_row_greedy_rows_take_the_argmax_under_jit():
    """A traced per-row temperature: rows at 0 take the argmax (computed only when some row
    is greedy), the others sample; with no greedy row the sampled tokens are unchanged."""
    logits = jax.random.normal(jax.random.key(3), (4, 300)) * 3
    keys = jax.random.split(jax.random.key(4), 4)
    draw = jax.jit(lambda t: sample_tokens(logits, keys, temperature=t)[0])
    mixed = draw(jnp.asarray([0.0, 1.0, 0.0, 1.0]))
    sampled = draw(jnp.ones(4))
    argmax = jnp.argmax(logits, axis=-1)
    assert mixed[0] == argmax[0] and mixed[2] == argmax[2]
    assert mixed[1] == sampled[1] and mixed[3] == sampled[3]
    assert not jnp.array_equal(sampled, argmax)
