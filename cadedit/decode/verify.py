"""Verified copy: the source's own lines as drafts for a rewrite (the verify mode's drafter).

Contract: VerifyDrafter(source, encode, token_bytes, budget) is a decode-loop drafter
(cadedit.decode.loop.Drafter). Wherever the output so far is aligned with the source text, it proposes
the next stretch of the source; the loop checks it in the one forward it makes anyway and keeps
the longest prefix the sampler agrees with, so greedy output equals one-token-at-a-time decoding.
Draft lengths come from `lengths`: by default they grow geometrically while accepted in full and
shrink back after a miss (Schedule); the pipeline passes lengths fitted to what a forward of k
tokens costs on the loaded model (cadedit.backends.forward_cost.FittedLengths). A scoped
edit's drafter also knows the file's lines after its region (`tail`): a model that runs past the
region's closing fence and retypes them gets them drafted too, instead of one token a forward. It
may also be given the same answer in other indentation (`also`): a scoped method is asked for
without its class's indentation, and small models often retype it with it all the same; the
drafter follows whichever the output writes (otherwise every line is lost, one token a forward),
and a first draft that misses only by being in the other indentation teaches the draft lengths
nothing. Drafts of the answer's end stop at its closing fence, without the fence's line break, and
once the output has written the fence nothing is drafted: its next token ends the decode.
After a change inside a line the source is found again from the line's last bytes (prompt lookup
near the line being rewritten), so a rename costs its changed tokens and a forward or two; a line
ended that equals a source line but for its indentation places the output there (a moved block),
and a line begun like the last one placed is that line after lines inserted before it. A line the
output rewrote only by putting names for others (`cur_line` -> `current_line`) teaches the drafter
those renames: it also follows the source with them made everywhere, so the next uses of the name
are drafted renamed instead of costing a miss each; a rename the output then does not make is
forgotten. A line retyped with its indentation changed (a block wrapped in `try:`, or unwrapped)
likewise makes the drafter follow the next lines with the same change, until a line keeps its own.
Identical ids need identical argmaxes from batched and one-token forwards: exact on the tests'
fp64 model, and in fp32 on the real 0.5B model; in bf16 the two round differently and can part
at a near tie. Pure: no torch, no transformers.
"""

from __future__ import annotations

import difflib
import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


RECENT = 8  # output lines remembered to place a line that occurs more than once in the source
AHEAD = 4  # source lines after the last aligned one where a new output line may resume the source
# Mid-line re-anchoring: the longest end of the output's current line, NGRAM_MIN to NGRAM_MOST bytes
# with a non-blank byte, found in the source lines the output is rewriting (AHEAD of them). Shorter
# ends (`x)`, ` = `) occur on most lines, so they count only after the point lost in its own line;
# the cap bounds the work on a long line (minified code) to a few finds per token.
NGRAM_MIN = 4
NGRAM_MOST = 64
SIMILAR = 0.5  # an unaligned output line this similar to the next source line is taken as its rewrite
# A line ended that no source line equals is placed on one that equals it but for its indentation (a
# block moved into or out of a nesting level) if it has this many bytes besides its blanks: shorter
# ones (`}`, `else:`, `try:`) occur on too many lines to say where the output is.
BARE_MIN = 8
# Once a guess missed, the output is most likely new text (a docstring, a new statement) whose words
# keep matching the source by chance; each guess then drafts this many tokens at most, to its line's
# end, so a wrong one widens a forward by little.
MISSED_DRAFT = 4
# A rename to a name the source does not use (cur_line -> current_line) is drafted from its first use on,
# until the output once left such a rename unmade; one to a name it uses, and every rename after that,
# once the output made it RENAMED times: changing `a` to `b` in one place is as often a fix of that
# use as a rename, and drafting it where it is not wastes a forward.
RENAMED = 2
MOST_RENAMES = 32  # names the drafter renames at once (each a word of the source it writes another for)
NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
PIECES = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*|\s+|.", re.DOTALL)  # a line as names, blanks and other bytes


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

    def first(self) -> int:
        return self.start

    def after(self, size: int, drafted: int, kept: int) -> int:
        """The next draft's length, a draft of `size` tokens asked (`drafted` made) having kept `kept`."""
        return self.next(size, kept == drafted)


