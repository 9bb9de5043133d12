"""tools/memory_plan.py: per-device memory formulas, the fit verdict, XLA's cross-check."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_jax.models import get_preset

_REPO = Path(__file__).resolve().parents[2]
_SCRIPT = _REPO / "tools" / "memory_plan.py"
_spec = importlib.util.spec_from_file_location("memory_plan", _SCRIPT)
mp = sys.modules["memory_plan"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mp)

_FSDP32 = {"data": 1, "fsdp": 32, "tensor": 1}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(_SCRIPT), *args], cwd=_REPO, capture_output=True,
                          text=True, timeout=120)


def test_qwen7b_fits_v5p_32_and_not_one_small_chip():
    fits = _cli("qwen2.5-7b", "--mesh", "data=1,fsdp=32,tensor=1", "--device=v5p")
    assert fits.returncode == 0, fits.stderr
    assert "per-device memory        95.000 GB -> fits" in fits.stdout
    too_small = _cli("qwen2.5-7b", "--mesh", "fsdp=1", "--device=v5e")
    assert too_small.returncode == 0, too_small.stderr
    assert "-> does NOT fit" in too_small.stdout


def test_bad_arguments_fail_with_one_line():
    proc = _cli("qwen2.5-7b", "--mesh", "fsdp=3")
    assert proc.returncode != 0
    assert proc.stderr.strip() == (
        "memory_plan: --batch 32 is not divisible by data*fsdp*micro_batches=3")


@pytest.mark.parametrize("text", ["pipeline=2", "fsdp=0", "fsdp", "data=1,tensor=x"])
def test_bad_mesh_is_named(text):
    with pytest.raises(ValueError, match="is not AXIS=SIZE with AXIS in"):
        mp.parse_mesh(text)


def test_mesh_axes_default_to_one():
    assert mp.parse_mesh("fsdp=32") == _FSDP32
    assert mp.parse_mesh("") == {"data": 1, "fsdp": 1, "tensor": 1}


def test_sharded_parts_scale_with_the_mesh():
    cfg = get_preset("qwen2.5-7b", dtype="bfloat16", param_dtype="float32")
    n = cfg.num_params()
    plan = mp.plan_memory(cfg, _FSDP32, batch=32, seq_len=2048)
    assert plan.devices == 32
    assert plan.params == plan.gradients == n * 4 / 32
    assert plan.optimizer == 2 * n * 4 / 32 and plan.optimizer_host == 0
    assert plan.peak == plan.train_peak < 95e9
    single = mp.plan_memory(cfg, mp.parse_mesh("fsdp=1"), batch=32, seq_len=2048)
    assert single.params == 32 * plan.params and single.peak > 16e9


def test_offload_remat_tensor_and_attention_options():
    cfg = get_preset("llama-3.1-8b", dtype="bfloat16")
    base = mp.plan_memory(cfg, _FSDP32, batch=32, seq_len=4096)
    offload = mp.plan_memory(cfg, _FSDP32, batch=32, seq_len=4096, optimizer_offload=True)
    assert offload.optimizer == 0 and offload.optimizer_host == base.optimizer
    acts = base.activations_by_remat
    assert acts["none"] > acts["dots"] > acts["full"]
    full = mp.plan_memory(cfg, _FSDP32, batch=32, seq_len=4096, remat="full")
    assert full.train_peak == base.train_peak - acts["none"] + acts["full"]
    tp = mp.plan_memory(cfg, {"data": 1, "fsdp": 8, "tensor": 4}, batch=32, seq_len=4096)
    assert tp.params == base.params and tp.kv_cache == base.kv_cache
    xla = mp.plan_memory(cfg, _FSDP32, batch=32, seq_len=4096, attention="xla")
    assert xla.activations > base.activations
    with pytest.raises(ValueError, match="tensor=3 must divide num_heads=32"):
        mp.plan_memory(cfg, {"data": 1, "fsdp": 1, "tensor": 3}, batch=32, seq_len=16)


def test_kv_cache_formula():
    cfg = get_preset("tiny-1m", dtype="bfloat16")
    plan = mp.plan_memory(cfg, mp.parse_mesh("data=2,fsdp=2"), batch=8, seq_len=100)
    # 2 (k and v) * layers * rows per device * slots * kv heads * head dim * 2 bytes
    assert plan.kv_cache == 2 * cfg.num_layers * 2 * 100 * cfg.num_kv_heads * cfg.head_dim * 2


@pytest.mark.parametrize("remat", ["none", pytest.param("full", marks=pytest.mark.slow)])
def test_formulas_match_compiled_memory_analysis(remat):
    cfg = get_preset("tiny-0.2m", dtype="float32", remat=remat)
    rows, seq_len = 4, 64
    compiled = mp.compiled_memory(cfg, rows, seq_len)
    plan = mp.plan_memory(cfg, mp.parse_mesh(""), rows, seq_len, remat, attention="xla")
    assert compiled["arguments"] - rows * seq_len * 4 == plan.params
    assert compiled["outputs"] == pytest.approx(plan.gradients, rel=1e-3)
    assert 0.7 < compiled["temporaries"] / plan.activations < 1.8
