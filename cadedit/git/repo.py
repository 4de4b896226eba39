"""Git for cadedit: repository paths, settings, staged blobs, and the pre-commit hook.

Contract: the hook edits what is about to be committed (the index as `git ls-files -s` shows it,
honouring GIT_INDEX_FILE), never what the working tree holds. check mode only reports; fix mode writes
the staged content's edit into the working tree, and for a partially staged file merges it into the
working-tree file with `git merge-file`: unstaged hunks survive byte for byte, and a file whose
merge would conflict is refused untouched. The model is injected as an `edit(document, instruction)`
callable, so this module never imports torch; gitpython runs every git command.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from cadedit.settings import DEFAULT_MODE, DEFAULT_MODEL, DEFAULT_TRIES, FILE_KEYS, MAX_CANDIDATES, MAX_TRIES, MODES
from cadedit.settings import SETTINGS_FILE
from cadedit.settings import approved, repository_files, skipped_text
from cadedit.text.document import Document
from cadedit.errors import CadeditError, ConfigError
from cadedit.text.diff import unified_diff, write_atomic

# (the staged document, named for the prompt; the rule; the file's repository path, exact) -> the edited text.
# Repository paths are str that os.fsencode turns back into git's bytes exactly (os.fsdecode of git's
# output): an undecodable byte stays itself, never U+FFFD, so every file opened is the staged one.
EditFn = Callable[[Document, "Rule", str], str]

HOOK_MARKER = "# cadedit-pre-commit-hook"
BACKUP_SUFFIX = ".cadedit-backup"
EXAMPLE_SETTINGS = f"""model = "{DEFAULT_MODEL}"   # optional; also --model / CADEDIT_MODEL
mode = "{DEFAULT_MODE.value}"                              # optional: {", ".join(MODES)} (the default: {DEFAULT_MODE.value})
tries = {DEFAULT_TRIES}                                    # optional: candidates to try until one passes its checks
[[rules]]
files = "*.py"
instruction = "Add a docstring to every public function that lacks one."
test = "python -m pytest -q"                 # optional: run with each candidate in place; exit 0 passes
"""
_RULE_KEYS = {"files", "instruction", "test"}
_TOP_KEYS = set(FILE_KEYS)
_SYMLINK_OR_SUBMODULE = ("120000", "160000")


# ---------------------------------------------------------------------------------------- paths


def _gitpython():
    """The gitpython module; a one-line ConfigError when git itself cannot be run (gitpython raises
    a many-line ImportError at import time when git is not on PATH)."""
    try:
        import git
    except ImportError:
        raise ConfigError(
            "git not found: the hook runs git, and no `git` is on PATH",
            hint="install git, or point GIT_PYTHON_GIT_EXECUTABLE at it",
        ) from None
    return git


def open_repo(start: str | os.PathLike[str] = ".", required: bool = True):
    """The git repository that contains `start` (a gitpython Repo), or None when not required."""
    git = _gitpython()

    try:
        repo = git.Repo(start, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        repo = None
    if repo is not None and repo.working_tree_dir is None:
        repo = None  # a bare repository has no files to edit
    if repo is None and required:
        raise ConfigError(
            f"{Path(start).absolute()}: not inside a git repository", hint="run this inside a git work tree"
        )
    return repo


def _real_dir(path: Path) -> Path:
    """The path with its directory resolved (symlinked folders, /tmp aliases) but its own name kept."""
    path = Path(os.path.abspath(path))
    return path.parent.resolve() / path.name


def diff_path(path: str | os.PathLike[str]) -> str:
    """The name a diff header gives `path`: relative to the repository root inside a git work
    tree (what `git apply` expects from any subdirectory), to the working directory otherwise."""
    full = _real_dir(Path(path))
    root = work_tree_root(full.parent)
    if root is not None and full.is_relative_to(root):
        return full.relative_to(root).as_posix()
    return Path(os.path.relpath(full, Path.cwd().resolve())).as_posix()


def work_tree_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` holding a `.git` entry (a folder, or a file for
    worktrees and submodules). A walk, not gitpython: `cadedit apply` stays fast to start (the
    gitpython import is most of a small command's start)."""
    for folder in (start.resolve(), *start.resolve().parents):
        if (folder / ".git").exists():
            return folder
    return None


