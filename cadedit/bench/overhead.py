"""Fixed overhead, prompt reuse and the one-token step (`cadedit bench overhead`).

Contract: overhead(model, file, ...) runs `cadedit fix FILE INSTRUCTION --tries 1 --json` as a fresh
process, twice with two different instructions on the same file, and reports per run: the wall
clock seen from outside, the decode's own seconds from --json, the overhead (wall minus decode:
interpreter start, imports, weights, dtype choice, tokenizer, prompt, output), the load phases,
and the prompt tokens fed vs reused from the on-disk prefix store (the second run should feed only
the instruction and what follows it). Then, in this process, the one-token decode step of the
loaded model after a 1,024-token prefix in fp32, bf16 and bf16 with int8 steps (median of 20 steps).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from cadedit.backends.model import CachedLM, load_model, new_cache

INSTRUCTIONS = ("Add a docstring to the first function.", "Rename the first function's first parameter to `value`.")


def run_fix(model: str, file: Path, instruction: str, extra: list[str]) -> dict:
    """One `cadedit fix` process, run in the file's folder (its diff names the file from there)."""
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cadedit",
            "fix",
            file.name,
            instruction,
            "--model",
            model,
            "--tries",
            "1",
            "--json",
            "--allow-no-change",
            "--quiet",
            *extra,
        ],
        cwd=file.parent,
        capture_output=True,
        text=True,
        env={**os.environ, "CADEDIT_SERVER": "0"},
    )
    wall = time.perf_counter() - start
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return {"wall": wall, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    stats = data.get("statistics", {})
    return {
        "wall": wall,
        "first_forward": data.get("seconds_to_first_forward"),
        "decode": stats.get("seconds_total"),
        "overhead": wall - (stats.get("seconds_total") or 0),
        "load_seconds": data.get("load_seconds"),
        "load_phases": data.get("load_phases"),
        "dtype": data.get("dtype"),
        "prompt_fed": stats.get("tokens_prompt"),
        "prompt_reused": stats.get("tokens_reused"),
        "prefill_seconds": stats.get("seconds_prefill"),
    }


def step_ms(model: str, dtype: str, threads: int | None, prefix: int = 1024, steps: int = 20) -> float:

    loaded = load_model(model, "cpu", dtype, threads)
    lm = CachedLM(loaded.model, new_cache(loaded))
    vocab = loaded.model.config.vocab_size
    lm.feed([(100 + k % 5000) % vocab for k in range(prefix)])
    times = []
    for k in range(steps + 3):
        start = time.perf_counter()
        lm.feed([(200 + k) % vocab])
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[3:])


def overhead(
    model: Annotated[str, typer.Option("--model", "-m", help="A model folder or .gguf file.")],
    file: Annotated[Path, typer.Option("--file", help="The file to edit (a copy is made).")],
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads.")] = None,
    dtype: Annotated[str, typer.Option(help="auto, fp32 or bf16 for the fix runs.")] = "auto",
    json_path: Annotated[Path | None, typer.Option("--json", metavar="PATH", help="Write the results here.")] = None,
) -> None:
    """Process start to answer for `cadedit fix`, what of it is not model work, how much of the
    prompt a second edit of the same file feeds again, and the one-token step in fp32, bf16, bf16-int8 and
    bf16-int4 (a GGUF's own 4-bit weights; int8 where it has none).

    Example: cadedit bench overhead --model MODEL --file examples/before.py --json overhead.json
    """
    import shutil
    import tempfile

    model = str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else model
    extra = ["--dtype", dtype] + (["--threads", str(threads)] if threads else [])
    with tempfile.TemporaryDirectory(prefix="cadedit-overhead-") as tmp:
        target = Path(tmp) / file.name
        shutil.copyfile(file, target)
        runs = [run_fix(model, target, instruction, extra) for instruction in INSTRUCTIONS]
    steps = {name: step_ms(model, name, threads) for name in ("fp32", "bf16", "bf16-int8", "bf16-int4")}
    first, second = runs
    result = {"model": model, "file": str(file), "runs": runs, "step_ms": steps}
    if first.get("prompt_fed") and second.get("prompt_fed") is not None:
        result["second_prefill_share"] = second["prompt_fed"] / (first["prompt_fed"] + first.get("prompt_reused", 0))
    for k, run in enumerate(runs, 1):
        if "error" in run:
            typer.echo(f"run {k}: error: {run['error']}")
            continue
        if run["decode"] is None:
            typer.echo(f"run {k}: wall {run['wall']:.2f} s, no decode statistics (no try passed its checks)")
            continue
        first = f"first forward at {run['first_forward']:.2f} s, " if run.get("first_forward") is not None else ""
        typer.echo(
            f"run {k}: wall {run['wall']:.2f} s, {first}decode {run['decode']:.2f} s, overhead {run['overhead']:.2f} s "
            f"(load {run['load_seconds']:.2f} s: "
            + ", ".join(f"{n} {s:.2f}" for n, s in run["load_phases"].items())
            + f"), prompt fed {run['prompt_fed']} reused {run['prompt_reused']}, dtype {run['dtype']}"
        )
    if "second_prefill_share" in result:
        typer.echo(f"second edit of the same file feeds {100 * result['second_prefill_share']:.1f}% of the prompt")
    typer.echo("one-token step after a 1,024-token prefix: " + ", ".join(f"{n} {ms:.1f} ms" for n, ms in steps.items()))
    if json_path:
        json_path.write_text(json.dumps(result, indent=2))
