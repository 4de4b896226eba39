"""The tests a repository already has for an edited definition (`cadedit fix --test auto`, a hook rule's
`test = "auto"`): test files beside the module or named for it that reference the edited names, run with
pytest (only the tests that reach those names, where the file says which), the edited module's doctests,
and for JavaScript the `*.test.js` file beside it (`node --test`).

Discovery reads files and parses them; it runs nothing. What it finds is one shell command, run on
every candidate as `--test CMD` is. Running it runs the repository's code, so callers run it only in a
repository whose settings the user approved (`repository_approved`, docs/trust.md); elsewhere the
command is only suggested. `if __name__ == "__main__"` blocks are not tests and are never run.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cadedit.scope.outline import outline, parser_of
from cadedit.settings import approved, repository_files
from cadedit.text.document import Document

AUTO = "auto"  # the value of --test (and of a hook rule's `test`) that asks for the found tests
# More selected tests than this run as their whole files: a command line stays readable.
MAX_NODE_IDS = 12


@dataclass(frozen=True)
class FoundTests:
    """What runs the found tests: a shell command for the folder `cwd`, and what it covers."""

    command: str
    cwd: Path
    files: tuple[str, ...] = ()  # test files, relative to cwd
    doctests: bool = False  # the edited module's doctests are part of the command

    def describe(self) -> str:
        """ "tests/test_m.py and m.py's doctests" for a message."""
        parts = list(self.files) + (["the module's doctests"] if self.doctests else [])
        return " and ".join(parts)


def edited_names(document: Document, regions: Iterable[tuple[int, int]]) -> tuple[str, ...]:
    """The names of the definitions the regions retype (innermost first: a method, not its class);
    empty for a whole-file edit or a region outside every definition: then every test of the module counts."""
    regions = tuple(regions)
    if not regions:
        return ()
    definitions = outline(document, parser_of(document.path)).definitions
    names: list[str] = []
    for start, end in regions:
        holding = [d for d in definitions if d.start <= end and d.end >= start]
        inner = [d for d in holding if not any(o is not d and d.start <= o.start and o.end <= d.end for o in holding)]
        if not inner:
            return ()
        names += [d.name for d in inner]
    return tuple(dict.fromkeys(names))


def find_tests(
    path: Path, source: str, names: tuple[str, ...], root: Path, which: Callable[[str], str | None] = shutil.which
) -> FoundTests | None:
    """The tests of the module at `path` (its text `source`) that reach `names` (empty: any), run from
    `root` (the repository's work tree, else the module's folder); None when there are none."""
    path, root = path.resolve(), root.resolve()
    if path.suffix == ".py":
        return _python_tests(path, source, names, root, which)
    if path.suffix in (".js", ".mjs", ".cjs"):
        return _javascript_tests(path, names, root)
    return None


def repository_approved(folder: Path) -> bool:
    """Whether the user approved (cadedit trust) a settings file of the repository holding `folder`, as
    it reads now: the approval that lets cadedit run a repository's code (docs/trust.md)."""
    return any(approved(found) for found in repository_files(folder))


def _python_tests(path: Path, source: str, names: tuple[str, ...], root: Path, which) -> FoundTests | None:
    python = _python(root, which)
    selected: list[str] = []
    files: list[str] = []
    for test_file in _candidate_files(path, root, (f"test_{path.stem}.py", f"{path.stem}_test.py")):
        ids = _selected_tests(test_file, _module_parts(path, root), names)
        if ids is None:
            continue
        shown = _relative(test_file, root)
        files.append(shown)
        selected += [f"{shown}::{i}" for i in ids] if ids else [shown]
    if len(selected) > MAX_NODE_IDS:
        selected = files
    commands = []
    if selected:
        commands.append(f"{python} -m pytest -q -p no:cacheprovider " + " ".join(map(shlex.quote, selected)))
    doctests = _has_doctests(source, names)
    if doctests:
        module = shlex.quote(_relative(path, root))
        in_package = (path.parent / "__init__.py").exists()  # python -m doctest cannot import it as pkg.mod
        commands.append(
            f"{python} -m pytest -q -p no:cacheprovider --doctest-modules {module}"
            if in_package
            else f"{python} -m doctest {module}"
        )
    if not commands:
        return None
    return FoundTests(" && ".join(commands), root, tuple(files), doctests)


def _javascript_tests(path: Path, names: tuple[str, ...], root: Path) -> FoundTests | None:
    stem = path.name.rsplit(".", 1)[0]
    files = []
    for test_file in _candidate_files(path, root, (f"{stem}.test.js", f"{stem}.test.mjs")):
        text = _read(test_file)
        if text is not None and re.search(rf"\b{re.escape(stem)}\b", text) and _mentions(text, names):
            files.append(_relative(test_file, root))
    if not files:
        return None
    return FoundTests("node --test " + " ".join(map(shlex.quote, files)), root, tuple(files))