def repo_relative(root: Path, path: str) -> str:
    """A path given on the command line (relative to the working directory) as a repository path."""
    full = _real_dir(Path(path))
    if not full.is_relative_to(root.resolve()):
        raise ConfigError(f"{path}: outside the repository {root}")
    return full.relative_to(root.resolve()).as_posix()


# ------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Rule:
    """Files (globs against repository-relative paths) and the instruction applied to them."""

    files: tuple[str, ...]
    instruction: str
    test: str | None = None  # a shell command run with each candidate in place; exit 0 passes

    def matches(self, path: str) -> bool:
        return any(glob_match(pattern, path) for pattern in self.files)


@dataclass(frozen=True)
class Settings:
    """What .cadedit.toml (or [tool.cadedit] in pyproject.toml) says, and where it said it."""

    model: str | None
    rules: tuple[Rule, ...]
    source: str
    mode: str | None = None
    tries: int | None = None
    candidates: int | None = None  # each try's candidates side by side (`cadedit fix --candidates`)


def glob_match(pattern: str, path: str) -> bool:
    """gitignore-like: `*` and `?` stay inside one folder, `**/` spans folders, and a pattern
    without a slash matches the file name at any depth ("*.py" matches "src/a.py")."""
    if "/" not in pattern:
        return re.fullmatch(_glob_regex(pattern), path.rsplit("/", 1)[-1]) is not None
    return re.fullmatch(_glob_regex(pattern.lstrip("/")), path) is not None


def _glob_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            j = pattern.find("]", i + 2) if pattern[i] == "[" else -1
            out.append(_char_class(pattern[i + 1 : j]) if j > 0 else re.escape(pattern[i]))
            i = j + 1 if j > 0 else i + 1
    return "".join(out)


def _char_class(body: str) -> str:
    """A glob bracket expression ("[a-z]", "[!0-9]") as a regex class."""
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    return "[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]"


def load_settings(root: Path) -> Settings:
    """The hook's rules: the nearest repository settings file that has any cadedit settings, searched
    from the repository root as every setting is (cadedit.settings: the user's own files only), and
    used only once the user approved it: its rules are instructions to the model and its `test`
    commands run on the user's machine (docs/trust.md)."""
    skipped: list[tuple[Path, str]] = []
    for found in repository_files(root, skipped):
        if not approved(found):
            raise ConfigError(
                f"{found.path}: this repository's cadedit settings are not approved; the hook runs nothing from them",
                hint=f"read them (a rule's `test` is a command run on your machine), then approve them once: "
                f"cadedit trust {found.path.parent}",
            )
        return _parse_settings(found.table, found.source)
    ignored = f" (ignored: {skipped_text(skipped)})" if skipped else ""
    raise ConfigError(
        f"no cadedit settings in {root}: neither {SETTINGS_FILE} nor [tool.cadedit] in pyproject.toml{ignored}",
        hint=f"create {SETTINGS_FILE} at the repository root, for example:\n{EXAMPLE_SETTINGS.rstrip()}\n"
        "then approve it: cadedit trust",
    )


def _parse_settings(table: dict, source: str) -> Settings:
    _no_unknown_keys(table, _TOP_KEYS, source)
    model = table.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError(f"{source}: `model` must be a non-empty string (a hub id, a folder or a .gguf file)")
    mode, tries = table.get("mode"), table.get("tries")
    if mode is not None and mode not in MODES:
        raise ConfigError(f"{source}: `mode` must be one of {', '.join(MODES)}")
    if tries is not None and (isinstance(tries, bool) or not isinstance(tries, int) or not 1 <= tries <= MAX_TRIES):
        raise ConfigError(f"{source}: `tries` must be a whole number from 1 to {MAX_TRIES}")
    candidates = table.get("candidates")
    if candidates is not None and (
        isinstance(candidates, bool) or not isinstance(candidates, int) or not 1 <= candidates <= MAX_CANDIDATES
    ):
        raise ConfigError(f"{source}: `candidates` must be a whole number from 1 to {MAX_CANDIDATES}")
    rules = table.get("rules")
    if not isinstance(rules, list) or not rules:
        raise ConfigError(
            f"{source}: no [[rules]]", hint=f"add at least one rule, for example:\n{EXAMPLE_SETTINGS.rstrip()}"
        )
    parsed = tuple(_parse_rule(rule, f"{source}: rule {k}") for k, rule in enumerate(rules, 1))
    return Settings(model, parsed, source, mode, tries, candidates)


