r"""Per-device memory of training a preset on a mesh, and whether it fits, before launching.

  python tools/memory_plan.py qwen2.5-7b --mesh data=1,fsdp=32,tensor=1 --device=v5p
  python tools/memory_plan.py llama-3.1-8b --mesh fsdp=32 --device=h100 --remat=full
  python tools/memory_plan.py tiny-1m --mesh fsdp=1 --compile_check   # vs XLA's own numbers
  python tools/memory_plan.py qwen2.5-7b --mesh fsdp=8 --device=h100 --lora_rank=16

Analytic model, per device (P parameters, L layers, hidden E, MLP width I, query/kv widths Q/K,
vocab V, b = batch / (data * fsdp * micro_batches) rows of S tokens in flight):
  parameters             P * bytes(param_dtype) / (fsdp * tensor)   (FSDP/ZeRO-3 sharding)
  gradients              T * bytes(param_dtype) / (fsdp * tensor)   (T trainable: all P, or
                                                                     with --lora_rank only the
                                                                     adapters, r * (in + out)
                                                                     per targeted projection)
  optimizer state        2 * T * 4 / (fsdp * tensor)                (AdamW moments in f32;
                                                                     on the host if offloaded)
  activations            b * S * bytes(dtype) * saved values per token:
                           remat none: L * (4E + 3Q + 3K + 4I)    (norm in/out, q/k/v before
                                                   and after RoPE, attention out, gate, sigmoid,
                                                   up, product)
                           remat dots: L * (3E + Q + 2K + 2I) + one layer recomputed
                           remat full: L * E + one layer recomputed
                         plus, without a fused attention kernel (--attention=xla), f32 scores
                         and probabilities 2 * b * H * S^2 * 4 / tensor per layer kept,
                         plus f32 logits and their gradient, 2 * b * S * V * 4 / tensor
  KV cache (rollouts)    2 * L * b * S * K * bytes(dtype) / tensor
Training peak = parameters + gradients + optimizer state + activations; rollout peak =
parameters + optimizer state + KV cache. Q, K and I split over `tensor`; E does not.
--compile_check compiles the loss gradient of the real model for one device's batch (shapes
only, nothing allocated) and prints XLA's memory_analysis() beside the formulas.
"""

from __future__ import annotations

import dataclasses
import sys

from absl import app, flags

import numpy as np

from agentic_jax.models import ModelConfig, get_preset
from agentic_jax.models.config import DTYPES, LORA_TARGETS
from agentic_jax.parallel import MESH_AXES

