"""Qwen2 in plain torch: the causal LM the decode loop feeds, its KV cache, and its weights read
straight from a model folder's safetensors files.

Why not transformers' model: importing its Qwen2 class and from_pretrained cost seconds of every
cold `cadedit fix` before any forward (docs/measurements/speed.md); this module imports torch only, maps the weight files
into memory without copying them (the page cache serves them), and keeps the cache in buffers that
grow by doubling, so a one-token step does no concatenation. The numbers are transformers' Qwen2
(tests/test_qwen2.py compares the logits with its Qwen2ForCausalLM).

Module names follow the checkpoint's (`model.layers.3.self_attn.q_proj`, `lm_head`), so a
state dict loads as it is and cadedit.backends.torch.steps finds the linear layers by name.
"""

from __future__ import annotations

import json
import math
import mmap
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cadedit.errors import ModelError

# One row's long feed (a prompt) goes through the layers this many tokens at a time: fed whole, a
# prompt of thousands of tokens has attention scores and MLP activations that outgrow the CPU's
# caches, and pieces of this size were faster at every length measured
# (docs/measurements/multiline-edits.md). Each piece attends to the keys before it, as the whole
# would; only the last piece's kept positions go through the LM head.
PREFILL_CHUNK = 1024


@dataclass(frozen=True)
class Config:
    """The fields of a Qwen2 config.json the forward needs."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    head_dim: int = 0  # 0: hidden_size // num_attention_heads

    _REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, raw: Mapping, where: str = "config.json") -> "Config":
        if not isinstance(raw, Mapping):
            raise ModelError(f"{where}: not a JSON object", hint="check the model folder's config.json")
        if raw.get("model_type") not in ("qwen2", None):
            raise ModelError(
                f"{where}: model_type {raw.get('model_type')!r} is not qwen2", hint="use a Qwen2 or Qwen2.5 model"
            )
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        if not isinstance(rope, Mapping):
            raise ModelError(
                f"{where}: rope parameters {rope!r} are not an object", hint="check the model folder's config.json"
            )
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ModelError(
                f"{where}: rope scaling {rope.get('rope_type', rope.get('type'))!r} is not supported",
                hint="use a Qwen2 or Qwen2.5 model without rope_scaling",
            )

        def field(name: str, convert, value):
            try:
                return convert(value)
            except (TypeError, ValueError, OverflowError):
                raise ModelError(
                    f"{where}: {name} is {json.dumps(value)[:40]}, not a usable number",
                    hint="check the model folder's config.json",
                ) from None

        missing = next((name for name in cls._REQUIRED if name not in raw), None)
        if missing is not None:
            raise ModelError(f"{where}: {missing} is missing", hint="check the model folder's config.json")
        config = cls(
            vocab_size=field("vocab_size", int, raw["vocab_size"]),
            hidden_size=field("hidden_size", int, raw["hidden_size"]),
            intermediate_size=field("intermediate_size", int, raw["intermediate_size"]),
            num_hidden_layers=field("num_hidden_layers", int, raw["num_hidden_layers"]),
            num_attention_heads=field("num_attention_heads", int, raw["num_attention_heads"]),
            num_key_value_heads=field(
                "num_key_value_heads", int, raw.get("num_key_value_heads") or raw["num_attention_heads"]
            ),
            rms_norm_eps=field("rms_norm_eps", float, raw.get("rms_norm_eps", 1e-6)),
            rope_theta=field("rope_theta", float, rope.get("rope_theta", raw.get("rope_theta", 1_000_000.0))),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position_embeddings=field("max_position_embeddings", int, raw.get("max_position_embeddings") or 32768),
            head_dim=field("head_dim", int, raw.get("head_dim") or 0),
        )
        config.check(where)
        return config

    def check(self, where: str) -> None:
        """Sizes a real model can have: each a positive integer below 2**24 (2**22 layers, 2**26
        positions), the heads dividing the hidden size and the KV heads dividing the heads. A config can
        claim anything, and numbers like 1e400 or -64 otherwise surface as internal errors deep in torch."""
        bounds = {
            "vocab_size": 1 << 24,
            "hidden_size": 1 << 20,
            "intermediate_size": 1 << 22,
            "num_hidden_layers": 1 << 12,
            "num_attention_heads": 1 << 12,
            "num_key_value_heads": 1 << 12,
            "max_position_embeddings": 1 << 26,
        }
        for name, most in bounds.items():
            value = getattr(self, name)
            if not 1 <= value <= most:
                raise ModelError(
                    f"{where}: {name} is {value}, not an integer from 1 to {most}",
                    hint="check the model folder's config.json",
                )
        if not 0 <= self.head_dim <= 1 << 12:
            raise ModelError(
                f"{where}: head_dim is {self.head_dim}, not an integer from 0 to {1 << 12}",
                hint="check the model folder's config.json",
            )
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ModelError(
                f"{where}: {self.num_attention_heads} attention heads and {self.num_key_value_heads} KV "
                f"heads do not divide a hidden size of {self.hidden_size}",
                hint="check the model folder's config.json",
            )
        if not (0 < self.rms_norm_eps < 1 and 0 < self.rope_theta < 1e12):
            raise ModelError(
                f"{where}: rms_norm_eps {self.rms_norm_eps} or rope_theta {self.rope_theta} is out of range",
                hint="check the model folder's config.json",
            )


class KVCache:
    """Keys and values of every layer for the positions fed so far, in buffers that grow by doubling.

    `length` positions are live; crop(n) forgets all but the first n (nothing is freed or copied).
    """

    def __init__(self, layers: int, kv_heads: int | None = None, dim: int | None = None, device=None):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.length = 0
        self.kv_heads, self.dim = kv_heads, dim  # what a restored prefix must have (None: not checked)
        self.device = device  # where a restored prefix goes (None: the CPU)

    def write(self, index: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [kv_heads, T, dim] keys/values at positions length.. of layer `index`; return the
        layer's live keys and values with them ([kv_heads, length + T, dim])."""
        end = self.length + keys.shape[1]
        buffer = self.keys[index]
        if buffer is None or buffer.shape[1] < end or buffer.dtype != keys.dtype or buffer.device != keys.device:
            capacity = max(256, 1 << (end - 1).bit_length())
            grown_k = keys.new_empty(keys.shape[0], capacity, keys.shape[2])
            grown_v = values.new_empty(values.shape[0], capacity, values.shape[2])
            if buffer is not None and self.length:
                grown_k[:, : self.length] = buffer[:, : self.length]
                grown_v[:, : self.length] = self.values[index][:, : self.length]
            self.keys[index], self.values[index] = grown_k, grown_v
        self.keys[index][:, self.length : end] = keys
        self.values[index][:, self.length : end] = values
        return self.keys[index][:, :end], self.values[index][:, :end]

    def crop(self, n: int) -> None:
        self.length = max(0, min(n, self.length))

    def copy(self) -> "KVCache":
        """Another cache holding the same positions (a row of candidates decoded side by side)."""
        other = KVCache(len(self.keys), self.kv_heads, self.dim, self.device)
        if self.length:
            other.load([(k[:, : self.length], v[:, : self.length]) for k, v in zip(self.keys, self.values)])
        return other

    def extend_from(self, other: "KVCache") -> None:
        """Take the positions `other` holds past this cache's own (this one holds a prefix of other's)."""
        start = self.length
        if other.length > start:
            for index, (k, v) in enumerate(zip(other.keys, other.values)):
                self.write(index, k[:, start : other.length], v[:, start : other.length])
        self.length = other.length

    def layers(self, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of the first n positions of every layer ([kv_heads, n, dim] each)."""
        return [(k[:, :n].clone(), v[:, :n].clone()) for k, v in zip(self.keys, self.values)]

    def export(self, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first n positions, for the on-disk prefix store (cadedit.backends.prefix_store.PrefixStore)."""
        return self.layers(n)

    def restore(self, layers, ids) -> None:
        """Load what export() made for exactly these ids; ValueError if it does not fit this cache."""
        if (
            not isinstance(layers, list)
            or len(layers) != len(self.keys)
            or not all(
                isinstance(kv, (tuple, list))
                and len(kv) == 2
                and kv[0].dim() == 3
                and kv[0].shape == kv[1].shape
                and kv[0].shape[1] == len(ids)
                and kv[0].shape == layers[0][0].shape
                for kv in layers
            )
            or (self.kv_heads is not None and layers and tuple(layers[0][0].shape[::2]) != (self.kv_heads, self.dim))
        ):
            raise ValueError("prefix shape")
        self.load(layers)

    def write_prefix(self, file, n: int) -> None:
        """export(n) into an open file (cadedit.backends.prefix_store): torch's format, read back without pickle."""
        torch.save(self.export(n), file)

    def read_prefix(self, path: Path, ids) -> None:
        """restore() what write_prefix wrote; ValueError (or torch's own error) for any other file."""
        self.restore(torch.load(path, map_location=self.device or "cpu", weights_only=True), ids)

    def load(self, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Replace the cache with these per-layer keys and values (all of one length)."""
        self.keys, self.values = [None] * len(layers), [None] * len(layers)
        self.length = 0
        for index, (keys, values) in enumerate(layers):
            self.write(index, keys, values)
        self.length = layers[0][0].shape[1] if layers else 0


class LogitRows:
    """A forward's [keep, V] logits as the decode loop reads them: row i as a float32 numpy array,
    converted when read (a verified draft keeps up to hundreds of rows; the loop reads those it walks)."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    def __len__(self) -> int:
        return self.logits.shape[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.logits.shape)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.logits[i].float().cpu().numpy()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:  # np.asarray(rows): all of them, [keep, V]
        rows = self.logits.float().cpu().numpy()
        return rows if dtype is None else rows.astype(dtype)


def _unset(*shape: int) -> nn.Parameter:
    """A parameter with no storage yet (the meta device): build() assigns the checkpoint's tensor.
    Nothing is initialised, and no op runs on the meta device (that imports torch._dynamo: a second)."""
    return nn.Parameter(torch.empty(*shape, device="meta"), requires_grad=False)


class Linear(nn.Linear):
    """nn.Linear without its random initialisation (cadedit.backends.torch.steps finds it as an nn.Linear)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _unset(out_features, in_features)
        self.bias = _unset(out_features) if bias else None


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight, self.eps = _unset(size), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.dim
        self.heads, self.kv_heads, self.dim = heads, kv_heads, dim
        self.q_proj = Linear(config.hidden_size, heads * dim)
        self.k_proj = Linear(config.hidden_size, kv_heads * dim)
        self.v_proj = Linear(config.hidden_size, kv_heads * dim)
        self.o_proj = Linear(heads * dim, config.hidden_size, bias=False)
        self.eager = False  # True: softmax(q k^T) v written out (the paper's eager attention), for bench kernel

    def forward(self, x: torch.Tensor, rows: "list[_RowFeed]", index: int) -> torch.Tensor:
        """x: [N, hidden], the rows' tokens one after another; each row attends to its own cache."""
        q_all, k_all, v_all = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        outs, at = [], 0
        for row in rows:
            n = row.n
            outs.append(self._attend(q_all[at : at + n], k_all[at : at + n], v_all[at : at + n], row, index))
            at += n
        return self.o_proj(outs[0] if len(outs) == 1 else torch.cat(outs))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: "_RowFeed", index: int) -> torch.Tensor:
        n, cos, sin, mask = row.n, row.cos, row.sin, row.mask
        q = q.view(n, self.heads, self.dim).transpose(0, 1)  # [H, T, D]
        k = k.view(n, self.kv_heads, self.dim).transpose(0, 1)  # [KV, T, D]
        v = v.view(n, self.kv_heads, self.dim).transpose(0, 1)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        keys, values = row.cache.write(index, k, v)
        if self.eager:
            group = self.heads // self.kv_heads
            keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
            scores = (q @ keys.transpose(1, 2)) / math.sqrt(self.dim)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)), dim=-1)
            out = weights.to(q.dtype) @ values
        elif n == 1:
            # One query row per head: the G query heads of a KV head attend as G rows of one batch entry,
            # with no copy of the keys (several times faster than torch's grouped-query path for a step).
            # 4-D, so torch takes its fused CPU kernel, not the math path that 3-D inputs get (docs/
            # measurements/design-figures.md: up to 17x for one layer's step after 1,024 tokens).
            group = self.heads // self.kv_heads
            out = F.scaled_dot_product_attention(
                q.reshape(1, self.kv_heads, group, self.dim), keys[None], values[None]
            )[0]
        else:
            out = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask, enable_gqa=True)[0]
        return out.view(self.heads, n, self.dim).transpose(0, 1).reshape(n, self.heads * self.dim)