def _parse_rule(rule: object, where: str) -> Rule:
    if not isinstance(rule, dict):
        raise ConfigError(f"{where}: must be a table with `files` and `instruction`")
    _no_unknown_keys(rule, _RULE_KEYS, where)
    files, instruction = rule.get("files"), rule.get("instruction")
    patterns = (files,) if isinstance(files, str) else tuple(files) if isinstance(files, list) else ()
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(f'{where}: `files` must be a glob or a list of globs, e.g. files = "*.py"')
    for pattern in patterns:
        try:
            re.compile(_glob_regex(pattern.lstrip("/")))
        except re.error as exc:  # "[z-a]": a bracket range that runs backwards
            raise ConfigError(f"{where}: `files` glob {pattern!r} is not valid ({exc.msg})") from None
    if not isinstance(instruction, str) or not instruction.strip():
        raise ConfigError(f"{where}: `instruction` must be a non-empty string")
    test = rule.get("test")
    if test is not None and (not isinstance(test, str) or not test.strip()):
        raise ConfigError(f"{where}: `test` must be a non-empty shell command")
    if test is not None and "\0" in test:  # no command line can hold one (the shell would never start)
        raise ConfigError(f"{where}: `test` has a NUL character (\\u0000), which no shell command can hold")
    return Rule(patterns, instruction, test)


