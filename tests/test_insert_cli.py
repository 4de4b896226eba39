"""Insertion points and the retype bound through `cadedit fix` (issue 64): an instruction that adds code
retypes only the lines where it goes, and a plan that would retype more than --max-retype is refused
before the model loads, with a hint that says what it would retype and how to allow it.

The tiny random-weight model loads through the CLI; answers are scripted through the real decode loop
(tests/scripting.py), as in tests/test_scoped.py.
"""

from __future__ import annotations

import json

import pytest

from tests.scripting import invoke
from tests.test_scoped import retype, scripted, verbatim, work  # noqa: F401 - fixtures
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures: each model folder loads once

DOCSTRING = '"""A module of many small functions.\n\nLong enough that a whole-file retype is far past the bound.\n"""\n'
BODY = "".join(f"\n\ndef f{i}(x):\n    return x + {i}\n" for i in range(250))  # 1,000 lines in all
MODULE = DOCSTRING + "\nimport os\n" + BODY

BAR = """\
class ProgressBar:
    def __init__(self, total):
        self.total = total
        self.done = 0

    def update(self, n=1):
        self.done += n
        return self.done

    def render(self):
        return f"{self.done}/{self.total}"


def main():
    bar = ProgressBar(3)
    bar.update()
    print(bar.render())
"""

COUNTER = """\
// A counter.
class Counter {
  constructor() {
    this.n = 0;
  }

  inc() {
    this.n += 1;
  }
}

module.exports = { Counter };
"""


def fix(tiny_dir, *args: str):
    return invoke(["fix", *args, "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", "--candidates", "1"])


def scope_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": scope: " in line]


def retyped(call) -> int:
    return sum(b - a + 1 for a, b in call.prepared.regions)


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error")]


# -- insertion points --------------------------------------------------------------------------


def test_a_constant_after_the_module_docstring_retypes_a_few_lines_of_a_1000_line_file(work, tiny_dir, scripted):
    (work / "m.py").write_text(MODULE)
    assert MODULE.count("\n") == 1006
    calls = scripted(retype(('"""\n', '"""\n\n__version__ = "1.0"\n')))
    instruction = 'Add a module-level constant `__version__ = "1.0"` right after the module docstring'
    result = fix(tiny_dir, "m.py", instruction, "--write", "--json")
    assert result.exit_code == 0, result.output
    assert scope_lines(result.stderr) == ["m.py: scope: lines 4-5 (insert after line 4, after the module docstring)"]
    (call,) = calls
    assert retyped(call) == 2 <= 2 + 10  # lines retyped <= new lines + 10
    assert (work / "m.py").read_text() == MODULE.replace('"""\n\nimport', '"""\n\n__version__ = "1.0"\n\nimport', 1)
    data = json.loads(result.stdout)
    assert data["scope"] == [
        {"start": 4, "end": 5, "reason": "insert after line 4, after the module docstring", "insert_after": 4}
    ]
    assert data["retype"] == {"what": "lines 4-5", "lines": 2, "tokens_estimate": 2}


def test_two_files_are_each_scoped_to_their_own_insertion_point(work, tiny_dir, scripted):
    (work / "m.py").write_text(MODULE)
    (work / "n.py").write_text('"""Short."""\nimport sys\n\nprint(sys.argv)\n')
    scripted(lambda prepared: prepared.source.replace('"""\n', '"""\n\n__version__ = "1.0"\n', 1))
    result = fix(
        tiny_dir, "m.py", "n.py", "-i", "Add `__version__ = '1.0'` right after the module docstring", "--write"
    )
    assert result.exit_code == 0, result.output
    assert scope_lines(result.stderr) == [
        "m.py: scope: lines 4-5 (insert after line 4, after the module docstring)",
        "n.py: scope: line 1 (insert after line 1, after the module docstring)",
    ]
    assert (work / "n.py").read_text() == '"""Short."""\n\n__version__ = "1.0"\nimport sys\n\nprint(sys.argv)\n'
    assert '"""\n\n__version__ = "1.0"\n\nimport os\n' in (work / "m.py").read_text()


