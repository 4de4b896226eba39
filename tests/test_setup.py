"""setup.sh records the model it fetched in the user's own config, so the README's `cadedit fix` works
right after it; a model the user set there already is left alone."""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def remember(model: str, config_home: Path) -> subprocess.CompletedProcess:
    """setup.sh's own remember_model function, run as setup.sh runs it."""
    script = f'eval "$(sed -n "/^remember_model() {{/,/^}}/p" {ROOT / "setup.sh"})"; remember_model "$1"'
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
