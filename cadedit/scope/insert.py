"""Insertion points: where an instruction that adds code puts it, as a region of a few lines there.

Contract: `insertion(document, instruction, found, language)` returns an Insertion (the line the new
code goes after, 0 for the top of the file; the region the model retypes around it; why there; the
instruction with the place's words taken out, so the definitions it names as the place or the
container are not retyped too) or None when the instruction adds nothing at a place this module knows.
Pure: no torch, no transformers.

Decisions: an instruction adds when it says so (add, insert, put, append, write, create, define,
new ...). A place it names wins: "after the module docstring", "after the imports", "at the top",
"at the end of the file" (in Python before a closing `if __name__ == "__main__":` block), "after NAME" /
"before NAME" (a definition of this file). Without one, a new
method goes at the end of the class the instruction names (or the file's only class), a new function,
class or test after the last definition of its kind the instruction names, else after the last one of
the file, a new constant or import after the imports. "At the top" of a Python module is after its
docstring and `from __future__` imports, which must stay first. The region is the line before the
new code and the blank lines after it; where none is indented as shallow as the new code (a
method's last line), up to the line above that is (a short method's header: the method retyped whole),
else through the next line of code: the model answers a region without its shared indentation, and
the new lines must fit in it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from cadedit.text.document import Document
from cadedit.scope.outline import JAVASCRIPT, PYTHON, TSX, TYPESCRIPT, Definition, Outline, starts_with_docstring
from cadedit.scope.outline import tree_sitter_root


@dataclass(frozen=True)
class Insertion:
    after: int  # the new code goes after this line (0: before line 1)
    start: int  # the region the model retypes (1-based, inclusive)
    end: int
    reason: str  # "after the module docstring", "the end of class C (chosen: ...)"
    rest: str  # the instruction without the words that named the place


@dataclass(frozen=True)
class Heads:
    """A module's first parts: the last line of each (0 where there is none)."""

    comments: int = 0  # a shebang, an encoding line, a licence header
    docstring: int = 0
    future: int = 0  # `from __future__ import ...`
    imports: int = 0  # the last import before the first definition
    main_guard: int = 0  # the first line of a last top-level `if __name__ == "__main__":`


_ADDS = re.compile(
    r"\b(?:add|adds|adding|insert|inserts|put|place|append|appends|write|create|define|declare|introduce|new)\b",
    re.I,
)
_AFTER_WORDS = r"(?:right\s+|just\s+|directly\s+|immediately\s+)?(?:after|below|beneath|under|following)"
_BEFORE_WORDS = r"(?:right\s+|just\s+|directly\s+|immediately\s+)?(?:before|above|ahead\s+of|preceding)"
_DOCSTRING = re.compile(
    rf"\b{_AFTER_WORDS}\s+(?:the\s+|its\s+)?(?:module(?:'s)?\s+|file(?:'s)?\s+)?(?:doc\s*string|docstring)\b", re.I
)
_IMPORTS = re.compile(rf"\b{_AFTER_WORDS}\s+(?:the\s+|its\s+|all\s+(?:the\s+)?)?(?:last\s+)?imports?\b", re.I)
_TOP = re.compile(
    r"\b(?:at|to|on)\s+(?:the\s+)?(?:very\s+)?(?:top|beginning|start|head)\b(?:\s+of\s+(?:the\s+)?(?:file|module))?"
    r"(?!\s+of\b)",
    re.I,
)
_END = re.compile(
    r"\b(?:at|to)\s+(?:the\s+)?(?:very\s+)?(?:end|bottom)\b(?:\s+of\s+(?:the\s+)?(?:file|module))?(?!\s+of\b)", re.I
)
_NAME = r"`?(?P<name>[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)`?(?:\(\))?"
_KIND = r"(?:(?:the\s+)?(?:function|method|class|def|definition(?:\s+of)?)\s+)?"
_AFTER_NAME = re.compile(rf"\b{_AFTER_WORDS}\s+(?:the\s+)?{_KIND}{_NAME}", re.I)
_BEFORE_NAME = re.compile(rf"\b{_BEFORE_WORDS}\s+(?:the\s+)?{_KIND}{_NAME}", re.I)
# "a new method", "add a reset() method", "write another test", "add a module-level constant".
_FILLER = r"(?:(?!(?:to|in|into|inside|for|of|on|from|with|the|that|which|and|or|at)\b)[^\s.;:]+\s+)"
_NEW_KIND = re.compile(
    r"\b(?:(?:a|an)\s+new|add(?:s|ing)?\s+(?:a|an|one|another|two|some)|write\s+(?:a|an|another)|define\s+(?:a|an)|"
    rf"create\s+(?:a|an)|insert\s+(?:a|an))\s+{_FILLER}{{0,3}}?(?P<kind>method|function|helper|test|class|constant|variable|"
    r"property|classmethod|staticmethod|fixture|import)s?\b",
    re.I,
)
_ADD_IMPORT = re.compile(r"\b(?:add|adds|adding|insert|put)\b[^.;\n]{0,40}?\bimport\b", re.I)
_CONTAINER = re.compile(
    r"\b(?:to|in|into|inside|on|for)\s+(?:the\s+)?(?:class\s+)?`?(?P<name>[A-Za-z_$][\w$]*)`?", re.I
)


