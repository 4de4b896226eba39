"""What cadedit starts with Python never imports from the user's working folder: a repository with its
own `cadedit/` package, `json.py` or `dataclasses.py` (modules the `--test` guard imports) has none
of them run by `cadedit fix --test true`, nor by the installed hook's approved rule `test = "true"`,
neither of which runs any code of the repository. Through the real `cadedit` and `git commit`, with
the fake engine of tests/test_engine.py answering."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_engine import Script, cli, engine  # noqa: F401

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
BEFORE = "def f(x):\n    return x + 1\n"
AFTER = "def f(x):\n    return x + 2"


def plant(root: Path, marker: Path) -> None:
    """Modules named as cadedit's and the standard library's, each writing `marker` when imported."""
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (root / "cadedit").mkdir()
    (root / "cadedit" / "__init__.py").write_text(code)
    for name in ("json", "dataclasses", "subprocess"):
        (root / f"{name}.py").write_text(code)


def git(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_a_test_run_imports_nothing_from_the_working_folder(engine, tmp_path):  # noqa: F811
    marker = tmp_path / "imported"
    root = tmp_path / "w"
    root.mkdir()
    (root / "a.py").write_text(BEFORE)
    plant(root, marker)
    url = engine(Script([(AFTER, "stop")]))
    done = cli("fix", "a.py", "Fix it.", "--engine", url, "--tries", "1", "--test", "touch tested", cwd=root)
    assert done.returncode == 0, done.stderr
    assert (root / "tested").exists() and "+    return x + 2" in done.stdout  # the guarded test did run
    assert not marker.exists(), marker.read_text()
    assert (root / "a.py").read_text() == BEFORE


def test_the_installed_hook_and_its_rules_test_import_nothing_from_the_repository(engine, tmp_path):  # noqa: F811
    marker = tmp_path / "imported"
    root = tmp_path / "w"
    root.mkdir()
    assert git(root, "init", "-q").returncode == 0
    (root / "a.py").write_text(BEFORE)
    plant(root, marker)
    (root / ".cadedit.toml").write_text('[[rules]]\nfiles = "a.py"\ninstruction = "Fix it."\ntest = "touch tested"\n')
    assert git(root, "add", "-A").returncode == 0
    assert cli("trust", cwd=root).returncode == 0 and cli("hook", "install", cwd=root).returncode == 0
    url = engine(Script([(AFTER, "stop")]))
    committed = git(root, "commit", "-q", "-m", "init", env={"CADEDIT_ENGINE": url})
    assert committed.returncode == 1, committed.stderr  # the rule would change a.py: the diff is shown
    assert "+    return x + 2" in committed.stdout + committed.stderr
    assert (root / "tested").exists()  # the rule's test ran, guarded
    assert not marker.exists(), marker.read_text()
    assert (root / "a.py").read_text() == BEFORE
