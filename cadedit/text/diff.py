"""Unified diffs of an edit, their rendering, and the safe write of the edited file.

Contract: `patch -p1` and `git apply` turn `before` into `after` byte for byte with the text of
`unified_diff(before, after, path)`. Lines are split after "\\n" only, as diff, patch and git do,
so a CR stays part of a line's content, and a last line without "\\n" is followed by the
"\\ No newline at end of file" marker. show() colours a diff through rich when the stream is a
terminal (isatty, whatever FORCE_COLOR says), every character a terminal acts on made visible
(text.visible), and writes its exact bytes otherwise: they are the data `patch` reads; a diff
whose lines hold such characters then says so on stderr, those lines made visible there.
write_atomic() replaces a file through a temporary file in the same directory, keeps its mode,
and refuses if the file changed after it was read.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from cadedit.text.align import grouped_opcodes, opcodes
from cadedit.text.atomic import replace_file
from cadedit.text.document import Document
from cadedit.text.visible import visible
from cadedit.errors import ApplyError, OutputError

if TYPE_CHECKING:
    from rich.console import Console

NO_NEWLINE = "\\ No newline at end of file\n"
_DIFF_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")
# Characters git quotes in a path (C-style, inside double quotes); others stay as they are.
_NEEDS_QUOTE = re.compile(r'["\\\x00-\x1f\x7f\udc80-\udcff]')  # and bytes that are not UTF-8
_STYLES = (("diff --git", "bold"), ("---", "bold"), ("+++", "bold"), ("@@", "cyan"), ("-", "red"), ("+", "green"))


def diff_lines(text: str) -> list[str]:
    """Lines as diff, patch and git see them: each ends after a "\\n", the last one may not."""
    return _DIFF_LINE.findall(text)


def _quote(name: str) -> str:
    """A path as git writes it in a header: C-quoted when it holds quotes, backslashes or controls."""
    if not _NEEDS_QUOTE.search(name):
        return name
    escapes = {'"': '\\"', "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
    body = "".join(escapes.get(ch, f"\\{_byte(ch):03o}" if _byte(ch) is not None else ch) for ch in name)
    return f'"{body}"'


def _byte(ch: str) -> int | None:
    """The byte a control character or an undecodable file-name byte (surrogateescape) stands for."""
    if ch < " " or ch == "\x7f":
        return ord(ch)
    if "\udc80" <= ch <= "\udcff":
        return ord(ch) - 0xDC00
    return None


def _header(path: str) -> str:
    """The three header lines; `path` is relative (to the repository or the working directory)."""
    path = path.replace(os.sep, "/").removeprefix("./")
    old, new = _quote(f"a/{path}"), _quote(f"b/{path}")
    # git ends ---/+++ names that hold a space with a TAB so that patch(1) reads the whole name.
    tab = "\t" if " " in path and not old.startswith('"') else ""
    return f"diff --git {old} {new}\n--- {old}{tab}\n+++ {new}{tab}\n"


def _range(start: int, count: int) -> str:
    """A hunk range as GNU diff writes it: "N" for one line, "N,0" after line N for none."""
    if count == 1:
        return f"{start + 1}"
    return f"{start + 1 if count else start},{count}"


def _emit(prefix: str, line: str) -> str:
    return prefix + line if line.endswith("\n") else prefix + line + "\n" + NO_NEWLINE


def _hunk(a: list[str], b: list[str], group: list[tuple[str, int, int, int, int]]) -> str:
    i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
    out = [f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n"]
    for tag, k1, k2, m1, m2 in group:
        if tag == "equal":
            out += [_emit(" ", line) for line in a[k1:k2]]
            continue
        out += [_emit("-", line) for line in a[k1:k2]]
        out += [_emit("+", line) for line in b[m1:m2]]
    return "".join(out)


def unified_diff(before: str, after: str, path: str, context: int = 3) -> str:
    """The unified diff that turns `before` into `after` for the file at `path` ("" when equal)."""
    if before == after:
        return ""
    a, b = diff_lines(before), diff_lines(after)
    groups = grouped_opcodes(opcodes(a, b), context)
    return _header(path) + "".join(_hunk(a, b, group) for group in groups)


def count_changes(diff_text: str) -> tuple[int, int]:
    """(lines added, lines removed) in a diff made by unified_diff()."""
    lines = diff_lines(diff_text)
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++ "))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("--- "))
    return added, removed


def render(diff_text: str, console: Console) -> None:
    """Print a diff in colour; a CR is shown as ^M, a BOM as <BOM> and every other character a terminal
    acts on as text.visible shows it, so that no edit is invisible and none hides another line."""
    from rich.text import Text

    for line in diff_lines(diff_text):
        style = next((s for prefix, s in _STYLES if line.startswith(prefix)), "dim" if line[:1] == "\\" else "")
        body = line.rstrip("\n")
        text = Text(visible(body.rstrip("\r").replace("\ufeff", "<BOM>")), style=style)
        if body.endswith("\r"):
            text.append("^M", style="dim")
        console.print(text, soft_wrap=True, highlight=False)


def show(diff_text: str, stream: TextIO | None = None) -> None:
    """Coloured on a terminal; elsewhere the exact bytes, ready for `patch -p1` or `git apply`."""
    from rich.console import Console

    stream = stream if stream is not None else sys.stdout  # None: fd 1 was closed at startup
    # The stream itself decides, not rich's guess: FORCE_COLOR or TTY_COMPATIBLE must not colour a pipe.
    if stream is not None and _is_tty(stream):
        render(diff_text, Console(file=stream, force_terminal=True, emoji=False))
        return
    if stream is not None and getattr(stream, "buffer", None) is None:
        stream.write(diff_text)
    else:
        write_bytes(stream, diff_text.encode("utf-8"))
    _tell_hidden(diff_text)


HIDDEN_SHOWN = 5  # lines of a diff that hold control characters, shown made visible on stderr
_HIDDEN_WIDTH = 200  # characters of each


def hidden_lines(diff_text: str) -> list[str]:
    """The diff's lines that hold characters a terminal acts on (a CR ending a line aside), made visible."""
    return [shown.rstrip("\r\n") for line in diff_lines(diff_text) if (shown := visible(line, lines=True)) != line]