def insertion(document: Document, instruction: str, found: Outline, language: str | None) -> Insertion | None:
    """Where the new code of an instruction that adds some goes, or None (see the module docstring)."""
    if not found.known or not document.lines or not _ADDS.search(instruction):
        return None
    heads = module_heads(document, language)
    named = _named_place(document, instruction, found, heads, language)
    if named is not None:
        return named
    kind = _NEW_KIND.search(instruction)
    what = kind.group("kind").lower() if kind else ("import" if _ADD_IMPORT.search(instruction) else None)
    if what is None:
        return None
    if what in ("constant", "variable", "import"):
        line = heads.imports or heads.future or heads.docstring or heads.comments
        why = "after the imports" if heads.imports else "at the top of the file"
        return _region(document, line, "", f"{why} (chosen: the instruction names no place)", instruction)
    if what in ("method", "property", "classmethod", "staticmethod"):
        return _in_class(document, instruction, found)
    if what == "test":
        return _new_test(document, instruction, found) or _after_last(document, instruction, found, "function")
    return _after_last(document, instruction, found, "class" if what == "class" else "function")


def _named_place(document, instruction: str, found: Outline, heads: Heads, language) -> Insertion | None:
    m = _DOCSTRING.search(instruction)
    if m:
        line = heads.docstring or heads.comments
        why = "after the module docstring" if heads.docstring else "at the top of the file (it has no docstring)"
        return _region(document, line, "", why, _cut(instruction, m))
    m = _IMPORTS.search(instruction)
    if m:
        line = heads.imports or heads.future or heads.docstring or heads.comments
        why = "after the imports" if heads.imports else "at the top of the file (it has no imports)"
        return _region(document, line, "", why, _cut(instruction, m))
    # A definition as the place only for a new definition: "add a call to g after f" is inside a function.
    for pattern, before in ((_AFTER_NAME, False), (_BEFORE_NAME, True)) if _NEW_KIND.search(instruction) else ():
        for m in pattern.finditer(instruction):
            d = _definition(m.group("name"), found)
            if d is None:
                continue
            indent = _indent(document.display_lines()[d.start - 1])
            rest = _cut(instruction, m)
            for c in _CONTAINER.finditer(rest):  # "to ProgressBar, after update": the class is not retyped
                if c.group("name") in d.parts[:-1]:
                    rest = _cut(rest, c)
            if before:
                line = _code_before(document, d.start)
                return _region(document, line, indent, f"before {d.describe()}", rest)
            return _region(document, d.end, indent, f"after {d.describe()}", rest)
    m = _TOP.search(instruction)
    if m:
        line = heads.future or heads.docstring or heads.comments
        first = "__future__ imports" if heads.future else "docstring" if heads.docstring else "leading comments"
        why = "at the top of the file" + (f", after its {first}" if line else "")
        return _region(document, line, "", why, _cut(instruction, m))
    m = _END.search(instruction)
    if m and heads.main_guard:  # code after the guard would run after the program has
        line = _code_before(document, heads.main_guard)
        why = 'at the end of the file, before its `if __name__ == "__main__":` block'
        return _region(document, line, "", why, _cut(instruction, m))
    if m:
        return _region(document, document.n_lines, "", "at the end of the file", _cut(instruction, m))
    return None


