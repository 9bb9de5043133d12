"""The one config reader: every key feeds a dataclass field of its own name, bad values are one
error line naming the field, and every variant reads."""

import dataclasses
import json

import pytest
from train_testing import tiny_config

from agentic_jax.config import ConfigError, read_config
from agentic_jax.config import groups as config_lib
from agentic_jax.reward import RewardConfig
from agentic_jax.rl.advantages import AdvantageConfig
from agentic_jax.rl.filters import FilterConfig
from agentic_jax.rl.losses import LossConfig
from agentic_jax.rl.off_policy import OffPolicyConfig
from agentic_jax.rollout import SamplingParams
from agentic_jax.rollout.engine import EngineConfig
from configs import math_ppo

# Which dataclasses each config group feeds (by field name).
FEEDS = {
    "model": [config_lib.ModelSpec],
    "training": [config_lib.TrainingConfig],
    "rl": [config_lib.RLConfig, LossConfig, AdvantageConfig, FilterConfig, RewardConfig,
           OffPolicyConfig],
    "rollout": [SamplingParams, EngineConfig, config_lib.StalenessConfig],
    "data": [config_lib.DataConfig],
    "environment": [config_lib.EnvironmentConfig],
    "warmstart": [config_lib.WarmStartConfig],
    "checkpoint": [config_lib.CheckpointConfig],
    "logging": [config_lib.LoggingConfig],
    "eval": [config_lib.BenchmarkEvalConfig],
}
# Keys the reader takes by hand, each named in RunConfig / read_config.
BY_HAND = {"rollout": {"eval_temperature"}, "mesh": {"data", "fsdp", "tensor", "rollout_devices"},
           "tokenizer": {"path"}}


@pytest.mark.parametrize("variant", sorted(math_ppo.VARIANTS))
def test_every_key_feeds_a_field_of_its_own_name(variant):
    config = math_ppo.get_config(None if variant == "default" else variant)
    for group, value in config.items():
        if not hasattr(value, "keys"):
            assert group == "seed"
            continue
        fields = set(BY_HAND.get(group, ()))
        for cls in FEEDS.get(group, []):
            fields |= {f.name for f in dataclasses.fields(cls)}
        assert set(value.keys()) <= fields, (group, set(value.keys()) - fields)


@pytest.mark.parametrize("variant", ["default", "smoke"])
def test_variants_read(variant):
    cfg = read_config(math_ppo.get_config(None if variant == "default" else variant))
    assert cfg.loss.value_coef == 0.5 and cfg.filters.truncated == "keep"
    assert cfg.reward.use_verification is False and cfg.sampling.temperature == 1.0


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown config variant 'huge'"):
        math_ppo.get_config("huge")


@pytest.mark.parametrize("field, value", [
    ("rl.clip_low", 2.0),
    ("rl.aggregation", "mean_of_means"),
    ("rl.truncated", "cut"),
    ("rl.kl_estimator", "k9"),
    ("rl.reward_check", "vibes"),
    ("rl.algorithm", "dpo"),
    ("rl.format_penalty", -1.0),
    ("rollout.top_p", 0.0),
    ("rollout.page_size", 0),
    ("rollout.num_slots", -2),
    ("rollout.kv_pages", -1),
    ("rollout.step_tokens", 32),   # the 32 slots' decode step leaves prefill nothing
    ("rollout.attention_impl", "cuda"),
    ("environment.tool_mode", "sometimes"),
    ("environment.timeout", 0),
    ("environment.tools", ("python", "abacus")),
    ("environment.tools", ("python", "python")),
    ("environment.tools", ("no_such_module_xyz:Tool",)),
    ("environment.tools", ("json:dumps",)),
    ("environment.tools", ()),
    ("training.batch_size", 0),
    ("training.pack_width", 1),     # below training.max_length: an episode would not fit
    ("training.pack_width", -1),
    ("warmstart.tool_fraction", 1.5),
    ("checkpoint.keep", 0),
    ("data.test_fraction", 1.0),
    ("model.scan_unroll", 0),
    ("eval.benchmarks", "math500"),
    ("eval.benchmarks", "math500=/no/such/file.jsonl"),
    ("eval.every_steps", 5),
    ("eval.num_samples", 0),
    ("eval.top_p", 1.5),
    ("data.levels", (0, 6)),
    ("data.stages", ("arithmetic", "geometry")),
    ("data.kinds", ("product", "derivative")),  # not a kind of the default stages
    ("data.kinds", ("product,prodcut",)),
    ("model.lora_targets", ("q_proj,qkv",)),
    ("data.decontaminate", True),
    ("mesh.rollout_devices", -1),
])
def test_bad_value_is_one_error_naming_the_field(field, value):
    config = tiny_config(**{field: value})
    with pytest.raises(ConfigError) as err:
        read_config(config)
    message = str(err.value)
    assert message.startswith(field), message
    assert "\n" not in message


