"""The kernel microbenchmark (paper §3 "Kernel microbenchmark", §4.1, Figure 3): s(N) = T_AR / T_PP.

After a P-token random prefix is prefilled once, for each span length N: T_AR(N) is N successive
single-token forwards, each appending to the cache; T_PP(N) is one N-token forward over the same
cache -- the copy splice. The cache is cropped back to P after every measurement, so both always
start from the same P-token prefix. Each N gets one untimed warm-up of each, then `trials` timed
runs (device synchronised before and after); the median is reported. By default the splice asks
for the last position's logits only (what a copy splice needs); all_logits
reproduces a plain forward. With ar_max = K > 0, AR for N > K is K steps scaled by N/K (marked
extrapolated). Needs torch: imported here only, never by the bench CLI at import time.
"""

from __future__ import annotations

import math
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cadedit.bench.report import median
from cadedit.errors import ModelError
from cadedit.backends import model
from cadedit.backends.llama.llamacpp import version
from typing import Annotated
import typer
from cadedit.bench.options import (
    BackendOpt,
    DeviceOpt,
    DtypeOpt,
    JsonOpt,
    ModelOpt,
    SpansOpt,
    ThreadsOpt,
    TrialsOpt,
    span_lengths,
)
from cadedit.cli.common import err
from cadedit.settings import DEFAULT_DTYPE
from cadedit.bench.running import out
from cadedit.bench.options import short_name
from cadedit.bench.report import ProgressBar, ResultsFile
from cadedit.bench.report import fmt_float, table

SPANS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class KernelPoint:
    n: int
    ar_ms: float
    pp_ms: float
    speedup: float
    ar_trials_ms: tuple[float, ...]
    pp_trials_ms: tuple[float, ...]
    extrapolated: bool = False
    ar_steps: int = 0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class KernelSettings:
    prefix: int = 1024
    spans: tuple[int, ...] = SPANS
    trials: int = 5
    ar_max: int = 0
    seed: int = 0
    all_logits: bool = False


ATTENTION = ("eager", "sdpa")


def load(
    spec: str | None,
    device: str = "auto",
    dtype: str = "auto",
    threads: int | None = None,
    attn: str = "eager",
    backend: str | None = None,
):
    """The model through cadedit.backends.model.load_model; on torch with attention written out (`eager`, what
    the paper measured) or torch's fused kernel (`sdpa`, what cadedit fix uses)."""

    if attn not in ATTENTION:
        raise ModelError(f"attention implementation {attn!r} unknown", hint="use --attn eager or sdpa")
    loaded = model.load_model(spec, device=device, dtype=dtype, threads=threads, backend=backend)
    if loaded.backend == "torch":
        loaded.model.set_eager_attention(attn == "eager")
    return loaded


class LlamaReference:
    """llama.cpp through llama-cpp-python's own Llama.eval on the same GGUF and threads (what a user
    of llama-cpp-python gets), called as the sweep calls a model: the reference for the llama backend.
    `repack`: its weights repacked or as stored, as the backend's are (a like-for-like measure of the
    backend's own overhead); None keeps Llama's defaults (repacked where llama.cpp can)."""

    def __init__(self, path: str, threads: int, n_ctx: int, repack: bool | None = None):
        import llama_cpp
        from llama_cpp import llama_cpp as api  # the module Llama reads its defaults from

        defaults = api.llama_model_default_params

        def model_params():  # Llama takes no repack argument: it reads these defaults once, in __init__
            params = defaults()
            if repack is not None:
                params.use_extra_bufts = repack
            return params

        api.llama_model_default_params = model_params
        try:
            self.llm = llama_cpp.Llama(
                model_path=path,
                n_ctx=n_ctx,
                n_batch=512,
                n_ubatch=512,
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
        finally:
            api.llama_model_default_params = defaults
        self.config = type("Config", (), {"vocab_size": self.llm.n_vocab()})()

    def new_cache(self):
        llm = self.llm
        llm.reset()

        class Cache:
            def crop(self, n: int) -> None:
                llm.n_tokens = min(n, llm.n_tokens)  # Llama.eval removes the positions past n_tokens first

        return Cache()

    def __call__(self, ids: torch.Tensor, cache, keep: int = 1):
        self.llm.eval(ids.tolist())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Bench:
    """A model with a prefilled P-token cache; times AR and PP spans over it and crops back."""

    def __init__(self, model, prefix_ids: torch.Tensor, device: torch.device, all_logits: bool = False):
        self.model, self.device, self.all_logits = model, device, all_logits
        self.prefix = prefix_ids.shape[1]
        self.cache = model.new_cache()
        model(prefix_ids[0], self.cache)  # [1, P] -> cache of P positions

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids[0], self.cache, ids.shape[1] if self.all_logits else 1)

    def crop(self) -> None:
        """Back to the P-token prefix."""
        self.cache.crop(self.prefix)

    def time_ar(self, ids: torch.Tensor) -> float:
        """Seconds for len(ids) single-token forwards ([1, 1] each), cache cropped back after."""
        synchronize(self.device)
        start = time.perf_counter()
        for k in range(ids.shape[1]):
            self._forward(ids[:, k : k + 1])
        synchronize(self.device)
        elapsed = time.perf_counter() - start
        self.crop()
        return elapsed

    def time_pp(self, ids: torch.Tensor) -> float:
        """Seconds for one forward over all of ids ([1, N]), cache cropped back after."""
        synchronize(self.device)
        start = time.perf_counter()
        self._forward(ids)
        synchronize(self.device)
        elapsed = time.perf_counter() - start
        self.crop()
        return elapsed


