"""A GGUF file's metadata and the tokenizer it carries, read without llama.cpp, transformers or torch.

Contract: read_metadata(path) returns the key/value section of a GGUF (v2/v3) as a dict (arrays of
numbers as numpy arrays, of strings as lists); gguf_tokenizer(path, meta) builds cadedit's Tokenizer
from the GGUF's own vocabulary, merges, token types and chat template: the same pieces, the same
merges and Qwen2's pre-tokenisation as the model folder's tokenizer.json, so both backends feed
the same ids for the same prompt (tests/test_llama.py checks it). A file that is not a GGUF of a
byte-level BPE model cadedit can serve is a one-line ModelError naming the file and the field.
"""

from __future__ import annotations

import functools
import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cadedit.errors import ModelError
from cadedit.backends.torch.tokenizer import Tokenizer

MAGIC = b"GGUF"
ARCHITECTURES = ("qwen2",)  # what cadedit's prompts, grammar and tests are written for

# Qwen2's pre-tokenizer (its tokenizer.json's Split regex); llama.cpp names it "qwen2".
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLITS = {"qwen2": QWEN2_SPLIT}

# GGUF value types: struct format of the scalar ones, 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")  # a string's length
DEFAULT_ALIGNMENT = 32  # of a GGUF's data section, where general.alignment does not say

