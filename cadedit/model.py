"""Model loading: which model, from where, on which device, in which dtype, with how many threads.

Contract: load_model(spec) returns a LoadedModel (tokenizer + causal LM in eval mode) for a hub id
(offline only if already in the Hugging Face cache), a local folder, or a .gguf file. A GGUF is
dequantised once (about a minute for 0.5B) and cached as safetensors under
$XDG_CACHE_HOME/cadedit/models/ (written atomically), so later runs load in seconds. Every failure
is a one-line ModelError with a hint. The model and tokenizer are cadedit's own (cadedit.qwen2,
cadedit.tokenizer); transformers is imported only to convert a GGUF (and to read a tokenizer that
has no tokenizer.json).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cadedit.config import DEFAULT_MODEL, choose_model, configured_model, user_cache  # noqa: F401 - re-exported
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
    phases: tuple[tuple[str, float], ...] = ()  # (phase, seconds) of the load, in order
    dtype_reason: str = ""
    int8_steps: bool = False  # one-token steps read int8 copies of the weights (cadedit.steps)
    backend: str = "torch"  # "torch" (cadedit.qwen2) or "llama" (cadedit.llamacpp: the GGUF through llama.cpp)
    backend_reason: str = ""


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


def default_threads(cores: int | None = None, busy: int | None = None) -> int:
    """Physical cores minus the ones other processes are running on right now, at least 1.

    Oversubscribing a core is far worse than idling one (README, Threads), so cores that other
    processes hold are left to them. What counts is the runnable tasks now (/proc/stat's
    procs_running, this process excluded, the least of a few samples), not the 1-minute load
    average: that one still counts cadedit's own previous run, so a second edit in a row ran on one
    core of two.
    """
    cores = physical_cores() if cores is None else cores
    if busy is None:
        busy = runnable_others()
    return max(1, cores - busy)


def runnable_others(samples: int = 5, gap: float = 0.002) -> int:
    """Tasks other than this one that are runnable now (the least of a few samples), 0 if unknown."""
    seen = []
    for i in range(samples):
        try:
            text = Path("/proc/stat").read_text()
        except OSError:
            return 0
        found = re.search(r"^procs_running\s+(\d+)", text, re.M)
        if not found:
            return 0
        seen.append(int(found.group(1)) - 1)  # this process is running while it reads
        if i + 1 < samples:
            time.sleep(gap)
    return max(0, min(seen))


def choose_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} requested but CUDA is not available", hint="use --device cpu")
    return device


def _time_linear(dtype: torch.dtype, rows: int, reps: int = 9, int8: bool = False,
                 shape: tuple[int, int] = (4864, 896)) -> float:
    """Median seconds for one linear layer (default: a Qwen2.5-0.5B MLP projection) on `rows` tokens
    (after a warm-up); int8: through the int8 weight kernel of one-token steps (cadedit.steps)."""
    out_features, in_features = shape
    weight = torch.randn(out_features, in_features, dtype=dtype)
    x = torch.randn(rows, in_features, dtype=dtype)
    if int8:
        q = torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8)
        scale = torch.rand(out_features, dtype=dtype)

        def run():
            torch._weight_int8pack_mm(x, q, scale)
    else:
        def run():
            torch.nn.functional.linear(x, weight)
    for _ in range(3):  # warm-up: oneDNN picks and JITs its kernel on the first calls
        run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2]


# An edit's model work, as the verify loop spends it on a 185-line file: ~2,900 tokens in
# multi-token forwards (prompt and accepted drafts) and ~25 one-token steps.
_WORK = ((128, 2900 / 128), (1, 25))


def _cpu_identity(threads: int) -> str:
    """This CPU's model name and feature flags, torch's version and the thread count, as one key."""
    import hashlib
    import platform

    try:
        info = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*:\s*(.*)", info)
        flags = re.search(r"flags\s*:\s*(.*)", info)
        cpu = f"{model.group(1) if model else ''}|{flags.group(1) if flags else ''}"
    except OSError:
        cpu = platform.processor()
    return hashlib.sha256(f"{cpu}|{torch.__version__}|{threads}".encode()).hexdigest()[:16]


def cpu_dtype(threads: int) -> tuple[torch.dtype, str]:
    """fp32 or bf16 for this CPU: whichever does an edit's model work faster, measured once per
    machine (CPU model and flags, torch version, threads; about 0.5 s) and cached, so every later
    run chooses the same. Returns the dtype and where the choice came from (shown by --verbose).

    CPUs differ: with AMX or AVX512-BF16, bf16 prefill is several times faster than fp32 while a
    one-token step can be slower; without them bf16 can be slower at both. A timing probe on every
    run picked differently from run to run on a busy machine; one careful measurement does not.
    """
    measured = ""

    def measure() -> str:
        nonlocal measured
        cost = {dt: sum(times * _time_linear(dt, rows) for rows, times in _WORK) for dt in (torch.float32, torch.bfloat16)}
        measured = f"fp32 {cost[torch.float32]:.2f} s, bf16 {cost[torch.bfloat16]:.2f} s"
        return "bfloat16" if cost[torch.bfloat16] < 0.8 * cost[torch.float32] else "float32"

    name, path = _measured_once(_cpu_identity(threads), ("float32", "bfloat16"), measure)
    return getattr(torch, name), (f"measured on this CPU now ({measured})" if measured
                                  else f"measured on this CPU earlier ({path})")


def cpu_int8_steps(threads: int) -> tuple[bool, str]:
    """Whether a bf16 model's one-token steps go faster through int8 weights on this CPU (cadedit.steps),
    measured once per machine like cpu_dtype: the int8 kernel must take under 0.8x bf16's time."""
    measured = ""

    def measure() -> str:
        nonlocal measured
        plain, int8 = _time_linear(torch.bfloat16, 1), _time_linear(torch.bfloat16, 1, int8=True)
        measured = f"bf16 {1e6 * plain:.0f} us, int8 {1e6 * int8:.0f} us per 4864x896 step"
        return "int8" if int8 < 0.8 * plain else "bf16"

    name, path = _measured_once(_cpu_identity(threads) + "|steps", ("int8", "bf16"), measure)
    reason = f"measured on this CPU now ({measured})" if measured else f"measured on this CPU earlier ({path})"
    return name == "int8", reason


