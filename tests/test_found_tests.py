"""`cadedit fix --test auto`: the repository's own tests of the edited definition (tries/found_tests.py),
through the CLI with the tiny random model spelling scripted candidates (tests/scripting.py).

A candidate that breaks a found test (a test file named for the module, the module's doctests) is
refused under --test auto, and a later one that keeps them passes; without --test the result line names
the command that would have tested the edit; an unapproved repository never runs its tests (a marker
file its test module would write stays absent). Discovery itself: which files and tests it picks.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from cadedit.text.document import Document
from cadedit.tries.found_tests import edited_names, find_tests
from tests.conftest import approve_settings
from tests.test_tries_cli import load_once, scripted, _models  # noqa: F401 - the CLI tests' fixtures
from tests.scripting import invoke

CALC = '''def add(a, b):
    """The sum.

    >>> add(2, 3)
    5
    """
    return a + b


def mul(a, b):
    return a * b
'''
MUL_WRONG = CALC.replace("return a * b", "return a**b")  # parses, keeps every name: only a test tells
MUL_GOOD = CALC.replace("return a * b", "return b * a")
ADD_WRONG = CALC.replace("return a + b", "return a - b")
# The test module writes a marker when it runs: the proof that cadedit ran the repository's code.
TEST_CALC = """from pathlib import Path

from calc import add, mul

Path(__file__).with_name("ran").touch()


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository with calc.py, tests/test_calc.py and an (unapproved) .cadedit.toml; the venv's
    python3 first on PATH (it has pytest), as a user's own environment would."""
    folder = tmp_path / "repo"
    (folder / "tests").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "calc.py").write_text(CALC)
    (folder / "tests" / "test_calc.py").write_text(TEST_CALC)
    (folder / ".cadedit.toml").write_text("tries = 2\n")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    return folder


def fix(tiny_dir, instruction: str, *args: str):
    return invoke(
        ["fix", "calc.py", instruction, "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1"]
        + ["--candidates", "1", "--tries", "2", *args]
    )


MUL_TESTS = "python3 -m pytest -q -p no:cacheprovider tests/test_calc.py::test_mul"


def test_a_candidate_that_breaks_a_found_test_is_refused_under_test_auto(repo, tiny_dir, scripted):
    approve_settings(repo)
    scripted(MUL_WRONG, MUL_GOOD)
    result = fix(tiny_dir, "Fix the bug in mul.", "--test", "auto", "--write")
    assert result.exit_code == 0, result.output
    assert f"calc.py: --test auto: tests/test_calc.py: `{MUL_TESTS}`" in result.stderr
    tries = [line for line in result.stderr.splitlines() if ": try " in line]
    assert "try 1 of 2: failed: test (" in tries[0], result.stderr
    assert "try 2 of 2: passed: " in tries[1] and ", test" in tries[1], result.stderr
    assert (repo / "calc.py").read_text() == MUL_GOOD
    assert (repo / "tests" / "ran").exists()


def test_only_breaking_candidates_exit_3_and_nothing_is_written(repo, tiny_dir, scripted):
    approve_settings(repo)
    scripted(MUL_WRONG)
    result = fix(tiny_dir, "Fix the bug in mul.", "--test", "auto", "--write")
    assert result.exit_code == 3, result.output
    assert (repo / "calc.py").read_text() == CALC


def test_the_modules_doctests_are_found_tests_of_the_definition_they_document(repo, tiny_dir, scripted):
    """add's docstring has an example: an edit of add runs it (and the test file's test_add)."""
    approve_settings(repo)
    scripted(ADD_WRONG)
    result = fix(tiny_dir, "Fix the bug in add.", "--test", "auto")
    assert result.exit_code == 3, result.output
    assert "tests/test_calc.py::test_add && python3 -m doctest calc.py`" in result.stderr
    assert "tests/test_calc.py and the module's doctests" in result.stderr


def test_without_test_the_result_line_names_the_command_that_would_test_the_edit(repo, tiny_dir, scripted):
    approve_settings(repo)
    scripted(MUL_WRONG)
    result = fix(tiny_dir, "Fix the bug in mul.")
    assert result.exit_code == 0, result.output  # nothing ran the tests: the wrong edit passes
    said = [line for line in result.stderr.splitlines() if line.startswith("calc.py: +1 -1 lines")]
    assert len(said) == 1 and said[0].endswith(
        f"; behaviour not tested (no --test); --test auto would run `{MUL_TESTS}`"
    )
    assert not (repo / "tests" / "ran").exists()