def _in_class(document: Document, instruction: str, found: Outline) -> Insertion | None:
    """A new method without a place: at the end of the class named (or the file's only class)."""
    classes = [d for d in found.definitions if d.kind == "class"]
    named = None
    for m in _CONTAINER.finditer(instruction):
        named = next((c for c in classes if c.name == m.group("name")), None)
        if named is not None:
            rest = _cut(instruction, m)
            break
    if named is None:
        if len(classes) != 1:
            return None
        named, rest = classes[0], instruction
    return _class_end(document, named, found, rest, "chosen: the instruction names no place")


def _class_end(document: Document, cls: Definition, found: Outline, rest: str, chosen: str) -> Insertion:
    members = [d for d in found.definitions if d.qualname.startswith(cls.qualname + ".") and d.parts[:-1] == cls.parts]
    bodies = document.display_lines()
    if members:
        last = members[-1]
        indent = _indent(bodies[last.start - 1])
        where = f"the end of {cls.describe()}, after {last.describe()}"
    else:
        last, indent = cls, _indent(bodies[cls.start - 1]) + "    "
        where = f"the end of {cls.describe()}"
    closing = bodies[cls.end - 1].strip()
    if closing.startswith("}") and cls.end > last.end:  # JavaScript: before the class's closing brace
        return _region(document, _code_before(document, cls.end), indent, f"{where} ({chosen})", rest, upto=cls.end)
    return _region(document, last.end, indent, f"{where} ({chosen})", rest)


def _new_test(document: Document, instruction: str, found: Outline) -> Insertion | None:
    """A new test: at the end of the test class named, else after the file's last test."""
    tests = [d for d in found.definitions if d.name.startswith(("test", "Test"))]
    classes = [d for d in tests if d.kind == "class"]
    for m in _CONTAINER.finditer(instruction):
        cls = next((c for c in classes if c.name == m.group("name")), None)
        if cls is not None:
            return _class_end(document, cls, found, _cut(instruction, m), "chosen: the instruction names no place")
    functions = [d for d in tests if d.kind != "class"]
    if not functions:
        return None
    last = functions[-1]
    owner = next((c for c in classes if last.parts[:-1] == c.parts), None)
    if owner is not None:
        return _class_end(document, owner, found, instruction, "chosen: the file's last tests are there")
    indent = _indent(document.display_lines()[last.start - 1])
    why = f"after {last.describe()} (chosen: the file's last test)"
    return _region(document, last.end, indent, why, instruction)


def _after_last(document: Document, instruction: str, found: Outline, kind: str) -> Insertion:
    """A new top-level function or class: after the last one the instruction names, else the file's last."""
    top = [d for d in found.definitions if len(d.parts) == 1]
    mentioned = [d for d in top if re.search(rf"(?<![\w$]){re.escape(d.name)}(?![\w$])", instruction)]
    same = [d for d in top if d.kind == kind] or top
    if mentioned:
        last, why = mentioned[-1], "the last definition the instruction names"
    elif same:
        last, why = same[-1], f"the file's last {kind if same[-1].kind == kind else 'definition'}"
    else:
        heads_end = document.n_lines
        return _region(document, heads_end, "", "at the end of the file (chosen: it defines nothing)", instruction)
    return _region(document, last.end, "", f"after {last.describe()} (chosen: {why})", instruction)


# The most lines above the place a region climbs to reach one as shallow as the new code.
CLIMB_LINES = 8


