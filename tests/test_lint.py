"""The project lints clean and is formatted: `ruff check` with the rules in pyproject.toml
([tool.ruff]) and `ruff format --check` over every Python file of the repository, as CI runs them,
so a lint error or an unformatted file fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ruff_check_passes_on_the_project():
    done = ruff("check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_check_reads_the_projects_rules_and_fails_on_an_unused_import(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n")
    done = ruff("check", "--no-cache", ".", cwd=tmp_path)
    assert done.returncode == 1 and "F401" in done.stdout, done.stdout + done.stderr


def test_ruff_format_finds_every_file_formatted():
    done = ruff("format", "--check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_check_fails_on_an_unformatted_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "ugly.py").write_text("x = [1,2 ,3]\n")
    done = ruff("format", "--check", "--no-cache", ".", cwd=tmp_path)
    assert done.returncode == 1 and "ugly.py" in done.stdout, done.stdout + done.stderr
