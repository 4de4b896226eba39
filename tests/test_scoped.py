"""Scoped edits through `cadedit fix`: the model retypes only the resolved region(s), the rest of
the file is copied by construction, byte for byte (CRLF, BOM, no final newline).

The tiny random-weight Qwen2 is loaded by the CLI from a model folder; the answer is scripted
through the real decode loop by tries.edit_verified's picks seam (tests/scripting.py): the
Prepared's own `source` (what an answer that changes nothing would print: each region's lines, its
closing fence, the forced headers between regions) with a region's text changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import cadedit.decode.pipeline as pipeline
from cadedit.decode.loop import script_sampler
from cadedit.backends.model import token_bytes
from tests.scripting import inject_picks, invoke
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures: each model folder loads once

LINES = [
    "def first(x):",  # 1
    "    return x + 1",  # 2
    "",  # 3
    "",  # 4
    "def second(x):",  # 5
    "    return x - 2",  # 6
    "",  # 7
    "",  # 8
    "print(first(1), second(2))",  # 9
]
SHORT = LINES[:6]  # `second` ends the file


def make(lines=LINES, newline="\n", bom=False, final=True, **changes: str) -> bytes:
    """The file's bytes; changes: {"l6": "new body of line 6"}."""
    bodies = list(lines)
    for key, body in changes.items():
        bodies[int(key[1:]) - 1] = body
    text = newline.join(bodies) + (newline if final else "")
    return (("\ufeff" if bom else "") + text).encode("utf-8")


LAYOUTS = {
    "lf": {},
    "crlf": {"newline": "\r\n"},
    "cr": {"newline": "\r"},
    "bom": {"bom": True},
    "bom-crlf": {"bom": True, "newline": "\r\n"},
    "no-final-newline": {"final": False},
}


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@dataclass
class Call:
    prompt: str
    prepared: pipeline.Prepared


@pytest.fixture
def scripted(monkeypatch):
    """scripted(*answers): try k spells answers[k - 1] (the last one again for later tries); each
    answer is a callable(prepared) -> the whole answer text. Returns the calls, one per try."""
    calls: list[Call] = []

    def script(*answers):
        def picks(k: int):
            answer = answers[min(k, len(answers)) - 1]

            def make_sampler(loaded, document, prepared):
                calls.append(Call(loaded.tokenizer.decode(list(prepared.prompt_ids)), prepared))
                return script_sampler(answer(prepared), token_bytes(loaded))

            return make_sampler if k else None  # 0: the where-step (tests/test_where.py scripts it)

        inject_picks(monkeypatch, picks)
        return calls

    return script


def retype(*pairs: tuple[str, str]):
    """An answer: the unchanged answer (prepared.source) with each old text replaced by the new."""

    def answer(prepared) -> str:
        text = prepared.source
        for old, new in pairs:
            assert old in text, (old, text)
            text = text.replace(old, new, 1)
        return text

    return answer


def verbatim(body: str):
    """An answer: exactly `body`, then the closing fence (a one-region answer the test spells out)."""
    return lambda prepared: body + prepared.fence + "\n"


def fix(tiny_dir, instruction: str, *args: str):
    """`cadedit fix` with one candidate a try: the answers `scripted` gives are tries (with --test the
    default would make try 1 several candidates: tests/test_candidates.py)."""
    return invoke(
        [
            "fix",
            "a.py",
            instruction,
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--candidates",
            "1",
            *args,
        ]
    )


def scope_line(stderr: str) -> str:
    (line,) = [line for line in stderr.splitlines() if line.startswith("a.py: scope: ")]
    return line.removeprefix("a.py: ")


def test_write_edits_a_file_outside_the_working_directory(tmp_path, monkeypatch, tiny_dir, scripted):
    """Only a printed diff needs a path patch can apply; --write edits ../other/a.py in place."""
    (tmp_path / "here").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other/a.py").write_bytes(make())
    monkeypatch.chdir(tmp_path / "here")
    scripted(retype(("return x - 2", "return x * 2")))
    result = invoke(
        [
            "fix",
            "../other/a.py",
            "Fix line 6.",
            "--lines",
            "6",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--candidates",
            "1",
            "--write",
        ]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "other/a.py").read_bytes() == make(l6="    return x * 2")