def test_a_method_after_a_named_method_retypes_neither_the_class_nor_the_method(work, tiny_dir, scripted):
    (work / "bar.py").write_text(BAR)
    new = "\n    def reset(self):\n        self.done = 0\n"
    shown = "\ndef reset(self):\n    self.done = 0\n"  # the region is answered without its 4 spaces
    calls = scripted(retype(("return self.done\n", "return self.done\n" + shown)))
    result = fix(tiny_dir, "bar.py", "Add a reset() method to ProgressBar, right after update", "--write")
    assert result.exit_code == 0, result.output
    assert scope_lines(result.stderr) == [
        "bar.py: scope: lines 6-9 (insert after line 8, after method ProgressBar.update)"
    ]
    (call,) = calls
    assert call.prepared.regions == ((6, 9),) and retyped(call) <= new.count("\n") + 10
    assert (work / "bar.py").read_text() == BAR.replace("return self.done\n", "return self.done\n" + new)


def test_a_new_method_without_a_place_goes_at_the_end_of_its_class_and_says_so(work, tiny_dir, scripted):
    (work / "bar.py").write_text(BAR)
    calls = scripted(retype())
    result = fix(tiny_dir, "bar.py", "Add a reset method to ProgressBar", "--json", "--allow-no-change")
    assert result.exit_code == 0, result.output
    (line,) = scope_lines(result.stderr)
    assert line == (
        "bar.py: scope: lines 10-13 (insert after line 11, the end of class ProgressBar, after method "
        "ProgressBar.render (chosen: the instruction names no place))"
    )
    assert calls[0].prepared.regions == ((10, 13),)  # render, short, whole: a line at the new method's depth
    assert json.loads(result.stdout)["scope"][0]["insert_after"] == 11


def test_javascript_a_new_method_goes_before_the_class_closing_brace(work, tiny_dir, scripted):
    (work / "counter.js").write_text(COUNTER)
    new = "\n  reset() {\n    this.n = 0;\n  }\n"
    calls = scripted(lambda prepared: prepared.source.replace("}\n}\n", "}\n" + new + "}\n", 1))
    result = fix(tiny_dir, "counter.js", "Add a reset() method to Counter", "--write")
    assert result.exit_code == 0, result.output
    (line,) = scope_lines(result.stderr)
    assert line.startswith("counter.js: scope: lines 9-10 (insert after line 9, the end of class Counter")
    assert calls[0].prepared.regions == ((9, 10),)
    assert (work / "counter.js").read_text() == COUNTER.replace("  }\n}\n", "  }\n" + new + "}\n")


# -- the retype bound --------------------------------------------------------------------------


def test_a_whole_file_plan_past_the_bound_is_refused_before_the_model_loads(work, tiny_dir, scripted):
    (work / "m.py").write_text(MODULE)
    calls = scripted(retype())
    # A model that does not exist: the refusal comes first, since the plan is made before the load.
    result = invoke(["fix", "m.py", "Make it better.", "--model", str(work / "no-such-model")])
    assert result.exit_code == 1 and calls == []
    (line,) = error_lines(result)
    assert line == (
        "error: m.py: the plan retypes the whole file (1,006 lines, about 2,798 tokens), over the bound of "
        "150 lines or 2,000 tokens (the instruction names no line or definition of this file); nothing was edited"
    )
    assert "hint: allow it with --max-retype 1006 (or --max-retype all)" in result.stderr
    assert (work / "m.py").read_text() == MODULE
    assert "not found" not in result.stderr and "no such" not in result.stderr.lower()


SMALL_LINES = "".join(f"v{i} = {i}\n" for i in range(160))  # past 150 lines, small enough for the tiny model


