"""`cadedit fix ... | patch -p1` and `| git apply` leave exactly the file `--write` leaves: LF, CRLF,
no final newline, files in subdirectories, inside a git repository (paths from its root, also when
run from a subdirectory) and outside one (paths from the working directory); several files make one
patch and load the model once. The tiny random Qwen2 runs the real decode loop with its choices
scripted to a known edit (as in test_fix_cli), so the expected bytes are exact: in the default verify
mode it 'retypes' the edited file in its fence, in program mode it spells the oracle program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import cadedit.backends.model
from cadedit.text.document import Document
from cadedit.options import Mode
from tests.scripting import editing, every_try, inject_picks, invoke

pytestmark = pytest.mark.skipif(not (shutil.which("patch") and shutil.which("git")), reason="needs patch and git")


def edit_bytes(data: bytes) -> bytes:
    """The edit the scripted model makes: `old` becomes `new`, a line holding `drop me` goes."""
    lines = Document.from_bytes(data).lines
    return "".join(line.replace("old", "new") for line in lines if "drop me" not in line).encode()


def script_model(monkeypatch, edit: Callable[[bytes], bytes] = edit_bytes) -> list:
    """Make the model 'choose' `edit` through the real decode loop, in whatever mode it runs
    (tries.edit_verified's picks seam, tests/scripting.py); returns the modes of the decodes made."""
    modes: list = []

    def after(document: Document) -> Document:
        return Document.from_bytes(edit(document.to_bytes()))

    inject_picks(monkeypatch, every_try(editing(after, lambda prepared: modes.append(prepared.mode))))
    return modes


@pytest.fixture
def scripted(monkeypatch):
    return script_model(monkeypatch)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def make_tree(root: Path, files: dict[str, bytes], in_git: bool) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    if in_git:
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "init")
    return root


def fix(*args: str):
    """`cadedit fix` in its default mode (verify), retyping whole files: the instruction names no region."""
    return invoke(["fix", "--no-scope", *args])


