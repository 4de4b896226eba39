"""The house's imports point one way. Every import statement of cadedit counts (module level, inside
functions, under TYPE_CHECKING): no cycle among cadedit's modules, no edge from a layer to a later one
in LAYERS, few imports of cadedit's own modules inside functions, each with a comment saying why, and
every module imports on its own in a fresh interpreter (`python -c "import cadedit.cli.hook"` once
raised ImportError)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cadedit"

# Bottom first: a module imports from its own layer and those listed before it, never from a later one.
# `pkg.*` is a folder of cadedit (the package and everything in it); the first entry that names a module wins.
LAYERS: list[tuple[str, list[str]]] = [
    ("errors", ["cadedit", "cadedit.errors"]),
    ("text", ["cadedit.text.*"]),
    ("settings", ["cadedit.settings", "cadedit.options", "cadedit.results", "cadedit.spawn"]),
    ("prompt", ["cadedit.prompt.*"]),
    ("scope", ["cadedit.scope.*"]),
    ("backends", ["cadedit.backends.*"]),
    ("decode", ["cadedit.decode.*"]),
    ("tries", ["cadedit.tries.*"]),
    ("git", ["cadedit.git.*"]),
    ("server", ["cadedit.server.*"]),
    ("console", ["cadedit.cli.common"]),  # the one console and shared options: bench/ uses them too
    ("bench", ["cadedit.bench.*"]),
    ("cli", ["cadedit.cli.*", "cadedit.entry", "cadedit.__main__"]),
]
# Imports of cadedit's own modules inside functions: the backend boundary's (backends/model.py and
# hardware.py import backends/torch/, hence torch, only when a torch model loads or is probed), the warm
# server's side of server/warm.py (its client, which every command may use, imports no numpy), the two
# clients cli/common.py makes (every command imports it), cli/hook.py's model side (numpy: most commits
# match no rule and the hook exits before it), bench e2e's --floor (torch), and entry.py's (Ctrl-C while
# the CLI imports). The other commands need none: cli/root.py and bench/cli.py name each command's module
# and import it only when that command runs (cli/common.LazyGroup).
MAX_LAZY = 18


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> list[tuple[int, str, bool]]:
    """(line, imported cadedit module, whether inside a function) for every import statement of `name`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if node is not fn
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out += [(node.lineno, target, id(node) in inside) for target in targets if target in known and target != name]
    return out


def graph(root: Path = PACKAGE) -> dict[str, list[tuple[int, str, bool]]]:
    known = modules(root)
    return {name: imports(name, path, set(known)) for name, path in known.items()}


def layer_of(name: str) -> int:
    for index, (_, members) in enumerate(LAYERS):
        if name in members or any(m.endswith(".*") and (name == m[:-2] or name.startswith(m[:-1])) for m in members):
            return index
    raise AssertionError(f"{name} is in no layer of tests/test_imports.py's LAYERS: add it")


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> list[str] | None:
        state[name] = 1
        for other in sorted(edges.get(name, ())):
            if state.get(other) == 1:
                return trail[trail.index(other) :] + [name, other] if other in trail else [name, other]
            if other not in state and (found := visit(other, trail + [name])):
                return found
        state[name] = 2
        return None

    for name in sorted(edges):
        if name not in state and (found := visit(name, [])):
            return found
    return None


def test_no_import_cycle_counting_every_import():
    edges = {name: {target for _, target, _ in found} for name, found in graph().items()}
    found = cycle(edges)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_cycle_check_sees_an_import_inside_a_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def late():\n    from pkg.a import x\n")
    edges = {name: {t for _, t, _ in found} for name, found in graph(package).items()}
    assert cycle(edges) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


def test_every_module_is_in_a_layer_and_imports_point_down():
    up = sorted(
        {
            f"{name}:{line} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
            for name, found in graph().items()
            for line, target, _ in found
            if layer_of(target) > layer_of(name)
        }
    )
    assert not up, "imports pointing up the layers:\n" + "\n".join(up)


def test_imports_inside_functions_are_few_and_say_why():
    lazy = sorted({(name, line) for name, found in graph().items() for line, _, inside in found if inside})
    assert len(lazy) <= MAX_LAZY, f"{len(lazy)} imports of cadedit inside functions (at most {MAX_LAZY})"
    paths = modules()
    silent = []
    for name, line in lazy:
        statement = next(
            node
            for node in ast.walk(ast.parse(paths[name].read_text(encoding="utf-8")))
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno == line
        )
        text = paths[name].read_text(encoding="utf-8").splitlines()[statement.end_lineno - 1]
        if "#" not in text:
            silent.append(f"{name}:{line}")
    assert not silent, "imports of cadedit inside functions without a comment saying why: " + ", ".join(silent)


def test_every_module_imports_on_its_own():
    names = [n for n in modules() if not n.endswith("__main__")]
    failed = []
    for start in range(0, len(names), 4):
        batch = names[start : start + 4]
        procs = [(n, subprocess.Popen([sys.executable, "-c", f"import {n}"], stderr=subprocess.PIPE)) for n in batch]
        for name, proc in procs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode:
                failed.append(f"{name}: {err.decode().strip().splitlines()[-1]}")
    assert not failed, "\n".join(failed)
