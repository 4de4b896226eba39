"""Documents: a file's bytes as lines that keep their own terminators.

Contract: `Document.from_bytes(data).to_bytes() == data` for every UTF-8 input. Each line keeps
its terminator ("\\n", "\\r\\n", "\\r", or "" for a last line without one); a UTF-8 BOM stays as
the first character of line 1 so that copies, gens and the resolver stay byte-exact without a
special case. Only regular files are read (FIFOs and devices are refused before they are opened
for reading, so nothing hangs), at most MAX_BYTES. Binary files (NUL bytes), non-UTF-8 bytes,
directories and missing paths are refused with a DocumentError that names the path. Pure: no torch, no transformers.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from cadedit.errors import DocumentError

BOM = "\ufeff"
# The largest file cadedit reads (64 MiB): far above any source file a model can edit, small
# enough that a mistaken path (a disk image, a log) fails at once instead of filling memory.
MAX_BYTES = 64 * 1024 * 1024
# A line is the shortest run of text ending in a terminator, or the unterminated rest.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_TERMINATOR = re.compile(r"(\r\n|\r|\n)$")


def split_lines(text: str) -> tuple[str, ...]:
    """Split text into lines, each with its own terminator; "".join(result) == text."""
    return tuple(m.group(0) for m in _LINE.finditer(text))


def line_body(line: str) -> str:
    """The line without its terminator."""
    return _TERMINATOR.sub("", line)


def line_terminator(line: str) -> str:
    """The line's terminator, or "" for an unterminated last line."""
    m = _TERMINATOR.search(line)
    return m.group(1) if m else ""


@dataclass(frozen=True)
class Document:
    """An immutable text document: its lines (terminators included) and where it came from."""

    lines: tuple[str, ...]
    path: str = "<text>"
    mtime_ns: int | None = None
    size: int | None = None

    @classmethod
    def from_text(cls, text: str, path: str = "<text>") -> Document:
        return cls(split_lines(text), path)

    @classmethod
    def from_bytes(cls, data: bytes, path: str = "<bytes>") -> Document:
        wide = _wide_encoding(data)
        if wide:
            raise DocumentError(
                f"{path}: {wide} text; cadedit edits UTF-8 files only",
                hint=f"convert it first, e.g. iconv -f {wide} -t UTF-8",
            )
        if b"\x00" in data:
            offset = data.index(b"\x00")
            raise DocumentError(f"{path}: binary file (NUL byte at offset {offset}); cadedit edits text files only")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise DocumentError(
                f"{path}: not UTF-8 (invalid byte 0x{data[exc.start]:02x} at line {line}, offset {exc.start})",
                hint="convert the file to UTF-8 first, e.g. with iconv",
            ) from None
        return cls(split_lines(text), path)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Document:
        """Read a regular file, remembering its size and mtime so a later write can detect changes.

        Anything else (a FIFO, a device, a socket) is refused before it is opened for reading, so
        a pipe without a writer cannot hang cadedit and /dev/zero cannot fill memory; a file over
        MAX_BYTES is refused too.
        """
        p = Path(path)
        data, st = read_regular(p, MAX_BYTES)
        doc = cls.from_bytes(data, str(p))
        return cls(doc.lines, str(p), st.st_mtime_ns, st.st_size)

    @classmethod
    def read_stream(cls, stream, path: str = "<stdin>") -> Document:
        """A document from a binary stream (stdin), read up to MAX_BYTES like any file."""
        data = stream.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise _too_large(Path(path))
        return cls.from_bytes(data, path)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def to_bytes(self) -> bytes:
        return self.text.encode("utf-8")

    @property
    def n_lines(self) -> int:
        return len(self.lines)

    @property
    def bom(self) -> bool:
        return bool(self.lines) and self.lines[0].startswith(BOM)

    @property
    def newline(self) -> str:
        """The dominant line terminator ("\\n" when the file has none), for text the model writes."""
        counts: dict[str, int] = {}
        for line in self.lines:
            end = line_terminator(line)
            if end:
                counts[end] = counts.get(end, 0) + 1
        return max(counts, key=counts.get) if counts else "\n"

    def display_lines(self) -> list[str]:
        """Line bodies as the model sees them: no terminators, no BOM."""
        bodies = [line_body(line) for line in self.lines]
        if bodies and bodies[0].startswith(BOM):
            bodies[0] = bodies[0][len(BOM) :]
        return bodies

    def display_text(self, start: int, end: int) -> str:
        """Lines start..end (1-based, inclusive) as the model sees them, each ending in "\\n".

        A last line without a terminator is shown without one, so that copying it reproduces
        what the model would have written.
        """
        bodies = self.display_lines()
        out = []
        for k in range(start, end + 1):
            out.append(bodies[k - 1] + ("\n" if line_terminator(self.lines[k - 1]) else ""))
        return "".join(out)

    def numbered(self, width: int | None = None, sep: str = " | ") -> str:
        """Numbered rendering for the prompt (paper Figure 2): right-aligned numbers, one line each."""
        bodies = self.display_lines()
        width = width or len(str(max(len(bodies), 1)))
        return "".join(f"{k:>{width}}{sep}{body}\n" for k, body in enumerate(bodies, 1))