_BYTES = {name: np.dtype(dtype).itemsize for name, dtype in DTYPES.items()}
_GB = 1e9
# Accelerator memory per device, GB (per chip; v4/v5p chips run as one megacore device).
DEVICE_MEMORY_GB = {"v4": 32.0, "v5e": 16.0, "v5p": 95.0, "v6e": 32.0, "a100": 80.0,
                    "h100": 80.0, "h200": 141.0}


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device of each part of a training step and of a rollout."""

    num_params: int
    num_trainable: int
    devices: int
    params: float
    gradients: float
    optimizer: float           # on the device; 0 when offloaded
    optimizer_host: float      # per device's share kept in host memory
    activations: float         # for the requested remat policy, logits included
    activations_by_remat: dict[str, float]
    kv_cache: float

    @property
    def train_peak(self) -> float:
        return self.params + self.gradients + self.optimizer + self.activations

    @property
    def rollout_peak(self) -> float:
        return self.params + self.optimizer + self.kv_cache

    @property
    def peak(self) -> float:
        return max(self.train_peak, self.rollout_peak)


def parse_mesh(text: str) -> dict[str, int]:
    """'data=1,fsdp=32,tensor=1' -> sizes of all three axes (missing ones are 1)."""
    mesh = dict.fromkeys(MESH_AXES, 1)
    for part in filter(None, text.split(",")):
        name, sep, size = part.partition("=")
        if not sep or name not in MESH_AXES or not size.isdigit() or int(size) < 1:
            raise ValueError(f"--mesh entry {part!r} is not AXIS=SIZE with AXIS in {MESH_AXES} "
                             "and SIZE >= 1")
        mesh[name] = int(size)
    return mesh


def activation_bytes(cfg: ModelConfig, tensor: int, rows: int, seq_len: int,
                     attention: str = "flash") -> dict[str, float]:
    """Bytes kept for the backward pass by `rows` sequences, by remat policy (logits excluded)."""
    e = cfg.hidden_size
    q = cfg.num_heads * cfg.head_dim // tensor
    k = -(-cfg.num_kv_heads // tensor) * cfg.head_dim  # kv heads replicate past `tensor`
    i = cfg.intermediate_size // tensor
    token_bytes = rows * seq_len * _BYTES[cfg.dtype]
    # float32 scores and probabilities [B, H, S, S] unless a fused kernel recomputes them
    scores = 0 if attention == "flash" else 2 * rows * cfg.num_heads // tensor * seq_len**2 * 4
    one_layer = token_bytes * (4 * e + 3 * q + 3 * k + 4 * i) + scores
    layers = cfg.num_layers
    return {"none": layers * one_layer,
            "dots": layers * token_bytes * (3 * e + q + 2 * k + 2 * i) + one_layer,
            "full": layers * token_bytes * e + one_layer}


def plan_memory(cfg: ModelConfig, mesh: dict[str, int], batch: int, seq_len: int,
                remat: str = "none", optimizer_offload: bool = False,
                micro_batches: int = 1, attention: str = "flash") -> MemoryPlan:
    """The analytic per-device plan (module docstring) for `cfg` on `mesh`."""
    data, fsdp, tensor = (mesh[axis] for axis in MESH_AXES)
    rows = data * fsdp * micro_batches
    if batch % rows:
        raise ValueError(f"--batch {batch} is not divisible by data*fsdp*micro_batches={rows}")
    if cfg.num_heads % tensor or cfg.intermediate_size % tensor:
        raise ValueError(f"tensor={tensor} must divide num_heads={cfg.num_heads} and "
                         f"intermediate_size={cfg.intermediate_size}")
    n = cfg.num_params()
    trainable = cfg.num_lora_params() if cfg.lora_rank else n
    shards = fsdp * tensor
    logits = 2 * batch // rows * seq_len * cfg.vocab_size * 4 / tensor
    by_remat = {policy: saved + logits for policy, saved in
                activation_bytes(cfg, tensor, batch // rows, seq_len, attention).items()}
    kv_heads = -(-cfg.num_kv_heads // tensor)
    optimizer = 2 * trainable * 4 / shards
    return MemoryPlan(
        num_params=n, num_trainable=trainable, devices=data * fsdp * tensor,
        params=n * _BYTES[cfg.param_dtype] / shards,
        gradients=trainable * _BYTES[cfg.param_dtype] / shards,
        optimizer=0.0 if optimizer_offload else optimizer,
        optimizer_host=optimizer if optimizer_offload else 0.0,
        activations=by_remat[remat], activations_by_remat=by_remat,
        kv_cache=2 * cfg.num_layers * batch // (data * fsdp) * seq_len * kv_heads
        * cfg.head_dim * _BYTES[cfg.dtype])


def compiled_memory(cfg: ModelConfig, batch: int, seq_len: int) -> dict[str, int]:
    """XLA's memory_analysis() of the loss gradient for one device, from shapes only.

    Returns argument bytes (parameters and tokens), output bytes (the gradients) and temporary
    bytes (activations, logits and workspace).
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from agentic_jax.models import Transformer, trainable_filter

    graphdef, abstract_params, abstract_frozen = nnx.split(
        nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))), trainable_filter(cfg), ...)

    def loss(params, frozen, tokens):
        logits = nnx.merge(graphdef, params, frozen)(tokens)
        logp = jax.nn.log_softmax(logits[:, :-1])
        return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1).mean()

    tokens = jax.ShapeDtypeStruct((batch, seq_len), jnp.int32)
    lowered = jax.jit(jax.grad(loss)).lower(abstract_params, abstract_frozen, tokens)
    stats = lowered.compile().memory_analysis()
    return {"arguments": stats.argument_size_in_bytes, "outputs": stats.output_size_in_bytes,
            "temporaries": stats.temp_size_in_bytes}


def format_plan(name: str, cfg: ModelConfig, mesh: dict[str, int], plan: MemoryPlan,
                batch: int, seq_len: int, remat: str, capacity_gb: float | None) -> str:
    """The printed report: one line per part, then the verdict when a capacity is known."""
    mesh_text = ",".join(f"{axis}={mesh[axis]}" for axis in MESH_AXES)
    act = plan.activations_by_remat
    lora = (f"; LoRA r={cfg.lora_rank}: {plan.num_trainable / 1e6:.2f}M trainable"
            if cfg.lora_rank else "")
    rows = [
        f"{name}: {plan.num_params / 1e9:.3f}B parameters{lora}; mesh {mesh_text} "
        f"({plan.devices} devices); batch {batch} x {seq_len} tokens; {cfg.dtype} compute, "
        f"{cfg.param_dtype} parameters; remat {remat}",
        f"  parameters            {plan.params / _GB:9.3f} GB",
        f"  gradients             {plan.gradients / _GB:9.3f} GB",
        f"  optimizer state (f32) {plan.optimizer / _GB:9.3f} GB"
        + (f"   (+{plan.optimizer_host / _GB:.3f} GB on the host)" if plan.optimizer_host else ""),
        f"  activations           {plan.activations / _GB:9.3f} GB   (remat none "
        f"{act['none'] / _GB:.3f}, dots {act['dots'] / _GB:.3f}, full {act['full'] / _GB:.3f})",
        f"  kv cache (rollout)    {plan.kv_cache / _GB:9.3f} GB",
        f"  train peak            {plan.train_peak / _GB:9.3f} GB",
        f"  rollout peak          {plan.rollout_peak / _GB:9.3f} GB",
    ]
    if capacity_gb is not None:
        used = plan.peak / (capacity_gb * _GB)
        verdict = "fits" if used <= 1.0 else "does NOT fit"
        rows.append(f"  per-device memory     {capacity_gb:9.3f} GB -> {verdict} "
                    f"({used:.0%} of it at peak)")
    return "\n".join(rows)


def compile_check_line(cfg: ModelConfig, rows: int, seq_len: int, remat: str) -> str:
    """XLA's numbers for one device holding `rows` sequences, beside the formulas' numbers.

    The model compiles with its XLA attention here, so the formulas count attention scores too.
    """
    one = dict.fromkeys(MESH_AXES, 1)
    analytic = plan_memory(cfg, one, rows, seq_len, remat, attention="xla")
    compiled = compiled_memory(cfg, rows, seq_len)
    return (f"  compiled, one device, batch {rows}: arguments {compiled['arguments'] / _GB:.3f} GB "
            f"(parameters {analytic.params / _GB:.3f}), outputs {compiled['outputs'] / _GB:.3f} "
            f"GB (gradients {analytic.gradients / _GB:.3f}), temporaries "
            f"{compiled['temporaries'] / _GB:.3f} GB (activations "
            f"{analytic.activations / _GB:.3f})")


def define_flags() -> None:
    """Registers the tool's flags (only when run as a program)."""
    flags.DEFINE_string("mesh", "fsdp=1", "Mesh sizes, e.g. data=1,fsdp=32,tensor=1.")
    flags.DEFINE_integer("batch", 32, "Global training batch, sequences per step.")
    flags.DEFINE_integer("seq_len", 2048, "Tokens per sequence (prompt + response).")
    flags.DEFINE_integer("micro_batches", 1, "Gradient accumulation steps inside one update.")
    flags.DEFINE_enum("dtype", "bfloat16", sorted(_BYTES), "Compute/activation dtype.")
    flags.DEFINE_enum("param_dtype", "float32", sorted(_BYTES), "Parameter storage dtype.")
    flags.DEFINE_enum("remat", "none", ["none", "dots", "full"], "Activation remat policy.")
    flags.DEFINE_bool("optimizer_offload", False, "Keep the AdamW state in host memory.")
    flags.DEFINE_enum("attention", "flash", ["flash", "xla"],
                      "flash: a fused kernel (Pallas/cuDNN); xla: scores kept in memory.")
    flags.DEFINE_enum("device", None, sorted(DEVICE_MEMORY_GB), "Chip, for its memory size.")
    flags.DEFINE_float("device_memory_gb", None, "Per-device memory, GB (instead of --device).")
    flags.DEFINE_integer("lora_rank", 0, "LoRA adapter rank (0: full fine-tuning).")
    flags.DEFINE_list("lora_targets", list(LORA_TARGETS), "Projections that get adapters.")
    flags.DEFINE_bool("compile_check", False,
                      "Also print XLA's compiled memory analysis for one device's batch.")


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: memory_plan.py PRESET --mesh data=1,fsdp=32,tensor=1 [flags]")
    f = flags.FLAGS
    try:
        cfg = get_preset(argv[1], dtype=f.dtype, param_dtype=f.param_dtype, remat=f.remat,
                         lora_rank=f.lora_rank, lora_targets=tuple(f.lora_targets))
        mesh = parse_mesh(f.mesh)
        plan = plan_memory(cfg, mesh, f.batch, f.seq_len, f.remat, f.optimizer_offload,
                           f.micro_batches, f.attention)
    except ValueError as err:
        sys.exit(f"memory_plan: {err}")
    capacity = f.device_memory_gb or (DEVICE_MEMORY_GB[f.device] if f.device else None)
    print(format_plan(argv[1], cfg, mesh, plan, f.batch, f.seq_len, f.remat, capacity))
    if f.compile_check:
        print(compile_check_line(cfg, f.batch // (mesh["data"] * mesh["fsdp"] * f.micro_batches),
                                 f.seq_len, f.remat))


if __name__ == "__main__":
    define_flags()
    app.run(main)
