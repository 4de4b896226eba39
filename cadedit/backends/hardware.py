"""The machine: how many threads, which device and dtype, and which backend runs a model file faster.

Contract: default_threads() counts the physical cores not busy right now; choose_dtype() and
choose_backend_for() answer from a per-machine measurement made once and cached under the user
cache (cpu-dtype.json), so every later run decides in microseconds. `--verbose` shows the reasons.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cadedit.text.atomic import replace_file
from cadedit.errors import ModelError
from cadedit.settings import cache_problem, user_cache
from cadedit.backends.llama import gguf_file
from cadedit.backends.llama import llamacpp
from cadedit.backends.llama.llamacpp import LlamaModel, VARIANTS

if TYPE_CHECKING:
    import torch


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

    Oversubscribing a core is far worse than idling one (a thread that waits for a busy core stalls the others at every layer), so cores that other
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
    if device == "cpu" or (device == "auto" and not torch_has_gpu_build()):
        return "cpu"  # without importing torch: a process on llama.cpp never needs it
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} requested but CUDA is not available", hint="use --device cpu")
    return device


_GPU_BUILD = re.compile(r"^(?:cuda|hip)\s*(?::[^=]*)?=\s*(?!None\b)\S", re.M)


def torch_has_gpu_build() -> bool:
    """Whether the installed torch was built for CUDA or ROCm, read from its version.py without
    importing it (importing torch is the largest part of a cold start). Unknown: True (then
    torch.cuda.is_available() decides)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return True
    return bool(_GPU_BUILD.search(text))


