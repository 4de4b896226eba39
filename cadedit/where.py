"""The where-step: before a scoped edit of a long definition whose instruction names no line, ask the
model which line to change, then climb the scope ladder from there (cadedit.scope.located_levels).

Contract: locate(loaded, document, instruction, regions, pick=None) shows the model the regions'
lines with their numbers and the instruction, and decodes its answer through the one decode loop
(cadedit.decode) with a LineNumberCursor: only the regions' line numbers, at most MOST_LINES of
them separated by commas, then the end of the answer -- a few tokens. It returns a Where: the
lines named and the scopes the tries retype, narrowest first (the statements on those lines, the
functions around them, the regions), so a wrong location costs one try, not a retyped function.
Nothing is written here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cadedit.document import Document

# Lines one answer may name ("57" or "57, 63"): more would make the first try's region a function again.
MOST_LINES = 3
# Tokens the answer may take: Qwen writes a number a digit a token, so 3 four-digit numbers and commas fit.
WHERE_BUDGET = 24
_ANSWER_CHARS = frozenset(b"0123456789, ")


@dataclass(frozen=True)
class Where:
    """What the where-step asked and answered, and the scopes of the tries that follow."""

    asked: tuple[tuple[int, int], ...]  # the regions the model chose among
    lines: tuple[int, ...]  # the lines it named, in the order named
    answer: str  # its answer as written ("57")
    levels: tuple[tuple[tuple[int, int], ...], ...]  # the tries' regions, narrowest first; each holds the one before
    seconds: float
    forward_passes: int
    tokens_prompt: int

    def describe(self) -> str:
        """One line for stderr: "where: the model named line 57 of lines 40-120; try 1 retypes line 57"."""
        named = ", ".join(map(str, self.lines))
        asked = ", ".join(_span(a, b) for a, b in self.asked)
        first = ", ".join(_span(a, b) for a, b in self.levels[0])
        return (f"where: the model named line{'s' if len(self.lines) > 1 else ''} {named} of {asked}; try 1 retypes "
                f"{first}, a later try the next wider scope ({self.seconds:.1f} s, {self.forward_passes} forwards)")

    def to_json(self) -> dict:
        return {"asked": [list(r) for r in self.asked], "lines": list(self.lines), "answer": self.answer,
                "levels": [[list(r) for r in level] for level in self.levels], "seconds": self.seconds,
                "forward_passes": self.forward_passes, "tokens_prompt": self.tokens_prompt}


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

    def __init__(self, token_bytes: Sequence[bytes], end_ids: Iterable[int], numbers: Iterable[int], most: int = MOST_LINES):
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

    # -- the cursor protocol (cadedit.decode.Cursor) --

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


def _span(a: int, b: int) -> str:
    return f"line {a}" if a == b else f"lines {a}-{b}"


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
                rest = body[len(self._text):]
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
        found = tuple((t, piece.decode("ascii")) for t, piece in enumerate(token_bytes)
                      if piece and set(piece) <= _ANSWER_CHARS)
        _CANDIDATES[key] = (token_bytes, found)  # keep the list alive so its id stays unique
    return _CANDIDATES[key][1]


def where_picker(loaded):
    """The where-step's picker: the model's greedy choice (tries.edit_verified's picks(0) may give another)."""
    from cadedit.decode import sampling_picker

    return sampling_picker()


# How the model names the line: "number" (its line number, the lines shown numbered) or "quote" (its
# text, the lines shown as code). Measured on bench longfile's tasks with functions over 40 lines
# (1.5B, vague instructions): by number the model named the bug's line in 0 of 9 (it named lines
# at or near the function's end), by quote in 0 of 8 (nearer: 143 for 145, 905 for 900); hence
# `cadedit fix --where` is opt-in (README, Scoped edits).
WHERE_BY = ("number", "quote")


def locate(loaded, document: Document, instruction: str, regions: Sequence[tuple[int, int]], pick=None,
           by: str = "number") -> Where:
    """Ask the model which line of `regions` the instruction is about; see the module docstring."""
    from cadedit.decode import decode
    from cadedit.model import chat_prompt, eos_ids, language_model, token_bytes
    from cadedit.prompt import WHERE_ANSWER, where_messages
    from cadedit.scope import located_levels

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
    decoded = decode(lm, cursor, prompt_ids, None, pick or where_picker(loaded), budget, None, None,
                     lm.reuse(prompt_ids))
    lines = cursor.lines()
    return Where(tuple(tuple(r) for r in regions), lines, cursor.text(), located_levels(document, lines, regions),
                 time.perf_counter() - start, decoded.stats.forward_passes, decoded.stats.tokens_prompt)
