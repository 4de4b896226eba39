"""Documents: a file's bytes as lines that keep their own terminators.

Contract: `Document.from_bytes(data).to_bytes() == data` for every UTF-8 input. Each line keeps
its terminator ("\\n", "\\r\\n", "\\r", or "" for a last line without one); a UTF-8 BOM stays as
the first character of line 1 so that copies, gens and the resolver stay byte-exact without a
special case. Binary files (NUL bytes), non-UTF-8 bytes, directories and missing paths are
refused with a DocumentError that names the path. Pure: no torch, no transformers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cadedit.errors import DocumentError

BOM = "\ufeff"
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
        """Read a file from disk, remembering its size and mtime so a later write can detect changes."""
        p = Path(path)
        if not p.exists():
            raise DocumentError(f"{p}: no such file")
        if p.is_dir():
            raise DocumentError(f"{p}: is a directory, not a file")
        try:
            data = p.read_bytes()
            st = p.stat()
        except OSError as exc:
            raise DocumentError(f"{p}: cannot read ({exc.strerror or exc})") from None
        doc = cls.from_bytes(data, str(p))
        return cls(doc.lines, str(p), st.st_mtime_ns, st.st_size)

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