def apply_with(tool: str, tree: Path, diff: bytes, cwd: str = ".") -> None:
    command = ["patch", "-p1", "--batch", "--quiet"] if tool == "patch" else ["git", "apply"]
    proc = subprocess.run(command, cwd=tree / cwd, input=diff, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


SHAPES = {
    "lf": ("a.py", b"keep 1\nold 2\nkeep 3\ndrop me 4\nkeep 5\n"),
    "crlf": ("a.py", b"keep 1\r\nold 2\r\nkeep 3\r\ndrop me 4\r\nkeep 5\r\n"),
    "no-final-newline": ("a.py", b"keep 1\nkeep 2\nold 3"),
    "no-final-newline-kept": ("a.py", b"old 1\nkeep 2\nkeep 3"),
    "subdirectory": ("src/pkg/a.py", b"keep 1\nold 2\n"),
}


@pytest.mark.parametrize("in_git", [True, False], ids=["git", "plain"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_patch_and_git_apply_leave_what_write_leaves(tmp_path, monkeypatch, tiny_dir, scripted, shape, in_git):
    name, before = shape
    base = make_tree(tmp_path / "base", {name: before, "other.py": b"old\n"}, in_git)
    monkeypatch.chdir(base)
    shown = fix(name, "Rename old.", "--model", str(tiny_dir), "-q")
    assert shown.exit_code == 0, shown.output
    assert scripted and set(scripted) == {Mode.VERIFY}  # the default mode
    assert shown.stdout_bytes.startswith(f"diff --git a/{name} b/{name}\n".encode())
    for tool in ("patch", "git"):
        tree = Path(shutil.copytree(base, tmp_path / tool, symlinks=True))
        apply_with(tool, tree, shown.stdout_bytes)
        assert (tree / name).read_bytes() == edit_bytes(before), tool
        assert (tree / "other.py").read_bytes() == b"old\n"
    written = fix(name, "Rename old.", "--model", str(tiny_dir), "-q", "--write")
    assert written.exit_code == 0, written.output
    assert (base / name).read_bytes() == edit_bytes(before)


@pytest.mark.parametrize("shape", [SHAPES["crlf"], SHAPES["no-final-newline"]], ids=["crlf", "no-final-newline"])
def test_program_mode_diffs_apply_too(tmp_path, monkeypatch, tiny_dir, scripted, shape):
    name, before = shape
    base = make_tree(tmp_path / "base", {name: before}, in_git=True)
    monkeypatch.chdir(base)
    shown = fix(name, "Rename old.", "--model", str(tiny_dir), "-q", "--mode", "program")
    assert shown.exit_code == 0, shown.output
    assert set(scripted) == {Mode.PROGRAM}
    for tool in ("patch", "git"):
        tree = Path(shutil.copytree(base, tmp_path / tool))
        apply_with(tool, tree, shown.stdout_bytes)
        assert (tree / name).read_bytes() == edit_bytes(before), tool


def test_from_a_subdirectory_paths_stay_relative_to_the_repository_root(tmp_path, monkeypatch, tiny_dir, scripted):
    name, before = "src/pkg/a.py", b"keep\r\nold\r\nkeep"
    base = make_tree(tmp_path / "base", {name: before}, in_git=True)
    monkeypatch.chdir(base / "src")
    shown = fix("pkg/a.py", "Rename old.", "--model", str(tiny_dir), "-q")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout_bytes.startswith(b"diff --git a/src/pkg/a.py b/src/pkg/a.py\n")
    git_tree = Path(shutil.copytree(base, tmp_path / "git"))
    apply_with("git", git_tree, shown.stdout_bytes, cwd="src")  # git apply from the same subdirectory
    patch_tree = Path(shutil.copytree(base, tmp_path / "patch"))
    apply_with("patch", patch_tree, shown.stdout_bytes)  # patch -p1 from the root
    assert (git_tree / name).read_bytes() == (patch_tree / name).read_bytes() == b"keep\r\nnew\r\nkeep"


def test_several_files_make_one_patch_and_load_the_model_once(tmp_path, monkeypatch, tiny_dir, scripted):
    files = {"a.py": b"old a\r\nkeep\r\n", "src/b.py": b"keep\nold b", "c.py": b"nothing to do\n"}
    base = make_tree(tmp_path / "base", files, in_git=True)
    monkeypatch.chdir(base)
    loads = []
    real_load = cadedit.backends.model.load_model
    monkeypatch.setattr(cadedit.backends.model, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    # c.py needs no change: accepted with --allow-no-change (else a candidate must change the file)
    shown = fix("a.py", "src/b.py", "c.py", "-i", "Rename old.", "--model", str(tiny_dir), "--allow-no-change")
    assert shown.exit_code == 0, shown.output
    assert len(loads) == 1 and "loaded in" in shown.stderr and "c.py: no change" in shown.stderr
    diff = shown.stdout_bytes
    assert diff.count(b"diff --git ") == 2 and b"a/a.py" in diff and b"a/src/b.py" in diff
    for tool in ("patch", "git"):
        tree = Path(shutil.copytree(base, tmp_path / tool))
        apply_with(tool, tree, diff)
        assert {n: (tree / n).read_bytes() for n in files} == {n: edit_bytes(d) for n, d in files.items()}
    checked = fix("a.py", "src/b.py", "-i", "Rename old.", "--model", str(tiny_dir), "--check", "-q")
    assert checked.exit_code == 1 and checked.stdout_bytes == diff.split(b"diff --git a/c.py")[0]
    written = fix(
        "a.py", "src/b.py", "c.py", "-i", "Rename old.", "--model", str(tiny_dir), "--write", "-q", "--allow-no-change"
    )
    assert written.exit_code == 0, written.output
    assert {n: (base / n).read_bytes() for n in files} == {n: edit_bytes(d) for n, d in files.items()}


def test_several_files_say_the_model_loads_once_for_all(tmp_path, monkeypatch, tiny_dir, scripted):
    base = make_tree(tmp_path / "base", {"a.py": b"old a\n", "b.py": b"old b\n"}, in_git=False)
    monkeypatch.chdir(base)
    shown = fix("a.py", "b.py", "-i", "Rename old.", "--model", str(tiny_dir))
    assert shown.exit_code == 0, shown.output
    assert "once for 2 files" in shown.stderr


def test_several_files_write_nothing_if_one_edit_fails(tmp_path, monkeypatch, tiny_dir):
    rewrite = b"".join(b"completely different line %d\n" % k for k in range(30))
    script_model(monkeypatch, lambda data: edit_bytes(data) if b"old" in data else rewrite)
    files = {"a.py": b"old\n", "b.py": b"keep\n"}
    base = make_tree(tmp_path / "base", files, in_git=False)
    monkeypatch.chdir(base)
    result = fix("a.py", "b.py", "-i", "Fix.", "--model", str(tiny_dir), "--write", "--max-new-tokens", "40")
    # exit 3: no try of b.py passed (each ran out of budget), so nothing was written
    assert result.exit_code == 3 and "budget of 40 new tokens" in result.stderr and "b.py" in result.stderr
    assert {n: (base / n).read_bytes() for n in files} == files


@pytest.mark.parametrize(
    "args, message",
    [
        (["a.py", "b.py"], "b.py is a file"),
        (["a.py"], "give FILE"),
        (["a.py", "x", "y"], "give FILE"),
        (["-", "a.py", "-i", "Fix."], "stdin"),
        (["a.py", "b.py", "-i", "Fix.", "--json"], "takes one file"),
    ],
)
def test_file_and_instruction_usage_errors(tmp_path, monkeypatch, args, message):
    make_tree(tmp_path, {"a.py": b"old\n", "b.py": b"old\n"}, in_git=False)
    monkeypatch.chdir(tmp_path)
    result = fix(*args)
    assert result.exit_code == 2 and message in result.output


# The real console-script entry with a real shell pipe; the driver scripts the model like script_model().
DRIVER = """
import pytest
from tests.scripting import scripted
from tests.test_pipes import script_model
from cadedit.cli.root import app
with pytest.MonkeyPatch.context() as mp:
    script_model(mp)
    app(prog_name="cadedit", obj=scripted())
"""


def test_a_real_shell_pipe_into_patch_and_git_apply(tmp_path, tiny_dir):
    name, before = "sub/a.py", b"keep\r\nold\r\ndrop me\r\nend"
    base = make_tree(tmp_path / "base", {name: before}, in_git=True)
    other = Path(shutil.copytree(base, tmp_path / "other"))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    fix_command = f'"{sys.executable}" "{driver}" fix --no-scope {name} "Rename old." --model "{tiny_dir}" -q --threads 1 --dtype fp32'
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    command = f"set -o pipefail; {fix_command} | tee ../patch.diff | patch -p1 && git -C ../other apply < ../patch.diff"
    proc = subprocess.run(
        command, shell=True, executable="/bin/bash", cwd=base, capture_output=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert (base / name).read_bytes() == (other / name).read_bytes() == b"keep\r\nnew\r\nend"
