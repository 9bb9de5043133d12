"""A choice is the episode's transcript: model turns, the tool outputs fed back, the answer;
cut at max_tokens and at stop strings; usage counts sampled and tool-output tokens apart."""

import json
import types

from agentic_jax.data import builtin_tokenizer
from agentic_jax.rollout import Episode
from agentic_jax.serve import chat, completions
from agentic_jax.serve.schema import ChatRequest

TOK = builtin_tokenizer()


def _decode(tokens):
    return TOK.decode(list(tokens), skip_special_tokens=True)


def _episode():
    ep = Episode(prompt_tokens=[1, 2, 3])
    model = TOK.encode("Let me compute.\n```python\nprint(2 + 3)\n```", add_special_tokens=False)
    tool = TOK.encode("\n```output\n5\n```\n", add_special_tokens=False)
    answer = TOK.encode("The answer is \\boxed{5}.", add_special_tokens=False)
    ep.add_model_tokens(model, [0.0] * len(model), [0.0] * len(model))
    ep.add_tool_tokens(tool)
    ep.add_model_tokens(answer, [0.0] * len(answer), [0.0] * len(answer))
    ep.num_tool_calls, ep.finish_reason = 1, "answer"
    return ep, len(model), len(tool), len(answer)


def test_the_choice_is_the_whole_transcript():
    ep, n_model, n_tool, n_answer = _episode()
    c = chat.choice_text(ep.response_tokens, ep.loss_mask, _decode, max_new_tokens=10_000,
                         stops=[], episode_reason=ep.finish_reason)
    assert "```python\nprint(2 + 3)\n```" in c.text and "```output\n5\n```" in c.text
    assert c.text.endswith("\\boxed{5}.") and c.finish_reason == "stop"
    assert (c.model_tokens, c.tool_tokens) == (n_model + n_answer, n_tool)
    body = chat.completion_body("id", "m", 3, [ep], [c])
    assert body["choices"][0]["tool_loop"]["answer"] == "5"
    assert body["choices"][0]["tool_loop"]["tool_calls"] == 1
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": n_model + n_answer,
                             "total_tokens": 3 + n_model + n_answer, "tool_output_tokens": n_tool}


def test_limits_and_stops():
    ep, n_model, _, _ = _episode()
    cut = chat.choice_text(ep.response_tokens, ep.loss_mask, _decode, max_new_tokens=n_model,
                           stops=[], episode_reason=ep.finish_reason)
    assert cut.finish_reason == "length" and "```output" not in cut.text
    stopped = chat.choice_text(ep.response_tokens, ep.loss_mask, _decode, max_new_tokens=10_000,
                               stops=["```output"], episode_reason=None)
    assert stopped.finish_reason == "stop" and stopped.text.endswith("```\n")
    # While the episode grows, a tail that may start a stop string is held back.
    growing = chat.choice_text(ep.response_tokens[:n_model], ep.loss_mask, _decode,
                               max_new_tokens=10_000, stops=["``` and more"], episode_reason=None)
    assert growing.finish_reason is None and not growing.text.endswith("```")


def _sampled_episode():
    """`_episode` with log-probs and two alternatives a sampled token."""
    ep, n_model, n_tool, n_answer = _episode()
    ep.logprobs = [-0.01 * (i + 1) if m else 0.0 for i, m in enumerate(ep.loss_mask)]
    ep.top_logprobs = [[(t, -0.01 * (i + 1)), (0, -5.0)] if m else None
                       for i, (t, m) in enumerate(zip(ep.response_tokens, ep.loss_mask))]
    return ep, n_model, n_tool, n_answer


def test_logprobs_list_the_sampled_tokens_not_the_tool_output():
    ep, n_model, n_tool, n_answer = _sampled_episode()
    sampled, token_text = chat.Sampled.of(ep), chat.TokenText(TOK)
    content = chat.logprob_content(sampled, 0, len(ep.response_tokens), token_text)
    assert len(content) == n_model + n_answer
    model_positions = [i for i, m in enumerate(ep.loss_mask) if m]
    assert [e["logprob"] for e in content] == [ep.logprobs[i] for i in model_positions]
    assert [e["top_logprobs"][0]["token"] for e in content] == [e["token"] for e in content]
    text = bytes(b for e in content for b in e["bytes"]).decode("utf-8")
    assert text == _decode([ep.response_tokens[i] for i in model_positions])
    # Cut by a stop string: only the tokens whose text is shown.
    stopped = chat.choice_text(ep.response_tokens, ep.loss_mask, _decode, max_new_tokens=10_000,
                               stops=["```output"], episode_reason=None)
    shown = chat.tokens_shown(ep.response_tokens, _decode, stopped.text)
    assert _decode(ep.response_tokens[:shown]).startswith(stopped.text)
    assert not _decode(ep.response_tokens[:shown - 1]).startswith(stopped.text)
    assert len(chat.logprob_content(sampled, 0, shown, token_text)) == n_model


def test_token_bytes_are_the_tokens_own():
    token_text = chat.TokenText(TOK)
    tokens = TOK.encode("é∑ ok", add_special_tokens=False)
    parts = [token_text(t) for t in tokens]
    assert bytes(b for _, raw in parts for b in raw) == "é∑ ok".encode("utf-8")
    assert any("\ufffd" in text for text, _ in parts)   # a character split across tokens
    assert token_text(TOK.eos_token_id)[0] == TOK.eos_token


def test_a_stream_sends_each_tokens_log_prob_once_with_its_text():
    """Snapshots of a growing episode (model turn, tool output, answer): the chunks' text and
    log-probs add up to the whole reply's."""
    ep, n_model, n_tool, n_answer = _sampled_episode()
    service = types.SimpleNamespace(decode=_decode, token_text=chat.TokenText(TOK),
                                    model_name="m", limits=types.SimpleNamespace(
                                        request_timeout_s=60))
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "q"}],
                                          "logprobs": True, "top_logprobs": 2})
    reply = completions._Reply(service, request, 3, 10_000, ticket=None)
    sent = completions._Sent(1)
    chunks = []
    whole = chat.Sampled.of(ep)
    for end, reason in ((n_model - 3, None), (n_model, None), (n_model + n_tool, None),
                        (len(ep.response_tokens), "answer")):
        snapshot = chat.Sampled(whole.tokens[:end], whole.mask[:end], whole.logprobs[:end],
                                whole.alternatives[:end])
        chunks += [json.loads(e[6:]) for e in reply._deltas(0, snapshot, reason, sent)]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    entries = [e for c in chunks if c["choices"][0]["logprobs"]
               for e in c["choices"][0]["logprobs"]["content"]]
    final = chat.choice_text(ep.response_tokens, ep.loss_mask, _decode, max_new_tokens=10_000,
                             stops=[], episode_reason="answer")
    assert text == final.text and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert entries == chat.logprob_content(whole, 0, len(ep.response_tokens), service.token_text)
    assert len(chunks) >= 4   # the text came in parts
