"""The where-step: before a scoped edit of a definition whose instruction names no line, find the
line to change, then climb the scope ladder from there (cadedit.scope.plan.located_levels).

Contract: locate(loaded, document, instruction, regions, pick=None, by) finds the line one of three
ways (WHERE_BY). "surprise" (the default, settings.DEFAULT_WHERE_BY) reads the regions' code as plain
code, in forwards of prompt prefill with no decode, and names the line where the model least
expected what is written: the largest p(its own next-token choice) - p(the token there)
(surprise_score). "number" shows the model the regions' lines with their numbers and the instruction,
and decodes its answer through the one decode loop (cadedit.decode.loop) with a LineNumberCursor: only
the regions' line numbers, at most MOST_LINES of them separated by commas, then the end of the
answer -- a few tokens. "quote" decodes one line's text instead (LineTextCursor). Each returns a
Where: the lines named and the scopes the tries retype, narrowest first (the statements on those
lines, the functions around them, the regions), so a wrong location costs one try, not a retyped
function. Nothing is written here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cadedit.text.document import Document
from cadedit.errors import ModelError
from cadedit.settings import CONTEXT_LINES, DEFAULT_WHERE_BY, WHERE_BY
from cadedit.decode.loop import decode, sampler_for
from cadedit.backends.model import chat_prompt, encode, eos_ids, language_model, token_bytes
from cadedit.scope.outline import outline, parser_of
from cadedit.prompt.messages import WHERE_ANSWER, where_messages
from cadedit.scope.plan import located_levels, merge_spans, span_text

__all__ = ["WHERE_BY", "Where", "LineNumberCursor", "LineTextCursor", "locate", "surprise", "surprise_score"]

# Lines one answer may name ("57" or "57, 63"): more would make the first try's region a function again.
MOST_LINES = 3
# Tokens the answer may take: Qwen writes a number a digit a token, so 3 four-digit numbers and commas fit.
WHERE_BUDGET = 24
# Surprising tokens of the line named by surprise that a branched try may replace by the model's own
# choice, most surprising first: as many as a later try's branches (settings.LATER_TESTED_CANDIDATES - 1).
MOST_EXPECTED = 7
# Lines after the most surprising one whose statements a tested try retypes before the function: the
# bug's line was among the 4 most surprising lines of 20 of 30 held-out long-file tasks, and the first
# of them in 13 (docs/measurements/where-step.md).
RUNNERS_UP = 3
# Tokens a forward of the surprise reading feeds: the logits of every one are kept ([chunk, vocab] floats).
SURPRISE_CHUNK = 256
_ANSWER_CHARS = frozenset(b"0123456789, ")


@dataclass(frozen=True)
class Where:
    """What the where-step asked and answered, and the scopes of the tries that follow."""

    asked: tuple[tuple[int, int], ...]  # the regions the line was found in
    lines: tuple[int, ...]  # the lines it named, in the order named
    answer: str  # its answer as written ("57")
    levels: tuple[tuple[tuple[int, int], ...], ...]  # the tries' regions, narrowest first; each holds the one before
    seconds: float
    forward_passes: int
    tokens_prompt: int
    by: str  # how the line was found (WHERE_BY)
    # by surprise: (line, byte column, token id, its log-probability) for the tokens of the named line
    # the model expected otherwise, most surprising first, and what it expected; a branched try branches there first
    expected: tuple = ()
    # by surprise: the lines with the next most surprising tokens (at most RUNNERS_UP), most surprising
    # first, and `spread`: Where.expected's points taken in turn from the named line and each of them
    # (at most MOST_EXPECTED). Where a test decides, a try retypes all their statements before the function.
    runners_up: tuple[int, ...] = ()
    spread: tuple = ()
    # A reading made once try 1 failed (options.read_later): the tries keep their scopes, and the later
    # ones branch at `spread` too; `levels` are unused.
    later: bool = False

    def describe(self) -> str:
        """One line for stderr: "where: the model named line 57 of lines 40-120; try 1 retypes line 57"."""

        named = ", ".join(map(str, self.lines))
        asked = ", ".join(span_text(a, b) for a, b in self.asked)
        if self.later:
            also = f" (then {', '.join(map(str, self.runners_up))})" if self.runners_up else ""
            return (
                f"read: the model least expected line {named}{also} of {asked}; the later tries also branch "
                f"there ({self.seconds:.1f} s, {self.forward_passes} forwards)"
            )
        first = ", ".join(span_text(a, b) for a, b in self.levels[0])
        said = "least expected" if self.by == "surprise" else "named"
        return (
            f"where: the model {said} line{'s' if len(self.lines) > 1 else ''} {named} of {asked}; try 1 retypes "
            f"{first}, a later try the next wider scope ({self.seconds:.1f} s, {self.forward_passes} forwards)"
        )

    def ladder(self, document: Document, tested: bool) -> tuple[tuple, tuple]:
        """The tries' scopes, narrowest first, and the tokens each one's branches put in first: the levels,
        the named line's expected tokens at the first. Where a test decides (`tested`: a wrong line's
        change fails) and the reading found runners-up, a try that retypes the statements of the named
        line and of those comes before the definition, its branches spread over their surprising tokens."""

        levels, expected = list(self.levels), [self.expected] + [()] * (len(self.levels) - 1)
        if tested and self.runners_up and len(levels) > 1:
            lines = (*self.lines, *self.runners_up)
            spread = merge_spans([*located_levels(document, lines, self.asked)[0], *levels[0]])
            if spread not in levels:  # else the lines' statements make up a wider level already
                # each wider level holds the lines' statements too; two that become the same are one
                later = dict.fromkeys(merge_spans([*level, *spread]) for level in levels[1:])
                levels, expected = [levels[0], spread, *later], [self.expected, self.spread, *[()] * len(later)]
        return tuple(levels), tuple(expected)

    def to_json(self) -> dict:
        return {
            "asked": [list(r) for r in self.asked],
            "lines": list(self.lines),
            "answer": self.answer,
            "levels": [[list(r) for r in level] for level in self.levels],
            "seconds": self.seconds,
            "forward_passes": self.forward_passes,
            "tokens_prompt": self.tokens_prompt,
            "by": self.by,
            "expected": [list(e) for e in self.expected],
            "runners_up": list(self.runners_up),
            "spread": [list(e) for e in self.spread],
            "later": self.later,
        }


class _AnswerCursor:
    """What the where-step's cursors share with the decode loop's Cursor protocol: nothing forced,
    no copies, done once the answer ended."""

    _done = False
    end_ids: frozenset[int] = frozenset()

    def answered(self) -> bool:
        """Whether the answer so far is whole (the end may come now)."""
        raise NotImplementedError

    def extend(self, token: int) -> bool:
        """Take a token of the answer itself; False (nothing changes) if the answer cannot go on with it."""
        raise NotImplementedError

    def with_end(self, mask: np.ndarray) -> np.ndarray:
        """The mask with the end tokens allowed when the answer is whole."""
        if self.answered():
            mask[[t for t in self.end_ids if t < len(mask)]] = True
        return mask

    def advance(self, token: int) -> bool:
        if self._done:
            return False
        if token in self.end_ids:
            self._done = self.answered()
            return self._done
        return self.extend(token)

    def forced(self) -> tuple[int, ...]:
        return ()

    def completed_copy(self):
        return None

    def is_done(self) -> bool:
        return self._done


class LineNumberCursor(_AnswerCursor):
    """The decode loop's cursor over a list of line numbers: NUMBER (", " NUMBER) ... then the end
    (an end-of-sequence token or a newline), every NUMBER one of `numbers`, at most `most` of them.

    Only tokens made of digits, commas and spaces are ever allowed (found once per vocabulary), so a
    mask costs a few hundred prefix checks, not one per token of the vocabulary.
    """

    def __init__(
        self, token_bytes: Sequence[bytes], end_ids: Iterable[int], numbers: Iterable[int], most: int = MOST_LINES
    ):
        self.token_bytes = token_bytes
        self.end_ids = frozenset(end_ids)
        self.numbers = frozenset(str(n) for n in numbers)
        self.prefixes = frozenset(s[:k] for s in self.numbers for k in range(len(s) + 1))
        self.most = most
        self.candidates = _answer_tokens(token_bytes)
        self._text = ""
        self._done = False

    def _parts(self, text: str) -> list[str] | None:
        parts = text.split(",")
        if len(parts) > self.most:
            return None
        for k, part in enumerate(parts):
            body = part[1:] if k and part.startswith(" ") else part
            if " " in body or (k < len(parts) - 1 and body not in self.numbers) or body not in self.prefixes:
                return None
        return parts

    def complete(self, text: str | None = None) -> bool:
        parts = self._parts(self._text if text is None else text)
        return parts is not None and parts[-1].strip() in self.numbers

    # -- the cursor protocol (cadedit.decode.loop.Cursor) --

    def allowed_mask(self) -> np.ndarray:
        mask = np.zeros(len(self.token_bytes), dtype=bool)
        for token, piece in self.candidates:
            if self._parts(self._text + piece) is not None:
                mask[token] = True
        return self.with_end(mask)

    def answered(self) -> bool:
        return self.complete()

    def extend(self, token: int) -> bool:
        piece = self.token_bytes[token].decode("utf-8", errors="replace")
        if self._parts(self._text + piece) is None:
            return False
        self._text += piece
        return True

    def text(self) -> str:
        return self._text

    def lines(self) -> tuple[int, ...]:
        """The numbers named, each once, in the order named."""
        return tuple(dict.fromkeys(int(p) for p in self._text.split(",") if p.strip()))


class LineTextCursor(_AnswerCursor):
    """The decode loop's cursor over one line of the regions, quoted: the answer must spell one of
    `bodies` (each line's text without its indentation; several lines may share one), then end (an
    end-of-sequence token or a newline). A model that cannot count lines can still quote one."""

    def __init__(self, token_bytes: Sequence[bytes], end_ids: Iterable[int], bodies: dict[int, str]):
        self.token_bytes = token_bytes
        self.end_ids = frozenset(end_ids)
        self.bodies: dict[bytes, list[int]] = {}
        for number, body in bodies.items():
            if body.strip():
                self.bodies.setdefault(body.strip().encode("utf-8"), []).append(number)
        self.index, self.longest = _token_index(token_bytes)
        self._text = b""
        self._done = False

    def allowed_mask(self) -> np.ndarray:
        mask = np.zeros(len(self.token_bytes), dtype=bool)
        for body in self.bodies:
            if body.startswith(self._text):
                rest = body[len(self._text) :]
                for k in range(1, min(len(rest), self.longest) + 1):
                    mask[self.index.get(rest[:k], [])] = True
        return self.with_end(mask)

    def answered(self) -> bool:
        return self._text in self.bodies

    def extend(self, token: int) -> bool:
        text = self._text + self.token_bytes[token]
        if not any(body.startswith(text) for body in self.bodies):
            return False
        self._text = text
        return True

    def text(self) -> str:
        return self._text.decode("utf-8", errors="replace")

    def lines(self) -> tuple[int, ...]:
        """The lines with the text quoted (at most MOST_LINES of them, in file order)."""
        return tuple(self.bodies.get(self._text, ())[:MOST_LINES])


_INDEX: dict[int, tuple[object, dict[bytes, list[int]], int]] = {}


def _token_index(token_bytes: Sequence[bytes]) -> tuple[dict[bytes, list[int]], int]:
    """Each token's bytes to its ids, and the longest, once per vocabulary."""
    key = id(token_bytes)
    if key not in _INDEX:
        index: dict[bytes, list[int]] = {}
        for token, piece in enumerate(token_bytes):
            if piece:
                index.setdefault(piece, []).append(token)
        _INDEX[key] = (token_bytes, index, max(map(len, index), default=1))
    return _INDEX[key][1], _INDEX[key][2]


