"""Checks on an edit candidate (the edited file's text) before cadedit accepts a try.

Contract: syntax_check(), change_check() and run_test() each return one Check and raise only for
a failure the user must see (ApplyError: the file changed on disk, or cannot be restored).
A Check with passed=False is what the next try is told about, through feedback(); a skipped Check
has passed=True, so `all(check.passed for check in checks)` decides a try. run_test() puts the
candidate's bytes into the file's own inode (cadedit.sandbox: journaled, locked, guarded), runs the
test command in its own process group, and puts the user's original bytes and mtime back: after a
pass, a failure, a crash, a timeout, a test that deletes the file, KeyboardInterrupt, SIGTERM and
SIGHUP; after SIGKILL of cadedit its guard does. A file saved by the user during the test keeps
the new bytes (ApplyError says where the original is).
No torch, no transformers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cadedit.diff import raise_for_signal, signals_deferred
from cadedit.document import line_body, split_lines
from cadedit.errors import ApplyError, ConfigError
from cadedit.languages import Language, language_of
from cadedit.sandbox import Placement, SandboxError

# Exit codes of `cadedit fix` with tries: 0 ok, 1 error, 2 usage, 3 no candidate passed its
# checks (CheckFailedError.exit_code), 130 interrupted.
NO_PASSING_TRY_EXIT = 3

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
    """One check on a candidate: "syntax", "change" or "test" ("placement" only when it failed).

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
    try:
        with warnings.catch_warnings():  # warnings (an invalid escape, `is 1`) fail nothing, even under -W error
            warnings.simplefilter("ignore")
            compile(text, path, "exec", dont_inherit=True)
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
            raise _Unchecked(f"node --check timed out after {_NODE_TIMEOUT_S:g}s: JavaScript syntax not checked") from None
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
    # Measured: 0.1-0.2 s a node run here (2 shared cores); a broken .js costs three runs.
    if err is None or (suffix == ".js" and _node_run(node, text, ".mjs") is None):
        return
    message = re.search(r"^SyntaxError: (.*)$", err, re.M)
    if message is None:
        last = (err.strip().splitlines() or ["no output"])[-1][:200]
        raise _Unchecked(f"node --check could not check it ({last}): JavaScript syntax not checked")
    line = re.search(r"<candidate>:(\d+)$", err, re.M)  # "file://<candidate>:3" from some versions
    raise _Unparsed(message[1], int(line[1]) if line else 0)


_CHECKERS = {"python": _check_python, "json": _check_json, "toml": _check_toml, "yaml": _check_yaml, "node": _check_node}


def _parse(language: Language, text: str, path: str) -> None:
    _CHECKERS[language.syntax](text.removeprefix("\ufeff"), path)  # a BOM is not part of the syntax


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


_DELETION = re.compile(r"\b(?:delete|remove|empty|clear|erase|wipe|truncate|drop)\b", re.I)


def change_check(before: str, after: str, allow_no_change: bool, instruction: str = "") -> Check:
    """A candidate equal to the file fails, unless the caller allows an edit that changes nothing; one
    that empties a file that had text fails unless the instruction asks for a deletion (a small model
    that answers with nothing would otherwise "pass" every check but a test)."""
    if after != before:
        if not after.strip() and before.strip() and not _DELETION.search(instruction):
            return Check("change", False, detail="the edit empties the file, which the instruction does not ask for")
        return Check("change", True, detail="the edit changes the file")
    if allow_no_change:
        return Check("change", True, detail="the edit changed nothing (allowed)")
    return Check("change", False, detail="the edit changed nothing")


# -- placement ---------------------------------------------------------------------------------


def placement_check(problem: str) -> Check:
    """A scoped answer that cannot be placed in its region exactly fails (problem: why, one line): a
    guess would nest or duplicate code that every other check may pass."""
    return Check("placement", False, detail=problem)


# -- feedback ----------------------------------------------------------------------------------


def feedback(checks: Sequence[Check]) -> str:
    """What the next try's prompt says about this try's failed checks ("" when none failed)."""
    parts = []
    for check in checks:
        if check.passed:
            continue
        if check.name == "syntax":
            quoted = f" ({_inline_code(check.output_tail)})" if check.output_tail.strip() else ""
            parts.append(f"Your previous answer did not parse: {check.detail}{quoted}.")
        elif check.name == "placement":
            parts.append(f"Your previous answer could not be put in place ({check.detail}). Write each line "
                         "of the asked-for lines exactly once, and no line from before or after them.")
        elif check.name == "change" and "empties" in check.detail:
            parts.append("Your previous answer deleted everything although the instruction does not ask for that.")
        elif check.name == "change":
            parts.append("Your previous answer did not change the file although the instruction asks for a change.")
        elif check.name == "test":
            tail = check.output_tail.rstrip()
            said = f":\n{tail}" if tail else ", without output."
            parts.append(f"The tests failed ({check.detail}){said}")
        else:
            parts.append(f"The {check.name} check failed: {check.detail}")
    return "\n\n".join(parts)


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
            raise ApplyError(f"{path}: changed on disk since cadedit read it", hint="run cadedit again on the current file")
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
        raise ApplyError(f"{candidate.path}: not writable by this user (owner uid {st.st_uid}, mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); the test was not run",
                         hint="test a copy you own, or run cadedit as a user who may write the file")


@contextlib.contextmanager
def candidate_in_place(candidate: Candidate) -> Iterator[Placement]:
    """The candidate's bytes in the file for the duration; the original bytes back afterwards.

    Refuses with ApplyError, the file untouched, if it changed since it was read, is not a regular
    file this user may write, or another cadedit run has a candidate in it. The bytes go into the
    file's own inode (cadedit.sandbox: journal, lock, guard), so nothing but the bytes changes, and
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
                raise ApplyError(f"{candidate.path}: cannot put the candidate in place ({why}); the test was not run") from None
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
        raise ApplyError(f"{candidate.path}: cannot restore it after the test ({exc.strerror or exc}); the original "
                         f"is kept in {placement.journal}", hint="`cadedit recover` puts it back") from None
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
    # children outlived the shell waits out the whole grace (measured: 1.0 s here) before SIGKILL.
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


def run_command(command: str, timeout: float, cwd: Path | None = None,
                on_start: Callable[[int], None] | None = None) -> Check:
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