def _measured_once(key: str, answers: tuple[str, ...], measure) -> tuple[str, Path]:
    """The answer stored for key in the per-machine measurement cache, or measure() stored there."""
    import json

    path = user_cache("cpu-dtype.json")
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    if known.get(key) in answers:
        return known[key], path
    answer = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({**known, key: answer}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: measure again next time
    return answer, path


def choose_dtype(dtype: str, device: str, threads: int = 1) -> tuple[torch.dtype, str]:
    """The dtype to load in, and why."""
    names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16, "bf16-int8": torch.bfloat16}
    if dtype != "auto":
        if dtype not in names:
            raise ModelError(f"unknown dtype {dtype!r}", hint="use auto, fp32, bf16, bf16-int8 or fp16")
        return names[dtype], "--dtype"
    if device.startswith("cuda"):
        return torch.bfloat16, "CUDA"
    return cpu_dtype(threads)


# -- backend: torch or llama.cpp ---------------------------------------------------------------


def choose_backend_for(setting: str, gguf: Path | None, device: str, dtype: str, threads: int) -> tuple[str, str]:
    """The backend that runs this model, and why. auto: a model folder, CUDA or an explicit --dtype
    keep torch; a GGUF runs on whichever does an edit's model work faster on this CPU, measured
    once per machine and model file (both sides in the same process) and cached."""
    from cadedit import llamacpp

    if setting == "torch":
        return "torch", "--backend torch"
    if setting == "llama":
        if gguf is None:
            raise ModelError("--backend llama runs a GGUF file, and this model is a folder or a hub id",
                             hint="pass --model FILE.gguf (or ollama:NAME), or use --backend torch")
        llamacpp.require()
        return "llama", "--backend llama"
    if gguf is None:
        return "torch", "a model folder runs on torch"
    if choose_device(device) != "cpu":
        return "torch", "CUDA runs on torch"
    if dtype != "auto":
        return "torch", f"--dtype {dtype} is a torch setting"
    if not llamacpp.available():
        return "torch", f"llama-cpp-python is not installed (pip install 'cadedit[{llamacpp.EXTRA}]')"
    variant, cost, measured = probe_llama(gguf, threads)

    def measure() -> str:
        nonlocal cost, measured
        from cadedit.gguf_file import read_metadata

        meta = read_metadata(gguf)
        if cost is None:  # the variant was measured in an earlier run: its cost again, for the comparison
            cost = llamacpp.edit_work_seconds(gguf, meta, threads, _WORK, *llamacpp.VARIANTS[variant])
            measured = f"an edit's model work: {variant} {cost:.2f} s"
        estimate, need = _torch_work_seconds(meta, threads)
        measured += f", torch {estimate:.2f} s"
        room = _available_memory()
        if room is not None and need > 0.8 * room:
            measured += f"; torch would need {need / 1e9:.1f} GB of weights, {room / 1e9:.1f} GB free"
            return "llama"
        return "llama" if cost <= estimate else "torch"

    answer, path = _measured_once(backend_key(gguf, threads), ("torch", "llama"), measure)
    return answer, (f"measured on this CPU now ({measured})" if measured else f"measured on this CPU earlier ({path})")