def test_json_names_the_found_test_and_whether_it_ran(repo, tiny_dir, scripted):
    scripted(MUL_GOOD)
    unapproved = json.loads(fix(tiny_dir, "Fix the bug in mul.", "--test", "auto", "--json").stdout)
    assert unapproved["found_test"] == {"command": MUL_TESTS, "ran": False}
    approve_settings(repo)
    suggested = json.loads(fix(tiny_dir, "Fix the bug in mul.", "--json").stdout)
    assert suggested["found_test"] == {"command": MUL_TESTS, "ran": False}
    ran = json.loads(fix(tiny_dir, "Fix the bug in mul.", "--test", "auto", "--json").stdout)
    assert ran["found_test"] == {"command": MUL_TESTS, "ran": True} and ran["passed"]
    assert [c["name"] for c in ran["tries"][0]["checks"]][-1] == "test"


def test_an_unapproved_repository_never_runs_its_tests(repo, tiny_dir, scripted):
    scripted(MUL_WRONG)
    result = fix(tiny_dir, "Fix the bug in mul.", "--test", "auto")
    assert result.exit_code == 0, result.output
    assert "is not an approved repository, so cadedit runs none of its code" in result.stderr
    assert f"its tests would be `{MUL_TESTS}`" in result.stderr
    assert "behaviour not tested (--test auto: repository not approved)" in result.stderr
    assert not (repo / "tests" / "ran").exists()
    assert (repo / "calc.py").read_text() == CALC


def test_no_found_test_says_so_and_edits_untested(repo, tiny_dir, scripted):
    approve_settings(repo)
    (repo / "tests" / "test_calc.py").unlink()
    scripted(MUL_WRONG)
    result = fix(tiny_dir, "Fix the bug in mul.", "--test", "auto")
    assert result.exit_code == 0, result.output
    assert "calc.py: --test auto: no test of it found" in result.stderr
    assert "behaviour not tested (--test auto found no test)" in result.stderr


def test_test_auto_takes_one_file(repo, tiny_dir):
    (repo / "b.py").write_text("x = 1\n")
    result = invoke(["fix", "calc.py", "b.py", "-i", "Fix it.", "--test", "auto", "--model", str(tiny_dir)])
    assert result.exit_code == 2 and "takes one file" in result.output


# -- discovery ----------------------------------------------------------------------------------


def found(root: Path, module: str, regions=()):
    path = root / module
    document = Document.read(str(path))
    return find_tests(path, document.text, edited_names(document, regions), root, which=lambda name: "/usr/bin/" + name)


def test_only_the_tests_that_reach_the_edited_name_are_selected_through_helpers_and_fixtures(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "calc.py").write_text(CALC)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(
        "import pytest\nfrom pkg.calc import add, mul\n\n\n@pytest.fixture\ndef product():\n    return mul(2, 3)\n\n\n"
        "def twice(x):\n    return add(x, x)\n\n\ndef test_sum():\n    assert twice(1) == 2\n\n\n"
        "def test_product(product):\n    assert product == 6\n\n\nclass TestBoth:\n    def test_mul(self):\n"
        "        assert mul(1, 1) == 1\n\n    def test_other(self):\n        assert True\n"
    )
    (tmp_path / "pkg" / "calc_test.py").write_text("from pkg import calc\n\n\ndef test_it():\n    calc.mul(1, 2)\n")
    mul = found(tmp_path, "pkg/calc.py", [(10, 11)])
    assert mul.command == (
        "python3 -m pytest -q -p no:cacheprovider pkg/calc_test.py::test_it tests/test_calc.py::test_product "
        "tests/test_calc.py::TestBoth::test_mul"
    )
    add = found(tmp_path, "pkg/calc.py", [(1, 7)])  # add has a doctest; its module is in a package
    assert add.command.endswith(
        "tests/test_calc.py::test_sum && python3 -m pytest -q -p no:cacheprovider --doctest-modules pkg/calc.py"
    )
    whole = found(tmp_path, "pkg/calc.py")
    assert whole.files == ("pkg/calc_test.py", "tests/test_calc.py") and whole.doctests
    assert "pkg/calc_test.py tests/test_calc.py &&" in whole.command  # whole files


