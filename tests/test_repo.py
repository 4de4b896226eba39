"""cadedit.git.repo on real git repositories, with an injected deterministic edit in place of a model:
settings, globs, staged-file selection, staged blobs (not the working tree), check and fix modes,
partially staged files (unstaged hunks survive byte for byte, overlaps are refused untouched),
hook install/uninstall and diff paths."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from cadedit.git import repo as r
from cadedit.text.document import Document
from cadedit.errors import ConfigError, ModelError
from tests.conftest import approve_settings

SETTINGS = '[[rules]]\nfiles = "*.py"\ninstruction = "old->new"\n'


@pytest.fixture(autouse=True)
def no_outer_git(monkeypatch):
    """A test run inside a git hook must not see that hook's repository or index."""
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX"):
        monkeypatch.delenv(var, raising=False)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True).stdout.decode()


def make_repo(root: Path, files: dict[str, bytes], settings: str | None = SETTINGS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    if settings is not None:
        (root / ".cadedit.toml").write_text(settings)
        approve_settings(root)
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def write(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def replace_edit(document: Document, rule: r.Rule, path: str = "") -> str:
    """The stand-in model: the rule's instruction "a->b" replaces every a with b."""
    old, new = rule.instruction.split("->")
    return document.text.replace(old, new)


def staged_blob(root: Path, path: str) -> bytes:
    return subprocess.run(["git", "show", f":{path}"], cwd=root, check=True, capture_output=True).stdout


def hook_run(root: Path, fix: bool, files=None, edit=replace_edit) -> list[r.Outcome]:
    repo = r.open_repo(root)
    targets = r.plan(repo, r.load_settings(root), files)
    return list(r.run(repo, targets, edit, fix=fix))


# ---------------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "pattern, path, expected",
    [
        ("*.py", "a.py", True),
        ("*.py", "src/deep/a.py", True),
        ("*.py", "a.pyc", False),
        ("test_*.py", "tests/test_a.py", True),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/x/a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**/*.py", "lib/src/a.py", False),
        ("/top.py", "top.py", True),
        ("/top.py", "sub/top.py", False),
        ("[ab].py", "x/b.py", True),
        ("[!ab].py", "a.py", False),
        ("a?.py", "ab.py", True),
        ("a?.py", "a/.py", False),
        ("a+b.py", "a+b.py", True),
    ],
)
def test_glob_matches_repository_paths_like_gitignore(pattern, path, expected):
    assert r.glob_match(pattern, path) is expected


def test_settings_from_cadedit_toml(tmp_path):
    (tmp_path / ".cadedit.toml").write_text(
        'model = "some/model"\n[[rules]]\nfiles = ["*.py", "*.pyi"]\ninstruction = "x"\n'
        '[[rules]]\nfiles = "docs/*.md"\ninstruction = "y"\n'
    )
    approve_settings(tmp_path)
    settings = r.load_settings(tmp_path)
    assert settings.model == "some/model"
    assert settings.rules == (r.Rule(("*.py", "*.pyi"), "x"), r.Rule(("docs/*.md",), "y"))
    assert settings.source == ".cadedit.toml"


def test_settings_from_pyproject_and_cadedit_toml_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\n[tool.cadedit]\n[[tool.cadedit.rules]]\nfiles = "*.py"\ninstruction = "from pyproject"\n'
    )
    approve_settings(tmp_path)
    assert r.load_settings(tmp_path).rules[0].instruction == "from pyproject"
    assert r.load_settings(tmp_path).model is None
    (tmp_path / ".cadedit.toml").write_text('[[rules]]\nfiles = "*.py"\ninstruction = "own file"\n')
    approve_settings(tmp_path)
    assert r.load_settings(tmp_path).rules[0].instruction == "own file"
    (tmp_path / ".cadedit.toml").write_text('[[tool.cadedit.rules]]\nfiles = "*.py"\ninstruction = "own, nested"\n')
    approve_settings(tmp_path)
    assert r.load_settings(tmp_path).rules[0].instruction == "own, nested"


@pytest.mark.parametrize(
    "text, expected",
    [
        (None, "no cadedit settings"),
        ("model = 'm'\n", "no [[rules]]"),
        ('[[rules]]\nfiles = "*.py"\ninstructions = "typo"\n', "unknown key `instructions`"),
        ('[[rules]]\nfiles = "*.py"\n', "`instruction` must be"),
        ('[[rules]]\nfiles = 3\ninstruction = "x"\n', "`files` must be"),
        ('model = ""\n[[rules]]\nfiles = "*"\ninstruction = "x"\n', "`model` must be"),
        ('mode = "fast"\n[[rules]]\nfiles = "*"\ninstruction = "x"\n', "`mode` must be one of"),
        ('tries = 0\n[[rules]]\nfiles = "*"\ninstruction = "x"\n', "`tries` must be"),
        ('[[rules]]\nfiles = "*"\ninstruction = "x"\ntest = ""\n', "`test` must be"),
        ("[[rules]\n", "cannot read settings"),
    ],
)
def test_bad_or_missing_settings_say_what_to_do(tmp_path, text, expected):
    if text is not None:
        (tmp_path / ".cadedit.toml").write_text(text)
        with contextlib.suppress(ConfigError):  # a file that does not parse is not approved: its error is the hook's
            approve_settings(tmp_path)
    with pytest.raises(ConfigError) as info:
        r.load_settings(tmp_path)
    assert expected in info.value.message
    if text is None:
        assert ".cadedit.toml" in info.value.hint and "[[rules]]" in info.value.hint


# -------------------------------------------------------------------------- staged selection


def test_plan_takes_staged_changes_that_a_rule_matches(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"old\n", "b.py": b"old\n", "c.txt": b"old\n", "gone.py": b"x\n"})
    write(root, {"a.py": b"old 2\n", "b.py": b"old 2\n", "c.txt": b"old 2\n", "sub/new.py": b"old\n"})
    git(root, "add", "a.py", "c.txt", "sub/new.py")
    git(root, "rm", "-q", "gone.py")
    repo = r.open_repo(root)
    targets = r.plan(repo, r.load_settings(root))
    # b.py changed but is not staged; c.txt matches no rule; gone.py is deleted.
    assert [t.path for t in targets] == ["a.py", "sub/new.py"]
    assert targets[0].rules == r.load_settings(root).rules
    assert [t.path for t in r.plan(repo, r.load_settings(root), ["b.py", "c.txt", "nope.py"])] == ["b.py"]


def test_plan_before_the_first_commit(tmp_path):
    root = tmp_path / "w"
    root.mkdir()
    git(root, "init", "-q")
    write(root, {".cadedit.toml": SETTINGS.encode(), "a.py": b"old\n"})
    approve_settings(root)
    git(root, "add", "a.py")
    assert [t.path for t in r.plan(r.open_repo(root), r.load_settings(root))] == ["a.py"]


def test_every_matching_rule_applies_in_order(tmp_path):
    settings = SETTINGS + '[[rules]]\nfiles = "a.py"\ninstruction = "new->newer"\n'
    root = make_repo(tmp_path / "w", {"a.py": b"1\n", "b.py": b"1\n"}, settings)
    write(root, {"a.py": b"old\n", "b.py": b"old\n"})
    git(root, "add", "a.py", "b.py")
    outcomes = hook_run(root, fix=True)
    assert (root / "a.py").read_bytes() == b"newer\n"
    assert (root / "b.py").read_bytes() == b"new\n"
    assert [o.status for o in outcomes] == [r.Status.FIXED, r.Status.FIXED]


def test_the_index_git_hands_the_hook_is_the_one_read(tmp_path, monkeypatch):
    """`git commit FILE` and `git commit -a` run the hook with GIT_INDEX_FILE set to a temporary index."""
    root = make_repo(tmp_path / "w", {"a.py": b"1\n"})
    write(root, {"a.py": b"old, in the temporary index\n"})
    temporary = tmp_path / "next-index"
    temporary.write_bytes((root / ".git/index").read_bytes())
    subprocess.run(["git", "add", "a.py"], cwd=root, check=True, env={**os.environ, "GIT_INDEX_FILE": str(temporary)})
    write(root, {"a.py": b"old, only in the working tree\n"})
    monkeypatch.setenv("GIT_INDEX_FILE", str(temporary))
    [outcome] = hook_run(root, fix=False)
    assert "+new, in the temporary index\n" in outcome.diff


# ----------------------------------------------------------------------------- check mode


def test_check_edits_the_staged_blob_not_the_working_tree(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"keep\n"})
    write(root, {"a.py": b"keep\nold staged\n"})
    git(root, "add", "a.py")
    write(root, {"a.py": b"keep\nold staged\nold unstaged\n"})
    seen = []
    outcomes = hook_run(root, fix=False, edit=lambda d, i, p: seen.append(d.text) or replace_edit(d, i))
    assert seen == ["keep\nold staged\n"]
    assert outcomes == [
        r.Outcome("a.py", r.Status.WOULD_CHANGE, outcomes[0].diff),
    ]
    assert "-old staged\n+new staged\n" in outcomes[0].diff
    # check mode writes nothing, neither the working tree nor the index.
    assert (root / "a.py").read_bytes() == b"keep\nold staged\nold unstaged\n"
    assert staged_blob(root, "a.py") == b"keep\nold staged\n"


def test_check_diff_applies_to_the_index_with_git_apply(tmp_path):
    root = make_repo(tmp_path / "w", {"sub/a.py": b"x\r\nold\r\ny"})
    write(root, {"sub/a.py": b"x\r\nold\r\nold"})
    git(root, "add", "sub/a.py")
    [outcome] = hook_run(root, fix=False)
    assert outcome.diff.startswith("diff --git a/sub/a.py b/sub/a.py\n")
    subprocess.run(["git", "apply", "--cached", "-"], cwd=root, input=outcome.diff.encode(), check=True)
    assert staged_blob(root, "sub/a.py") == b"x\r\nnew\r\nnew"


def test_unchanged_and_failed_files(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"1\n", "bin.py": b"1\n"})
    write(root, {"a.py": b"nothing to replace\n", "bin.py": b"old\x00\n"})
    git(root, "add", "a.py", "bin.py")
    outcomes = {o.path: o for o in hook_run(root, fix=False)}
    assert outcomes["a.py"].status is r.Status.UNCHANGED
    assert outcomes["bin.py"].status is r.Status.FAILED and "binary" in outcomes["bin.py"].message


def test_a_model_error_fails_that_file_only(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"1\n", "b.py": b"1\n"})
    write(root, {"a.py": b"old\n", "b.py": b"old\n"})
    git(root, "add", "a.py", "b.py")

    def edit(document, instruction, path):
        if path == "a.py":
            raise ModelError("budget spent")
        return replace_edit(document, instruction)

    outcomes = hook_run(root, fix=False, edit=edit)
    assert [(o.path, o.status) for o in outcomes] == [("a.py", r.Status.FAILED), ("b.py", r.Status.WOULD_CHANGE)]
    assert outcomes[0].message == "budget spent"


# ------------------------------------------------------------------------------- fix mode


@pytest.mark.parametrize(
    "before, after",
    [
        (b"a\nold\nb\n", b"a\nnew\nb\n"),
        (b"a\r\nold\r\nb\r\n", b"a\r\nnew\r\nb\r\n"),
        (b"a\nb\nold", b"a\nb\nnew"),
    ],
    ids=["lf", "crlf", "no-final-newline"],
)
def test_fix_writes_the_working_tree_and_leaves_the_index(tmp_path, before, after):
    root = make_repo(tmp_path / "w", {"d/a.py": b"0\n"})
    write(root, {"d/a.py": before})
    git(root, "add", "d/a.py")
    [outcome] = hook_run(root, fix=True)
    assert outcome.status is r.Status.FIXED
    assert (root / "d/a.py").read_bytes() == after
    assert staged_blob(root, "d/a.py") == before


# Partially staged: line 2 is staged ("old" -> edited), line 9 is an unstaged change far away.
BASE = b"".join(b"line %d\n" % k for k in range(1, 11))
STAGED = BASE.replace(b"line 2\n", b"old 2\n")
WORKING = STAGED.replace(b"line 9\n", b"unstaged work 9\n")


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("final_newline", [True, False], ids=["eol", "no-eol"])
def test_fix_on_a_partially_staged_file_keeps_the_unstaged_hunks(tmp_path, newline, final_newline):
    def shape(data: bytes) -> bytes:
        data = data.replace(b"\n", newline)
        return data if final_newline else data[: -len(newline)]

    root = make_repo(tmp_path / "w", {"a.py": shape(BASE)})
    write(root, {"a.py": shape(STAGED)})
    git(root, "add", "a.py")
    write(root, {"a.py": shape(WORKING)})
    [outcome] = hook_run(root, fix=True)
    assert outcome.status is r.Status.FIXED and "unstaged changes kept" in outcome.message
    assert (root / "a.py").read_bytes() == shape(WORKING.replace(b"old 2", b"new 2"))
    assert staged_blob(root, "a.py") == shape(STAGED)
    # What is left unstaged is exactly the fix plus the user's own unstaged hunk.
    unstaged = git(root, "diff", "--", "a.py")
    assert "+new 2" in unstaged and "+unstaged work 9" in unstaged


def test_fix_refuses_when_the_edit_overlaps_unstaged_work(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": BASE})
    write(root, {"a.py": STAGED})
    git(root, "add", "a.py")
    working = STAGED.replace(b"old 2\n", b"old 2 and unstaged work\n")
    write(root, {"a.py": working})
    [outcome] = hook_run(root, fix=True)
    assert outcome.status is r.Status.REFUSED and "overlaps unstaged changes" in outcome.message
    assert outcome.diff  # the user still sees what the hook wanted
    assert (root / "a.py").read_bytes() == working
    assert not list(root.glob(".a.py.*"))  # no temporary files left behind


def test_fix_refuses_a_file_deleted_from_the_working_tree(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"1\n"})
    write(root, {"a.py": b"old\n"})
    git(root, "add", "a.py")
    (root / "a.py").unlink()
    [outcome] = hook_run(root, fix=True)
    assert outcome.status is r.Status.REFUSED and "no such file" in outcome.message
    assert not (root / "a.py").exists()


def test_merge3_conflict_is_none_and_clean_merge_is_exact(tmp_path):
    base, ours, theirs = b"a\nb\nc\nd\ne\n", b"a\nb\nc\nd\nE\n", b"A\nb\nc\nd\ne\n"
    assert r.merge3(tmp_path, ours, base, theirs) == b"A\nb\nc\nd\nE\n"
    assert r.merge3(tmp_path, b"X\nb\nc\nd\ne\n", base, theirs) is None


# ----------------------------------------------------------------------------------- install


def test_install_and_uninstall_our_hook(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"1\n"})
    repo = r.open_repo(root)
    hook, backup = r.install_hook(repo)
    assert hook == root / ".git/hooks/pre-commit" and backup is None
    assert os.access(hook, os.X_OK) and r.HOOK_MARKER in hook.read_text()
    assert "cadedit hook run" in hook.read_text()
    assert r.install_hook(repo) == (hook, None)  # ours: reinstalling is fine
    assert r.uninstall_hook(repo) == (hook, None)
    assert not hook.exists()
    with pytest.raises(ConfigError, match="no pre-commit hook installed"):
        r.uninstall_hook(repo)


def test_a_foreign_hook_is_protected(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"1\n"})
    repo = r.open_repo(root)
    hook = root / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\necho mine\n")
    with pytest.raises(ConfigError, match="did not write") as info:
        r.install_hook(repo)
    assert "--force" in info.value.hint
    with pytest.raises(ConfigError, match="not written by cadedit"):
        r.uninstall_hook(repo)
    assert hook.read_text() == "#!/bin/sh\necho mine\n"
    # --force keeps the foreign hook aside; uninstall puts it back.
    assert r.install_hook(repo, force=True) == (hook, hook.with_name("pre-commit.cadedit-backup"))
    assert r.is_ours(hook)
    assert r.uninstall_hook(repo) == (hook, hook.with_name("pre-commit.cadedit-backup"))
    assert hook.read_text() == "#!/bin/sh\necho mine\n"


def test_install_honours_core_hooks_path(tmp_path):
    root = make_repo(tmp_path / "w", {"a.py": b"1\n"})
    git(root, "config", "core.hooksPath", "githooks")
    hook, _ = r.install_hook(r.open_repo(root))
    assert hook == root / "githooks/pre-commit" and hook.exists()


# ------------------------------------------------------------------------------------ paths


def test_diff_paths_are_relative_to_the_repository_root_or_the_working_directory(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "w", {"sub/dir/a.py": b"1\n"})
    monkeypatch.chdir(root / "sub")
    assert r.diff_path("dir/a.py") == "sub/dir/a.py"
    assert r.diff_path(root / "sub/dir/a.py") == "sub/dir/a.py"
    plain = tmp_path / "plain"
    (plain / "x").mkdir(parents=True)
    monkeypatch.chdir(plain)
    assert r.diff_path("x/a.py") == "x/a.py"
    assert r.repo_relative(root, str(root / "sub/dir/a.py")) == "sub/dir/a.py"
    with pytest.raises(ConfigError, match="outside the repository"):
        r.repo_relative(root, "x/a.py")


def test_outside_a_repository_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not inside a git repository"):
        r.open_repo(tmp_path)
