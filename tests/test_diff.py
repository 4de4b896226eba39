"""Unified diffs apply byte-exactly with the real patch(1) and git apply, parse back with unidiff,
render in colour only on a terminal; atomic writes keep the mode and refuse a changed file."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unidiff import PatchSet

from cadedit.text import diff as diffmod
from cadedit.text.diff import NO_NEWLINE, count_changes, diff_lines, show, unified_diff, write_atomic
from cadedit.text.document import Document
from cadedit.errors import ApplyError

needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) not installed")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")

# (before, after) pairs that break naive diffs: line endings, final newlines, empty files, BOM, blanks.
CASES = {
    "crlf": ("a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"),
    "lf_to_crlf": ("a\nb\n", "a\r\nb\r\n"),
    "no_final_newline": ("a\nb\nc", "a\nb\nC"),
    "add_final_newline": ("a\nb", "a\nb\n"),
    "drop_final_newline": ("a\nb\n", "a\nb"),
    "crlf_no_final_newline": ("x\r\ny", "x\r\ny\r\nz"),
    "cr_only": ("a\rb\rc\r", "a\rB\rc\r"),
    "mixed": ("a\r\nb\nc\rd", "a\nb\r\nc\rd\n"),
    "empty_before": ("", "x\ny\n"),
    "empty_after": ("x\ny\n", ""),
    "bom_removed": ("\ufeffa\nb\n", "a\nb\n"),
    "blank_runs_tabs_trailing_spaces": ("a\n\n\n\tb  \n", "a\n\n\tb \n\n"),
    "far_apart": (
        "".join(f"{k}\n" for k in range(40)),
        "".join(f"{k if k not in (3, 30) else 'x'}\n" for k in range(40)),
    ),
}
PATHS = ["x.py", "pkg/sub/mod.py", "dir with space/my file.py"]


def unidiff_apply(before: str, diff_text: str) -> str:
    """Apply a single-file diff as unidiff parses it: an independent reading of the same text."""
    source = diff_lines(before)
    if not diff_text:
        return before
    out: list[str] = []
    k = 0
    for hunk in PatchSet(io.StringIO(diff_text))[0]:
        start = hunk.source_start - 1 if hunk.source_length else hunk.source_start
        out += source[k:start]
        k = start
        last = None
        for line in hunk:
            if line.line_type == "\\":  # the line before it has no "\n" in the file
                if last in (" ", "+"):
                    out[-1] = out[-1][:-1]
                continue
            last = line.line_type
            if line.line_type in (" ", "-"):
                k += 1
            if line.line_type in (" ", "+"):
                out.append(line.value)
    return "".join(out + source[k:])


def apply_with(tool: str, before: str, after: str, path: str, root: Path) -> bytes:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(before.encode())
    command = ["patch", "-p1", "--quiet", "--force"] if tool == "patch" else ["git", "apply", "-"]
    done = subprocess.run(command, cwd=root, input=unified_diff(before, after, path).encode(), capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return target.read_bytes()


@needs_patch
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_patch_p1_reproduces_after_exactly(case, path, tmp_path):
    before, after = CASES[case]
    assert apply_with("patch", before, after, path, tmp_path) == after.encode()


@needs_git
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_git_apply_reproduces_after_exactly(case, path, tmp_path):
    before, after = CASES[case]
    assert apply_with("git", before, after, path, tmp_path) == after.encode()


@pytest.mark.parametrize("case", sorted(CASES))
def test_unidiff_parses_it_back(case):
    before, after = CASES[case]
    text = unified_diff(before, after, "pkg/x.py")
    patched = PatchSet(io.StringIO(text))
    assert [f.path for f in patched] == ["pkg/x.py"]
    assert (patched[0].added, patched[0].removed) == count_changes(text)
    assert unidiff_apply(before, text) == after


def test_exact_text_of_a_small_diff():
    text = unified_diff("a\nb\nc", "a\nB\nc", "src/m.py")
    assert text == (
        "diff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n"
        "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + NO_NEWLINE
    )


def test_crlf_stays_in_the_line_content():
    text = unified_diff("a\r\nb\r\n", "a\r\nc\r\n", "w.txt")
    assert text.endswith("@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n")


def test_hunk_ranges_for_empty_and_single_line_sides():
    assert "@@ -0,0 +1,2 @@\n" in unified_diff("", "x\ny\n", "f")
    assert "@@ -1,2 +0,0 @@\n" in unified_diff("x\ny\n", "", "f")
    assert "@@ -1 +1 @@\n" in unified_diff("x\n", "y\n", "f")


def test_context_splits_far_apart_changes_into_hunks():
    before, after = CASES["far_apart"]
    assert unified_diff(before, after, "f").count("\n@@ ") == 2
    assert unified_diff(before, after, "f", context=30).count("\n@@ ") == 1


def test_no_change_is_an_empty_diff():
    assert unified_diff("same\r\n", "same\r\n", "f") == ""


def test_header_names_are_quoted_like_git():
    text = unified_diff("a\n", "b\n", 'odd"name\tx.py')
    assert text.startswith('diff --git "a/odd\\"name\\tx.py" "b/odd\\"name\\tx.py"\n--- "a/odd\\"name\\tx.py"\n')
    assert "--- a/my file.py\t\n+++ b/my file.py\t\n" in unified_diff("a\n", "b\n", "my file.py")


lines = st.lists(
    st.tuples(st.sampled_from(["a", "b", "", " x\t", "\u00e9", "<gen>"]), st.sampled_from(["\n", "\r\n", "\r"])),
    max_size=10,
).map(lambda pairs: "".join(b + t for b, t in pairs))
texts = st.tuples(lines, st.sampled_from(["", "tail", "\r"])).map("".join)


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_property_unidiff_reconstructs_after(before, after):
    text = unified_diff(before, after, "p.txt")
    assert (text == "") == (before == after)
    assert unidiff_apply(before, text) == after


@needs_git
@settings(max_examples=25, deadline=None)
@given(texts, texts)
def test_property_git_apply_reconstructs_after(tmp_path_factory, before, after):
    if before == after:
        return
    assert apply_with("git", before, after, "d/p.txt", tmp_path_factory.mktemp("g")) == after.encode()


class _Stream(io.TextIOWrapper):
    def __init__(self, tty: bool):
        super().__init__(io.BytesIO(), encoding="utf-8", newline="")
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_show_writes_exact_bytes_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    stream = _Stream(tty=False)
    text = unified_diff("a\r\nb", "a\r\nc", "f")
    show(text, stream)
    stream.flush()
    assert stream.buffer.getvalue() == text.encode()


def test_show_colours_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    stream = _Stream(tty=True)
    show(unified_diff("a\r\nb\n", "a\r\nc\n", "f"), stream)
    stream.flush()
    shown = stream.buffer.getvalue().decode()
    assert "\x1b[" in shown and "\r" not in shown and "^M" in shown
    assert "-b" in shown and "+c" in shown


def test_count_changes_ignores_headers():
    assert count_changes(unified_diff("a\nb\n", "a\nc\nd\n", "f")) == (2, 1)


# --- atomic writes ---------------------------------------------------------------------------


def _read(path: Path) -> Document:
    return Document.read(path)


def test_write_atomic_writes_bytes_and_keeps_mode(tmp_path):
    target = tmp_path / "run.sh"
    target.write_bytes(b"#!/bin/sh\r\necho a\r\n")
    target.chmod(0o751)
    write_atomic(_read(target), "#!/bin/sh\r\necho b")
    assert target.read_bytes() == b"#!/bin/sh\r\necho b"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.sh"]  # no temp file left


def test_write_atomic_replaces_through_a_new_inode(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old\n")
    inode = target.stat().st_ino
    write_atomic(_read(target), "new\n")
    assert target.stat().st_ino != inode and target.read_text() == "new\n"


def test_write_atomic_keeps_a_symlink(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_atomic(_read(link), "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


@pytest.mark.parametrize("change", ["content", "same_size_content", "mtime_only", "deleted"])
def test_write_atomic_refuses_a_file_changed_after_reading(tmp_path, change):
    target = tmp_path / "f.txt"
    target.write_text("one\ntwo\n")
    document = _read(target)
    if change == "content":
        target.write_text("one\ntwo\nthree\n")
    elif change == "same_size_content":
        stamp = target.stat().st_mtime_ns
        target.write_text("ONE\ntwo\n")
        os.utime(target, ns=(stamp, stamp))  # same size and mtime: only the bytes tell
    elif change == "mtime_only":
        os.utime(target, ns=(1, 1))
    else:
        target.unlink()
    expected = target.read_bytes() if target.exists() else None
    with pytest.raises(ApplyError) as info:
        write_atomic(document, "edited\n")
    assert "f.txt" in info.value.message
    assert (target.read_bytes() if target.exists() else None) == expected
    assert [p.name for p in tmp_path.iterdir()] == ([target.name] if expected is not None else [])


def test_write_atomic_failure_leaves_the_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    target.write_text("keep\n")
    document = _read(target)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(diffmod.os, "replace", broken_replace)
    with pytest.raises(ApplyError, match="cannot write .No space left on device"):
        write_atomic(document, "lost\n")
    assert target.read_text() == "keep\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


HUMANEVALFIX = Path(__file__).resolve().parents[2] / "shared" / "data" / "humanevalfix"


@needs_patch
@needs_git
@pytest.mark.skipif(not HUMANEVALFIX.is_dir(), reason="the shared HumanEvalFix data is not beside the repository")
@pytest.mark.parametrize("tool", ["patch", "git"])
def test_humanevalfix_328_pairs_in_one_multi_file_diff(tmp_path, tool):
    """Every buggy -> fixed pair of HumanEvalFix (Python and JS), as one patch over 328 files."""
    import json

    pairs = {}
    for lang in ("python", "js"):
        for line in (HUMANEVALFIX / f"humanevalfix_{lang}.jsonl").read_text().splitlines():
            record = json.loads(line)
            name = record["task_id"].replace("/", "_") + (".py" if lang == "python" else ".js")
            pairs[f"{lang}/{name}"] = (
                record["prompt"] + record["buggy_solution"],
                record["prompt"] + record["canonical_solution"],
            )
    assert len(pairs) == 328
    for path, (before, _) in pairs.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_bytes(before.encode())
    text = "".join(unified_diff(before, after, path) for path, (before, after) in pairs.items())
    command = ["patch", "-p1", "--quiet", "--force"] if tool == "patch" else ["git", "apply", "-"]
    done = subprocess.run(command, cwd=tmp_path, input=text.encode(), capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {path: (tmp_path / path).read_bytes() for path in pairs} == {p: a.encode() for p, (_, a) in pairs.items()}