class Lengths(Protocol):
    """How long each draft is: first(), then after(size asked, tokens drafted, tokens kept) after each
    draft (Schedule; forward_cost.FittedLengths). 0: no draft this forward; the drafter then scores the
    one token it would have drafted against the one the output writes, and reports it through after()
    as a one-token draft."""

    def first(self) -> int: ...
    def after(self, size: int, drafted: int, kept: int) -> int: ...


class Aligner:
    """Where the output stands in the source text (a byte offset, or None), and the draft from there.

    Alignment is kept while each output token's bytes continue the source at the anchor (a
    different tokenisation of the same text stays aligned). Lost, it is found again as soon as the
    output's current line starts like one of the next AHEAD source lines (the model skipped a line,
    often a blank one), else like the line last placed (lines were inserted before it); or
    mid-line, when the line's last NGRAM_MIN+ bytes occur in the line being rewritten or the AHEAD
    after it (a renamed name, then the rest of the line as it was: the longest such end wins, then
    the occurrence nearest after where the alignment was lost); or
    when the output ends a line that equals a source line (else, one of BARE_MIN bytes or more that
    equals it but for its indentation): among equal lines, the one whose preceding lines match most
    output lines wins, then the one nearest after the last aligned line.
    A line ended unaligned that resembles the next source line counts as its rewrite, so the next
    line is looked for after it.
    """

    def __init__(self, source: str, encode: Callable[[str], list[int]], tail: str = ""):
        # Drafts from before the answer's end stop at its closing fence, without the fence's line break:
        # the forward that verifies the fence then samples what follows it (an EOS ends the decode there,
        # a fence token with its line break ends it by the stopping rule), where a draft of the line break
        # costs another forward to learn that the output ended.
        self.answer_end = len(source.encode("utf-8")) - source.endswith("\n")
        self.source = (source + tail).encode("utf-8")
        self.encode = encode
        self.lines = self.source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.line_at = {offset: k for k, offset in enumerate(self.starts)}  # line k starts at offset
        self.where: dict[bytes, list[int]] = {}
        self.where_bare: dict[bytes, list[int]] = {}  # the lines by their text without its blanks around
        for k, line in enumerate(self.lines):
            self.where.setdefault(line, []).append(k)
            if len(bare := line.strip()) >= BARE_MIN:
                self.where_bare.setdefault(bare, []).append(k)
        self.anchor: int | None = 0  # the output starts where the file starts (the prompt opens the fence)
        self.lost = 0  # where the anchor was when the output last left the source
        self.guessed = False  # the anchor is a mid-line lookup not yet followed to a line's end
        self.missed = 0  # guesses that failed since the output last followed the source to a line's end
        self.last_line = -1
        self.partial = bytearray()
        self.recent: deque[bytes] = deque(maxlen=RECENT)
        self.whole = True  # the output's current line has followed the source from its start
        self.followed = False  # so did the last line it ended

    def advance(self, piece: bytes) -> None:
        """The output grew by `piece`: follow it in the source, or look for it again."""
        if self.anchor is not None and self.source.startswith(piece, self.anchor):
            self.anchor += len(piece)
        elif self.anchor is not None:
            if not self.guessed:  # a guess that failed leaves the point lost where it was
                self.lost = self.anchor
            self.missed += self.guessed
            self.anchor = None
        ended = self._take_lines(piece)
        if ended:
            self.followed = self.anchor is not None and self.whole
        self.whole = self.anchor is not None and (self.whole or ended)
        if self.anchor is None and ended:
            self.anchor = self._relocate()
            if self.anchor is None:
                self.anchor = self._lookup(self.recent[-1], len(piece))
                self.guessed = self.anchor is not None
            if self.anchor is None and self._resembles_next(self.recent[-1]):
                self.last_line += 1  # the line was a rewrite of the next source line: look after it
        if self.anchor is None and self.partial.strip():
            self.anchor = self._resume()
            if self.anchor is None:
                self.anchor = self._lookup(bytes(self.partial), len(piece))
                self.guessed = self.anchor is not None
        if self.anchor is not None and self.anchor in self.line_at:
            self.last_line = self.line_at[self.anchor] - 1
            self.guessed, self.missed = False, 0  # a whole line followed (or a line end found): trusted again

    def with_changes(self, source: str, tail: str, renames: dict[bytes, bytes], shift: Shift | None) -> "Aligner":
        """An aligner of `source` (and its tail, this aligner's texts) with `renames` and `shift` made,
        standing where this one stands: neither changes a line break, so its lines are these lines."""
        lines = len(source.encode("utf-8").splitlines(keepends=True))
        # the answer's last line is its closing fence, which a re-indented block does not move
        answer = rewritten(source, renames, shift, upto=lines - 1)
        other = Aligner(answer, self.encode, rewritten(tail, renames, shift, lines))
        other.last_line, other.partial, other.recent = (
            self.last_line,
            bytearray(self.partial),
            deque(self.recent, RECENT),
        )
        other.lost = other.starts[bisect_right(self.starts, self.lost) - 1]
        other.anchor = None
        # the same column of the same line, where nothing changed before it
        if self.anchor is not None and not self.guessed:
            line = bisect_right(self.starts, self.anchor) - 1
            column = self.anchor - self.starts[line]
            if line < len(other.lines) and other.lines[line][:column] == self.lines[line][:column]:
                other.anchor = other.starts[line] + column
            elif line == len(other.lines) and column == 0:
                other.anchor = len(other.source)
        if other.anchor is None and other.recent:  # lost here: the last output line may be one of its lines
            at = other._relocate()
            if at is not None and other.source.startswith(other.partial, at):
                other.anchor = at + len(other.partial)
        return other

    def draft(self, n_tokens: int) -> list[int]:
        """Up to n_tokens ids of the source after the anchor (whole lines tokenised, then cut)."""
        if self.anchor is None or self.anchor >= len(self.source) or n_tokens <= 0:
            return []
        if self.anchor == self.answer_end:
            # The output has written the closing fence: its next token ends the decode (an EOS, or the
            # fence's line break by the stopping rule), so nothing drafted after it is ever used.
            return []
        # ~3.5 bytes per token in code: 6 per token reaches n_tokens nearly always; end on a line end.
        stop = self.starts[min(bisect_left(self.starts, self.anchor + 6 * n_tokens), len(self.starts) - 1)]
        if self.guessed and self.missed:  # after a guess that missed, new text: short drafts, to the line's end
            stop = min(stop, self.starts[bisect_right(self.starts, self.anchor)])
            n_tokens = min(n_tokens, MISSED_DRAFT)
        if self.anchor < self.answer_end:
            stop = min(stop, self.answer_end)
        try:
            text = self.source[self.anchor : stop].decode("utf-8")
        except UnicodeDecodeError:  # the anchor is inside a character: no draft until it is past
            return []
        return self.encode(text)[:n_tokens]

    def _take_lines(self, piece: bytes) -> bool:
        """Add piece to the output's lines; whether a line ended."""
        self.partial += piece
        ended = False
        while (cut := self.partial.find(b"\n")) >= 0:
            self.recent.append(bytes(self.partial[: cut + 1]))
            del self.partial[: cut + 1]
            ended = True
        return ended

    def _resembles_next(self, line: bytes) -> bool:
        k = self.last_line + 1
        if k >= len(self.lines) or line in self.where:
            return False
        matcher = difflib.SequenceMatcher(None, line, self.lines[k], autojunk=False)
        return matcher.quick_ratio() >= SIMILAR and matcher.ratio() >= SIMILAR

    def _relocate(self) -> int | None:
        candidates = self.where.get(self.recent[-1]) or self.where_bare.get(self.recent[-1].strip())
        if not candidates:
            return None
        best = max(candidates, key=lambda k: (self._matched(k), k > self.last_line, -abs(k - self.last_line)))
        self.last_line = best
        return self.starts[best + 1]

    def _lookup(self, line: bytes, last: int) -> int | None:
        """The offset after the longest end of the output's `line` (its last `last` bytes at least: the
        whole last token) found again near where the alignment was lost: an end of NGRAM_MIN to
        NGRAM_MOST bytes, not all blank, in the source line being rewritten or the AHEAD after it,
        nearest after the point lost, else nearest before it; a shorter end only after the point
        lost in that point's own line (`)` after a renamed argument, `:\n` after a changed test, the
        line's end)."""
        first = self.last_line + 1
        if first >= len(self.lines) or not line.strip():
            return None
        low, high = self.starts[first], self.starts[min(first + 1 + AHEAD, len(self.lines))]
        own = bisect_right(self.starts, self.lost) - 1  # the line the alignment was lost in
        own_end = self.starts[min(own + 1, len(self.lines))]
        for size in range(min(len(line), NGRAM_MOST), max(last, 1) - 1, -1):
            end = line[-size:]
            blank = not end.strip()
            if size >= NGRAM_MIN and not blank:
                ends = [low + at + size for at in _occurrences(self.source[low:high], end)]
            elif size < NGRAM_MIN and (not blank or end == b"\n"):
                ends = [self.lost + at + size for at in _occurrences(self.source[self.lost : own_end], end)]
            else:
                continue
            if ends:
                after = [e for e in ends if e > self.lost]
                return min(after) if after else max(ends)
        return None

    def _resume(self) -> int | None:
        """The offset after the output's partial line in the nearest next source line it begins, else
        in the last line placed: a changed line ended is taken as the rewrite of the line it stands
        on, and where the output inserted lines instead (an import, a log call, a check before a
        function's first line), it writes that line after them."""
        for k in (*range(self.last_line + 1, min(self.last_line + 1 + AHEAD, len(self.lines))), self.last_line):
            if 0 <= k < len(self.lines) and self.lines[k].startswith(self.partial):
                return self.starts[k] + len(self.partial)
        return None

    def _matched(self, k: int) -> int:
        """How many of the latest output lines equal source lines ..k-1, k."""
        n = 0
        while n < len(self.recent) and k - n >= 0 and self.recent[-1 - n] == self.lines[k - n]:
            n += 1
        return n


