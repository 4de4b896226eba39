"""Two cadedit trees, side by side: the same `cadedit fix` runs (one greedy try per mode) on the first
N HumanEvalFix cases, each run in a fresh process of each tree in turn (which first alternates); prints whether every answer
is byte-identical and each tree's median wall clock. A refactor's check that nothing changed.

    python tools/same_output.py OLD_TREE NEW_TREE --model M.gguf [--limit 10] [--modes verify,rewrite]

Each tree is put first on PYTHONPATH of the venv's `cadedit` console script; the model, backend,
dtype and threads are the same for both (default: torch, fp32, 2 threads).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cadedit.bench.corpus import load_corpus  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared/data/humanevalfix/humanevalfix_python.jsonl"


def run(tree: str, folder: Path, case, mode: str, args) -> tuple[str, float]:
    source = folder / "solution.py"
    source.write_text(case.before)
    command = [
        str(Path(sys.executable).with_name("cadedit")),
        "fix",
        str(source),
        case.instruction,
        "--mode",
        mode,
        "--tries",
        "1",
        "--allow-no-change",
        "--json",
        "--quiet",
        "--model",
        args.model,
        "--backend",
        args.backend,
        "--dtype",
        args.dtype,
        "--threads",
        str(args.threads),
    ]
    if args.max_new_tokens:
        command += ["--max-new-tokens", str(args.max_new_tokens)]
    env = {**os.environ, "PYTHONPATH": tree, "CADEDIT_PREFIX_CACHE": "0", "CADEDIT_SERVER": "0"}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, cwd=folder, timeout=600)
    wall = time.perf_counter() - start
    try:
        data = json.loads(done.stdout)
        # What the model wrote (its raw answer) and what cadedit made of it (the diff, the verdict).
        answer = f"{data.get('program_as_written', '')}|{data.get('diff', '')}|passed={data.get('passed')}"
    except ValueError:
        answer = f"exit {done.returncode}: {done.stderr.decode()[-300:]}"
    return hashlib.sha256(answer.encode()).hexdigest()[:12], wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--model", required=True)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--modes", default="verify,rewrite,lookup,program")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--max-new-tokens", type=int, default=0, help="a budget per fix (default: cadedit's)")
    args = parser.parse_args()
    cases = load_corpus(args.corpus, args.limit, "docs")
    walls: dict[str, list[float]] = {"old": [], "new": []}
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            for mode in args.modes.split(","):
                got = {}
                trees = [("old", args.old), ("new", args.new)]
                for name, tree in trees if i % 2 == 0 else trees[::-1]:  # neither tree always runs first
                    got[name], wall = run(tree, Path(tmp), case, mode, args)
                    walls[name].append(wall)
                same = got["old"] == got["new"]
                differ += not same
                print(f"{case.id} {mode}: {'same' if same else 'DIFFERENT'} ({got['old']} / {got['new']})", flush=True)
    n = len(walls["old"])
    print(
        f"{n - differ}/{n} runs byte-identical; median wall old {statistics.median(walls['old']):.2f} s, "
        f"new {statistics.median(walls['new']):.2f} s (ratio {statistics.median(walls['new']) / statistics.median(walls['old']):.3f})"
    )


if __name__ == "__main__":
    main()
