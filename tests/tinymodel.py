"""A tiny random-weight Qwen2 causal LM for tests: built from a config, seeded, fp32, no download.

make_model() (cadedit's Qwen2; make_hf_model(): transformers' with the same weights) pairs with tests/tinytok.make_tokenizer() (vocab 768): 2 layers, hidden 64, 4 heads
with 2 KV heads (grouped-query attention, as Qwen2.5), RoPE. save_model(folder) writes model +
tokenizer as a model folder that `cadedit fix --model FOLDER` loads like a real one.
Importing this module sets torch to 1 thread: on a busy 2-core box the tiny model ran 13x slower
with 2 (OpenMP threads spinning against other processes for microsecond-sized matmuls).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from cadedit.backends.torch.qwen2 import Config, Qwen2, build
from tests.tinytok import make_tokenizer

torch.set_num_threads(1)


def make_config(context: int = 4096) -> Qwen2Config:
    tokenizer = make_tokenizer()
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )


def make_hf_model(seed: int = 0, context: int = 4096) -> Qwen2ForCausalLM:
    """The tiny model as transformers' Qwen2ForCausalLM, in eval mode; the same seed gives the same weights."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen2ForCausalLM(make_config(context)).eval()
    finally:
        torch.random.set_rng_state(generator_state)
    return model


def make_model(seed: int = 0, context: int = 4096) -> Qwen2:
    """The same tiny model as cadedit's own Qwen2 (what load_model gives for a model folder)."""
    hf = make_hf_model(seed, context)
    model = build(Config.from_dict(hf.config.to_dict()), hf.state_dict(), torch.float32)
    model.eos_token_ids = (hf.config.eos_token_id,)
    return model


def scaled_model(dtype: torch.dtype = torch.float32) -> Qwen2:
    """The tiny model with its weights scaled up so that it writes varied text with newlines instead
    of one repeated token, and the LM head rows of tokens that are not printable ASCII (or special)
    zeroed, so its output is valid text that drafts can follow; wide argmax margins."""
    from cadedit.backends.vocab import vocab_from_tokenizer

    tokenizer = make_tokenizer()
    model = make_model(0).to(dtype)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "norm" not in name:
                weight.mul_(10)
        for token, piece in enumerate(vocab_from_tokenizer(tokenizer).tokens):
            if not piece or any(b > 126 or (b < 32 and b != 10) for b in piece) or token in tokenizer.all_special_ids:
                model.lm_head.weight[token] = 0.0
    return model


def save_model(folder: Path, seed: int = 0, context: int = 4096) -> Path:
    """Write the tiny model and tokenizer as a Hugging Face model folder; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    make_hf_model(seed, context).save_pretrained(str(folder))
    make_tokenizer().save_pretrained(str(folder))
    return folder


def save_native(model: Qwen2, folder: Path) -> Path:
    """Write one of cadedit's Qwen2 models (e.g. with hand-set weights) as a model folder's
    config.json + model.safetensors (add a tokenizer with make_tokenizer().save_pretrained)."""
    import dataclasses
    import json

    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "qwen2", **dataclasses.asdict(model.config), "eos_token_id": list(model.eos_token_ids)}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({name: t.contiguous() for name, t in model.state_dict().items()}, str(folder / "model.safetensors"))
    return folder
