"""The house's size rule, checked on the source: no function of cadedit (methods and nested functions
included) is over 60 lines, counted from its `def` line to its last line as ast sees them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cadedit"
MAX_LINES = 60


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path:line name (N lines)` for each function under root longer than limit lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_60_lines():
    too_long = long_functions(PACKAGE)
    assert not too_long, f"functions over {MAX_LINES} lines: " + "; ".join(too_long)


def test_the_check_names_a_long_function_and_counts_from_def_to_its_last_line(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    statements = [f"x{i} = {i}" for i in range(59)]
    fits = "@decorator\ndef fits():\n" + "".join(f"    {line}\n" for line in statements)  # 60 lines from def
    grows = "class C:\n    async def grows(self):\n" + "".join(f"        {line}\n" for line in statements + ["y = 1"])
    (package / "ok.py").write_text(fits)
    (package / "sub.py").write_text(grows)
    assert long_functions(package) == ["pkg/sub.py:2 grows (61 lines)"]