_CANDIDATES: dict[int, tuple[object, tuple[tuple[int, str], ...]]] = {}


def _answer_tokens(token_bytes: Sequence[bytes]) -> tuple[tuple[int, str], ...]:
    """The tokens an answer can be made of (digits, commas, spaces), once per vocabulary."""
    key = id(token_bytes)
    if key not in _CANDIDATES:
        found = tuple(
            (t, piece.decode("ascii")) for t, piece in enumerate(token_bytes) if piece and set(piece) <= _ANSWER_CHARS
        )
        _CANDIDATES[key] = (token_bytes, found)  # keep the list alive so its id stays unique
    return _CANDIDATES[key][1]


def where_sampler(loaded):
    """The where-step's sampler: the model's greedy choice (tries.edit_verified's picks(0) may give another)."""
    return sampler_for()


def locate(
    loaded,
    document: Document,
    instruction: str,
    regions: Sequence[tuple[int, int]],
    pick=None,
    by: str = DEFAULT_WHERE_BY,
    around: int | None = CONTEXT_LINES,
) -> Where:
    """Ask the model which line of `regions` the instruction is about; see the module docstring."""

    if by == "surprise":
        return surprise(loaded, document, regions, around)
    start = time.perf_counter()
    tokens = token_bytes(loaded)
    quote = by == "quote"
    messages = where_messages(document, instruction, regions, quote)
    _, prompt_ids = chat_prompt(loaded.tokenizer, messages, "" if quote else WHERE_ANSWER)
    newlines = [t for t, piece in enumerate(tokens) if piece == b"\n"]
    ends = [*eos_ids(loaded), *newlines]
    if quote:
        bodies = document.display_lines()
        cursor = LineTextCursor(tokens, ends, {k: bodies[k - 1] for a, b in regions for k in range(a, b + 1)})
    else:
        cursor = LineNumberCursor(tokens, ends, [k for a, b in regions for k in range(a, b + 1)])
    lm = language_model(loaded)
    budget = WHERE_BUDGET if not quote else WHERE_BUDGET + max(len(b) for b in cursor.bodies)
    decoded = decode(
        lm, cursor, prompt_ids, None, pick or where_sampler(loaded), budget, None, None, lm.reuse(prompt_ids)
    )
    lines = cursor.lines()
    return Where(
        tuple(tuple(r) for r in regions),
        lines,
        cursor.text(),
        located_levels(document, lines, regions),
        time.perf_counter() - start,
        decoded.stats.forward_passes,
        decoded.stats.tokens_prompt,
        by,
    )


