"""The resolver: program + input document -> edited text, byte-exact, pure and deterministic.

Semantics (paper §2.2, made byte-exact): a Copy(i, j) emits input lines i..j with their own
terminators; a Gen emits its text verbatim; ops are concatenated with nothing in between. So
`resolve(oracle(before, after), before) == after` for every pair, CRLF, BOM and a missing final
newline included. Strict mode raises on an index outside 1..N or i > j; clipped mode clips to
[1, N] (swapping i > j) and reports a warning for each op it changed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cadedit.document import BOM, Document
from cadedit.errors import ProgramError
from cadedit.program import Copy, Gen, Op, Program, format_op


class Mode(str, enum.Enum):
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


def resolve_ops(program: Program, document: Document, mode: Mode = Mode.STRICT) -> Resolution:
    lines = document.lines
    parts: list[str] = []
    warnings: list[str] = []
    for number, op in enumerate(program.ops, 1):
        if not isinstance(op, Copy):
            parts.append(op.text)
            continue
        problem = check_copy(op, len(lines), number)
        if problem and mode is Mode.STRICT:
            raise ProgramError(problem, hint="fix the line numbers, or pass --clip to clip them to the file")
        if problem:
            clipped = clip_copy(op, len(lines))
            warnings.append(f"{problem}; clipped to {format_op(clipped).strip() if clipped else 'nothing'}")
            if clipped is None:
                continue
            op = clipped
        parts.append("".join(lines[op.start - 1 : op.end]))
    return Resolution("".join(parts), tuple(warnings))


def resolve(program: Program, document: Document, mode: Mode = Mode.STRICT) -> str:
    """The edited text. Strict mode raises ProgramError on a copy that does not fit the document."""
    return resolve_ops(program, document, mode).text


# -- display form <-> document form ------------------------------------------------------------


def to_document_program(program: Program, document: Document) -> Program:
    """The model writes gens with "\\n" and never sees the BOM: give gens the file's own newline,
    and keep a BOM the file had when the program does not start by copying line 1."""
    newline = document.newline
    ops: list[Op] = [Gen(_renewline(op.text, newline)) if isinstance(op, Gen) else op for op in program.ops]
    starts_with_line_1 = bool(ops) and isinstance(ops[0], Copy) and ops[0].start == 1
    if document.bom and not starts_with_line_1:
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