def _occurrences(text: bytes, part: bytes) -> list[int]:
    found, at = [], text.find(part)
    while at >= 0:
        found.append(at)
        at = text.find(part, at + 1)
    return found


def renames_in(before: bytes, after: bytes) -> dict[bytes, bytes] | None:
    """{old name: new name} when `after` is `before` with some names put for others and nothing else
    changed (the same blanks and punctuation, every use of an old name the same new one), else None."""
    old, new = PIECES.findall(before), PIECES.findall(after)
    if len(old) != len(new):
        return None
    renames: dict[bytes, bytes] = {}
    for x, y in zip(old, new):
        if x != y and (not (NAME.fullmatch(x) and NAME.fullmatch(y)) or renames.setdefault(x, y) != y):
            return None
    if any(x == y and x in renames for x, y in zip(old, new)):  # renamed in some uses of the line only
        return None
    return renames or None


def renamed(text: str, renames: dict[bytes, bytes]) -> str:
    """text with each whole-word old name of `renames` written as its new one."""
    if not renames:
        return text
    words = {old.decode(): new.decode() for old, new in renames.items()}
    pattern = (
        r"(?<![A-Za-z0-9_])(?:" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")(?![A-Za-z0-9_])"
    )
    return re.sub(pattern, lambda m: words[m.group()], text)


