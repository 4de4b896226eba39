"""Sketches: what another model hands back for a file, read into the stretches cadedit.text.merge places.

Contract: read_answer(text) splits a chat answer into the fenced blocks it holds, each with the file its
path line or info string names (None when it names none) and its first line in the answer (blocks_for:
those for one file);
read_sketch(body, file_lines) reads one block (or a whole sketch file) as its form and its parts, every
part carrying its line numbers in the sketch (1-based, counted from `first`). The forms:

- "search-replace": Aider's `<<<<<<< SEARCH` / `=======` / `>>>>>>> REPLACE` blocks, several per sketch;
- "diff": unified diff hunks (`@@ -a,b +c,d @@`), their context allowed to be stale or shifted;
- "lazy": the changed code with "existing code" markers (a comment in any common syntax that says
  `...`, "existing code", "rest of the file", "unchanged"; `...` alone on a line) where lines are kept;
- "whole": none of these: the file or a part of it, as it should read.

A marker line that is also a line of the file is the file's own text, not a marker. Pure: no torch.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import PurePath

from cadedit.errors import DocumentError

FORMS = ("lazy", "search-replace", "diff", "whole")

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\b.*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\b.*$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DIFF_HEADER = re.compile(r"^(?:--- |\+\+\+ |diff --git |index [0-9a-f]+\.\.)")
# A comment alone on a line, in the syntaxes chat models write markers in; its text is group "body".
_COMMENT = re.compile(r"^\s*(?:#+|//+|/\*+|<!--|--|;+|\{/\*)\s*(?P<body>.*?)\s*(?:\*+/\}?|-->)?\s*$")
_MARKER_WORDS = re.compile(
    r"^(?:\.{3}|…)|(?:\.{3}|…)$|\b(?:existing|unchanged|rest of|remaining|remainder|same as (?:before|above)|"
    r"as before|omitted|elided|no changes?|other (?:code|methods|functions|imports|fields|cases)|"
    r"previous (?:code|content)|code above|code below|keep (?:the )?(?:rest|existing))\b",
    re.I,
)
_BARE = re.compile(r"^\s*(?:\.{3}|…)\s*$")
_FENCE = re.compile(r"^(?P<indent>\s{0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# A path as chat answers name one: a word with a slash or a dot-suffix, in backticks, bold or a heading.
_PATH = r"[\w./\\-]*[\w-]\.[A-Za-z0-9]{1,8}|[\w.-]+/[\w./-]+"
_PATH_LINE = re.compile(
    rf"^\s*(?:#{{1,6}}\s*)?(?:(?:file(?:name)?|path|in)\s*:?\s*)?[*_`\"']*(?P<path>{_PATH})[*_`\"']*\s*:?\s*$", re.I
)
_INFO_PATH = re.compile(rf"(?:^|[\s:])(?:(?:title|file|path)=)?[\"']?(?P<path>{_PATH})[\"']?\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a chat answer (or the whole sketch when it has none)."""

    path: str | None  # the file it names, None when it names none
    body: tuple[str, ...]  # its lines, without terminators
    first: int  # the line number in the answer of its first body line


@dataclass(frozen=True)
class Stretch:
    """A run of sketch lines: for a lazy or whole sketch, lines between markers; `lines` their text."""

    lines: tuple[str, ...]
    first: int  # its first line's number in the sketch
    marker_before: bool  # a marker comes right before it (file lines are kept there)
    marker_after: bool


@dataclass(frozen=True)
class Replacement:
    """A SEARCH/REPLACE block or a diff hunk: `old` is to be found in the file, `new` put instead."""

    old: tuple[str, ...]
    new: tuple[str, ...]
    first: int  # the line number in the sketch where it starts
    last: int
    at: int | None = None  # a hunk's own idea of its first old line (1-based), None for SEARCH/REPLACE

    def added(self) -> tuple[str, ...]:
        """new's lines that are not old's lines kept (in order) from old to new."""
        kept = set()
        for m in difflib.SequenceMatcher(None, self.old, self.new, autojunk=False).get_matching_blocks():
            kept.update(range(m.b, m.b + m.size))
        return tuple(x for k, x in enumerate(self.new) if k not in kept)


@dataclass(frozen=True)
class Sketch:
    """One file's sketch, read: its form and its parts (stretches for lazy/whole, replacements else)."""

    form: str
    stretches: tuple[Stretch, ...] = ()
    replacements: tuple[Replacement, ...] = ()

    def written(self) -> tuple[str, ...]:
        """The lines the other model wrote that the result must hold: stretches' lines, and the lines a
        replacement adds (its context, kept from old to new, may be stale: the file's lines stand there)."""
        if self.stretches:
            return tuple(line for s in self.stretches for line in s.lines)
        return tuple(line for r in self.replacements for line in r.added())


