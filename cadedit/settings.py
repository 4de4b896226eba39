"""Every setting of cadedit, its default and the one rule that resolves it.

Precedence, for every setting: the command line, then the environment (CADEDIT_*), then the nearest
approved repository settings file, then the user's own config, then the default written here.
The user's own config is $XDG_CONFIG_HOME/cadedit/config.toml (else ~/.config/cadedit/config.toml).
A repository settings file is `.cadedit.toml` (top level or [tool.cadedit]) or `pyproject.toml`
([tool.cadedit]), looked for from the working folder up to the repository root (the first folder with
.git) or the home folder, whichever comes first. Every settings file must be one the user (or root)
owns that no one else may write (git's safe.directory rule); a repository's file is used only once the
user approved its current content (`cadedit trust`, as direnv's allow), and even then it never chooses
the engine, the one setting that decides where the user's code and API key go (docs/trust.md).
A malformed file is a ConfigError naming it. Pure: imports neither torch nor transformers, so every
command can resolve its settings cheaply.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cadedit.text.document import read_regular
from cadedit.text.visible import visible
from cadedit.errors import CadeditError, ConfigError


class Mode(str, enum.Enum):
    """How the model writes the edit (cadedit.decode.loop's table: a cursor and a drafter each)."""

    PROGRAM = "program"  # an edit program of line copies and new text (Copy-as-Decode)
    REWRITE = "rewrite"  # the whole file retyped, one token per forward
    LOOKUP = "lookup"  # the same, drafted by prompt lookup
    VERIFY = "verify"  # the same, the file's own lines drafted and checked many tokens per forward


class Backend(str, enum.Enum):
    AUTO = "auto"  # whichever measured faster on this CPU for this model file (model.choose_backend)
    TORCH = "torch"  # cadedit's own Qwen2 forward
    LLAMA = "llama"  # the GGUF through llama.cpp, at its own size


class Layout(str, enum.Enum):
    """Fenced modes: where the instruction goes in the prompt (prompt.py)."""

    BOTH = "both"
    AFTER = "after"
    QUOTED = "quoted"
    AUTO = "auto"


DTYPES = ("auto", "fp32", "bf16", "bf16-int8", "bf16-int4", "fp16")

# -- the defaults, each written once ----------------------------------------------------------------

DEFAULT_MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
# verify: rewrite's exact output at several times its speed; program mode needs a model trained to
# choose spans (docs/measurements/modes.md).
DEFAULT_MODE = Mode.VERIFY
DEFAULT_BACKEND = Backend.AUTO
DEFAULT_DTYPE = "auto"
DEFAULT_LAYOUT = Layout.AUTO
DEFAULT_TRIES = 3  # candidates until one passes its checks (fix, the hook)
MAX_TRIES = 20
# Candidates each try decodes side by side (`--candidates`; cadedit.tries.loop): docs/measurements/candidates.md. Where a test decides (--test, a hook rule's test), 4 on a local model: more of them pass
# for a fraction more of the wall; without a test the checks cannot tell the right one, and a shared
# engine need not batch the requests, so one.
DEFAULT_CANDIDATES = 1
TESTED_CANDIDATES = 4
# Tries after the first where a test decides: an edit that gets there has failed four candidates and
# its wall is past the common case's already, so its later tries branch twice as wide (docs/
# measurements/candidates.md).
LATER_TESTED_CANDIDATES = 8
MAX_CANDIDATES = 8
# A definition named without a line (`cadedit fix app.js "Fix bugs in f."`) where a test decides: once try 1
# failed, the model reads the definition as plain code (cadedit.decode.where.surprise, a few prefill forwards) and
# each later try adds this many branches, put in where the reading least expected the code written (the
# most surprising token of the line it names and of its runners-up) beside candidate 1's hesitations.
READ_BRANCHES = 3
READ_LATER = (
    True  # whether fix, the hook and the benchmarks do so by default (docs/measurements/reading-later-tries.md)
)
# How a try's candidates after the first are made (tries._batched_try): "branch", from candidate 1
# where it hesitated most and only once it failed its checks, or "sample", all side by side from the
# start. Measured: docs/measurements/candidates.md.
CANDIDATES_BY = "branch"
CANDIDATE_WAYS = ("branch", "sample")
# The tries whose branches take candidate 1's rest once they write a stretch of it again
# (decode.REJOIN_TOKENS): try 1, where a failing candidate 1 is the common case and the branches'
# price is the edit's. Later tries decode their branches to the end: an edit there has failed
# four candidates already, and a branch that changes a second line after agreeing for a while is
# one more answer to test (docs/measurements/rejoin.md).
REJOIN_TRIES = 1


def default_candidates(tested: bool, engine: bool = False, number: int = 1, located: bool = False) -> int:
    """--candidates when not given, for try `number`: where a test decides on a local model
    TESTED_CANDIDATES in try 1 and LATER_TESTED_CANDIDATES after it, else one. A try that retypes the
    line the where-step named (`located`) as where a test decides: a candidate 1 that copies it as it is
    fails its change check, and the branches from it put in the tokens the model expected there
    (docs/measurements/where-step.md); a wider try after it is as without the where-step."""
    if not (tested or located) or engine:
        return DEFAULT_CANDIDATES
    return TESTED_CANDIDATES if number == 1 else LATER_TESTED_CANDIDATES


# Named deletions and renames of Python ("Delete the function X", "Rename f to g") made without a model,
# exactly (cadedit.tries.mechanical); `cadedit fix --no-mechanical` leaves them to the model.
MECHANICAL = True
TEST_TIMEOUT = 120.0  # seconds a --test command (or a hook rule's test) may run
BENCH_TEST_TIMEOUT = 10.0  # seconds one run of a benchmark case's test may take (bench e2e, tries, candidates)
IDLE_TIMEOUT = 30 * 60.0  # seconds the warm server waits for a request before it exits
# Seconds the warm server waits for a client to say whether candidate 1 passed its checks (its --test
# runs meanwhile, up to TEST_TIMEOUT); other edits are served while it waits.
SERVER_ANSWER_TIMEOUT = 15 * 60.0
SERVER_BUSY_WAIT = 10.0  # seconds a client waits for a server busy with another edit, then loads the model itself
ENGINE_TIMEOUT = 300.0  # seconds one request to a shared engine may take (it may queue other clients' first)
ENGINE_ENV = "CADEDIT_ENGINE"
# Verify drafts' lengths: "fitted" to the forward cost measured on this machine (the default), or
# "fixed" (16 doubling to 256 while kept): the same lengths on every machine and load.
DRAFT_LENGTHS_ENV = "CADEDIT_DRAFT_LENGTHS"
DRAFT_LENGTHS = ("fitted", "fixed")
DEFAULT_DRAFT_LENGTHS = "fitted"
# New tokens any answer may take at least (request.default_budget): the Aider polyglot subset's
# reference solutions take 79-790 tokens where their stubs take 6-351.
MIN_ANSWER_TOKENS = 1024
# The largest file whose definitions are outlined for scoping (bytes): outlining costs about 2 s and
# 200 MB a MiB of Python on a slow CPU (16 MiB: 24-36 s, 3.4 GB), and a file much over this is too
# large for any model's context whole, so it is refused by its size instead of outlined first.
OUTLINE_BYTES = 2 * 1024 * 1024
# The most a plan may make the model retype without being told to (`cadedit fix --max-retype N`, the
# `max_retype` setting): a whole-file retype of a 1,000-line file took over 14 minutes a try on 2 cores
# and failed its checks (issue 64), so past this cadedit refuses before the model loads. N lines allows
# N × MAX_RETYPE_TOKENS / MAX_RETYPE_LINES tokens too (long lines cost more); "all": no bound.
MAX_RETYPE_LINES = 150
MAX_RETYPE_TOKENS = 2000
MAX_RETYPE_ENV = "CADEDIT_MAX_RETYPE"
# Tokens a retype is estimated at before the tokenizer loads: code runs about 3-4 bytes a token in
# Qwen's vocabulary; the lower figure, so that the estimate errs towards refusing.
RETYPE_BYTES_PER_TOKEN = 3
# Scoped edits: lines shown on each side of the regions. The prompt is most of a long-file edit's
# wall; 30 kept the held-out long-file tasks' exact answers of 60 (docs/measurements/context-window.md).
CONTEXT_LINES = 30
# How the where-step (`--where`, cadedit.decode.where) finds the line: "surprise" (the line whose code the
# model least expected, read as plain code), "number" (the model names its line number, the lines
# shown numbered) or "quote" (the model quotes its text). Asked, the 1.5B named a planted bug's
# line in 0 of 9 by number and 0 of 8 by quote; by surprise it named 13 of 30 held-out bugs' lines
# (docs/measurements/where-step.md).
WHERE_BY = ("surprise", "number", "quote")
DEFAULT_WHERE_BY = "surprise"
MODES = tuple(m.value for m in Mode)
BACKENDS = tuple(b.value for b in Backend)
LAYOUTS = tuple(layout.value for layout in Layout)

SETTINGS_FILE = ".cadedit.toml"
SETTINGS_BYTES = 1 << 20  # a settings file (or a pyproject.toml) larger than this is not one
# What a settings file may set: the model and how it runs, and the hook's [[rules]] (cadedit.git.repo).
FILE_KEYS = ("model", "backend", "mode", "tries", "candidates", "engine", "engine_timeout", "max_retype", "rules")
# What a repository's file never sets, approved or not: the engine decides where the user's code and
# API key are sent, so it comes only from the command line, the environment or the user's own config.
USER_ONLY_KEYS = ("engine",)
USER_CONFIG = "config.toml"  # the user's own settings, in user_config_folder()
APPROVALS = "trusted.json"  # the repository settings the user approved (`cadedit trust`), in the same folder


def read_toml(path: Path) -> dict:
    """A settings file as a dict; a ConfigError naming the file when it cannot be read or parsed."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data, _ = read_regular(path, SETTINGS_BYTES)  # a FIFO would block, a huge file fill memory
        return tomllib.loads(data.decode("utf-8-sig"))  # a BOM (Windows editors) is no TOML error
    except CadeditError as exc:
        raise ConfigError(f"{path}: cannot read settings ({exc.message})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read settings ({exc})") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError(f"{path}: cannot read settings (arrays or tables nested too deeply)") from None


def cadedit_table(data: dict, path: Path, required: bool = True) -> dict:
    """data["tool"]["cadedit"] ({} when absent and not required); a ConfigError when either is not a table."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table ([tool.cadedit]), not {type(tool).__name__}")
    table = tool.get("cadedit", {} if not required else None)
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: `tool.cadedit` must be a table ([tool.cadedit]), not {type(table).__name__}")
    return table