@dataclass
class _RowFeed:
    """One row of a forward: its cache, how many tokens it feeds, their rotary angles and causal mask."""

    cache: "KVCache"
    n: int
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor | None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class MLP(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.self_attn, self.mlp = Attention(config), MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, rows, index):
        x = x + self.self_attn(self.input_layernorm(x), rows, index)
        return x + self.mlp(self.post_attention_layernorm(x))


class Embedding(nn.Module):
    def __init__(self, rows: int, size: int):
        super().__init__()
        self.weight = _unset(rows, size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class Body(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen2(nn.Module):
    """The causal LM: forward(ids, cache, keep) feeds ids after the cache's positions and returns
    the logits of the last `keep` of them."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.folder: Path | None = None  # where the weights came from (cadedit.backends.model's identity of the model)
        self.eos_token_ids: tuple[int, ...] = ()
        self.model = Body(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        dim = config.dim
        self.register_buffer(
            "inv_freq", 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2).float() / dim)), persistent=False
        )

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def new_cache(self) -> KVCache:
        return KVCache(self.config.num_hidden_layers, self.config.num_key_value_heads, self.config.dim, self.device)

    def set_eager_attention(self, eager: bool) -> None:
        for layer in self.model.layers:
            layer.self_attn.eager = eager

    @torch.inference_mode()
    def forward_logits(self, ids: list[list[int]], caches: list[KVCache], keeps: list[int]) -> list["LogitRows"]:
        """What cadedit.backends.model.CachedLM feeds: forward_rows on token id lists, each row's logits as
        LogitRows (float32 numpy rows for the decode loop)."""
        tensors = [torch.tensor(row, dtype=torch.long, device=self.device) for row in ids]  # [T_i]
        if len(tensors) == 1:
            return [LogitRows(self(tensors[0], caches[0], keeps[0]))]
        return [LogitRows(rows) for rows in self.forward_rows(tensors, caches, keeps)]

    def forward(self, ids: torch.Tensor, cache: KVCache, keep: int = 1) -> torch.Tensor:
        """ids: [T] token ids; returns [keep, vocab] logits (in the model's dtype); cache grows by T."""
        return self.forward_rows([ids], [cache], [keep])[0]

    def forward_rows(self, ids: list[torch.Tensor], caches: list[KVCache], keeps: list[int]) -> list[torch.Tensor]:
        """Several rows in one forward: row i feeds ids[i] ([T_i]) after caches[i]'s positions and gets
        the [keeps[i], vocab] logits of its last positions. The rows' tokens go through the linear
        layers together (the weights are read once for all of them); each row attends to its own cache.
        One row's long feed goes through in PREFILL_CHUNK pieces, the last holding the kept positions."""
        if len(ids) == 1:
            while ids[0].shape[0] - PREFILL_CHUNK >= max(keeps[0], 1):
                self._layers([ids[0][:PREFILL_CHUNK]], caches)
                ids = [ids[0][PREFILL_CHUNK:]]
        x, rows = self._layers(ids, caches)
        outs, at = [], 0
        for row, keep in zip(rows, keeps):
            outs.append(x[at + row.n - keep : at + row.n])
            at += row.n
        last = self.lm_head(self.model.norm(outs[0] if len(outs) == 1 else torch.cat(outs)))
        return list(last.split(list(keeps))) if len(outs) > 1 else [last]

    def _layers(self, ids: list[torch.Tensor], caches: list[KVCache]) -> tuple[torch.Tensor, list[_RowFeed]]:
        """The rows' tokens through every layer (their keys and values written to the caches): the last
        layer's output, and the rows."""
        x = self.model.embed_tokens(ids[0] if len(ids) == 1 else torch.cat(ids))
        rows = [self._row(row_ids, cache, x.dtype) for row_ids, cache in zip(ids, caches)]
        for index, layer in enumerate(self.model.layers):
            x = layer(x, rows, index)
        for row in rows:
            row.cache.length += row.n  # only now: a forward cut short leaves the caches' lengths where they were
        return x, rows

    def _row(self, ids: torch.Tensor, cache: KVCache, dtype: torch.dtype) -> _RowFeed:
        n, start = ids.shape[0], cache.length
        positions = torch.arange(start, start + n, device=ids.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.float()[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        mask = None
        if n > 1:  # position start + t sees keys 0 .. start + t
            mask = (
                torch.arange(start + n, device=ids.device)[None, :]
                <= torch.arange(start, start + n, device=ids.device)[:, None]
            )
        return _RowFeed(cache, n, angles.cos().to(dtype), angles.sin().to(dtype), mask)


# -- weights from safetensors ----------------------------------------------------------------

_DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "I8": torch.int8,
    "U8": torch.uint8,
    "I32": torch.int32,
    "I64": torch.int64,
    "BOOL": torch.bool,
}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file as views of one private memory map of it (no copy: pages
    are read when first touched). Raises ModelError naming the file if it is not a whole one."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the open; a device would be read forever
            raise ModelError(f"{path}: not a regular file", hint="point --model at a folder of real model files")
        size = st.st_size
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > size - 8:
                raise ValueError("header longer than the file")
            header = _safetensors_header(path, json.loads(f.read(header_len)))
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private: nothing written reaches the file
        data = torch.frombuffer(mapped, dtype=torch.uint8)
        base = 8 + header_len
        tensors = {}
        for name, info in header.items():
            begin, end = info["data_offsets"]
            dtype = _DTYPES[info["dtype"]]
            if base + end > size or end < begin:
                raise ValueError(f"{name} runs past the end of the file")
            raw = data[base + begin : base + end]
            if (base + begin) % dtype.itemsize:
                raw = raw.clone()  # not aligned for its dtype (after an odd-sized int8 tensor): copied
            tensors[name] = (
                raw.view(dtype).reshape(info["shape"]) if end > begin else torch.empty(info["shape"], dtype=dtype)
            )
        return tensors
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, struct.error) as exc:
        raise ModelError(
            f"cannot load the weights in {path} ({type(exc).__name__}: {str(exc)[:160]})",
            hint="the .safetensors file is damaged or incomplete: download it again",
        ) from None


def _safetensors_header(path: Path, header: object) -> dict[str, dict]:
    """The header's tensor entries, each checked for the fields read_safetensors reads: one ModelError
    naming the file and the entry's field when the header is not what the format says."""
    if not isinstance(header, dict):
        raise ModelError(
            f"{path}: the safetensors header is a JSON {_json_kind(header)}, not an object of tensors",
            hint="the .safetensors file is damaged or not a safetensors file: download it again",
        )
    for name, info in header.items():
        if name == "__metadata__":
            continue
        problem = None
        if not isinstance(info, dict):
            problem = f"is a JSON {_json_kind(info)}, not an object"
        elif info.get("dtype") not in _DTYPES:
            problem = f"dtype is {str(info.get('dtype'))[:40]!r}, not one of {', '.join(_DTYPES)}"
        elif not _ints(info.get("shape")):
            problem = "shape is not a list of whole numbers from 0"
        elif not _ints(info.get("data_offsets")) or len(info["data_offsets"]) != 2:
            problem = "data_offsets is not two whole numbers from 0"
        if problem:
            raise ModelError(
                f"{path}: tensor {name[:80]!r} in the safetensors header: {problem}",
                hint="the .safetensors file is damaged: download it again",
            )
    return {name: info for name, info in header.items() if name != "__metadata__"}


def _ints(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def _json_kind(value: object) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(value), "null")


def weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files: the shards its index names, or every *.safetensors."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ModelError(f"{index}: not a usable weight index ({exc})", hint="download the model again") from None
        return [folder / name for name in names]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelError(
            f"model folder {folder} has no .safetensors weights",
            hint="download the model's safetensors files, or pass a .gguf file",
        )
    return files


def build(
    config: Config, state: Mapping[str, torch.Tensor], dtype: torch.dtype, device: str = "cpu", where: str = "the model"
) -> Qwen2:
    """The model with these weights (checkpoint names), in eval mode; tensors already in `dtype` on
    `device` are used as they are, not copied."""
    model = Qwen2(config)
    wanted = [name for name, _ in model.named_parameters()]
    missing = [name for name in wanted if name not in state]
    if missing:
        raise ModelError(f"{where}: weights missing ({', '.join(missing[:3])} ...)", hint="download the model again")
    weights = {}
    for name in wanted:
        tensor = state[name]
        if tensor.dtype != dtype or tensor.device != torch.device(device):
            tensor = tensor.to(device=device, dtype=dtype)
        weights[name] = tensor
    try:
        model.load_state_dict(weights, strict=False, assign=True)
    except RuntimeError as exc:  # a tensor of another shape than config.json says
        first = str(exc).strip().splitlines()[-1].strip()
        raise ModelError(
            f"{where}: the weights do not fit its config.json ({first[:160]})",
            hint="check that config.json belongs to these weights, or download the model again",
        ) from None
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = model.inv_freq.to(device)
    return model.eval().requires_grad_(False)


def load_qwen2(folder: Path, dtype: torch.dtype, device: str = "cpu") -> Qwen2:
    """The model in a model folder (config.json + safetensors), in eval mode, in `dtype` on `device`,
    with the folder's eos ids. Weights already in `dtype` on the CPU stay views of the mapped files."""
    try:
        raw = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelError(f"{folder / 'config.json'}: cannot read it ({exc})", hint="check the model folder") from None
    config = Config.from_dict(raw, str(folder / "config.json"))
    state: dict[str, torch.Tensor] = {}
    for path in weight_files(folder):
        state.update(read_safetensors(path))
    layers = {name.split(".")[2] for name in state if name.startswith("model.layers.")}
    if len(layers) != config.num_hidden_layers:  # checked before building: a config can claim any size
        raise ModelError(
            f"model folder {folder}: config.json says {config.num_hidden_layers} layers, the weights "
            f"have {len(layers)}",
            hint="check that config.json belongs to these weights",
        )
    model = build(config, state, dtype, device, where=f"model folder {folder}")
    model.folder = folder
    model.eos_token_ids = _eos_ids(raw, folder / "generation_config.json")
    return model


def _eos_ids(config: Mapping, generation: Path) -> tuple[int, ...]:
    """The eos_token_id of config.json and of generation_config.json when there is one (an id or a list)."""
    values = [config.get("eos_token_id")]
    try:
        if generation.is_file():  # not a FIFO: reading one would block
            values.append(json.loads(generation.read_text()).get("eos_token_id"))
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    ids = [v for value in values for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)]
    return tuple(dict.fromkeys(ids))