def torch_version() -> str:
    """The installed torch's version, without importing it ("" when torch is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def _time_linear(
    dtype: "torch.dtype", rows: int, reps: int = 9, step: str = "", shape: tuple[int, int] = (4864, 896)
) -> float:
    """Median seconds for one linear layer (default: a Qwen2.5-0.5B MLP projection) on `rows` tokens
    (after a warm-up); step "int8" or "int4": through that weight kernel of one-token steps (cadedit.backends.torch.steps),
    anything else: the weight itself."""
    import torch

    out_features, in_features = shape
    weight = torch.randn(out_features, in_features, dtype=dtype)
    x = torch.randn(rows, in_features, dtype=dtype)
    if step == "int8":
        q = torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8)
        scale = torch.rand(out_features, dtype=dtype)

        def run():
            torch._weight_int8pack_mm(x, q, scale)
    elif step == "int4":
        from cadedit.backends.torch.steps import GROUP, pack_int4  # lazy: imports torch (the backend boundary)

        groups = (out_features, in_features // GROUP)
        packed, scales = pack_int4(
            torch.randint(0, 16, shape, dtype=torch.uint8), torch.rand(groups), torch.zeros(groups)
        )

        def run():
            torch._weight_int4pack_mm_for_cpu(x, packed, GROUP, scales)
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


# An edit's model work as `cadedit fix` spends it on a scoped verify edit (docs/
# measurements/design-figures.md: the main job and ten long files): its prompt (a window of the file and the
# instruction: ~1,000 tokens in 512-token forwards), forwards of drafted source lines (16 tokens,
# the verify drafter's first length: in a scoped region most drafts stay short) and the tokens it
# writes one a forward. (tokens per forward, forwards). A mix of long forwards alone weighed
# torch's fp32 prompt and left out its drafts and steps, which on AVX2 CPUs are llama.cpp's many times over.
_WORK = ((512, 2), (16, 12), (1, 8))


_ISA_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def _cpu_identity(threads: int) -> str:
    """This CPU's model name and feature flags, torch's version, the thread count and the variables
    that cap the instruction sets torch's kernels use (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA ...), as
    one key: each changes what a measurement would find."""
    import hashlib
    import platform

    try:
        info = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*:\s*(.*)", info)
        flags = re.search(r"flags\s*:\s*(.*)", info)
        cpu = f"{model.group(1) if model else ''}|{flags.group(1) if flags else ''}"
    except OSError:
        cpu = platform.processor()
    caps = ",".join(f"{name}={os.environ[name]}" for name in _ISA_CAPS if os.environ.get(name))
    return hashlib.sha256(f"{cpu}|{torch_version()}|{threads}{'|' + caps if caps else ''}".encode()).hexdigest()[:16]


# The long work a first run does once per machine or model file (the backend probe here, the GGUF's
# conversion and the step weights in cadedit.backends.model) says what it is doing while it does it, through this
# (the dtype and step-kernel probes take a second or two and say nothing): the command line points it at its stderr printer
# unless --quiet; None (a library caller) says nothing. A first run sat minutes at "loading" silently.
progress: Callable[[str], None] | None = None


def tell(message: str) -> None:
    """One progress line of the once-only work (see `progress`)."""
    if progress is not None:
        progress(message)


def probe_estimate(gguf: Path) -> str:
    """How long the backend probe of this model file may take, from its size: the first runs logged
    in docs/measurements/ took about 40 s for a 0.5 GB GGUF and 75 s for a 1.1 GB one on 2 cores."""
    seconds = 10 + 60 * gguf.stat().st_size / 1e9
    return f"about {10 * round(seconds / 10):.0f} s on 2 cores, less on more"


def cpu_dtype(threads: int) -> tuple["torch.dtype", str]:
    """fp32 or bf16 for this CPU: whichever does an edit's model work faster, measured once per
    machine (CPU model and flags, torch version, threads; well under a second) and cached, so every later
    run chooses the same. Returns the dtype and where the choice came from (shown by --verbose).

    CPUs differ: with AMX or AVX512-BF16, bf16 prefill is several times faster than fp32 while a
    one-token step can be slower; without them bf16 can be slower at both. A timing probe on every
    run picked differently from run to run on a busy machine; one careful measurement does not.
    """
    import torch

    measured = ""

    def measure() -> str:
        nonlocal measured
        cost = {
            dt: sum(times * _time_linear(dt, rows) for rows, times in _WORK) for dt in (torch.float32, torch.bfloat16)
        }
        measured = f"fp32 {cost[torch.float32]:.2f} s, bf16 {cost[torch.bfloat16]:.2f} s"
        return "bfloat16" if cost[torch.bfloat16] < 0.8 * cost[torch.float32] else "float32"

    name, path = _measured_once(_cpu_identity(threads), ("float32", "bfloat16"), measure)
    return getattr(torch, name), (
        f"measured on this CPU now ({measured})" if measured else f"measured on this CPU earlier ({path})"
    )


STEPS = ("int4", "int8", "bf16")  # one-token step weights, most compact first (cadedit.backends.torch.steps)


def cpu_steps(threads: int) -> tuple[str, str]:
    """How a bf16 model's one-token steps read their weights on this CPU (cadedit.backends.torch.steps): "int4"
    (the GGUF's own 4-bit blocks where it has them, int8 for the rest), "int8" or "bf16", measured
    once per machine like cpu_dtype: int8 where it takes under 0.8x bf16's time, int4 where it
    also takes under 0.9x int8's (its numbers are the GGUF's own, int8's a second rounding)."""
    import torch

    measured = ""

    def measure() -> str:
        nonlocal measured
        times = {step: _time_linear(torch.bfloat16, 1, step=step) for step in STEPS}
        measured = ", ".join(f"{step} {1e6 * t:.0f} us" for step, t in times.items()) + " per 4864x896 step"
        if times["int8"] >= 0.8 * times["bf16"]:
            return "bf16"
        return "int4" if times["int4"] < 0.9 * times["int8"] else "int8"

    name, path = _measured_once(_cpu_identity(threads) + "|steps4", STEPS, measure)
    return name, (f"measured on this CPU now ({measured})" if measured else f"measured on this CPU earlier ({path})")


def _measured_once(key: str, answers: tuple[str, ...], measure) -> tuple[str, Path]:
    """The answer stored for key in the per-machine measurement cache, or measure() stored there."""
    return measured_once(key, lambda answer: answer in answers, measure)


def measured_once(key: str, valid: Callable[[object], bool], measure: Callable[[], object]) -> tuple[object, Path]:
    """The value stored for key in the per-machine measurement cache where valid(it), else measure()
    (a JSON value) stored there; and the cache file's path."""
    import json

    path = user_cache("cpu-dtype.json")
    known = _measurements(path)
    if key in known and valid(known[key]):
        return known[key], path
    answer = measure()
    if cache_problem(path) is None:  # never into another user's folder
        try:  # read again: measure() may have stored answers of its own (the backend probe's dtype and steps)
            replace_file(path, json.dumps({**_measurements(path), key: answer}).encode(), make_parent=True)
        except OSError:
            pass  # a read-only cache: measure again next time
    return answer, path


def _measurements(path: Path) -> dict:
    """The measurement cache's answers ({} when missing, damaged or not this user's own: another user's
    file would choose the backend and dtype)."""
    import json

    if cache_problem(path) is not None:
        return {}
    try:
        known = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
        known = None
    if not isinstance(known, dict):
        tell(f"{path}: not a measurement cache (damaged?); ignored, and measured again where needed")
        with contextlib.suppress(OSError):  # this user's own (checked above): said once, then made anew
            path.unlink()
        return {}
    return known


def choose_dtype(dtype: str, device: str, threads: int = 1) -> tuple["torch.dtype", str]:
    """The dtype to load in, and why."""
    import torch

    names = {
        "fp32": torch.float32,
        "float32": torch.float32,
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp16": torch.float16,
        "float16": torch.float16,
        "bf16-int8": torch.bfloat16,
        "bf16-int4": torch.bfloat16,
    }
    if dtype != "auto":
        if dtype not in names:
            raise ModelError(f"unknown dtype {dtype!r}", hint="use auto, fp32, bf16, bf16-int8, bf16-int4 or fp16")
        return names[dtype], "--dtype"
    if device.startswith("cuda"):
        return torch.bfloat16, "CUDA"
    return cpu_dtype(threads)


# -- backend: torch or llama.cpp ---------------------------------------------------------------


# torch runs a GGUF only where it measured at least this much faster than llama.cpp: the probe's
# own run-to-run spread (wide on a busy 2-core machine: docs/measurements/design-figures.md) must not
# decide, and within it the GGUF at its own size wins (no conversion, a quarter to a half of the
# memory). Where torch has won, it won by far more than this on every CPU measured.
TORCH_MARGIN = 1.25
PROBE = "edit-probe"  # how both sides are measured, in the measurement's key: another probe's answer is not reused
_PROBE_LAYERS = (2, 6)  # the layers of the two models torch's side times (_torch_work_seconds)


def choose_backend_for(setting: str, gguf: Path | None, device: str, dtype: str, threads: int) -> tuple[str, str]:
    """The backend that runs this model, and why. auto: a model folder, CUDA or an explicit --dtype
    keep torch; a GGUF runs on whichever does an edit's model work faster on this CPU (llama.cpp's
    load included: repacking is paid by every process; torch only if TORCH_MARGIN faster), measured
    once per machine and model file (both sides in the same process) and cached."""

    if setting == "torch":
        return "torch", "--backend torch"
    if setting == "llama":
        if gguf is None:
            raise ModelError(
                "--backend llama runs a GGUF file, and this model is a folder or a hub id",
                hint="pass --model FILE.gguf (or ollama:NAME), or use --backend torch",
            )
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

        meta = gguf_file.read_metadata(gguf)
        if cost is None:  # the variant was measured in an earlier run: its cost again, for the comparison
            cost = llama_work_seconds(gguf, meta, threads, _WORK, *llamacpp.VARIANTS[variant])
            measured = f"an edit's model work: {variant} {cost:.2f} s"
        tell("measuring torch on a few layers of the same shape, to compare")
        estimate, need = _torch_work_seconds(meta, threads)
        measured += f", torch {estimate:.2f} s"
        room = _available_memory()
        if room is not None and need > 0.8 * room:
            measured += f"; torch would need {need / 1e9:.1f} GB of weights, {room / 1e9:.1f} GB free"
            return "llama"
        return "torch" if estimate * TORCH_MARGIN < cost else "llama"

    answer, path = _measured_once(backend_key(gguf, threads), ("torch", "llama"), measure)
    if measured:
        tell(
            f"{'llama.cpp' if answer == 'llama' else 'torch'} does an edit's work faster here ({measured}); "
            f"kept in {path}"
        )
    return answer, (f"measured on this CPU now ({measured})" if measured else f"measured on this CPU earlier ({path})")


def probe_llama(gguf: Path, threads: int) -> tuple[str, float | None, str]:
    """The llama.cpp configuration (llamacpp.VARIANTS) that does an edit's model work fastest on this
    CPU for this model file, measured once and cached; with its cost and what was measured when
    measured now (else None and "")."""

    costs: dict[str, float] = {}

    def measure() -> str:
        tell(
            f"measuring which backend runs {gguf.name} faster on this CPU (once per machine and model file; "
            f"{probe_estimate(gguf)})"
        )
        meta = gguf_file.read_metadata(gguf)
        for name, (repack, flash) in llamacpp.VARIANTS.items():
            costs[name] = llama_work_seconds(gguf, meta, threads, _WORK, repack, flash)
        return min(costs, key=costs.get)

    variant, _ = _measured_once(backend_key(gguf, threads) + "|llama", tuple(llamacpp.VARIANTS), measure)
    measured = (
        ("an edit's model work: " + ", ".join(f"{name} {cost:.2f} s" for name, cost in costs.items())) if costs else ""
    )
    return variant, costs.get(variant), measured


def backend_key(gguf: Path, threads: int) -> str:
    """The measurement cache's key for the backend of this model file on this CPU and thread count."""

    st = gguf.stat()
    return f"{_cpu_identity(threads)}|backend|{gguf.name}:{st.st_size}|{llamacpp.build()}|{PROBE}"


def llama_variant(gguf: Path, threads: int) -> str:
    """llama.cpp's configuration for this model file: as the backend probe measured, else llama.cpp's
    own defaults (an explicit --backend llama does not wait for a probe)."""

    known = _measurements(user_cache("cpu-dtype.json")).get(backend_key(gguf, threads) + "|llama")
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
    """torch's time for an edit's model work (_WORK) on a model of this GGUF's shape, without
    converting the GGUF; and the bytes its weights would take.

    Timed as llama.cpp's side is, on cadedit's own forward (cadedit.backends.torch.qwen2: attention, norms, rope and
    the LM head included, with the step copies torch would use) after a prompt, on weights of the
    model's shape filled with a constant (real pages, so a step reads real memory). Two models of
    _PROBE_LAYERS layers give the cost of a layer and of the rest, so the whole model is never
    built; the layer is their difference over the layers between, so its noise is multiplied by the
    model's layers over that span: 2 and 6 layers (and each timed twice, the best kept) pass on less of
    it than 1 and 3 did (docs/measurements/design-figures.md). The linear layers alone leave out the rest of
    each forward, and with it torch looked faster than the whole model ran."""
    torch = _import_torch()
    from cadedit.backends.torch.qwen2 import Config  # lazy: imports torch (the backend boundary)

    arch = meta.get("general.architecture", "")
    config = Config(
        vocab_size=len(meta.get("tokenizer.ggml.tokens", ())) or 151936,
        hidden_size=int(meta[f"{arch}.embedding_length"]),
        intermediate_size=int(meta[f"{arch}.feed_forward_length"]),
        num_hidden_layers=int(meta[f"{arch}.block_count"]),
        num_attention_heads=int(meta[f"{arch}.attention.head_count"]),
        num_key_value_heads=int(meta[f"{arch}.attention.head_count_kv"]),
        tie_word_embeddings=True,
    )
    torch.set_num_threads(threads)
    dtype, _ = cpu_dtype(threads)
    step = cpu_steps(threads)[0] if dtype == torch.bfloat16 else "bf16"
    few, many = (min(n, config.num_hidden_layers) for n in _PROBE_LAYERS)
    cost = {few: math.inf, many: math.inf}
    for _ in range(2):  # taking turns, the best of each: the layer is a difference that noise in either would skew
        for layers in cost:
            cost[layers] = min(cost[layers], _forward_work_seconds(config, layers, dtype, step))
    layer = max(0.0, (cost[many] - cost[few]) / (many - few)) if many > few else 0.0
    total = cost[few] + (config.num_hidden_layers - few) * layer
    h, kv = config.hidden_size, config.num_key_value_heads * config.dim
    params = (
        config.num_hidden_layers * (2 * h * h + 2 * kv * h + 3 * h * config.intermediate_size)
        + 2 * config.vocab_size * h
    )  # the embedding and an LM head (an untied one: the larger)
    return total + torch_load_seconds(params, dtype), params * torch.tensor([], dtype=dtype).element_size()


_TORCH_IMPORT: list[float] = []  # seconds this process took to import torch, where it was imported here


def _import_torch():
    """torch, its import timed where this process had not imported it yet (torch_load_seconds)."""
    import sys

    start, fresh = time.perf_counter(), "torch" not in sys.modules
    import torch

    if fresh and not _TORCH_IMPORT:
        _TORCH_IMPORT.append(time.perf_counter() - start)
    return torch


def torch_import_seconds() -> float:
    """How long this process took to import torch, where it was imported through _import_torch; else 0."""
    return _TORCH_IMPORT[0] if _TORCH_IMPORT else 0.0


def torch_load_seconds(params: int, dtype: "torch.dtype") -> float:
    """What every process on torch pays before its first forward that llama.cpp's load (counted on its
    side of the probe) does not: importing torch, and where torch runs fp32, widening each of the
    converted model's bf16 weights (cadedit.backends.model's cache) to fp32, timed on a sample and scaled to
    `params`. Left out, fp32 edits on an AVX2 CPU looked as fast as llama.cpp's and ran twice as
    long, most of the difference the load (docs/measurements/design-figures.md)."""
    torch = _import_torch()
    seconds = torch_import_seconds()
    if dtype == torch.float32:
        sample, widened, timings = torch.ones(1 << 24, dtype=torch.bfloat16), [], []
        for _ in range(3):  # each kept: a load writes fresh pages, never a block the allocator hands back
            start = time.perf_counter()
            widened.append(sample.to(torch.float32))
            timings.append(time.perf_counter() - start)
        seconds += min(timings) * params / sample.numel()
    return seconds


def _forward_work_seconds(config, layers: int, dtype: "torch.dtype", step: str) -> float:
    """_WORK's seconds on cadedit's Qwen2 forward with `layers` layers of this config (see above);
    the LM head is the embedding (tied), which takes the same time as an untied one."""
    import dataclasses
    import tempfile

    import torch

    from cadedit.backends.torch.qwen2 import Qwen2  # lazy: imports torch (the backend boundary)

    config = dataclasses.replace(config, num_hidden_layers=layers)
    with torch.inference_mode():
        model = Qwen2(config)
        for name, param in list(model.named_parameters()):
            module_name, _, attribute = name.rpartition(".")
            module = model.get_submodule(module_name)
            setattr(
                module, attribute, torch.nn.Parameter(torch.full(param.shape, 0.01, dtype=dtype), requires_grad=False)
            )
        if config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        model.eval()
        if step in ("int8", "int4"):
            from cadedit.backends.torch.steps import (
                quantize_int4,
                use_step_weights,
            )  # lazy: imports torch (the backend boundary)

            linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
            four_bit = (
                {name: (lambda n=name: quantize_int4(model.get_submodule(n).weight)) for name in linears}
                if step == "int4"
                else {}
            )
            with tempfile.TemporaryDirectory(prefix="cadedit-probe-") as root:
                use_step_weights(model, "probe", four_bit, root=Path(root), int4_head=step == "int4")
        return torch_work_seconds(model)


def torch_work_seconds(model) -> float:
    """_WORK's seconds on a cadedit.backends.torch.qwen2 model (work_seconds; its prompt-sized forward the best of 3:
    on a model of a few layers it takes a fraction of a second, and its noise is extrapolated)."""
    import torch

    with torch.inference_mode():
        return work_seconds(model, model.new_cache(), torch.tensor(_filler(model.config.vocab_size)), long_reps=3)


def llama_work_seconds(
    path: Path, meta: dict, threads: int, work=_WORK, repack: bool = False, flash: bool | None = False
) -> float:
    """llama.cpp's time for `work` on this GGUF as llamacpp.LlamaModel runs it (work_seconds), plus
    the model's load (repacking copies every weight: a cost each process pays again)."""

    start = time.perf_counter()
    model = LlamaModel(path, meta, threads, n_ctx=2 * len(_filler(1)), repack=repack, flash=flash)
    load = time.perf_counter() - start
    return load + work_seconds(model, model.new_cache(), _filler(model.n_vocab), work)


_WARM_UP = 16  # tokens of the untimed first forward: it touches every weight (a mapped file's pages too)
_PROMPT = 256  # a forward of at least this many tokens is a prompt: timed from the start, the rest after it


def _prompt_end(work=_WORK) -> int:
    """Where the probe's drafts and steps are timed from: the warm-up and the longest prompt-sized forward."""
    return _WARM_UP + max((rows for rows, _ in work if rows >= _PROMPT), default=0)


def _filler(vocab: int) -> list[int]:
    """The probe's token ids: the warm-up, the longest prompt-sized forward, and the longest forward after it."""
    return [t % vocab for t in range(1000, 1000 + _prompt_end() + max(rows for rows, _ in _WORK))]


def work_seconds(model, cache, filler, work=_WORK, long_reps: int = 1) -> float:
    """`work` ((tokens per forward, forwards), ...) timed on a model of either backend: each forward's
    best of a few (of `long_reps` for a prompt-sized forward, which on a whole model is long enough to
    time once). Prompt-sized forwards are timed after the warm-up, the others after the longest of
    them, as an edit's drafts and steps follow its prompt."""
    model(filler[:_WARM_UP], cache)
    after = _prompt_end(work)
    total = 0.0
    for rows, times in sorted(work, reverse=True):  # the prompt first: the drafts and steps follow it
        at = _WARM_UP if rows >= _PROMPT else after
        timings = []
        for _ in range(long_reps if rows >= _PROMPT else 3 if rows > 1 else 5):
            if cache.length < at:
                model(filler[cache.length : at], cache)  # the prompt the drafts and steps follow
            cache.crop(at)
            start = time.perf_counter()
            model(filler[at : at + rows], cache)
            timings.append(time.perf_counter() - start)
        total += times * min(timings)
    return total