def read_answer(text: str) -> tuple[Block, ...]:
    """The fenced blocks of a chat answer with the path each names; the whole text as one unnamed block
    when it has no fence. A fence left open is an error (the answer was cut off)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    k = 0
    while k < len(lines):
        opening = _FENCE.match(lines[k])
        if opening is None:
            k += 1
            continue
        close = _closing(lines, k, opening.group("fence"))
        if close is None:
            raise DocumentError(
                f"sketch line {k + 1}: the code fence opened here is never closed (the answer was cut off?)",
                hint="give the whole answer, or the code without its fences",
            )
        path = _info_path(opening.group("info")) or _path_before(lines, k)
        blocks.append(Block(path, tuple(lines[k + 1 : close]), k + 2))
        k = close + 1
    return tuple(blocks) if blocks else (Block(None, tuple(lines), 1),)


def blocks_for(blocks: tuple[Block, ...], file: str) -> list[Block]:
    """The blocks of an answer that are FILE's: those naming it (the same path, or one path ending with the
    other), else the unnamed ones."""
    mine = [b for b in blocks if b.path is not None and same_file(b.path, file)]
    return mine or [b for b in blocks if b.path is None]


def same_file(named: str, file: str) -> bool:
    """Whether a block's path names FILE: one path's parts end with the other's."""
    a, b = PurePath(named).parts, PurePath(file).parts
    n = min(len(a), len(b))
    return n > 0 and a[-n:] == b[-n:]


def _closing(lines: list[str], start: int, fence: str) -> int | None:
    for k in range(start + 1, len(lines)):
        if lines[k].strip() == fence[0] * len(lines[k].strip()) and len(lines[k].strip()) >= len(fence):
            return k
    return None


def _info_path(info: str) -> str | None:
    """The path a fence's info string names: ```python app.py, ```app.py, ```py title="app.py", ```python:app.py."""
    info = info.strip()
    if not info:
        return None
    m = _INFO_PATH.search(info.replace(":", " ", 1) if re.match(r"^\w+:", info) else info)
    return m.group("path") if m else None


def _path_before(lines: list[str], fence: int) -> str | None:
    """The path named on the last non-blank line before a fence, when that line is only a path."""
    for k in range(fence - 1, max(-1, fence - 3), -1):
        if lines[k].strip():
            m = _PATH_LINE.match(lines[k])
            return m.group("path") if m else None
    return None


def is_marker(line: str, file_lines: frozenset[str]) -> bool:
    """Whether a sketch line says "the file's lines are kept here" rather than being code."""
    if line.strip() in file_lines:
        return False
    if _BARE.match(line):
        return True
    m = _COMMENT.match(line)
    return bool(m) and bool(_MARKER_WORDS.search(m.group("body").strip()))


def read_sketch(body: tuple[str, ...], file_lines: tuple[str, ...], first: int = 1) -> Sketch:
    """One file's sketch as its form and parts (module docstring). DocumentError for a SEARCH/REPLACE
    block or a diff hunk that is not complete, naming its line."""
    if any(_SEARCH.match(line) for line in body):
        return Sketch("search-replace", replacements=_search_replace(body, first))
    if any(_HUNK.match(line) for line in body):
        return Sketch("diff", replacements=_hunks(body, first))
    known = frozenset(line.strip() for line in file_lines)
    stretches: list[Stretch] = []
    run: list[str] = []
    start, marker_before = first, False
    for k, line in enumerate(body):
        if is_marker(line, known):
            if _content(run):
                stretches.append(Stretch(tuple(run), start, marker_before, True))
            run, marker_before, start = [], True, first + k + 1
        else:
            run.append(line)
    if _content(run):
        stretches.append(Stretch(tuple(run), start, marker_before, False))
    lazy = any(s.marker_before or s.marker_after for s in stretches)
    return Sketch("lazy" if lazy else "whole", stretches=tuple(stretches))


def _content(lines: list[str]) -> bool:
    return any(line.strip() for line in lines)


def _search_replace(body: tuple[str, ...], first: int) -> tuple[Replacement, ...]:
    """Every SEARCH/REPLACE block; lines outside them (a path, prose) are ignored."""
    out, k = [], 0
    while k < len(body):
        if not _SEARCH.match(body[k]):
            k += 1
            continue
        divider = next((j for j in range(k + 1, len(body)) if _DIVIDER.match(body[j])), None)
        end = next((j for j in range(divider + 1, len(body)) if _REPLACE.match(body[j])), None) if divider else None
        if end is None:
            raise DocumentError(
                f"sketch line {first + k}: this SEARCH block has no "
                + ("=======" if divider is None else ">>>>>>> REPLACE")
                + " after it",
                hint="give the whole SEARCH/REPLACE block",
            )
        out.append(Replacement(tuple(body[k + 1 : divider]), tuple(body[divider + 1 : end]), first + k, first + end))
        k = end + 1
    return tuple(out)


def _hunks(body: tuple[str, ...], first: int) -> tuple[Replacement, ...]:
    """Every hunk of a unified diff (one file's; headers are skipped): old = context and `-` lines, new =
    context and `+` lines. The counts in a hunk's header are not trusted (models miscount them): a hunk
    ends at the next header or at a line that is none of ` `, `-`, `+`, `\\`."""
    out, k = [], 0
    while k < len(body):
        m = _HUNK.match(body[k])
        if m is None:
            k += 1
            continue
        old, new, j = [], [], k + 1
        while j < len(body) and not _HUNK.match(body[j]) and not _DIFF_HEADER.match(body[j]):
            line = body[j]
            if line.startswith("\\"):
                j += 1
                continue
            tag, text = (line[:1], line[1:]) if line else (" ", "")
            if tag not in " -+":
                break
            if tag != "+":
                old.append(text)
            if tag != "-":
                new.append(text)
            j += 1
        while j > k + 1 and body[j - 1] == "" and old[-1:] == [""] and new[-1:] == [""]:
            old.pop()  # an empty line after the hunk (an editor stripped its blank context line, or prose)
            new.pop()
            j -= 1
        out.append(Replacement(tuple(old), tuple(new), first + k, first + j - 1, int(m.group(1))))
        k = max(j, k + 1)
    return tuple(out)