def surprise(
    loaded, document: Document, regions: Sequence[tuple[int, int]], around: int | None = CONTEXT_LINES
) -> Where:
    """The where-step by reading: each region's code after up to `around` lines before it (the
    prompt's context, settings.CONTEXT_LINES by default; None: from the file's first line), fed as
    plain code in a row beside the LM's cache (_read_texts), the logits of the region's positions kept;
    the line named is the one with the most surprising token (surprise_score), and Where.expected says
    where its surprising tokens are and what the model expected instead. Only code is scored: comments and
    docstrings (outline's prose) are text the model could not have guessed, and no test runs them."""

    start = time.perf_counter()
    tokens, lines = token_bytes(loaded), document.display_lines()
    lm = language_model(loaded)
    found = outline(document, parser_of(document.path), prose=True)
    texts = []
    for a, b in regions:
        first = 1 if around is None else max(1, a - around)
        ids = encode(loaded.tokenizer, "".join(line + "\n" for line in lines[first - 1 : b]))
        texts.append(_Text(ids, _token_places(ids, tokens, first), frozenset(found.code_lines(a, b)), a))
    try:  # read in a row of its own, so the cache keeps the last try's prompt for the next try to reuse
        read_tokens, forwards = _read_texts(lm, texts, row=1)
    except ModelError:  # no room beside the cache (feed_rows has emptied it): read in the cache itself
        read_tokens, forwards = _read_texts(lm, texts, row=0)
    fed = sum(len(text.ids) for text in texts)
    read_tokens.sort(reverse=True)  # the most surprising first; among equals the earlier line
    named = (-read_tokens[0][1],) if read_tokens else ()
    by_line: dict[int, list[tuple]] = {}  # each line's surprising tokens as points, most surprising first
    for score, line, column, token, logprob in read_tokens:
        if score > 0 and (-line in by_line or len(by_line) <= RUNNERS_UP):
            by_line.setdefault(-line, []).append((-line, column, token, logprob))
    expected = tuple(by_line.get(named[0], ()) if named else ())[:MOST_EXPECTED]
    runners_up = tuple(line for line in by_line if line not in named)[:RUNNERS_UP]
    return Where(
        tuple(tuple(r) for r in regions),
        named,
        ", ".join(map(str, named)),
        located_levels(document, named, regions, found=found),
        time.perf_counter() - start,
        forwards,
        fed,
        "surprise",
        expected,
        runners_up,
        _in_turn([by_line[line] for line in (*named, *runners_up) if line in by_line]),
    )


