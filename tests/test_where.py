"""The where-step through `cadedit fix`: a bug report that names a long function but no line asks the
model which line first (a few tokens under a grammar of the function's line numbers), then retypes
from that line up the scope ladder; a wrong line costs one try, the next widens.

The tiny random-weight Qwen2 runs the real decode loop; the where-step's answer and each try's are
scripted through tries.edit_verified's picks seam (picks(0) and picks(k), tests/scripting.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from cadedit.decode import script_picker
from cadedit.model import token_bytes
from cadedit.where import LineNumberCursor
from tests.scripting import inject_picks
from tests.test_scoped import fix, retype, scripted, verbatim, work  # noqa: F401 - fixtures
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures

# `parse` is lines 1-50 (longer than the ladder's block level of 40); the bug is on line 50.
BODY = ["def parse(items):"] + [f"    v{k} = items[{k}] + {k}" for k in range(1, 49)] + ["    return v1 - v2"]
LINES = BODY + ["", "", "print(parse(list(range(60))))"]
BUGGY = "\n".join(LINES) + "\n"
FIXED = BUGGY.replace("return v1 - v2", "return v1 + v2")
VAGUE = "There is a bug in `parse`, fix it."


@pytest.fixture
def where_says(monkeypatch):
    """where_says("50\\n"): the where-step's picker spells that answer; returns the calls made."""
    calls: list[str] = []

    def script(answer: str):
        def picker(loaded):  # called when the where-step runs
            calls.append(answer)
            return script_picker(answer, token_bytes(loaded))

        inject_picks(monkeypatch, lambda k: None if k else picker)
        return calls

    return script


def fixed_line(prepared) -> str:
    return retype(("return v1 - v2", "return v1 + v2"))(prepared)


def unchanged(prepared) -> str:
    return prepared.source


def run(work, tiny_dir, instruction: str = VAGUE, *args: str):
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = fix(tiny_dir, instruction, "--json", "--where", *args)
    return result, json.loads(result.stdout) if result.stdout.strip().startswith("{") else None


def test_a_vague_bug_report_asks_where_and_retypes_the_line_named(work, tiny_dir, scripted, where_says):
    asked = where_says("50\n")
    calls = scripted(fixed_line)
    result, data = run(work, tiny_dir)
    assert result.exit_code == 0, result.output
    assert asked and data["where"]["lines"] == [50] and data["where"]["asked"] == [[1, 50]]
    assert data["where"]["levels"] == [[[50, 50]], [[1, 50]]]
    assert [t["regions"] for t in data["tries"]] == [[[50, 50]]]
    assert calls[0].prepared.regions == ((50, 50),)  # one line retyped, not the 50-line function
    assert "+    return v1 + v2" in data["diff"]
    assert "where: the model named line 50 of lines 1-50; try 1 retypes line 50" in result.stderr


def test_a_wrong_location_costs_one_try_and_the_next_widens_to_the_function(work, tiny_dir, scripted, where_says):
    where_says("10\n")
    calls = scripted(unchanged, fixed_line)  # line 10 has nothing to fix: copied as it is
    result, data = run(work, tiny_dir)
    assert result.exit_code == 0, result.output
    assert [t["regions"] for t in data["tries"]] == [[[10, 10]], [[1, 50]]]
    assert data["tries"][0]["checks"][1]["detail"] == "the edit changed nothing"
    assert [c.prepared.regions for c in calls] == [((10, 10),), ((1, 50),)]
    assert "try 2 of 3 [scope widened to lines 1-50]" in result.stderr
    assert (work / "a.py").read_text() == BUGGY  # printed, not written
    assert "+    return v1 + v2" in data["diff"]


def test_a_wrong_location_that_fails_the_test_widens_too(work, tiny_dir, scripted, where_says):
    where_says("10\n")
    scripted(retype(("v9 = items[9] + 9", "v9 = items[9] + 8")), fixed_line)
    result, data = run(work, tiny_dir, VAGUE, "--test", "grep -q 'return v1 + v2' a.py")
    assert result.exit_code == 0, result.output
    assert [t["regions"] for t in data["tries"]] == [[[10, 10]], [[1, 50]]]
    assert [t["passed"] for t in data["tries"]] == [False, True]