def probe_llama(gguf: Path, threads: int) -> tuple[str, float | None, str]:
    """The llama.cpp configuration (llamacpp.VARIANTS) that does an edit's model work fastest on this
    CPU for this model file, measured once and cached; with its cost and what was measured when
    measured now (else None and "")."""
    from cadedit import llamacpp
    from cadedit.gguf_file import read_metadata

    costs: dict[str, float] = {}

    def measure() -> str:
        meta = read_metadata(gguf)
        for name, (repack, flash) in llamacpp.VARIANTS.items():
            costs[name] = llamacpp.edit_work_seconds(gguf, meta, threads, _WORK, repack, flash)
        return min(costs, key=costs.get)

    variant, _ = _measured_once(backend_key(gguf, threads) + "|llama", tuple(llamacpp.VARIANTS), measure)
    measured = ("an edit's model work: " + ", ".join(f"{name} {cost:.2f} s" for name, cost in costs.items())) if costs else ""
    return variant, costs.get(variant), measured


def backend_key(gguf: Path, threads: int) -> str:
    """The measurement cache's key for the backend of this model file on this CPU and thread count."""
    from cadedit import llamacpp

    st = gguf.stat()
    return f"{_cpu_identity(threads)}|backend|{gguf.name}:{st.st_size}|{llamacpp.version()}"


def llama_variant(gguf: Path, threads: int) -> str:
    """llama.cpp's configuration for this model file: as the backend probe measured, else llama.cpp's
    own defaults (an explicit --backend llama does not wait for a probe)."""
    import json

    from cadedit.llamacpp import VARIANTS

    try:
        known = json.loads(user_cache("cpu-dtype.json").read_text()).get(backend_key(gguf, threads) + "|llama")
    except (OSError, ValueError, AttributeError):
        known = None
    return known if known in VARIANTS else "llama"


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _torch_work_seconds(meta: dict, threads: int) -> tuple[float, int]:
    """torch's time for an edit's model work (_WORK) on a model of this GGUF's shape, from its linear
    layers timed in the dtype torch would load it in (and int8 for steps where chosen), without
    converting the GGUF; and the bytes its weights would take."""
    arch = meta.get("general.architecture", "")
    hidden, inter = int(meta[f"{arch}.embedding_length"]), int(meta[f"{arch}.feed_forward_length"])
    heads, kv = int(meta[f"{arch}.attention.head_count"]), int(meta[f"{arch}.attention.head_count_kv"])
    layers, vocab = int(meta[f"{arch}.block_count"]), len(meta.get("tokenizer.ggml.tokens", ())) or 151936
    head_dim = hidden // heads
    torch.set_num_threads(threads)
    dtype, _ = cpu_dtype(threads)
    int8 = dtype == torch.bfloat16 and cpu_int8_steps(threads)[0]
    shapes = [(hidden, hidden), (kv * head_dim, hidden), (kv * head_dim, hidden), (hidden, hidden),
              (inter, hidden), (inter, hidden), (hidden, inter)]
    total = 0.0
    for rows, times in _WORK:
        layer = sum(_time_linear(dtype, rows, reps=3, int8=int8 and rows == 1, shape=shape) for shape in shapes)
        head = 8 * _time_linear(dtype, 1, reps=3, int8=int8, shape=(vocab // 8, hidden))  # one row through the LM head
        total += times * (layers * layer + head)
    params = layers * sum(a * b for a, b in shapes) + 2 * vocab * hidden
    return total, params * torch.tensor([], dtype=dtype).element_size()


# -- GGUF conversion cache ---------------------------------------------------------------------


def cache_root() -> Path:
    """Where converted GGUF weights live."""
    return user_cache("models")


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
    """(what to pass to from_pretrained, whether it is a hub id) for --model SPEC (a GGUF is converted)."""
    from cadedit.model_files import gguf_path

    gguf = gguf_path(spec)
    if gguf is not None:
        return str(convert_gguf(gguf)), False
    path = Path(spec).expanduser()
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


_HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "merges.txt"]  # what a Qwen2 folder needs, no other formats


def _folder(source: str, hub: bool) -> Path:
    """The model folder of --model: the folder itself, or a hub id's snapshot in the local cache."""
    if not hub:
        return Path(source)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=_offline(), allow_patterns=_HUB_FILES))
    except Exception as exc:  # noqa: BLE001 - the hub client raises many kinds for "not here"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load model {source}: not in the local Hugging Face cache and cannot be "
                         f"downloaded ({first[:160]})", hint=HINT) from None


