"""The resolver: program + input document -> edited text, byte-exact, pure and deterministic.

Semantics (paper §2.2, made byte-exact): a Copy(i, j) emits input lines i..j with their own
terminators; a Gen emits its text verbatim; ops are concatenated with nothing in between, with
two rules for the bytes a model never sees:
- BOM: a file's UTF-8 BOM is not part of line 1's text. A copy of line 1 puts it in front of the
  output, once, wherever that copy stands (a gen above line 1 keeps it at the start, never in the
  middle); a program without a copy of line 1 says in its first gen whether the output has one.
- Last line: a copy that ends at the file's unterminated last line, followed by more output, ends
  that line with the file's newline (the model is told every line it writes ends with one), so
  `<copy lines="1-2"/><gen>z = 3\\n</gen>` on "x = 1\\ny = 2" appends a line instead of joining two.
So `resolve(oracle(before, after), before) == after` for every pair, CRLF, BOM and a missing final
newline included (the oracle follows both rules). Strict mode raises on an index outside 1..N or
i > j; clipped mode clips to [1, N] (swapping i > j) and reports a warning for each op it changed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cadedit.text.document import BOM, Document, line_terminator
from cadedit.errors import ProgramError
from cadedit.text.program import Copy, Gen, Op, Program, format_op


class Bounds(str, enum.Enum):
    """What a copy outside the document does: STRICT raises, CLIPPED clips it to the document and warns."""

    STRICT = "strict"
    CLIPPED = "clipped"


@dataclass(frozen=True)
class Resolution:
    text: str
    warnings: tuple[str, ...] = ()


def check_copy(op: Copy, n_lines: int, number: int) -> str | None:
    """Why a copy does not fit a document of n_lines lines, or None if it does."""
    shown = format_op(op).strip()
    if op.start > op.end:
        return f"program op {number}: `{shown}` starts after it ends"
    if op.start < 1 or op.end > n_lines:
        return f"program op {number}: `{shown}` but the file has {n_lines} line{'s' * (n_lines != 1)}"
    return None


def clip_copy(op: Copy, n_lines: int) -> Copy | None:
    """The copy clipped to [1, n_lines] (endpoints swapped if reversed); None when nothing is left."""
    start, end = sorted((op.start, op.end))
    start, end = max(start, 1), min(end, n_lines)
    return Copy(start, end) if start <= end else None


def resolve_ops(program: Program, document: Document, mode: Bounds = Bounds.STRICT) -> Resolution:
    lines = document.lines
    parts: list[str] = []
    warnings: list[str] = []
    copies_line_1 = False  # the file's BOM goes in front of the output, once (see the module docstring)
    open_line = False  # the last part copied the file's unterminated last line
    for number, op in enumerate(program.ops, 1):
        if isinstance(op, Copy):
            problem = check_copy(op, len(lines), number)
            if problem and mode is Bounds.STRICT:
                raise ProgramError(problem, hint="fix the line numbers, or pass --clip to clip them to the file")
            if problem:
                clipped = clip_copy(op, len(lines))
                warnings.append(f"{problem}; clipped to {format_op(clipped).strip() if clipped else 'nothing'}")
                if clipped is None:
                    continue
                op = clipped
            text = "".join(lines[op.start - 1 : op.end])
            if op.start == 1 and document.bom:
                text, copies_line_1 = text[len(BOM) :], True
        else:
            text = op.text
        if open_line and text:
            parts.append(document.newline)  # more output follows the unterminated last line: end it
        parts.append(text)
        if text:
            open_line = isinstance(op, Copy) and op.end == len(lines) and not line_terminator(lines[-1])
    return Resolution((BOM if copies_line_1 else "") + "".join(parts), tuple(warnings))


def resolve(program: Program, document: Document, mode: Bounds = Bounds.STRICT) -> str:
    """The edited text. Strict mode raises ProgramError on a copy that does not fit the document."""
    return resolve_ops(program, document, mode).text


# -- display form <-> document form ------------------------------------------------------------


def to_document_program(program: Program, document: Document) -> Program:
    """The model writes gens with "\\n" and never sees the BOM: give gens the file's own newline,
    and keep a BOM the file had when no copy of line 1 brings it along (the resolver puts it in
    front of the output for a copy of line 1, wherever that copy stands)."""
    newline = document.newline
    ops: list[Op] = [Gen(_renewline(op.text, newline)) if isinstance(op, Gen) else op for op in program.ops]
    copies_line_1 = any(isinstance(op, Copy) and min(op.start, op.end) <= 1 <= max(op.start, op.end) for op in ops)
    if document.bom and not copies_line_1:
        if ops and isinstance(ops[0], Gen):
            ops[0] = Gen(ops[0].text if ops[0].text.startswith(BOM) else BOM + ops[0].text)
        else:
            ops.insert(0, Gen(BOM))
    return Program(tuple(ops))


def to_display_program(program: Program, document: Document) -> Program:
    """Inverse of to_document_program for consistent files: the program as the model would write it."""
    ops: list[Op] = []
    for k, op in enumerate(program.ops):
        if isinstance(op, Gen):
            text = op.text.replace("\r\n", "\n").replace("\r", "\n")
            op = Gen(text[len(BOM) :] if k == 0 and text.startswith(BOM) else text)
            if not op.text:
                continue
        ops.append(op)
    return Program(tuple(ops))


def _renewline(text: str, newline: str) -> str:
    if newline == "\n":
        return text
    return text.replace("\r\n", "\n").replace("\n", newline)
