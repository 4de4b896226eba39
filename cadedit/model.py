"""Model loading: which model, from where, on which device, in which dtype, with how many threads.

Contract: load_model(spec) returns a LoadedModel (tokenizer + causal LM in eval mode) for a hub id
(offline only if already in the Hugging Face cache), a local folder, or a .gguf file. A GGUF is
dequantised once (about a minute for 0.5B) and cached as safetensors under
$XDG_CACHE_HOME/cadedit/models/ (written atomically), so later runs load in seconds. Every failure
is a one-line ModelError with a hint. This is the only module that imports transformers.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cadedit.config import DEFAULT_MODEL, choose_model, configured_model  # noqa: F401 - re-exported
from cadedit.errors import ModelError

HINT = "pass --model PATH (a model folder or a .gguf file) or set CADEDIT_MODEL"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class LoadedModel:
    """A tokenizer and a causal LM ready for the decode loop, and how they were loaded."""

    model: Any
    tokenizer: Any
    name: str
    device: str
    dtype: torch.dtype
    threads: int
    context_limit: int
    load_seconds: float


# -- threads, device, dtype --------------------------------------------------------------------


def physical_cores() -> int:
    """Physical cores available to this process (SMT siblings counted once), from /proc/cpuinfo on Linux."""
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return logical
    cores = set(re.findall(r"physical id\s*:\s*(\d+)[\s\S]*?core id\s*:\s*(\d+)", text))
    return max(1, min(logical, len(cores) or logical))


def default_threads(cores: int | None = None, load: float | None = None) -> int:
    """Physical cores minus the ones other processes keep busy (1-minute load average), at least 1.

    Measured here (2-core CPU, 0.5B fp32): with another process holding a core, 2 threads decoded
    4x slower (890 ms/token) than 1 thread (222 ms): oversubscribing is far worse than idling a core.
    """
    cores = physical_cores() if cores is None else cores
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, cores - int(load + 0.5))


def choose_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} requested but CUDA is not available", hint="use --device cpu")
    return device


def _time_linear(dtype: torch.dtype, rows: int, reps: int = 5) -> float:
    """Best-of-reps seconds for one Qwen2.5-0.5B MLP projection on `rows` tokens."""
    weight = torch.randn(4864, 896, dtype=dtype)
    x = torch.randn(rows, 896, dtype=dtype)
    for _ in range(2):  # warm-up: oneDNN picks and JITs its kernel on the first calls
        torch.nn.functional.linear(x, weight)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.nn.functional.linear(x, weight)
        best = min(best, time.perf_counter() - start)
    return best


def cpu_prefers_bf16() -> bool:
    """Whether bf16 beats fp32 on this CPU for both a decode step (1 row) and a splice (64 rows).

    CPUs differ: with AMX/AVX512-BF16 (this dev box) bf16 ran a 512-token prefill in 0.98 s vs
    3.5 s fp32 and a 64-token splice in 0.25 s vs 0.66 s; without them (the machine in the issue)
    bf16 decode was 2x faster but a 64-token prefill 3x slower. Copy-as-Decode is prefill-heavy,
    so we probe the two shapes (about 50 ms) instead of trusting CPU flags.
    """
    return _time_linear(torch.bfloat16, 64) < _time_linear(torch.float32, 64) and _time_linear(
        torch.bfloat16, 1
    ) < 1.25 * _time_linear(torch.float32, 1)


def choose_dtype(dtype: str, device: str) -> torch.dtype:
    names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16}
    if dtype != "auto":
        if dtype not in names:
            raise ModelError(f"unknown dtype {dtype!r}", hint="use auto, fp32, bf16 or fp16")
        return names[dtype]
    if device.startswith("cuda"):
        return torch.bfloat16
    return torch.bfloat16 if cpu_prefers_bf16() else torch.float32


# -- GGUF conversion cache ---------------------------------------------------------------------


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cadedit" / "models"


def gguf_cache_dir(path: Path) -> Path:
    """Where the converted weights of a GGUF live: keyed by name, size and mtime (no 500 MB hash)."""
    st = path.stat()
    return cache_root() / f"{path.stem}-{st.st_size}-{st.st_mtime_ns}"


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file() and any(
        folder.glob("*.safetensors")
    )


def convert_gguf(path: Path) -> Path:
    """Dequantise a GGUF into a plain safetensors folder in the cache (once); return the folder."""
    target = gguf_cache_dir(path)
    if _is_complete(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.bfloat16)
        # The weights are dequantised now; drop the GGUF marker so the folder saves as a plain checkpoint.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        try:
            os.rename(tmp, target)  # atomic: readers see no folder or a complete one
        except OSError:
            if not _is_complete(target):  # lost a race only if the winner finished
                raise
    except Exception as exc:
        raise ModelError(f"{path}: cannot convert GGUF ({type(exc).__name__}: {exc})",
                         hint="check the file is a complete GGUF of a Qwen2-family model; `pip install gguf`") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# -- loading -----------------------------------------------------------------------------------


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _source(spec: str) -> tuple[str, bool]:
    """(what to pass to from_pretrained, whether it is a hub id) for --model SPEC."""
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelError(f"model file {spec} not found", hint=HINT)
        return str(convert_gguf(path)), False
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder {spec} has no config.json", hint=HINT)
        if not any((path / name).is_file() for name in _TOKENIZER_FILES):
            raise ModelError(f"model folder {spec} has no tokenizer files ({', '.join(_TOKENIZER_FILES[:2])} ...)",
                             hint="copy the tokenizer files of the model next to its config.json")
        return str(path), False
    if path.exists() or not _HUB_ID.match(spec):
        raise ModelError(f"model {spec!r} is neither a model folder, a .gguf file nor a hub id", hint=HINT)
    return spec, True


def _from_pretrained(source: str, hub: bool, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from safetensors import SafetensorError

    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=hub and _offline())
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=hub and _offline())
    except SafetensorError as exc:  # a truncated or damaged download
        raise ModelError(f"cannot load the weights of model {source} ({str(exc).strip()[:200]})",
                         hint="the .safetensors file is damaged or incomplete: download it again") from None
    except (OSError, ValueError) as exc:
        where = f"{source} is not in the local Hugging Face cache and cannot be downloaded" if hub else f"{source}"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load model {where} ({first[:200]})", hint=HINT) from None
    return tokenizer, model


def _offline() -> bool:
    return any(os.environ.get(v, "") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def load_model(spec: str | None = None, device: str = "auto", dtype: str = "auto",
               threads: int | None = None) -> LoadedModel:
    """Load tokenizer + model. spec: a hub id, a model folder or a .gguf file (None: choose_model())."""
    start = time.perf_counter()
    spec = spec or choose_model()
    threads = threads or default_threads()
    torch.set_num_threads(threads)
    device = choose_device(device)
    source, hub = _source(spec)
    torch_dtype = choose_dtype(dtype, device)
    tokenizer, model = _from_pretrained(source, hub, torch_dtype)
    model.to(device).eval()
    if tokenizer.chat_template is None:
        raise ModelError(f"model {spec} has no chat template", hint="use an Instruct model")
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 32768)
    return LoadedModel(model, tokenizer, spec, device, torch_dtype, threads, limit, time.perf_counter() - start)


def new_cache(loaded: LoadedModel):
    """An empty KV cache for one decode (transformers' DynamicCache)."""
    from transformers import DynamicCache

    return DynamicCache(config=loaded.model.config)


def render_chat(tokenizer, messages: list[dict[str, str]]) -> str:
    """The prompt text for chat messages, ending with the assistant's turn header."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of text with no special tokens added (the text may contain chat specials itself)."""
    return list(tokenizer.encode(text, add_special_tokens=False))
