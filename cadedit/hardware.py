"""The machine: how many threads, which device and dtype, and which backend runs a model file faster.

Contract: default_threads() counts the physical cores not busy right now; choose_dtype() and
choose_backend_for() answer from a per-machine measurement made once and cached under the user
cache (cpu-dtype.json), so every later run decides in microseconds. `--verbose` shows the reasons.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cadedit.atomic import replace_file
from cadedit.errors import ModelError
from cadedit.settings import user_cache

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


def _time_linear(dtype: "torch.dtype", rows: int, reps: int = 9, step: str = "",
                 shape: tuple[int, int] = (4864, 896)) -> float:
    """Median seconds for one linear layer (default: a Qwen2.5-0.5B MLP projection) on `rows` tokens
    (after a warm-up); step "int8" or "int4": through that weight kernel of one-token steps (cadedit.steps),
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
        from cadedit.steps import GROUP, pack_int4

        groups = (out_features, in_features // GROUP)
        packed, scales = pack_int4(torch.randint(0, 16, shape, dtype=torch.uint8), torch.rand(groups), torch.zeros(groups))

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


# An edit's model work, as the verify loop spends it on a 185-line file: ~2,900 tokens in
# multi-token forwards (prompt and accepted drafts) and ~25 one-token steps.
_WORK = ((128, 2900 / 128), (1, 25))


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


def cpu_dtype(threads: int) -> tuple["torch.dtype", str]:
    """fp32 or bf16 for this CPU: whichever does an edit's model work faster, measured once per
    machine (CPU model and flags, torch version, threads; about 0.5 s) and cached, so every later
    run chooses the same. Returns the dtype and where the choice came from (shown by --verbose).

    CPUs differ: with AMX or AVX512-BF16, bf16 prefill is several times faster than fp32 while a
    one-token step can be slower; without them bf16 can be slower at both. A timing probe on every
    run picked differently from run to run on a busy machine; one careful measurement does not.
    """
    import torch

    measured = ""

    def measure() -> str:
        nonlocal measured
        cost = {dt: sum(times * _time_linear(dt, rows) for rows, times in _WORK) for dt in (torch.float32, torch.bfloat16)}
        measured = f"fp32 {cost[torch.float32]:.2f} s, bf16 {cost[torch.bfloat16]:.2f} s"
        return "bfloat16" if cost[torch.bfloat16] < 0.8 * cost[torch.float32] else "float32"

    name, path = _measured_once(_cpu_identity(threads), ("float32", "bfloat16"), measure)
    return getattr(torch, name), (f"measured on this CPU now ({measured})" if measured
                                  else f"measured on this CPU earlier ({path})")


STEPS = ("int4", "int8", "bf16")  # one-token step weights, most compact first (cadedit.steps)


def cpu_steps(threads: int) -> tuple[str, str]:
    """How a bf16 model's one-token steps read their weights on this CPU (cadedit.steps): "int4"
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
        replace_file(path, json.dumps({**known, key: answer}).encode(), make_parent=True)
    except OSError:
        pass  # a read-only cache: measure again next time
    return answer, path


def choose_dtype(dtype: str, device: str, threads: int = 1) -> tuple["torch.dtype", str]:
    """The dtype to load in, and why."""
    import torch

    names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16, "bf16-int8": torch.bfloat16,
             "bf16-int4": torch.bfloat16}
    if dtype != "auto":
        if dtype not in names:
            raise ModelError(f"unknown dtype {dtype!r}", hint="use auto, fp32, bf16, bf16-int8, bf16-int4 or fp16")
        return names[dtype], "--dtype"
    if device.startswith("cuda"):
        return torch.bfloat16, "CUDA"
    return cpu_dtype(threads)


# -- backend: torch or llama.cpp ---------------------------------------------------------------


# torch runs a GGUF only where it measured at least this much faster than llama.cpp: the probe's
# own run-to-run spread is a few percent (README, "Design measurements"), and within it the GGUF at
# its own size wins (no conversion, a third of the memory).
TORCH_MARGIN = 1.1
PROBE = "forward-probe"  # how torch's side is measured, in the measurement's key: another probe's answer is not reused


def choose_backend_for(setting: str, gguf: Path | None, device: str, dtype: str, threads: int) -> tuple[str, str]:
    """The backend that runs this model, and why. auto: a model folder, CUDA or an explicit --dtype
    keep torch; a GGUF runs on whichever does an edit's model work faster on this CPU (llama.cpp's
    load included: repacking is paid by every process; torch only if TORCH_MARGIN faster), measured
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
            cost = llama_work_seconds(gguf, meta, threads, _WORK, *llamacpp.VARIANTS[variant])
            measured = f"an edit's model work: {variant} {cost:.2f} s"
        estimate, need = _torch_work_seconds(meta, threads)
        measured += f", torch {estimate:.2f} s"
        room = _available_memory()
        if room is not None and need > 0.8 * room:
            measured += f"; torch would need {need / 1e9:.1f} GB of weights, {room / 1e9:.1f} GB free"
            return "llama"
        return "torch" if estimate * TORCH_MARGIN < cost else "llama"

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
            costs[name] = llama_work_seconds(gguf, meta, threads, _WORK, repack, flash)
        return min(costs, key=costs.get)

    variant, _ = _measured_once(backend_key(gguf, threads) + "|llama", tuple(llamacpp.VARIANTS), measure)
    measured = ("an edit's model work: " + ", ".join(f"{name} {cost:.2f} s" for name, cost in costs.items())) if costs else ""
    return variant, costs.get(variant), measured