@pytest.mark.parametrize("allow", [["--max-retype", "200"], ["--max-retype", "all"], ["--no-scope"]])
def test_an_allowed_whole_file_retype_past_the_bound_gets_one_try(work, tiny_dir, scripted, allow):
    (work / "v.py").write_text(SMALL_LINES)
    calls = scripted(verbatim(SMALL_LINES))  # no change: the try fails
    result = fix(tiny_dir, "v.py", "Make it better.", *allow)
    assert result.exit_code == 3, result.output
    assert len(calls) == 1 and "try 1 of 1" in result.stderr and "no try of 1 passed" in result.stderr
    if allow == ["--no-scope"]:
        assert (
            "v.py: retypes the whole file (160 lines, about 514 tokens), over the bound of 150 lines or 2,000 "
            "tokens; allowed by --no-scope; one try" in result.stderr
        )


def test_tries_given_keep_their_number_for_an_allowed_whole_file_retype(work, tiny_dir, scripted):
    (work / "v.py").write_text(SMALL_LINES)
    calls = scripted(verbatim(SMALL_LINES))
    result = fix(tiny_dir, "v.py", "Make it better.", "--max-retype", "all", "--tries", "2")
    assert result.exit_code == 3 and len(calls) == 2 and "try 2 of 2" in result.stderr, result.output


def test_the_bound_comes_from_the_environment_and_settings(work, tiny_dir, scripted, monkeypatch, tmp_path):
    (work / "v.py").write_text(SMALL_LINES)
    scripted(verbatim(SMALL_LINES))
    refused = fix(tiny_dir, "v.py", "Make it better.")
    assert refused.exit_code == 1 and "--max-retype 160" in refused.stderr, refused.output
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    (config / "cadedit").mkdir(parents=True)
    (config / "cadedit" / "config.toml").write_text("max_retype = 500\n")
    assert fix(tiny_dir, "v.py", "Make it better.").exit_code == 3  # allowed; its one try changed nothing
    monkeypatch.setenv("CADEDIT_MAX_RETYPE", "100")
    assert fix(tiny_dir, "v.py", "Make it better.").exit_code == 1  # the environment before the settings
    monkeypatch.delenv("CADEDIT_MAX_RETYPE")
    (config / "cadedit" / "config.toml").write_text('max_retype = "lots"\n')
    bad = fix(tiny_dir, "v.py", "Make it better.")
    assert bad.exit_code == 1 and error_lines(bad) == [
        f"error: {config / 'cadedit' / 'config.toml'}: `max_retype` 'lots': not a number of lines"
    ], bad.output


def test_a_max_retype_that_is_no_number_is_a_usage_error(work, tiny_dir, scripted):
    (work / "v.py").write_text(SMALL_LINES)
    calls = scripted(retype())
    result = fix(tiny_dir, "v.py", "Make it better.", "--max-retype", "0")
    assert result.exit_code == 2 and "--max-retype" in result.output and calls == []


def test_explicit_lines_past_the_bound_are_allowed_and_said(work, tiny_dir, scripted):
    (work / "v.py").write_text(SMALL_LINES)
    scripted(retype(("v0 = 0\n", "v0 = 10\n")))
    result = fix(tiny_dir, "v.py", "Change v0 to 10.", "--lines", "1-155")
    assert result.exit_code == 0, result.output
    assert "v.py: retypes lines 1-155 (155 lines, about 495 tokens), over the bound" in result.stderr
    assert "allowed by --lines/--scope" in result.stderr


def test_at_the_end_of_a_python_file_is_before_its_main_guard(work, tiny_dir, scripted):
    text = "def main():\n    return 1\n\n\n# Run it.\nif __name__ == '__main__':\n    main()\n"
    (work / "g.py").write_text(text)
    new = "\n\ndef extra():\n    return 2\n"
    calls = scripted(retype(("    return 1\n", "    return 1\n" + new)))
    result = fix(tiny_dir, "g.py", "Add a function extra() that returns 2 at the end of the file", "--write")
    assert result.exit_code == 0, result.output
    assert scope_lines(result.stderr) == [
        "g.py: scope: lines 1-4 (insert after line 2, at the end of the file, before its "
        '`if __name__ == "__main__":` block)'
    ]
    assert calls[0].prepared.regions == ((1, 4),)  # main is short: retyped whole with the blank lines
    assert (work / "g.py").read_text() == text.replace("    return 1\n", "    return 1\n" + new)