def _candidate_files(path: Path, root: Path, file_names: tuple[str, ...]) -> list[Path]:
    """The files named for the module beside it, in a tests/ (or test/) folder beside it, and in tests/
    of each folder above it up to root; each once, in that order."""
    folders = [path.parent]
    folder = path.parent
    while True:
        folders += [folder / "tests", folder / "test"]
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    found = []
    for folder in folders:
        for name in file_names:
            candidate = folder / name
            if candidate.is_file() and candidate.resolve() != path and candidate not in found:
                found.append(candidate)
    return found


def _selected_tests(test_file: Path, module: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The pytest node ids (after `FILE::`) of the file's tests that reach `names`, through the helpers
    and fixtures of the file; () for the whole file (it reaches them only outside any test, or names is
    empty); None when the file does not import the module (`module`: its path's parts), never
    mentions the names, or does not parse."""
    text = _read(test_file)
    if text is None or not re.search(rf"\b{re.escape(module[-1])}\b", text) or not _mentions(text, names):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    if not _imports(tree, module):
        return None
    if not names:
        return ()
    reach = _reaching(tree, set(names))
    ids = [node_id for node_id, used in _tests(tree) if used & reach]
    return tuple(ids)


def _module_parts(path: Path, root: Path) -> tuple[str, ...]:
    """The module's path from the root as dotted-name parts: pkg/calc.py -> ("pkg", "calc")."""
    try:
        return path.with_suffix("").relative_to(root).parts
    except ValueError:
        return (path.stem,)


def _imports(tree: ast.Module, module: tuple[str, ...]) -> bool:
    """Whether the file imports the module: a dotted name (`pkg.calc`, `from pkg import calc`, `from
    .calc import f`) that ends the module's path, so that a tests/test_utils.py of pkg_b/utils.py is no
    test of pkg_a/utils.py."""

    def ends_path(dotted: list[str]) -> bool:
        return 0 < len(dotted) <= len(module) and list(module[-len(dotted) :]) == dotted

    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(ends_path(a.name.split(".")) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom):
            base = node.module.split(".") if node.module else []
            if ends_path(base) or any(ends_path([*base, a.name]) for a in node.names):
                return True
    return False


def _reaching(tree: ast.Module, names: set[str]) -> set[str]:
    """The names and every module-level helper or fixture of the file that uses one of them (to a fixpoint)."""
    reach = set(names)
    helpers = {
        node.name: _used(node)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not _is_test(node)
    }
    grew = True
    while grew:
        grew = False
        for name, used in helpers.items():
            if name not in reach and used & reach:
                reach.add(name)
                grew = True
    return reach


def _tests(tree: ast.Module) -> list[tuple[str, set[str]]]:
    """(node id, names used) for each test function and each test method of a test class."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.append((node.name, _used(node)))
        elif isinstance(node, ast.ClassDef) and _is_test(node):
            methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            shared = set()  # what every test of the class runs: its decorators, setUp, fixtures and attributes
            for part in [*node.decorator_list, *node.bases, *(m for m in node.body if m not in methods)]:
                shared |= _used(part)
            for method in methods:
                if not method.name.startswith("test"):
                    shared |= _used(method)
            for method in methods:
                if method.name.startswith("test"):
                    found.append((f"{node.name}::{method.name}", _used(method) | shared))
    return found


def _is_test(node: ast.AST) -> bool:
    """A test as pytest collects it: test* functions, Test* classes and unittest TestCase subclasses."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name.startswith("test")
    if isinstance(node, ast.ClassDef):
        bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
        return node.name.startswith("Test") or "TestCase" in bases
    return False


def _used(node: ast.AST) -> set[str]:
    """The names a definition uses: variables, attributes and its parameters (fixtures by name)."""
    used = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            used.add(child.id)
        elif isinstance(child, ast.Attribute):
            used.add(child.attr)
        elif isinstance(child, ast.arg):
            used.add(child.arg)
        elif isinstance(child, ast.alias):
            used.add((child.asname or child.name).rsplit(".", 1)[-1])
    return used


def _has_doctests(source: str, names: tuple[str, ...]) -> bool:
    """Whether the module's docstrings hold an example (`>>>`): those of the edited definitions, or any
    in the module for a whole-file edit."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    if names:
        nodes = [n for n in nodes if getattr(n, "name", None) in names]
    return any(">>>" in (ast.get_docstring(n) or "") for n in nodes)


def _mentions(text: str, names: tuple[str, ...]) -> bool:
    return not names or any(re.search(rf"\b{re.escape(name)}\b", text) for name in names)


def _python(root: Path, which) -> str:
    """The interpreter the repository's own tests run with: its virtual environment's, else python3 or
    python on PATH."""
    for venv in (".venv", "venv"):
        candidate = root / venv / "bin" / "python"
        if candidate.is_file():
            return shlex.quote(str(Path(venv) / "bin" / "python"))
    return "python3" if which("python3") or not which("python") else "python"


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
