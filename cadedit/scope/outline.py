"""Outlines: the functions, methods and classes a file defines, each with its line span.

Contract: `outline(document, language)` never raises for bad file content. A span runs from the
first decorator or directly attached comment line to the definition's last line (1-based,
inclusive, counted exactly as Document counts lines: CRLF, lone CR and a BOM change nothing).
When definitions cannot be known (the file does not parse, the language is unknown, tree-sitter
is missing) the Outline says why in `problem` instead. Pure: no torch, no transformers.

Python goes through `ast` (comments: lines starting with # outside multi-line strings). JavaScript/TypeScript go through tree-sitter
with its pre-built grammar wheels (tree-sitter 0.26, -javascript 0.25, -typescript 0.23), imported
lazily, so an edit of a Python file never pays for them; their import and parse costs are in
docs/measurements/design-figures.md#figures-moved-from-docstrings.
"""

from __future__ import annotations

import ast
import functools
import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from cadedit.text.document import Document
from cadedit.text.languages import PARSERS, language_of
from cadedit.settings import OUTLINE_BYTES

PYTHON, JAVASCRIPT, TYPESCRIPT, TSX = PARSERS  # outline's parsers, named in languages.py's table
LANGUAGES = PARSERS
_TITLES = {PYTHON: "Python", JAVASCRIPT: "JavaScript", TYPESCRIPT: "TypeScript", TSX: "TSX"}
TREE_SITTER_MISSING = (
    "tree-sitter is not installed, so {title} definitions are unknown "
    "(pip install tree-sitter tree-sitter-javascript tree-sitter-typescript)"
)


@dataclass(frozen=True)
class Definition:
    """One function, method or class: `qualname` joins enclosing definitions with dots."""

    kind: str  # "function" | "method" | "class"
    qualname: str
    start: int
    end: int

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.qualname.split("."))

    def describe(self) -> str:
        return f"{self.kind} {self.qualname}"


@dataclass(frozen=True)
class Statement:
    """One statement that is not a definition: its lines, and the lines of its header. A compound
    statement's header runs to the line before its body (`if x:`, `for (...) {`); a simple
    statement, or a compound one written on one line, is all header."""

    start: int
    end: int
    head_end: int


@dataclass(frozen=True)
class Outline:
    definitions: tuple[Definition, ...] = ()
    problem: str = ""  # why the definitions are unknown; "" when they are known
    statements: tuple[Statement, ...] = ()  # sorted by start, outer before inner
    prose: frozenset[int] = frozenset()  # lines holding nothing but comments or docstrings (when asked)

    def code_lines(self, start: int, end: int) -> tuple[int, ...]:
        """Lines start..end that hold code: the prose lines left out, unless nothing would be left."""
        lines = tuple(k for k in range(start, end + 1) if k not in self.prose)
        return lines or tuple(range(start, end + 1))

    @property
    def known(self) -> bool:
        return not self.problem

    # Lookups an instruction naming thousands of lines or words makes once each: indexes built once
    # per outline, so scoping costs the instruction's length, not its length times the file's.

    def innermost_function(self, line: int) -> Definition | None:
        """The shortest function or method holding `line` (the first listed of equal ones)."""
        functions = self._innermost[0]
        return functions[line] if 0 <= line < len(functions) else None

    def innermost_statement(self, line: int) -> Statement | None:
        """The shortest statement holding `line` (the first listed of equal ones)."""
        statements = self._innermost[1]
        return statements[line] if 0 <= line < len(statements) else None

    def statements_starting(self, first: int, last: int) -> tuple[Statement, ...]:
        """The statements whose first line is in first..last, in order."""
        starts = self._starts
        return self.statements[bisect_left(starts, first) : bisect_right(starts, last)]

    def first_statement_after(self, line: int) -> int | None:
        """The first line of the first statement that starts after `line`."""
        at = bisect_right(self._starts, line)
        return self._starts[at] if at < len(self._starts) else None

    def named(self, name: str) -> tuple[Definition, ...]:
        """The definitions whose own name is `name`, in order."""
        return self._by_name.get(name, ())

    @functools.cached_property
    def _innermost(self) -> tuple[list, list]:
        # Each line's innermost function and statement: the longest written first, so inner ones
        # overwrite them; the cost is the lines each covers (the file's times its nesting depth).
        size = max([d.end for d in self.definitions] + [t.end for t in self.statements] + [0]) + 1
        tables = []
        for spans in ([d for d in self.definitions if d.kind != "class"], list(self.statements)):
            table: list = [None] * size
            for k, span in sorted(enumerate(spans), key=lambda pair: (pair[1].start - pair[1].end, -pair[0])):
                table[span.start : span.end + 1] = [span] * (span.end - span.start + 1)
            tables.append(table)
        return tables[0], tables[1]

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [t.start for t in self.statements]

    @functools.cached_property
    def _by_name(self) -> dict[str, tuple[Definition, ...]]:
        named: dict[str, list[Definition]] = {}
        for d in self.definitions:
            named.setdefault(d.name, []).append(d)
        return {name: tuple(found) for name, found in named.items()}


