"""`cadedit fix` makes renames and named deletions of Python without a model: through the real console
script with a --model that does not exist (a model load would fail the command), each kind of edit,
the diff `patch -p1` applies, --write, --check, --json, --test, stdin and several files; and where it
cannot be exact (a string names it, eval, not found, still used) the model makes the edit and stderr
says why; --no-mechanical leaves every edit to the model."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cadedit.text.document import Document
from tests.scripting import editing, every_try, inject_picks, invoke

NO_MODEL = "/no/such/model"  # loading it fails the command: a passing edit loaded no model

SOURCE = '''"""Durations: see to_seconds and Clock.tick."""

__all__ = ["to_seconds", "Clock", "unused_thing"]

import time

# Seconds in a minute: to_seconds uses it.
MINUTE = 60


def to_seconds(minutes, extra=0):
    """Return minutes as seconds, plus extra seconds."""
    total = minutes * MINUTE  # to_seconds: the whole minutes
    return total + extra


def _double(value):
    return value * 2


def unused_thing():
    return _double(3)


class Clock:
    """A clock; call tick() to advance it."""

    def __init__(self):
        self.now = 0

    def tick(self, step=1):
        """Advance by step; tick() returns the new time."""
        self.now += step
        return self.now

    def reset(self):
        self.now = 0


def run():
    clock = Clock()
    clock.tick(step=to_seconds(2, extra=1))
    Clock().tick()
    return time.time()
'''


def cadedit(*args: str, cwd: Path, input: bytes | None = None) -> subprocess.CompletedProcess:
    from tests.conftest import console_script

    return subprocess.run(
        [console_script(), "fix", *args, "--model", NO_MODEL], cwd=cwd, input=input, capture_output=True, timeout=60
    )


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "durations.py").write_text(SOURCE)
    return tmp_path


def written(work: Path, instruction: str, *args: str) -> str:
    done = cadedit("durations.py", instruction, "--write", *args, cwd=work)
    assert done.returncode == 0, done.stderr.decode()
    assert "without a model" in done.stderr.decode()
    return (work / "durations.py").read_text()


def test_a_function_rename_reaches_its_uses_all_docstrings_and_comments_without_a_model(work):
    after = written(work, "Rename the function to_seconds to as_seconds")
    assert after == SOURCE.replace("to_seconds", "as_seconds")


def test_a_method_rename_reaches_self_instances_and_the_class_but_not_prose_words(work):
    after = written(work, "rename the method Clock.tick to advance")
    expected = (
        SOURCE.replace("def tick(", "def advance(")
        .replace("call tick()", "call advance()")
        .replace("; tick() returns", "; advance() returns")
        .replace("clock.tick(", "clock.advance(")
        .replace("Clock().tick()", "Clock().advance()")
        .replace("see to_seconds and Clock.tick", "see to_seconds and Clock.advance")
    )
    assert after == expected


def test_a_parameter_rename_changes_its_keyword_arguments_at_call_sites(work):
    after = written(work, "rename the parameter extra to bonus in to_seconds")
    expected = (
        SOURCE.replace("minutes, extra=0", "minutes, bonus=0")
        .replace("total + extra", "total + bonus")
        .replace("extra=1", "bonus=1")
    )
    assert after == expected  # the docstring's "extra seconds" is prose: a plain word is renamed only as code


def test_a_local_rename_stays_inside_its_function(work):
    after = written(work, "rename local total in to_seconds to whole")
    assert after == SOURCE.replace("total = minutes", "whole = minutes").replace("total + extra", "whole + extra")


def test_a_deletion_removes_the_definition_and_its_all_entry_and_helpers_only_if_asked(work):
    after = written(work, "Delete the function unused_thing; nothing uses it any more")
    assert after == SOURCE.replace(', "unused_thing"]', "]").replace(
        "def unused_thing():\n    return _double(3)\n\n\n", ""
    )
    (work / "durations.py").write_text(SOURCE)
    after = written(work, "Delete unused_thing and its now-unused private helpers")
    assert "_double" not in after and "unused_thing" not in after and "def to_seconds" in after


def test_a_method_rename_reaches_the_class_body_names_that_read_it(work):
    source = SOURCE.replace(
        "        self.now = 0\n\n\ndef run", "        self.now = 0\n\n    actions = {'zero': reset}\n\n\ndef run"
    )
    assert "actions = {'zero': reset}" in source
    (work / "durations.py").write_text(source)
    after = written(work, "rename the method Clock.reset to clear")
    assert after == source.replace("def reset(", "def clear(").replace("{'zero': reset}", "{'zero': clear}")


def test_drop_a_method_from_a_class(work):
    after = written(work, "drop method reset from Clock")
    assert after == SOURCE.replace("\n    def reset(self):\n        self.now = 0\n", "")


def test_the_diff_applies_with_patch_and_equals_write(work, tmp_path_factory):
    if not shutil.which("patch"):
        pytest.skip("needs patch")
    shown = cadedit("durations.py", "Rename Clock to Timer", cwd=work)
    assert shown.returncode == 0, shown.stderr.decode()
    assert (work / "durations.py").read_text() == SOURCE  # no --write: the file is untouched
    subprocess.run(["patch", "-p1", "-s"], cwd=work, input=shown.stdout, check=True)
    patched = (work / "durations.py").read_text()
    other = tmp_path_factory.mktemp("other")
    (other / "durations.py").write_text(SOURCE)
    assert written(other, "Rename Clock to Timer") == patched
    assert "class Timer:" in patched and "Timer().tick()" in patched and '"Timer"' in patched


def test_check_exits_1_on_a_change_and_writes_nothing(work):
    done = cadedit("durations.py", "Rename to_seconds to as_seconds", "--check", cwd=work)
    assert done.returncode == 1 and (work / "durations.py").read_text() == SOURCE


def test_json_says_no_model_ran(work):
    done = cadedit("durations.py", "Delete the function unused_thing", "--json", "-q", cwd=work)
    assert done.returncode == 0, done.stderr.decode()
    data = json.loads(done.stdout)
    assert data["model"] is None and data["mechanical"] == "delete" and data["mode"] is None
    assert data["passed"] is True and data["tries"][0]["checks"] and "-def unused_thing" in data["diff"]


def test_a_failing_test_exits_3_and_writes_nothing(work):
    done = cadedit("durations.py", "Rename to_seconds to as_seconds", "--test", "false", "--write", cwd=work)
    assert done.returncode == 3 and (work / "durations.py").read_text() == SOURCE
    passed = cadedit(
        "durations.py", "Rename to_seconds to as_seconds", "--test", "grep -q as_seconds durations.py", cwd=work
    )
    assert passed.returncode == 0 and b"+def as_seconds" in passed.stdout


def test_stdin_prints_the_renamed_text(work):
    done = cadedit(
        "-", "Rename to_seconds to as_seconds", "--stdin-filename", "d.py", "-q", cwd=work, input=SOURCE.encode()
    )
    assert done.returncode == 0 and done.stdout.decode() == SOURCE.replace("to_seconds", "as_seconds")


def test_several_files_make_one_patch_without_a_model(work):
    (work / "other.py").write_text("def to_seconds(m):\n    return m * 60\n\n\nprint(to_seconds(1))\n")
    done = cadedit("durations.py", "other.py", "-i", "Rename to_seconds to as_seconds", "--write", cwd=work)
    assert done.returncode == 0, done.stderr.decode()
    assert (
        "as_seconds(1)" in (work / "other.py").read_text() and "def as_seconds" in (work / "durations.py").read_text()
    )


def test_crlf_lines_are_kept(work):
    (work / "durations.py").write_bytes(SOURCE.replace("\n", "\r\n").encode())
    done = cadedit("durations.py", "Rename to_seconds to as_seconds", "--write", cwd=work)
    assert done.returncode == 0, done.stderr.decode()
    assert (work / "durations.py").read_bytes() == SOURCE.replace("to_seconds", "as_seconds").replace(
        "\n", "\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("source", "instruction", "why"),
    [
        (SOURCE + '\nHANDLER = getattr(Clock, "reset")\n', "Rename Clock.reset to clear", "a string names reset"),
        (SOURCE + "\nprint(eval('to_seconds(1)'))\n", "Rename to_seconds to as_seconds", "calls eval()"),
        (SOURCE, "Rename to_minutes to as_minutes", "no definition named to_minutes"),
        (SOURCE, "Delete the function to_seconds", "to_seconds is still used at line"),
        (SOURCE, "Rename to_seconds to run", "run is already a name"),
        (SOURCE, "Rename the method Clock.__init__ to setup", "special method"),
        (
            SOURCE + "\ntry:\n    from _durations import *\nexcept ImportError:\n    pass\n",
            "Rename run to main",
            "import *` at line",
        ),
    ],
)
def test_what_cannot_be_exact_goes_to_the_model_with_the_reason(work, source, instruction, why):
    (work / "durations.py").write_text(source)
    done = cadedit("durations.py", instruction, "--write", cwd=work)
    stderr = done.stderr.decode()
    assert "not done without a model" in stderr and why in stderr, stderr
    assert "neither a model folder" in stderr and done.returncode == 1  # the model was asked for: it is not there
    assert (work / "durations.py").read_text() == source


def test_no_mechanical_leaves_a_rename_to_the_model(work):
    done = cadedit("durations.py", "Rename to_seconds to as_seconds", "--no-mechanical", cwd=work)
    assert done.returncode == 1 and "neither a model folder" in done.stderr.decode()
    assert "without a model" not in done.stderr.decode()


def test_an_instruction_that_asks_for_more_goes_to_the_model_silently(work):
    done = cadedit("durations.py", "Rename to_seconds to as_seconds and add a docstring to run", cwd=work)
    assert done.returncode == 1 and "neither a model folder" in done.stderr.decode()
    assert "without a model" not in done.stderr.decode()


def test_a_fallback_is_edited_by_the_model(work, tiny_dir, monkeypatch):
    source = SOURCE + '\nHANDLER = getattr(Clock, "reset")\n'
    (work / "durations.py").write_text(source)
    answer = source.replace("def reset(", "def clear(").replace('"reset"', '"clear"')
    inject_picks(monkeypatch, every_try(editing(lambda document: Document.from_text(answer, document.path))))
    monkeypatch.chdir(work)
    done = invoke(
        ["fix", "durations.py", "Rename Clock.reset to clear", "--model", str(tiny_dir), "--write", "--no-scope"]
    )
    assert done.exit_code == 0, done.output
    assert "a string names reset" in done.stderr and (work / "durations.py").read_text() == answer


def test_a_rename_needs_no_retype_so_the_retype_bound_does_not_stop_it(work):
    after = written(work, "rename the method Clock.tick to advance", "--max-retype", "2")
    assert "def advance(" in after and "clock.advance(" in after
    (work / "durations.py").write_text(SOURCE)
    refused = cadedit(
        "durations.py", "rename the method Clock.tick to advance", "--max-retype", "2", "--no-mechanical", cwd=work
    )
    assert refused.returncode == 1, refused.stderr.decode()
    assert "over the bound of 2 lines" in refused.stderr.decode() and "not found" not in refused.stderr.decode()
    assert (work / "durations.py").read_text() == SOURCE
