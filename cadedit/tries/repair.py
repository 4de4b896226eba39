"""Repairs of a Python candidate outside the lines the model retyped: the import block and `__all__`.

Contract: repaired(path, before, after, instruction) returns `after` with (1) the imports that names
the edit newly uses need, where a name is a standard-library module (`logging`), a `typing` name
(`Optional`) or a module logger (`logger`: `logging.getLogger(__name__)`), put after the module's
last top-level import; and (2) the names of definitions the instruction asks to delete taken out of
a literal `__all__`. A scoped edit retypes one definition, so it cannot reach those lines; a small
model that writes `Optional[int]` or deletes `shorten` would otherwise ship a NameError or a broken
`from m import *`. Nothing else changes; text that does not parse, other languages and names the
table does not know come back as they are (the names check then fails them). Pure: no torch.
"""

from __future__ import annotations

import ast
import re
import typing

from cadedit.tries.code_checks import asks_to_remove
from cadedit.text.languages import language_of

# Modules a bare name most likely means: the standard library's, by their usual import name.
_MODULES = frozenset(
    {
        "abc",
        "argparse",
        "ast",
        "asyncio",
        "base64",
        "bisect",
        "collections",
        "contextlib",
        "copy",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "glob",
        "hashlib",
        "heapq",
        "inspect",
        "io",
        "itertools",
        "json",
        "logging",
        "math",
        "operator",
        "os",
        "pathlib",
        "pickle",
        "random",
        "re",
        "shlex",
        "shutil",
        "statistics",
        "string",
        "struct",
        "subprocess",
        "sys",
        "tempfile",
        "textwrap",
        "threading",
        "time",
        "traceback",
        "types",
        "typing",
        "unicodedata",
        "uuid",
        "warnings",
    }
)
_TYPING = frozenset(name for name in typing.__all__ if name[:1].isupper())
_LOGGERS = ("logger", "log", "_logger", "_log", "LOGGER", "LOG")


def repaired(path: str, before: str, after: str, instruction: str) -> str:
    """`after` with the imports and the `__all__` entries the module docstring names fixed."""
    language = language_of(path)
    if language is None or language.parser != "python" or after == before:
        return after
    try:
        old, new = ast.parse(before.removeprefix("\ufeff")), ast.parse(after.removeprefix("\ufeff"))
    except (SyntaxError, ValueError, RecursionError):
        return after
    text = _pruned_all(after, old, new, instruction)
    return _with_imports(text, _newly_undefined(path, old, new, text))


def _newly_undefined(path: str, old: ast.Module, new: ast.Module, text: str) -> list[str]:
    try:
        from pyflakes.checker import Checker
    except ModuleNotFoundError:
        return []

    def undefined(tree: ast.Module) -> set[str]:
        return {m.message_args[0] for m in Checker(tree, filename=path).messages if type(m).__name__ == "UndefinedName"}

    return sorted(undefined(new) - undefined(old))


def _with_imports(text: str, names: list[str]) -> str:
    """The import lines the known names need, after the last top-level import (or the docstring)."""
    modules = [n for n in names if n in _MODULES]
    typed = [n for n in names if n in _TYPING and n not in _MODULES]
    logger = next((n for n in names if n in _LOGGERS), None)
    if logger and "logging" not in modules:
        tree = ast.parse(text.removeprefix("\ufeff"))
        if "logging" not in _bound(tree):
            modules.append("logging")
    lines = [f"import {m}" for m in sorted(modules)]
    if typed:
        lines.append(f"from typing import {', '.join(typed)}")
    tail = [f"{logger} = logging.getLogger(__name__)"] if logger else []
    if not lines and not tail:
        return text
    return _insert_after_imports(text, lines, tail)


def _bound(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _insert_after_imports(text: str, imports: list[str], tail: list[str]) -> str:
    tree = ast.parse(text.removeprefix("\ufeff"))
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    body = tree.body
    top = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom)) and _before_code(n, body)]
    docstring = (
        bool(body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )
    at = top[-1].end_lineno if top else body[0].end_lineno if docstring else 0
    if at and not lines[at - 1].endswith(("\n", "\r")):
        lines[at - 1] += newline
    block = [newline] * (not top and docstring) + [line + newline for line in imports]
    if tail:
        block += [newline] * bool(imports) + [line + newline for line in tail]
    return "".join(lines[:at] + block + lines[at:])


def _before_code(node: ast.stmt, body: list[ast.stmt]) -> bool:
    """Whether an import comes before the module's first definition or other statement (its import
    block), so that new imports join that block, not one inside the code."""
    for statement in body:
        if statement is node:
            return True
        if not isinstance(statement, (ast.Import, ast.ImportFrom, ast.Expr)):
            return False
    return False


def _pruned_all(text: str, old: ast.Module, new: ast.Module, instruction: str) -> str:
    """`text` without the `__all__` entries of top-level definitions it deleted as asked."""
    defined = {n.name for n in new.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    named = {n.name for n in old.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    gone = {n for n in named - defined if asks_to_remove(instruction, n, named)}
    if not gone:
        return text
    lines = text.splitlines(keepends=True)
    for node in reversed(new.body):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        if not isinstance(node.value, (ast.List, ast.Tuple)):
            continue
        for element in reversed(node.value.elts):
            if isinstance(element, ast.Constant) and element.value in gone and element.lineno == element.end_lineno:
                lines = _cut(lines, element)
    return "".join(lines)


def _cut(lines: list[str], element: ast.Constant) -> list[str]:
    """The element's text and the comma and spaces after it (or before it, for the last) cut out."""
    k = element.lineno - 1
    line = lines[k]
    start, end = _column(line, element.col_offset), _column(line, element.end_col_offset)
    after = re.match(r"\s*,[ \t]*", line[end:])
    if after:
        end += after.end()
    else:
        before = re.search(r",\s*$", line[:start])
        start = before.start() if before else start
    cut = line[:start] + line[end:]
    if not cut.strip():  # an element alone on its line: the line goes
        return lines[:k] + lines[k + 1 :]
    return lines[:k] + [cut] + lines[k + 1 :]


def _column(line: str, offset: int) -> int:
    """ast's UTF-8 byte column as a character index."""
    return len(line.encode("utf-8")[:offset].decode("utf-8", "replace"))
