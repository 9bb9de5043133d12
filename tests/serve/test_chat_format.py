"""A choice is the episode's transcript: model turns, the tool outputs fed back, the answer;
cut at max_tokens and at stop strings; usage counts sampled and tool-output tokens apart."""

from agentic_jax.data import builtin_tokenizer
from agentic_jax.rollout import Episode
from agentic_jax.serve import chat

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
