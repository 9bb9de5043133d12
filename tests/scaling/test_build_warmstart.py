"""tools/build_warmstart.py saves a finished run's warm start only when the run's recorded config
has the same recipe fields (`warmstart_results.config_differences`)."""

from agentic_jax.training.warmstart_results import config_differences


def test_recipe_fields_are_compared_and_rl_fields_are_not():
    config = {"seed": 0, "model": {"preset": "tiny-1m"}, "data": {"kinds": ["sum"]},
              "warmstart": {"steps": 3500, "shipped": True}, "mesh": {"fsdp": -1},
              "tokenizer": {"path": ""},
              "training": {"max_length": 160, "max_grad_norm": 1.0, "lr": 3e-4,
                           "offload_optimizer": False}}
    recorded = {**config, "warmstart": {"steps": 3500},  # recorded before the field existed
                "training": {**config["training"], "lr": 1e-2}}
    assert config_differences(recorded, config) == []
    # The curriculum scheduler draws RL's problems only.
    scheduled = {**recorded, "data": {"kinds": ["sum"], "scheduler_ahead": 0.25,
                                      "scheduler_threshold": 0.3}}
    assert config_differences(scheduled, config) == []
    other = {**recorded, "seed": 1, "data": {"kinds": ["sum", "product"]},
             "training": {**recorded["training"], "max_length": 96}}
    assert config_differences(other, config) == ["data.kinds", "seed", "training.max_length"]
    assert config_differences({}, config)  # a record without the groups is no match
