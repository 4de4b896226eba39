"""`cadedit hook install|uninstall|run` on real git repositories with the tiny Qwen2.

In-process runs script the model's choices to a known edit (old -> new, as in test_pipes) so diffs,
exit codes and bytes are exact: check and fix modes, partially staged files, the model loaded once
and only when needed, missing settings or model. Subprocess runs go through `git commit` with the
installed hook, and through the pre-commit framework (`pre-commit try-repo`, offline: see there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cadedit.backends.model
from cadedit.errors import ConfigError
from cadedit.options import Mode
from tests.conftest import approve_settings
from tests.test_pipes import script_model
from tests.test_repo import write
from tests.scripting import invoke

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_outer_git(monkeypatch):
    """A test run inside a git hook must not see that hook's repository or index."""
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def loads(monkeypatch):
    """Calls of model.load_model (the hook imports it lazily, so patching the module is enough)."""
    calls = []
    real = cadedit.backends.model.load_model
    monkeypatch.setattr(cadedit.backends.model, "load_model", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, check=check, capture_output=True)


def staged(root: Path, path: str) -> bytes:
    return git(root, "show", f":{path}").stdout


def make_repo(root: Path, model: Path | str | None, files: dict[str, bytes]) -> Path:
    """A repository whose .cadedit.toml renames old to new in *.py, with `files` committed."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    model_line = f"model = {str(model)!r}\n" if model else ""
    (root / ".cadedit.toml").write_text(model_line + '[[rules]]\nfiles = "*.py"\ninstruction = "Rename old to new."\n')
    approve_settings(root)
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def hook(*args: str):
    return invoke(["hook", *args])


# ------------------------------------------------------------------------------- check and fix


def test_check_prints_the_staged_diffs_and_exits_1_writing_nothing(tmp_path, monkeypatch, tiny_dir, loads):
    modes = script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n", "sub/b.py": b"0\n", "c.txt": b"0\n"})
    write(root, {"a.py": b"keep\r\nold\r\n", "sub/b.py": b"old", "c.txt": b"old\n", "d.py": b"old\n"})
    git(root, "add", "a.py", "sub/b.py", "c.txt")  # d.py is not staged, c.txt matches no rule
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    assert len(loads) == 1 and "loaded in" in result.stderr and "(once for 2 files)" in result.stderr
    assert (
        "a.py: would change (+1 -1)" in result.stderr
        and "to write these changes: cadedit hook run --fix" in result.stderr
    )
    assert result.stdout_bytes.count(b"diff --git") == 2
    # Nothing written; the diff is exactly staged -> edited (it applies to the index).
    assert (root / "a.py").read_bytes() == b"keep\r\nold\r\n" and staged(root, "a.py") == b"keep\r\nold\r\n"
    subprocess.run(["git", "apply", "--cached"], cwd=root, input=result.stdout_bytes, check=True)
    assert staged(root, "a.py") == b"keep\r\nnew\r\n" and staged(root, "sub/b.py") == b"new"
    assert modes == [Mode.VERIFY, Mode.VERIFY]  # the hook edits in the default mode (the fenced answer is scripted)


def test_fix_writes_the_working_tree_exits_1_and_then_passes(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    write(root, {"a.py": b"a\nold\nb"})
    git(root, "add", "a.py")
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1, result.output
    assert "a.py: fixed (+1 -1)" in result.stderr and "`git add` them" in result.stderr
    assert result.stdout_bytes == b""
    assert (root / "a.py").read_bytes() == b"a\nnew\nb" and staged(root, "a.py") == b"a\nold\nb"
    git(root, "add", "a.py")
    again = hook("run", "--fix")
    assert again.exit_code == 0, again.output
    assert "a.py: unchanged" in again.stderr


BASE = b"".join(b"line %d\r\n" % k for k in range(1, 11))
STAGED = BASE.replace(b"line 2", b"old 2")
WORKING = STAGED.replace(b"line 9", b"my unstaged work 9")


def test_fix_on_a_partially_staged_file_keeps_unstaged_hunks_byte_for_byte(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": BASE})
    write(root, {"a.py": STAGED})
    git(root, "add", "a.py")
    write(root, {"a.py": WORKING})
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1, result.output
    assert "unstaged changes kept" in result.stderr
    assert (root / "a.py").read_bytes() == WORKING.replace(b"old 2", b"new 2")
    assert staged(root, "a.py") == STAGED


def test_fix_refuses_an_edit_that_overlaps_unstaged_work(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": BASE})
    write(root, {"a.py": STAGED})
    git(root, "add", "a.py")
    working = STAGED.replace(b"old 2", b"old 2 plus unstaged work")
    write(root, {"a.py": working})
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1 and "a.py: refused" in result.stderr and "overlaps unstaged changes" in result.stderr
    assert b"+new 2" in result.stdout_bytes  # the user still sees the edit it would have made
    assert (root / "a.py").read_bytes() == working and staged(root, "a.py") == STAGED


def test_files_arguments_limit_the_run_to_those_files(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"old\n", "sub/b.py": b"old\n"})
    monkeypatch.chdir(root / "sub")  # FILES are relative to the working directory
    result = hook("run", "b.py")
    assert result.exit_code == 1, result.output
    assert (
        result.stdout_bytes.startswith(b"diff --git a/sub/b.py b/sub/b.py\n") and b"a/a.py" not in result.stdout_bytes
    )


def test_no_matching_staged_file_exits_0_without_loading_the_model(tmp_path, monkeypatch):
    monkeypatch.setattr(cadedit.backends.model, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    root = make_repo(tmp_path / "w", "no/such/model", {"a.py": b"old\n"})
    write(root, {"notes.txt": b"old\n", "b.py": b"old, not staged\n"})
    git(root, "add", "notes.txt")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 0, result.output
    assert "no staged file matches a rule" in result.stderr


def test_missing_settings_is_a_clear_error(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "w", None, {"a.py": b"old\n"})
    (root / ".cadedit.toml").unlink()
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no cadedit settings")
    assert "create .cadedit.toml" in result.stderr and "git commit --no-verify" in result.stderr


def test_missing_model_is_a_clear_error(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "w", "no/such/model", {"a.py": b"0\n"})
    write(root, {"a.py": b"old\n"})
    git(root, "add", "a.py")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "error: model 'no/such/model'" in result.stderr
    assert "CADEDIT_MODEL" in result.stderr and ".cadedit.toml" in result.stderr and "--no-verify" in result.stderr


# ---------------------------------------------------------------------------------- install


def test_install_and_uninstall_through_the_cli(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "w", None, {})
    monkeypatch.chdir(root)
    pre_commit = root / ".git/hooks/pre-commit"
    pre_commit.write_text("#!/bin/sh\nexit 0\n")
    refused = hook("install")
    assert refused.exit_code == 1 and "did not write" in refused.stderr and "--force" in refused.stderr
    assert hook("uninstall").exit_code == 1 and pre_commit.read_text() == "#!/bin/sh\nexit 0\n"
    forced = hook("install", "--force")
    assert forced.exit_code == 0 and "pre-commit.cadedit-backup" in forced.stderr
    assert "cadedit hook run" in pre_commit.read_text()
    removed = hook("uninstall")
    assert removed.exit_code == 0 and "restored the previous hook" in removed.stderr
    assert pre_commit.read_text() == "#!/bin/sh\nexit 0\n"


def test_git_commit_runs_the_installed_hook(tmp_path, monkeypatch):
    """Real `git commit`s through the real hook script (neither needs the model, so they stay fast)."""
    root = make_repo(tmp_path / "w", "no/such/model", {"a.py": b"0\n"})
    monkeypatch.chdir(root)
    assert hook("install").exit_code == 0
    write(root, {"notes.txt": b"no rule matches me\n"})
    git(root, "add", "notes.txt")
    passed = git(root, "commit", "-m", "notes", check=False)
    assert passed.returncode == 0, passed.stderr
    assert b"no staged file matches a rule" in passed.stderr
    (root / ".cadedit.toml").unlink()
    write(root, {"a.py": b"old\n"})
    git(root, "add", "a.py")
    blocked = git(root, "commit", "-m", "a", check=False)
    assert blocked.returncode != 0
    assert b"error: no cadedit settings" in blocked.stderr and b"git commit --no-verify" in blocked.stderr
    assert git(root, "log", "--format=%s").stdout == b"notes\ninit\n"
    assert git(root, "commit", "-q", "--no-verify", "-m", "a").returncode == 0


# ----------------------------------------------------------------------------- pre-commit framework


def _hooks_repository(dest: Path) -> Path:
    """This project (package, pyproject, .pre-commit-hooks.yaml) as the git repository pre-commit installs from."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy2(PROJECT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("cadedit",):
        shutil.copytree(PROJECT / folder, dest / folder, symlinks=True, ignore=ignore)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "cadedit")
    return dest


