"""Write expected/<id>.py for each case of cases.json from its reference: plain text operations that
share no code with cadedit (regular-expression substitutions within line ranges for renames, line
removal by `ast` spans for deletions). Each expected file's diff was then read by hand.

    python corpus/mechanical/make_expected.py
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def span(tree: ast.Module, name: str) -> tuple[int, int]:
    """First and last line of the definition `name` or `Class.name`, decorators included."""
    owner, _, short = name.rpartition(".")
    body = tree.body
    if owner:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner).body
    for node in body:
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else []
        names += [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if short in names:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            return first, node.end_lineno
    raise KeyError(name)


def deleted(text: str, names: list[str]) -> str:
    """The text without each definition's lines, the comment lines right above it and the blank lines
    above those, and without its `__all__` entry."""
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    gone: set[int] = set()
    for name in names:
        first, last = span(tree, name)
        start = first - 1
        while start > 0 and lines[start - 1].strip().startswith("#"):
            start -= 1
        while start > 0 and not lines[start - 1].strip():
            start -= 1
        gone |= set(range(start, last))
    out = "".join(line for i, line in enumerate(lines) if i not in gone)
    for name in (n for n in names if "." not in n):
        out = without_entry(out, name)
    return out


def without_entry(text: str, name: str) -> str:
    """The text without `name`'s string in `__all__ = [...]`: with the comma and space after it, or
    for the last entry with the comma and space before it."""
    node = next(
        (n for n in ast.parse(text).body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"),
        None,
    )
    if node is None:
        return text
    lines = text.splitlines(keepends=True)
    head, segment, tail = (
        "".join(lines[: node.lineno - 1]),
        "".join(lines[node.lineno - 1 : node.end_lineno]),
        "".join(lines[node.end_lineno :]),
    )
    quoted = rf"['\"]{re.escape(name)}['\"]"
    segment, n = re.subn(quoted + r",\s*", "", segment, count=1)
    if not n:
        segment = re.sub(r",\s*" + quoted, "", segment, count=1)
    return head + segment + tail


def renamed(text: str, subs: list[list], lines: list[int] | None) -> str:
    """The text with each (pattern, replacement) applied, within the lines [a, b] when given."""
    all_lines = text.splitlines(keepends=True)
    a, b = lines or (1, len(all_lines))
    middle = "".join(all_lines[a - 1 : b])
    for pattern, replacement in subs:
        middle = re.sub(pattern, replacement, middle)
    return "".join(all_lines[: a - 1]) + middle + "".join(all_lines[b:])


def main() -> None:
    cases = json.loads((HERE / "cases.json").read_text())["cases"]
    (HERE / "expected").mkdir(exist_ok=True)
    for case in cases:
        target = HERE / "expected" / f"{case['id']}.py"
        if case["expect"] != "exact":
            target.unlink(missing_ok=True)
            continue
        text = (HERE / case["file"]).read_text()
        reference = case["reference"]
        if "delete" in reference:
            new = deleted(text, reference["delete"])
        else:
            new = renamed(text, reference["sub"], reference.get("lines"))
        for pattern, replacement in reference.get("then", []):
            new = re.sub(pattern, replacement, new)
        target.write_text(new)


if __name__ == "__main__":
    main()