def _region(document: Document, after: int, indent: str, reason: str, rest: str, upto: int | None = None) -> Insertion:
    """The lines around `after` the model retypes: that line and the blank lines after it (or through
    `upto`); where none of them is indented as shallow as `indent` (the new code's), through the next
    line of code too, else up to the nearest line above that is."""
    bodies = document.display_lines()
    n = len(bodies)
    start = max(1, after)
    end = start
    while end < n and not bodies[end].strip():
        end += 1
    end = upto if upto is not None else end

    def fits(a: int, b: int) -> bool:
        return any(line.strip() and len(_indent(line)) <= len(indent) for line in bodies[a - 1 : b])

    # After a method's last line: the method's own header is at the new code's depth. A short method
    # is retyped whole, a small model then writes the new one after it; past CLIMB_LINES the next line
    # of code is taken instead (the next definition's header, where a small model may wander into it).
    climb = start
    while climb > 1 and not fits(climb, end):
        climb -= 1
    if not fits(start, end) and start - climb > CLIMB_LINES and end < n and fits(end + 1, end + 1):
        end += 1
    while start > 1 and not fits(start, end):
        start -= 1
    where = f"insert after line {after}" if after else "insert before line 1"
    return Insertion(after, start, max(start, end), f"{where}, {reason}", rest)


def _cut(instruction: str, m: re.Match) -> str:
    """The instruction without the words that named the place (so their definition is not retyped too)."""
    return instruction[: m.start()] + " " * (m.end() - m.start()) + instruction[m.end() :]


def _definition(name: str, found: Outline) -> Definition | None:
    parts = tuple(name.split("."))
    matches = [d for d in found.named(parts[-1]) if d.parts[-len(parts) :] == parts]
    return matches[-1] if matches else None


def _code_before(document: Document, line: int) -> int:
    """The last line with code before `line` (0: none)."""
    bodies = document.display_lines()
    return next((k for k in range(line - 1, 0, -1) if bodies[k - 1].strip()), 0)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


# -- a module's first parts ----------------------------------------------------------------------


def module_heads(document: Document, language: str | None) -> Heads:
    """The last lines of the module's leading comments, docstring, `__future__` imports and imports."""
    bodies = document.display_lines()
    comments = 0
    marks = ("#",) if language == PYTHON else ("//", "/*", "*") if language is not None else ("#", "//")
    for k, line in enumerate(bodies, 1):
        if line.strip() and not line.lstrip().startswith(marks):
            break
        if line.strip():
            comments = k
    if language == PYTHON:
        return _python_heads("\n".join(bodies), comments)
    if language in (JAVASCRIPT, TYPESCRIPT, TSX):
        return _js_heads("\n".join(bodies), language, comments)
    return Heads(comments)


def _python_heads(source: str, comments: int) -> Heads:
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError):
        return Heads(comments)
    docstring = body[0].end_lineno or 0 if starts_with_docstring(body) else 0
    future = imports = guard = 0
    last = body[-1] if body else None
    if isinstance(last, ast.If) and "__name__" in ast.unparse(last.test) and "__main__" in ast.unparse(last.test):
        guard = last.lineno
        lines = source.split("\n")
        while guard > 1 and lines[guard - 2].lstrip().startswith("#"):  # the comments about it go with it
            guard -= 1
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future = node.end_lineno or node.lineno
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (
            isinstance(node, (ast.Try, ast.If))
            and node.body
            and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
        ):
            imports = node.end_lineno or node.lineno
    return Heads(comments, docstring, future, imports, guard)


def _js_heads(source: str, language: str, comments: int) -> Heads:
    root = tree_sitter_root(source, language)
    if isinstance(root, str):
        return Heads(comments)
    imports = 0
    for node in root.named_children:
        text = node.text.decode("utf-8", "replace")
        if node.type == "import_statement" or (
            node.type in ("lexical_declaration", "variable_declaration") and "require(" in text
        ):
            imports = node.end_point.row + 1
        elif node.type in ("function_declaration", "class_declaration", "export_statement"):
            break
    return Heads(comments, 0, 0, imports)
