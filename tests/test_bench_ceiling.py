"""The copy ceiling: the paper's exact counting rules, cadedit's splice counting, the token-level greedy
cover, s(N) interpolation and the bounds of eq. (3) -- all on a character tokenizer (counts = lengths)."""

from __future__ import annotations

import json
import math

import pytest

from cadedit.bench.ceiling import (
    Ceiling,
    CaseCeiling,
    SpeedupCurve,
    bounds,
    case_ceiling,
    greedy_bounds,
    greedy_cover,
    load_curve,
    longest_matches,
    paper_spans,
    splice_spans,
)
from cadedit.bench.corpus import Case
from cadedit.bench.tokens import TokenCounter
from cadedit.errors import CadeditError
from tests.bench_helpers import CharTokenizer

TOK = TokenCounter(CharTokenizer(), "chars")


def case(before: str, after: str) -> Case:
    return Case("c", "python", before, after, "Fix it.")


def test_paper_counting_joins_span_lines_with_newlines_and_tokenises_each_span_alone():
    c = case("a\nb\nc\n", "a\nB\nc\n")
    # split("\n"): [a, b, c, ""] vs [a, B, c, ""]; equal blocks [a] and [c, ""] -> "a" and "c\n".
    assert paper_spans(c, TOK) == (1, 2)
    row = case_ceiling(c, TOK, "paper")
    assert (row.total, row.copied) == (6, 3)  # T is the whole gold, not a sum of pieces


def test_paper_counting_counts_the_empty_last_line_as_a_copy_op():
    # When the last line changes, the empty string after the final newline is its own equal block:
    # a 0-token copy that the paper's K counts (Python K = 295 needs it).
    assert paper_spans(case("x\ny\n", "x\nz\n"), TOK) == (1, 0)


def test_splice_counting_uses_cadedits_oracle_and_spliced_text():
    c = case("a\nb\nc\n", "a\nB\nc\n")
    assert splice_spans(c, TOK) == (2, 2)  # copies 1-1 and 3-3 feed "a\n" and "c\n"
    assert splice_spans(case("x\ny\n", "x\nz\n"), TOK) == (2,)


def test_longest_matches_and_greedy_cover():
    matches = longest_matches([1, 2, 3, 4, 1, 2], [1, 2, 3, 9, 1, 2])
    assert matches.tolist() == [3, 2, 1, 0, 2, 1]
    assert [greedy_cover(matches, m) for m in (1, 2, 3, 4)] == [5, 5, 3, 0]
    assert longest_matches([], [1, 2]).tolist() == [0, 0]
    assert longest_matches([1], []).tolist() == []


def test_greedy_cover_takes_the_longest_match_left_to_right():
    # At 0 the longest match is 2 ([1, 2]); taking it leaves [3, 4, 5] -> a 3-match at m=3: 5 total.
    # But with m=3 the first position is skipped: [2, 3, 4, 5] is a 4-run starting at 1.
    matches = longest_matches([1, 2, 7, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    assert matches.tolist() == [2, 4, 3, 2, 1]
    assert greedy_cover(matches, 2) == 5 and greedy_cover(matches, 3) == 4


def test_ceiling_aggregates_and_summary():
    rows = (CaseCeiling("a", 10, (4, 2), {8: 7}), CaseCeiling("b", 30, (12,), {8: 20}))
    ceiling = Ceiling("corpus", rows)
    s = ceiling.summary()
    assert (s["n"], s["T"], s["T_copy"], s["T_gen"], s["K"]) == (2, 40, 18, 22, 3)
    assert s["f"] == pytest.approx(18 / 40)
    assert s["span_mean"] == pytest.approx(6.0) and s["span_p50"] == 4
    assert s["greedy"]["8"] == pytest.approx(27 / 40)


def test_speedup_curve_interpolates_linearly_in_log_n_and_clamps():
    curve = SpeedupCurve((4, 16, 64), (2.0, 6.0, 10.0))
    assert curve(8) == pytest.approx(4.0)  # halfway between 4 and 16 on a log scale
    assert curve(32) == pytest.approx(6.0 + 4.0 / 2)
    assert curve(1) == 2.0 and curve(1000) == 10.0


def test_bounds_follow_equation_3():
    ceiling = Ceiling("c", (CaseCeiling("a", 100, (60, 20, 0)),))
    constant = bounds(ceiling, lambda n: 4.0)
    # With a flat s(N) = 4 all three bounds agree: 1 / (0.2 + 0.8 / 4) = 2.5.
    assert constant["bnd_m8"] == pytest.approx(2.5)
    assert constant["bnd_mean"] == pytest.approx(2.5)
    assert constant["bnd_exact"] == pytest.approx(2.5)
    varying = bounds(ceiling, lambda n: n / 2 if n else math.nan)  # the 0-token span costs nothing
    assert varying["bnd_exact"] == pytest.approx(100 / (20 + 2 + 2))
    assert varying["s_m8"] == 4 and varying["bnd_m8"] == pytest.approx(2.5)


def test_greedy_bounds_per_minimum_span():
    ceiling = Ceiling("c", (CaseCeiling("a", 10, (), {m: 5 for m in (1, 2, 4, 8, 16, 32)}),))
    assert greedy_bounds(ceiling, lambda n: 2.0)["8"] == pytest.approx(1 / (0.5 + 0.25))


def test_load_curve_reads_kernel_json(tmp_path):
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps({"results": [{"n": 8, "speedup": 4.0}, {"n": 2, "speedup": 1.5}, {"n": 4, "speedup": None}]})
    )
    curve = load_curve(path)
    assert curve.n == (2, 8) and curve.s == (1.5, 4.0)
    path.write_text("{}")
    with pytest.raises(CadeditError, match="not a kernel results file"):
        load_curve(path)
    path.write_text(json.dumps({"results": []}))
    with pytest.raises(CadeditError, match="no speedups"):
        load_curve(path)
