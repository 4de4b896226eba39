"""The house's size rule, checked on the source: no function of cadedit (methods and nested functions
included) holds over 40 statement lines. A statement line is a line on which a statement of its body
starts (nested functions' statements count for the function around them too; its docstring does not):
how `ruff format` spreads a long signature or call over lines does not change a function's size. (40
statement lines is about what 60 lines were before the code was formatted: the longest function then,
at up to 60 lines, holds 39.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cadedit"
MAX_LINES = 40


def statement_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many lines of the function start a statement of its body (its docstring left out)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len({node.lineno for statement in body for node in ast.walk(statement) if isinstance(node, ast.stmt)})


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path:line name (N statement lines)` for each function under root over limit statement lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement_lines(node) > limit:
                found.append(
                    f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({statement_lines(node)} lines)"
                )
    return found


def test_no_function_is_over_40_statement_lines():
    too_long = long_functions(PACKAGE)
    assert not too_long, f"functions over {MAX_LINES} statement lines: " + "; ".join(too_long)


def test_the_check_names_a_long_function_and_counts_its_statement_lines(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    statements = [f"x{i} = {i}" for i in range(MAX_LINES)]
    spread = (
        "    call(\n" + "".join(f"        argument{i},\n" for i in range(2 * MAX_LINES)) + "    )\n"
    )  # one statement
    fits = '@decorator\ndef fits(\n    a,\n    b,\n):\n    """Doc."""\n' + "".join(
        f"    {line}\n" for line in statements
    )
    grows = "class C:\n    async def grows(self):\n" + "".join(
        f"        {line}\n" for line in statements[: MAX_LINES - 1]
    )
    grows += "        def inner():\n            y = 1\n"  # the nested def and its statement: MAX_LINES + 1
    (package / "ok.py").write_text(fits + "\n\ndef spread():\n" + spread)
    (package / "sub.py").write_text(grows)
    assert long_functions(package) == [f"pkg/sub.py:2 grows ({MAX_LINES + 1} lines)"]