def _load_tokenizer(folder: Path):
    """tokenizer.json read directly (cadedit.tokenizer); a folder with only vocab + merges files goes
    through transformers, which can build one from them."""
    if (folder / "tokenizer.json").is_file():
        from cadedit.tokenizer import Tokenizer

        return _round_trips(Tokenizer.from_folder(folder), folder)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        raise ModelError(f"cannot load the tokenizer of model {folder} ({str(exc).strip()[:200]})", hint=HINT) from None
    return _round_trips(tokenizer, folder)


_PROBE_TEXT = "def add(a, b):\n    return a + b  # 42\n"


def _round_trips(tokenizer, folder: Path):
    """The tokenizer, if it turns text into ids and back into the same text; else a one-line error
    (a folder without its tokenizer.json can load a fallback that encodes everything to nothing)."""
    try:
        ids = list(tokenizer.encode(_PROBE_TEXT, add_special_tokens=False))
        same = bool(ids) and tokenizer.decode(ids) == _PROBE_TEXT
    except Exception:  # noqa: BLE001 - any failure here means the same: this tokenizer cannot be used
        same = False
    if not same:
        raise ModelError(f"model folder {folder}: its tokenizer does not encode and decode text faithfully "
                         "(tokenizer.json missing or damaged?)", hint="copy the model's tokenizer.json next to its config.json")
    return tokenizer