def random_ids(n: int, vocab: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, n), generator=generator)


def ar_steps(n: int, ar_max: int) -> int:
    return min(n, ar_max) if ar_max > 0 else n


def measure_points(
    benches: Sequence[Bench],
    ids: torch.Tensor,
    n: int,
    settings: KernelSettings,
    advance: Callable[[float], None] = lambda _: None,
) -> list[KernelPoint]:
    """s(N) for one N on each bench: a warm-up each, then `trials` timed AR and PP runs, the benches
    taking turns trial by trial (a machine that slows down mid-run slows all of them alike); medians in ms."""
    steps = ar_steps(n, settings.ar_max)
    span = ids[:, :n]
    for bench in benches:
        bench.time_pp(span)
        bench.time_ar(span[:, :1])
    ar: list[list[float]] = [[] for _ in benches]
    pp: list[list[float]] = [[] for _ in benches]
    for _ in range(settings.trials):
        for k, bench in enumerate(benches):
            ar[k].append(bench.time_ar(span[:, :steps]) * 1000 * n / steps)
            pp[k].append(bench.time_pp(span) * 1000)
            advance(steps + 1)
    return [
        KernelPoint(n, median(a), median(p), median(a) / median(p), tuple(a), tuple(p), steps < n, steps)
        for a, p in zip(ar, pp)
    ]


def work_units(settings: KernelSettings, models: int = 1) -> int:
    """Progress units of a sweep: AR steps + one PP per trial (a rough proxy for time)."""
    return models * sum((ar_steps(n, settings.ar_max) + 1) * settings.trials for n in settings.spans)


@torch.inference_mode()
def sweep(
    model,
    device: torch.device,
    settings: KernelSettings,
    on_point: Callable[[KernelPoint], None] = lambda _: None,
    advance: Callable[[float], None] = lambda _: None,
) -> list[KernelPoint]:
    """Measure every span length in order; on_point gets each result as soon as it exists."""
    return sweep_turns([model], device, settings, lambda _, point: on_point(point), advance)[0]


@torch.inference_mode()
def sweep_turns(
    models: Sequence,
    device: torch.device,
    settings: KernelSettings,
    on_point: Callable[[int, KernelPoint], None] = lambda k, _: None,
    advance: Callable[[float], None] = lambda _: None,
) -> list[list[KernelPoint]]:
    """sweep for several models of one vocabulary (the llama backend and llama.cpp's own) taking turns
    on the same ids; on_point(k, point) for model k."""
    vocab = int(models[0].config.vocab_size)
    prefix = random_ids(settings.prefix, vocab, settings.seed).to(device)
    ids = random_ids(max(settings.spans), vocab, settings.seed + 1).to(device)
    benches = [Bench(model, prefix, device, settings.all_logits) for model in models]
    points: list[list[KernelPoint]] = [[] for _ in models]
    for n in settings.spans:
        for k, point in enumerate(measure_points(benches, ids, n, settings, advance)):
            points[k].append(point)
            on_point(k, point)
    return points