def test_a_test_file_that_never_mentions_the_module_or_the_name_is_not_a_test_of_it(tmp_path):
    (tmp_path / "calc.py").write_text(CALC.replace(">>>", "--"))
    (tmp_path / "test_calc.py").write_text("def test_x():\n    assert 1\n")  # named for it, tests something else
    assert found(tmp_path, "calc.py", [(10, 11)]) is None
    (tmp_path / "test_calc.py").write_text("from calc import add\n\n\ndef test_x():\n    assert add(1, 1)\n")
    assert found(tmp_path, "calc.py", [(10, 11)]) is None  # mul is not reached
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    assert found(tmp_path, "calc.py", [(1, 7)]).command.startswith(".venv/bin/python -m pytest")  # its own venv


def test_a_javascript_module_is_tested_by_the_test_js_beside_it(tmp_path):
    (tmp_path / "sum.js").write_text("function sum(a, b) {\n  return a + b;\n}\nmodule.exports = { sum };\n")
    (tmp_path / "sum.test.js").write_text(
        "const { sum } = require('./sum');\nrequire('node:test')('s', () => sum(1, 2));\n"
    )
    assert found(tmp_path, "sum.js").command == "node --test sum.test.js"


SUM_JS = "function sum(a, b) {\n  return a + b;\n}\n\nmodule.exports = { sum };\n"
SUM_TEST_JS = (
    "const test = require('node:test');\nconst assert = require('node:assert');\nconst { sum } = require('./sum');\n"
    "require('node:fs').writeFileSync('ran', '');\n\ntest('sum', () => assert.strictEqual(sum(1, 2), 3));\n"
)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_a_javascript_candidate_that_breaks_its_test_js_is_refused(repo, tiny_dir, scripted):
    approve_settings(repo)
    (repo / "sum.js").write_text(SUM_JS)
    (repo / "sum.test.js").write_text(SUM_TEST_JS)
    scripted(SUM_JS.replace("a + b", "a - b"), SUM_JS.replace("a + b", "b + a"))
    result = invoke(
        ["fix", "sum.js", "Fix the bug in sum.", "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1"]
        + ["--candidates", "1", "--tries", "2", "--test", "auto", "--write"]
    )
    assert result.exit_code == 0, result.output
    assert "sum.js: --test auto: sum.test.js: `node --test sum.test.js`" in result.stderr
    assert "try 1 of 2: failed: test (" in result.stderr and (repo / "ran").exists()
    assert (repo / "sum.js").read_text() == SUM_JS.replace("a + b", "b + a")


def test_an_empty_settings_file_approved_with_cadedit_trust_lets_test_auto_run(repo, tiny_dir, scripted):
    """A repository with no settings of its own: an empty .cadedit.toml and `cadedit trust` (docs/trust.md)."""
    (repo / ".cadedit.toml").write_text("")
    assert invoke(["trust"]).exit_code == 0
    scripted(MUL_WRONG, MUL_GOOD)
    result = fix(tiny_dir, "Fix the bug in mul.", "--test", "auto")
    assert result.exit_code == 0, result.output
    assert "try 1 of 2: failed: test (" in result.stderr and (repo / "tests" / "ran").exists()


def test_a_test_file_of_another_module_of_the_same_name_is_not_a_test_of_this_one(tmp_path):
    for package in ("pkg_a", "pkg_b"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "calc.py").write_text(CALC.replace(">>>", "--"))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text("from pkg_b.calc import mul\n\n\ndef test_mul():\n    mul(1, 2)\n")
    assert found(tmp_path, "pkg_a/calc.py", [(10, 11)]) is None
    assert found(tmp_path, "pkg_b/calc.py", [(10, 11)]).files == ("tests/test_calc.py",)
    (tmp_path / "tests" / "test_calc.py").write_text(
        "from pkg_a import calc\n\n\ndef test_mul():\n    calc.mul(1, 2)\n"
    )
    assert found(tmp_path, "pkg_a/calc.py", [(10, 11)]).files == ("tests/test_calc.py",)
    assert found(tmp_path, "pkg_b/calc.py", [(10, 11)]) is None
