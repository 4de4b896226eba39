"""The one language table: a file's suffix → its language record.

Contract: language_of(path) is the Language for the path's suffix (case-insensitive), or None for
an unknown suffix and for "<stdin>"-style names; guess_suffix(text) tells piped text's language; fence_tag(path) is the tag written after a
markdown code fence ("" when unknown). A record says how checks.py checks its syntax (`syntax`:
"python", "json", "toml", "yaml", "node", or "" for no check) and how outline.py finds its
definitions (`parser`). Pure data: no imports beyond the
standard library.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from pathlib import PurePath


@dataclass(frozen=True)
class Language:
    """A language: its name, its markdown fence tag, a title for messages, its syntax checker."""

    name: str
    fence: str
    title: str
    syntax: str = ""
    parser: str = ""  # how outline.py finds its definitions: "python", "javascript", "typescript", "tsx"; "" none


def _lang(name: str, title: str, syntax: str = "", parser: str = "") -> Language:
    return Language(name=name, fence=name, title=title, syntax=syntax, parser=parser)


PYTHON = _lang("python", "Python", "python", parser="python")
JAVASCRIPT = _lang("javascript", "JavaScript", "node", parser="javascript")
# TypeScript, TSX and JSX are not checked: node 20 refuses them (ERR_UNKNOWN_FILE_EXTENSION for
# .ts/.jsx), node >= 22.6 strips types only behind a flag and never parses JSX, and tsc/esbuild are
# not a dependency. A checker that fails valid code would fail every try, so they are skipped.
TYPESCRIPT = _lang("typescript", "TypeScript", parser="typescript")
TSX = _lang("tsx", "TSX", parser="tsx")
JSX = _lang("jsx", "JSX", parser="javascript")
PARSERS = ("python", "javascript", "typescript", "tsx")
C = _lang("c", "C")
CPP = _lang("cpp", "C++")

SUFFIXES: dict[str, Language] = {
    ".py": PYTHON, ".pyi": PYTHON,
    ".js": JAVASCRIPT, ".mjs": JAVASCRIPT, ".cjs": JAVASCRIPT,
    ".ts": TYPESCRIPT, ".mts": TYPESCRIPT, ".cts": TYPESCRIPT, ".tsx": TSX, ".jsx": JSX,
    ".java": _lang("java", "Java"),
    ".c": C, ".h": C, ".cc": CPP, ".cpp": CPP, ".hpp": CPP,
    ".go": _lang("go", "Go"), ".rs": _lang("rust", "Rust"), ".rb": _lang("ruby", "Ruby"),
    ".sh": _lang("bash", "shell"), ".md": _lang("markdown", "Markdown"),
    ".json": _lang("json", "JSON", "json"), ".toml": _lang("toml", "TOML", "toml"),
    ".yaml": _lang("yaml", "YAML", "yaml"), ".yml": _lang("yaml", "YAML", "yaml"),
    ".html": _lang("html", "HTML"), ".css": _lang("css", "CSS"), ".sql": _lang("sql", "SQL"),
}  # fmt: skip


def language_of(path: str | os.PathLike[str]) -> Language | None:
    """The language of a file by its suffix; None when unknown or for a "<stdin>"-style name without
    one ("<stdin>.py": piped text whose language was guessed, see guess_suffix)."""
    return SUFFIXES.get(PurePath(os.fspath(path)).suffix.lower())


_PYTHON_LINE = re.compile(r"^(?:async\s+def|def|class)\s+\w+.*:\s*$|^(?:import\s+\w|from\s+[\w.]+\s+import\b)", re.M)


def guess_suffix(text: str) -> str:
    """The suffix of the language piped text is written in, told by its content: ".py" for text that
    parses as Python and has a definition or an import; ".json" for an object or array that parses as
    JSON; "" when neither (no other language is guessed: a wrong guess would check the wrong syntax)."""
    stripped = text.lstrip("\ufeff").strip()
    if stripped[:1] in ("{", "["):
        try:
            json.loads(stripped)
            return ".json"
        except ValueError:
            pass
    if _PYTHON_LINE.search(text):
        try:
            ast.parse(text.lstrip("\ufeff"))
            return ".py"
        except (SyntaxError, ValueError, RecursionError):
            pass
    return ""


def fence_tag(path: str | os.PathLike[str]) -> str:
    """The tag after a markdown code fence for this file ("python"), "" when the language is unknown."""
    language = language_of(path)
    return language.fence if language else ""