@dataclass(frozen=True)
class _Text:
    """A region as the reading feeds it: its ids (after the lines before it), each id's (line, byte column),
    the region's code lines (those scored) and its first line."""

    ids: Sequence[int]
    places: Sequence[tuple[int, int]]
    scored: frozenset[int]
    first_line: int


def _read_texts(lm, texts: Sequence[_Text], row: int) -> tuple[list[tuple[float, int, int, int, float]], int]:
    """Each text fed in `row` (1: a row forked beside the cache and dropped after; 0: the cache, emptied
    first) in forwards of SURPRISE_CHUNK tokens; each scored token as (score, -line, column, the model's
    own choice, that choice's log-probability), and the forwards made."""
    read_tokens: list[tuple[float, int, int, int, float]] = []
    forwards = 0
    try:
        for text in texts:
            ids, places = text.ids, text.places
            if row:
                lm.fork(1)
                lm.fork(2)
                lm.crop_row(1, len(lm.ids))  # a copy of the cache, emptied
            else:
                lm.reset()
            # the logits of the context before the region predict nothing scored: only the last one is kept
            begin = next((t for t, (line, _) in enumerate(places) if line >= text.first_line), len(ids))
            previous = None  # the logits that predict a chunk's first token: the last of the chunk before
            for k in range(0, len(ids), SURPRISE_CHUNK):
                chunk = ids[k : k + SURPRISE_CHUNK]
                skip = min(max(0, begin - 1 - k), len(chunk) - 1)  # logits[j] predicts position skip + j + 1
                logits = lm.feed_rows([row], [chunk], [len(chunk) - skip])[0]
                forwards += 1
                for i, token in enumerate(chunk):
                    line, column = places[k + i]
                    if line in text.scored and (i or previous is not None):  # the region's code, not its context
                        score, top, logprob = _read(logits[i - 1 - skip] if i else previous, token)
                        read_tokens.append((score, -line, column, top, logprob))
                previous = np.array(logits[-1])  # a copy: the next forward may reuse the buffer
    finally:
        if row:
            lm.fork(1)
    return read_tokens, forwards


