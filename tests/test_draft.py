"""Draft guesses for partly written programs (pure text; the decode loop verifies them), and the
prompt-lookup drafter of the lookup mode (n-grams of prompt + output)."""

from __future__ import annotations

import pytest

from cadedit.text.document import Document
from cadedit.decode.draft import LOOKUP_NGRAM, LOOKUP_TOKENS, LookupDrafter, propose, read

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


# -- prompt lookup (the lookup mode's drafter) -------------------------------------------------


def lookup(prompt, ids, budget=100, **kwargs):
    return LookupDrafter(prompt, budget, **kwargs)(None, ids)


def test_lookup_proposes_what_followed_the_last_ngram():
    assert lookup([1, 2, 3, 4, 5], [9, 2, 3]) == [4, 5, 9, 2, 3]  # the tail "2 3" at 1: what came after it
    assert lookup([1, 2, 3, 4, 5], []) == []  # "4 5" and "5" occur once: nothing to look up


def test_lookup_tries_the_longest_ngram_first():
    # "3" alone first occurs at 0 (followed by 7); "2 3" occurs at 2 (followed by 8): the bigram wins
    assert lookup([3, 7, 2, 3, 8], [2, 3]) == [8, 2, 3]
    assert lookup([3, 7, 2, 3, 8], [2, 3], ngram=1) == [7, 2, 3, 8, 2, 3]


def test_lookup_takes_the_earliest_match():
    assert lookup([5, 1, 6, 5, 1, 7], [5, 1]) == [6, 5, 1, 7, 5, 1]


def test_lookup_falls_back_to_shorter_ngrams():
    assert lookup([4, 9, 8], [7, 9]) == [8, 7, 9]  # "7 9" is new, "9" is at 1
    assert lookup([4, 9, 8], [7, 6]) == []


def test_lookup_is_capped_by_its_length_and_the_budget_left():
    prompt = list(range(50)) + [0, 1]
    assert len(lookup(prompt, [])) == LOOKUP_TOKENS == 10 and LOOKUP_NGRAM == 2
    assert lookup(prompt, [], tokens=3) == [2, 3, 4]
    assert lookup(prompt[:-2], [0, 1], budget=4) == [2, 3]  # 2 of the budget of 4 are used
    assert lookup(prompt[:-2], [0, 1], budget=2) == []  # the budget is spent: no draft


def test_lookup_follows_the_output_as_it_grows():
    drafter = LookupDrafter([10, 11, 12, 13], budget=100, tokens=2)
    assert drafter(None, [11]) == [12, 13]
    assert drafter(None, [11, 12]) == [13, 11]  # "11 12" then "13", then the output's own "11"
    assert drafter(None, [11, 12, 99]) == []