# -- a named function --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_named_function_is_the_only_region_retyped(work, tiny_dir, scripted, layout):
    kind = LAYOUTS[layout]
    before = make(**kind)
    (work / "a.py").write_bytes(before)
    calls = scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix the bug in `second`", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: lines 5-6 (function second)"
    assert (work / "a.py").read_bytes() == make(**kind, l6="    return x * 2")
    (call,) = calls
    assert call.prepared.regions == ((5, 6),)
    assert call.prepared.source == "def second(x):\n    return x - 2\n```\n"
    assert call.prompt.endswith("Lines 5-6:\n```python\n")  # the region's header is forced, not written
    assert "Reply with lines 5-6 of the file (2 lines)" in call.prompt


@pytest.mark.parametrize("layout", ["lf", "crlf", "bom"])
def test_region_that_ends_a_file_without_final_newline(work, tiny_dir, scripted, layout):
    kind = {**LAYOUTS[layout], "final": False}
    (work / "a.py").write_bytes(make(SHORT, **kind))
    calls = scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix the bug in `second`", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: lines 5-6 (function second)"
    assert (work / "a.py").read_bytes() == make(SHORT, **kind, l6="    return x * 2")
    assert calls[0].prepared.source == "def second(x):\n    return x - 2\n```\n"  # the fence on its own line


