"""The oracle program of an edit, and endpoint perturbation of its copies.

oracle(before, after) aligns the two documents' lines (terminators included, so a changed line
ending is a change) with difflib.SequenceMatcher(autojunk=False), as the paper does (§3, "Oracle
round-trip"): equal blocks become Copy ops, inserted or replaced lines become Gen ops, deleted
lines emit nothing. `resolve(oracle(b, a), b) == a.text` byte for byte. perturb() moves every copy
endpoint by integer noise in [-eps, +eps] from a seeded RNG, clamped to the document (§5).
Pure: no torch, no transformers.
"""

from __future__ import annotations

import difflib
import random

from cadedit.document import Document
from cadedit.program import Copy, Gen, Op, Program


def oracle(before: Document, after: Document) -> Program:
    matcher = difflib.SequenceMatcher(None, before.lines, after.lines, autojunk=False)
    ops: list[Op] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            ops.append(Copy(i1 + 1, i2))
        elif tag in ("replace", "insert"):
            text = "".join(after.lines[j1:j2])
            if ops and isinstance(ops[-1], Gen):
                ops[-1] = Gen(ops[-1].text + text)
            else:
                ops.append(Gen(text))
    return Program(tuple(ops))


def perturb(program: Program, n_lines: int, eps: int, rng: random.Random) -> Program:
    """Each copy endpoint moved by an integer drawn uniformly from [-eps, eps], clamped to [1, n_lines]."""

    def move(k: int) -> int:
        return min(max(k + rng.randint(-eps, eps), 1), max(n_lines, 1))

    ops: list[Op] = []
    for op in program.ops:
        if isinstance(op, Copy):
            start, end = sorted((move(op.start), move(op.end)))
            op = Copy(start, end)
        ops.append(op)
    return Program(tuple(ops))
