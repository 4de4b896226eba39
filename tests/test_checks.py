"""Checks on an edit candidate: syntax per language (skipped where it cannot be checked), change,
the feedback for the next try, and tests run with the candidate in place that always put the
user's original bytes back (pass, fail, crash, timeout, a test that edits or deletes the file,
SIGTERM and SIGINT to cadedit) without leaving temporary files."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from cadedit.tries import checks
from cadedit.tries.checks import (
    Candidate,
    Check,
    candidate_in_place,
    change_check,
    feedback,
    run_command,
    run_test,
    syntax_check,
)
from cadedit.errors import ApplyError, ConfigError
from cadedit.text.languages import SUFFIXES, fence_tag, language_of

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
REPO = Path(__file__).resolve().parents[1]
ORIGINAL = b"def add(a, b):\n    return a + b\n"
CANDIDATE = b"def add(a, b):\n    return a - b\n"


# -- languages ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name", "tag"),
    [("a.py", "python", "python"), ("A.PY", "python", "python"), ("x/y.cjs", "javascript", "javascript"),
     ("m.mjs", "javascript", "javascript"), ("t.ts", "typescript", "typescript"), ("c.yml", "yaml", "yaml"),
     ("h.hpp", "cpp", "cpp"), ("run.sh", "bash", "bash")],
)  # fmt: skip
def test_language_of_and_fence_tag(path, name, tag):
    assert language_of(path).name == name
    assert fence_tag(path) == tag


@pytest.mark.parametrize("path", ["<stdin>", "<text>", "Makefile", "notes.txt", "x.PYC"])
def test_unknown_language_has_no_record_and_an_empty_tag(path):
    assert language_of(path) is None
    assert fence_tag(path) == ""


def test_the_prompt_tags_fences_from_this_one_table():
    from cadedit.prompt.messages import language_tag

    for suffix, language in SUFFIXES.items():
        assert language_tag(f"src/x{suffix}") == language.fence
    assert language_tag("<stdin>") == "" and language_tag("notes.unknown") == ""


# -- syntax ------------------------------------------------------------------------------------

BROKEN_PY = "def add(a, b):\n    return a +\n"


def test_python_syntax_error_names_the_line_and_quotes_it():
    check = syntax_check("m.py", ORIGINAL.decode(), BROKEN_PY)
    assert (check.name, check.passed, check.skipped) == ("syntax", False, False)
    assert check.detail == "line 2: invalid syntax"
    assert check.output_tail == "    return a +"


@pytest.mark.parametrize(
    "text",
    [
        "\ufeffx = 1\n",  # a BOM (the Document keeps it as a character) is not a syntax error
        # valid Python, but not under checks.py's own `from __future__ import annotations`:
        "def g():\n    def f() -> (yield): pass\n",
        "print('\\d')\n",  # an invalid escape warns; with warnings as errors compile() would refuse it
    ],
)
def test_python_that_parses_passes(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check = syntax_check("m.py", "x = 1\n", text)
    assert (check.passed, check.skipped) == (True, False)


def test_the_quoted_line_counts_lines_as_the_parser_does_and_is_cut_short():
    check = syntax_check("m.py", "x = 1\n", "s = '\x0c'\r\ny = 2\rz = (" + "1, " * 100 + "\n")
    assert check.detail == "line 3: '(' was never closed"
    assert check.output_tail == "z = (" + ("1, " * 100)[:195] + "…"


def test_python_indentation_error():
    check = syntax_check("m.py", "x = 1\n", "if x:\nprint(x)\n")
    assert not check.passed and check.detail.startswith("line 2: expected an indented block")


@pytest.mark.parametrize(
    ("path", "before", "after", "detail", "source"),
    [
        ("c.json", '{"a": 1}\n', '{"a": 1,\n "b" 2}\n', "line 2, column 6: Expecting ':' delimiter", ' "b" 2}'),
        ("c.toml", "a = 1\n", "a = 1\nb = \n", "line 2, column 5: Invalid value", "b = "),
        ("c.yaml", "a: 1\n", "a: [1,\nb: 2\n", "line 3, column 1: did not find expected ',' or ']'", ""),
    ],
)
def test_data_formats_report_line_and_column(path, before, after, detail, source):
    check = syntax_check(path, before, after)
    assert (check.passed, check.skipped, check.detail, check.output_tail) == (False, False, detail, source)


@pytest.mark.parametrize(
    ("path", "text"),
    [("c.json", '\ufeff{"a": [1, 2]}\n'), ("c.toml", "[t]\na = 1\n"), ("c.yaml", "a: !Ref x\n---\nb: [1]\n")],
)
def test_data_formats_that_parse_pass(path, text):
    check = syntax_check(path, "", text)
    assert (check.passed, check.skipped) == (True, False)


def test_yaml_without_pyyaml_is_skipped_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ModuleNotFoundError
    check = syntax_check("c.yaml", "a: 1\n", "a: [1,\n")
    assert (check.passed, check.skipped) == (True, True)
    assert check.detail == "PyYAML not installed: YAML syntax not checked"


@needs_node
@pytest.mark.parametrize("suffix", [".js", ".mjs", ".cjs"])
def test_javascript_syntax_error_through_node(suffix):
    check = syntax_check(f"app{suffix}", "const a = 1;\n", "const a = 1;\nfunction f( {\n  return 1;\n}\n")
    assert (check.passed, check.skipped) == (False, False)
    assert check.detail == "line 3: Unexpected number"
    assert check.output_tail == "  return 1;"
    assert "<candidate>" not in check.detail and "cadedit-check-" not in check.detail


@needs_node
@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("a.js", "module.exports = 1;\n"),
        ("a.js", "export const x = 1;\n"),
        ("a.mjs", "import fs from 'fs';\nexport default fs;\n"),
    ],
)
def test_javascript_that_parses_passes_as_commonjs_or_module(path, text):
    check = syntax_check(path, "", text)
    assert (check.passed, check.skipped) == (True, False)


def test_a_js_file_passes_when_it_parses_as_an_es_module(monkeypatch, tmp_path):
    # A node older than 20.19 (no module detection) refuses `export` in a .js file that the
    # project's package.json declares a module; the check must not fail it. Stub of such a node:
    fake = tmp_path / "node"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$2" in *.mjs) exit 0;; esac\n'
        "while read -r line; do case \"$line\" in export*)\n"
        '  printf "%s:4\\n\\nSyntaxError: Unexpected token \'export\'\\n" "$2" >&2; exit 1;; esac\n'
        'done < "$2"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert syntax_check("a.js", "", "const x = 1;\n\n\nexport { x };\n").passed
    check = syntax_check("a.cjs", "", "const x = 1;\n\n\nexport { x };\n")  # CommonJS only: no second chance
    assert (check.passed, check.detail, check.output_tail) == (
        False,
        "line 4: Unexpected token 'export'",
        "export { x };",
    )


@pytest.mark.parametrize(
    ("script", "note"),
    [("exit 3", "no output"), ("echo 'TypeError [ERR_X]: odd' >&2; exit 1", "TypeError [ERR_X]: odd")],
)
def test_node_failing_without_a_syntax_error_is_skipped_with_a_note(monkeypatch, tmp_path, script, note):
    fake = tmp_path / "node"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    check = syntax_check("a.cjs", "x;\n", "y;\n")
    assert (check.passed, check.skipped) == (True, True)
    assert check.detail == f"node --check could not check it ({note}): JavaScript syntax not checked"


def test_javascript_without_node_is_skipped_with_a_note(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    check = syntax_check("a.js", "x;\n", "function f( {\n")
    assert (check.passed, check.skipped) == (True, True)
    assert check.detail == "node not on PATH: JavaScript syntax not checked"


def test_node_timeout_is_skipped_with_a_note(monkeypatch, tmp_path):
    fake = tmp_path / "node"
    fake.write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 10\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(checks, "_NODE_TIMEOUT_S", 0.3)
    check = syntax_check("a.js", "x;\n", "y;\n")
    assert (check.passed, check.skipped) == (True, True)
    assert check.detail == "node --check timed out after 0.3s: JavaScript syntax not checked"


@pytest.mark.parametrize("path", ["a.ts", "a.tsx", "a.jsx", "main.c", "notes.txt", "<stdin>"])
def test_languages_without_a_checker_are_skipped(path):
    check = syntax_check(path, "x", "let x: number = (;\n")
    assert (check.passed, check.skipped) == (True, True)
    assert check.detail.startswith("no syntax check for ")


@pytest.mark.parametrize(
    ("path", "broken"), [("m.py", BROKEN_PY), ("c.json", "{"), ("c.toml", "a ="), ("c.yaml", "a: [")]
)
def test_a_file_that_did_not_parse_before_is_not_held_to_it(path, broken):
    check = syntax_check(path, broken, broken + "\n")
    assert (check.passed, check.skipped, check.detail) == (True, True, "the file did not parse before the edit")


def test_an_edit_that_fixes_the_syntax_passes():
    check = syntax_check("m.py", BROKEN_PY, ORIGINAL.decode())
    assert (check.passed, check.skipped) == (True, False)


# -- change and feedback -----------------------------------------------------------------------


def test_change_check_both_ways():
    assert change_check("a\n", "b\n", allow_no_change=False).passed
    same = change_check("a\n", "a\n", allow_no_change=False)
    assert (same.name, same.passed, same.detail) == ("change", False, "the edit changed nothing")
    assert change_check("a\n", "a\n", allow_no_change=True).passed


def test_feedback_tells_the_next_try_what_failed():
    syntax = syntax_check("m.py", ORIGINAL.decode(), BROKEN_PY)
    change = change_check("a", "a", allow_no_change=False)
    test = Check("test", False, False, "exit 1", "E   assert 3 == -1\nFAILED test_add")
    text = feedback([syntax, change, test, Check("syntax", True, True, "no syntax check for C")])
    assert text == (
        "Your previous answer did not parse: line 2: invalid syntax (`    return a +`).\n\n"
        "Your previous answer did not change the file although the instruction asks for a change.\n\n"
        "The tests failed (exit 1):\nE   assert 3 == -1\nFAILED test_add"
    )


def test_feedback_quotes_a_line_with_backticks_as_markdown_inline_code():
    check = Check("syntax", False, False, "line 1: Unterminated template literal", "const s = `a ${b}")
    assert (
        feedback([check])
        == "Your previous answer did not parse: line 1: Unterminated template literal (``const s = `a ${b}``)."
    )


def test_feedback_for_tests_that_failed_without_output():
    assert (
        feedback([Check("test", False, False, "killed by SIGSEGV")])
        == "The tests failed (killed by SIGSEGV), without output."
    )


def test_feedback_is_empty_when_everything_passed_or_was_skipped():
    assert feedback([Check("syntax", True, True, "x"), change_check("a", "b", False), Check("test", True)]) == ""


def test_checks_import_neither_torch_nor_transformers():
    code = "import sys, cadedit.tries.checks, cadedit.text.languages; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert out.stdout.strip() == "[]"


# -- the candidate in place --------------------------------------------------------------------


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "work" / "calc.py"
    path.parent.mkdir()
    path.write_bytes(ORIGINAL)
    path.chmod(0o640)
    return path


def assert_restored(path: Path, *extra: str) -> None:
    """The user's bytes and mode, and no file in the folder but the ones the test made on purpose."""
    assert path.read_bytes() == ORIGINAL
    assert stat.S_IMODE(path.lstat().st_mode) == 0o640
    assert sorted(os.listdir(path.parent)) == sorted([path.name, *extra])


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its reaper does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def gone_soon(pid: int, within: float = 2.0) -> bool:
    """Whether the process is gone within `within` seconds: a SIGKILL sent as cadedit exits is
    delivered asynchronously, and on a loaded machine the target may not have run yet."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def test_passing_command_sees_the_candidate_and_the_original_comes_back(user_file):
    check = run_test(Candidate.read(user_file, CANDIDATE), "grep -q 'a - b' calc.py && echo ok", 30, user_file.parent)
    assert (check.name, check.passed, check.skipped, check.detail, check.output_tail) == (
        "test",
        True,
        False,
        "exit 0",
        "ok",
    )
    assert check.seconds > 0
    assert_restored(user_file)


def test_failing_command_keeps_the_tail_of_stdout_and_stderr(user_file):
    check = run_test(Candidate.read(user_file, CANDIDATE), "seq 1 100; echo boom >&2; exit 1", 30)
    assert (check.passed, check.detail) == (False, "exit 1")
    lines = check.output_tail.splitlines()
    assert len(lines) == checks.TAIL_LINES and lines[0] == "42" and lines[-1] == "boom"
    assert_restored(user_file)


def test_output_tail_is_bounded_in_characters(user_file):
    check = run_command("head -c 100000 /dev/zero | tr '\\0' x; echo; echo end", 30)
    assert len(check.output_tail) == checks.TAIL_CHARS and check.output_tail.endswith("x\nend")


def test_hanging_command_times_out_and_its_group_is_killed(user_file):
    start = time.monotonic()
    command = "sleep 30 & echo $! > sleeper; wait"
    check = run_test(Candidate.read(user_file, CANDIDATE), command, 1, user_file.parent)
    assert time.monotonic() - start < 5
    assert (check.passed, check.detail) == (False, "timed out after 1s")
    assert gone_soon(int((user_file.parent / "sleeper").read_text()))
    assert_restored(user_file, "sleeper")


def test_a_group_that_ignores_sigterm_gets_sigkill(user_file, monkeypatch):
    monkeypatch.setattr(checks, "_GRACE_S", 0.3)
    start = time.monotonic()
    command = "trap '' TERM; sleep 30 & echo $! > sleeper; wait"
    check = run_test(Candidate.read(user_file, CANDIDATE), command, 0.5, user_file.parent)
    assert 0.8 <= time.monotonic() - start < 5
    assert check.detail == "timed out after 0.5s"
    assert gone_soon(int((user_file.parent / "sleeper").read_text()))
    assert_restored(user_file, "sleeper")


def test_background_children_left_by_a_finished_command_are_killed(user_file):
    start = time.monotonic()
    check = run_command("sleep 30 & echo $! > sleeper; echo done", 30, user_file.parent)
    assert check.passed and check.output_tail == "done" and time.monotonic() - start < 5
    assert gone_soon(int((user_file.parent / "sleeper").read_text()))


@pytest.mark.parametrize(("command", "detail"), [("kill -SEGV $$", "killed by SIGSEGV"), ("exit 139", "exit 139")])
def test_crashing_command_fails_and_the_original_comes_back(user_file, command, detail):
    check = run_test(Candidate.read(user_file, CANDIDATE), command, 30)
    assert (check.passed, check.detail) == (False, detail)
    assert_restored(user_file)


@pytest.mark.parametrize("command", ["rm calc.py", "rm calc.py; exit 1"])
def test_a_test_that_deletes_the_file_loses_to_the_original(user_file, command):
    run_test(Candidate.read(user_file, CANDIDATE), command, 30, user_file.parent)
    assert not user_file.is_symlink()
    assert_restored(user_file)


@pytest.mark.parametrize(
    "command, now",
    [("echo garbage > calc.py", b"garbage\n"), ("chmod 777 calc.py; echo x >> calc.py", CANDIDATE + b"x\n"),
     ("echo other > o && mv o calc.py", b"other\n"), ("rm calc.py && ln -s /etc/hostname calc.py", None)],
)  # fmt: skip
def test_what_replaced_the_candidate_during_the_test_is_kept_and_the_original_named(user_file, command, now):
    """Only what cadedit placed is restored: newer bytes (a save in an editor, or the test's own) stay."""
    with pytest.raises(
        ApplyError, match=r"calc\.py: changed while the test ran, so .*; the original is in (\S+)$"
    ) as info:
        run_test(Candidate.read(user_file, CANDIDATE), command, 30, user_file.parent)
    assert Path(info.value.message.rsplit(" ", 1)[1]).read_bytes() == ORIGINAL
    if now is None:
        assert user_file.is_symlink()
    else:
        assert user_file.read_bytes() == now


def test_file_changed_on_disk_before_the_test_is_refused_untouched(user_file):
    candidate = Candidate.read(user_file, CANDIDATE)
    user_file.write_bytes(b"the user's newer text\n")
    with pytest.raises(ApplyError, match=r"calc\.py: changed on disk since cadedit read it; the test was not run"):
        run_test(candidate, "touch ran", 30, user_file.parent)
    assert user_file.read_bytes() == b"the user's newer text\n"
    assert sorted(os.listdir(user_file.parent)) == ["calc.py"]


def test_same_bytes_but_a_new_mtime_is_a_change_too(user_file):
    candidate = Candidate.read(user_file, CANDIDATE)
    os.utime(user_file, ns=(candidate.mtime_ns + 5_000_000_000,) * 2)
    with pytest.raises(ApplyError, match="changed on disk"):
        run_test(candidate, "true", 30)


def test_candidate_read_refuses_a_file_that_no_longer_has_the_expected_bytes(user_file):
    assert Candidate.read(user_file, CANDIDATE, expected=ORIGINAL).original == ORIGINAL
    with pytest.raises(ApplyError, match="calc.py: changed on disk since cadedit read it"):
        Candidate.read(user_file, CANDIDATE, expected=b"what cadedit read earlier\n")


def test_missing_file_is_refused(user_file):
    candidate = Candidate.read(user_file, CANDIDATE)
    user_file.unlink()
    with pytest.raises(ApplyError, match="calc.py: cannot read it before the test"):
        run_test(candidate, "true", 30)
    assert not user_file.exists()


def test_a_candidate_that_cannot_be_written_is_an_apply_error(user_file, monkeypatch):
    from cadedit.tries import sandbox

    real, calls = sandbox.write_fd, []

    def refuse_the_candidate(fd, data, times_ns=None):
        calls.append(data)
        if data == CANDIDATE:
            raise PermissionError(13, "Permission denied")
        return real(fd, data, times_ns)

    monkeypatch.setattr(sandbox, "write_fd", refuse_the_candidate)
    with pytest.raises(ApplyError, match=r"calc\.py: cannot put the candidate in place \(Permission denied\)"):
        run_test(Candidate.read(user_file, CANDIDATE), "touch ran", 30, user_file.parent)
    assert_restored(user_file)


def test_a_file_this_user_may_not_write_gets_no_candidate(user_file, monkeypatch):
    monkeypatch.setattr(checks.os, "access", lambda path, mode: False)  # root may write anything: as another user
    with pytest.raises(ApplyError, match=r"calc\.py: not writable by this user \(owner uid \d+, mode 0640\)"):
        run_test(Candidate.read(user_file, CANDIDATE), "touch ran", 30, user_file.parent)
    assert_restored(user_file)


def test_candidate_in_place_restores_after_an_exception_inside(user_file):
    with pytest.raises(RuntimeError), candidate_in_place(Candidate.read(user_file, CANDIDATE)):
        assert user_file.read_bytes() == CANDIDATE
        assert stat.S_IMODE(user_file.stat().st_mode) == 0o640
        raise RuntimeError("the tries loop crashed")
    assert_restored(user_file)


def test_the_candidate_gets_a_later_second_and_the_original_its_own_mtime(user_file):
    # Python's .pyc is valid while (mtime in seconds, size) match: candidate and original have the
    # same size here, so sharing a second would let a test import the other one's bytecode.
    candidate = Candidate.read(user_file, CANDIDATE)
    with candidate_in_place(candidate):
        placed = user_file.stat().st_mtime_ns // 1_000_000_000
    assert candidate.mtime_ns // 1_000_000_000 < placed
    assert user_file.stat().st_mtime_ns == candidate.mtime_ns  # the original's own mtime comes back with it


def test_when_the_original_cannot_go_back_it_is_kept_and_named(user_file):
    with pytest.raises(ApplyError, match=r"calc\.py: changed while the test ran, .*the original is in (\S+)$") as info:
        run_test(Candidate.read(user_file, CANDIDATE), "rm calc.py && mkdir calc.py", 30, user_file.parent)
    saved = Path(info.value.message.rsplit(" ", 1)[1])
    assert saved.read_bytes() == ORIGINAL
    assert sorted(os.listdir(user_file.parent)) == ["calc.py"]  # the directory the test made; no temp file


def test_a_symlinked_file_stays_a_link_to_the_restored_target(user_file):
    link = user_file.parent / "link.py"
    link.symlink_to(user_file.name)
    check = run_test(Candidate.read(link, CANDIDATE), "grep -q 'a - b' calc.py", 30, user_file.parent)
    assert check.passed and link.is_symlink()
    assert_restored(user_file, "link.py")


def test_run_test_works_outside_the_main_thread(user_file):
    # Python sets signal handlers in the main thread only; elsewhere the restore still runs.
    results = []
    worker = threading.Thread(target=lambda: results.append(run_test(Candidate.read(user_file, CANDIDATE), "true", 30)))
    worker.start()
    worker.join(30)
    assert [check.passed for check in results] == [True]
    assert_restored(user_file)


def test_a_missing_working_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot run the test command"):
        run_command("true", 30, tmp_path / "missing")


# -- signals to cadedit during the test --------------------------------------------------------

DRIVER = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    from cadedit.tries.checks import Candidate, run_test

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    path = Path(sys.argv[1])
    try:
        check = run_test(Candidate.read(path, b"candidate\\n"), "sleep 60 & echo $! > s && mv s started; wait", 60,
                         path.parent)
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
        sys.exit(130)
    print("finished", check)
    """
)


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGTERM, 143, ""), (signal.SIGINT, 130, "KeyboardInterrupt"), (signal.SIGHUP, 129, "")],
)
def test_a_signal_to_cadedit_during_the_test_restores_the_file(user_file, tmp_path, signum, status, said):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(driver), str(user_file)], env=env, stdout=subprocess.PIPE, text=True)
    started = user_file.parent / "started"
    deadline = time.monotonic() + 30
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists(), "the test command never started"
    assert user_file.read_bytes() == b"candidate\n"
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out.strip()) == (status, said)
    assert gone_soon(int(started.read_text()))
    assert_restored(user_file, "started")


@pytest.mark.parametrize(
    "path, deep", [("m.py", "x = 1" + " + 1" * 200_000 + "\n"), ("d.json", "[" * 200_000 + "]" * 200_000)]
)
def test_a_candidate_nested_deeper_than_the_parser_reads_fails_the_syntax_check_in_one_line(path, deep):
    """compile() and json.loads raise RecursionError on these: a verdict on the candidate, not an internal error."""
    before = "x = 1\n" if path.endswith(".py") else "[]"
    check = syntax_check(path, before, deep)
    assert not check.passed and not check.skipped and "nested deeper than the" in check.detail
    assert syntax_check(path, deep, deep).skipped  # the file could not be read before the edit either