def _in_turn(points: Sequence[Sequence[tuple]], most: int = MOST_EXPECTED) -> tuple:
    """Each line's first point, then each line's second, ..., at most `most` in all: every line gets a branch."""
    spread = []
    for depth in range(max(map(len, points), default=0)):
        spread += [line_points[depth] for line_points in points if depth < len(line_points)]
    return tuple(spread[:most])


def _token_places(ids: Sequence[int], tokens: Sequence[bytes], first: int) -> list[tuple[int, int]]:
    """The (line, byte column) of each token's first byte, the text's first line numbered `first`."""
    places, line, column = [], first, 0
    for token in ids:
        places.append((line, column))
        piece = tokens[token]
        if b"\n" in piece:
            line, column = line + piece.count(b"\n"), len(piece) - piece.rfind(b"\n") - 1
        else:
            column += len(piece)
    return places


def _read(row: np.ndarray, token: int) -> tuple[float, int, float]:
    """A token read after the ones before it (row: the logits that predicted it): its surprise_score, the
    model's own choice and that choice's log-probability."""
    row = np.asarray(row, dtype=np.float64)
    weights = np.exp(row - row.max())
    total = weights.sum()
    here = float(weights[token] / total) if token < len(weights) else 0.0
    return surprise_score(1.0 / total, here), int(row.argmax()), float(-np.log(total))


def surprise_score(top: float, here: float) -> float:
    """How surprising a token was: p(the model's own choice) - p(the token written). A planted bug is
    a token the model confidently expected otherwise; an unfamiliar name is one it could not have
    guessed, whose own choice was unsure too, so it scores less. A line scores its most surprising token."""
    return top - here
