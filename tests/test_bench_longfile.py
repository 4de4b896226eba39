"""Long-file tasks: one planted one-line bug per real module, and their scoring."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from cadedit.bench.corpus import load_corpus
from cadedit.bench.longfile import _is_exact_mutation, apply_swap, build_tasks, candidate_swaps, score, write_tasks
from cadedit.text.document import Document

MODULE = '''\
"""A module."""

LIMIT = 1 < 2  # module level: never a candidate


def clamp(x, low=0):
    if x < low:
        return low
    return x


class Box:
    size = 3  # class body: never a candidate

    @staticmethod
    def area(w, h=1):
        def half(v):
            return v is None
        return w + h
'''


def swaps_of(src: str) -> list[tuple[int, str, str, str, str]]:
    tree = ast.parse(src)
    found = sorted(candidate_swaps(tree, src.split("\n")), key=lambda s: (s.line, s.col))
    return [(s.line, s.function, s.kind, s.old, s.new) for s in found]


def write_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def long_module(k: int) -> str:
    """A module of about 40 lines with its own functions, distinct per k."""
    function = "def f{k}_{i}(x):\n    if x == {i}:\n        return x + {i}\n    return False\n\n\n"
    body = "".join(function.format(k=k, i=i) for i in range(6))
    return f"# module {k}\n\n\n" + body


def test_candidates_are_only_in_function_bodies_with_the_innermost_qualname():
    assert swaps_of(MODULE) == [
        (7, "clamp", "compare", "<", "<="),
        (18, "Box.area.half", "compare", "is", "is not"),
        (19, "Box.area", "arithmetic", "+", "-"),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("    return (a) < (b)", [("compare", "<", "<=")]),
        ("    return a  not   in b", [("compare", "not   in", "in")]),
        ("    return a is not b", [("compare", "is not", "is")]),
        ("    return a >= b != c", [("compare", ">=", ">"), ("compare", "!=", "==")]),
        ("    x -= 2", [("augmented", "-=", "+="), ("int-constant", "2", "3")]),
        ("    return a and b", [("boolean", "and", "or")]),
        ("    return a or b or c", []),  # one op for three values: no exact one-token swap
        ("    return True", [("bool-constant", "True", "False")]),
        ("    return 0x10 + 1_000", [("arithmetic", "+", "-")]),  # only decimal literals change
        ("    return a + b  # + here", [("arithmetic", "+", "-")]),
        ("    return (a +\n        b)", []),  # the operator and its right operand on two lines
        ('    return f"{a < b}"', []),  # f-string parts: positions not trusted
        ("    return a * b", []),
    ],
)
def test_each_kind_of_swap_is_found_at_its_token(line, expected):
    src = f"def f(a, b, c, x):\n{line}\n"
    assert [(kind, old, new) for _, _, kind, old, new in swaps_of(src)] == expected


def test_columns_are_characters_even_after_non_ascii_text(tmp_path):
    src = 'def f(x):\n    return "\u00e9\u00e9" < x\n'
    root = write_package(tmp_path, {"m.py": src})
    (task,) = build_tasks([root], 1, seed=0, min_lines=1)
    assert task["before"] == 'def f(x):\n    return "\u00e9\u00e9" <= x\n'


def test_a_swap_is_kept_only_when_the_text_parses_to_exactly_the_mutated_ast():
    src = "def f(a, b):\n    return a < b\n"
    tree, document = ast.parse(src), Document.from_text(src)
    (swap,) = candidate_swaps(tree, src.split("\n"))
    assert _is_exact_mutation(tree, swap, apply_swap(document, swap))
    for wrong in ("<<", "<<<", ">"):  # a shift (another AST), no parse, another comparison
        bad = dataclasses.replace(swap, new=wrong)
        assert not _is_exact_mutation(tree, bad, apply_swap(document, bad))
    assert ast.dump(tree) == ast.dump(ast.parse(src))  # the check leaves the tree as it found it


def test_a_bom_file_keeps_its_bom_and_every_other_byte(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "m.py").write_bytes(b"\xef\xbb\xbfdef f(x):\r\n    return x == 1\r\n")
    (task,) = build_tasks([root], 1, seed=0, min_lines=1)
    assert task["after"] == "\ufeffdef f(x):\r\n    return x == 1\r\n"
    assert task["before"] in ("\ufeffdef f(x):\r\n    return x != 1\r\n", "\ufeffdef f(x):\r\n    return x == 2\r\n")


def test_a_task_has_one_changed_line_in_the_named_function_and_a_changed_ast(tmp_path):
    root = write_package(tmp_path, {f"m{k}.py": long_module(k) for k in range(3)})
    tasks = build_tasks([root], 3, seed=1, min_lines=20)
    assert len(tasks) == 3 and len({t["path"] for t in tasks}) == 3
    for t in tasks:
        before, after = t["before"].splitlines(), t["after"].splitlines()
        changed = [k for k, (a, b) in enumerate(zip(before, after), 1) if a != b]
        assert changed == [t["bug_line"]] and len(before) == len(after)
        assert t["function_start"] <= t["bug_line"] <= t["function_end"]
        assert ast.dump(ast.parse(t["before"])) != ast.dump(ast.parse(t["after"]))
        assert after == (root / t["path"].split("/", 1)[1]).read_text().splitlines()
        assert t["path"].startswith("pkg/") and t["id"] == f"longfile/{t['path']}:{t['bug_line']}"
        function = t["function"]
        assert t["instruction"].startswith(f"In function `{function}` (line {t['bug_line']}), change `")
        assert before[t["bug_line"] - 1].strip() in t["instruction"]
        assert t["instruction_vague"] == f"There is a bug in function `{function}`. Fix it."
        assert after[t["function_start"] - 1].startswith(f"def {function}(")


def test_tasks_are_the_same_for_a_seed_and_differ_across_seeds(tmp_path):
    root = write_package(tmp_path, {f"m{k}.py": long_module(k) for k in range(6)})
    first = build_tasks([root], 4, seed=7, min_lines=20)
    assert first == build_tasks([root], 4, seed=7, min_lines=20)
    others = [build_tasks([root], 4, seed=s, min_lines=20) for s in range(5)]
    assert any([t["id"] for t in o] != [t["id"] for t in first] for o in others)


def test_files_outside_the_line_bounds_are_never_chosen(tmp_path):
    short = "def f(x):\n    return x < 1\n"
    root = write_package(tmp_path, {"short.py": short, "long.py": long_module(0), "sub/deep.py": long_module(1)})
    assert {t["path"] for t in build_tasks([root], 10, seed=0, min_lines=20, max_lines=100)} == {
        "pkg/long.py",
        "pkg/sub/deep.py",
    }
    assert build_tasks([root], 10, seed=0, min_lines=1, max_lines=5)[0]["path"] == "pkg/short.py"


def test_files_that_do_not_parse_or_have_no_candidate_are_skipped(tmp_path):
    root = write_package(tmp_path, {"bad.py": "def f(:\n" * 30, "flat.py": "x = 1\n" * 30})
    assert build_tasks([root], 5, seed=0, min_lines=20) == []


def test_tasks_from_an_installed_package_are_real_long_files():
    import rich

    tasks = build_tasks([Path(rich.__file__).parent], 3, seed=0)
    assert len(tasks) == 3
    for t in tasks:
        assert t["path"].startswith("rich/") and 200 <= t["after"].count("\n") <= 1000
        ast.parse(t["before"])


def test_written_tasks_load_as_a_corpus(tmp_path):
    root = write_package(tmp_path, {f"m{k}.py": long_module(k) for k in range(2)})
    tasks = build_tasks([root], 2, seed=3, min_lines=20)
    write_tasks(tasks, tmp_path / "tasks.jsonl")
    cases = load_corpus(tmp_path / "tasks.jsonl")
    assert [(c.id, c.before, c.after, c.instruction) for c in cases] == [
        (t["id"], t["before"], t["after"], t["instruction"]) for t in tasks
    ]
    assert json.loads((tmp_path / "tasks.jsonl").read_text().splitlines()[0])["bug"] == tasks[0]["bug"]


TASK = {
    "before": "".join(f"line {k}\n" for k in range(1, 11)),
    "after": "".join(f"line {k}\n" for k in range(1, 11)).replace("line 5\n", "fixed 5\n"),
    "function_start": 4,
    "function_end": 6,
}


def edit(text: str, k: int, new: str | None) -> str:
    """Replace 1-based line k (None deletes it)."""
    lines = text.splitlines(keepends=True)
    lines[k - 1 : k] = [] if new is None else [new]
    return "".join(lines)


@pytest.mark.parametrize(
    ("new_text", "expected"),
    [
        (TASK["after"], (True, 0, 1)),
        (TASK["before"], (False, 0, 0)),
        (edit(TASK["after"], 9, "oops\n"), (False, 1, 1)),
        (edit(TASK["after"], 1, None), (False, 1, 1)),
        (edit(TASK["after"], 10, "line 10\nextra\nextra\n"), (False, 2, 1)),  # appended after the end
        (edit(TASK["after"], 5, "fixed 5\nmore\n"), (False, 0, 2)),  # inserted inside the function
        (edit(TASK["after"], 6, "line 6\r\n"), (False, 0, 2)),  # a changed terminator is a change
        (edit(TASK["after"], 7, "changed 7\n"), (False, 1, 1)),  # just past the function's last line
    ],
)
def test_score_counts_exact_match_and_lines_changed_outside_the_function(new_text, expected):
    got = score(TASK, new_text)
    assert (got["exact"], got["lines_changed_outside"], got["lines_changed_inside"]) == expected


def test_longfile_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, cadedit.bench.longfile; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"
