"""Oracle programs follow the line alignment; perturbation is seeded and stays in the document."""

import random

from cadedit.text.document import Document
from cadedit.bench.perturb import perturb
from cadedit.text.oracle import oracle
from cadedit.text.program import Copy, Gen, Program


def test_oracle_program_shape():
    before = Document.from_text("def f(a, b):\n    return a - b\n\nprint(f(1, 2))\n")
    after = Document.from_text("def f(a, b):\n    return a + b\n\nprint(f(1, 2))\n")
    assert oracle(before, after) == Program((Copy(1, 1), Gen("    return a + b\n"), Copy(3, 4)))


def test_deletions_emit_nothing_and_adjacent_gens_merge():
    before = Document.from_text("a\nb\nc\nd\n")
    after = Document.from_text("a\nX\nY\nd\n")
    assert oracle(before, after) == Program((Copy(1, 1), Gen("X\nY\n"), Copy(4, 4)))
    assert oracle(before, Document.from_text("a\nd\n")) == Program((Copy(1, 1), Copy(4, 4)))


def test_perturb_is_seeded_and_clamped():
    program = Program((Copy(1, 2), Gen("x\n"), Copy(5, 6)))
    one = perturb(program, 6, 3, random.Random(7))
    assert one == perturb(program, 6, 3, random.Random(7))
    for _ in range(200):
        moved = perturb(program, 6, 5, random.Random(_))
        assert moved.ops[1] == Gen("x\n")
        for op in moved.copies:
            assert 1 <= op.start <= op.end <= 6


def test_perturb_zero_noise_is_identity():
    program = Program((Copy(2, 3), Copy(4, 4)))
    assert perturb(program, 4, 0, random.Random(0)) == program