def test_pack_width_is_max_length_or_wider():
    for width in (0, 96, 512):   # tiny_config's max_length is 96
        assert read_config(tiny_config(**{"training.pack_width": width})).training.pack_width \
            == width
    with pytest.raises(ConfigError, match="training.pack_width: expected 0 .* >= "
                                          "training.max_length=96"):
        read_config(tiny_config(**{"training.pack_width": 95}))


def test_step_tokens_zero_makes_room_for_every_slot():
    assert read_config(tiny_config()).engine.step_tokens == 2048
    cfg = read_config(tiny_config(**{"rollout.num_slots": 4096, "rollout.prefill_chunk": 64}))
    assert cfg.engine.step_tokens == 4096 + 64
    assert read_config(tiny_config(**{"rollout.step_tokens": 99})).engine.step_tokens == 99


def test_packing_needs_token_mean_aggregation():
    with pytest.raises(ConfigError, match="^training.pack_sequences: expected False with "
                                          "rl.aggregation='sequence_mean'"):
        read_config(tiny_config(**{"rl.aggregation": "sequence_mean"}))
    cfg = read_config(tiny_config(**{"rl.aggregation": "sequence_mean",
                                     "training.pack_sequences": False}))
    assert cfg.loss.aggregation == "sequence_mean" and not cfg.training.pack_sequences


def test_rollout_devices_must_leave_the_trainer_a_device():
    from agentic_jax.episodes.policy import build_policy

    cfg = read_config(tiny_config(**{"mesh.rollout_devices": 8}))  # the tests have 8 devices
    with pytest.raises(ConfigError, match="^mesh.rollout_devices: expected fewer than the 8"):
        build_policy(cfg)


def test_ppo_needs_the_value_head():
    with pytest.raises(ConfigError, match="model.value_head"):
        read_config(tiny_config(**{"model.value_head": False}))
    cfg = read_config(tiny_config(**{"model.value_head": False, "rl.algorithm": "grpo"}))
    assert cfg.loss.value_coef == 0.0


def test_the_policy_loss_is_chosen_by_name_from_the_registry():
    assert read_config(tiny_config()).loss.policy_loss == "ppo"
    config = tiny_config()
    with config.unlocked():
        config.rl.policy_loss = "reinforce"
    assert read_config(config).loss.policy_loss == "reinforce"
    config.rl.policy_loss = "a2c"
    with pytest.raises(ConfigError, match="^rl.policy_loss: expected one of"):
        read_config(config)


def test_derived_library_fields():
    cfg = read_config(tiny_config(**{"rl.kl_coef": 0.1, "rl.kl_in_reward": True,
                                     "rl.dual_clip": 3.0, "rl.value_clip": 0.0,
                                     "rl.reward_check": "verify"}))
    assert cfg.loss.kl_coef == 0.0 and cfg.rl.kl_coef == 0.1  # the KL is in the reward
    assert cfg.loss.dual_clip == 3.0 and cfg.loss.value_clip is None
    assert cfg.reward.use_verification and cfg.rl.needs_reference