def parser_of(path: str) -> str | None:
    """The parser for a path's language (languages.py's table), or None (stdin, no parser for it)."""
    language = language_of(path)
    return language.parser if language is not None and language.parser else None


def display_name(document: Document) -> str:
    """The file's name for messages: its basename, or "the file" when it has no path."""
    return "the file" if document.path.startswith("<") else os.path.basename(document.path)


def outline(document: Document, language: str | None, prose: bool = False) -> Outline:
    """The definitions of a document in a language (None: unknown, so no definitions); with `prose`
    also its comment and docstring lines (only the where-step reads them, so others do not pay for them)."""
    # Lines joined with "\n" and no BOM: parser line k is Document line k whatever the terminators.
    source = "\n".join(document.display_lines())
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > OUTLINE_BYTES and language is not None:
        return Outline(
            problem=f"{display_name(document)}: {size:,} bytes, more than cadedit outlines "
            f"({OUTLINE_BYTES:,}), so its definitions are unknown"
        )
    if language == PYTHON:
        return _python_outline(source, display_name(document), prose)
    if language in (JAVASCRIPT, TYPESCRIPT, TSX):
        return _tree_sitter_outline(source, language, display_name(document), prose)
    return Outline(problem=f"{display_name(document)}: no parser for this kind of file, so its definitions are unknown")


# -- Python --------------------------------------------------------------------------------------


def _python_outline(source: str, name: str, prose: bool = False) -> Outline:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError) as exc:
        where = f"line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        return Outline(problem=f"{name} does not parse as Python ({where}{detail})")
    found: list[tuple[str, str, int, int]] = []
    in_strings: set[int] = set()
    _walk_python(tree, (), False, found, in_strings)
    bodies = source.split("\n")
    definitions = (Definition(k, q, _above_comments(first, bodies, in_strings), end) for k, q, first, end in found)
    statements = (
        _python_statement(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt) and not isinstance(node, _PY_DEFINITIONS)
    )
    return Outline(
        tuple(sorted(definitions, key=lambda d: (d.start, -d.end))),
        statements=tuple(sorted(statements, key=lambda t: (t.start, -t.end))),
        prose=_python_prose(tree, bodies, in_strings) if prose else frozenset(),
    )


def _python_prose(tree: ast.Module, bodies: list[str], in_strings: set[int]) -> frozenset[int]:
    """Docstring lines (a module's, class's or function's first statement, a string) and lines that
    start with "#" outside multi-line strings."""
    prose = {k for k in range(1, len(bodies) + 1) if _comment_line(k, bodies, in_strings)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, *_PY_DEFINITIONS)) and node.body:
            first = node.body[0]
            if starts_with_docstring(node.body):
                lines = set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
                lines -= {getattr(node, "lineno", 0)}  # `def f(): "doc"`: the line holds the header
                lines -= {after.lineno for after in node.body[1:2]}  # `"doc"; x = 1`
                prose |= lines
    return frozenset(prose)