def plot(points: Sequence[KernelPoint], path: str | Path, title: str) -> bool:
    """Latency and speedup against N on log axes (Figure 3); False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    n = [p.n for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(n, [p.ar_ms for p in points], "o-", label="autoregressive (N forwards)")
    left.plot(n, [p.pp_ms for p in points], "s-", label="parallel prefill (1 forward)")
    right.plot(n, [p.speedup for p in points], "o-", label="s(N)")
    right.plot(n, n, "--", color="gray", label="N (linear regime)")
    for ax, ylabel in ((left, "latency (ms, median)"), (right, "speedup T_AR / T_PP")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("copy-span length N (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def environment(device: torch.device, dtype, loaded=None) -> dict:
    """What the numbers depend on, for the JSON."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    env = {
        "device": str(device),
        "device_name": name,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_flags": cpu_flags(),
    }
    if loaded is not None:
        env.update(backend=loaded.backend, threads=loaded.threads)
        if loaded.backend == "llama":
            env["llama_cpp"] = version()
    return env


def cpu_flags() -> str:
    """The CPU features the kernels' speed turns on (docs/measurements/index.md: state them beside every figure)."""
    try:
        flags = set(re.search(r"^flags\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    except (OSError, AttributeError):
        return ""
    return " ".join(
        f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8") if f in flags
    )


def speedup_at(points: Sequence[KernelPoint], n: int) -> float:
    return next((p.speedup for p in points if p.n == n), math.nan)


def _print_reference(points, reference: list[dict], weights: str) -> None:

    rows = [
        [
            str(p.n),
            fmt_float(p.ar_ms, 2),
            fmt_float(own["ar_ms"], 2),
            fmt_float(p.ar_ms / own["ar_ms"], 2, "x"),
            fmt_float(p.pp_ms, 2),
            fmt_float(own["pp_ms"], 2),
            fmt_float(p.pp_ms / own["pp_ms"], 2, "x"),
        ]
        for p, own in zip(points, reference)
    ]
    out.print(
        f"The llama backend against llama-cpp-python's own Llama.eval, same GGUF and threads, its weights "
        f"{weights} (median ms):"
    )
    out.print(table(["N", "AR backend", "AR own", "ratio", "PP backend", "PP own", "ratio"], rows))


def kernel(
    model: ModelOpt = None,
    prefix: Annotated[int, typer.Option(min=1, help="Random-context prefix length P (tokens).")] = 1024,
    spans: SpansOpt = "1,2,4,8,16,32,64,128,256,512",
    trials: TrialsOpt = 5,
    ar_max: Annotated[
        int,
        typer.Option(
            help="Time at most this many AR steps per trial and scale per token beyond it (0: time them all)."
        ),
    ] = 0,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    attn: Annotated[
        str,
        typer.Option(
            help="Attention: eager (written out, as the paper measured) or sdpa (torch's fused kernel, what fix uses)."
        ),
    ] = "eager",
    all_logits: Annotated[
        bool,
        typer.Option(
            "--all-logits", help="Compute logits for every splice position (a plain forward) instead of the last."
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the random prefix and span tokens.")] = 0,
    json_path: JsonOpt = None,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", metavar="PNG", help="Write the Figure 3 plot here.")
    ] = None,
    backend: BackendOpt = None,
    reference: Annotated[
        bool,
        typer.Option(
            "--reference",
            help="llama backend: also time llama-cpp-python's own Llama.eval on the same GGUF and threads.",
        ),
    ] = False,
    reference_weights: Annotated[
        str,
        typer.Option(
            metavar="same|defaults",
            help="The reference's weights: repacked or not as the backend's are (same: "
            "the backend's own overhead), or as Llama's defaults leave them.",
        ),
    ] = "same",
) -> None:
    """Per-span kernel speedup s(N) = T_AR(N) / T_PP(N) (§3, Figure 3).

    One N-token forward (a copy splice) against N single-token forwards, after a random P-token
    prefix; the cache is cropped back to P between measurements.

    Example: cadedit bench kernel --model model.gguf --prefix 1024 --trials 5 --json kernel.json --plot kernel.png
    """

    if reference_weights not in ("same", "defaults"):
        raise typer.BadParameter(f"{reference_weights!r} is not same or defaults", param_hint="--reference-weights")
    settings = KernelSettings(prefix, span_lengths(spans), trials, ar_max, seed, all_logits)
    loaded = load(model, device, dtype, threads, attn, backend)
    meta = {
        "command": "kernel",
        "model": loaded.name,
        **environment(torch.device(loaded.device), loaded.dtype, loaded),
        "attn": attn if loaded.backend == "torch" else "llama.cpp",
        "prefix": prefix,
        "trials": trials,
        "ar_max": ar_max,
        "seed": seed,
        "logits": "all" if all_logits else "last",
    }
    if reference and loaded.backend != "llama":
        raise typer.BadParameter(
            "the reference is llama.cpp's own: use it with --backend llama", param_hint="--reference"
        )
    points = _kernel_sweeps(loaded, settings, meta, reference_weights if reference else None, json_path)
    _print_kernel(points, meta)
    if reference:
        _print_reference(points, meta["reference"], meta["reference_weights"])
    title = f"{short_name(loaded.name)}, {meta['device_name']}, {meta['dtype']}, {meta['threads']} threads, P={prefix}"
    if plot_path and not plot(points, plot_path, title):
        err.print("matplotlib not installed: no plot (pip install 'cadedit[plot]')")


def _kernel_sweeps(loaded, settings, meta: dict, reference: str | None, json_path: Path | None) -> list:
    """The sweep over span lengths (and with `reference`, "same" or "defaults" as its weights,
    llama.cpp's own Llama.eval on the same ids, taking turns with the backend trial by trial, into
    meta["reference"]); results rewritten to json_path after each point, kept on Ctrl-C."""

    points: list = []
    results = ResultsFile(json_path)

    def save(partial: bool) -> None:
        results.write({**meta, "results": [p.to_json() for p in points]}, partial=partial)

    own_points: list = []

    def on_point(k: int, point) -> None:
        (points if k == 0 else own_points).append(point)
        if reference:
            meta["reference"] = [p.to_json() for p in own_points]
        save(True)
        err.print(
            f"{'llama.cpp own ' if k else ''}N={point.n}: AR {point.ar_ms:.2f} ms"
            f"{' (extrapolated)' if point.extrapolated else ''}, PP {point.pp_ms:.2f} ms, "
            f"s(N) = {point.speedup:.2f}",
            highlight=False,
        )

    try:
        models = [loaded.model]
        if reference:  # both on the same ids, taking turns trial by trial
            repack = {"same": loaded.model.repack, "defaults": None}[reference]
            meta["reference_weights"] = {None: "Llama's defaults", True: "repacked", False: "as stored"}[repack]
            models.append(LlamaReference(str(loaded.model.folder), loaded.threads, loaded.model.n_ctx, repack))
        with ProgressBar(work_units(settings, len(models)), "kernel", err) as bar:
            sweep_turns(models, torch.device(loaded.device), settings, on_point=on_point, advance=bar.advance)
    except KeyboardInterrupt:
        save(True)
        err.print("interrupted: partial results kept", highlight=False)
        raise
    save(False)
    return points


def _print_kernel(points: list, meta: dict) -> None:

    rows = [
        [
            str(p.n),
            fmt_float(p.ar_ms, 2) + (" *" if p.extrapolated else ""),
            fmt_float(p.pp_ms, 2),
            fmt_float(p.speedup, 2, "x"),
        ]
        for p in points
    ]
    caption = (
        "* AR extrapolated per token from the first %d steps." % meta["ar_max"]
        if any(p.extrapolated for p in points)
        else None
    )
    out.print(
        f"Kernel speedup s(N) = T_AR / T_PP: {short_name(meta['model'])} on {meta['device_name']} ({meta['dtype']}, "
        f"{meta['threads']} threads, {meta['attn']} attention, {meta['logits']} logits; CPU flags: "
        f"{meta.get('cpu_flags') or 'unknown'}), P={meta['prefix']}, "
        f"median of {meta['trials']}"
    )
    out.print(table(["N", "AR ms", "PP ms", "s(N)"], rows))
    if caption:
        out.print(caption)
