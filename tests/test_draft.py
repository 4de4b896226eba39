"""Draft guesses for partly written programs (pure text; the decode loop verifies them)."""

from __future__ import annotations

import pytest

from cadedit.document import Document
from cadedit.draft import propose, read

DOC = Document.from_text(
    "def f(xs):\n"  # 1
    "    total = 0\n"  # 2
    "    for x in xs:\n"  # 3
    "        total -= x\n"  # 4
    "    return total\n"  # 5
    "\n"  # 6
    "print(f([1, 2]))\n"  # 7
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<program>\n", '<copy lines="1-'),
        ('<program>\n<copy lines="1-3"/>\n', "<gen>\n        total -= x\n"),
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total +', "= x\n"),  # prompt lookup on line 4
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n', '</gen>\n<copy lines="5-7"/>\n'),
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n</gen>\n', '<copy lines="5-7"/>\n'),
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n</gen>\n<copy lines="5-7"/>\n', "</program>"),
        ('<program>\n<copy lines="1-3"/>\n<', 'gen>\n        total -= x\n'),
        ('<program>\n<copy lines="1-3"/>\n<c', 'opy lines="4-'),
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n</gen>\n<copy lines="5-', '7"/>\n'),
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n</gen>\n<copy lines="6', ""),  # not 5: no guess
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        something else entirely', ""),
        ('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n</gen>\n</pro', "gram>"),
    ],
)
def test_proposals(text, expected):
    assert propose(text, DOC) == expected


def test_reading_follows_the_file_through_gens_that_rewrite_or_insert_lines():
    lines = DOC.display_lines()
    rewrite = read('<program>\n<copy lines="1-3"/>\n<gen>\n        total += x\n', lines)
    assert (rewrite.at, rewrite.last, rewrite.in_gen) == (5, "gen", True)
    inserted = read('<program>\n<copy lines="1-3"/>\n<gen>\n        print("debug")\n</gen>\n', lines)
    assert (inserted.at, inserted.last, inserted.in_gen, inserted.tail) == (4, "gen", False, "")


def test_empty_document_drafts_nothing_past_the_end():
    empty = Document.from_text("")
    assert propose("<program>\n", empty) == "</program>"
    assert propose("<program>\n<gen>\n", empty) == ""