def test_an_instruction_with_a_line_skips_the_where_step(work, tiny_dir, scripted, where_says):
    asked = where_says("10\n")
    scripted(fixed_line)
    result, data = run(work, tiny_dir, "There is a bug in `parse` on line 50, fix it.")
    assert result.exit_code == 0, result.output
    assert asked == [] and data["where"] is None
    assert data["tries"][0]["regions"] == [[50, 50]]
    assert "where:" not in result.stderr


def test_a_short_function_is_retyped_whole_without_the_where_step(work, tiny_dir, scripted, where_says):
    asked = where_says("2\n")
    (work / "a.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    scripted(retype(("a - b", "a + b")))
    result = fix(tiny_dir, "There is a bug in `add`, fix it.", "--json", "--where")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert asked == [] and data["where"] is None and data["tries"][0]["regions"] == [[1, 2]]


def test_the_model_itself_names_a_line_of_the_function(work, tiny_dir, scripted):
    """Unscripted: the tiny model's greedy answer under the cursor is one of the function's lines."""
    scripted(unchanged, unchanged, fixed_line)
    result, data = run(work, tiny_dir, VAGUE, "--verbose")
    assert result.exit_code == 0, result.output
    lines = data["where"]["lines"]
    assert lines and all(1 <= k <= 50 for k in lines)
    assert data["tries"][0]["regions"] == data["where"]["levels"][0]
    assert data["tries"][-1]["regions"] == [[1, 50]]
    assert "  where: prompt " in result.stderr


def test_the_cursor_allows_only_the_regions_line_numbers(work, tiny_dir):
    pieces = [b"1", b"2", b"5", b"0", b",", b" ", b", ", b"x", b"\n", b""]
    cursor = LineNumberCursor(pieces, [8, 9], range(10, 13), most=2)
    allowed = lambda: {pieces[t] for t in np.flatnonzero(cursor.allowed_mask())}  # noqa: E731
    assert allowed() == {b"1"}  # 10, 11, 12 all start with 1
    assert cursor.advance(0) and allowed() == {b"1", b"2", b"0"}
    assert not cursor.advance(2)  # 15 is not a line of the region
    assert cursor.advance(1) and allowed() == {b",", b", ", b"\n", b""}  # 12: a comma or the end
    assert cursor.advance(6) and allowed() == {b"1"}
    assert cursor.advance(0) and cursor.advance(3) and allowed() == {b"\n", b""}  # two lines: the most
    assert cursor.advance(8) and cursor.is_done() and cursor.lines() == (12, 10)


def test_the_quote_cursor_allows_only_the_regions_lines_text():
    from cadedit.where import LineTextCursor

    pieces = [b"ret", b"urn", b" x", b" y", b"\n", b"", b"pass", b"return"]
    cursor = LineTextCursor(pieces, [4, 5], {1: "def f():", 2: "    return x", 3: "    return y", 4: "    return x"})
    allowed = lambda: {pieces[t] for t in np.flatnonzero(cursor.allowed_mask())}  # noqa: E731
    assert allowed() == {b"ret", b"return"}  # no "pass": no line reads so
    assert cursor.advance(7) and allowed() == {b" x", b" y"}
    assert not cursor.advance(6)
    assert cursor.advance(2) and allowed() == {b"\n", b""}
    assert cursor.advance(4) and cursor.is_done() and cursor.lines() == (2, 4)  # both lines read so


def test_without_where_a_vague_bug_report_retypes_the_function(work, tiny_dir, scripted, where_says):
    asked = where_says("50\n")
    scripted(fixed_line)
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = fix(tiny_dir, VAGUE, "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert asked == [] and data["where"] is None and data["tries"][0]["regions"] == [[1, 50]]
