"""Test feedback that points at the code, through `cadedit fix --test`: after a failed test, the next
try's prompt ends with the failing check and the traceback frame inside the edited file, mapped to
its line in the lines the candidate retyped (Python tracebacks, pytest, node stack traces; the file
found by its path or, when the test runs a copy, by its name).

The tiny random-weight Qwen2 runs the real decode loop; each try's answer is scripted through
tries.edit_verified's picks seam (tests/test_scoped.py).
"""

from __future__ import annotations

import shlex
import sys

from tests.test_scoped import fix, retype, scripted, work  # noqa: F401 - fixtures
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures

BEFORE = "def add(a, b):\n    total = a\n    return total - b\n\n\nVALUE = 1\n"
TEST = "from a import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
PYTHON = shlex.quote(sys.executable)


def setup(work) -> None:
    (work / "a.py").write_text(BEFORE, encoding="utf-8")
    (work / "test_a.py").write_text(TEST, encoding="utf-8")
    (work / "t.py").write_text("from a import add\nassert add(1, 2) == 3\n", encoding="utf-8")


def broken(prepared) -> str:
    """Try 1: a line added in the region, and the one after it raises a TypeError."""
    return retype(("    return total - b\n", "    total = total\n    return total + None\n"))(prepared)


def good(prepared) -> str:
    return retype(("total - b", "total + b"))(prepared)


def second_prompt(work, tiny_dir, scripted, test: str) -> list:
    """`cadedit fix --test TEST` where try 1 raises and try 2 passes; the prompts of both tries."""
    setup(work)
    calls = scripted(broken, good)
    result = fix(tiny_dir, "Fix the bug in add.", "--test", test)
    assert result.exit_code == 0, result.output
    return [call.prompt for call in calls]


def told(prompt: str) -> str:
    return prompt[prompt.index("The tests failed") :]


def test_a_python_traceback_points_the_next_try_at_the_line_of_its_answer(work, tiny_dir, scripted):
    prompts = second_prompt(work, tiny_dir, scripted, f"{PYTHON} t.py")
    said = told(prompts[1])
    assert "The failing check: `TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'`" in said
    # line 4 of the candidate file is the 4th line of the answer for lines 1-3 (one line was added)
    assert (
        "The error was raised in your answer for lines 1-3, at its line 4 (line 4 of a.py): `return total + None`"
        in said
    )
    assert said.index("The error was raised") > said.index("Traceback")  # last, after the output
    assert "at its line" not in prompts[0]


def test_pytest_output_gives_the_tests_statement_and_the_frame(work, tiny_dir, scripted):
    prompts = second_prompt(work, tiny_dir, scripted, f"{PYTHON} -m pytest -q -p no:cacheprovider test_a.py")
    said = told(prompts[1])
    assert "The failing check: `assert add(1, 2) == 3`: `TypeError: unsupported operand type(s)" in said
    assert "in your answer for lines 1-3, at its line 4 (line 4 of a.py): `return total + None`" in said


def test_a_copy_of_the_file_under_another_path_is_found_by_its_name(work, tiny_dir, scripted):
    copy = f"rm -rf copy && mkdir copy && cp a.py t.py copy/ && cd copy && {PYTHON} t.py"
    prompts = second_prompt(work, tiny_dir, scripted, copy)
    assert "in your answer for lines 1-3, at its line 4 (line 4 of a.py)" in prompts[1]


def test_a_node_stack_trace_frame_outside_the_region(work, tiny_dir, scripted):
    trace = (
        "printf 'TypeError: bad value\\n    at check (/elsewhere/a.py:7:3)\\n    at main (/x/t.js:1:1)\\n'; "
        "grep -q 'total + b' a.py"
    )
    prompts = second_prompt(work, tiny_dir, scripted, trace)
    said = told(prompts[1])
    assert "The failing check: `TypeError: bad value`" in said
    # line 7 of the candidate (one line longer than the file) is the file's `VALUE = 1`, after the region
    assert "The error was raised at line 7 of a.py, outside the lines you rewrote: `VALUE = 1`" in said


def test_output_with_no_frame_in_the_file_adds_nothing_but_the_check(work, tiny_dir, scripted):
    prompts = second_prompt(work, tiny_dir, scripted, "echo 'expected 3'; grep -q 'total + b' a.py")
    assert "The error was raised" not in prompts[1] and "The failing check" not in prompts[1]