def backend_key(gguf: Path, threads: int) -> str:
    """The measurement cache's key for the backend of this model file on this CPU and thread count."""
    from cadedit import llamacpp

    st = gguf.stat()
    return f"{_cpu_identity(threads)}|backend|{gguf.name}:{st.st_size}|{llamacpp.build()}|{PROBE}"


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
    """torch's time for an edit's model work (_WORK) on a model of this GGUF's shape, without
    converting the GGUF; and the bytes its weights would take.

    Timed as llama.cpp's side is, on cadedit's own forward (cadedit.qwen2: attention, norms, rope and
    the LM head included, with the step copies torch would use) after a 512-token prompt, on weights
    of the model's shape filled with a constant (real pages, so a step reads real memory). Two
    models of 1 and 3 layers give the cost of a layer and of the rest, so the whole model is never
    built. The linear layers alone leave out the rest of each forward, and with it torch looked up to
    1.4x faster than the whole model ran (README, "Design measurements")."""
    import torch

    from cadedit.qwen2 import Config

    arch = meta.get("general.architecture", "")
    config = Config(
        vocab_size=len(meta.get("tokenizer.ggml.tokens", ())) or 151936,
        hidden_size=int(meta[f"{arch}.embedding_length"]), intermediate_size=int(meta[f"{arch}.feed_forward_length"]),
        num_hidden_layers=int(meta[f"{arch}.block_count"]), num_attention_heads=int(meta[f"{arch}.attention.head_count"]),
        num_key_value_heads=int(meta[f"{arch}.attention.head_count_kv"]), tie_word_embeddings=True)
    torch.set_num_threads(threads)
    dtype, _ = cpu_dtype(threads)
    step = cpu_steps(threads)[0] if dtype == torch.bfloat16 else "bf16"
    cost = {layers: _forward_work_seconds(config, layers, dtype, step) for layers in (1, 3)}
    layer = max(0.0, (cost[3] - cost[1]) / 2)
    total = cost[1] + (config.num_hidden_layers - 1) * layer
    h, kv = config.hidden_size, config.num_key_value_heads * config.dim
    params = config.num_hidden_layers * (2 * h * h + 2 * kv * h + 3 * h * config.intermediate_size) \
        + 2 * config.vocab_size * h  # the embedding and an LM head (an untied one: the larger)
    return total, params * torch.tensor([], dtype=dtype).element_size()


def _forward_work_seconds(config, layers: int, dtype: "torch.dtype", step: str) -> float:
    """_WORK's seconds on cadedit's Qwen2 forward with `layers` layers of this config (see above);
    the LM head is the embedding (tied), which takes the same time as an untied one."""
    import dataclasses
    import tempfile

    import torch

    from cadedit.qwen2 import Qwen2

    config = dataclasses.replace(config, num_hidden_layers=layers)
    with torch.inference_mode():
        model = Qwen2(config)
        for name, param in list(model.named_parameters()):
            module_name, _, attribute = name.rpartition(".")
            module = model.get_submodule(module_name)
            setattr(module, attribute, torch.nn.Parameter(torch.full(param.shape, 0.01, dtype=dtype), requires_grad=False))
        if config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        model.eval()
        if step in ("int8", "int4"):
            from cadedit.steps import quantize_int4, use_step_weights

            linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
            four_bit = {name: (lambda n=name: quantize_int4(model.get_submodule(n).weight)) for name in linears} \
                if step == "int4" else {}
            with tempfile.TemporaryDirectory(prefix="cadedit-probe-") as root:
                use_step_weights(model, "probe", four_bit, root=Path(root), int4_head=step == "int4")
        return torch_work_seconds(model)


def torch_work_seconds(model) -> float:
    """_WORK's seconds on a cadedit.qwen2 model (work_seconds)."""
    import torch

    with torch.inference_mode():
        return work_seconds(model, model.new_cache(), torch.tensor(_filler(model.config.vocab_size)))


def llama_work_seconds(path: Path, meta: dict, threads: int, work=_WORK, repack: bool = False,
                       flash: bool | None = False) -> float:
    """llama.cpp's time for `work` on this GGUF as llamacpp.LlamaModel runs it (work_seconds), plus
    the model's load (repacking copies every weight: a cost each process pays again)."""
    from cadedit.llamacpp import LlamaModel

    start = time.perf_counter()
    model = LlamaModel(path, meta, threads, n_ctx=1024, repack=repack, flash=flash)
    load = time.perf_counter() - start
    return load + work_seconds(model, model.new_cache(), _filler(model.n_vocab), work)


def _filler(vocab: int) -> list[int]:
    """The probe's token ids: a 512-token prompt and the forwards after it (work_seconds)."""
    return [t % vocab for t in range(1000, 1000 + 768)]


def work_seconds(model, cache, filler, work=_WORK, prefix: int = 512) -> float:
    """`work` ((tokens per forward, forwards), ...) timed on a model of either backend after a
    `prefix`-token prompt of `filler` (an edit's steps follow a prompt of several hundred tokens):
    each forward's best of a few. The prompt is also the warm-up (the first forward touches the
    mapped weights)."""
    model(filler[:prefix], cache)
    total = 0.0
    for rows, times in work:
        timings = []
        for _ in range(2 if rows > 1 else 5):
            cache.crop(prefix)
            start = time.perf_counter()
            model(filler[prefix : prefix + rows], cache)
            timings.append(time.perf_counter() - start)
        total += times * min(timings)
    return total