def _offline_pip_env() -> dict[str, str]:
    """pre-commit builds the hook's virtualenv with `pip install .`; keep that offline and fast.

    The hook's environment finds cadedit's heavy dependencies (torch, transformers ...) through
    PYTHONPATH (this interpreter's site-packages), so pip sees them installed and fetches nothing;
    PIP_NO_INDEX makes any fetch fail loudly instead of reaching out. The build backend comes from
    the same site-packages with build isolation off (pip reads PIP_NO_BUILD_ISOLATION=0 as
    "--no-build-isolation"), or from virtualenv's bundled wheels through PIP_FIND_LINKS where a pip
    reads that variable the other way. cadedit itself is really built and installed from the copy.
    """
    import sysconfig

    from virtualenv.seed.wheels.embed import BUNDLE_FOLDER

    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_FIND_LINKS": str(BUNDLE_FOLDER),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PRE_COMMIT_COLOR": "never",
    }


def test_pre_commit_try_repo_runs_the_hook(tmp_path):
    """The real .pre-commit-hooks.yaml and a real install of this package into pre-commit's own
    virtualenv; pre-commit passes the staged names, the hook reaches the model step (a missing
    model here: deterministic, and no decode time), the failure and its hint reach the user, and the
    partially staged file keeps its staged and its unstaged bytes."""
    pytest.importorskip("pre_commit")
    pytest.importorskip("virtualenv")
    hooks = _hooks_repository(tmp_path / "cadedit-src")
    root = make_repo(tmp_path / "w", "no/such/model", {"a.py": BASE, "notes.txt": b"x\n"})
    write(root, {"a.py": STAGED, "notes.txt": b"y\n"})
    git(root, "add", "a.py", "notes.txt")
    write(root, {"a.py": WORKING})
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hooks), "cadedit", "--verbose"],
        cwd=root,
        capture_output=True,
        env=_offline_pip_env(),
        timeout=300,
    )
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 1, out
    assert "cadedit....." in out and "Failed" in out and "Traceback" not in out
    assert "error: model 'no/such/model'" in out and "git commit --no-verify" in out
    assert (root / "a.py").read_bytes() == WORKING and staged(root, "a.py") == STAGED


