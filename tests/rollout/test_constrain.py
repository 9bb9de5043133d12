"""Constrained code decoding: the grammar accepts the policy's kind of snippets and never
forbids the closing fence after a complete statement; blocks decoded under the mask (grammar
walks and a tiny model biased to write broken blocks) all parse; unmasked sampling is
bitwise what it was."""

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("llguidance")

from agentic_jax.data import generate_curriculum  # noqa: E402
from agentic_jax.data.tokenizer import builtin_tokenizer  # noqa: E402
from agentic_jax.models import ModelConfig, Transformer  # noqa: E402
from agentic_jax.rollout.constrain import bitmask_words, code_constraint  # noqa: E402
from agentic_jax.rollout.engine import Engine, EngineConfig, Request  # noqa: E402
from agentic_jax.rollout.sampling import sample_tokens, unpack_bitmask  # noqa: E402
from agentic_jax.rollout.tool_text import find_closed_code  # noqa: E402

SNIPPETS = [
    "from sympy import *\nx = symbols('x')\nprint(solve(Eq(2*x - 27, -21), x)[0])",
    "import math\nprint(math.gcd(12, 18))",
    "total = 0\nfor i in range(1, 11):\n    if i % 2 == 0:\n        total += i\nprint(total)",
    "def f(n, k=2):\n    return n ** k  # square\n\nprint(f(3), f(2, k=3))",
    "a, b = 3, 4\nwhile a < 10:\n    a = a + b\nelse:\n    print(a)",
    "try:\n    print(1 / 0)\nexcept ZeroDivisionError as e:\n    print('div', e)",
    "xs = [i * i for i in range(5) if i != 2]\nd = {k: v for k, v in zip('ab', xs)}\n"
    "print(sorted(d.items()), xs[1:3], 1 if xs else 0, *xs, sep=', ')",
    "s = \"\"\"multi\nline\"\"\"\nprint(s.upper(), r'\\d+', b'\\x00', 1_000, 0x1f, 2.5e-3, 3j)",
    "class A:\n    def __init__(self, v):\n        self.v = v\n\nprint(A(2).v is not None)",
]


@pytest.fixture(scope="module")
def tok():
    return builtin_tokenizer()


@pytest.fixture(scope="module")
def constraint(tok):
    return code_constraint(tok, len(tok))


def _allowed(matcher, words):
    row = np.zeros(words, np.int32)
    matcher.fill(row)
    return np.unpackbits(row.view(np.uint8), bitorder="little").astype(bool)


def _open(constraint, tok, text="Let me compute.\n```python\n"):
    turn = tok.encode(text, add_special_tokens=False)
    kept, matcher = constraint.start(turn)
    assert kept == len(turn)
    return matcher


def test_grammar_accepts_snippets_and_the_fence_after_each_statement(tok, constraint):
    fence = tok.convert_tokens_to_ids("```")
    sizes = {"arithmetic": 3, "algebra": 3, "calculus": 3, "proof": 3}
    curriculum = [p.solution_code for p in generate_curriculum(seed=0, sizes=sizes)]
    for code in SNIPPETS + curriculum:
        ast.parse(code)
        matcher = _open(constraint, tok)
        ids = tok.encode(code + "\n", add_special_tokens=False)
        for t in ids:
            assert _allowed(matcher, constraint.words)[t], (code, tok.decode([t]))
            matcher.advance(t)
        assert not matcher.failed
        assert _allowed(matcher, constraint.words)[fence], code


def test_fence_is_refused_inside_an_unfinished_statement(tok, constraint):
    fence = tok.convert_tokens_to_ids("```")
    for partial in ("print(1", "x = ", "for i in range(3):", "s = 'ab", "if x:\n    y = 1 +"):
        matcher = _open(constraint, tok)
        for t in tok.encode(partial, add_special_tokens=False):
            matcher.advance(t)
        assert not matcher.failed
        assert not _allowed(matcher, constraint.words)[fence], partial


def test_no_constraint_before_an_opening_fence(tok, constraint):
    assert constraint.start(tok.encode("Let me think.\n```output\n1", add_special_tokens=False)) \
        is None


def test_random_walks_under_the_mask_always_parse(tok, constraint):
    """Tokens drawn uniformly from the mask (a stand-in for any policy) until the fence."""
    rng = np.random.default_rng(0)
    fence = tok.convert_tokens_to_ids("```")
    prefix = tok.encode("Compute.\n```python\n", add_special_tokens=False)
    finished = 0
    for _ in range(80):
        matcher, out = _open(constraint, tok, "Compute.\n```python\n"), []
        for step in range(150):
            allowed = np.nonzero(_allowed(matcher, constraint.words)[:len(tok)])[0]
            assert len(allowed) > 0
            t = fence if allowed.tolist().count(fence) and step > 40 else int(rng.choice(allowed))
            matcher.advance(t)
            out.append(t)
            found = find_closed_code(tok.decode(prefix + out))
            if found is not None:
                ast.parse(found[0])
                finished += 1
                break
        assert not matcher.failed
    assert finished >= 20