def test_region_that_ends_the_file_may_add_lines(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(SHORT, final=False))
    scripted(retype(("return x - 2", "y = x * 2\n    return y")))
    result = fix(tiny_dir, "Fix the bug in `second`", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == make(SHORT[:5] + ["    y = x * 2", "    return y"], final=False)


@pytest.mark.parametrize("layout", ["bom", "bom-crlf", "crlf"])
def test_region_on_line_1_keeps_the_bom_and_newlines(work, tiny_dir, scripted, layout):
    kind = LAYOUTS[layout]
    (work / "a.py").write_bytes(make(**kind))
    calls = scripted(retype(("def first(x):\n    return x + 1", "def first(y):\n    return y + 1")))
    result = fix(tiny_dir, "Rename the argument", "--scope", "first", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: lines 1-2 (function first)"
    assert (work / "a.py").read_bytes() == make(**kind, l1="def first(y):", l2="    return y + 1")
    assert "\ufeff" not in calls[0].prepared.source  # the model never sees the BOM


def test_diff_shows_only_the_region_change(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix the bug in `second`")
    assert result.exit_code == 0, result.output
    changed = [line for line in result.stdout.splitlines()[3:] if line[:1] in "-+"]
    assert changed == ["-    return x - 2", "+    return x * 2"]
    assert "-    return x - 2\n+    return x * 2\n" in result.stdout
    assert (work / "a.py").read_bytes() == make()


# -- --lines, --scope, --no-scope --------------------------------------------------------------


def test_lines_option(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(newline="\r\n"))
    calls = scripted(retype(("return x + 1", "return x + 10")))
    result = fix(tiny_dir, "Fix the bug.", "--lines", "2-3", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: lines 2-3 (--lines 2-3)"
    assert calls[0].prepared.regions == ((2, 3),)
    assert calls[0].prepared.source == "return x + 1\n\n```\n"  # drafted without the indentation the region shares
    assert (work / "a.py").read_bytes() == make(newline="\r\n", l2="    return x + 10")


def test_scope_option(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(retype(("return x + 1", "return x + 10")))
    result = fix(tiny_dir, "Fix the bug.", "--scope", "first", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: lines 1-2 (function first)"
    assert calls[0].prepared.regions == ((1, 2),)
    assert (work / "a.py").read_bytes() == make(l2="    return x + 10")


def test_two_regions_with_the_header_forced_between(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(final=False))
    calls = scripted(retype(("return x + 1", "return x + 10"), ("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix both.", "--lines", "2", "--lines", "6", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: line 2 (--lines 2), line 6 (--lines 6)"
    prepared = calls[0].prepared
    assert prepared.regions == ((2, 2), (6, 6))
    assert prepared.headers == ("Lines 6-6, without their common indentation of 4 spaces:\n```python\n",)
    assert prepared.source == (
        "return x + 1\n```\nLines 6-6, without their common indentation of 4 spaces:\n```python\nreturn x - 2\n```\n"
    )
    assert (work / "a.py").read_bytes() == make(final=False, l2="    return x + 10", l6="    return x * 2")


def test_no_scope_retypes_the_whole_file(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(newline="\r\n"))
    after = "\n".join(LINES).replace("return x - 2", "return x * 2") + "\n"
    calls = scripted(verbatim(after))
    result = fix(tiny_dir, "Fix the bug in `second`", "--no-scope", "--write")
    assert result.exit_code == 0, result.output
    assert "scope:" not in result.stderr
    (call,) = calls
    assert call.prepared.regions == () and call.prepared.headers == ()
    assert "Reply with the complete file, all 9 lines" in call.prompt and "Lines 5-6:" not in call.prompt
    assert (work / "a.py").read_bytes() == make(newline="\r\n", l6="    return x * 2")


@pytest.mark.parametrize("extra", [["--lines", "2"], ["--scope", "first"]])
def test_no_scope_with_lines_or_scope_is_a_usage_error(work, tiny_dir, scripted, extra):
    (work / "a.py").write_bytes(make())
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "Fix it.", "--no-scope", *extra)
    assert result.exit_code == 2 and calls == []


def test_program_mode_with_lines_is_a_usage_error(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "Fix it.", "--mode", "program", "--lines", "2")
    assert result.exit_code == 2 and calls == []


def test_whole_file_scope_says_why(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    after = "\n".join(LINES).replace("return x - 2", "return x * 2") + "\n"
    calls = scripted(verbatim(after))
    result = fix(tiny_dir, "Make it better.")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: whole file (the instruction names no line or definition of this file)"
    assert calls[0].prepared.regions == ()


# -- line references in the instruction ---------------------------------------------------------


def test_line_reference_is_its_statement_and_is_quoted(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix line 6", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: line 6 (line 6 in the instruction, in function second)"
    assert calls[0].prepared.regions == ((6, 6),)
    assert "Line 6:     return x - 2\n" in calls[0].prompt
    assert (work / "a.py").read_bytes() == make(l6="    return x * 2")


def test_a_try_that_does_not_parse_widens_the_next_to_the_function_and_no_change_does_not(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(
        retype(), retype(("return x - 2", "return (x -")), retype(("def second(x):", "def second(x, y=0):"))
    )
    result = fix(tiny_dir, "Fix line 6", "--json")
    assert result.exit_code == 0, result.output
    assert [call.prepared.regions for call in calls] == [((6, 6),), ((6, 6),), ((5, 6),)]
    assert "try 2 of 3: failed: syntax" in result.stderr
    assert "try 3 of 3 [scope widened to lines 5-6]: passed" in result.stderr
    data = json.loads(result.stdout)
    assert [t["regions"] for t in data["tries"]] == [[[6, 6]], [[6, 6]], [[5, 6]]]
    assert "+def second(x, y=0):" in data["diff"]


def test_a_file_shown_in_parts_quotes_the_region_until_a_try_changes_nothing(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(LONG))
    line = LONG.index("    return x - 2") + 1
    calls = scripted(retype(), retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, f"Fix line {line}", "--write")
    assert result.exit_code == 0, result.output
    quote = f"Lines {line}-{line} now read:\n```python\n    return x - 2\n```\n"
    assert quote in calls[0].prompt and quote not in calls[1].prompt
    assert f"Line {line}:     return x - 2\n" in calls[1].prompt  # the numbered line is still shown
    assert (work / "a.py").read_bytes() == make(LONG, **{f"l{line}": "    return x * 2"})


def test_a_file_shown_whole_does_not_quote_the_region(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix line 6", "--write")
    assert result.exit_code == 0, result.output
    assert "now read:" not in calls[0].prompt and "File a.py (9 lines):\n" in calls[0].prompt


def test_a_line_of_a_statement_over_two_lines_widens_to_the_statement_first(work, tiny_dir, scripted):
    lines = ["def f(x):", "    return g(x,", "             1)", ""]
    (work / "a.py").write_bytes(make(lines))
    calls = scripted(retype(("1)", "1))")), retype(("1)", "2)")))
    result = fix(tiny_dir, "Fix line 3", "--write")
    assert result.exit_code == 0, result.output
    assert [call.prepared.regions for call in calls] == [((3, 3),), ((2, 3),)]
    assert "try 2 of 3 [scope widened to lines 2-3]: passed" in result.stderr
    assert (work / "a.py").read_bytes() == make(lines, l3="             2)")


LONG = (
    ["import os", ""]
    + [f"A{k} = {k}" for k in range(200)]
    + ["", "", "def f(x):", "    return x - 2", ""]
    + [f"B{k} = {k}" for k in range(200)]
)


def test_a_long_file_is_shown_around_the_region_and_context_all_shows_it_whole(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(LONG))
    line = LONG.index("    return x - 2") + 1
    calls = scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, f"Fix line {line}", "--context", "5", "--write")
    assert result.exit_code == 0, result.output
    prompt = calls[0].prompt
    assert (
        f"File a.py ({len(LONG)} lines), the parts around the lines to edit:\nLines 1-20:\n```python\nimport os\n"
        in prompt
    )
    assert f"Lines {line - 5}-{line + 5}:\n```python\n" in prompt
    assert "A100 = 100" not in prompt and "B100 = 100" not in prompt
    assert (work / "a.py").read_bytes() == make(LONG, **{f"l{line}": "    return x * 2"})
    (work / "a.py").write_bytes(make(LONG))
    calls.clear()
    result = fix(tiny_dir, f"Fix line {line}", "--context", "all", "--write")
    assert result.exit_code == 0, result.output
    assert "A100 = 100" in calls[0].prompt and "B100 = 100" in calls[0].prompt


@pytest.mark.parametrize("value", ["-1", "many", ""])
def test_a_bad_context_value_is_a_usage_error(work, tiny_dir, scripted, value):
    (work / "a.py").write_bytes(make())
    result = fix(tiny_dir, "Fix line 6", "--context", value)
    assert result.exit_code == 2 and "--context" in result.output


def test_top_level_line_reference_stays_that_line(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    scripted(retype(("second(2)", "second(3)")))
    result = fix(tiny_dir, "Fix line 9", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: line 9 (line 9 in the instruction)"
    assert (work / "a.py").read_bytes() == make(l9="print(first(1), second(3))")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_line_past_the_end_is_a_one_line_error(work, tiny_dir, scripted):
    five = make(["def first(x):", "    return x + 1", "", "def second(x):", "    return x - 2"])
    (work / "a.py").write_bytes(five)
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "fix line 99")
    assert result.exit_code == 1, result.output
    assert error_lines(result.stderr) == ["error: line 99 in the instruction: a.py has 5 lines"]
    assert "hint: " in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == "" and calls == []
    assert (work / "a.py").read_bytes() == five


def test_lines_past_the_end_is_a_one_line_error(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "Fix it.", "--lines", "8-12")
    assert result.exit_code == 1, result.output
    assert error_lines(result.stderr) == ["error: --lines 8-12: a.py has 9 lines"]
    assert calls == [] and (work / "a.py").read_bytes() == make()


@pytest.mark.parametrize(
    "spec, message", [("3-2", "start after end"), ("x", "not a line range"), ("0", "lines are numbered from 1")]
)
def test_bad_lines_value_is_a_one_line_error(work, tiny_dir, scripted, spec, message):
    (work / "a.py").write_bytes(make())
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "Fix it.", "--lines", spec)
    assert result.exit_code == 1, result.output
    (line,) = error_lines(result.stderr)
    assert message in line and calls == []


def test_unknown_scope_name_is_a_one_line_error(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "Fix it.", "--scope", "nosuch")
    assert result.exit_code == 1, result.output
    assert error_lines(result.stderr) == [
        "error: --scope nosuch: a.py defines no function, method or class named nosuch"
    ]
    assert "hint: defined there: first, second" in result.stderr
    assert calls == [] and (work / "a.py").read_bytes() == make()


@pytest.mark.parametrize("name", ["Parser.first", "first.y", "nope.second", "first.second.x"])
def test_a_qualified_scope_name_the_file_does_not_define_is_a_one_line_error(work, tiny_dir, scripted, name):
    """`--scope Parser.parse` never means `Lexer.parse`: a qualified name matches as a whole or not at all."""
    (work / "a.py").write_bytes(make())
    calls = scripted(verbatim(""))
    result = fix(tiny_dir, "Fix it.", "--scope", name)
    assert result.exit_code == 1, result.output
    assert error_lines(result.stderr) == [
        f"error: --scope {name}: a.py defines no function, method or class named {name}"
    ]
    assert calls == [] and (work / "a.py").read_bytes() == make()


# -- an answer that runs past its region --------------------------------------------------------


def test_answer_retyping_the_next_lines_is_trimmed(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(newline="\r\n"))
    # Region 1-2, but the model goes on with lines 3-6 of the file before it closes the fence.
    scripted(verbatim("def first(x):\n    return x + 10\n\n\ndef second(x):\n    return x - 2\n"))
    result = fix(tiny_dir, "Fix the bug.", "--scope", "first", "--write")
    assert result.exit_code == 0, result.output
    after = (work / "a.py").read_bytes()
    assert after == make(newline="\r\n", l2="    return x + 10")
    assert after.count(b"def second") == 1


def test_answer_retyping_the_previous_lines_is_trimmed(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    # Region 5-6, but the model starts with lines 2-4 of the file.
    scripted(verbatim("    return x + 1\n\n\ndef second(x):\n    return x * 2\n"))
    result = fix(tiny_dir, "Fix the bug in `second`", "--write")
    assert result.exit_code == 0, result.output
    after = (work / "a.py").read_bytes()
    assert after == make(l6="    return x * 2")
    assert after.count(b"return x + 1") == 1


def test_overlap_is_trimmed_in_each_of_two_regions(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())

    def answer(prepared):
        header = prepared.headers[0]
        return (
            "def first(x):\n    return x + 10\n\n\ndef second(x):\n"
            + prepared.fence
            + "\n"
            + header
            + "    return x * 2\n\n\nprint(first(1), second(2))\n"
            + prepared.fence
            + "\n"
        )

    calls = scripted(answer)
    result = fix(tiny_dir, "Fix both.", "--scope", "first", "--lines", "6", "--write")
    assert result.exit_code == 0, result.output
    assert calls[0].prepared.regions == ((1, 2), (6, 6))
    assert (work / "a.py").read_bytes() == make(l2="    return x + 10", l6="    return x * 2")


# -- scoped tries and --json -------------------------------------------------------------------


def test_scoped_syntax_error_is_fed_back_into_the_scoped_prompt(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    calls = scripted(retype(("return x - 2", "return x *")), retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix the bug in `second`", "--write")
    assert result.exit_code == 0, result.output
    assert "try 1 of 3: failed: syntax (line 6: invalid syntax)" in result.stderr
    assert "try 2 of 3: passed" in result.stderr
    first, second = calls[0].prompt, calls[1].prompt
    assert "Your previous answer did not parse: line 6: invalid syntax (`    return x *`)." in second
    assert second.endswith("Lines 5-6:\n```python\n") and first.endswith("Lines 5-6:\n```python\n")
    assert (work / "a.py").read_bytes() == make(l6="    return x * 2")


def test_json_has_the_scope(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make())
    scripted(retype(("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix the bug in `second`", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["scope"] == [{"start": 5, "end": 6, "reason": "function second"}]
    assert data["passed"] is True and data["answer_try"] == 1 and len(data["tries"]) == 1
    assert "-    return x - 2\n+    return x * 2\n" in data["diff"]


# -- stdin -------------------------------------------------------------------------------------


def test_stdin_with_lines_prints_the_whole_edited_file(work, tiny_dir, scripted):
    before = make(newline="\r\n", final=False)
    scripted(retype(("return x - 2", "return x * 2")))
    result = invoke(
        ["fix", "-", "Fix it.", "--lines", "6", "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1"],
        input=before,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == make(newline="\r\n", final=False, l6="    return x * 2")
    assert "<stdin>.py: scope: line 6 (--lines 6)" in result.stderr  # Python by its content


# -- scope resolution that makes the asked-for edit impossible ---------------------------------

ADD_SUB = [
    "def add(a, b):",
    "    return a - b",
    "",
    "",
    "def sub(a, b):",
    "    return a - b",
    "",
    "",
    "def main():",
    "    print(add(1, 2), sub(3, 4))",
]  # 10 lines


def unchanged(prepared) -> str:
    return prepared.source


def test_an_english_verb_that_is_a_function_name_does_not_narrow_the_scope(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(ADD_SUB))
    calls = scripted(unchanged)
    result = fix(tiny_dir, "please add docstrings to every function", "--allow-no-change")
    assert result.exit_code == 0, result.output
    assert calls[0].prepared.regions == ()
    assert scope_line(result.stderr).startswith("scope: whole file")


def test_a_rename_everywhere_may_change_the_callers(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(ADD_SUB))
    calls = scripted(unchanged)
    # the model's scope for it (without --no-mechanical the rename is made without a model: test_mechanical_cli.py)
    result = fix(tiny_dir, "rename sub to subtract everywhere", "--allow-no-change", "--no-mechanical")
    assert result.exit_code == 0, result.output
    regions = calls[0].prepared.regions
    assert regions == () or any(a <= 10 <= b for a, b in regions)


def test_a_line_of_another_file_is_not_a_scope_error(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(ADD_SUB))
    calls = scripted(unchanged)
    result = fix(tiny_dir, "fix sub so that the test at line 14 of test_m.py passes", "--allow-no-change")
    assert result.exit_code == 0, result.output
    assert calls[0].prepared.regions == ((5, 6),)


def test_a_line_of_another_file_does_not_replace_the_named_function(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(ADD_SUB))
    calls = scripted(unchanged)
    result = fix(tiny_dir, "fix sub: test_m.py line 4 fails", "--allow-no-change")
    assert result.exit_code == 0, result.output
    assert calls[0].prepared.regions == ((5, 6),)


# -- methods, decorators, JavaScript -----------------------------------------------------------

CLASS = [
    "import functools",
    "",
    "",
    "class Greeter:",
    "    # Says hello.",
    "    @functools.cache",
    "    def hello(self, name):",
    "        return 'hello ' + nam",
    "",
    "    def bye(self):",
    "        return 'bye'",
]  # 11 lines, no final newline in the test


def test_scope_class_method_includes_its_decorator_and_comment(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(CLASS, newline="\r\n", final=False))
    calls = scripted(retype(("+ nam\n", "+ name\n")))
    result = fix(tiny_dir, "Fix the typo.", "--scope", "Greeter.hello", "--write")
    assert result.exit_code == 0, result.output
    assert scope_line(result.stderr) == "scope: lines 5-8 (method Greeter.hello)"
    assert calls[0].prepared.source.startswith("# Says hello.\n@functools.cache\n")  # drafted dedented
    assert (work / "a.py").read_bytes() == make(CLASS, newline="\r\n", final=False, l8="        return 'hello ' + name")


JS = ["function first(x) {", "  return x + 1;", "}", "", "function second(x) {", "  return x - 2;", "}"]


def test_javascript_function_scope(work, tiny_dir, scripted):
    pytest.importorskip("tree_sitter_javascript")
    (work / "a.js").write_bytes(make(JS))
    calls = scripted(retype(("x - 2", "x * 2")))
    result = invoke(
        [
            "fix",
            "a.js",
            "Fix the bug in `second`",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--write",
        ]
    )
    assert result.exit_code == 0, result.output
    assert "a.js: scope: lines 5-7 (function second)" in result.stderr
    assert calls[0].prompt.endswith("Lines 5-7:\n```javascript\n")
    assert (work / "a.js").read_bytes() == make(JS, l6="  return x * 2;")


def test_javascript_answer_past_the_closing_brace_is_trimmed(work, tiny_dir, scripted):
    pytest.importorskip("tree_sitter_javascript")
    (work / "a.js").write_bytes(make(JS))
    # --lines 1-2, but the model closes the function (line 3) and goes on into the next one.
    scripted(verbatim("function first(x) {\n  return x + 10;\n}\n\nfunction second(x) {\n"))
    result = invoke(
        [
            "fix",
            "a.js",
            "Fix it.",
            "--lines",
            "1-2",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--write",
        ]
    )
    assert result.exit_code == 0, result.output
    assert (work / "a.js").read_bytes() == make(JS, l2="  return x + 10;")


@pytest.mark.parametrize("mode", ["verify", "rewrite", "lookup"])
def test_every_fenced_mode_gives_the_same_scoped_bytes(work, tiny_dir, scripted, mode):
    (work / "a.py").write_bytes(make(bom=True, newline="\r\n", final=False))
    calls = scripted(retype(("return x + 1", "return x + 10"), ("return x - 2", "return x * 2")))
    result = fix(tiny_dir, "Fix both.", "--scope", "first", "--scope", "second", "--mode", mode, "--write")
    assert result.exit_code == 0, result.output
    assert calls[0].prepared.regions == ((1, 2), (5, 6))
    assert (work / "a.py").read_bytes() == make(
        bom=True, newline="\r\n", final=False, l2="    return x + 10", l6="    return x * 2"
    )


# -- answers a repair cannot place exactly ---------------------------------------------------------

SETUP = ["def setup():", "    connect()", "    load_config()", "    start_workers()"]


@pytest.mark.parametrize(
    "answer",
    [
        "def setup():\n    load_config()\n    connect()\n    start_workers()\n",  # the def line retyped, as the file has it
        "def setup():\nload_config()\nconnect()\nstart_workers()\n",  # ... and the body as shown
        "load_config()\nconnect()\nstart_workers()\n",
    ],
    ids=["def-retyped", "def-retyped-body-as-shown", "region-only"],
)
def test_an_answer_that_retypes_the_enclosing_def_is_placed_without_nesting(work, tiny_dir, scripted, answer):
    (work / "a.py").write_bytes(make(SETUP))
    scripted(verbatim(answer))
    result = fix(tiny_dir, "Call load_config() before connect().", "--lines", "2-4", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == make(SETUP, l2="    load_config()", l3="    connect()")


@pytest.mark.parametrize(
    "answer", ["load_config()\nconnect()\n", "def setup():\n    load_config()\n    connect()\n    start_workers()\n"]
)
def test_swapped_lines_are_placed_once_each(work, tiny_dir, scripted, answer):
    (work / "a.py").write_bytes(make(SETUP))
    scripted(verbatim(answer))
    result = fix(tiny_dir, "Swap these two lines.", "--lines", "2-3", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == make(SETUP, l2="    load_config()", l3="    connect()")


def test_an_answer_that_cannot_be_placed_exactly_fails_its_try_and_the_next_is_told(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(SETUP))
    # Lines 2-4, answered with line 3 then line 2 and nothing of line 4: line 4 skipped, or deleted?
    calls = scripted(verbatim("load_config()\nconnect()\n"), verbatim("load_config()\nconnect()\nstart_workers()\n"))
    result = fix(tiny_dir, "Call load_config() before connect().", "--lines", "2-4", "--write")
    assert result.exit_code == 0, result.output
    assert (
        "a.py: try 1 of 3: failed: placement (lines 2-4: the answer ends with line 2 yet has only some of "
        "lines 3-4, so it cannot be placed in them exactly)"
    ) in result.stderr
    assert "Your previous answer could not be put in place (lines 2-4: the answer ends with line 2" in calls[1].prompt
    assert (work / "a.py").read_bytes() == make(SETUP, l2="    load_config()", l3="    connect()")


def test_an_answer_that_retypes_the_def_line_in_other_indentation_is_not_written(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(SETUP))
    scripted(verbatim("    def setup():\n    load_config()\n    connect()\n    start_workers()\n"))
    result = fix(
        tiny_dir,
        "Call load_config() before connect().",
        "--lines",
        "2-4",
        "--write",
        "--tries",
        "1",
        "--json",
        "--quiet",
    )
    assert result.exit_code == 3, result.output
    (check,) = [c for c in json.loads(result.stdout)["tries"][0]["checks"] if c["name"] == "placement"]
    assert check["passed"] is False and "retypes line 1 (def setup():)" in check["detail"]
    assert (work / "a.py").read_bytes() == make(SETUP)


def test_an_empty_answer_deletes_the_region(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(make(SETUP))
    scripted(verbatim(""))
    result = fix(tiny_dir, "Remove the load_config() call.", "--lines", "3", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == make(SETUP[:2] + SETUP[3:])
