"""One document's trip through `cadedit fix`: which cadedit modules an edit passes through, in order.

    python tools/trip.py [--mode verify] [--scope whole|function] [--show]

Runs one `cadedit fix` (one try, the tiny random-weight model of the tests, in this process) under
a profiler and follows the document from `tries.edit_verified` down, module by module: every call
of a cadedit function that is handed the document (or an object whose `.document` is it) moves it
to that function's module, and that call's return moves it back to its caller's. The document's own
methods (reading its lines) are not moves unless --accessors. The decode
loop's per-token traffic (below decode.decode / decode.decode_rows) and the model side (loading, the
forward, the tokenizer, the grammar's vocabulary) are one step each, not followed: they are the one
loop and the one model interface by design. --tree runs another checkout of cadedit (a before/after
comparison). Prints the number of stays (consecutive steps in one module), the modules visited, how many times
the document came back to a module it had left (a return from a call included), each module's
count of stays, and how many times each module was entered by a call. With --by layer the rooms are
cadedit's folders (text/, prompt/, decode/ ...) instead of its modules. With --show, the path itself.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the flat layout's names and the layered one's (--tree may run either)
OPAQUE = {
    "decode.decode",
    "decode.decode_rows",
    "qwen2",
    "tokenizer",
    "model",
    "llamacpp",
    "vocab",
    "grammar",
    "hardware",
    "steps",
    "prefix_store",
    "decode.loop.decode",
    "decode.loop.decode_rows",
    "backends",
    "decode.fsm",
}
SOURCE = '''def mean(values):
    total = 0
    for value in values:
        total += value
    return total / (len(values) - 1)


def spread(values):
    return max(values) - min(values)
'''


def module_of(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if not name.startswith("cadedit.") or name.startswith("cadedit.bench"):
        return None
    return name.removeprefix("cadedit.")


def opaque(module: str, frame) -> bool:
    qual = f"{module}.{frame.f_code.co_qualname}" if hasattr(frame.f_code, "co_qualname") else module
    return module in OPAQUE or any(qual == o or qual.startswith(o + ".") for o in OPAQUE)


def room(module: str, by: str) -> str:
    """Where a step stays: its module, or with --by layer its folder (a top-level module is its own)."""
    return module.split(".")[0] if by == "layer" else module


def trace_fix(args) -> tuple[list[str], collections.Counter]:
    from typer.testing import CliRunner

    from cadedit.tries import loop as tries
    from cadedit.cli.root import app
    from tests.tinymodel import save_model

    path: list[str] = []
    entered: collections.Counter = collections.Counter()
    stack: list[tuple[object, str]] = []  # (frame, module) of the calls that carry the document
    state = {"document": None}

    def carries(frame) -> bool:
        doc = state["document"]
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            value = frame.f_locals.get(name)
            if name == "self" and value is doc and not args.accessors:
                continue
            if value is doc or getattr(value, "document", None) is doc:
                return True
        return False

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code is tries.edit_verified.__code__ and state["document"] is None:
            state["document"] = frame.f_locals["document"]
        if state["document"] is None or event not in ("call", "return"):
            return
        module = module_of(frame)
        if module is None:
            return
        if event == "call":
            if any(opaque(m, f) for f, m in stack) or not carries(frame):
                return
            if not stack or stack[-1][1] != module:
                entered[module] += 1
            stack.append((frame, module))
        elif stack and stack[-1][0] is frame:
            stack.pop()
            if not stack:
                return
            module = stack[-1][1]
        else:
            return
        if not path or path[-1] != module:
            path.append(module)

    with tempfile.TemporaryDirectory() as tmp:
        folder = save_model(Path(tmp) / "tiny")
        target = Path(tmp) / "stats.py"
        target.write_text(SOURCE)
        argv = [
            "fix",
            str(target),
            "Fix the off-by-one in mean.",
            "--model",
            str(folder),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--tries",
            "1",
            "--mode",
            args.mode,
            "--max-new-tokens",
            "40",
        ]
        if args.scope != "whole":
            argv += ["--scope", args.scope]
        here = os.getcwd()
        os.chdir(tmp)
        sys.setprofile(profile)
        try:
            # A throwaway cache for the throwaway model (the runner restores the variable): what the run
            # stores there (verify's forward-cost curve) is keyed by this temporary folder, so in the
            # user's own cache it would only pile up.
            result = CliRunner().invoke(app, argv, env={"XDG_CACHE_HOME": str(Path(tmp) / "cache")})
        finally:
            sys.setprofile(None)
            os.chdir(here)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    if not path:
        raise SystemExit(f"cadedit fix exited {result.exit_code} before any edit: {result.output[-500:]}")
    return path, entered


def summarize(path: list[str]) -> dict:
    seen: set[str] = set()
    returns = 0
    for i, module in enumerate(path):
        if module in seen and path[i - 1] != module:
            returns += 1
        seen.add(module)
    return {
        "stays": len(path),
        "modules": len(seen),
        "returns": returns,
        "per_module": collections.Counter(path).most_common(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="verify")
    parser.add_argument("--scope", default="whole", help="whole (no --scope) or a --scope value, e.g. function")
    parser.add_argument("--show", action="store_true")
    parser.add_argument(
        "--accessors",
        action="store_true",
        help="also follow the document's own methods (its lines, its text) as visits to document.py",
    )
    parser.add_argument(
        "--by",
        choices=["module", "layer"],
        default="module",
        help="count stays per module, or per layer (a folder of cadedit; a top-level module is its own)",
    )
    parser.add_argument("--tree", type=Path, default=ROOT, help="the cadedit checkout to trace (default: this one)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    path, entered = trace_fix(args)
    if args.by == "layer":
        rooms = [room(m, "layer") for m in path]
        path = [m for i, m in enumerate(rooms) if i == 0 or rooms[i - 1] != m]
        by_layer: collections.Counter = collections.Counter()
        for module, count in entered.items():
            by_layer[room(module, "layer")] += count
        entered = by_layer
    found = summarize(path)
    print(f"{found['stays']} stays in {found['modules']} modules, {found['returns']} returns to a module already left")
    print("  stays: " + ", ".join(f"{m} {n}" for m, n in found["per_module"]))
    print("  entered by a call: " + ", ".join(f"{m} {n}" for m, n in entered.most_common()))
    if args.show:
        print(" -> ".join(path))


if __name__ == "__main__":
    main()