def test_sample_step_mask():
    """All bits set: bitwise the unmasked sample; one bit: that token, the policy's log-prob."""
    logits = jax.random.normal(jax.random.key(0), (4, 70)) * 3
    keys = jax.random.split(jax.random.key(1), 4)
    ones = jnp.full((4, bitmask_words(70)), -1, jnp.int32)
    only = np.zeros((4, bitmask_words(70)), np.int32)
    only[:, 1] = 1 << 5                                 # token 37 only
    for t, p, f in ((0.7, 0.9, True), (0.0, 1.0, False)):
        free = sample_tokens(logits, keys, temperature=t, top_p=p, use_filter=f)
        masked = sample_tokens(logits, keys, temperature=t, top_p=p, use_filter=f, allowed=ones)
        np.testing.assert_array_equal(free[0], masked[0])
        np.testing.assert_array_equal(free[1], masked[1])
        tokens, logprobs = sample_tokens(logits, keys, temperature=t, top_p=p, use_filter=f,
                                         allowed=jnp.asarray(only))
        np.testing.assert_array_equal(tokens, [37] * 4)
        np.testing.assert_allclose(logprobs, jax.nn.log_softmax(logits)[:, 37], rtol=1e-6)


def _model(tok, seed):
    cfg = ModelConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)
    return Transformer(cfg, rngs=nnx.Rngs(seed))


def _biased_model(tok):
    """A random model pushed to open code blocks, write newlines and close blocks often, so
    that unmasked it writes many short blocks of random tokens (most do not parse)."""
    model = _model(tok, 0)
    opener, fence = tok.convert_tokens_to_ids(["```python", "```"])
    newline = tok.encode("\n", add_special_tokens=False)[0]
    embed = np.array(model.embed[...])
    embed[:, 0] = 20.0                      # a constant direction in every hidden state
    head = np.array(model.lm_head[...])
    head[0, :] = 0.0
    head[0, [opener, fence, newline]] = [0.9, 0.9, 1.2]
    model.embed[...], model.lm_head[...] = embed, head
    return model


def _blocks(model, tok, constraint, n=8):
    engine = Engine(model, EngineConfig(num_slots=8, page_size=16, max_seq_len=128,
                                        decode_steps=8))
    prompt = tuple(tok.encode("Compute 2 + 3.\n", add_special_tokens=False))
    fence = tok.convert_tokens_to_ids("```")

    def pause(turn):
        closed = find_closed_code(tok.decode(list(turn), skip_special_tokens=True))
        return None if closed is None else len(turn)

    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(1), n)))
    for i in range(n):
        engine.submit(Request(i, prompt, 110, keys[i], stop_tokens=(tok.eos_token_id,),
                              pause=pause, pause_tokens=(fence,), constraint=constraint))
    events = {e.request_id: e for e in engine.run()}
    return [find_closed_code(tok.decode(events[i].tokens, skip_special_tokens=True))
            for i in range(n)], events


@pytest.mark.slow  # 25 s on 2 cores: engine compilations for the masked and unmasked steps
def test_biased_model_blocks_parse_only_under_the_mask(tok, constraint):
    model = _biased_model(tok)
    free, _ = _blocks(model, tok, None)
    masked, _ = _blocks(model, tok, constraint)

    def parses(found):
        try:
            ast.parse(found[0])
            return True
        except SyntaxError:
            return False

    free_closed = [f for f in free if f is not None]
    masked_closed = [f for f in masked if f is not None]
    assert sum(not parses(f) for f in free_closed) >= len(free_closed) // 2
    assert len(masked_closed) >= 4 and all(parses(f) for f in masked_closed)


@pytest.mark.slow  # an engine compilation; the unmasked path is also checked by test_engine
def test_rows_that_open_no_block_sample_as_without_a_constraint(tok, constraint):
    plain = _model(tok, 1)
    _, free = _blocks(plain, tok, None)
    started = constraint.stats.blocks
    _, masked = _blocks(plain, tok, constraint)
    assert constraint.stats.blocks == started       # no row of this model opened a block
    for i, event in free.items():
        assert masked[i].tokens == event.tokens
        np.testing.assert_array_equal(masked[i].logprobs, event.logprobs)


def test_unpack_bitmask_reads_llguidance_bit_order():
    words = np.random.default_rng(4).integers(-2**31, 2**31, (3, 3), dtype=np.int64)
    words = words.astype(np.int32)
    expected = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little").astype(bool)
    np.testing.assert_array_equal(unpack_bitmask(jnp.asarray(words), 70), expected[:, :70])
    assert unpack_bitmask(jnp.asarray(words), 100).shape == (3, 100)
    assert not np.asarray(unpack_bitmask(jnp.asarray(words), 100))[:, 96:].any()


@pytest.mark.slow  # an engine compilation and sandbox runs
def test_tool_loop_runs_only_parsing_blocks_under_the_mask(tok):
    from agentic_jax.rollout import (
        AgentConfig, AgentLoop, RowSpec, SamplingParams, ToolController, build_service)
    from agentic_jax.sandbox import Sandbox, SandboxConfig

    model = _biased_model(tok)
    prompt = tok.encode("Compute 2 + 3.\n", add_special_tokens=False)
    errors = {}
    with Sandbox(SandboxConfig(timeout_ms=3000, num_workers=2)) as sandbox:
        for constrain in (False, True):
            engine = Engine(model, EngineConfig(num_slots=8, page_size=16, max_seq_len=128))
            cfg = AgentConfig(max_length=128, sampling=SamplingParams(1.0),
                              constrain_code=constrain)
            loop = AgentLoop(build_service(engine, tok, cfg, sandbox=sandbox),
                             ToolController(max_tool_calls=2, timeout_ms=3000, mode="fixed"),
                             cfg, sandbox)
            episodes = loop.run([RowSpec(prompt)] * 8, jax.random.key(2)).episodes
            errors[constrain] = [e for ep in episodes for e in ep.tool_errors]
            calls = sum(ep.num_tool_calls for ep in episodes)
            assert calls >= 4, constrain
    assert "SyntaxError" in errors[False]
    assert "SyntaxError" not in errors[True]