_PY_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def starts_with_docstring(body: object) -> bool:
    """Whether `body` (a node's `body`: a module's, class's or function's statements, or any other
    node's, which need not be a list) is a list whose first statement is a bare string: its docstring."""
    return (
        isinstance(body, list)
        and bool(body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )


def _python_statement(node: ast.stmt) -> Statement:
    end = node.end_lineno or node.lineno
    body = getattr(node, "body", None)
    first = (
        node.cases[0].pattern.lineno
        if isinstance(node, ast.Match) and node.cases
        else (body[0].lineno if isinstance(body, list) and body else node.lineno)
    )
    return Statement(node.lineno, end, first - 1 if first > node.lineno else end)


def _walk_python(node: ast.AST, prefix: tuple[str, ...], in_class: bool, out: list, in_strings: set[int]) -> None:
    """Collect (kind, qualname, first line, last line) and the lines inside multi-line strings. A walk
    with its own stack, not recursion: 600 chained calls nest the tree deeper than Python's stack."""
    stack = [(node, prefix, in_class)]
    while stack:
        node, prefix, in_class = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                is_class = isinstance(child, ast.ClassDef)
                kind = "class" if is_class else ("method" if in_class else "function")
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((kind, ".".join(prefix + (child.name,)), first, child.end_lineno or child.lineno))
                stack.append((child, prefix + (child.name,), is_class))
                continue
            if isinstance(child, (ast.Constant, ast.JoinedStr)) and (child.end_lineno or 0) > child.lineno:
                in_strings.update(range(child.lineno + 1, child.end_lineno + 1))
            stack.append((child, prefix, in_class))


def _above_comments(first: int, bodies: list[str], in_strings: set[int]) -> int:
    """Move a definition's first line up over the comment lines directly above it.

    A line that starts with "#" is a comment unless a multi-line string runs through it; the string
    spans come from ast, which is already parsed, rather than a second pass with tokenize.
    """
    while first > 1 and _comment_line(first - 1, bodies, in_strings):
        first -= 1
    return first


def _comment_line(k: int, bodies: list[str], in_strings: set[int]) -> bool:
    """Line k starts with "#" and no multi-line string runs through it."""
    return k not in in_strings and bodies[k - 1].lstrip().startswith("#")


# -- JavaScript / TypeScript ---------------------------------------------------------------------

_FUNCTIONS = {"function_declaration", "generator_function_declaration"}
_CLASSES = {"class_declaration", "abstract_class_declaration"}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}
_CLASS_VALUES = {"class"}
_FIELDS = {"field_definition", "public_field_definition"}
_DECLARATIONS = {"lexical_declaration", "variable_declaration"}


def tree_sitter_root(source: str, language: str, name: str = "the file"):
    """The root node of `source` parsed by tree-sitter as `language` (JAVASCRIPT, TYPESCRIPT, TSX), or a
    problem string when tree-sitter is missing or the text does not parse."""
    try:
        from tree_sitter import Language, Parser

        if language == JAVASCRIPT:
            import tree_sitter_javascript as grammar

            pointer = grammar.language()
        else:
            import tree_sitter_typescript as grammar

            pointer = grammar.language_tsx() if language == TSX else grammar.language_typescript()
        parser = Parser(Language(pointer))
    except (ImportError, ValueError, TypeError):  # missing, or a grammar built for another ABI
        return TREE_SITTER_MISSING.format(title=_TITLES[language])
    root = parser.parse(source.encode("utf-8", "surrogatepass")).root_node
    if root.has_error:
        return f"{name} does not parse as {_TITLES[language]} (line {_first_error_line(root)})"
    return root


def _tree_sitter_outline(source: str, language: str, name: str, prose: bool = False) -> Outline:
    root = tree_sitter_root(source, language, name)
    if isinstance(root, str):
        return Outline(problem=root)
    found: list[Definition] = []
    _walk_tree(root, (), False, found)
    statements: list[Statement] = []
    _tree_statements(root, statements)
    return Outline(
        tuple(sorted(found, key=lambda d: (d.start, -d.end))),
        statements=tuple(sorted(statements, key=lambda t: (t.start, -t.end))),
        prose=_tree_prose(root, source.split("\n")) if prose else frozenset(),
    )


_BODIES = ("body", "consequence")