# llama.cpp's token types (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class _Reader:
    def __init__(self, data, path: Path):
        self.data, self.at, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ModelError(
                f"{self.path}: not a whole GGUF file (its metadata ends early)", hint="download the model file again"
            )
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value

    def string(self) -> str:
        return self.strings(1)[0]

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ModelError(f"{self.path}: unknown GGUF value type {kind}", hint="download the model file again")
        inner, n = self.take("<I"), self.take("<Q")
        if inner in _NUMPY:
            width = np.dtype(_NUMPY[inner]).itemsize
            if self.at + n * width > len(self.data):
                raise ModelError(
                    f"{self.path}: not a whole GGUF file (an array runs past its end)",
                    hint="download the model file again",
                )
            array = np.frombuffer(self.data, _NUMPY[inner], n, self.at).copy()
            self.at += n * width
            return array
        if inner == _STRING:
            return self.strings(n)
        return [self.value(inner) for _ in range(n)]

    def strings(self, n: int) -> list[str]:
        """n strings in a row (one, or a vocabulary and its merges: hundreds of thousands, on every cold
        start, so the loop keeps what it reads in locals)."""
        data, at, end, size_of = self.data, self.at, len(self.data), _LENGTH.unpack_from
        out: list[str] = []
        add = out.append
        for _ in range(n):
            if at + 8 > end:
                raise ModelError(
                    f"{self.path}: not a whole GGUF file (its metadata ends early)",
                    hint="download the model file again",
                )
            (size,) = size_of(data, at)
            at += 8
            if at + size > end:
                raise ModelError(
                    f"{self.path}: not a whole GGUF file (a string runs past its end)",
                    hint="download the model file again",
                )
            add(data[at : at + size].decode("utf-8", errors="surrogateescape"))
            at += size
        self.at = at
        return out


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor's data lies in the file: its dimensions as stored (ggml's order: the row length
    first), its ggml type id, and the file offset its data starts at."""

    name: str
    dims: tuple[int, ...]
    kind: int
    start: int


def read_metadata(path: Path) -> dict:
    """The key/value metadata of a GGUF file (not its tensors)."""
    return tensor_infos(path)[0]


def tensor_names(path: Path) -> tuple[dict, list[str]]:
    """The metadata and the names of the tensors the file holds."""
    meta, infos = tensor_infos(path)
    return meta, [info.name for info in infos]


def tensor_infos(path: Path) -> tuple[dict, tuple[TensorInfo, ...]]:
    """The metadata and the tensor infos that follow it. Read once per file version in a process:
    check_model and the load both need them, and the vocabulary alone is a few hundred ms to read."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelError(
            f"{path}: cannot read the model file ({exc.strerror or exc})", hint="pass a .gguf model file"
        ) from None
    return _read(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _read(path: Path, size: int, mtime_ns: int) -> tuple[dict, tuple[TensorInfo, ...]]:
    try:
        with open(path, "rb") as f:
            if f.read(4) != MAGIC:
                raise ModelError(f"{path}: not a GGUF file (no GGUF magic)", hint="pass a .gguf model file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                reader = _Reader(data, path)
                reader.at = 4
                version = reader.take("<I")
                if version not in (2, 3):
                    raise ModelError(
                        f"{path}: GGUF version {version} (cadedit reads versions 2 and 3)",
                        hint="convert the model with a current llama.cpp",
                    )
                count = reader.take("<Q")
                meta: dict = {}
                for _ in range(reader.take("<Q")):
                    key = reader.string()
                    meta[key] = reader.value(reader.take("<I"))
                return meta, _tensor_infos(reader, count, meta.get("general.alignment", DEFAULT_ALIGNMENT))
    except OSError as exc:
        raise ModelError(
            f"{path}: cannot read the model file ({exc.strerror or exc})", hint="pass a .gguf model file"
        ) from None
    except ValueError as exc:  # mmap of an empty file
        raise ModelError(f"{path}: not a GGUF file ({exc})", hint="pass a .gguf model file") from None


def _tensor_infos(reader: _Reader, count: int, alignment: object) -> tuple[TensorInfo, ...]:
    """Each tensor info (name, dimensions, type, offset: at least 24 bytes each); the offsets count
    from the data section, which starts at the next multiple of `alignment` after the infos."""
    if count > (len(reader.data) - reader.at) // 24:
        raise ModelError(
            f"{reader.path}: not a whole GGUF file (it claims {count} tensors)", hint="download the model file again"
        )
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
        raise ModelError(
            f"{reader.path}: GGUF field general.alignment is {alignment!r}, not a positive integer",
            hint="download the model file again",
        )
    infos = []
    for _ in range(count):
        name = reader.string()
        n = reader.take("<I")
        if n > 8:  # ggml's tensors have at most 4 dimensions
            raise ModelError(
                f"{reader.path}: tensor {name!r} claims {n} dimensions", hint="download the model file again"
            )
        dims = tuple(reader.take("<Q") for _ in range(n))
        infos.append((name, dims, reader.take("<I"), reader.take("<Q")))
    data = -(-reader.at // alignment) * alignment
    return tuple(TensorInfo(name, dims, kind, data + offset) for name, dims, kind, offset in infos)


def check_model(path: Path) -> None:
    """What llama.cpp and the torch converter trust without checking, checked first: the architecture,
    the layer count against the layers whose tensors the file holds (a count of 0 aborted llama.cpp's
    process, 1000 made the converter build layers for minutes), and a vocabulary in which no token's
    text repeats (llama.cpp aborts on one). A one-line ModelError naming the field."""
    meta, names = tensor_names(path)
    arch = architecture(path, meta)
    blocks = meta.get(f"{arch}.block_count")
    held = {int(name.split(".")[1]) for name in names if name.startswith("blk.") and name.split(".")[1].isdigit()}
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks <= 0 or held != set(range(blocks)):
        raise ModelError(
            f"{path}: GGUF field {arch}.block_count is {blocks!r}, but the file holds the tensors "
            f"of {len(held)} layers",
            hint="use a whole Qwen2 / Qwen2.5 GGUF",
        )
    tokens = _field(path, meta, "tokenizer.ggml.tokens", list)
    if len(set(tokens)) != len(tokens):
        seen: dict[str, int] = {}
        first, again = next((seen[t], k) for k, t in enumerate(tokens) if seen.setdefault(t, k) != k)
        raise ModelError(
            f"{path}: GGUF vocabulary repeats token {tokens[again]!r} (ids {first} and {again})",
            hint="use a Qwen2 / Qwen2.5 GGUF",
        )


def architecture(path: Path, meta: dict) -> str:
    """general.architecture, refused unless cadedit serves it."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelError(
            f"{path}: GGUF architecture {arch!r} is not served (general.architecture; cadedit serves "
            f"{', '.join(ARCHITECTURES)})",
            hint="use a Qwen2 / Qwen2.5 GGUF",
        )
    return arch


def _field(path: Path, meta: dict, key: str, kind: type):
    value = meta.get(key)
    if not isinstance(value, kind):
        raise ModelError(
            f"{path}: GGUF field {key} is missing or not a {kind.__name__}", hint="use a Qwen2 / Qwen2.5 GGUF"
        )
    return value


def tokenizer_json(path: Path, meta: dict) -> str:
    """The GGUF's tokenizer as a tokenizer.json document (what the model folder would carry)."""
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ModelError(
            f"{path}: tokenizer.ggml.model is {model!r}, not a byte-level BPE ('gpt2')",
            hint="use a Qwen2 / Qwen2.5 GGUF",
        )
    pre = meta.get("tokenizer.ggml.pre", "qwen2")
    if pre not in _SPLITS:
        raise ModelError(
            f"{path}: tokenizer.ggml.pre {pre!r} is not a pre-tokenizer cadedit knows ({', '.join(_SPLITS)})",
            hint="use a Qwen2 / Qwen2.5 GGUF",
        )
    tokens = _field(path, meta, "tokenizer.ggml.tokens", list)
    merges = _field(path, meta, "tokenizer.ggml.merges", list)
    types = meta.get("tokenizer.ggml.token_type")
    types = np.full(len(tokens), NORMAL) if types is None else np.asarray(types)
    if len(types) != len(tokens):
        raise ModelError(
            f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens",
            hint="download the model file again",
        )
    vocab, added = {}, []
    for tid, (piece, kind) in enumerate(zip(tokens, types.tolist())):
        if kind in (CONTROL, USER_DEFINED):
            added.append(
                {
                    "id": tid,
                    "content": piece,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": kind == USER_DEFINED,
                    "special": kind == CONTROL,
                }
            )
        elif kind != UNUSED:
            vocab.setdefault(piece, tid)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": _SPLITS[pre]}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    return json.dumps(document)  # ASCII with escapes: the same document, written about twice as fast


def gguf_tokenizer(path: Path, meta: dict):
    """cadedit's Tokenizer for a GGUF: its vocabulary and merges, its special tokens, its chat template."""
    from tokenizers import Tokenizer as Backend

    try:
        backend = Backend.from_str(tokenizer_json(path, meta))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception for a bad vocabulary
        raise ModelError(
            f"{path}: cannot build the GGUF's tokenizer ({str(exc)[:160]})", hint="use a Qwen2 / Qwen2.5 GGUF"
        ) from None
    tokens = meta["tokenizer.ggml.tokens"]
    config = {}
    for name in ("bos", "eos", "padding", "unknown"):
        tid = meta.get(f"tokenizer.ggml.{name}_token_id")
        if isinstance(tid, int) and 0 <= tid < len(tokens):
            config[{"padding": "pad_token", "unknown": "unk_token"}.get(name, f"{name}_token")] = tokens[tid]
    template = meta.get("tokenizer.chat_template")
    return Tokenizer(
        backend, config, template if isinstance(template, str) else None, f"{path} tokenizer.chat_template"
    )


def eos_ids(meta: dict) -> tuple[int, ...]:
    """The end-of-sequence and end-of-turn ids the GGUF names."""
    ids = (meta.get("tokenizer.ggml.eos_token_id"), meta.get("tokenizer.ggml.eot_token_id"))
    return tuple(int(i) for i in ids if isinstance(i, int))


def context_length(path: Path, meta: dict, arch: str) -> int:
    value = meta.get(f"{arch}.context_length")
    if not isinstance(value, int) or value <= 0:
        raise ModelError(
            f"{path}: GGUF field {arch}.context_length is missing or not a positive integer",
            hint="use a Qwen2 / Qwen2.5 GGUF",
        )
    return value


# -- 4-bit weights as stored ------------------------------------------------------------------

# Block formats whose weights are q * scale + low with q in 0..15 and one scale and low per 32
# weights: torch's int4 kernel for one-token steps (cadedit.backends.torch.steps) computes with exactly that, so
# these pass to it as stored instead of being quantised a second time. Bytes per block, weights.
FOUR_BIT = {"Q4_0": (18, 32), "Q4_1": (20, 32), "Q4_K": (144, 256)}
GGML_TYPES = {2: "Q4_0", 3: "Q4_1", 12: "Q4_K"}  # ggml's type ids of the FOUR_BIT formats


def four_bit_tensors(path: Path) -> tuple[dict, set[str]]:
    """The GGUF's tensors stored in a 4-bit block format (FOUR_BIT), by name, each as a function that
    decodes it: (q uint8 [rows, cols] in 0..15, scale, low float32 [rows, cols // 32]), the weight
    being q * scale + low; and the names of all its tensors. The file is mapped, not read: decoding
    on demand keeps one tensor's copy in memory at a time, and a load whose step weights come from
    the cache reads only the infos (tensor_infos, milliseconds where the gguf package's reader parses
    every metadata field into objects for seconds)."""
    _, infos = tensor_infos(path)
    found: dict = {}
    file = None
    for info in infos:
        kind = GGML_TYPES.get(info.kind)
        if kind is None or len(info.dims) != 2:
            continue
        cols, rows = info.dims
        size, per = FOUR_BIT[kind]
        if cols % per:
            raise ModelError(
                f"{path}: tensor {info.name!r} has rows of {cols} weights, not whole {kind} blocks",
                hint="download the model file again",
            )
        end = info.start + rows * cols // per * size
        if file is None:
            file = np.memmap(path, np.uint8, mode="r")
        if end > len(file):
            raise ModelError(
                f"{path}: not a whole GGUF file (tensor {info.name!r} runs past its end)",
                hint="download the model file again",
            )
        found[info.name] = lambda a=info.start, b=end, kind=kind, rows=rows, cols=cols: decode_four_bit(
            file[a:b], kind, rows, cols
        )
    return found, {info.name for info in infos}


# cadedit.backends.torch.qwen2's linear layers (Hugging Face names) and the GGUF tensors llama.cpp's converter
# writes them as.
_LINEARS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def four_bit_layers(path: Path) -> dict:
    """four_bit_tensors by the names of the model's linear layers (model.layers.N.mlp.up_proj,
    lm_head: the GGUF's output tensor, else its token embedding as a tied head)."""
    tensors, names = four_bit_tensors(path)
    found = {}
    for name, decode in tensors.items():
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight":
            layer = next((hf for hf, short in _LINEARS.items() if short == parts[2]), None)
            if layer:
                found[f"model.layers.{parts[1]}.{layer}"] = decode
    head = "output.weight" if "output.weight" in names else "token_embd.weight"
    if head in tensors:
        found["lm_head"] = tensors[head]
    return found


def decode_four_bit(data: np.ndarray, kind: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One tensor's blocks (FOUR_BIT[kind]) as (q, scale, low) per 32 weights; see four_bit_tensors."""
    size, _ = FOUR_BIT[kind]
    blocks = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1, size)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # [n, 1]
    if kind == "Q4_K":
        dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
        sc, m = _q4k_scales(blocks[:, 4:16])
        nibbles = blocks[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
        q = (nibbles & 0x0F).reshape(-1, 8, 32)
        scale, low = d * sc, -dmin * m  # [n, 8]: one per 32 weights
    else:
        start = 2 if kind == "Q4_0" else 4
        qs = blocks[:, start : start + 16]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).reshape(-1, 1, 32)
        scale = d
        low = -8 * d if kind == "Q4_0" else blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    groups = cols // 32
    return (
        q.reshape(rows, cols),
        scale.reshape(rows, groups).astype(np.float32),
        low.reshape(rows, groups).astype(np.float32),
    )


def _q4k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's eight 6-bit scales and mins per block from their 12 packed bytes (ggml's get_scale_min_k4)."""
    packed = packed.astype(np.uint8)
    low4, high4, rest = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([low4 & 63, (rest & 0x0F) | ((low4 >> 6) << 4)], axis=1)
    m = np.concatenate([high4 & 63, (rest >> 4) | ((high4 >> 6) << 4)], axis=1)
    return sc.astype(np.float32), m.astype(np.float32)
