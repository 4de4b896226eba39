"""Edit formats (Table 3): minimal search/replace anchors, Aider's first-match apply and its
anchor-ambiguity failure, a line-numbered unified-diff applier, and per-format token counts."""

from __future__ import annotations

import pytest

from cadedit.bench import formats as fm
from cadedit.bench.corpus import case_from_record
from cadedit.bench.tokens import TokenCounter
from cadedit.errors import ApplyError
from tests.bench_helpers import CASES, CharTokenizer

TOK = TokenCounter(CharTokenizer())
CORPUS = {r["id"]: case_from_record(r, f"t:{k}") for k, r in enumerate(CASES, 1)}


@pytest.mark.parametrize(
    "before, after, blocks",
    [
        ("a\nb\nc\n", "a\nB\nc\n", [fm.Block("b\n", "B\n")]),  # replace: exactly the old lines
        ("a\nb\nc\n", "a\nc\n", [fm.Block("b\n", "")]),  # delete
        ("a\nb\n", "a\nnew\nb\n", [fm.Block("a\n", "a\nnew\n")]),  # insert: anchored on the line before
        ("a\nb\n", "top\na\nb\n", [fm.Block("a\n", "top\na\n")]),  # insert at the top: the first line
        ("", "new\n", [fm.Block("", "new\n")]),  # empty file
    ],
)
def test_search_replace_anchors_are_minimal(before, after, blocks):
    assert fm.sr_blocks(before, after) == blocks
    assert fm.apply_sr(before, fm.parse_sr(fm.format_sr(blocks))) == after


def test_search_replace_applies_at_the_first_match_like_aider():
    case = CORPUS["ambiguous"]  # the 3rd line "x = 1" changes; the same line is also line 1
    blocks = fm.sr_blocks(case.before, case.after)
    assert blocks == [fm.Block("x = 1\n", "x = 10\n")]
    assert fm.apply_sr(case.before, blocks) == "x = 10\ny = 2\nx = 1\nz = 3\n"  # the wrong occurrence
    assert fm.ambiguous_anchors(case.before, blocks) == 1
    results = fm.case_formats(case, TOK)
    assert not results["search_replace"].exact and results["search_replace"].error == "wrong result"
    assert results["search_replace"].ambiguous == 1
    assert results["unified_diff"].exact and results["program"].exact and results["full"].exact


def test_search_replace_reports_a_missing_anchor_and_malformed_text():
    with pytest.raises(ApplyError, match="block 1: SEARCH text not found"):
        fm.apply_sr("a\n", [fm.Block("zzz\n", "y\n")])
    with pytest.raises(ApplyError, match="line 1: expected"):
        fm.parse_sr("hello\n")
    with pytest.raises(ApplyError, match="not closed"):
        fm.parse_sr(fm.SEARCH + "a\n" + fm.DIVIDER)


@pytest.mark.parametrize(
    "before, after",
    [
        ("one\r\ntwo\r\nthree", "one\r\nTWO\r\nthree"),  # CRLF, no final newline
        ("a\nb", "a\nb\n"),  # a final newline added
        ("a\nb\n", "a\nb"),  # ... and removed
        ("a\n", "top\na\n"),  # insertion at line 0
        ("".join(f"{i}\n" for i in range(20)), "".join(f"{i}\n" for i in range(20) if i not in (2, 15))),  # two hunks
    ],
)
def test_unified_diff_round_trips_byte_exactly(before, after):
    text = fm.format_ud(before, after)
    assert not text.startswith("diff --git") and text.startswith("--- a/file\n+++ b/file\n")
    assert fm.apply_ud(before, text) == after


def test_unified_diff_applier_checks_context():
    text = fm.format_ud("a\nb\nc\n", "a\nB\nc\n")
    with pytest.raises(ApplyError, match="does not match"):
        fm.apply_ud("a\nX\nc\n", text)


def test_every_format_on_the_small_corpus():
    results = {cid: fm.case_formats(case, TOK) for cid, case in CORPUS.items()}
    for cid, r in results.items():
        assert r["full"].tokens == len(CORPUS[cid].after)  # one token per character
        assert r["program"].exact and r["unified_diff"].exact, cid
    assert [cid for cid, r in results.items() if not r["search_replace"].exact] == ["ambiguous"]
    fix, case = results["fix"], CORPUS["fix"]
    assert fix["program"].tokens == len(
        '<program>\n<copy lines="1-1"/>\n<gen>\n    return a + b\n</gen>\n<copy lines="3-4"/>\n</program>\n'
    )
    assert fix["search_replace"].tokens == len(fm.format_sr(fm.sr_blocks(case.before, case.after)))
