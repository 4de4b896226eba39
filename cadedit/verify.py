"""Verified copy: the source's own lines as drafts for a rewrite (the verify mode's drafter).

Contract: VerifyDrafter(source, encode, token_bytes, budget) is a decode-loop drafter
(cadedit.decode.Drafter). Wherever the output so far is aligned with the source text, it proposes
the next stretch of the source; the loop checks it in the one forward it makes anyway and keeps
the longest prefix the picker agrees with, so greedy output equals one-token-at-a-time decoding.
Drafts grow geometrically while accepted in full and shrink back after a miss (Schedule). A scoped
edit's drafter also knows the file's lines after its region (`tail`): a model that runs past the
region's closing fence and retypes them gets them drafted too, instead of one token a forward.
Identical ids need identical argmaxes from batched and one-token forwards: exact on the tests'
fp64 model, and in fp32 on the real 0.5B model; in bf16 the two round differently and can part
at a near tie. Pure: no torch, no transformers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass


RECENT = 8  # output lines remembered to place a line that occurs more than once in the source
AHEAD = 4  # source lines after the last aligned one where a new output line may resume the source


@dataclass(frozen=True)
class Schedule:
    """Draft lengths in tokens: `start` after a miss, times `grow` after a full accept, at most `most`.

    Why these numbers: with torch on an AVX-512 CPU a forward of up to ~16 tokens costs about two
    one-token steps, so a 16-token draft that fails costs about one extra step and one that is
    accepted saves about 14; past ~256 tokens a forward costs nearly linear time, so longer drafts
    save little and a miss wastes seconds. Where a 16-token forward costs 6-8 steps (llama.cpp on
    AVX2), shorter starts were tried and only added forwards: a retype's drafts are mostly kept
    whole (docs/measurements/design-figures.md).
    """

    start: int = 16
    grow: int = 2
    most: int = 256

    def next(self, size: int, accepted_all: bool) -> int:
        return min(size * self.grow, self.most) if accepted_all else self.start


class Aligner:
    """Where the output stands in the source text (a byte offset, or None), and the draft from there.

    Alignment is kept while each output token's bytes continue the source at the anchor (a
    different tokenisation of the same text stays aligned). Lost, it is found again as soon as the
    output's current line starts like one of the next AHEAD source lines (the model skipped a line,
    often a blank one), or when the output ends a line that equals a source line: among equal
    lines, the one whose preceding lines match most output lines wins, then the one nearest after
    the last aligned line.
    """

    def __init__(self, source: str, encode: Callable[[str], list[int]], tail: str = ""):
        self.answer_end = len(source.encode("utf-8"))  # drafts from before it stop there (the closing fence)
        self.source = (source + tail).encode("utf-8")
        self.encode = encode
        self.lines = self.source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.line_at = {offset: k for k, offset in enumerate(self.starts)}  # line k starts at offset
        self.where: dict[bytes, list[int]] = {}
        for k, line in enumerate(self.lines):
            self.where.setdefault(line, []).append(k)
        self.anchor: int | None = 0  # the output starts where the file starts (the prompt opens the fence)
        self.last_line = -1
        self.partial = bytearray()
        self.recent: deque[bytes] = deque(maxlen=RECENT)

    def advance(self, piece: bytes) -> None:
        """The output grew by `piece`: follow it in the source, or look for it again at a line end."""
        if self.anchor is not None and self.source.startswith(piece, self.anchor):
            self.anchor += len(piece)
        else:
            self.anchor = None
        self._take_lines(piece)
        if self.anchor is not None and self.anchor in self.line_at:
            self.last_line = self.line_at[self.anchor] - 1
        elif self.anchor is None and not self.partial and self.recent:
            self.anchor = self._relocate()
        elif self.anchor is None and self.partial.strip():
            self.anchor = self._resume()

    def draft(self, n_tokens: int) -> list[int]:
        """Up to n_tokens ids of the source after the anchor (whole lines tokenised, then cut)."""
        if self.anchor is None or self.anchor >= len(self.source) or n_tokens <= 0:
            return []
        # ~3.5 bytes per token in code: 6 per token reaches n_tokens nearly always; end on a line end.
        stop = self.starts[min(bisect_left(self.starts, self.anchor + 6 * n_tokens), len(self.starts) - 1)]
        if self.anchor < self.answer_end:
            stop = min(stop, self.answer_end)
        try:
            text = self.source[self.anchor : stop].decode("utf-8")
        except UnicodeDecodeError:  # the anchor is inside a character: no draft until it is past
            return []
        return self.encode(text)[:n_tokens]

    def _take_lines(self, piece: bytes) -> None:
        self.partial += piece
        while (cut := self.partial.find(b"\n")) >= 0:
            self.recent.append(bytes(self.partial[: cut + 1]))
            del self.partial[: cut + 1]

    def _relocate(self) -> int | None:
        candidates = self.where.get(self.recent[-1])
        if not candidates:
            return None
        best = max(candidates, key=lambda k: (self._matched(k), k > self.last_line, -abs(k - self.last_line)))
        self.last_line = best
        return self.starts[best + 1]

    def _resume(self) -> int | None:
        """The offset after the output's partial line in the nearest next source line it begins."""
        for k in range(self.last_line + 1, min(self.last_line + 1 + AHEAD, len(self.lines))):
            if self.lines[k].startswith(self.partial):
                return self.starts[k] + len(self.partial)
        return None

    def _matched(self, k: int) -> int:
        """How many of the latest output lines equal source lines ..k-1, k."""
        n = 0
        while n < len(self.recent) and k - n >= 0 and self.recent[-1 - n] == self.lines[k - n]:
            n += 1
        return n


class VerifyDrafter:
    """Drafts the source after the aligned point; the draft size follows the Schedule.

    The loop calls it before each forward with the output ids so far; it follows the new ids in
    the source (Aligner) and learns from how many tokens its last draft kept.
    """

    def __init__(self, source: str, encode: Callable[[str], list[int]], token_bytes: Sequence[bytes], budget: int,
                 schedule: Schedule = Schedule(), tail: str = ""):
        # tail: text after the answer that a model running past it may retype (a scoped region's next lines)
        self.aligner = Aligner(source, encode, tail)
        self.token_bytes, self.budget, self.schedule = token_bytes, budget, schedule
        self.size = schedule.start
        self.seen = 0
        self.last: tuple[int, int] | None = None  # (output length, draft length) of the last proposal

    def __call__(self, cursor, ids: Sequence[int]) -> list[int]:
        if self.last is not None and self.last[1]:
            kept = len(ids) - self.last[0] - 1
            self.size = self.schedule.next(self.size, kept == self.last[1])
        for token in ids[self.seen :]:
            self.aligner.advance(self.token_bytes[token])
        self.seen = len(ids)
        draft = self.aligner.draft(min(self.size, self.budget - len(ids)))
        self.last = (len(ids), len(draft))
        return draft
