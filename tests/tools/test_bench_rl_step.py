"""tools/bench_rl_step.py: its arguments, the update's FLOP floor and the report, from made-up
step records (no model, no TRL)."""

import argparse
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools"))

import bench_clock  # noqa: E402
import bench_rl_step as bench  # noqa: E402

SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "vocab_size": 49152}


@pytest.fixture(autouse=True)
def _two_cores(monkeypatch):
    monkeypatch.setattr(bench_clock, "cpu_count", lambda: 2)


def test_defaults_and_quick():
    args = bench.parse_args([])
    assert args.shape_list == [(4, 4), (8, 4)]
    assert (args.steps, args.new_tokens, args.prefix_caching) == (3, 128, 1)
    quick = bench.parse_args(["--quick"])
    assert (quick.shape_list, quick.new_tokens, quick.steps) == ([(2, 4)], 16, 2)


@pytest.mark.parametrize("text", ["4", "4x1", "0x4", "ax4", "4x4x4"])
def test_bad_shapes_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_shapes(text)


def test_bad_steps_are_refused():
    with pytest.raises(SystemExit):
        bench.parse_args(["--steps=0"])


def test_smollm2_matmul_parameters_and_floor():
    flops = bench.FlopModel.from_hf_config(SMOLLM2)
    # 30 x (q, o: 576 x 576; k, v: 576 x 192; gate, up, down: 576 x 1536) and the tied head.
    assert flops.layer_params == 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536)
    assert flops.head_params == 576 * 49152
    assert flops.update_floor(1000, 400) == (8 * flops.layer_params * 1000
                                             + 6 * flops.head_params * 400)


def _step(wall, rollout, others=0.1, tokens=3000, response=1500):
    return {"step": (wall, 1.8 * wall, others * wall), "rollout": (rollout, 1.6 * rollout,
                                                                 others * rollout),
            "sample_s": 0.9 * rollout, "tokens": tokens, "response_tokens": response,
            "rows": 16, "trunc": 5, "peak_steps_mb": 3000.0, "peak_process_mb": 3100.0,
            "ids": ["gsm8k-train:1"]}


def _sides(ours_others=0.1):
    trl = bench.SideResult(bench.TRL_NAME, [_step(99, 50), _step(60, 20), _step(62, 21),
                                            _step(61, 19)],
                           info={"describe": "trl", "same_prompt_tokens": 16, "prompts": 16})
    ours = bench.SideResult(bench.OURS_NAME, [
        dict(_step(w, r, ours_others), loop={"time_rollout_s": r, "time_update_s": w - r,
                                              "time_step_s": w, "time_engine_prefill_s": 1.5,
                                              "time_engine_decode_s": r - 4,
                                              "time_engine_compile_s": 2.5 if w > 30 else 0.0,
                                              "time_engine_compiles": 3.0 if w > 30 else 0.0,
                                              "time_update_compile_s": 12.0 if w > 30 else 0.0,
                                              "time_update_compiles": 1.0 if w > 30 else 0.0})
        for w, r in ((200, 40), (30, 10), (31, 10), (29, 9))],
        info={"describe": "ours"}, done={"peak_steps_mb": 4000.0, "peak_process_mb": 4500.0})
    return trl, ours


def test_the_first_step_is_left_out_and_the_update_is_the_rest_of_the_step():
    trl, ours = _sides()
    assert trl.side("step").wall == 61
    assert trl.side("rollout").wall == 20
    assert trl.side("update").wall == 41  # 40, 41, 42
    assert ours.side("update").wall == 20
    wall, cpu, others = bench.phase_run(_step(60, 20), "update")
    assert (wall, cpu) == (40, pytest.approx(1.8 * 60 - 1.6 * 20))
    assert others == pytest.approx(0.1 * 40)
    assert ours.peak_steps_mb == 4000 and ours.peak_process_mb == 4500