def _tree_prose(root, bodies: list[str]) -> frozenset[int]:
    """Lines that comments cover with nothing but blanks beside them."""
    left: dict[int, bytearray] = {}  # each commented line's bytes, its comments blanked out
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type != "comment":
            stack.extend(node.children)
            continue
        (first, column), (last, end) = node.start_point, node.end_point  # columns count bytes
        for row in range(first, last + 1):
            rest = left.setdefault(row, bytearray(bodies[row].encode("utf-8")))
            start, stop = column if row == first else 0, end if row == last else len(rest)
            rest[start:stop] = b" " * (stop - start)
    return frozenset(row + 1 for row, rest in left.items() if not rest.strip())


def _tree_statements(node, out: list) -> None:
    """Statements and declarations that define nothing; a header ends on the line of its block's
    `{` (or before a braceless body). Its own stack, not recursion (a minified bundle nests deep)."""
    stack = list(node.named_children)
    while stack:
        child = stack.pop()
        kind = child.type
        if (
            (kind.endswith("_statement") or kind in _DECLARATIONS)
            and kind != "export_statement"
            and _tree_definition(child, False) is None
            and not _declares_function(child)
        ):
            start, end = child.start_point.row + 1, child.end_point.row + 1
            head_end = end
            body = next((b for b in map(child.child_by_field_name, _BODIES) if b is not None), None)
            if body is not None and body.type == "statement_block":
                head_end = body.start_point.row + 1
            elif body is not None and body.start_point.row + 1 > start:
                head_end = body.start_point.row
            out.append(Statement(start, end, max(start, min(head_end, end))))
        stack.extend(child.named_children)


def _declares_function(node) -> bool:
    """`const f = () => ...`: a definition, not a statement."""
    return node.type in _DECLARATIONS and any(_tree_definition(c, False) is not None for c in node.named_children)


def _walk_tree(node, prefix: tuple[str, ...], in_class: bool, out: list) -> None:
    """The definitions below `node`, with their own stack (a 3,000-term `+` chain nests 3,000 deep)."""
    stack = [(node, prefix, in_class)]
    while stack:
        node, prefix, in_class = stack.pop()
        for child in node.named_children:
            found = _tree_definition(child, in_class)
            if found is None:
                stack.append((child, prefix, in_class))
                continue
            kind, name, span = found
            out.append(Definition(kind, ".".join(prefix + (name,)), _span_start(span), span.end_point.row + 1))
            stack.append((child, prefix + (name,), kind == "class"))


def _tree_definition(node, in_class: bool):
    """(kind, name, node whose lines the definition covers) when `node` defines something."""
    if node.type in _FUNCTIONS or node.type in _CLASSES:
        name = node.child_by_field_name("name")
        if name is not None:
            return ("class" if node.type in _CLASSES else "function"), name.text.decode(), _statement(node)
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        name = node.child_by_field_name("name")
        if value is not None and name is not None and name.type == "identifier":
            if value.type in _FUNCTION_VALUES or value.type in _CLASS_VALUES:
                kind = "class" if value.type in _CLASS_VALUES else "function"
                return kind, name.text.decode(), _statement(node.parent)
    if node.type == "method_definition" and node.child_by_field_name("name") is not None:
        return "method", node.child_by_field_name("name").text.decode(), node
    if node.type in _FIELDS and in_class:
        value = node.child_by_field_name("value")
        name = node.child_by_field_name("property") or node.child_by_field_name("name")
        if value is not None and name is not None and value.type in _FUNCTION_VALUES:
            return "method", name.text.decode(), node
    return None


def _statement(node):
    """The statement that holds a declaration: `export ...` wraps it and its decorators."""
    parent = node.parent
    return parent if parent is not None and parent.type == "export_statement" else node


def _span_start(node) -> int:
    """First line of a definition: decorators and directly attached comments above count."""
    start = node.start_point.row
    prev = node.prev_named_sibling
    while prev is not None and prev.type in ("decorator", "comment") and prev.end_point.row >= start - 1:
        before = prev.prev_named_sibling
        if prev.type == "comment" and before is not None and before.end_point.row == prev.start_point.row:
            break  # a trailing comment of the code before, not one about this definition
        start = prev.start_point.row
        prev = before
    return start + 1


def _first_error_line(root) -> int:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            return node.start_point.row + 1
        stack.extend(reversed(node.children))
    return 1
