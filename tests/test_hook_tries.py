"""The hook checks every candidate as `cadedit fix` does: a rule's `test` runs with the candidate in
the working tree (restored afterwards), a failed try is tried again, and `mode` / `tries` in
.cadedit.toml choose the decoding mode and the number of tries."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from cadedit.options import Mode
from tests.test_hook_cli import git, hook, make_repo, no_outer_git, staged  # noqa: F401 - fixtures
from tests.conftest import approve_settings
from tests.test_pipes import script_model

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def candidates(*replacements: bytes):
    """An edit for script_model that answers try k with old -> replacements[k] (the last one repeats)."""
    calls = []

    def edit(data: bytes) -> bytes:
        calls.append(data)
        return data.replace(b"old", replacements[min(len(calls), len(replacements)) - 1])

    return edit, calls


def stage(root, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).write_bytes(data)
    git(root, "add", *files)


def settings(root, *lines: str) -> None:
    text = (root / ".cadedit.toml").read_text()
    head, rule = text.split("[[rules]]", 1)
    top = "".join(line + "\n" for line in lines if not line.startswith("test"))
    tests = "".join(line + "\n" for line in lines if line.startswith("test"))
    (root / ".cadedit.toml").write_text(head + top + "[[rules]]" + rule + tests)
    approve_settings(root)


def test_a_rule_test_fails_the_first_candidate_and_passes_the_second(tmp_path, monkeypatch, tiny_dir):
    edit, calls = candidates(b"wrong", b"NEW")
    modes = script_model(monkeypatch, edit)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, "candidates = 1", 'test = "grep -q NEW a.py"')
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output  # check mode: the file would change
    assert "+x = 'NEW'" in result.stdout and "wrong" not in result.stdout
    assert len(calls) == 2 and modes == [Mode.VERIFY, Mode.VERIFY]  # verify is the hook's default mode too
    assert (root / "a.py").read_bytes() == b"x = 'old'\n" and staged(root, "a.py") == b"x = 'old'\n"


def test_a_rule_with_a_test_makes_try_one_four_candidates_unless_the_settings_say_otherwise(
    tmp_path, monkeypatch, tiny_dir
):
    edit, calls = candidates(b"NEW")
    script_model(monkeypatch, edit)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, 'test = "grep -q NEW a.py"')
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1 and "+x = 'NEW'" in result.stdout, result.output
    assert len(calls) == 4  # one batched try 1 of four candidates (scripted alike: one is checked)
    calls.clear()
    settings(root, "candidates = 2")
    assert hook("run").exit_code == 1 and len(calls) == 2


def test_no_passing_try_fails_the_file_and_leaves_it_alone(tmp_path, monkeypatch, tiny_dir):
    edit, calls = candidates(b"wrong")
    script_model(monkeypatch, edit)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n", "b.py": b"y = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n", "b.py": b"y = 'old'\n"})
    settings(root, "tries = 2", "candidates = 1", 'test = "grep -q NEW a.py b.py"')
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1, result.output
    assert "a.py: failed: no try of 2 passed its checks" in result.stderr
    assert len(calls) == 4  # two tries for each file: a failing file does not stop the others
    assert (root / "a.py").read_bytes() == b"x = 'old'\n" and (root / "b.py").read_bytes() == b"y = 'old'\n"


def test_mode_comes_from_the_settings(tmp_path, monkeypatch, tiny_dir):
    edit, _ = candidates(b"new")
    modes = script_model(monkeypatch, edit)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, 'mode = "rewrite"')
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1, result.output  # fixed: review and re-stage
    assert modes == [Mode.REWRITE]
    assert (root / "a.py").read_bytes() == b"x = 'new'\n"


def test_a_test_sees_the_candidate_and_unstaged_work_survives(tmp_path, monkeypatch, tiny_dir):
    edit, _ = candidates(b"NEW")
    script_model(monkeypatch, edit)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, 'test = "grep -q NEW a.py && cp a.py seen.txt"')
    (root / "a.py").write_bytes(b"x = 'old'\n# unstaged\n")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    assert (root / "seen.txt").read_bytes() == b"x = 'NEW'\n"  # the staged content, edited
    assert (root / "a.py").read_bytes() == b"x = 'old'\n# unstaged\n"


def test_candidates_come_from_the_settings_and_the_first_that_passes_wins(tmp_path, monkeypatch, tiny_dir):
    from cadedit.text.document import Document
    from tests.scripting import editing, inject_branches, inject_picks

    seen = []  # each row's prepared request

    def row(answer: bytes):
        def after(document: Document) -> Document:
            return Document.from_bytes(document.to_bytes().replace(b"old", answer))

        return editing(after, seen.append)

    rows = [row(b"wrong"), row(b"NEW"), row(b"other")]
    inject_picks(monkeypatch, lambda k: rows if k == 1 else None)  # try 1's candidates (the rule's tries = 1)
    inject_branches(monkeypatch, b"w", b"N")  # candidate 1 fails; its branches spell 'N' for its 'w', then their rows
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, "candidates = 3", "tries = 1", 'test = "grep -q NEW a.py"')
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output  # check mode: the file would change
    assert len(seen) == 3 and seen[0] is seen[1] is seen[2]  # one prompt for the three candidates
    assert "+x = 'NEW'" in result.stdout
    assert (root / "a.py").read_bytes() == b"x = 'old'\n"


def test_candidates_out_of_range_in_the_settings_is_a_one_line_error(tmp_path, monkeypatch, tiny_dir):
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n"})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, "candidates = 9")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1 and "`candidates` must be a whole number from 1 to 8" in result.stderr


def test_a_rule_test_auto_runs_the_files_own_tests_on_each_candidate(tmp_path, monkeypatch, tiny_dir):
    """`test = "auto"` in an approved rule: the test file named for the staged module (test_a.py) runs
    with each candidate in place; the candidate it fails is refused. Its marker shows it ran."""
    edit, calls = candidates(b"wrong", b"NEW")
    script_model(monkeypatch, edit)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])  # its pytest
    test_a = b"from pathlib import Path\n\nfrom a import x\n\nPath('ran').touch()\n\n\ndef test_x():\n    assert x == 'NEW'\n"
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"x = 1\n", "test_a.py": test_a})
    stage(root, {"a.py": b"x = 'old'\n"})
    settings(root, "candidates = 1", 'test = "auto"')
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output  # check mode: the file would change
    assert "a.py: test auto: python3 -m pytest -q -p no:cacheprovider test_a.py" in result.stderr
    assert "+x = 'NEW'" in result.stdout and "wrong" not in result.stdout
    assert len(calls) == 2 and (root / "ran").exists()
    assert (root / "a.py").read_bytes() == b"x = 'old'\n"