def test_a_run_directory_remembers_its_config(tmp_path):
    from agentic_jax.episodes import rundir

    recorded = math_ppo.get_config("smoke")
    recorded.data.template = "chat"
    recorded.data.stages = ("arithmetic", "algebra")
    rundir.record_config(str(tmp_path), recorded, num_params=7)
    # The record wins over the config file; the command line's overrides win over the record.
    config = rundir.with_record(math_ppo.get_config("smoke"), str(tmp_path),
                                {"training.lr": 1e-5})
    assert config.data.template == "chat" and config.data.stages == ("arithmetic", "algebra")
    assert config.training.lr == 1e-5
    # Without a config file the record alone is the base, and it reads.
    alone = rundir.with_record(None, str(tmp_path), {})
    assert read_config(alone).data.template == "chat"
    # Fields the record predates keep the file's values.
    record = json.loads((tmp_path / "config.json").read_text())
    del record["config"]["rl"]["reward_check"]
    record["config"]["rl"]["clip_low"] = 0.1
    (tmp_path / "config.json").write_text(json.dumps(record))
    older = rundir.with_record(math_ppo.get_config("smoke"), str(tmp_path), {})
    assert older.rl.reward_check == "grade" and older.rl.clip_low == 0.1
    # ... except the pretrained defaults: such a record holds the values it ran with
    assert older.model.auto_defaults is True  # recorded as it was
    del record["config"]["model"]["auto_defaults"]
    (tmp_path / "config.json").write_text(json.dumps(record))
    assert rundir.with_record(math_ppo.get_config("smoke"), str(tmp_path),
                              {}).model.auto_defaults is False
    # An on / off field that has since gained "auto": a record of the bool it ran with reads
    # as that setting, not as a type error.
    for ran_with in (False, True):
        record["config"]["rollout"]["layer_arrays"] = ran_with
        (tmp_path / "config.json").write_text(json.dumps(record))
        config = rundir.with_record(math_ppo.get_config("smoke"), str(tmp_path), {})
        assert read_config(config).engine.layer_arrays is ran_with


def test_no_record_and_no_config_is_an_error(tmp_path):
    from agentic_jax.episodes import rundir

    with pytest.raises(ConfigError, match="no config.json"):
        rundir.with_record(None, str(tmp_path), {})
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a readable run config"):
        rundir.with_record(None, str(tmp_path), {})


@pytest.mark.parametrize("overrides, level, cap", [
    ({}, "none", 0.0),  # the default: sync, float32
    ({"rl.async_mode": "one_step_off"}, "token", 2.0),
    ({"rl.async_mode": "fully_async", "rollout.max_staleness": 2}, "token", 2.0),
    ({"rl.async_mode": "fully_async", "rollout.max_staleness": 0}, "none", 0.0),
    ({"rl.async_mode": "one_step_off", "rl.is_cap": 3.0}, "token", 3.0),
    ({"model.dtype": "bfloat16"}, "token", 2.0),
    ({"rollout.dtype": "bfloat16"}, "token", 2.0),  # a float32 policy sampled in bfloat16
    ({"rollout.dtype": "float32"}, "none", 0.0),
    ({"mesh.rollout_devices": 2}, "none", 0.0),  # the sampler gets every update's weights
    ({"rl.async_mode": "fully_async", "rl.is_level": "none"}, "none", 0.0),
    ({"rl.async_mode": "fully_async", "rl.is_level": "sequence"}, "sequence", 0.0),
    ({"rl.is_level": "token"}, "token", 0.0),
])
def test_auto_off_policy_is_on_when_the_sampler_can_differ(overrides, level, cap):
    from agentic_jax.config import resolve_off_policy

    config = tiny_config(**overrides)
    assert math_ppo.get_config().rl.is_level == "auto" == tiny_config().rl.is_level
    cfg = read_config(config)
    assert (cfg.off_policy.is_level, cfg.off_policy.is_cap) == (level, cap)
    line = resolve_off_policy(config.rl, cfg.rl, cfg.staleness, cfg.model, cfg.engine.dtype).line
    if config.rl.is_level == "auto":
        assert line.startswith(f"off-policy correction: rl.is_level=auto -> {level!r}"), line
    else:
        assert line == ""


