"""The tiny test model as a GGUF file for llama.cpp: the same weights (tests/tinymodel) and tokenizer
(tests/tinytok) written with the `gguf` package as llama.cpp's own converter writes a Qwen2 model
(architecture qwen2, F32 tensors, the BPE vocabulary with its merges and token types, Qwen's chat
template). No download, a few hundred KB.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.tinymodel import make_config, make_hf_model
from tests.tinytok import CHAT_TEMPLATE, make_tokenizer

_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, index, rest = hf_name.split(".", 3)  # model.layers.N.<rest>
    return f"blk.{index}.{_LAYER_NAMES[rest]}"


def save_gguf(
    path: Path,
    seed: int = 0,
    context: int = 4096,
    chat_template: str | None = CHAT_TEMPLATE,
    architecture: str = "qwen2",
    model=None,
    quant: str | None = None,
    block_count: int | None = None,
    tokens_as=None,
) -> Path:
    """Write the tiny model (tinymodel.make_hf_model(seed), or `model`: one of cadedit's Qwen2 with the
    tiny config, e.g. with hand-set weights) and tokenizer as one GGUF file; return its path. quant
    (e.g. "Q4_0"): its linear layers' weights stored in that block format, as llama.cpp's quantizer
    would (the embedding and norms stay F32). block_count, tokens_as (a function of the token list):
    metadata that lies about the tensors and vocabulary, as a hostile file's would."""
    import gguf

    config = make_config(context)
    tokenizer = make_tokenizer()
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    added = {t["id"]: t for t in spec["added_tokens"]}
    size = config.vocab_size
    tokens, types = [""] * size, [gguf.TokenType.NORMAL] * size
    for piece, tid in vocab.items():
        tokens[tid] = piece
    for tid, token in added.items():
        tokens[tid] = token["content"]
        types[tid] = gguf.TokenType.CONTROL if token["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("cadedit tiny qwen2")
    writer.add_block_count(config.num_hidden_layers if block_count is None else block_count)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(
        float(config.rope_parameters["rope_theta"] if getattr(config, "rope_parameters", None) else config.rope_theta)
    )
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens if tokens_as is None else tokens_as(tokens))
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    weights = (model if model is not None else make_hf_model(seed, context)).state_dict()
    for name, tensor in weights.items():
        data = np.ascontiguousarray(tensor.detach().float().numpy())
        if quant and data.ndim == 2 and "embed" not in name:
            kind = getattr(gguf.GGMLQuantizationType, quant)
            writer.add_tensor(gguf_name(name), gguf.quants.quantize(data, kind), raw_dtype=kind)
        else:
            writer.add_tensor(gguf_name(name), data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
