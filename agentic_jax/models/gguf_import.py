"""GGUF checkpoints (llama.cpp's single-file format) as Hugging Face directories.

A GGUF file is converted once into a cached directory (config.json, model.safetensors in
float32, the tokenizer with its chat template, generation_config.json), which everything else
(`from_pretrained`, the tokenizer loader, serving, evaluation, export) reads like any other
checkpoint. Quantised tensors (Q4_1, Q8_0, ...) are dequantised exactly with the `gguf`
package; llama.cpp's conversion permutes the rows of Llama's q/k projections for its own RoPE
layout, which is undone here. The tokenizer is rebuilt from the file's vocabulary and merges by
transformers' GGUF reader.

    hf_dir = gguf_hf_dir("SmolLM2-135M-Instruct.Q4_1.gguf")   # converts on first use
    model = from_pretrained(hf_dir)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from agentic_jax.errors import UserError
from agentic_jax.cache import default_cache_dir

# The architectures whose GGUF tensors map one to one onto ours.
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_TENSORS = {"token_embd.weight": "model.embed_tokens.weight",
                   "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
# Bumped when the conversion's output changes, so old cache entries are not reused.
_FORMAT_VERSION = 1


def gguf_hf_dir(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None
                ) -> Path:
    """The Hugging Face directory of ``gguf_path``, converted on first use and cached under
    ``cache_dir`` (`default_cache_dir`) by the file's name, size and modification time."""
    src = Path(gguf_path)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such GGUF file")
    stat = src.stat()
    key = hashlib.sha256(f"{src.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|"
                         f"{_FORMAT_VERSION}".encode()).hexdigest()[:16]
    out = Path(cache_dir or default_cache_dir()) / "gguf" / f"{src.stem}-{key}"
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside its final place and renamed, so a crash never leaves half a directory.
    tmp = Path(tempfile.mkdtemp(prefix=f".{src.stem}-", dir=out.parent))
    try:
        convert_gguf(src, tmp)
        try:
            os.rename(tmp, out)
        except OSError:  # another process converted it first
            if not (out / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Writes the Hugging Face directory of a llama / qwen2 GGUF file into ``out_dir``."""
    from safetensors.numpy import save_file

    reader = _reader(gguf_path)
    meta = read_metadata(reader, str(gguf_path))
    hf_config = hf_config_from_gguf(meta, reader, str(gguf_path))
    tensors = hf_tensors(reader, hf_config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf_config, indent=2))
    generation = {k: hf_config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                  if hf_config.get(k) is not None}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    _write_tokenizer(Path(gguf_path), out)


def _reader(path: str | os.PathLike):
    try:
        import gguf
    except ImportError as err:
        raise ImportError("reading a GGUF checkpoint needs the `gguf` package: "
                          "pip install gguf (or the project's [smollm2] extra)") from err
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, OSError) as err:
        raise UserError(f"{path}: not a readable GGUF file ({err})") from err


def read_metadata(reader: Any, source: str) -> dict[str, Any]:
    """The file's key-value metadata as plain Python values (vocabulary lists left out)."""
    meta = {}
    for name, field in reader.fields.items():
        if name in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                    "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            continue
        try:
            meta[name] = field.contents()
        except (ValueError, IndexError) as err:
            raise UserError(f"{source}: unreadable metadata field {name!r} ({err})") from err
    return meta


def hf_config_from_gguf(meta: dict[str, Any], reader: Any, source: str) -> dict[str, Any]:
    """config.json for the file's architecture; anything we cannot represent is an error."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise UserError(f"{source}: GGUF architecture {arch!r} is not supported; expected "
                        f"one of {sorted(ARCHITECTURES)}")

    def need(key: str) -> Any:
        if f"{arch}.{key}" not in meta:
            raise UserError(f"{source}: missing GGUF metadata {arch}.{key}")
        return meta[f"{arch}.{key}"]

    names = {t.name for t in reader.tensors}
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", None) or "rope_freqs.weight" in names:
        what = "rope_freqs.weight (Llama 3 frequencies)" if scaling in ("none", None) \
            else f"rope.scaling.type={scaling}"
        raise UserError(f"{source}: RoPE scaling ({what}) in GGUF files is not supported; "
                        "convert the original Hugging Face checkpoint instead")
    hidden, heads = int(need("embedding_length")), int(need("attention.head_count"))
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise UserError(f"{source}: no token_embd.weight tensor")
    vocab = int(meta.get(f"{arch}.vocab_size", int(embed.shape[-1])))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // heads))
    config = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(need("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(need("context_length")),
        "vocab_size": vocab,
        "tie_word_embeddings": "output.weight" not in names,
        "torch_dtype": "float32",
    }
    if arch == "llama":
        config.update(attention_bias="blk.0.attn_q.bias" in names, mlp_bias=False)
    for key in ("bos", "eos", "padding"):
        value = meta.get(f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            config["pad_token_id" if key == "padding" else f"{key}_token_id"] = int(value)
    return config


def hf_tensors(reader: Any, hf_config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor of the file under its Hugging Face name, dequantised to float32 [out, in]."""
    from gguf.quants import dequantize

    heads, kv_heads = hf_config["num_attention_heads"], hf_config["num_key_value_heads"]
    permuted = hf_config["model_type"] == "llama"
    out = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            raise UserError(f"GGUF tensor {t.name!r} has no counterpart in a "
                            f"{hf_config['model_type']} model")
        # GGUF lists dimensions fastest-first: ne = (in, out) is a numpy array [out, in].
        shape = tuple(int(d) for d in reversed(t.shape))
        array = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if permuted and name.endswith(("q_proj.weight", "q_proj.bias")):
            array = _unpermute_rope(array, heads)
        elif permuted and name.endswith(("k_proj.weight", "k_proj.bias")):
            array = _unpermute_rope(array, kv_heads)
        out[name] = np.ascontiguousarray(array)
    return out


def _hf_name(name: str) -> str | None:
    if name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    return None


def _unpermute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's q/k row order: within each head it interleaves the two RoPE halves
    (rows 0, d/2, 1, d/2+1, ...); Hugging Face keeps them as two blocks."""
    rows = w.shape[0]
    return (w.reshape(heads, rows // heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _write_tokenizer(gguf_path: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except (OSError, ValueError, KeyError, NotImplementedError) as err:
        raise UserError(f"{gguf_path}: its tokenizer could not be rebuilt ({err})") from err
    tokenizer.save_pretrained(str(out))