def read_regular(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most `limit` bytes, and its stat; a one-line DocumentError for
    anything else (a FIFO, a device, a socket: refused before it is opened for reading, so a pipe
    without a writer cannot hang cadedit and /dev/zero cannot fill memory) and for a larger file.
    Every file cadedit reads whose kind it does not control goes through here."""
    st = _stat_regular(path)
    if st.st_size > limit:
        raise _too_large(path, limit)
    try:  # O_NONBLOCK: if the path became a FIFO since the stat, open must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        data = _read_at_most(fd, limit + 1)
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise _too_large(path, limit)
    return data, st


def _stat_regular(path: Path) -> os.stat_result:
    """stat() the path (symlinks followed); a DocumentError unless it is a regular file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _os_error(path, exc) from None
    except ValueError:  # a NUL byte in the name
        raise DocumentError(f"{path!r}: not a valid file name") from None
    if stat.S_ISDIR(st.st_mode):
        raise DocumentError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    return st


def _not_regular(path: Path, mode: int) -> DocumentError:
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return DocumentError(
        f"{path}: is {kind}; cadedit reads and writes regular files only",
        hint="to edit piped text, use `cadedit fix - ...` with the text on stdin",
    )


def _too_large(path: Path, limit: int | None = None) -> DocumentError:
    limit = MAX_BYTES if limit is None else limit  # read when raised: tests lower the cap
    what = "cadedit edits source files" if limit == MAX_BYTES else "more than such a file holds"
    return DocumentError(f"{path}: larger than {limit:,} bytes; {what}")


def _os_error(path: Path, exc: OSError) -> DocumentError:
    """A one-line DocumentError for a failed stat or open, in words a user can act on."""
    if exc.errno == errno.ENOENT:
        broken = os.path.islink(path)
        return DocumentError(f"{path}: {'broken symlink (its target does not exist)' if broken else 'no such file'}")
    if exc.errno == errno.ELOOP:
        return DocumentError(f"{path}: symlink loop (too many levels of symbolic links)")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return DocumentError(f"{path}: permission denied", hint="check the permissions of the file and its folders")
    if exc.errno == errno.ENOTDIR:
        return DocumentError(f"{path}: no such file (a part of the path is not a folder)")
    return DocumentError(f"{path}: cannot read ({exc.strerror or exc})")


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _wide_encoding(data: bytes) -> str | None:
    """ "UTF-16" or "UTF-32" when the bytes look like it (a BOM, or ASCII text with NUL padding)."""
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    head = data[:512]
    if len(head) >= 4 and len(head) % 4 == 0:
        for k in range(4):  # one non-NUL byte in every four, always at the same place
            if all(head[k::4]) and not any(b for j in range(4) if j != k for b in head[j::4]):
                return "UTF-32"
    if len(head) % 2 and len(data) <= len(head):
        return None  # UTF-16 text is an even number of bytes
    head = head[: len(head) // 2 * 2]
    if len(head) >= 4:
        for k in range(2):
            if all(head[k::2]) and not any(head[1 - k :: 2]):
                return "UTF-16"
    return None
