"""Which model to use: --model, then $CADEDIT_MODEL, then the project's settings, then the default.

Contract: choose_model(cli_value, cwd) returns a model spec (hub id, folder or .gguf path) and never
imports torch or transformers, so commands that only need a tokenizer (`cadedit bench ceiling`)
follow the same choice cheaply. Settings are `model` (and `backend`, `engine`, `engine_timeout`) in the nearest .cadedit.toml
(top level or [tool.cadedit]) or pyproject.toml [tool.cadedit], looked for from the working folder
up to the repository root or the home folder, in files the user owns that no one else may write;
a malformed file is a ConfigError.
"""

from __future__ import annotations

import os
from pathlib import Path

from cadedit.errors import ConfigError

DEFAULT_MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"


def read_toml(path: Path) -> dict:
    """A settings file as a dict; a ConfigError naming the file when it cannot be read or parsed."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a BOM (Windows editors) is no TOML error
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read settings ({exc})") from None


def cadedit_table(data: dict, path: Path, required: bool = True) -> dict:
    """data["tool"]["cadedit"] ({} when absent and not required); a ConfigError when either is not a table."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table ([tool.cadedit]), not {type(tool).__name__}")
    table = tool.get("cadedit", {} if not required else None)
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: `tool.cadedit` must be a table ([tool.cadedit]), not {type(table).__name__}")
    return table


def configured_model(cwd: Path | None = None) -> str | None:
    """`model` from the nearest .cadedit.toml (top level or [tool.cadedit]) or pyproject.toml [tool.cadedit]."""
    return configured("model", cwd)


def settings_folders(cwd: Path | None = None) -> list[Path]:
    """Where settings files are looked for: the folder and its parents up to the repository root (the
    first folder with .git) or the home folder, whichever comes first; never above either."""
    here = (cwd or Path.cwd()).resolve()
    home = Path.home().resolve()
    folders = []
    for folder in (here, *here.parents):
        folders.append(folder)
        if folder == home or (folder / ".git").exists():
            break
    return folders


def trusted(path: Path) -> bool:
    """Whether a settings file may choose for this user: owned by them (or root) and writable by no one
    else, as git's safe.directory rule. A file another user controls could pick the model and the
    commands run on the user's code."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid in (os.getuid(), 0) and not st.st_mode & 0o022


def configured(key: str, cwd: Path | None = None, kind: type = str):
    """A setting (a string, or a number with kind=float) from the nearest trusted settings file that has
    it (see the module docstring)."""
    for folder in settings_folders(cwd):
        for name in (".cadedit.toml", "pyproject.toml"):
            path = folder / name
            if not path.is_file() or not trusted(path):
                continue
            data = read_toml(path)
            section = cadedit_table(data, path, required=False)
            value = section.get(key, data.get(key) if name == ".cadedit.toml" else None)
            if value is not None:
                if kind is float:
                    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                        raise ConfigError(f"{path}: `{key}` must be a positive number")
                    return float(value)
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{path}: `{key}` must be a non-empty string")
                return value
    return None


BACKENDS = ("auto", "torch", "llama")


def choose_backend(cli_value: str | None = None, cwd: Path | None = None) -> str:
    """Precedence: --backend, then CADEDIT_BACKEND, then the project's settings, then auto."""
    value = cli_value or os.environ.get("CADEDIT_BACKEND") or configured("backend", cwd) or "auto"
    if value not in BACKENDS:
        raise ConfigError(f"unknown backend {value!r} (use {', '.join(BACKENDS)})")
    return value


ENGINE_ENV = "CADEDIT_ENGINE"


def choose_engine(cli_value: str | None = None, cwd: Path | None = None) -> str | None:
    """The shared inference engine's URL, if any: --engine, then CADEDIT_ENGINE, then `engine` in the
    project's settings (an empty --engine or CADEDIT_ENGINE means none: edit locally)."""
    if cli_value is not None:
        return cli_value or None
    if ENGINE_ENV in os.environ:
        return os.environ[ENGINE_ENV] or None
    return configured("engine", cwd)


def choose_engine_timeout(cli_value: float | None = None, cwd: Path | None = None, default: float = 300.0) -> float:
    """Seconds one engine request may take: --engine-timeout, then `engine_timeout` in settings, then the default."""
    return cli_value or configured("engine_timeout", cwd, kind=float) or default


def choose_model(cli_value: str | None = None, cwd: Path | None = None) -> str:
    """Precedence: --model, then CADEDIT_MODEL, then the project's settings, then DEFAULT_MODEL."""
    return cli_value or os.environ.get("CADEDIT_MODEL") or configured_model(cwd) or DEFAULT_MODEL


def user_cache(*parts: str) -> Path:
    """cadedit's one user cache folder ($XDG_CACHE_HOME/cadedit, else ~/.cache/cadedit), or a path in it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "cadedit", *parts)