@dataclass(frozen=True)
class SettingsFile:
    """One settings file's cadedit table: `.cadedit.toml` (top level, or its [tool.cadedit]) or
    pyproject.toml's [tool.cadedit] in a repository, or the user's own config.toml (`own`)."""

    path: Path
    table: dict
    own: bool = False

    @property
    def source(self) -> str:
        """How messages name it: the file, or the file and its table."""
        return self.path.name if self.path.name != "pyproject.toml" else f"{self.path.name} [tool.cadedit]"

    @property
    def digest(self) -> str:
        """What an approval records: the table's content (not the file's bytes, so that editing another
        tool's table in pyproject.toml needs no new approval; any change to cadedit's does)."""
        text = json.dumps(self.table, sort_keys=True, ensure_ascii=True, default=str)
        return hashlib.sha256(text.encode("ascii")).hexdigest()


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
    """Whether a settings file (or the folder of the user's config) may choose for this user: owned by
    them (or root) and writable by no one else, as git's safe.directory rule. A file another user
    controls could pick the model and the commands run on the user's code."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid in (os.getuid(), 0) and not st.st_mode & 0o022


def user_config_folder() -> Path:
    """The user's own cadedit config folder: $XDG_CONFIG_HOME/cadedit, else ~/.config/cadedit."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base, "cadedit")