def _no_unknown_keys(table: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key `{unknown[0]}` (expected {', '.join(sorted(known))})")


# ---------------------------------------------------------------------------------- the index


@dataclass(frozen=True)
class Staged:
    """One file as it stands in the index (stage 0) and the rules that apply to it."""

    path: str  # repository-relative, "/"-separated
    sha: str
    mode: str
    rules: tuple[Rule, ...] = ()


def _git(repo, *args: str) -> bytes:
    """Run git in the work tree; bytes out, nothing stripped (trailing newlines are content). A
    failing git command (a smudge filter that fails ...) is a one-line CadeditError."""
    git = _gitpython()
    try:
        return repo.git.execute(["git", *args], stdout_as_string=False, strip_newline_in_stdout=False)
    except git.GitCommandError as exc:
        raise CadeditError(f"git {args[0]} failed: {_first_line(exc.stderr)}") from None


def _first_line(stderr: object) -> str:
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else str(stderr or "")
    lines = [line.strip() for line in text.replace("stderr:", "").strip().strip("'").splitlines() if line.strip()]
    return lines[0][:200] if lines else "no message"


def index_entries(repo) -> dict[str, Staged]:
    """Every stage-0 file in the index (GIT_INDEX_FILE honoured), keyed by repository path."""
    entries: dict[str, Staged] = {}
    for record in _git(repo, "ls-files", "-s", "-z").split(b"\0"):
        if not record:
            continue
        meta, raw = record.split(b"\t", 1)
        meta, path = meta.decode("ascii"), os.fsdecode(raw)
        mode, sha, stage = meta.split()
        if stage == "0" and mode not in _SYMLINK_OR_SUBMODULE:
            entries[path] = Staged(path, sha, mode)
    return entries


def staged_changes(repo) -> list[str]:
    """Paths added, copied, modified or renamed in the index relative to HEAD (all, before a first commit)."""
    out = _git(repo, "diff", "--cached", "--name-only", "--diff-filter=ACMR", "-z", "--no-renames")
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def plan(repo, settings: Settings, files: Sequence[str] | None = None) -> list[Staged]:
    """The index files to edit and their rules: `files` (repository paths) if given, else the
    staged changes; files no rule matches, deleted, symlinks and submodules are left out."""
    entries = index_entries(repo)
    candidates = files if files is not None else staged_changes(repo)
    targets = []
    for path in dict.fromkeys(candidates):
        entry = entries.get(path)
        rules = tuple(rule for rule in settings.rules if rule.matches(path))
        if entry is not None and rules:
            targets.append(Staged(entry.path, entry.sha, entry.mode, rules))
    return targets


def staged_bytes(repo, staged: Staged) -> bytes:
    """The staged blob as the working tree holds it: the working-tree file's own bytes when git
    sees no unstaged change in it (it hashes to the staged blob), else the blob as a checkout
    would write it (eol and smudge filters of .gitattributes applied). A file added under
    core.autocrlf=true keeps its LF lines in the working tree while a checkout would write CRLF:
    editing the checkout form made diffs that did not apply and a --fix that saw unstaged work."""
    worktree = Path(repo.working_tree_dir) / staged.path
    regular = worktree.is_file() and not worktree.is_symlink()
    if regular and _git(repo, "hash-object", f"--path={staged.path}", "--", staged.path).decode().strip() == staged.sha:
        return worktree.read_bytes()
    rendered = _git(repo, "cat-file", "--filters", f"--path={staged.path}", staged.sha)
    if regular and b"\r\n" in rendered and b"\r\n" not in worktree.read_bytes():
        raw = _git(repo, "cat-file", "blob", staged.sha)
        if rendered.replace(b"\r\n", b"\n") == raw:  # only autocrlf's CRLF differs: the work tree keeps LF
            return raw
    return rendered


# --------------------------------------------------------------------------------- the hook run


class Status(str, Enum):
    UNCHANGED = "unchanged"
    WOULD_CHANGE = "would change"
    FIXED = "fixed"
    REFUSED = "refused"  # fix mode could not write without risking unstaged work; file untouched
    FAILED = "failed"  # the file could not be read or edited (binary, model error ...)


@dataclass(frozen=True)
class Outcome:
    """What the hook did to one file; `diff` is staged content -> edited content."""

    path: str
    status: Status
    diff: str = ""
    message: str = ""


def edit_staged(staged: Staged, data: bytes, edit: EditFn) -> tuple[Document, str]:
    """The staged document and its text after every matching rule, applied in order."""
    name = printable(staged.path)  # the model's prompt names the file: it must be text
    document = Document.from_bytes(data, name)
    text = document.text
    for rule in staged.rules:
        text = edit(Document.from_text(text, name), rule, staged.path)
    return document, text


def printable(path: str) -> str:
    """A path whose undecodable bytes are shown as U+FFFD, for prompts (never to open a file by)."""
    return os.fsencode(path).decode("utf-8", "replace")


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def shown(path: str) -> str:
    """A path as one line of a report: as it is when it is plain text, else C-quoted as git quotes it
    ("a\\nb.py", "\\377.py"), so a name with a newline cannot split the line and an undecodable
    byte is not shown as a lone surrogate."""
    if all(ch.isprintable() and not 0xDC80 <= ord(ch) <= 0xDCFF for ch in path):
        return path
    out = []
    for ch in path:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(f"\\{ord(ch) - 0xDC00:03o}")
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif not ch.isprintable():
            out.append("".join(f"\\{b:03o}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def run(repo, targets: Sequence[Staged], edit: EditFn, fix: bool = False) -> Iterator[Outcome]:
    """Edit each target's staged content; yield an Outcome per file as soon as it is known."""

    for staged in targets:
        try:
            staged_data = staged_bytes(repo, staged)
            document, new_text = edit_staged(staged, staged_data, edit)
        except CadeditError as exc:
            yield Outcome(staged.path, Status.FAILED, message=exc.message)
            continue
        if new_text == document.text:
            yield Outcome(staged.path, Status.UNCHANGED)
            continue
        diff_text = unified_diff(document.text, new_text, staged.path)
        if not fix:
            yield Outcome(staged.path, Status.WOULD_CHANGE, diff_text)
            continue
        yield write_fix(Path(repo.working_tree_dir), staged.path, staged_data, new_text.encode("utf-8"), diff_text)


def write_fix(root: Path, path: str, staged: bytes, edited: bytes, diff_text: str) -> Outcome:
    """Bring the staged content's edit into the working-tree file without losing unstaged work."""

    target = root / path
    outside = _outside_work_tree(root, target)
    if outside:
        return Outcome(path, Status.REFUSED, diff_text, f"{outside}; not written")
    try:
        current = Document.read(target)
    except CadeditError as exc:
        return Outcome(path, Status.REFUSED, diff_text, f"{exc.message}; not written")
    working = current.to_bytes()
    partial = working != staged
    merged = merge3(root, working, staged, edited) if partial else edited
    if merged is None:
        message = "the edit overlaps unstaged changes; not written (stage or stash them first)"
        return Outcome(path, Status.REFUSED, diff_text, message)
    try:
        write_atomic(current, merged.decode("utf-8"))
    except CadeditError as exc:
        return Outcome(path, Status.REFUSED, diff_text, exc.message)
    note = "unstaged changes kept; stage the fix with `git add -p`" if partial else "review and `git add` it"
    return Outcome(path, Status.FIXED, diff_text, note)


def _outside_work_tree(root: Path, target: Path) -> str | None:
    """Why writing `target` could change a file outside the work tree (a symlink in its place or
    on its way), or None. The index holds a regular file there; the working tree must too."""
    if target.is_symlink():
        return "is a symlink in the working tree but a regular file in the index"
    real, top = Path(os.path.realpath(target)), Path(os.path.realpath(root))
    if not real.is_relative_to(top):
        return f"resolves to {real}, outside the work tree"
    return None


def merge3(root: Path, ours: bytes, base: bytes, theirs: bytes) -> bytes | None:
    """`git merge-file`: base -> theirs applied onto ours; None if any hunk conflicts."""
    git = _gitpython()
    with tempfile.TemporaryDirectory(prefix="cadedit-merge-") as tmp:
        names = []
        for name, data in (("working", ours), ("staged", base), ("edited", theirs)):
            Path(tmp, name).write_bytes(data)
            names.append(str(Path(tmp, name)))
        try:
            out = git.Git(root).execute(
                ["git", "merge-file", "-p", "--quiet", *names], stdout_as_string=False, strip_newline_in_stdout=False
            )
        except git.GitCommandError:
            return None  # exit status = number of conflicts (or an error): refuse, never guess
    return out


# ------------------------------------------------------------------------------ install the hook


def hooks_dir(repo) -> Path:
    """Where git looks for hooks (core.hooksPath and worktrees honoured)."""
    out = _git(repo, "rev-parse", "--git-path", "hooks").decode().strip()
    return (Path(repo.working_tree_dir) / out).resolve()


def hook_script() -> str:
    """The pre-commit hook: this Python's cadedit if it still imports there, else `cadedit` on PATH. The
    hook runs in the repository's root: `python -I` keeps that folder off the import path (a plain
    `python -m cadedit` would run the repository's own cadedit/ package, or its json.py)."""
    return (
        "#!/bin/sh\n"
        f"{HOOK_MARKER} (written by `cadedit hook install`; `cadedit hook uninstall` removes it)\n"
        f"CADEDIT_PYTHON={_sh_quote(sys.executable)}\n"
        'if [ -x "$CADEDIT_PYTHON" ] && "$CADEDIT_PYTHON" -I -c "import cadedit" 2>/dev/null; then\n'
        '    exec "$CADEDIT_PYTHON" -I -m cadedit hook run\n'
        "fi\n"
        "exec cadedit hook run\n"
    )


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def is_ours(hook: Path) -> bool:
    try:
        return HOOK_MARKER in hook.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def install_hook(repo, force: bool = False) -> tuple[Path, Path | None]:
    """Write the pre-commit hook; a foreign hook is kept as pre-commit.cadedit-backup with --force,
    refused without. Returns (hook, backup or None)."""
    hook = hooks_dir(repo) / "pre-commit"
    backup = None
    if (hook.exists() or hook.is_symlink()) and not is_ours(hook):
        if not force:
            raise ConfigError(
                f"{hook}: a pre-commit hook that cadedit did not write is already installed",
                hint="run `cadedit hook install --force` to replace it (it is kept as pre-commit.cadedit-backup), "
                "or call `cadedit hook run` from your hook",
            )
        backup = hook.with_name(hook.name + BACKUP_SUFFIX)
        if backup.exists() or backup.is_symlink():  # os.replace would destroy the hook kept there
            raise ConfigError(
                f"{backup}: a backup of an earlier hook is already kept there; nothing replaced",
                hint=f"move {backup.name} (or {hook.name}) elsewhere, then run `cadedit hook install --force` again",
            )
        os.replace(hook, backup)
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(hook_script(), encoding="utf-8")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return hook, backup


def uninstall_hook(repo) -> tuple[Path, Path | None]:
    """Remove our pre-commit hook (a foreign one is refused) and restore a backup install kept."""
    hook = hooks_dir(repo) / "pre-commit"
    if not (hook.exists() or hook.is_symlink()):
        raise ConfigError(f"{hook}: no pre-commit hook installed", hint="nothing to uninstall")
    if not is_ours(hook):
        raise ConfigError(f"{hook}: this pre-commit hook was not written by cadedit; left as it is")
    hook.unlink()
    backup = hook.with_name(hook.name + BACKUP_SUFFIX)
    if backup.exists() or backup.is_symlink():
        os.replace(backup, hook)
        return hook, backup
    return hook, None
