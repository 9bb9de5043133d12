"""A tiny Llama checkpoint written as llama.cpp writes one: GGUF metadata, q/k rows in
llama.cpp's RoPE order, quantised tensors, and a byte-level BPE tokenizer with a chat template."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def tiny_tokenizer():
    """A byte-level BPE trained on a few math sentences (vocab 320), ChatML specials first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["Solve x**2 - 5*x + 6 = 0 for x.", "What is 12 * 7? The answer is 84.",
              "print(sympy.solve(x**2 - 4, x))", "Evaluate 81 * 9 with Python."] * 20
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok


def hf_weights(vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights in Hugging Face's names and layout ([out, in])."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: (0.15 * rng.standard_normal(shape)).astype(np.float32)
    head_dim = HIDDEN // HEADS
    out = {"model.embed_tokens.weight": w(vocab, HIDDEN),
           "model.norm.weight": 1.0 + 0.1 * w(HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": 1.0 + 0.1 * w(HIDDEN),
            p + "post_attention_layernorm.weight": 1.0 + 0.1 * w(HIDDEN),
            p + "self_attn.q_proj.weight": w(HEADS * head_dim, HIDDEN),
            p + "self_attn.k_proj.weight": w(KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.v_proj.weight": w(KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * head_dim),
            p + "mlp.gate_proj.weight": w(FFN, HIDDEN),
            p + "mlp.up_proj.weight": w(FFN, HIDDEN),
            p + "mlp.down_proj.weight": w(HIDDEN, FFN),
        })
    return out


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp's convert_hf_to_gguf: each head's two RoPE halves interleaved row by row
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down"}


def write_tiny_gguf(path: Path, *, arch: str = "llama", seed: int = 0) -> dict[str, np.ndarray]:
    """Writes the GGUF file; returns the Hugging Face weights it was made from. The embedding
    is Q4_1 and the MLP Q8_0 (dequantised, not equal to the originals); attention and norms
    are float32 (equal after the q/k rows are put back in Hugging Face's order)."""
    import gguf

    tok = tiny_tokenizer()
    vocab = tok.get_vocab_size()
    weights = hf_weights(vocab, seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    id_to_token = {i: t for t, i in tok.get_vocab().items()}
    writer.add_token_list([id_to_token[i] for i in range(vocab)])
    writer.add_token_types([3 if id_to_token[i] in SPECIALS else 1 for i in range(vocab)])
    model = __import__("json").loads(tok.to_str())["model"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model["merges"]])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)
    q = gguf.GGMLQuantizationType
    for name, w in weights.items():
        if name == "model.embed_tokens.weight":
            gname, kind = "token_embd.weight", q.Q4_1
        elif name == "model.norm.weight":
            gname, kind = "output_norm.weight", q.F32
        else:
            layer, rest = name.split(".", 3)[2:]
            module = rest.rsplit(".", 1)[0]
            gname = f"blk.{layer}.{_NAMES[module]}.weight"
            kind = q.Q8_0 if module.startswith("mlp") else q.F32
            if module == "self_attn.q_proj":
                w = _llama_cpp_permute(w, HEADS)
            elif module == "self_attn.k_proj":
                w = _llama_cpp_permute(w, KV_HEADS)
        if kind == q.F32:
            writer.add_tensor(gname, w)
        else:
            writer.add_tensor(gname, gguf.quants.quantize(w, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights
