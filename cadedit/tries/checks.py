"""Checks on an edit candidate (the edited file's text) before cadedit accepts a try.

Contract: syntax_check(), change_check() and run_test() each return one Check and raise only for
a failure the user must see (ApplyError: the file changed on disk, or cannot be restored).
A Check with passed=False is what the next try is told about, through feedback(); a skipped Check
has passed=True, so `all(check.passed for check in checks)` decides a try. run_test() puts the
candidate's bytes into the file's own inode (cadedit.tries.sandbox: journaled, locked, guarded), runs the
test command in its own process group, and puts the user's original bytes and mtime back: after a
pass, a failure, a crash, a timeout, a test that deletes the file, KeyboardInterrupt, SIGTERM and
SIGHUP; after SIGKILL of cadedit its guard does. A file saved by the user during the test keeps
the new bytes (ApplyError says where the original is).
No torch, no transformers.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import tokenize
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cadedit.text.diff import raise_for_signal, signals_deferred
from cadedit.text.document import line_body, split_lines
from cadedit.errors import ApplyError, ConfigError
from cadedit.text.languages import Language, language_of
from cadedit.tries.sandbox import Placement, SandboxError

TAIL_LINES = 60
TAIL_CHARS = 4000
_KEEP_BYTES = 64 * 1024  # of the test's output, while it runs: enough for the tail, bounded memory
_GRACE_S = 1.0  # between SIGTERM and SIGKILL to the test's process group
_NODE_TIMEOUT_S = 10.0
_SOURCE_CHARS = 200  # of the offending source line quoted back (a minified file is one long line)
# SIGTERM/SIGHUP during a test become SystemExit(128 + signum) so that every `finally` runs.
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class Check:
    """One check on a candidate: "syntax", the code checks (cadedit.tries.code_checks), "change" or "test"
    ("placement" only when it failed).

    detail is one line ("line 3: invalid syntax", "exit 1", "node not on PATH: ..."); output_tail
    is the offending source line for a syntax check, the end of the output for a test.
    """

    name: str
    passed: bool
    skipped: bool = False
    detail: str = ""
    output_tail: str = ""
    seconds: float = 0.0


# -- syntax ------------------------------------------------------------------------------------


class _Unparsed(Exception):
    """A parser's complaint: the message and the 1-based line (and column) it points at, 0 when unknown."""

    def __init__(self, message: str, line: int = 0, column: int = 0):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


class _Unchecked(Exception):
    """The check cannot run here (a module or a program is missing): the note says why."""


def _check_python(text: str, path: str) -> None:
    """Compile the bytes cadedit writes (UTF-8) as Python will read them, through the file's PEP 263
    coding cookie: under `coding: ascii` a non-ASCII character fails, and under `coding: latin-1` one
    that would read as other text (`é` as `Ã©`) fails too."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        read = data.decode(encoding)  # utf-8-sig: without the BOM
    except SyntaxError as exc:  # an unknown encoding in the cookie
        raise _Unparsed(exc.msg, exc.lineno or 0) from None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _Unparsed(f"not {encoding}, which the file's coding cookie declares", line) from None
    if read != text.removeprefix("\ufeff"):
        pairs = zip(read.splitlines(), text.removeprefix("\ufeff").splitlines())
        line = next((k for k, (a, b) in enumerate(pairs, 1) if a != b), 1)
        raise _Unparsed(f"written as UTF-8 this reads as other text under the file's coding cookie ({encoding})", line)
    try:
        with warnings.catch_warnings():  # warnings (an invalid escape, `is 1`) fail nothing, even under -W error
            warnings.simplefilter("ignore")
            compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise _Unparsed(exc.msg, exc.lineno or 0) from None
    except ValueError as exc:  # null bytes on some Python versions
        raise _Unparsed(str(exc)) from None


def _check_json(text: str, path: str) -> None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Unparsed(exc.msg, exc.lineno, exc.colno) from None


def _check_toml(text: str, path: str) -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise _Unchecked("tomli not installed: TOML syntax not checked") from None
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", str(exc))
        raise (_Unparsed(m[1], int(m[2]), int(m[3])) if m else _Unparsed(str(exc))) from None


def _check_yaml(text: str, path: str) -> None:
    try:
        import yaml
    except ModuleNotFoundError:
        raise _Unchecked("PyYAML not installed: YAML syntax not checked") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:  # compose, not load: custom tags (!Ref) are valid syntax that safe_load would refuse
        for _ in yaml.compose_all(text, Loader=loader):
            pass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise _Unparsed(exc.problem or str(exc).splitlines()[0], line, column) from None
    except yaml.YAMLError as exc:
        raise _Unparsed(str(exc).splitlines()[0]) from None


def _node_run(node: str, text: str, suffix: str) -> str | None:
    """node --check on the text in a temporary file: None when it parses, else node's error output."""
    with tempfile.TemporaryDirectory(prefix="cadedit-check-") as folder:
        file = Path(folder) / f"candidate{suffix}"
        file.write_text(text, encoding="utf-8")
        try:
            done = subprocess.run([node, "--check", str(file)], capture_output=True, timeout=_NODE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise _Unchecked(
                f"node --check timed out after {_NODE_TIMEOUT_S:g}s: JavaScript syntax not checked"
            ) from None
        err = done.stderr.decode("utf-8", "replace")
        return None if done.returncode == 0 else err.replace(str(file), "<candidate>")


def _check_node(text: str, path: str) -> None:
    node = shutil.which("node")
    if node is None:
        raise _Unchecked("node not on PATH: JavaScript syntax not checked")
    suffix = Path(path).suffix.lower() or ".js"
    err = _node_run(node, text, suffix)
    # A .js file is CommonJS or an ES module depending on the nearest package.json, which the
    # temporary copy does not have: it passes if it parses as either.
    # A broken .js costs three node runs; a valid one one or two.
    if err is None or (suffix == ".js" and _node_run(node, text, ".mjs") is None):
        return
    message = re.search(r"^SyntaxError: (.*)$", err, re.M)
    if message is None:
        last = (err.strip().splitlines() or ["no output"])[-1][:200]
        raise _Unchecked(f"node --check could not check it ({last}): JavaScript syntax not checked")
    line = re.search(r"<candidate>:(\d+)$", err, re.M)  # "file://<candidate>:3" from some versions
    raise _Unparsed(message[1], int(line[1]) if line else 0)


_CHECKERS = {
    "python": _check_python,
    "json": _check_json,
    "toml": _check_toml,
    "yaml": _check_yaml,
    "node": _check_node,
}


def _parse(language: Language, text: str, path: str) -> None:
    try:
        # A BOM is not part of the syntax; Python reads it (with the coding cookie) from the bytes.
        _CHECKERS[language.syntax](text if language.syntax == "python" else text.removeprefix("\ufeff"), path)
    except RecursionError:  # compile() of a 100,000-term chain, json.loads of [[[[...: the parser's verdict
        raise _Unparsed(f"nested deeper than the {language.title} parser here can read") from None


def syntax_check(path: str, before: str, after: str) -> Check:
    """Does the candidate parse as the file's language? Skipped when that cannot be checked here.

    A candidate that does not parse fails, unless the file did not parse before the edit either:
    the edit is not held to a standard the file never met (skipped). One that parses passes.
    """
    start = time.monotonic()
    language = language_of(path)

    def result(passed: bool, detail: str = "", tail: str = "", skipped: bool = False) -> Check:
        return Check("syntax", passed, skipped, detail, tail, time.monotonic() - start)

    if language is None or not language.syntax:
        what = language.title if language else "this file type"
        return result(True, f"no syntax check for {what}", skipped=True)
    try:
        _parse(language, after, path)
        return result(True, f"{language.title} parses")
    except _Unchecked as exc:
        return result(True, str(exc), skipped=True)
    except _Unparsed as exc:
        failure = exc
    try:
        _parse(language, before, path)
    except (_Unparsed, _Unchecked):
        return result(True, "the file did not parse before the edit", skipped=True)
    return result(False, _where(failure) + failure.message.replace("\n", " "), _source_line(after, failure.line))


def _where(failure: _Unparsed) -> str:
    if not failure.line:
        return ""
    return f"line {failure.line}, column {failure.column}: " if failure.column else f"line {failure.line}: "


def _source_line(text: str, line: int) -> str:
    """Line `line` (1-based) as parsers count lines (\\n, \\r\\n, \\r), cut to _SOURCE_CHARS."""
    lines = split_lines(text.removeprefix("\ufeff"))
    body = line_body(lines[line - 1]) if 0 < line <= len(lines) else ""
    return body if len(body) <= _SOURCE_CHARS else body[:_SOURCE_CHARS] + "…"


# -- change ------------------------------------------------------------------------------------


# "Empty the file", "Delete everything in this file", "Remove all the code": the file itself goes;
# not "everything after line 10", "all the code in f".
_EMPTIES = re.compile(
    r"(?:\b(?:empty|clear|wipe|erase|blank)\s+(?:out\s+)?(?:the\s+|this\s+)?(?:whole\s+|entire\s+)?"
    r"(?:file|module|script|contents?)\b"
    r"|\b(?:delete|remove|drop|erase|wipe)\s+(?:everything|all\s+(?:of\s+)?(?:the\s+|its\s+)?(?:code|contents?|lines|text)"
    r"|(?:the\s+)?(?:whole|entire)\s+(?:file|module|contents?)|(?:this|the)\s+(?:file|module|script)(?!\s*'))\b"
    r"|\bmake\s+(?:it|the\s+file|this\s+file|the\s+module)\s+empty\b)"
    r"(?!\s+(?:in|inside|from|of|within)\s+(?!(?:this|the)\s+(?:file|module|script)\b)"
    r"|\s+(?:after|before|between|below|above|except|but|that|which|under|other|apart)\b)",
    re.I,
)
# Definitions as most languages spell them, for "does the instruction name every definition".
_DEFINED = re.compile(r"^[ \t]*(?:export\s+)?(?:async\s+)?(?:def|class|function)\s+([A-Za-z_$][\w$]*)", re.M)


def asks_to_empty(instruction: str) -> bool:
    """Whether the instruction asks for an empty file ("Delete everything in this file")."""
    return bool(_EMPTIES.search(instruction))


def change_check(before: str, after: str, allow_no_change: bool, instruction: str = "") -> Check:
    """A candidate equal to the file fails, unless the caller allows an edit that changes nothing; one
    that empties a file that had text fails unless the instruction asks to empty the file or names
    every definition in it: "Remove the debug prints" asks for less than everything, and a small model
    that answers with nothing would otherwise "pass" every check but a test."""
    if after != before:
        if not after.strip() and before.strip() and not _asks_for_nothing(before, instruction):
            return Check("change", False, detail="the edit empties the file, which the instruction does not ask for")
        return Check("change", True, detail="the edit changes the file")
    if allow_no_change:
        return Check("change", True, detail="the edit changed nothing (allowed)")
    return Check("change", False, detail="the edit changed nothing")


def _asks_for_nothing(before: str, instruction: str) -> bool:
    if asks_to_empty(instruction):
        return True
    defined = set(_DEFINED.findall(before))
    return bool(defined) and defined <= set(re.findall(r"[A-Za-z_$][\w$]*", instruction))


# -- placement ---------------------------------------------------------------------------------


def placement_check(problem: str) -> Check:
    """A scoped answer that cannot be placed in its region exactly fails (problem: why, one line): a
    guess would nest or duplicate code that every other check may pass."""
    return Check("placement", False, detail=problem)


# -- feedback ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edited:
    """The candidate a test ran with, so that its failure can be pointed at the code: the file's path,
    its text before and with the candidate, the regions the candidate retyped (lines of the file
    before; empty: the whole file) and the folder the test ran in (relative paths in its output)."""

    path: str
    before: str
    after: str
    regions: tuple[tuple[int, int], ...] = ()
    cwd: str | None = None


def feedback(checks: Sequence[Check], edited: Edited | None = None) -> str:
    """What the next try's prompt says about this try's failed checks ("" when none failed); a failed
    test's output is followed by its failing assertion and the frame in the edited file (test_pointer)."""
    parts = []
    for check in checks:
        if check.passed:
            continue
        if check.name == "syntax":
            quoted = f" ({_inline_code(check.output_tail)})" if check.output_tail.strip() else ""
            parts.append(f"Your previous answer did not parse: {check.detail}{quoted}.")
        elif check.name == "placement":
            parts.append(
                f"Your previous answer could not be put in place ({check.detail}). Write each line "
                "of the asked-for lines exactly once, and no line from before or after them."
            )
        elif check.name == "change" and "empties" in check.detail:
            parts.append("Your previous answer deleted everything although the instruction does not ask for that.")
        elif check.name == "change":
            parts.append("Your previous answer did not change the file although the instruction asks for a change.")
        elif check.name in _CODE_FEEDBACK:
            parts.append(_CODE_FEEDBACK[check.name].format(detail=check.detail))
        elif check.name == "test":
            tail = check.output_tail.rstrip()
            said = f":\n{tail}" if tail else ", without output."
            pointer = test_pointer(tail, edited) if edited is not None else ""
            parts.append(f"The tests failed ({check.detail}){said}" + (f"\n\n{pointer}" if pointer else ""))
        else:
            parts.append(f"The {check.name} check failed: {check.detail}")
    return "\n\n".join(parts)


# What the next try is told after a code check failed (cadedit.tries.code_checks; detail: its one line).
_CODE_FEEDBACK = {
    "names": "Your previous answer leaves a name undefined or unused ({detail}): import or define every name "
    "you use, and keep the lines that define them.",
    "kept": "Your previous answer {detail}. Keep all the code that the instruction does not ask to change.",
    "body": "In your previous answer {detail}: keep each function's own code.",
    "public": "Your previous answer {detail}: remove it there too, or keep it.",
    "asked": "Your previous answer {detail}.",
}


# Frames of a traceback: Python's `File "a.py", line 12`, node's `at f (/x/a.js:12:5)` / `at /x/a.js:12:5`,
# pytest's `a.py:12: in f` / `a.py:12: AssertionError`.
_PY_FRAME = re.compile(r'^\s*File "(?P<path>[^"\n]+)", line (?P<line>\d+)', re.M)
_NODE_FRAME = re.compile(r"^\s*at (?:.*?\()?(?:file://)?(?P<path>[^\s()]+?):(?P<line>\d+):\d+\)?\s*$", re.M)
_PYTEST_FRAME = re.compile(r"^(?P<path>[^\s:\"'()]+):(?P<line>\d+): ", re.M)
_PYTEST_E = re.compile(r"^E\s+(?P<text>\S.*)$", re.M)
_PYTEST_AT = re.compile(r"^>\s+(?P<text>\S.*)$", re.M)
_RAISED = re.compile(r"^\s*(?P<text>(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure)\b(?: \[\w+\])?(?::.*)?)$", re.M)
_POINTER_CHARS = 300


def test_pointer(output: str, edited: Edited) -> str:
    """The failing assertion and the innermost frame of the test's output in the edited file (by its
    path, resolved against the test's folder, or failing that by its name: a test may import the file
    under another path), that frame's line mapped to the lines the candidate retyped; "" if neither."""
    parts = []
    if failed := _failing_assertion(output):
        parts.append(f"The failing check: {failed}")
    frame = _edited_frame(output, edited)
    if frame is not None:
        parts.append(_frame_line(frame, edited))
    return "\n".join(parts)


def _failing_assertion(output: str) -> str:
    """pytest's `>` statement and its `E` lines, else the last exception line (Python, node)."""
    errors = _PYTEST_E.findall(output)
    if errors:
        first_e = _PYTEST_E.search(output).start()
        statement = _PYTEST_AT.search(output, 0, first_e)  # the first: the test's own statement
        said = " ".join(e.strip() for e in errors[:3])
        text = (_inline_code(statement.group("text")) + ": " if statement else "") + _inline_code(said)
    else:
        raised = _RAISED.findall(output)
        if not raised:
            return ""
        text = _inline_code(raised[-1].strip())
    return text if len(text) <= _POINTER_CHARS else text[:_POINTER_CHARS] + "…"


def _edited_frame(output: str, edited: Edited) -> int | None:
    """The line of the innermost frame in the edited file: Python and pytest list frames outermost
    first, node innermost first."""
    ours = lambda m: _same_file(m.group("path"), edited)  # noqa: E731
    python = sorted(
        (m.start(), int(m.group("line")))
        for frames in (_PY_FRAME, _PYTEST_FRAME)
        for m in frames.finditer(output)
        if ours(m)
    )
    if python:
        return python[-1][1]
    node = [int(m.group("line")) for m in _NODE_FRAME.finditer(output) if ours(m)]
    return node[0] if node else None


def _same_file(path: str, edited: Edited) -> bool:
    here = os.path.realpath(edited.path)
    there = os.path.realpath(os.path.join(edited.cwd or os.getcwd(), path))
    return here == there or os.path.basename(path) == os.path.basename(edited.path)


def _frame_line(line: int, edited: Edited) -> str:
    """Where a frame's line (of the file with the candidate in place) is: in the lines the candidate
    retyped (which of them), or outside them; with the line's text."""
    after = split_lines(edited.after)
    body = line_body(after[line - 1]).strip() if 0 < line <= len(after) else None
    shown = _inline_code(body[:_SOURCE_CHARS]) if body else "(an empty line)" if body == "" else "(no such line)"
    name = os.path.basename(edited.path)
    for (a, b), (a2, b2) in _retyped_spans(edited):
        if a2 <= line <= b2:
            return (
                f"The error was raised in your answer for lines {a}-{b}, at its line {line - a2 + 1} "
                f"(line {line} of {name}): {shown}"
            )
    return f"The error was raised at line {line} of {name}, outside the lines you rewrote: {shown}"


def _retyped_spans(edited: Edited) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Each retyped region (lines before) with the lines it became in the candidate."""
    before, after = split_lines(edited.before), split_lines(edited.after)
    regions = edited.regions or ((1, max(len(before), 1)),)
    new_of: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            new_of.update((i1 + k + 1, j1 + k + 1) for k in range(i2 - i1))
    spans = []
    for a, b in regions:
        start = new_of[a - 1] + 1 if a - 1 in new_of else a
        end = new_of[b + 1] - 1 if b + 1 in new_of else len(after) if b >= len(before) else b
        spans.append(((a, b), (start, max(start, end))))
    return spans


def _inline_code(text: str) -> str:
    """Markdown inline code that survives backticks in the text (JavaScript template literals)."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# -- a candidate in place, and the test run ----------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """An edit to try: the file, its bytes and stat identity when cadedit read it, the new bytes."""

    path: Path
    original: bytes
    size: int
    mtime_ns: int
    inode: int
    new: bytes

    @classmethod
    def read(cls, path: str | os.PathLike[str], new: bytes, expected: bytes | None = None) -> Candidate:
        """The file as it is on disk now, with `new` as the bytes to try in its place.

        `expected`: the bytes the caller read before (Document.to_bytes()); ApplyError if the file
        no longer has them, so that a change between two tries is not taken for the original.
        """
        data, st = _read(Path(path), "cannot read")
        if expected is not None and data != expected:
            raise ApplyError(
                f"{path}: changed on disk since cadedit read it", hint="run cadedit again on the current file"
            )
        return cls(Path(path), data, st.st_size, st.st_mtime_ns, st.st_ino, new)


def _read(path: Path, failure: str) -> tuple[bytes, os.stat_result]:
    try:
        with open(path, "rb") as f:
            return f.read(), os.fstat(f.fileno())
    except OSError as exc:
        raise ApplyError(f"{path}: {failure} ({exc.strerror or exc})") from None


def _check_unchanged(candidate: Candidate) -> os.stat_result:
    """The file's stat, or ApplyError if its bytes, size, mtime or inode differ from when it was read."""
    data, st = _read(candidate.path, "cannot read it before the test; the test was not run")
    if data != candidate.original or (st.st_size, st.st_mtime_ns, st.st_ino) != (
        candidate.size, candidate.mtime_ns, candidate.inode,
    ):  # fmt: skip
        raise ApplyError(
            f"{candidate.path}: changed on disk since cadedit read it; the test was not run",
            hint="run cadedit again on the current file",
        )
    return st


def _later_mtime_ns(previous_ns: int) -> int | None:
    """An mtime in a later whole second than previous_ns, or None when "now" already is one.

    Python's .pyc files (pytest's too) are valid while the source's mtime in whole seconds and its
    size match. A candidate and the original of the same size written within one second would
    share a .pyc, and a test would import the other text; every write here moves to a later second.
    """
    second = previous_ns // 1_000_000_000
    return None if time.time_ns() // 1_000_000_000 > second else (second + 1) * 1_000_000_000


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _install_exit_handlers() -> dict[int, object]:
    """SIGTERM/SIGHUP raise SystemExit(143/129) so that the file is restored; returns the old handlers.

    Only in the main thread (the only one Python lets set handlers), and not over a signal that is
    ignored (nohup) or handled outside Python.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for signum in _EXIT_SIGNALS:
        previous = signal.getsignal(signum)
        if previous not in (None, signal.SIG_IGN):
            old[signum] = signal.signal(signum, _exit_on_signal)
    return old


def _check_placeable(candidate: Candidate, target: Path, st: os.stat_result) -> None:
    """A candidate goes only into a regular file this user may write (as --write asks)."""
    if not stat.S_ISREG(st.st_mode):
        raise ApplyError(f"{candidate.path}: not a regular file; the test was not run")
    if not os.access(target, os.W_OK):
        raise ApplyError(
            f"{candidate.path}: not writable by this user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}); the test was not run",
            hint="test a copy you own, or run cadedit as a user who may write the file",
        )


@contextlib.contextmanager
def candidate_in_place(candidate: Candidate) -> Iterator[Placement]:
    """The candidate's bytes in the file for the duration; the original bytes back afterwards.

    Refuses with ApplyError, the file untouched, if it changed since it was read (a save while the
    candidate was going in included), is not a regular file this user may write, or another cadedit
    run has a candidate in it. The bytes go into the
    file's own inode (cadedit.tries.sandbox: journal, lock, guard), so nothing but the bytes changes, and
    the original comes back after anything the block does or raises: KeyboardInterrupt,
    SystemExit(143) on SIGTERM, SystemExit(129) on SIGHUP; after SIGKILL the guard gives it back.
    Signals that arrive while the file is being written wait until it is done. The placement's
    watch(pgid) hands the test's process group to the guard.
    """
    target = Path(os.path.realpath(candidate.path))
    handlers = _install_exit_handlers()
    placement = None
    try:
        with signals_deferred() as pending:
            st = _check_unchanged(candidate)
            _check_placeable(candidate, target, st)
            later = _later_mtime_ns(candidate.mtime_ns) or time.time_ns()
            placement = Placement(target, candidate.original, candidate.new, st, later)
            try:
                placement.begin()
            except SandboxError as exc:
                raise ApplyError(exc.message, hint=exc.hint) from None
            except OSError as exc:
                why = exc.strerror or exc
                raise ApplyError(
                    f"{candidate.path}: cannot put the candidate in place ({why}); the test was not run"
                ) from None
            held = list(pending)
        if held:
            raise_for_signal(held[0])  # Ctrl-C while the candidate went in: it comes out again
        yield placement
    finally:
        try:
            if placement is not None:
                with signals_deferred():  # a second Ctrl-C waits until the original is back
                    _end_placement(candidate, placement)
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)


def _end_placement(candidate: Candidate, placement: Placement) -> None:
    """The original back; an ApplyError when it could not be, or when the file changed during the test."""
    import sys

    try:
        said = placement.end()
    except OSError as exc:
        raise ApplyError(
            f"{candidate.path}: cannot restore it after the test ({exc.strerror or exc}); it may hold "
            f"the candidate or a cut-short original until then, the original is kept in "
            f"{placement.journal}",
            hint="fix the cause (free some space), then `cadedit recover` puts the original back",
        ) from None
    if not said:
        return
    if sys.exc_info()[0] is None:
        raise ApplyError(said, hint="compare the two and keep what you want")
    os.write(2, f"cadedit: {said}\n".encode("utf-8", "surrogateescape"))  # an interrupt is on its way out


def _collect(proc: subprocess.Popen, timeout: float) -> tuple[bytes, bool]:
    """The end of the process's output and whether it ran past the timeout."""
    deadline = time.monotonic() + timeout
    tail = bytearray()
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(min(left, 0.1)):
                if proc.poll() is not None:  # the shell is done; a background child may hold the pipe
                    break
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            tail += chunk
            del tail[:-_KEEP_BYTES]
        else:
            return bytes(tail), True
    try:
        proc.wait(max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return bytes(tail), True
    return bytes(tail), False


def _signal_group(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to what is left of the test's process group, SIGKILL after a grace; reap the shell."""
    pgid = proc.pid  # start_new_session: the shell leads its own group
    # Zombies count as members: where PID 1 does not reap orphans (some containers), a group whose
    # children outlived the shell waits out the whole grace before SIGKILL.
    if _signal_group(pgid, signal.SIGTERM):
        deadline = time.monotonic() + _GRACE_S
        while time.monotonic() < deadline and (proc.poll() is None or _signal_group(pgid, 0)):
            time.sleep(0.02)
        _signal_group(pgid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def _tail(output: bytes) -> str:
    lines = output.decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


def _exit_detail(returncode: int) -> str:
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def run_command(
    command: str, timeout: float, cwd: Path | None = None, on_start: Callable[[int], None] | None = None
) -> Check:
    """Run `command` through /bin/sh in its own process group; passed on exit status 0.

    stdout and stderr together, the last TAIL_LINES lines / TAIL_CHARS characters kept. At the
    timeout, and on any exception (KeyboardInterrupt), the whole group gets SIGTERM, then SIGKILL.
    Ctrl-C while the shell is being started waits until it has a pid (so it is never left running);
    on_start gets the group's id (the guard's watch).
    """
    start = time.monotonic()
    with signals_deferred() as pending:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise ConfigError(f"cannot run the test command in {cwd or Path.cwd()} ({exc.strerror or exc})") from None
        if on_start is not None:
            on_start(proc.pid)
        held = list(pending)
    try:
        if held:
            raise_for_signal(held[0])
        output, timed_out = _collect(proc, timeout)
    finally:
        with signals_deferred():  # a second Ctrl-C waits until the group is gone
            _end_group(proc)
    detail = f"timed out after {timeout:g}s" if timed_out else _exit_detail(proc.returncode)
    passed = not timed_out and proc.returncode == 0
    return Check("test", passed, False, detail, _tail(output), time.monotonic() - start)


def run_test(candidate: Candidate, command: str, timeout: float, cwd: Path | None = None) -> Check:
    """Run the test command with the candidate's bytes in the file, the original restored after."""
    with candidate_in_place(candidate) as placement:
        return run_command(command, timeout, cwd, on_start=placement.watch)
