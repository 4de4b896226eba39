"""Fenced text, the answer format of the rewrite modes (cadedit.prompt.fence): the fence, the stopping rule
across token seams, the answer's text before its closing fence, and FenceCursor -- one segment, or
several with forced headers between them -- on its own and driven by the real decode loop
(cadedit.decode.loop.decode) over a stub LM that records what each forward is fed."""

from __future__ import annotations

import pytest
import torch

from cadedit.decode.loop import decode
from cadedit.text.document import Document
from cadedit.errors import BudgetError
from cadedit.prompt.fence import FenceCursor, Stopper, fence_for, output_text

HAND_VOCAB = (b"x", b"\n", b"``", b"`", b"```\n", b"\n```", b"<eos>", b"y", b"# b\n", b"```py\n")
EOS = frozenset({6})
HEADER = (8, 9)  # "# b\n```py\n": forced before the second segment


@pytest.mark.parametrize(("text", "fence"), [("x = 1\n", "```"), ("s = '```'\n", "````"), ("`````\n", "``````")])
def test_the_fence_is_longer_than_any_backtick_run_in_the_file(text, fence):
    assert fence_for(text) == fence


@pytest.mark.parametrize(
    ("tokens", "stops_after"),
    [
        ([0, 1, 2, 3, 1, 0], 5),  # "x\n" "``" "`" "\n": the fence line ends on the fifth token
        ([0, 5, 1, 0], 3),  # "x" "\n```" "\n"
        ([4, 0], 1),  # a fence on the first line: an empty file
        ([0, 2, 3, 1, 0], None),  # "x```\n": not alone on its line
        ([0, 1, 6, 0], 3),  # EOS
        ([0, 7, 1, 0, 7, 1], None),
    ],
)
def test_the_stopper_finds_the_closing_fence_across_token_seams(tokens, stops_after):
    stopper = Stopper(HAND_VOCAB, EOS, "```")
    fed = [stopper.feed(t) for t in tokens]
    assert (fed.index(True) + 1 if True in fed else None) == stops_after


@pytest.mark.parametrize(
    ("output", "before", "expected"),
    [
        ("a\nb\n```\n", "a\n", "a\nb\n"),
        ("a\nb\n```", "a\n", "a\nb\n"),  # EOS right after the fence
        ("a\nb\n", "a\n", "a\nb\n"),  # EOS without a fence
        ("a\n```\nThis fixes it.\n", "a\n", "a\n"),
        ("a\nc\n```\n", "a\nb", "a\nc"),  # the file had no final newline: it keeps none
        ("```\n", "a\n", ""),
        ("a\n  ```\nb\n", "a\n", "a\n  ```\nb\n"),  # an indented fence is file content
        ("a\x0c```\nb\n```\n", "a\n", "a\x0c```\nb\n"),  # only "\n" ends a line
        ("a\nc\n```\n", "a\nb\n\n  \n", "a\nc\n\n  \n"),  # the fence right after the code: the blank lines stay
        ("a\nc\n\n```\n", "a\nb\n\n\n", "a\nc\n\n"),  # blank lines written: as written
        ("```\n", "a\n\n", ""),  # nothing written keeps nothing
        ("a\nc", "a\nb\n\n", "a\nc"),  # an answer that ended mid-line (no fence) is taken as it is
    ],
)
def test_output_text_is_the_file_before_the_closing_fence(output, before, expected):
    assert output_text(output, "```", Document.from_text(before)) == expected


def test_output_text_without_a_document_follows_unterminated():
    assert output_text("a\nc\n```\n", "```") == "a\nc\n"
    assert output_text("a\nc\n```\n", "```", unterminated=True) == "a\nc"
    assert output_text("a\nc\n```\n", "```", Document.from_text("a\nb"), unterminated=False) == "a\nc\n"


# -- FenceCursor on its own --------------------------------------------------------------------


def feed(cursor: FenceCursor, tokens) -> list[bool]:
    return [cursor.advance(t) for t in tokens]


def test_one_segment_allows_everything_forces_nothing_and_ends_at_the_fence():
    cursor = FenceCursor(HAND_VOCAB, EOS, "```")
    assert cursor.allowed_mask() is None and cursor.forced() == () and cursor.completed_copy() is None
    assert feed(cursor, [0, 1, 2, 3]) == [True] * 4 and not cursor.is_done()
    assert cursor.segments() == ["x\n```"]  # the unfinished segment too
    assert cursor.advance(1) and cursor.is_done()
    assert cursor.ids == [0, 1, 2, 3, 1] and cursor.text() == "x\n```\n" and cursor.segments() == ["x\n```\n"]
    assert cursor.advance(0) is False  # nothing after the end


def test_eos_ends_the_answer_and_is_not_part_of_it():
    cursor = FenceCursor(HAND_VOCAB, EOS, "```")
    assert feed(cursor, [0, 1, 6]) == [True] * 3 and cursor.is_done()
    assert cursor.ids == [0, 1] and cursor.text() == "x\n" and cursor.segments() == ["x\n"]


def test_headers_are_forced_between_segments_and_segments_cut_them_out():
    cursor = FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER])
    feed(cursor, [0, 1, 4])  # "x\n```\n": the first segment is closed
    assert not cursor.is_done() and cursor.forced() == HEADER
    assert cursor.advance(7) is False  # a forced position takes only its token
    assert cursor.advance(8) and cursor.forced() == (9,)
    assert cursor.segments() == ["x\n```\n"]  # a header being forced is no segment
    assert cursor.advance(9) and cursor.forced() == () and not cursor.is_done()
    assert cursor.segments() == ["x\n```\n"]
    assert feed(cursor, [7, 1]) == [True, True] and cursor.segments() == ["x\n```\n", "y\n"]
    assert cursor.advance(4) and cursor.is_done()  # the second segment's own fence ends the answer
    assert cursor.ids == [0, 1, 4, 8, 9, 7, 1, 4]
    assert cursor.text() == "x\n```\n# b\n```py\ny\n```\n"
    assert cursor.segments() == ["x\n```\n", "y\n```\n"]