def test_a_second_forced_install_never_overwrites_the_first_backup(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "w", None, {})
    monkeypatch.chdir(root)
    pre_commit = root / ".git/hooks/pre-commit"
    pre_commit.write_text("#!/bin/sh\necho first\n")
    assert hook("install", "--force").exit_code == 0
    pre_commit.write_text("#!/bin/sh\necho second\n")  # another tool replaced our hook
    again = hook("install", "--force")
    assert again.exit_code == 1
    assert again.stderr.splitlines()[0].endswith(
        "pre-commit.cadedit-backup: a backup of an earlier hook is already kept there; nothing replaced"
    )
    assert (root / ".git/hooks/pre-commit.cadedit-backup").read_text() == "#!/bin/sh\necho first\n"
    assert pre_commit.read_text() == "#!/bin/sh\necho second\n"


def test_fix_refuses_a_read_only_working_tree_file(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    write(root, {"a.py": b"a\nold\n"})
    git(root, "add", "a.py")
    os.chmod(root / "a.py", 0o444)
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1
    assert "a.py: refused" in result.stderr and "read-only (mode 0444); nothing written" in result.stderr
    assert (root / "a.py").read_bytes() == b"a\nold\n"


@pytest.mark.parametrize("how", ["file", "folder"])
def test_fix_never_writes_through_a_symlink_out_of_the_work_tree(tmp_path, monkeypatch, tiny_dir, how):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"sub/a.py": b"0\n"})
    write(root, {"sub/a.py": b"a\nold\n"})
    git(root, "add", "sub/a.py")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.py").write_bytes(b"a\nold\n")  # same bytes as staged: the hook sees no unstaged change
    if how == "file":
        (root / "sub/a.py").unlink()
        (root / "sub/a.py").symlink_to(outside / "a.py")
    else:
        shutil.rmtree(root / "sub")
        (root / "sub").symlink_to(outside)
    monkeypatch.chdir(root)
    result = hook("run", "--fix")
    assert result.exit_code == 1
    assert "sub/a.py: refused" in result.stderr
    assert (outside / "a.py").read_bytes() == b"a\nold\n"


