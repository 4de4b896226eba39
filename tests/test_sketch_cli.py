"""`cadedit fix FILE --sketch SKETCH` through the CLI: every sketch form another model writes, merged
without a model (no model folder is given: any model work would fail), and every output path of `fix`
(diff, --write, --check, --json, stdin, `| patch -p1`, `| git apply`, --test, exit codes); the sketches
that cannot be placed are refused with exit 3, their sketch lines named, the file untouched."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

import pytest

from tests.scripting import invoke

APP = textwrap.dedent(
    """\
    import os


    class Store:
        def __init__(self):
            self.items = []

        def add(self, item):
            self.items.append(item)
            return None

        def total(self):
            return sum(self.items) - 1


    def main():
        store = Store()
        store.add(2)
        print(store.total())
    """
)
FIXED = APP.replace("sum(self.items) - 1", "sum(self.items)")
JS = "const a = 1;\n\nfunction area(w, h) {\n  return w + h;\n}\n\nfunction peri(w, h) {\n  return 2 * (w + h);\n}\n"


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


def sketch_fix(work, sketch: str, *args: str, file: str = "app.py", input: bytes | None = None):
    (work / "sketch.txt").write_text(sketch)
    return invoke(["fix", *([file] if file else []), "--sketch", "sketch.txt", *args], input=input)


LAZY = {
    "python comment with context": "# ... existing code ...\n    def total(self):\n        return sum(self.items)\n\n"
    "# ... existing code ...\n",
    "rest of the file": "    def total(self):\n        return sum(self.items)\n    # ... rest of the file ...\n",
    "bare ellipsis": "...\n    def total(self):\n        return sum(self.items)\n...\n",
    "unchanged": "# (unchanged)\n    def total(self):\n        return sum(self.items)\n# (unchanged)\n",
    "unindented method": "# ... existing code ...\ndef total(self):\n    return sum(self.items)\n# ... existing code ...\n",
    "no context": "    # ... existing code ...\n        return sum(self.items)\n    # ... existing code ...\n",
    "no markers, a snippet": "def total(self):\n    return sum(self.items)\n",
    "whole file": FIXED,
}


@pytest.mark.parametrize("sketch", LAZY.values(), ids=LAZY.keys())
def test_a_sketch_is_merged_without_a_model_and_written(work, sketch):
    result = sketch_fix(work, sketch, "--write")
    assert result.exit_code == 0, result.output
    assert (work / "app.py").read_text() == FIXED
    assert "no model" in result.stderr


@pytest.mark.parametrize(
    "marker", ["// ... rest of the file ...", "/* ... */", "  // ... existing code ...", "..."], ids=str
)
def test_javascript_markers_in_its_comment_syntax(work, marker):
    (work / "shapes.js").write_text(JS)
    sketch = f"{marker}\nfunction area(w, h) {{\n  return w * h;\n}}\n{marker}\n"
    result = sketch_fix(work, sketch, "--write", file="shapes.js")
    assert result.exit_code == 0, result.output
    assert (work / "shapes.js").read_text() == JS.replace("return w + h", "return w * h")


def test_the_diff_shows_the_merge_and_leaves_the_file_alone(work):
    result = sketch_fix(work, LAZY["python comment with context"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("diff --git a/app.py b/app.py\n")
    assert "-        return sum(self.items) - 1\n+        return sum(self.items)\n" in result.stdout
    assert (work / "app.py").read_text() == APP
    assert "app.py: +1 -1 lines (lazy sketch, 1 part placed" in result.stderr


def test_search_replace_blocks_several_per_sketch(work):
    sketch = (
        "app.py\n<<<<<<< SEARCH\n    def total(self):\n        return sum(self.items) - 1\n=======\n"
        "    def total(self):\n        return sum(self.items)\n>>>>>>> REPLACE\n\n"
        "<<<<<<< SEARCH\n        store.add(2)\n=======\n        store.add(2)\n        store.add(3)\n>>>>>>> REPLACE\n"
    )
    result = sketch_fix(work, sketch, "--write")
    assert result.exit_code == 0, result.output
    assert (work / "app.py").read_text() == FIXED.replace("store.add(2)\n", "store.add(2)\n    store.add(3)\n")


def test_search_text_that_is_a_little_stale_is_placed_fuzzily(work):
    sketch = (
        "<<<<<<< SEARCH\n    def total(self):\n        return sum(self.items) -1\n=======\n"
        "    def total(self):\n        return sum(self.items)\n>>>>>>> REPLACE\n"
    )
    result = sketch_fix(work, sketch, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model_free"] and data["passed"]
    assert data["files"][0]["placed"][0]["how"] == "fuzzy"
    assert [c["name"] for c in data["files"][0]["checks"]][:2] == ["merge", "syntax"]


def test_a_diff_that_no_longer_applies_is_merged(work):
    stale = (
        "--- a/app.py\n+++ b/app.py\n@@ -40,5 +40,5 @@\n     def total(self):\n"
        "-        return sum(self.items) - 1\n+        return sum(self.items)\n \n \n def mian():\n"
    )
    (work / "stale.diff").write_text(stale)
    # the premise: git apply refuses this diff (its lines moved, its last context line is stale)
    assert subprocess.run(["git", "apply", "--check", "stale.diff"], capture_output=True).returncode
    result = sketch_fix(work, stale, "--write")
    assert result.exit_code == 0, result.output
    assert (work / "app.py").read_text() == FIXED


def test_a_chat_answer_edits_each_named_file_in_one_patch(work, run_cli):
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    (work / "shapes.js").write_text(JS)
    subprocess.run(["git", "add", "."], cwd=work, check=True)
    answer = (
        "Here is the fix.\n\n**app.py**\n```python\n# ... existing code ...\n    def total(self):\n"
        "        return sum(self.items)\n# ... existing code ...\n```\n\nAnd the JavaScript:\n\n"
        "```js shapes.js\nfunction area(w, h) {\n  return w * h;\n}\n// ... rest of the file ...\n```\n"
    )
    (work / "answer.md").write_text(answer)
    done = run_cli("fix", "--sketch", "answer.md", cwd=work)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"diff --git") == 2
    applied = subprocess.run(["git", "apply"], cwd=work, input=done.stdout, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert (work / "app.py").read_text() == FIXED
    assert (work / "shapes.js").read_text() == JS.replace("return w + h", "return w * h")
    subprocess.run(["git", "checkout", "-q", "."], cwd=work, check=True)
    if shutil.which("patch"):
        patched = subprocess.run(["patch", "-p1"], cwd=work, input=done.stdout, capture_output=True)
        assert patched.returncode == 0, patched.stderr
        assert (work / "app.py").read_text() == FIXED


def test_with_file_only_its_blocks_apply(work):
    (work / "shapes.js").write_text(JS)
    answer = "`shapes.js`\n```\nfunction area(w, h) {\n  return w * h;\n}\n// ...\n```\n"
    assert sketch_fix(work, answer, "--write").exit_code == 1  # no block for app.py
    result = sketch_fix(work, answer, "--write", file="shapes.js")
    assert result.exit_code == 0, result.output
    assert (work / "app.py").read_text() == APP


def test_sketch_from_stdin_and_file_from_stdin(work):
    result = invoke(["fix", "app.py", "--sketch", "-"], input=LAZY["python comment with context"].encode())
    assert result.exit_code == 0, result.output
    assert "+        return sum(self.items)\n" in result.stdout
    (work / "sketch.txt").write_text(LAZY["bare ellipsis"])
    piped = invoke(["fix", "-", "--sketch", "sketch.txt"], input=APP.encode())
    assert piped.exit_code == 0, piped.output
    assert piped.stdout == FIXED


def test_check_exits_1_when_the_sketch_would_change_the_file(work):
    assert sketch_fix(work, LAZY["whole file"], "--check").exit_code == 1
    assert sketch_fix(work, APP, "--check").exit_code == 0
    assert (work / "app.py").read_text() == APP


@pytest.mark.parametrize(
    "sketch, lines",
    [
        (
            "# ...\n        return len(self.items)\n# ...\n",
            "sketch lines 2",
        ),  # no context, and nothing like it is one place
        ("# ...\n    def total(self):\n        return round(sum(self.items), 2)\n# ...\n", "sketch lines 3"),
        (
            "<<<<<<< SEARCH\n    def missing(self):\n=======\n    def found(self):\n>>>>>>> REPLACE\n",
            "sketch lines 1-5",
        ),
        ("# ...\n        return sum(self.items)\n\n\ndef helper():\n    pass\n# ...\n", "sketch lines 2-6"),
    ],
    ids=["no anchor", "replace or insert", "search matches nothing", "new code between markers"],
)
def test_a_sketch_that_cannot_be_placed_is_refused_with_exit_3(work, sketch, lines):
    result = sketch_fix(work, sketch, "--write")
    assert result.exit_code == 3, result.output
    assert lines in result.stderr and "nothing was written" in result.stderr
    assert (work / "app.py").read_text() == APP


def test_an_ambiguous_stretch_is_refused_not_guessed(work):
    (work / "twice.py").write_text("def a():\n    x = 1\n    return x\n\n\ndef b():\n    x = 1\n    return x\n")
    result = sketch_fix(work, "# ...\n    x = 1\n    return x + 1\n# ...\n", "--write", file="twice.py")
    assert result.exit_code == 3, result.output
    assert "sketch lines 2-3" in result.stderr and "2 places" in result.stderr


def test_a_merge_that_drops_a_definition_fails_the_code_checks(work):
    result = sketch_fix(
        work,
        FIXED.replace("    def add(self, item):\n        self.items.append(item)\n        return None\n\n", ""),
        "--write",
    )
    assert result.exit_code == 3, result.output
    assert "fails its checks" in result.stderr
    assert (work / "app.py").read_text() == APP


def test_test_decides_and_the_file_is_put_back_when_it_fails(work):
    result = sketch_fix(work, LAZY["whole file"], "--write", "--test", "grep -q 'items) - 1' app.py")
    assert result.exit_code == 3, result.output
    assert (work / "app.py").read_text() == APP
    result = sketch_fix(work, LAZY["whole file"], "--write", "--test", "grep -q 'sum(self.items)$' app.py")
    assert result.exit_code == 0, result.output
    assert (work / "app.py").read_text() == FIXED


@pytest.mark.parametrize(
    "args, code, said",
    [
        (["app.py", "Fix it", "--sketch", "sketch.txt"], 2, "give no instruction"),
        (["app.py", "--sketch", "sketch.txt", "--lines", "3-4"], 2, "drop --lines"),
        (["app.py", "--sketch", "nope.txt"], 1, "nope.txt"),
        (["--sketch", "sketch.txt"], 1, "names no file"),
        (["app.py", "--sketch", "sketch.txt", "--test", "auto"], 2, "not with --sketch"),
    ],
)
def test_bad_input_is_a_one_line_error(work, args, code, said):
    (work / "sketch.txt").write_text(LAZY["bare ellipsis"])
    result = invoke(["fix", *args])
    assert result.exit_code == code, result.output
    assert said in result.output
    assert (work / "app.py").read_text() == APP


def test_an_answer_cut_off_inside_a_fence_is_refused(work):
    result = sketch_fix(work, "Here:\n```python\ndef total(self):\n", "--write")
    assert result.exit_code == 1 and "never closed" in result.stderr
