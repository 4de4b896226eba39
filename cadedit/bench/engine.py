"""Many clients on one shared engine (`cadedit bench engine`).

Contract: engine(url, model, ...) takes the long-file tasks of bench longfile (one planted one-line bug
in a real 200-1,000-line module each; with --one-file, n bugs planted one at a time in the same module,
each its own task and instruction: a team on one module), and edits every task with `cadedit fix FILE
INSTRUCTION --write --json`, as fresh processes: N at once against the engine for each N of --clients
(each process one task, N running at any moment), then one at a time with a local model (`--model`,
`--backend`), as a team without an engine would. Per run: throughput (edits per minute of wall),
p50/p95 latency of an edit (process start to exit), exact matches with the original file, the engine's
tokens per edit (prompt, of them served from its prompt cache, completion) and its speculative drafts
accepted; with the local runs, how many of each engine run's edited files are byte-identical to the
local run's (each row keeps its file's SHA-256). The engine's own settings (batching, speculation,
threads) are the engine's: state them beside the figures. Imports no torch (the local runs are
processes too).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Optional

import typer

from cadedit.bench.options import PACKAGES, PackagesOpt, TaskSeedOpt, TasksOpt
from cadedit.bench.options import int_list, longfile_roots
from cadedit.settings import choose_engine
from cadedit.bench import longfile as lf


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def run_one(task: dict, folder: Path, args: list[str]) -> dict:
    """One `cadedit fix --write` process on a fresh copy of the task's buggy file."""

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(task["path"]).name
    target.write_text(task["before"], encoding="utf-8")
    start = time.perf_counter()
    # No warm server and no saved prompt prefixes: every edit, local or remote, starts as cold as the
    # engine's first sight of the file.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cadedit",
            "fix",
            target.name,
            task["instruction"],
            "--write",
            "--json",
            "--quiet",
            *args,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "CADEDIT_SERVER": "0", "CADEDIT_PREFIX_CACHE": "0"},
    )
    wall = time.perf_counter() - start
    after = target.read_bytes()
    row = {
        "id": task["id"],
        "path": task["path"],
        "seconds": wall,
        "exit": done.returncode,
        "exact": lf.score(task, after.decode("utf-8"))["exact"],
        "sha256": hashlib.sha256(after).hexdigest(),
    }
    try:
        data = json.loads(done.stdout)
    except ValueError:
        row["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return row
    usage = [t.get("engine") for t in data.get("tries", []) if t.get("engine")]
    row["tries"] = len(data.get("tries", []))
    row["prompt_tokens"] = sum(u["prompt_tokens"] for u in usage) if usage else None
    row["completion_tokens"] = sum(u["completion_tokens"] for u in usage) if usage else None
    for key in ("cached_tokens", "draft_tokens", "draft_accepted"):
        row[key] = sum(u.get(key) or 0 for u in usage) if usage else None
    row["new_tokens"] = sum(t.get("tokens_new") or 0 for t in data.get("tries", []))
    return row


def run_batch(tasks: list[dict], root: Path, args: list[str], clients: int) -> dict:
    """Every task as its own process, `clients` of them at a time; the wall and each edit's row."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        rows = list(pool.map(lambda k: run_one(tasks[k], root / f"c{clients}-{k}", args), range(len(tasks))))
    wall = time.perf_counter() - start
    return summarize(rows, wall, clients)


def summarize(rows: list[dict], wall: float, clients: int) -> dict:
    latencies = [r["seconds"] for r in rows]
    prompt = [r["prompt_tokens"] for r in rows if r.get("prompt_tokens") is not None]
    completion = [r["completion_tokens"] for r in rows if r.get("completion_tokens") is not None]
    cached = [r["cached_tokens"] for r in rows if r.get("cached_tokens") is not None]
    return {
        "clients": clients,
        "edits": len(rows),
        "wall_seconds": round(wall, 2),
        "edits_per_minute": round(60 * len(rows) / wall, 2) if wall else 0.0,
        "p50_seconds": round(statistics.median(latencies), 2) if latencies else 0.0,
        "p95_seconds": round(_percentile(latencies, 0.95), 2),
        "exact": sum(bool(r["exact"]) for r in rows),
        "errors": sum("error" in r for r in rows),
        "prompt_tokens_per_edit": round(statistics.mean(prompt), 1) if prompt else None,
        "completion_tokens_per_edit": round(statistics.mean(completion), 1) if completion else None,
        "cached_tokens_per_edit": round(statistics.mean(cached), 1) if cached else None,
        "draft_tokens": sum(r.get("draft_tokens") or 0 for r in rows),
        "draft_accepted": sum(r.get("draft_accepted") or 0 for r in rows),
        "rows": rows,
    }


def engine(
    url: Annotated[
        Optional[str], typer.Option("--engine", metavar="URL", help="The engine's base URL (default: CADEDIT_ENGINE).")
    ] = None,
    model: Annotated[
        Optional[str], typer.Option("--model", "-m", help="The local model (a .gguf) for the one-at-a-time runs.")
    ] = None,
    backend: Annotated[str, typer.Option(help="The local runs' backend.")] = "llama",
    clients: Annotated[str, typer.Option(help="Concurrent client processes, comma-separated.")] = "1,4,8,16",
    one_file: Annotated[
        bool,
        typer.Option(
            "--one-file",
            help="All n edits in one module (each its own planted "
            "bug and instruction): a team on one file, where the prompt cache "
            "can serve what the edits share.",
        ),
    ] = False,
    n: TasksOpt = 16,
    seed: TaskSeedOpt = 0,
    packages: PackagesOpt = PACKAGES,
    tries: Annotated[int, typer.Option(min=1, help="--tries of each fix.")] = 1,
    threads: Annotated[Optional[int], typer.Option(min=1, help="--threads of the local runs.")] = None,
    max_new_tokens: Annotated[
        Optional[int], typer.Option("--max-new-tokens", min=1, help="Passed to every fix.")
    ] = None,
    engine_timeout: Annotated[
        float,
        typer.Option(
            "--engine-timeout",
            min=1.0,
            help="--engine-timeout of each fix: an engine that serves one request at a time "
            "queues the others, so the last of N waits for N edits.",
        ),
    ] = 3600.0,
    local: Annotated[bool, typer.Option("--local/--no-local", help="Also run the edits one at a time locally.")] = True,
    local_only: Annotated[bool, typer.Option("--local-only", help="Only the local runs (no engine needed).")] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", metavar="PATH", help="Write the results here.")] = None,
) -> None:
    """N concurrent `cadedit fix` processes against one engine beside the same edits one at a time locally.

    Example: cadedit bench engine --engine http://127.0.0.1:8080/v1 --model qwen-0.5b.gguf -n 16 --clients 1,4,16
    """

    if not local_only:
        url = choose_engine(url)
        if url is None:
            raise typer.BadParameter("name the engine: --engine URL or CADEDIT_ENGINE", param_hint="--engine")
    if local and model is None:
        raise typer.BadParameter("the local runs need --model (a .gguf), or pass --no-local", param_hint="--model")
    counts = [] if local_only else int_list(clients, "--clients")
    if counts and min(counts) < 1:
        raise typer.BadParameter("each count of clients must be at least 1", param_hint="--clients")
    tasks = (lf.build_file_tasks if one_file else lf.build_tasks)(longfile_roots(packages), n, seed)
    common = ["--tries", str(tries)] + (["--max-new-tokens", str(max_new_tokens)] if max_new_tokens else [])
    results: dict = {"engine": url, "tasks": len(tasks), "one_file": one_file, "seed": seed, "tries": tries, "runs": []}
    with tempfile.TemporaryDirectory(prefix="cadedit-bench-engine-") as tmp:
        for count in counts:
            summary = run_batch(
                tasks, Path(tmp), [*common, "--engine", url, "--engine-timeout", str(engine_timeout)], count
            )
            results["runs"].append({"where": "engine", **summary})
            _report(f"engine, {count} client{'s' * (count != 1)}", summary)
        if local or local_only:
            model = str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else model
            args = [*common, "--model", model, "--backend", backend, "--engine", ""]
            summary = run_batch(tasks, Path(tmp) / "local", args + (["--threads", str(threads)] if threads else []), 1)
            results["runs"].append({"where": "local", **summary})
            _report(f"local {backend}, one at a time", summary)
            _compare(results["runs"], summary)
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def _compare(runs: list[dict], local: dict) -> None:
    """Each engine run's edited files byte for byte against the local run's, task by task."""
    theirs = {row["id"]: row["sha256"] for row in local["rows"]}
    for run in runs:
        if run["where"] != "engine":
            continue
        run["same_as_local"] = sum(row["sha256"] == theirs.get(row["id"]) for row in run["rows"])
        typer.echo(
            f"engine, {run['clients']} client{'s' * (run['clients'] != 1)}: {run['same_as_local']}/{run['edits']} "
            "edited files byte-identical to the local run's"
        )


def _report(label: str, s: dict) -> None:
    tokens = (
        (
            f", {s['prompt_tokens_per_edit']:.0f} prompt ({s['cached_tokens_per_edit']:.0f} cached) + "
            f"{s['completion_tokens_per_edit']:.0f} completion tokens per edit, drafts {s['draft_accepted']}/"
            f"{s['draft_tokens']} accepted"
        )
        if s["prompt_tokens_per_edit"] is not None
        else ""
    )
    typer.echo(
        f"{label}: {s['edits']} edits in {s['wall_seconds']:.1f} s = {s['edits_per_minute']:.1f} edits/min, "
        f"p50 {s['p50_seconds']:.1f} s, p95 {s['p95_seconds']:.1f} s, exact {s['exact']}/{s['edits']}"
        + (f", {s['errors']} errors" if s["errors"] else "")
        + tokens
    )
