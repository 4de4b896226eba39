"""align.opcodes: difflib's answer on small inputs, a valid and near-linear one on big inputs with
many repeated lines (the case that made difflib quadratic), bounded by what difflib is given.

Measured here (2 shared cores), `cadedit oracle f.py g.py > p; time cadedit apply f.py p` on
200,000 lines, half of them blank, 200 lines changed and 2 inserted: 0.6-1.0 s wall (0.5 s CPU),
the oracle 1.3 s; 20,000 lines: 0.7 s (17.5 s with difflib alone, 2m19s on this busy machine).
"""

from __future__ import annotations

import difflib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from cadedit.text import align
from cadedit.text.diff import diff_lines, unified_diff
from cadedit.text.document import Document
from cadedit.text.oracle import oracle
from cadedit.text.program import Copy
from cadedit.text.resolve import resolve


def big_pair(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """n lines, every other one blank; every 1000th line changed, a few inserted and deleted."""
    rng = random.Random(seed)
    before = [line for k in range(n // 2) for line in (f"x{k} = {k}\n", "\n")]
    after = list(before)
    for k in range(0, n, 1000):
        after[k] = f"y{k} = changed\n"
    for _ in range(5):
        k = rng.randrange(len(after))
        after[k:k] = ["inserted\n", "\n"]
        del after[rng.randrange(len(after))]
    return before, after


def check(codes, a, b) -> None:
    """Opcodes cover both sides in order, and their equal blocks are equal."""
    i = j = 0
    for tag, i1, i2, j1, j2 in codes:
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a\n", "b\n", "\n", "c"]), max_size=40),
    st.lists(st.sampled_from(["a\n", "b\n", "\n", "d\n"]), max_size=40),
)
def test_small_inputs_get_difflibs_own_opcodes(a, b):
    assert align.opcodes(a, b) == difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a\n", "b\n", "\n", "x\n", "y\n"]), max_size=60),
    st.lists(st.sampled_from(["a\n", "b\n", "\n", "x\n", "z\n"]), max_size=60),
    st.integers(0, 40),
)
def test_the_big_input_path_is_valid_on_any_input(a, b, small):
    original, align.SMALL = align.SMALL, small  # force the anchor path on small inputs
    try:
        codes = align.opcodes(a, b)
    finally:
        align.SMALL = original
    check(codes, a, b)


def test_grouped_opcodes_match_difflib():
    a, b = big_pair(3000)
    ours = list(align.grouped_opcodes(align.opcodes(a, b), 3))
    theirs = list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3))
    assert ours == theirs


def test_work_on_many_repeated_lines_is_bounded(monkeypatch):
    """Not timed: difflib only ever sees small pieces, and all of them together stay linear."""
    seen = []
    real = difflib.SequenceMatcher

    def counting(isjunk, a, b, autojunk=True):
        seen.append(len(a) * len(b))
        return real(isjunk, a, b, autojunk=autojunk)

    monkeypatch.setattr(align.difflib, "SequenceMatcher", counting)
    a, b = big_pair(200_000)
    codes = align.opcodes(a, b)
    check(codes, a, b)
    assert max(seen) <= align.SMALL
    assert sum(seen) <= 20 * (len(a) + len(b))  # line pairs handed to difflib: linear in the file
    kept = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag == "equal")
    assert kept >= len(a) - 220  # copies stay maximal: only the changed lines are not kept


def test_oracle_and_diff_on_a_big_file_are_exact():
    a, b = big_pair(50_000, seed=1)
    before, after = Document.from_text("".join(a)), Document.from_text("".join(b))
    program = oracle(before, after)
    assert resolve(program, before) == after.text
    assert sum(op.end - op.start + 1 for op in program.ops if isinstance(op, Copy)) >= len(a) - 60
    diff = unified_diff(before.text, after.text, "f.py")
    assert sum(1 for line in diff_lines(diff) if line[:1] in "+-") < 300


def test_apply_and_oracle_on_200000_lines_hand_difflib_only_small_pieces(tmp_path, monkeypatch):
    """Through the CLI: `cadedit oracle` and `cadedit apply` on the 200,000-line file (not timed)."""
    from typer.testing import CliRunner

    from cadedit.cli import root as cli

    seen = []
    real = difflib.SequenceMatcher
    monkeypatch.setattr(
        align.difflib,
        "SequenceMatcher",
        lambda isjunk, a, b, autojunk=True: seen.append(len(a) * len(b)) or real(isjunk, a, b, autojunk=autojunk),
    )
    a, b = big_pair(200_000, seed=2)
    (tmp_path / "f.py").write_text("".join(a))
    (tmp_path / "g.py").write_text("".join(b))
    monkeypatch.chdir(tmp_path)
    program = CliRunner().invoke(cli.app, ["oracle", "f.py", "g.py"])
    assert program.exit_code == 0
    (tmp_path / "p").write_bytes(program.stdout_bytes)
    applied = CliRunner().invoke(cli.app, ["apply", "f.py", "p", "--write"])
    assert applied.exit_code == 0, applied.output
    assert (tmp_path / "f.py").read_text() == "".join(b)
    assert max(seen) <= align.SMALL and sum(seen) <= 40 * (len(a) + len(b))
