"""The house's imports point one way: no module of cadedit imports one that (directly or through
others) imports it back at import time, and every module imports on its own in a fresh interpreter
(`python -c "import cadedit.hook_cli"` once raised ImportError)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cadedit"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def top_level_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The cadedit modules `name` imports when it is imported (module level, not inside functions)."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in known:
                out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in known}
    return out - {name}


def test_no_import_cycle_at_import_time():
    known = modules()
    graph = {name: top_level_imports(name, path, set(known)) for name, path in known.items()}
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(other):] + [name, other])
                                     if other in trail else f"import cycle through {name} -> {other}")
            if other not in state:
                visit(other, trail + [name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_every_module_imports_on_its_own():
    names = [n for n in modules() if not n.endswith("__main__")]
    failed = []
    for start in range(0, len(names), 4):
        batch = names[start:start + 4]
        procs = [(n, subprocess.Popen([sys.executable, "-c", f"import {n}"], stderr=subprocess.PIPE)) for n in batch]
        for name, proc in procs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode:
                failed.append(f"{name}: {err.decode().strip().splitlines()[-1]}")
    assert not failed, "\n".join(failed)