def test_report_prints_both_sides_ratios_and_the_floor():
    trl, ours = _sides()
    flops = bench.FlopModel.from_hf_config(SMOLLM2)
    text = "\n".join(bench.header_lines(trl, ours)
                     + bench.report((4, 4), 128, trl, ours, 500.0, flops))
    assert "== 4x4: 4 GSM8K prompts x 4 samples, at most 128 new tokens; median of 3 steps" \
        in text
    assert "16 of 16 tokenised identically" in text
    assert "the same problems in the same steps on both sides" in text
    # Step 61 s against 30 s: ours is 2.03x faster by wall time; rollout 20 / 10; update 41 / 20.
    assert "step: agentic_jax vs TRL GRPOTrainer: 2.03x by wall time" in text
    assert "rollout vs generation: agentic_jax vs TRL GRPOTrainer: 2.00x by wall time" in text
    assert "update: agentic_jax vs TRL GRPOTrainer: 2.05x by wall time" in text
    floor_s = flops.update_floor(3000, 1500) / 500e9
    assert f"= {floor_s:.2f} s; its update 41.00 s is {41 / floor_s:.2f}x the floor" in text
    assert "99.0 = 50.0 + 49.0" in text  # every step listed, the first one too
    assert ("[loop: 10.0 (engine prefill 1.5, decode 6.0; of them compiling 0.0 in 0 calls) "
            "+ 20.0]") in text
    assert "(engine prefill 1.5, decode 6.0; of them compiling 2.5 in 3 calls)" in text
    # the update's own compilation where it compiled, nothing where it did not
    assert "+ 160.0 (of it compiling 12.0 in 1 calls)]" in text


def test_the_step_without_our_compilations():
    """The compile seconds of ours' timed steps are taken out of its step and rollout before
    the median; TRL's are as measured."""
    trl, ours = _sides()
    flops = bench.FlopModel.from_hf_config(SMOLLM2)
    ours.steps[1]["loop"].update(time_engine_compile_s=2.0, time_update_compile_s=4.0)
    text = "\n".join(bench.report((4, 4), 128, trl, ours, 500.0, flops))
    # (the 31 s step compiled 2.5 s in the engine, 12 s in the update) rollouts 10 - 2,
    # 10 - 2.5, 9 -> 8; steps 30 - 6, 31 - 14.5, 29 -> 24; TRL's step 61, rollout 20
    assert ("without ours' compilations (20.5 s in the timed steps; TRL compiles nothing): "
            "step 24.00 s, 2.54x TRL's by wall time; rollout 8.00 s, 2.50x") in text
    for key in ("time_engine_compile_s", "time_engine_compiles"):   # not counted: no line
        del ours.steps[2]["loop"][key]
    assert "without ours' compilations" not in "\n".join(
        bench.report((4, 4), 128, trl, ours, 500.0, flops))


def test_a_ratio_is_withheld_when_the_machine_was_not_shared_alike():
    trl, ours = _sides(ours_others=0.9)
    text = "\n".join(bench.report((4, 4), 128, trl, ours, 500.0,
                                  bench.FlopModel.from_hf_config(SMOLLM2)))
    assert "step: agentic_jax vs TRL GRPOTrainer: ratio withheld" in text
    assert "without ours' compilations: ratio withheld" in text


def test_our_side_draws_one_batch_as_trl_does():
    # The GSM8K recipe samples dynamically (up to 4x the prompts a step); the benchmark's step
    # is one batch of P prompts x S samples on both sides, the recipe's GRPO otherwise.
    config, overrides = bench.ours_config({"prompts": 8, "samples": 4, "total_steps": 3,
                                           "seed": 0, "prefix_caching": 1})
    assert tuple(config.rl.accuracy_band) == (0.0, 1.0) and config.rl.max_oversample == 1.0
    assert (config.training.batch_size, config.rl.group_size, config.rl.algorithm) == (8, 4,
                                                                                      "grpo")
    assert not config.warmstart.enabled and overrides["rl.max_oversample"] == 1.0


def test_pack_width_reaches_our_side_only_when_asked():
    spec = {"prompts": 8, "samples": 4, "total_steps": 3, "seed": 0, "prefix_caching": 1}
    config, overrides = bench.ours_config(spec)
    assert config.training.pack_width == 0 and "training.pack_width" not in overrides
    config, overrides = bench.ours_config({**spec, "pack_width": 512})
    assert config.training.pack_width == overrides["training.pack_width"] == 512
    assert bench.parse_args(["--pack_width=512"]).pack_width == 512
    with pytest.raises(SystemExit):
        bench.parse_args(["--pack_width=-1"])


def test_our_sides_printed_command_survives_the_shell():
    import shlex

    _, overrides = bench.ours_config({"prompts": 4, "samples": 4, "total_steps": 3, "seed": 0,
                                      "prefix_caching": 1})
    argv = shlex.split(bench.recipe_command(overrides))
    assert argv[:4] == ["python", "-m", "agentic_jax.train",
                        "--config=configs/math_ppo.py:smollm2-135m-gsm8k"]
    assert "--config.rl.accuracy_band=(0.0, 1.0)" in argv  # one argument, space and all
    assert len(argv) == 4 + len(overrides)


