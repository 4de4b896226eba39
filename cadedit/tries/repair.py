"""Repairs of a Python candidate outside the lines the model retyped: the import block and `__all__`.

Contract: repaired(path, before, after, instruction) returns `after` with (1) the imports that names
the edit newly uses need, put after the module's last top-level import (or its docstring, shebang,
encoding cookie and BOM): a standard-library module used only as `module.attr` where the module has
`attr` (`logging.debug`), a `typing` name (`Optional`), or a module logger used only as
`logger.method` (`logging.getLogger(__name__)`); and (2) in a literal `__all__`, the names of
definitions the instruction asks to delete taken out and a renamed one's entry renamed. A scoped edit
retypes one definition, so it cannot reach those lines; a small model that writes `Optional[int]` or
deletes `shorten` would otherwise ship a NameError or a broken `from m import *`. A repair is kept
only when the repaired candidate then passes the syntax and code checks; otherwise, and for text that
does not parse, other languages and names used another way (`datetime.now()`, `time()`), `after`
comes back as it is and the names check fails it. Pure: no torch.
"""

from __future__ import annotations

import ast
import importlib
import logging
import re
import typing

from cadedit.tries.checks import syntax_check
from cadedit.tries.code_checks import code_checks, removal_targets
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
        text = _fixed_all(after, old, new, instruction)
        text = _with_imports(text, _newly_undefined(path, old, ast.parse(text.removeprefix("\ufeff"))))
    except (SyntaxError, ValueError, RecursionError):
        return after
    if text != after and not _passes(path, before, text, instruction):
        return after
    return text


def _passes(path: str, before: str, text: str, instruction: str) -> bool:
    """Whether the repaired candidate passes the syntax and code checks (a repair never makes a pass)."""
    checks = (syntax_check(path, before, text), *code_checks(path, before, text, instruction))
    return all(c.passed for c in checks)


def _newly_undefined(path: str, old: ast.Module, new: ast.Module) -> dict[str, list[ast.Name]]:
    """Each name undefined in `new` and not in `old`, with its uses."""
    try:
        from pyflakes.checker import Checker
    except ModuleNotFoundError:
        return {}

    def undefined(tree: ast.Module) -> set[str]:
        return {m.message_args[0] for m in Checker(tree, filename=path).messages if type(m).__name__ == "UndefinedName"}

    names = undefined(new) - undefined(old)
    uses: dict[str, list[ast.Name]] = {n: [] for n in sorted(names)}
    attrs: dict[int, str] = {}
    for node in ast.walk(new):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attrs[id(node.value)] = node.attr
        elif isinstance(node, ast.Name) and node.id in uses:
            uses[node.id].append(node)
    return {n: [attrs.get(id(use), "") for use in found] for n, found in uses.items()}


def _used_as(attrs: list[str], has: typing.Callable[[str], bool]) -> bool:
    """Whether every use of a name is `name.attr` with an `attr` that `has` knows."""
    return bool(attrs) and all(attr and has(attr) for attr in attrs)


def _module_has(module: str) -> typing.Callable[[str], bool]:
    loaded = importlib.import_module(module)  # the standard library's, from _MODULES only
    return lambda attr: hasattr(loaded, attr)


def _with_imports(text: str, names: dict[str, list[str]]) -> str:
    """The import lines the known names need, after the last top-level import (or the docstring)."""
    modules = [n for n, attrs in names.items() if n in _MODULES and _used_as(attrs, _module_has(n))]
    typed = [n for n in names if n in _TYPING and n not in _MODULES]
    logger = next(
        (n for n, attrs in names.items() if n in _LOGGERS and _used_as(attrs, lambda a: hasattr(logging.Logger, a))),
        None,
    )
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
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    text = text[len(bom) :]
    tree = ast.parse(text)
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
    at = top[-1].end_lineno if top else body[0].end_lineno if docstring else _header(lines)
    if at and not lines[at - 1].endswith(("\n", "\r")):
        lines[at - 1] += newline
    block = [newline] * (not top and docstring) + [line + newline for line in imports]
    if tail:
        block += [newline] * bool(imports) + [line + newline for line in tail]
    return bom + "".join(lines[:at] + block + lines[at:])


_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")


def _header(lines: list[str]) -> int:
    """The lines that must stay first: a shebang on line 1, an encoding cookie on line 1 or 2."""
    at = 1 if lines and lines[0].startswith("#!") else 0
    if at < len(lines) and at < 2 and _COOKIE.match(lines[at]):
        at += 1
    return at


def _before_code(node: ast.stmt, body: list[ast.stmt]) -> bool:
    """Whether an import comes before the module's first definition or other statement (its import
    block), so that new imports join that block, not one inside the code."""
    for statement in body:
        if statement is node:
            return True
        if not isinstance(statement, (ast.Import, ast.ImportFrom, ast.Expr)):
            return False
    return False


_RENAMED = re.compile(
    r"\brenam\w*\s+(?:the\s+)?(?:function\s+|method\s+|class\s+)?`?(?P<old>[A-Za-z_]\w*)`?"
    r"(?:\s*\(\))?(?:\s+(?:function|method|class))?\s+(?:to|as|into)\s+`?(?P<new>[A-Za-z_]\w*)`?",
    re.I,
)


def _fixed_all(text: str, old: ast.Module, new: ast.Module, instruction: str) -> str:
    """`text` without the `__all__` entries of top-level definitions it deleted as asked, and with a
    renamed one's entry renamed ("Rename shorten to truncate"); a rename is never a deletion here."""
    defined = {n.name for n in new.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    named = {n.name for n in old.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    renamed = {
        m["old"]: m["new"]
        for m in _RENAMED.finditer(instruction)
        if m["old"] in named - defined and m["new"] in defined - named
    }
    deleted = removal_targets(instruction, deletion=True)
    gone = {n for n in named - defined if n in deleted and n not in renamed}
    if not gone and not renamed:
        return text
    lines = text.splitlines(keepends=True)
    for node in reversed(new.body):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        if not isinstance(node.value, (ast.List, ast.Tuple)):
            continue
        for element in reversed(node.value.elts):
            if not (isinstance(element, ast.Constant) and element.lineno == element.end_lineno):
                continue
            if element.value in gone:
                lines = _cut(lines, element)
            elif element.value in renamed:
                lines = _renamed(lines, element, renamed[element.value])
    return "".join(lines)


def _renamed(lines: list[str], element: ast.Constant, name: str) -> list[str]:
    """The element's string with `name` in place of its text."""
    k = element.lineno - 1
    line = lines[k]
    start, end = _column(line, element.col_offset), _column(line, element.end_col_offset)
    literal = line[start:end]
    return lines[:k] + [line[:start] + literal.replace(element.value, name, 1) + line[end:]] + lines[k + 1 :]


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