def _own_file(name: str) -> Path | None:
    """A file of the user's config folder when it and the folder are the user's own, else None."""
    folder = user_config_folder()
    path = folder / name
    return path if path.is_file() and trusted(folder) and trusted(path) else None


def shown_key(key: str) -> str:
    """A settings key as a listing or a message shows it: bare when TOML would write it bare, else quoted
    as TOML (and JSON) quote it, so that no key can pass for a value, another key or a line of its own."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def approvals() -> dict[str, str]:
    """The approved repository settings files: the path each was found at (its folder resolved, the
    file itself not: a link is approved where it is, never as what it points to) -> the digest approved."""
    path = _own_file(APPROVALS)
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(
            f"{path}: cannot read the approved settings ({exc})",
            hint="delete it and approve your repositories again with `cadedit trust`",
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(
            f"{path}: not a table of approved settings files",
            hint="delete it and approve your repositories again with `cadedit trust`",
        )
    return data


def approved(found: SettingsFile) -> bool:
    """Whether the user approved this repository settings file as it reads now."""
    return found.own or approvals().get(str(found.path)) == found.digest


def save_approvals(table: dict[str, str]) -> Path:
    """Write the approvals (atomically) into the user's config folder, made private if new."""
    folder = user_config_folder()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not trusted(folder):
        raise ConfigError(
            f"{folder}: not the user's own folder (another user owns it or may write it); no approval recorded",
            hint="use a folder of yours: XDG_CONFIG_HOME=/path/to/yours",
        )
    fd, tmp = tempfile.mkstemp(prefix=".trusted-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(table, out, indent=1, sort_keys=True)
    target = folder / APPROVALS
    os.replace(tmp, target)
    return target


def repository_files(cwd: Path | None = None, skipped: list[tuple[Path, str]] | None = None) -> Iterator[SettingsFile]:
    """The repository settings files that apply, nearest first, approved or not (the module docstring's
    search rule). A file another user controls, or a link to a file outside the repository, is skipped
    (and (path, why) appended to `skipped` when given)."""
    folders = settings_folders(cwd)
    for folder in folders:
        for name in (SETTINGS_FILE, "pyproject.toml"):
            path = folder / name
            if not path.is_file():
                continue
            why = _not_approvable(path, folders[-1])
            if why is not None:
                if skipped is not None:
                    skipped.append((path, why))
                continue
            data = read_toml(path)
            tool = cadedit_table(data, path, required=False)
            if name == SETTINGS_FILE:
                yield SettingsFile(path, tool if "cadedit" in data.get("tool", {}) else data)
            elif "cadedit" in data.get("tool", {}):
                yield SettingsFile(path, tool)


def _not_approvable(path: Path, top: Path) -> str | None:
    """Why a repository settings file may not choose for this user, or None: another user controls it, or
    it is a link out of the folders searched (`top`: the repository root). Through such a link a
    cloned repository would use the settings of another repository, or read a file of the user's."""
    if not trusted(path):
        return "owned by another user or writable by others"
    target = path.resolve()
    if path.is_symlink() and not target.is_relative_to(top):
        return f"a link to {target}, outside the repository"
    return None


def outside_repository(folder: Path, spec: str) -> bool:
    """Whether a path a settings file in `folder` names (a model) lies outside its repository (the
    nearest folder up from `folder` with .git, else `folder`): resolved with every link followed,
    so neither `models/../../x` nor a link out passes for the repository's own."""
    root = next((f for f in (folder, *folder.parents) if (f / ".git").exists()), folder).resolve()
    return not (folder / Path(spec).expanduser()).resolve().is_relative_to(root)


def user_settings() -> SettingsFile | None:
    """The user's own config.toml (top level, or its [tool.cadedit]), if there is one they control."""
    path = _own_file(USER_CONFIG)
    if path is None:
        return None
    data = read_toml(path)
    tool = cadedit_table(data, path, required=False)
    return SettingsFile(path, tool if "cadedit" in data.get("tool", {}) else data, own=True)


def approve(folder: Path) -> list[SettingsFile]:
    """Record the repository settings files that apply in `folder` as approved, as they read now; the
    files approved. A ConfigError when there is none the user controls."""
    skipped: list[tuple[Path, str]] = []
    found = list(repository_files(folder, skipped))
    if not found:
        ignored = f" (not approvable: {skipped_text(skipped)})"
        raise ConfigError(f"{folder}: no cadedit settings file to approve" + (ignored if skipped else ""))
    _tell_links(skipped)  # approving the others: say which link is not read
    table = approvals()
    table.update({str(f.path): f.digest for f in found})
    save_approvals(table)
    return found


def forget(folder: Path) -> list[Path]:
    """Withdraw the approval of every settings file in `folder` and its parents (those approve() records)."""
    table = approvals()
    gone = [Path(p) for p in table if Path(p).parent in {f.resolve() for f in settings_folders(folder)}]
    if gone:
        save_approvals({p: d for p, d in table.items() if Path(p) not in gone})
    return gone


def skipped_text(skipped: list[tuple[Path, str]]) -> str:
    """The files repository_files skipped, for a message: "PATH: why; PATH: why"."""
    return "; ".join(f"{path}: {why}" for path, why in skipped)


_told: set[tuple[Path, str]] = set()


def _tell(path: Path, why: str, message: str) -> None:
    """A warning on stderr, once per file and reason in a process: it names what was ignored and how to
    approve it. Plain text straight to stderr: this module stays a leaf that every command imports."""
    if (path, why) not in _told:
        _told.add((path, why))
        sys.stderr.write(f"warning: {visible(message)}\n")


def settings_files(cwd: Path | None = None) -> Iterator[SettingsFile]:
    """The settings files that apply, nearest first: the approved repository files, then the user's own
    config. A repository file not approved, or a link out of the repository, is skipped with a warning
    naming it (another user's file silently: it is no one's mistake to fix here)."""
    skipped: list[tuple[Path, str]] = []
    for found in repository_files(cwd, skipped):
        _tell_links(skipped)
        if approved(found):
            yield found
        elif found.table:
            keys = ", ".join(shown_key(key) for key in sorted(found.table))
            _tell(
                found.path,
                "unapproved",
                f"{found.path}: this repository's settings ({keys}) are not approved, "
                f"so cadedit ignored them; review them and run `cadedit trust {found.path.parent}` to use them",
            )
    _tell_links(skipped)
    mine = user_settings()
    if mine is not None:
        yield mine


def _tell_links(skipped: list[tuple[Path, str]]) -> None:
    for path, why in skipped:
        if path.is_symlink():
            _tell(path, "link", f"{path}: ignored, {why}: cadedit reads no settings through it")


def configured(key: str, cwd: Path | None = None, kind: type = str):
    """A setting (a string, or a positive number with kind=float; with kind=object the value as written
    and the file's path, for the caller to check) from the nearest settings file that has it (see the
    module docstring); USER_ONLY_KEYS only from the user's own config."""
    for found in settings_files(cwd):
        value = found.table.get(key)
        if value is None:
            continue
        if key in USER_ONLY_KEYS and not found.own:
            _tell(
                found.path,
                key,
                f"{found.path}: `{key}` ignored: a repository never chooses where your code and "
                f"API key go; name it with --{key}, {ENGINE_ENV} or in {user_config_folder() / USER_CONFIG}",
            )
            continue
        if kind is object:  # the caller checks the value (choose_max_retype)
            return value, found.path
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{found.path}: `{key}` must be a positive number")
            return float(value)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{found.path}: `{key}` must be a non-empty string")
        return value
    return None


def configured_model(cwd: Path | None = None) -> str | None:
    """`model` from the nearest settings file that names one."""
    return configured("model", cwd)


def choose_backend(cli_value: str | None = None, cwd: Path | None = None) -> str:
    """Precedence: --backend, then CADEDIT_BACKEND, then the project's settings, then DEFAULT_BACKEND."""
    value = cli_value or os.environ.get("CADEDIT_BACKEND") or configured("backend", cwd) or DEFAULT_BACKEND.value
    if value not in BACKENDS:
        raise ConfigError(f"unknown backend {value!r} (use {', '.join(BACKENDS)})")
    return value


def choose_engine(cli_value: str | None = None, cwd: Path | None = None) -> str | None:
    """The shared inference engine's URL, if any: --engine, then CADEDIT_ENGINE, then `engine` in the
    user's own config, never a repository's (an empty --engine or CADEDIT_ENGINE means none: edit locally)."""
    if cli_value is not None:
        return cli_value or None
    if ENGINE_ENV in os.environ:
        return os.environ[ENGINE_ENV] or None
    return configured("engine", cwd)


def choose_engine_timeout(cli_value: float | None = None, cwd: Path | None = None) -> float:
    """Seconds one engine request may take: --engine-timeout, then `engine_timeout` in settings, then ENGINE_TIMEOUT."""
    return cli_value or configured("engine_timeout", cwd, kind=float) or ENGINE_TIMEOUT


def choose_max_retype(cli_value: str | None = None, cwd: Path | None = None) -> int | None:
    """The retype bound in lines (None: "all", no bound): --max-retype, then CADEDIT_MAX_RETYPE, then
    `max_retype` in settings, then MAX_RETYPE_LINES. A value that is no whole number >= 1 nor "all" is a
    ConfigError naming where it came from."""
    if cli_value is not None:
        return max_retype_value(cli_value, "--max-retype")
    if os.environ.get(MAX_RETYPE_ENV):
        return max_retype_value(os.environ[MAX_RETYPE_ENV], MAX_RETYPE_ENV)
    found = configured("max_retype", cwd, kind=object)
    if found is not None:
        value, path = found
        return max_retype_value(value, f"{path}: `max_retype`")
    return MAX_RETYPE_LINES


def max_retype_value(value: object, where: str) -> int | None:
    """A retype bound as given: a whole number of lines >= 1, or "all" (None: no bound)."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return None
    text = value.strip().replace(",", "").replace("_", "") if isinstance(value, str) else value
    if isinstance(text, str) and text.isdigit() and len(text) <= 12:
        text = int(text)
    if isinstance(text, bool) or not isinstance(text, int) or text < 1:
        raise ConfigError(f"{where} {value!r}: not a number of lines", hint='give a whole number >= 1, or "all"')
    return text


def choose_model(cli_value: str | None = None, cwd: Path | None = None) -> str:
    """Precedence: --model, then CADEDIT_MODEL, then the project's settings, then DEFAULT_MODEL."""
    return cli_value or os.environ.get("CADEDIT_MODEL") or configured_model(cwd) or DEFAULT_MODEL


def choose_draft_lengths() -> str:
    """How verify drafts are sized: CADEDIT_DRAFT_LENGTHS (one of DRAFT_LENGTHS), else
    DEFAULT_DRAFT_LENGTHS; a ConfigError naming the variable for any other value."""
    chosen = os.environ.get(DRAFT_LENGTHS_ENV, DEFAULT_DRAFT_LENGTHS)
    if chosen not in DRAFT_LENGTHS:
        raise ConfigError(f"{DRAFT_LENGTHS_ENV}={chosen!r}: expected one of {', '.join(DRAFT_LENGTHS)}")
    return chosen


def user_cache(*parts: str) -> Path:
    """cadedit's one user cache folder ($XDG_CACHE_HOME/cadedit, else ~/.cache/cadedit), or a path in it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "cadedit", *parts)


def not_own(path: Path, private: bool = False) -> str | None:
    """Why `path` is not this user's own, or None when it is (or does not exist): it must not be a link,
    must be owned by this user and writable by no one else (private: nor readable). The one check of
    every folder cadedit shares with nobody: the runtime folder, the cache and its entries. A folder
    or file another user controls could hold their weights, KV states or socket in place of ours."""
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):  # missing, or under a file: whoever makes it says so
        return None
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if st.st_uid != os.getuid() or st.st_mode & (0o077 if private else 0o022):
        return f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"
    return None


def cache_problem(path: Path, top: Path | None = None, contents: bool = False) -> str | None:
    """Why a cache entry may not be used, as "<path>: <why>", or None: the first of the cache folder
    `top` (default: user_cache()) and every folder below it down to `path`, and `path` itself (and with
    `contents` the entries of the folder `path`), that is not this user's own (not_own). A missing
    part is fine: cadedit makes it, as its own."""
    top = user_cache() if top is None else top
    try:
        below = path.relative_to(top).parts
    except ValueError:
        below = ()
    parts = [top, *(top.joinpath(*below[:k]) for k in range(1, len(below) + 1))]
    if contents and path.is_dir() and not path.is_symlink():
        parts += sorted(path.iterdir())
    for part in parts:
        why = not_own(part)
        if why is not None:
            return f"{part}: not this user's own ({why})"
    return None