def test_unknown_is_level_names_auto():
    with pytest.raises(ConfigError, match=r"^rl.is_level: expected one of \('auto', 'none'"):
        read_config(tiny_config(**{"rl.is_level": "always"}))


def test_config_errors_are_user_errors():
    from agentic_jax.errors import UserError

    with pytest.raises(UserError, match="^training.batch_size"):
        read_config(tiny_config(**{"training.batch_size": 0}))
    with pytest.raises(UserError, match="^lr: expected a positive number"):
        dataclasses.replace(read_config(tiny_config()).training, lr=0.0)
    assert issubclass(ConfigError, UserError) and issubclass(UserError, ValueError)


def test_name_lists_take_comma_separated_command_line_values():
    # --config.data.kinds=product,power reaches the config as one string (ml_collections keeps
    # a non-literal override of a tuple field as a one-element tuple of it).
    config = tiny_config(**{"data.stages": ("arithmetic",), "data.kinds": ("product, power",),
                            "environment.whitelist": ("sympy,math",),
                            "model.lora_targets": ("q_proj,v_proj",)})
    cfg = read_config(config)
    assert cfg.data.stages == ("arithmetic",)
    assert cfg.data.kinds == ("product", "power")
    assert cfg.environment.whitelist == ("sympy", "math")
    assert cfg.model.lora_targets == ("q_proj", "v_proj")


def test_tools_are_named_in_the_config(tmp_path, monkeypatch):
    config = tiny_config(**{"environment.tools": ("python,calculator",)})
    assert read_config(config).environment.tools == ("python", "calculator")
    assert read_config(tiny_config()).environment.tools == ("python",)
    # A user's tool from the run's Python path: a class called without arguments.
    (tmp_path / "my_tools.py").write_text(
        "import concurrent.futures as cf\n"
        "class Echo:\n"
        "    name, pause_text = 'echo', None\n"
        "    def find_call(self, text): return None\n"
        "    def start(self, call, *, timeout_ms, state): return cf.Future()\n"
        "    def feedback(self, call, result, *, tokenizer, max_tokens, state): return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tiny_config(**{"environment.tools": ("python", "my_tools:Echo")})
    assert read_config(config).environment.tools == ("python", "my_tools:Echo")


@pytest.mark.parametrize("field", ["layer_arrays", "reuse_programs"])
@pytest.mark.parametrize("value, expected", [("auto", "auto"), ("True", True), ("false", False),
                                             (True, True), (False, False)])
def test_on_off_auto_engine_fields_read_from_a_config_or_a_command_line(field, value, expected):
    config = tiny_config()
    setattr(config.rollout, field, value if isinstance(value, str) else str(value))
    cfg = read_config(config)
    assert getattr(cfg.engine, field) == expected and cfg.engine.prefix_caching is True


def test_a_run_recorded_without_reuse_programs_reads_auto():
    config = tiny_config()
    del config.rollout["reuse_programs"]
    assert read_config(config).engine.reuse_programs == "auto"


@pytest.mark.parametrize("field", ["layer_arrays", "reuse_programs"])
def test_a_bad_on_off_auto_value_names_the_field(field):
    config = tiny_config()
    setattr(config.rollout, field, "sometimes")
    with pytest.raises(ConfigError, match=f"rollout.{field}: expected auto, true or false"):
        read_config(config)