def test_against_parses_overrides_and_refuses_bad_ones():
    assert bench.parse_args([]).against_overrides == {}
    args = bench.parse_args(["--against=rollout.reuse_programs=false, rollout.decode_steps=16,"
                             "training.lr=1e-6,rollout.dtype=bfloat16"])
    assert args.against_overrides == {"rollout.reuse_programs": False,
                                      "rollout.decode_steps": 16, "training.lr": 1e-6,
                                      "rollout.dtype": "bfloat16"}
    for bad in ("rollout.reuse_programs", "=false", "rollout.dtype="):
        with pytest.raises(SystemExit):
            bench.parse_args([f"--against={bad}"])


def test_against_overrides_reach_the_baseline_config():
    spec = {"prompts": 8, "samples": 4, "total_steps": 3, "seed": 0, "prefix_caching": 1}
    config, overrides = bench.ours_config(
        {**spec, "overrides": {"rollout.reuse_programs": False, "rollout.decode_steps": 16}})
    # A bool given to an on / off / auto field is written in the words it reads.
    assert config.rollout.reuse_programs == "false" and config.rollout.decode_steps == 16
    assert overrides["rollout.decode_steps"] == 16
    config, _ = bench.ours_config(spec)
    assert config.rollout.reuse_programs == "auto"


def test_against_report_compares_ours_with_the_baseline():
    _, ours = _sides()
    base = bench.SideResult(bench.BASELINE_NAME, [dict(s) for s in ours.steps],
                            info={"describe": "ours with overrides"})
    for s, (w, r) in zip(base.steps, ((210, 45), (36, 12), (33, 11), (29, 9))):
        s.update(step=(w, 1.8 * w, 0.1 * w), rollout=(r, 1.6 * r, 0.1 * r))
    ours.steps[2]["loop"]["time_engine_rented_calls"] = 2.0
    text = "\n".join(bench.against_report((8, 4), 128, base, ours))
    # Steps 36 / 33 / 29 against 30 / 31 / 29: medians 33 and 30; sums 98 and 90.
    assert "step: agentic_jax vs baseline: 1.10x by wall time" in text
    assert "sum of the timed steps: baseline 98.0 s, agentic_jax 90.0 s: 1.09x" in text
    assert "rollout: agentic_jax vs baseline: 1.10x by wall time" in text
    assert "; 2 decode round trips on a larger program)" in text
    assert ("response tokens a step, baseline / agentic_jax: 1500 / 1500, 1500 / 1500, "
            "1500 / 1500, 1500 / 1500\n") in text + "\n"     # no digests: no verdict
    for side in (base, ours):
        for i, s in enumerate(side.steps):
            s["tokens_digest"] = f"d{i}"
    assert "1500 / 1500 (every step the same tokens and log-prob bits)" in "\n".join(
        bench.against_report((8, 4), 128, base, ours))
    ours.steps[3]["tokens_digest"] = "other"
    assert "(the samples differ in steps 4)" in "\n".join(
        bench.against_report((8, 4), 128, base, ours))
    assert "TRL" not in text
    assert "time_engine_rented_calls" in bench.ENGINE_KEYS   # kept from the loop's metrics


def test_the_sample_digest_sees_a_token_and_a_log_prob_bit():
    from types import SimpleNamespace as Episode

    base = [Episode(response_tokens=[5, 6, 7], logprobs=[-0.5, -1.25, -2.0]),
            Episode(response_tokens=[9], logprobs=[-0.75])]
    digest = bench.sample_digest(base)
    assert digest == bench.sample_digest([Episode(response_tokens=list(e.response_tokens),
                                                  logprobs=list(e.logprobs)) for e in base])
    other_token = [Episode(response_tokens=[5, 6, 8], logprobs=base[0].logprobs), base[1]]
    last_bit = float(np.nextafter(np.float32(-2.0), np.float32(0)))
    other_bit = [Episode(response_tokens=base[0].response_tokens,
                         logprobs=[-0.5, -1.25, last_bit]), base[1]]
    assert len({digest, bench.sample_digest(other_token), bench.sample_digest(other_bit)}) == 3
