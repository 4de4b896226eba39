"""Line alignment for the oracle and the diff: difflib's opcodes, in near-linear time on big files.

Contract: opcodes(a, b) returns difflib-style opcodes ("equal", "replace", "delete", "insert"
with i1, i2, j1, j2) whose equal blocks are truly equal and that cover both sequences in order.
Inputs with at most SMALL line pairs (len(a) * len(b)) go to difflib.SequenceMatcher(autojunk=
False) unchanged, so ordinary files align exactly as before. Bigger ones are cut first: common
prefix and suffix, then anchors on lines that occur once in each side (patience diff: the longest
increasing run of such pairs), recursively; a piece at most SMALL goes to difflib, a bigger piece
without any anchor is one replace. difflib alone is quadratic when many lines repeat (a blank
line matches every blank line), so a long file of repeated lines took seconds; see test_align.py
for the bound on the work done here.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Hashable, Iterator, Sequence

Opcode = tuple[str, int, int, int, int]
SMALL = 1_000_000  # line pairs difflib may see at once (quadratic in the lines; this bound keeps a block cheap)


def opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Opcode]:
    """difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes(), bounded on big inputs."""
    if len(a) * len(b) <= SMALL:
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return _opcodes_from_blocks(sorted(_blocks(a, b)), len(a), len(b))


def _blocks(a: Sequence[Hashable], b: Sequence[Hashable]) -> Iterator[tuple[int, int, int]]:
    """Equal blocks (i, j, size), in no particular order; a stack instead of recursion."""
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        start = alo
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            alo, blo = alo + 1, blo + 1
        if alo > start:
            yield start, blo - (alo - start), alo - start
        end = ahi
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
        if ahi < end:
            yield ahi, bhi, end - ahi
        if alo == ahi or blo == bhi:
            continue
        if (ahi - alo) * (bhi - blo) <= SMALL:
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            yield from ((alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks() if n)
            continue
        anchors = _anchors(a, b, alo, ahi, blo, bhi)
        if not anchors:
            continue  # one replace: correct, if not minimal; only lines repeated on both sides are left
        previous_i, previous_j = alo, blo
        for i, j in anchors:
            yield i, j, 1
            stack.append((previous_i, i, previous_j, j))
            previous_i, previous_j = i + 1, j + 1
        stack.append((previous_i, ahi, previous_j, bhi))


def _anchors(a, b, alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines that occur exactly once in a[alo:ahi] and once in b[blo:bhi], the
    longest run increasing in both (patience sorting, O(k log k))."""
    seen: dict[Hashable, list[int]] = {}
    for i in range(alo, ahi):
        entry = seen.get(a[i])
        if entry is None:
            seen[a[i]] = [i, 1, -1, 0]
        else:
            entry[1] += 1
    for j in range(blo, bhi):
        entry = seen.get(b[j])
        if entry is not None:
            entry[2], entry[3] = j, entry[3] + 1
    pairs = sorted((e[0], e[2]) for e in seen.values() if e[1] == 1 and e[3] == 1)
    tails: list[int] = []  # tails[k]: smallest j ending an increasing run of length k + 1
    tail_index: list[int] = []
    back: list[int] = []
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        back.append(tail_index[k - 1] if k else -1)
        if k == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[k], tail_index[k] = j, index
    run, index = [], tail_index[-1] if tail_index else -1
    while index >= 0:
        run.append(pairs[index])
        index = back[index]
    return run[::-1]


def _opcodes_from_blocks(blocks: list[tuple[int, int, int]], n: int, m: int) -> list[Opcode]:
    codes: list[Opcode] = []
    i = j = 0
    for bi, bj, size in [*blocks, (n, m, 0)]:
        tag = "replace" if i < bi and j < bj else "delete" if i < bi else "insert" if j < bj else ""
        if tag:
            codes.append((tag, i, bi, j, bj))
        if size:
            if codes and codes[-1][0] == "equal":  # adjacent blocks (a prefix next to an anchor) join
                _, i1, _, j1, _ = codes.pop()
                codes.append(("equal", i1, bi + size, j1, bj + size))
            else:
                codes.append(("equal", bi, bi + size, bj, bj + size))
        i, j = bi + size, bj + size
    return codes


def grouped_opcodes(codes: list[Opcode], context: int = 3) -> Iterator[list[Opcode]]:
    """Hunks of changes with `context` lines around them (difflib's get_grouped_opcodes)."""
    codes = list(codes) or [("equal", 0, 1, 0, 1)]
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group
