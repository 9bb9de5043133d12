"""tools/bench_update_memory.py measures one update in this process: what it must hold and
what it peaked at, for the variant it is given."""

import importlib.util
from pathlib import Path

_TOOL = Path(__file__).parents[2] / "tools" / "bench_update_memory.py"


def _tool():
    spec = importlib.util.spec_from_file_location("bench_update_memory", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_variant_reports_its_memory_against_weights_grads_and_adam():
    tool = _tool()
    args = tool.parse_args(["--model=tiny-0.2m", "--rows=2", "--seq-len=32"])
    full = tool.measure(args, "full FT")
    assert full["skipped"] == 0.0  # the update ran
    assert full["needed_mb"] == full["weights_mb"] + 3 * full["trainable_mb"]
    assert full["trainable_mb"] == full["weights_mb"]  # full fine-tuning trains every weight
    assert full["peak_rss_mb"] >= full["rss_before_step_mb"] > full["weights_mb"]
    lora = tool.measure(args, "LoRA r=16")
    assert lora["trainable_mb"] < lora["weights_mb"]
