"""setup.sh records the model it fetched in the user's own config, so the README's `cadedit fix` works
right after it; a model the user set there already is left alone, and so is a config folder that is
not the user's own. setup.sh and the install scripts refuse a cache another user controls
(tools/own.sh): tools/install-llama.sh never runs or installs a kept llama-server from one, nor lets
pip install from one; tools/get-model.sh never uses a models folder another user could write."""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def remember(model: str, config_home: Path) -> subprocess.CompletedProcess:
    """setup.sh's own remember_model function, run as setup.sh runs it."""
    script = (
        f'. {ROOT / "tools" / "own.sh"}; eval "$(sed -n "/^remember_model() {{/,/^}}/p" {ROOT / "setup.sh"})"; '
        'remember_model "$1"'
    )
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script, "setup", model],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CONFIG_HOME": str(config_home)},
        timeout=30,
    )


def test_setup_records_the_fetched_model(tmp_path):
    done = remember("/models/qwen 1.5b.gguf", tmp_path)
    config = tmp_path / "cadedit" / "config.toml"
    assert done.returncode == 0, done.stderr
    assert tomllib.loads(config.read_text())["model"] == "/models/qwen 1.5b.gguf"
    assert "recorded model" in done.stderr and str(config) in done.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(config.parent.stat().st_mode) == 0o700


def test_setup_keeps_a_model_the_user_set(tmp_path):
    config = tmp_path / "cadedit" / "config.toml"
    config.parent.mkdir()
    config.write_text('model = "mine.gguf"\n')
    done = remember("/models/fetched.gguf", tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_text() == 'model = "mine.gguf"\n'
    assert "already names a model" in done.stderr


def test_setup_puts_the_model_above_the_users_tables(tmp_path):
    config = tmp_path / "cadedit" / "config.toml"
    config.parent.mkdir()
    config.write_text('engine_timeout = 60\n[[rules]]\nfiles = "*.py"\ninstruction = "x"\n')
    assert remember("/m.gguf", tmp_path).returncode == 0
    table = tomllib.loads(config.read_text())
    assert table["model"] == "/m.gguf" and table["engine_timeout"] == 60 and "model" not in table["rules"][0]


# -- the install scripts refuse what another user controls (tools/own.sh) -----------------------------

STUB_PYTHON = """#!/bin/sh
# python as tools/install-llama.sh calls it: pip's cache folder, a pip that installs nothing, the import
case "$*" in
  *"pip cache dir"*) echo "$STUB_PIP_CACHE" ;;
  *"pip install"*) echo pip >> "$STUB_RAN" ;;
  *"import llama_cpp"*) echo "llama-cpp-python 0.3.36 installed" ;;
esac
"""
PLANTED = '#!/bin/sh\necho planted >> "$STUB_RAN"\necho "version: 1 (commit llama-cpp-python-0.3.36)"\n'


def install_llama(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A venv whose python is a stub, a pip cache, and the cache folder of a kept llama-server that
    answers with the right stamp (and notes that it ran): as a user's cache holds it."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(STUB_PYTHON)
    (venv / "python").chmod(0o755)
    cpu = subprocess.run(
        ["bash", "-c", "(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m) | cksum | cut -d' ' -f1"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    kept = tmp_path / "cache" / "cadedit" / f"llama-server-0.3.36-{cpu}"
    kept.mkdir(parents=True)
    (kept / "llama-server").write_text(PLANTED)
    (kept / "llama-server").chmod(0o755)
    (tmp_path / "pip").mkdir()
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "STUB_PIP_CACHE": str(tmp_path / "pip"),
        "STUB_RAN": str(tmp_path / "ran"),
    }
    return venv, kept, env


def run_install(venv: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "install-llama.sh"), str(venv / "python")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_install_llama_installs_a_kept_llama_server_of_the_users_own(tmp_path):
    venv, kept, env = install_llama(tmp_path)
    done = run_install(venv, env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").read_text().split() == ["pip", "planted", "planted"]  # cache, then venv copy
    assert (venv / "llama-server").read_text() == PLANTED


@pytest.mark.parametrize(
    "where, how",
    [
        ("cadedit", "o+w"),
        ("cadedit", "g+w"),
        ("kept", "o+w"),
        ("kept", "owner"),
        ("binary", "owner"),
        ("binary", "link"),
    ],
)
def test_install_llama_refuses_a_kept_llama_server_another_user_controls(tmp_path, where, how):
    """Another user's folder (as a shared XDG_CACHE_HOME gives) or one others may write: nothing in it
    runs, nothing from it reaches the venv, and the error names it."""
    venv, kept, env = install_llama(tmp_path)
    path = {"cadedit": kept.parent, "kept": kept, "binary": kept / "llama-server"}[where]
    if how == "owner":
        if os.getuid() != 0:
            pytest.skip("making a file another user's needs root")
        os.chown(path, 12345, 12345)
    elif how == "link":
        (kept / "theirs").write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(kept / "theirs")
    else:
        path.chmod(path.stat().st_mode | (0o002 if how == "o+w" else 0o020))
    done = run_install(venv, env)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "ran").read_text().split() == ["pip"]  # the planted program never ran
    assert not (venv / "llama-server").exists()
    error = done.stderr.splitlines()[-2]
    assert error.startswith(f"error: {path}: ") and error.endswith(
        ": not your own, so tools/install-llama.sh neither runs nor installs a llama-server from it"
    )
    assert "symbolic link" in error if how == "link" else "owner uid" in error


def test_install_llama_refuses_a_pip_cache_others_may_write_before_pip_runs(tmp_path):
    venv, _, env = install_llama(tmp_path)
    (tmp_path / "pip" / "wheels").mkdir()
    (tmp_path / "pip" / "wheels").chmod(0o777)
    done = run_install(venv, env)
    assert done.returncode == 1 and not (tmp_path / "ran").exists(), done.stderr
    assert f"error: {tmp_path / 'pip' / 'wheels'}: owner uid {os.getuid()}, mode 0777: not your own" in done.stderr
    assert "PIP_NO_CACHE_DIR=1" in done.stderr


def test_get_model_refuses_a_models_folder_others_may_write(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "qwen2.5-coder-0.5b-instruct").mkdir()
    (models / "qwen2.5-coder-0.5b-instruct").chmod(0o777)
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "get-model.sh"), "--hf"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "CADEDIT_DEV_MODELS": str(models)},
    )  # fmt: skip
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.startswith(f"error: {models / 'qwen2.5-coder-0.5b-instruct'}: owner uid")
    assert "CADEDIT_DEV_MODELS" in done.stderr


@pytest.mark.parametrize("what", ["folder", "config"])
def test_setup_records_no_model_in_a_config_another_user_may_write(tmp_path, what):
    folder = tmp_path / "cadedit"
    folder.mkdir(mode=0o700)
    config = folder / "config.toml"
    config.write_text("engine_timeout = 60\n")
    (folder if what == "folder" else config).chmod(0o777 if what == "folder" else 0o666)
    done = remember("/models/fetched.gguf", tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_text() == "engine_timeout = 60\n"
    assert "is not your own (owner uid" in done.stderr and "the model is not recorded there" in done.stderr