def test_under_autocrlf_the_check_diff_applies_and_fix_writes(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    git(root, "config", "core.autocrlf", "true")
    write(root, {"a.py": b"a\nold\nb\n"})  # LF in the working tree; a checkout would write CRLF
    git(root, "add", "a.py")
    assert git(root, "diff").stdout == b""
    monkeypatch.chdir(root)
    checked = hook("run")
    assert checked.exit_code == 1 and b"-old\n+new\n" in checked.stdout_bytes
    applies = subprocess.run(["git", "apply", "--check"], cwd=root, input=checked.stdout_bytes, capture_output=True)
    assert applies.returncode == 0, applies.stderr
    fixed = hook("run", "--fix")
    assert fixed.exit_code == 1 and "a.py: fixed" in fixed.stderr, fixed.output
    assert (root / "a.py").read_bytes() == b"a\nnew\nb\n"


# ------------------------------------------------------------------- bad settings are one-line errors


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            ".cadedit.toml",
            '[[rules]]\nfiles = "[z-a]"\ninstruction = "x"\n',
            "error: .cadedit.toml: rule 1: `files` glob '[z-a]' is not valid (bad character range z-a)",
        ),
        (".cadedit.toml", 'tool = "x"\n', "`tool` must be a table ([tool.cadedit]), not str"),
        ("pyproject.toml", '[tool]\ncadedit = "x"\n', "`tool.cadedit` must be a table ([tool.cadedit]), not str"),
        (".cadedit.toml", "model = " + "[" * 100_000, "cannot read settings (arrays or tables nested too deeply)"),
        (".cadedit.toml", "model = " + "{a = " * 50_000, "cannot read settings (arrays or tables nested too deeply)"),
    ],
    ids=["glob", "tool", "tool.cadedit", "deep-arrays", "deep-tables"],
)
def test_malformed_settings_are_one_line_errors(tmp_path, monkeypatch, name, text, message):
    root = make_repo(tmp_path / "w", None, {"a.py": b"0\n"})
    (root / ".cadedit.toml").unlink()
    (root / name).write_text(text)
    with contextlib.suppress(ConfigError):  # a file that does not parse is not approved: its error is the hook's
        approve_settings(root)
    write(root, {"a.py": b"old\n"})
    git(root, "add", "a.py")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1
    assert message in result.stderr.splitlines()[0] and "internal error" not in result.stderr


def test_a_settings_file_with_a_bom_is_read(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "w", None, {"a.py": b"0\n"})
    (root / ".cadedit.toml").write_bytes(b'\xef\xbb\xbf[[rules]]\nfiles = "*.md"\ninstruction = "x"\n')
    approve_settings(root)
    write(root, {"a.py": b"old\n"})
    git(root, "add", "a.py")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 0, result.output
    assert "no staged file matches a rule" in result.stderr


