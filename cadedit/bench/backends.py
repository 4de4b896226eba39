"""What `--backend auto` measures, again and again (`cadedit bench backends`).

Contract: backends(model, rounds, ...) times, `rounds` times taking turns in one process, the two
sides of auto's probe for a GGUF (cadedit.backends.hardware): llama.cpp's edit work (hardware.llama_work_seconds,
as stored; its load included) and torch's estimate of the same work (hardware._torch_work_seconds:
cadedit's forward on 2 and 6 layers of the model's shape, extrapolated, and its load). With --whole,
also the whole model on torch (the GGUF converted once, as `--backend torch` does) loaded and doing
the same work, so the estimate can be checked against what it estimates. Prints each round, the
torch/llama.cpp ratio and the answer auto would give (hardware.TORCH_MARGIN). Measures; caches nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cadedit.bench.options import JsonOpt, ModelOpt, ThreadsOpt
from cadedit.cli.common import say
from cadedit.errors import ModelError
from cadedit.settings import choose_model
from cadedit.backends import hardware
from cadedit.backends.llama import llamacpp
from cadedit.backends.llama.gguf_file import read_metadata
from cadedit.backends.model import load_model
from cadedit.backends.model_files import gguf_path
from cadedit.text.atomic import replace_file


def whole_torch_seconds(gguf: Path, threads: int) -> float:
    """The converted model's own time for the probe's work (hardware.torch_work_seconds), its load
    included as the estimate includes it (the import of torch as this process timed it)."""

    loaded = load_model(str(gguf), threads=threads, backend="torch")
    load = sum(seconds for name, seconds in loaded.phases if name in ("dtype", "weights"))
    return hardware.torch_import_seconds() + load + hardware.torch_work_seconds(loaded.model)


def measure_round(gguf: Path, meta: dict, threads: int, whole: bool) -> dict:

    llama = hardware.llama_work_seconds(gguf, meta, threads)
    torch_estimate, need = hardware._torch_work_seconds(meta, threads)
    row = {
        "llama": llama,
        "torch_estimate": torch_estimate,
        "torch_weight_bytes": need,
        "ratio": torch_estimate / llama,
        "auto": "torch" if torch_estimate * hardware.TORCH_MARGIN < llama else "llama",
    }
    if whole:
        row["torch_whole"] = whole_torch_seconds(gguf, threads)
    return row


def backends(
    model: ModelOpt = None,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds, each timing both sides in turn.")] = 3,
    whole: Annotated[
        bool,
        typer.Option(
            "--whole", help="Also time the whole model on torch (converts the GGUF once, as --backend torch does)."
        ),
    ] = False,
    threads: ThreadsOpt = None,
    json_path: JsonOpt = None,
) -> None:
    """The two sides of `--backend auto`'s probe for a GGUF, several rounds taking turns: llama.cpp's
    edit work against torch's estimate of it (and with --whole the whole torch model's), and what
    auto would choose from each round.

    Example: cadedit bench backends --model M.gguf --rounds 3 --whole
    """
    gguf = gguf_path(model or choose_model())
    if gguf is None:
        raise ModelError(f"{model}: the probe compares backends for a GGUF file", hint="pass --model FILE.gguf")
    llamacpp.require()
    threads = threads or hardware.default_threads()
    meta = read_metadata(gguf)
    rows = []
    for r in range(rounds):
        rows.append(measure_round(gguf, meta, threads, whole))
        row = rows[-1]
        say(
            f"round {r + 1}: llama.cpp {row['llama']:.2f} s, torch estimate {row['torch_estimate']:.2f} s"
            + (f", torch whole model {row['torch_whole']:.2f} s" if whole else "")
            + f"; torch/llama.cpp {row['ratio']:.3f}, auto: {row['auto']}"
        )
        if json_path is not None:
            document = {"model": str(gguf), "threads": threads, "margin": hardware.TORCH_MARGIN, "rounds": rows}
            replace_file(json_path, json.dumps(document, indent=1).encode(), make_parent=True)
    ratios = [row["ratio"] for row in rows]
    print(
        f"{gguf.name} ({threads} threads): torch/llama.cpp {min(ratios):.3f}-{max(ratios):.3f} over {rounds} "
        f"rounds; auto picks torch below {1 / hardware.TORCH_MARGIN:.3f}"
    )