def test_the_second_segment_starts_a_new_line_for_its_fence():
    """A fence right after the header counts (the stopper restarts at a virtual line start)."""
    cursor = FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER])
    feed(cursor, [4, 8, 9, 4])
    assert cursor.is_done() and cursor.segments() == ["```\n", "```\n"]


@pytest.mark.parametrize(
    ("tokens", "segments"),
    [
        ([0, 6], ["x"]),  # EOS in the first segment: the headers are never forced
        ([0, 1, 4, 8, 9, 7, 6], ["x\n```\n", "y"]),
    ],
)
def test_eos_ends_a_multi_segment_answer_early(tokens, segments):
    cursor = FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER, HEADER])
    assert all(feed(cursor, tokens)) and cursor.is_done()
    assert cursor.segments() == segments and 6 not in cursor.ids


def test_three_segments_need_both_headers():
    cursor = FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER, (7, 1)])
    assert all(feed(cursor, [0, 1, 4, 8, 9, 0, 5, 1]))
    assert cursor.forced() == (7, 1) and not cursor.is_done()
    assert all(feed(cursor, [7, 1, 4])) and cursor.is_done()
    assert cursor.segments() == ["x\n```\n", "x\n```\n", "```\n"]


# -- FenceCursor in the decode loop ------------------------------------------------------------


class StubLM:
    """Zero logits; records the ids each forward is fed and every crop."""

    def __init__(self):
        self.calls: list[list[int]] = []
        self.crops: list[int] = []

    def feed(self, ids, keep=1):
        self.calls.append(list(ids))
        return torch.zeros(keep, len(HAND_VOCAB))

    def crop(self, n):
        self.crops.append(n)


def queue_picker(tokens):
    queue, asked = list(tokens), []

    def pick(logits, mask, ids, guess=None):
        assert mask is None  # fenced text: every token allowed
        asked.append(len(ids))
        return queue.pop(0)

    return pick, asked


def test_the_loop_feeds_forced_headers_with_the_token_before_them_and_never_picks_them():
    lm, cursor = StubLM(), FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER])
    pick, asked = queue_picker([0, 1, 4, 7, 5, 1])
    decoded = decode(lm, cursor, [7, 7], None, pick, budget=100)
    assert decoded.ids == (0, 1, 4, 8, 9, 7, 5, 1)
    assert decoded.text == "x\n```\n# b\n```py\ny\n```\n" and cursor.segments() == ["x\n```\n", "y\n```\n"]
    assert lm.calls == [[7, 7], [0], [1], [4, 8, 9], [7], [5]]  # the header rides along with the fence token
    assert asked == [0, 1, 2, 5, 6, 7]  # never at positions 3, 4 (the header)
    stats = decoded.stats
    assert (stats.forward_passes, stats.tokens_prompt, stats.tokens_sampled, stats.tokens_forced) == (6, 2, 6, 2)
    assert stats.tokens_new == len(decoded.ids) and stats.tokens_drafted == 0


def test_the_loop_stops_at_eos_without_feeding_it():
    lm, cursor = StubLM(), FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER])
    pick, _ = queue_picker([0, 1, 6])
    decoded = decode(lm, cursor, [7], None, pick, budget=3)  # the EOS is the budget's last token
    assert decoded.ids == (0, 1, 6) and decoded.text == "x\n" and cursor.ids == [0, 1]
    assert lm.calls == [[7], [0], [1]]


def test_the_loop_raises_budget_error_when_the_answer_is_unfinished():
    lm, cursor = StubLM(), FenceCursor(HAND_VOCAB, EOS, "```")
    pick, asked = queue_picker([0] * 10)
    with pytest.raises(BudgetError, match="budget of 4 new tokens") as info:
        decode(lm, cursor, [7], None, pick, budget=4)
    assert "--max-new-tokens" in info.value.hint
    assert len(asked) == 5 and not cursor.is_done()  # stopped right after the budget ran out


def test_drafts_through_a_header_keep_the_agreed_prefix_and_crop_the_rest():
    """A drafter's tokens ride along in one forward; the sampler walks them, forced header tokens are
    taken as they come, and the cache is cropped past the first disagreement."""
    lm, cursor = StubLM(), FenceCursor(HAND_VOCAB, EOS, "```", headers=[HEADER])
    drafts = iter([[0, 1, 4, 8, 9, 7, 7], []])
    # the sampler agrees with 0, 1, 4, (8, 9 forced), 7; then writes 5 instead of the second 7; then 1
    pick, asked = queue_picker([0, 1, 4, 7, 5, 1])
    decoded = decode(lm, cursor, [7], None, pick, budget=100, drafter=lambda c, ids: next(drafts))
    assert decoded.ids == (0, 1, 4, 8, 9, 7, 5, 1) and cursor.is_done()
    assert lm.calls == [[7, 0, 1, 4, 8, 9, 7, 7], [5]]
    assert lm.crops == [1, 0]  # the rejected second 7
    assert decoded.stats.tokens_drafted == 7 and decoded.stats.tokens_sampled == 6  # 0 1 4 7 5 1
    assert decoded.stats.tokens_forced == 2 and decoded.stats.forward_passes == 2
    # what DecodeStats.drafts_kept should count here (4, not the 2 forced header tokens): test_decode's xfail