def test_a_file_name_that_is_not_utf8_is_checked_and_so_are_the_others(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    (root / os.fsdecode(b"\xff.py")).write_bytes(b"old\n")
    write(root, {"z.py": b"old\n"})
    git(root, "add", "-A")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    assert b'diff --git "a/\\377.py" "b/\\377.py"\n' in result.stdout_bytes, result.stderr
    assert b"diff --git a/z.py b/z.py\n" in result.stdout_bytes
    assert "internal error" not in result.stderr
    applied = subprocess.run(["git", "apply", "--check"], cwd=root, input=result.stdout_bytes, capture_output=True)
    assert applied.returncode == 0, applied.stderr


# ---------------------------------------------------------------------------------- git failures


def test_a_failing_smudge_filter_fails_that_file_in_one_line(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n", "z.py": b"0\n"})
    (root / ".gitattributes").write_text("a.py filter=broken\n")
    git(root, "config", "filter.broken.smudge", "false")
    git(root, "config", "filter.broken.required", "true")
    git(root, "config", "filter.broken.clean", "cat")
    write(root, {"a.py": b"old\n", "z.py": b"old\n"})
    git(root, "add", "-A")
    write(root, {"a.py": b"old\nunstaged\n"})  # the hook must render the staged blob through the filter
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1
    failed = [line for line in result.stderr.splitlines() if "a.py: failed" in line]
    assert failed and "git cat-file failed:" in failed[0], result.stderr
    assert "z.py: would change" in result.stderr and "internal error" not in result.stderr


def test_git_missing_from_path_is_a_one_line_error(tmp_path):
    root = make_repo(tmp_path / "w", None, {"a.py": b"0\n"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_PYTHON")}
    env.update(PATH=str(tmp_path / "empty-bin"), PYTHONPATH=str(PROJECT))
    done = subprocess.run(
        [sys.executable, "-m", "cadedit", "hook", "run"], cwd=root, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 1
    lines = done.stderr.decode().splitlines()
    assert lines[0] == "error: git not found: the hook runs git, and no `git` is on PATH", lines
    assert lines[1] == "hint: install git, or point GIT_PYTHON_GIT_EXECUTABLE at it"


def test_an_unreadable_working_tree_file_is_no_usage_error(tmp_path, monkeypatch):
    """The hook reads the index: a file the user cannot read (mode 000 for a non-root user) is
    checked from its staged content instead of failing click's readable check with exit 2."""
    root = make_repo(tmp_path / "w", None, {"a.py": b"0\n"})
    (root / "notes.txt").write_text("staged\n")
    git(root, "add", "notes.txt")
    monkeypatch.chdir(root)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m, *a, **k: False if str(p).endswith("notes.txt") else real_access(p, m, *a, **k)
    )
    result = hook("run", "notes.txt")
    assert result.exit_code == 0, result.output
    assert "no staged file matches a rule" in result.stderr


def test_under_autocrlf_fix_merges_into_a_partially_staged_lf_file(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    git(root, "config", "core.autocrlf", "true")
    write(root, {"a.py": b"a\nold\nb\n"})
    git(root, "add", "a.py")
    write(root, {"a.py": b"a\nold\nb\nmy unstaged work\n"})
    monkeypatch.chdir(root)
    fixed = hook("run", "--fix")
    assert fixed.exit_code == 1 and "unstaged changes kept" in fixed.stderr, fixed.output
    assert (root / "a.py").read_bytes() == b"a\nnew\nb\nmy unstaged work\n"


def _rule_with_test(root: Path, test: str) -> None:
    (root / ".cadedit.toml").write_text(
        (root / ".cadedit.toml")
        .read_text()
        .replace('instruction = "Rename old to new."', f'instruction = "Rename old to new."\ntest = {test!r}')
    )
    approve_settings(root)


@pytest.mark.parametrize("how", ["symlink", "fifo"])
def test_a_rules_test_never_puts_a_candidate_through_a_link_or_into_a_fifo(tmp_path, monkeypatch, tiny_dir, how):
    """The staged file is regular; in the working tree it is now a link out of the repository, or a FIFO:
    the check-mode test is not run (and nothing blocks), the outside file keeps its bytes."""
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    _rule_with_test(root, "true")
    git(root, "add", ".cadedit.toml")
    write(root, {"a.py": b"a\nold\n"})
    git(root, "add", "a.py")
    outside = tmp_path / "outside.py"
    outside.write_bytes(b"a\nold\n")
    (root / "a.py").unlink()
    if how == "symlink":
        (root / "a.py").symlink_to(outside)
    else:
        os.mkfifo(root / "a.py")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    assert "its rule's test was not run" in result.stderr, result.stderr
    assert outside.read_bytes() == b"a\nold\n"


def test_a_file_name_with_a_newline_stays_on_one_report_line(tmp_path, monkeypatch, tiny_dir):
    script_model(monkeypatch)
    root = make_repo(tmp_path / "w", tiny_dir, {"keep.py": b"0\n"})
    write(root, {"a\nb.py": b"a\nold\n"})
    git(root, "add", "a\nb.py")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    assert 'cadedit hook: "a\\nb.py": would change' in result.stderr, result.stderr


def test_a_rules_test_puts_the_candidate_into_the_file_whose_name_is_not_utf8_not_a_lookalike(
    tmp_path, monkeypatch, tiny_dir
):
    """A staged b"\\xff.py" is tested in place under its own bytes: the decoy "\\ufffd.py" (the name the
    prompt shows it by) is never opened, and the real file holds the candidate while the test runs."""
    script_model(monkeypatch)
    real, decoy = os.fsdecode(b"\xff.py"), os.fsdecode(b"\xef\xbf\xbd.py")
    root = make_repo(tmp_path / "w", tiny_dir, {"keep.py": b"0\n"})
    seen = tmp_path / "seen"
    (tmp_path / "check.sh").write_text(
        f"cat \"$(printf '\\377').py\" > {seen}-real\ncat \"$(printf '\\357\\277\\275').py\" > {seen}-decoy\n"
    )
    _rule_with_test(root, f"sh {tmp_path / 'check.sh'}")
    git(root, "add", ".cadedit.toml")
    (root / real).write_bytes(b"a\nold\n")
    git(root, "add", "--", real)
    (root / decoy).write_bytes(b"decoy, not staged\n")
    before = (root / decoy).stat()
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    assert 'cadedit hook: "\\377.py": would change (+1 -1)' in result.stderr, result.stderr
    assert Path(f"{seen}-real").read_bytes() == b"a\nnew\n"  # the candidate, in the staged file itself
    assert Path(f"{seen}-decoy").read_bytes() == b"decoy, not staged\n"
    assert (root / real).read_bytes() == b"a\nold\n"
    after = (root / decoy).stat()
    assert (root / decoy).read_bytes() == b"decoy, not staged\n"
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_nul_in_a_rules_test_is_a_one_line_error_naming_the_rule(tmp_path, monkeypatch, tiny_dir, loads):
    root = make_repo(tmp_path / "w", tiny_dir, {"a.py": b"0\n"})
    (root / ".cadedit.toml").write_text(
        (root / ".cadedit.toml")
        .read_text()
        .replace('instruction = "Rename old to new."', 'instruction = "Rename old to new."\ntest = "true\\u0000"')
    )
    approve_settings(root)
    write(root, {"a.py": b"a\nold\n"})
    git(root, "add", "-A")
    monkeypatch.chdir(root)
    result = hook("run")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: .cadedit.toml: rule 1: `test` has a NUL character (\\u0000), which no shell command can hold"
    ], result.stderr
    assert "internal error" not in result.stderr and not loads
    assert (root / "a.py").read_bytes() == b"a\nold\n"