@dataclass(frozen=True)
class Shift:
    """The source's lines from `first` on as a re-indented block: leading `old` blanks written as `new`."""

    old: bytes
    new: bytes
    first: int


def _lead(line: bytes) -> bytes:
    return line[: len(line) - len(line.lstrip(b" \t"))]


def shift_in(before: bytes, after: bytes) -> tuple[bytes, bytes] | None:
    """(old, new) when `after` is `before` with blanks added at the start of its indentation (old
    empty) or removed from it (new empty), and the rest the same or renamed; else None."""
    lead_before, lead_after = _lead(before), _lead(after)
    rest_before, rest_after = before[len(lead_before) :], after[len(lead_after) :]
    if lead_before == lead_after or not rest_before.strip():
        return None
    if rest_before != rest_after and renames_in(rest_before, rest_after) is None:
        return None
    if lead_after.endswith(lead_before):
        return b"", lead_after[: len(lead_after) - len(lead_before)]
    if lead_before.endswith(lead_after):
        return lead_before[: len(lead_before) - len(lead_after)], b""
    return None


def rewritten(
    text: str, renames: dict[bytes, bytes], shift: Shift | None, first_line: int = 0, upto: int | None = None
) -> str:
    """text (whose first line is line `first_line` of its aligner) with `shift` made (on its lines
    before line `upto` of text, if given) and `renames` made."""
    if shift is not None:
        lines = text.encode("utf-8").splitlines(keepends=True)  # as the Aligner splits them
        for k, line in enumerate(lines[:upto]):
            if first_line + k >= shift.first and line.strip() and line.startswith(shift.old):
                lines[k] = shift.new + line[len(shift.old) :]
        text = b"".join(lines).decode("utf-8")
    return renamed(text, renames)