def _tell_hidden(diff_text: str) -> None:
    """Say on stderr that the diff just written raw holds such characters, and show those lines made
    visible: a diff piped through `tee` or `cat` to a terminal could hide a line from the one reviewing it."""
    hidden = hidden_lines(diff_text)
    if not hidden:
        return
    more = f" (and {len(hidden) - HIDDEN_SHOWN} more)" if len(hidden) > HIDDEN_SHOWN else ""
    sys.stderr.write(
        "warning: the diff holds characters a terminal acts on instead of printing; written as they are, "
        f"and here made visible (^[ is ESC){more}:\n"
        + "".join(f"    {line[:_HIDDEN_WIDTH]}{'…' * (len(line) > _HIDDEN_WIDTH)}\n" for line in hidden[:HIDDEN_SHOWN])
    )


def write_bytes(stream: TextIO | None, data: bytes) -> None:
    """Write data to a text stream's binary buffer, all of it; an OutputError when it cannot take
    it (closed at startup, a full disk, /dev/full); a closed pipe raises BrokenPipeError."""
    if stream is None:  # Python sets sys.stdout to None when fd 1 is closed at startup
        raise OutputError("standard output is closed; nothing written", hint="redirect it to a file or a pipe")
    try:
        stream.flush()
        view = memoryview(data)
        while view:  # a pipe may take less than all
            view = view[stream.buffer.write(view) :]
        stream.buffer.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        _silence(stream)
        raise OutputError(f"cannot write to standard output ({getattr(exc, 'strerror', None) or exc})") from None


