"""The oracle program of an edit.

oracle(before, after) aligns the two documents' lines (terminators included, so a changed line
ending is a change) with difflib.SequenceMatcher(autojunk=False), as the paper does (§3, "Oracle
round-trip"; align.py keeps that near-linear on big files with many repeated lines): equal
blocks become Copy ops, inserted or replaced lines become Gen ops, deleted lines emit nothing.
Lines are compared without a BOM, which follows the resolver's rule (a copy of line 1 brings it;
otherwise the first gen does). `resolve(oracle(b, a), b) == a.text` byte for byte.
Pure: no torch, no transformers.
"""

from __future__ import annotations

from cadedit.text.align import opcodes
from cadedit.text.document import BOM, Document
from cadedit.text.program import Copy, Gen, Op, Program


def oracle(before: Document, after: Document) -> Program:
    a, b = _content_lines(before), _content_lines(after)
    ops: list[Op] = []
    for tag, i1, i2, j1, j2 in opcodes(a, b):
        if tag == "equal":
            ops.append(Copy(i1 + 1, i2))
        elif tag in ("replace", "insert"):
            ops.append(Gen("".join(b[j1:j2])))
    # The resolver puts before's BOM in front of the output for a copy of line 1 (resolve.py).
    copies_line_1 = before.bom and any(op.start == 1 for op in ops if isinstance(op, Copy))
    if copies_line_1 and not after.bom:
        ops = _without_copy_of_line_1(ops, a[0])
    elif after.bom and not copies_line_1:
        ops.insert(0, Gen(BOM))
    return Program(tuple(_merge_gens(ops)))


def _content_lines(document: Document) -> list[str]:
    """The document's lines with the BOM taken off line 1: the text that copies and gens emit."""
    lines = list(document.lines)
    if document.bom:
        lines[0] = lines[0][len(BOM) :]
    return lines


def _without_copy_of_line_1(ops: list[Op], line_1: str) -> list[Op]:
    """Line 1 as a gen instead of a copy, so that the BOM the output must not have stays out."""
    out: list[Op] = []
    for op in ops:
        if isinstance(op, Copy) and op.start == 1:
            out.append(Gen(line_1))
            if op.end > 1:
                out.append(Copy(2, op.end))
        else:
            out.append(op)
    return out


def _merge_gens(ops: list[Op]) -> list[Op]:
    out: list[Op] = []
    for op in ops:
        if isinstance(op, Gen) and out and isinstance(out[-1], Gen):
            out[-1] = Gen(out[-1].text + op.text)
        elif not (isinstance(op, Gen) and not op.text):
            out.append(op)
    return out
