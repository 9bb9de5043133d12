"""tools/build_warmstart.py: a finished run's warm start is saved only when its recorded config
has the same recipe fields."""

import importlib.util
from pathlib import Path

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "build_warmstart.py"


def _tool():
    spec = importlib.util.spec_from_file_location("build_warmstart", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_fields_are_compared_and_rl_fields_are_not():
    differences = _tool()._differences
    config = {"seed": 0, "model": {"preset": "tiny-1m"}, "data": {"kinds": ["sum"]},
              "warmstart": {"steps": 3500, "shipped": True}, "mesh": {"fsdp": -1},
              "tokenizer": {"path": ""},
              "training": {"max_length": 160, "max_grad_norm": 1.0, "lr": 3e-4,
                           "offload_optimizer": False}}
    recorded = {**config, "warmstart": {"steps": 3500},  # recorded before the field existed
                "training": {**config["training"], "lr": 1e-2}}
    assert differences(recorded, config) == []
    other = {**recorded, "seed": 1, "data": {"kinds": ["sum", "product"]},
             "training": {**recorded["training"], "max_length": 96}}
    assert differences(other, config) == ["data.kinds", "seed", "training.max_length"]