class VerifyDrafter:
    """Drafts the source after the aligned point; the draft size follows `lengths` (a Schedule by default).

    The loop calls it before each forward with the output ids so far; it follows the new ids in
    the source (Aligner) and learns from how many tokens its last draft kept. With `also` (the same
    answer in other indentation, and its tail) it follows both and drafts from the one the output
    is writing: aligned, then the one whose lines the latest output lines are, then the first. Each
    line the output ends that renames names of its source line and changes nothing else adds those
    renames; once there are some, it also follows each text with them made (`renames`), and forgets a
    rename the output keeps the old name of in a line it follows.
    """

    def __init__(
        self,
        source: str,
        encode: Callable[[str], list[int]],
        token_bytes: Sequence[bytes],
        budget: int,
        schedule: Lengths = Schedule(),
        tail: str = "",
        also: tuple[str, str] | None = None,
    ):
        # tail: text after the answer that a model running past it may retype (a scoped region's next lines)
        self.texts = [(source, tail)]
        if also is not None and also[0] != source:
            self.texts.append(also)
        self.bases = [Aligner(text, encode, after) for text, after in self.texts]
        self.names = set(NAME.findall(self.bases[0].source))  # the names the source uses
        self.trust_new_names = True  # until a rename to a new name is left unmade
        self.aligners = list(self.bases)
        self.renames: dict[bytes, bytes] = {}  # the renames drafts make
        self.shifts: list[Shift | None] = [None] * len(self.bases)  # the re-indented block each text's drafts follow
        self.rewrites: list[Aligner | None] = [None] * len(self.bases)  # each text with the renames and its shift
        self.seen_renames: dict[bytes, tuple[bytes, int]] = {}  # old name -> (new name, uses renamed)
        self.token_bytes, self.budget, self.schedule = token_bytes, budget, schedule
        self.size = schedule.first()
        self.seen = 0
        self.last: tuple[int, list[int], bool] | None = None  # (output length, draft, sent) of the last proposal
        self.sizes: list[int] = []  # the length asked of each draft sent (tests and benchmarks read them)
        self.shadows = 0  # drafts scored without being sent

    @property
    def aligner(self) -> Aligner:
        """The aligner drafts come from."""
        if len(self.aligners) == 1:
            return self.aligners[0]
        return max(
            self.aligners,
            key=lambda a: (a.anchor is not None, sum(line in a.where for line in a.recent), -self.aligners.index(a)),
        )

    def __call__(self, cursor, ids: Sequence[int]) -> list[int]:
        if self.last is not None and self.last[1]:
            at, draft, sent = self.last
            # sent: the forward kept a prefix of it, then the sampler's own token; a shadow: whether
            # the output's next token is its first
            kept = len(ids) - at - 1 if sent else int(len(ids) > at and ids[at] == draft[0])
            if kept or not self._chose_text(ids[at : at + 1]):
                self.size = self.schedule.after(self.size if sent else len(draft), len(draft), kept)
        for token in ids[self.seen :]:
            piece = self.token_bytes[token]
            for aligner in self.aligners:
                aligner.advance(piece)
            if b"\n" in piece:
                self._learn(piece.count(b"\n"))
        self.seen = len(ids)
        room = self.budget - len(ids)
        if self.size <= 0:  # no draft pays for its width here: score one, send none
            shadow = self.aligner.draft(min(1, room))
            self.last = (len(ids), shadow, False)
            self.shadows += bool(shadow)
            return []
        draft = self.aligner.draft(min(self.size, room))
        self.last = (len(ids), draft, True)
        if draft:
            self.sizes.append(self.size)
        return draft

    def _chose_text(self, taken: Sequence[int]) -> bool:
        """Whether the token the output took instead of a draft's first is where another text the
        drafter follows goes on (the answer's first token, in the file's own indentation where the
        draft was of the region as shown): a choice between texts, not the output leaving the source,
        so the draft lengths learn nothing from it. Asked before the aligners follow the new tokens."""
        chosen = self.aligner
        return bool(taken) and any(a is not chosen and a.draft(1) == list(taken) for a in self.aligners)

    def _learn(self, ended: int) -> None:
        """Count the renames and re-indentation of the `ended` output lines just ended (against the
        source lines each base aligner places them on); forget those they do not make; follow the
        texts with the renames made often enough (a new name once, one the source uses RENAMED times)
        and each text's block shifted, if that changed."""
        placed: dict[tuple[int, bytes], list[tuple[int, bytes]]] = {}  # (line k, output line) -> (base, its line k)
        for i, base in enumerate(self.bases):
            for back in range(min(ended, len(base.recent)) - 1, -1, -1):
                k = base.last_line - back
                if 0 <= k < len(base.lines):
                    placed.setdefault((k, base.recent[-1 - back]), []).append((i, base.lines[k]))
        shifts = list(self.shifts)
        # A rewrite still aligned at a line's start keeps its shift: a line that also equals some source
        # line where it stands (a `)`, an `else:` of another depth) is no sign the block ended.
        holding = [r is not None and r.followed for r in self.rewrites]
        for (k, line), lines in sorted(placed.items()):
            if any(_follows(source_line, line) for _, source_line in lines):
                if not any(holding):
                    shifts = [None] * len(shifts)  # a text needs no shift here
            else:
                for i, source_line in lines:
                    if not holding[i]:
                        shifts[i] = _shifted_after(shifts[i], k, source_line, line)
            # renames: against the base whose line it keeps the indentation of, else one it re-indents
            source_line = min((s for _, s in lines), key=lambda s: (_lead(s) != _lead(line), shift_in(s, line) is None))
            self._count(source_line, line)
        renames = {
            old: new
            for old, (new, times) in self.seen_renames.items()
            if times >= (1 if self.trust_new_names and new not in self.names else RENAMED)
        }
        if len(renames) > MOST_RENAMES:
            renames = self.renames
        if (renames, shifts) != (self.renames, self.shifts):
            self.renames, self.shifts = renames, shifts
            self.rewrites = [
                base.with_changes(text, tail, renames, shift) if renames or shift else None
                for base, (text, tail), shift in zip(self.bases, self.texts, shifts)
            ]
            # first: a tie goes to the rewrites until one is not made
            self.aligners = [r for r in self.rewrites if r is not None] + self.bases

    def _count(self, source_line: bytes, line: bytes) -> None:
        """Count the renames `line` makes of `source_line` (re-indented or not); forget those it keeps
        the old name of."""
        if shift_in(source_line, line) is not None:
            source_line, line = source_line.lstrip(b" \t"), line.lstrip(b" \t")
        found = {} if line == source_line else renames_in(source_line, line)
        if found is None:
            return
        kept = set(NAME.findall(line)) & set(NAME.findall(source_line))
        for old in [old for old in self.seen_renames if old in kept and old not in found]:
            self.trust_new_names &= self.seen_renames.pop(old)[0] in self.names
        for old, new in found.items():
            earlier, times = self.seen_renames.get(old, (new, 0))
            self.seen_renames[old] = (new, (times if earlier == new else 0) + PIECES.findall(source_line).count(old))


def _shifted_after(shift: Shift | None, k: int, source_line: bytes, line: bytes) -> Shift | None:
    """The block shift after output `line` retyped source line k: the re-indentation it makes (from
    line k + 1 on), else as it was."""
    moved = shift_in(source_line, line)
    if moved is None or (shift is not None and (shift.old, shift.new) == moved):
        return shift
    return Shift(*moved, k + 1)


def _follows(source_line: bytes, line: bytes) -> bool:
    """Whether output `line` is `source_line` where it stands (its names perhaps renamed)."""
    return bool(source_line.strip()) and (line == source_line or renames_in(source_line, line) is not None)