def _silence(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null so that the interpreter's last flush of the
    bytes still buffered cannot fail a second time, after the one-line error."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def check_unchanged(document: Document) -> None:
    """Raise ApplyError unless the file still has the size, mtime and bytes it had when read."""
    path = Path(document.path)
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError as exc:
        raise ApplyError(f"{path}: cannot check the file before writing ({exc.strerror or exc})") from None
    stamp_changed = document.mtime_ns is not None and (st.st_mtime_ns, st.st_size) != (document.mtime_ns, document.size)
    if stamp_changed or data != document.to_bytes():
        raise ApplyError(
            f"{path}: changed on disk after cadedit read it; nothing written",
            hint="run cadedit again on the current file",
        )


def check_writable(document: Document, force: bool = False) -> None:
    """Raise ApplyError unless the document's file may be replaced, before anything is written.

    As an editor does: the file must be a regular file whose mode gives its owner write
    permission and that this user could write with `>`; `force` (vim's `:w!`) overrides that
    (never the regular-file rule). The folder must let us create the temporary file.
    """
    target = Path(os.path.realpath(document.path))
    try:
        st = target.stat()
    except OSError as exc:
        raise ApplyError(f"{document.path}: cannot write ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):  # a device or FIFO must never be replaced by a file
        raise ApplyError(f"{document.path}: not a regular file; nothing written")
    if not st.st_mode & stat.S_IWUSR and not force:
        raise ApplyError(
            f"{document.path}: read-only (mode {stat.S_IMODE(st.st_mode):04o}); nothing written",
            hint=f"make it writable first (chmod u+w {document.path}), or pass --force where offered",
        )
    if not os.access(target, os.W_OK) and not force:
        raise ApplyError(
            f"{document.path}: not writable by this user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}); nothing written",
            hint="edit a copy you own, or pass --force where offered",
        )
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise ApplyError(f"{document.path}: cannot create files in {target.parent}; nothing written")


def write_atomic(document: Document, new_text: str, force: bool = False) -> None:
    """Replace the document's file with new_text: temp file in the same directory, fsync, rename.

    The file keeps its mode, setuid/setgid/sticky bits included (and owner where allowed); a
    symlink stays a symlink (its target is replaced). Refuses with ApplyError, the file untouched,
    if it changed since it was read or check_writable() refuses it.
    """
    target = Path(os.path.realpath(document.path))
    check_unchanged(document)
    check_writable(document, force)
    with signals_deferred() as pending:

        def keep_attributes(tmp: str) -> None:
            with contextlib.suppress(OSError):  # chown before chmod: chown clears the setuid and setgid bits
                os.chown(tmp, st.st_uid, st.st_gid)
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            copy_xattrs(target, tmp)  # after chmod: a POSIX ACL (an xattr) sets the group bits as its mask
            check_unchanged(document)  # again, just before the rename: the window stays a few syscalls
            if pending:
                raise_for_signal(pending[0])  # Ctrl-C or SIGTERM before the rename: nothing is written

        try:
            st = target.stat()
            # The rename is the commit point: a signal after it no longer undoes the write.
            replace_file(target, new_text.encode("utf-8"), durable=True, before_rename=keep_attributes)
        except OSError as exc:
            raise ApplyError(f"{document.path}: cannot write ({exc.strerror or exc})") from None


def copy_xattrs(source: Path | str, target: Path | str) -> None:
    """The extended attributes of source (POSIX ACLs, SELinux labels, user.* tags) onto target, where the
    filesystem and this user's rights allow: a file replaced by rename keeps who may read it."""
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(source)
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.setxattr(target, name, os.getxattr(source, name))


_DEFERRED = ("SIGINT", "SIGTERM", "SIGHUP")
_pending: list[int] = []
_depth = 0


@contextlib.contextmanager
def signals_deferred():
    """While files are being replaced, SIGINT, SIGTERM and SIGHUP are recorded instead of acted on,
    so that they cannot leave a temporary file behind or stop a write half done. The caller
    checks the list it gets (raise_for_signal) where stopping is still safe: before a rename, or
    between the files of an all-or-none write. Nested uses share one list; outside the main
    thread (where Python cannot set handlers) signals act as usual."""
    import signal
    import threading

    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    installed = {}
    if _depth == 0:
        _pending.clear()
        for name in _DEFERRED:
            number = getattr(signal, name, None)
            if number is not None:
                installed[number] = signal.signal(number, lambda signum, frame: _pending.append(signum))
    _depth += 1
    try:
        yield _pending
    finally:
        _depth -= 1
        for number, handler in installed.items():
            signal.signal(number, handler)


def raise_for_signal(signum: int) -> None:
    """What the signal would have done: Ctrl-C raises KeyboardInterrupt (exit 130), others exit 128+N."""
    import signal

    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)
