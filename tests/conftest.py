"""Shared fixtures. Every test runs with HOME, the XDG dirs and the model caches inside tmp_path,
offline, and without CADEDIT_* settings from the developer's shell (as simonw/llm's tests do), so
no test reads or writes a real user's configuration or cache, and with the fixed verify draft schedule."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cadedit.settings import approve


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    for name in [k for k in os.environ if k.startswith("CADEDIT_")]:
        monkeypatch.delenv(name)
    # The fixed draft schedule: lengths fitted to a forward cost measured under the suite's own load
    # would differ from run to run (tests/test_draft_lengths.py unsets it to test the fitted ones).
    monkeypatch.setenv("CADEDIT_DRAFT_LENGTHS", "fixed")
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_RUNTIME_DIR", "run"),
    ):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("HF_HOME", str(home / ".cache" / "huggingface"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # git in tests: no system or user config, a fixed identity.
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(var, "cadedit tests")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "tests@cadedit.invalid")
    return home


def approve_settings(folder: Path) -> None:
    """Approve the repository settings that apply in `folder`, as `cadedit trust` does (tests/test_trust.py
    tests the command and what an unapproved repository's settings do)."""
    approve(folder)


def as_foreground() -> None:
    """preexec_fn for a cadedit the tests signal: SIGINT and SIGQUIT at their defaults, as a shell
    starts a foreground command (a suite started in the background inherits them ignored, and a
    process started so rightly ignores Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def console_script(name: str = "cadedit") -> str:
    """The installed console script next to the running interpreter (the venv's bin/)."""
    path = Path(sys.executable).with_name(name)
    return str(path) if path.exists() else (shutil.which(name) or pytest.skip(f"{name} console script not installed"))


@pytest.fixture
def run_cli():
    """Run the real `cadedit` console script in a subprocess: run_cli(*args, cwd=..., input=bytes)."""

    def run(*args: str, cwd: Path, input: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([console_script(), *args], cwd=cwd, input=input, capture_output=True, timeout=60)

    return run


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The tiny random-weight Qwen2 model folder (tests/tinymodel.py), saved once per test session and
    shared by every test module; tests that change a model folder copy it first."""
    from tests.tinymodel import save_model

    return save_model(tmp_path_factory.getbasetemp() / "cadedit-tiny-model")