def _offline() -> bool:
    return any(os.environ.get(v, "") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def process_seconds() -> float | None:
    """Seconds since this process started (interpreter start included; Linux /proc), else None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


FIRST_FORWARD: list[float] = []  # process_seconds() when this process ran its first forward


def load_model(spec: str | None = None, device: str = "auto", dtype: str = "auto",
               threads: int | None = None, backend: str | None = None) -> LoadedModel:
    """Load tokenizer + model. spec: a hub id, a model folder, a .gguf file or an Ollama / LM Studio
    name (None: choose_model()); backend: auto, torch or llama (None: config.choose_backend())."""
    from cadedit.config import choose_backend
    from cadedit.model_files import gguf_path

    start = time.perf_counter()
    before = process_seconds()
    phases: list[tuple[str, float]] = [("process start to load", before)] if before is not None and not FIRST_FORWARD else []
    spec = spec or choose_model()
    threads = threads or default_threads()
    gguf = gguf_path(spec)
    name, reason = choose_backend_for(choose_backend(backend), gguf, device, dtype, threads)
    if name == "llama":
        return _load_llama(spec, gguf, threads, reason, start, phases, llama_variant(gguf, threads))
    loaded = _load_torch(spec, device, dtype, threads, start, phases)
    return dataclasses.replace(loaded, backend_reason=reason)


def _load_llama(spec: str, gguf: Path, threads: int, reason: str, start: float, phases: list,
                variant: str) -> LoadedModel:
    from cadedit.gguf_file import gguf_tokenizer, read_metadata
    from cadedit.llamacpp import VARIANTS, LlamaModel, weights_name

    t = time.perf_counter()
    meta = read_metadata(gguf)
    tokenizer = gguf_tokenizer(gguf, meta)
    phases.append(("tokenizer", time.perf_counter() - t))
    t = time.perf_counter()
    repack, flash = VARIANTS[variant]
    model = LlamaModel(gguf, meta, threads, repack=repack, flash=flash)
    phases.append(("weights", time.perf_counter() - t))
    if tokenizer.chat_template is None:
        raise ModelError(f"model {spec} has no chat template (tokenizer.chat_template)", hint="use an Instruct model")
    return LoadedModel(model, tokenizer, spec, "cpu", weights_name(meta), threads, model.n_ctx,
                       time.perf_counter() - start, tuple(phases),
                       f"the GGUF's own weights through llama.cpp ({'repacked' if repack else 'as stored'})",
                       backend="llama", backend_reason=reason)


def _load_torch(spec: str, device: str, dtype: str, threads: int, start: float, phases: list) -> LoadedModel:
    def phase(name: str, since: float) -> float:
        now = time.perf_counter()
        phases.append((name, now - since))
        return now

    torch.set_num_threads(threads)
    device = choose_device(device)
    source, hub = _source(spec)
    t = phase("find", start)
    torch_dtype, why = choose_dtype(dtype, device, threads)
    t = phase("dtype", t)
    folder = _folder(source, hub)
    tokenizer = _load_tokenizer(folder)
    t = phase("tokenizer", t)
    from cadedit.qwen2 import load_qwen2

    model = load_qwen2(folder, torch_dtype, device)
    t = phase("weights", t)
    if tokenizer.chat_template is None:
        raise ModelError(f"model {spec} has no chat template", hint="use an Instruct model")
    int8 = dtype == "bf16-int8"
    if dtype == "auto" and device == "cpu" and torch_dtype == torch.bfloat16:
        int8, step_why = cpu_int8_steps(threads)
        why += f"; one-token steps {'int8' if int8 else 'bf16'}, {step_why}"
    if int8:
        from cadedit.steps import use_int8_steps

        why += f"; int8 step weights {use_int8_steps(model, _identity(model, spec, torch_dtype))}"
        phase("int8 step weights", t)
    limit = model.config.max_position_embeddings
    return LoadedModel(model, tokenizer, spec, device, torch_dtype, threads, limit, time.perf_counter() - start,
                       tuple(phases), why, int8)


def new_cache(loaded: LoadedModel):
    """An empty KV cache for one decode (cadedit.qwen2.KVCache)."""
    return loaded.model.new_cache()


class CachedLM:
    """The language-model interface of the decode loop: one KV cache that one feeds ids (getting
    the logits of the last `keep` positions) and crops back.

    It remembers the ids its cache holds, so a new decode whose prompt shares a prefix with the
    last one (another try of the same edit, the next file with the same instruction) feeds only
    the rest: reuse(prompt) crops the cache to the common prefix and says how long it is.
    keep: only those positions go through the LM head (151,936 wide for Qwen: a quarter of the
    0.5B model's FLOPs per token).
    """

    def __init__(self, model, cache):
        self.model, self.cache = model, cache
        self.ids: list[int] = []
        self.rows: list[tuple[Any, list[int]]] = []  # after fork(k): (cache, ids) of rows 1 .. k-1

    @torch.inference_mode()
    def feed(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        return self.feed_rows([0], [ids], [keep])[0]  # [keep, V]

    @torch.inference_mode()
    def feed_rows(self, rows: Sequence[int], ids: Sequence[Sequence[int]], keeps: Sequence[int]) -> list[torch.Tensor]:
        """Feed row i (0: the cache itself, then the rows fork made) its ids, all in one forward;
        the logits of each row's last keeps[i] positions ([keep, V] each)."""
        tensors = [torch.tensor(list(row_ids), dtype=torch.long, device=self.model.device) for row_ids in ids]  # [T_i]
        if not FIRST_FORWARD:
            FIRST_FORWARD.append(process_seconds() or 0.0)
        caches = [self._row(r)[0] for r in rows]
        try:
            if len(rows) == 1:
                logits = [self.model(tensors[0], caches[0], keeps[0])]
            else:
                logits = self.model.forward_rows(tensors, caches, list(keeps))
        except BaseException:
            self.reset()  # a forward cut short leaves the cache in an unknown state
            raise
        for r, row_ids in zip(rows, ids):
            self._row(r)[1].extend(row_ids)
        return logits

    def _row(self, r: int) -> tuple[Any, list[int]]:
        return (self.cache, self.ids) if r == 0 else self.rows[r - 1]

    def fork(self, k: int) -> None:
        """k rows: row 0 is the cache, rows 1 .. k-1 start as copies of it; fork(1) drops them."""
        for cache, _ in self.rows[k - 1 :]:
            getattr(cache, "drop", lambda: None)()
        del self.rows[k - 1 :]
        while len(self.rows) < k - 1:
            self.rows.append((self.cache.copy(), list(self.ids)))

    def copy_row(self, source: int, row: int) -> None:
        """Row `row`, which holds a prefix of row `source`'s positions, takes the rest of them (no forward)."""
        (from_cache, from_ids), (cache, ids) = self._row(source), self._row(row)
        cache.extend_from(from_cache)
        ids.extend(from_ids[len(ids) :])

    def crop(self, n: int) -> None:
        """Forget the last n positions (drafted tokens that were not kept)."""
        self.crop_row(0, n)

    def crop_row(self, r: int, n: int) -> None:
        if n:
            cache, ids = self._row(r)
            cache.crop(cache.length - n)
            del ids[-n:]

    def reuse(self, prompt_ids: Sequence[int]) -> int:
        """Keep the cache of the longest common prefix with prompt_ids (at least one id left to feed)."""
        common = 0
        limit = min(len(self.ids), len(prompt_ids) - 1)
        while common < limit and self.ids[common] == prompt_ids[common]:
            common += 1
        self.crop(len(self.ids) - common)
        return common

    def reset(self) -> None:
        self.fork(1)
        self.cache = self.model.new_cache()
        self.ids = []


_LMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def language_model(loaded: LoadedModel) -> CachedLM:
    """The one CachedLM of a loaded model (its cache is reused from one decode to the next)."""
    lm = _LMS.get(loaded.model)
    if lm is None:
        lm = _LMS[loaded.model] = CachedLM(loaded.model, new_cache(loaded))
    return lm


def token_bytes(loaded: LoadedModel) -> Sequence[bytes]:
    """Each token id's bytes, as wide as the model's logits."""
    from cadedit.vocab import token_bytes_of

    return token_bytes_of(loaded.tokenizer, n_logits=loaded.model.config.vocab_size)


def eos_ids(loaded: LoadedModel) -> frozenset[int]:
    """EOS ids: the tokenizer's, the model folder's configs' and Qwen's <|endoftext|>."""
    tokenizer = loaded.tokenizer
    ids = {tokenizer.eos_token_id, *getattr(loaded.model, "eos_token_ids", ())}
    ids.add(tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    return frozenset(int(i) for i in ids if i is not None and i != tokenizer.unk_token_id)


def render_chat(tokenizer, messages: list[dict[str, str]]) -> str:
    """The prompt text for chat messages, ending with the assistant's turn header."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


_SPECIALS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _specials(tokenizer) -> tuple[str, ...]:
    """The added tokens' texts, once per tokenizer (encode runs for every draft)."""
    found = _SPECIALS.get(tokenizer)
    if found is None:
        found = _SPECIALS[tokenizer] = tuple(str(t) for t in tokenizer.added_tokens_decoder.values() if str(t))
    return found


def _backend(tokenizer):
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of plain text (a file, an instruction): a special token's text in it ("<|im_end|>" in
    a Markdown file) is encoded as the characters it is, never as the control token."""
    if not any(special in text for special in _specials(tokenizer)):
        return list(tokenizer.encode(text, add_special_tokens=False))
    backend = _backend(tokenizer)
    before = backend.encode_special_tokens
    backend.encode_special_tokens = True
    try:
        return list(backend.encode(text, add_special_tokens=False).ids)
    finally:
        backend.encode_special_tokens = before


_SENTINEL = "\x00cadedit-content-{}\x00"


def chat_prompt(tokenizer, messages: list[dict[str, str]], suffix: str = "") -> tuple[str, list[int]]:
    """The chat prompt (render_chat + suffix) and its ids: only the template's own markers are special
    tokens; the messages' contents and the suffix are plain text (encode)."""
    prompt = render_chat(tokenizer, messages) + suffix
    contents = [m["content"] for m in messages] + [suffix]
    if not any(special in text for text in contents for special in _specials(tokenizer)):
        return prompt, list(tokenizer.encode(prompt, add_special_tokens=False))
    marked = [{**m, "content": _SENTINEL.format(i)} for i, m in enumerate(messages)]
    template = render_chat(tokenizer, marked)
    pieces, ids = [], []
    for i, content in enumerate(contents[:-1]):
        head, mark, template = template.partition(_SENTINEL.format(i))
        pieces += [head, content]
        ids += list(tokenizer.encode(head, add_special_tokens=False)) + encode(tokenizer, content)
        if not mark:
            break
    ids += list(tokenizer.encode(template, add_special_tokens=False)) + encode(tokenizer, suffix)
    if "".join(pieces) + template + suffix != prompt:  # a template that rewrites the text: its markers cannot be told apart
        raise ModelError("the model's chat template changes the message text, so a special token's text in the "
                         "file cannot be kept apart from the template's", hint="edit the file with another model")
    return prompt, ids


# -- prompt prefixes on disk ---------------------------------------------------------------------

PREFIX_STORE_BYTES = 2 * 1024**3  # at most this much on disk; the least recently used go first
PREFIX_MIN_TOKENS = 256  # shorter prefixes prefill faster than they load


class PrefixStore:
    """KV caches of prompt prefixes on disk, shared by every cadedit process of this user.

    An entry is the key and value tensors of every layer for a token prefix, keyed by the model's
    identity (its weight files' paths, sizes and mtimes), the dtype and the prefix ids themselves,
    so a stale entry can never be found. Written to a temporary file and renamed (a reader sees a
    whole entry or none; a file that does not load is deleted and ignored); total size bounded.
    """

    def __init__(self, root: Path | None = None, limit: int = PREFIX_STORE_BYTES):
        self.root, self.limit = root or user_cache("prefixes"), limit

    def path(self, identity: str, ids: Sequence[int]) -> Path:
        import hashlib

        digest = hashlib.sha256(identity.encode())
        digest.update(b"|" + b",".join(str(i).encode() for i in ids))
        return self.root / f"{digest.hexdigest()[:32]}.kv"

    def load(self, lm: CachedLM, identity: str, ids: Sequence[int]) -> bool:
        """Put the stored cache of exactly `ids` into lm (True), or leave lm as it was (False)."""
        path = self.path(identity, ids)
        if not path.is_file():
            return False
        lm.reset()
        try:
            lm.cache.restore(torch.load(path, map_location=lm.model.device, weights_only=True), ids)
        except Exception:
            lm.reset()
            with contextlib.suppress(OSError):  # a damaged entry goes; in a read-only store it stays, ignored
                path.unlink()
            return False
        lm.ids = list(ids)
        with contextlib.suppress(OSError):  # a store this user may read but not write still serves
            os.utime(path)  # recently used
        return True

    def save(self, lm: CachedLM, identity: str, n: int) -> None:
        """Store the cache of lm's first n ids (once), then keep the store under its size limit."""
        path = self.path(identity, lm.ids[:n])
        if path.is_file() or n > len(lm.ids):
            return
        layers = lm.cache.export(n)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                torch.save(layers, f)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
            return
        self._evict()

    def _evict(self) -> None:
        entries = []
        for entry in self.root.glob("*.kv"):
            with contextlib.suppress(OSError):
                st = entry.stat()
                entries.append((st.st_mtime, st.st_size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries):
            if total <= self.limit:
                break
            with contextlib.suppress(OSError):
                entry.unlink()
                total -= size


def model_identity(loaded: LoadedModel) -> str:
    """What a stored prefix must match: the backend (and llama.cpp's version), the weight and config
    files (path, size, mtime), the dtype, int8 steps."""
    backend = loaded.backend
    if backend == "llama":
        from cadedit.llamacpp import version

        backend += f"-{version()}"
    return (f"{backend}|{_identity(loaded.model, loaded.name, loaded.dtype)}"
            + ("|int8-steps" if loaded.int8_steps else ""))


def _identity(model, name: str, dtype) -> str:
    source = str(getattr(model, "folder", "") or name)
    parts = [str(source), str(dtype)]
    folder = Path(source)
    if folder.is_file():
        st = folder.stat()
        parts.append(f"{folder.name}:{st.st_size}:{st.st_mtime_ns}")
    elif folder.is_dir():
        for weights in sorted([*folder.glob("*.safetensors"), *folder.glob("*.json")]):
            st = weights.stat()
            parts.append(f"{weights.name}:{st.st_size}:{st.st_mtime_ns}")
    else:
        parts.append(f"object:{id(model)}")  # an in-memory model: its own process only
    return "|".join(parts)
