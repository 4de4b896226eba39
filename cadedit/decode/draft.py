"""Drafts: guesses of how a partly written program goes on, for the decode loop to verify.

Contract: propose(text, document) returns text that may continue the program text written so far
(display form: "\\n" newlines), or "" when there is no good guess. A draft is only a guess: the
decode loop feeds it with the forward it makes anyway and keeps the longest prefix the sampler
itself would have chosen, so a wrong draft changes nothing but the width of that forward. Where a
16-token forward costs about what a 1-token one does (bf16 with AMX) drafts are nearly free; where it
costs several steps (fp32, AVX2) they are not, so drafts are capped and only made where they usually
hold (docs/design.md#drafts).

The guesses, in the order an edit program goes: it starts by copying from line 1; after a copy,
a gen usually rewrites the next line, so its text starts like that line (prompt lookup); inside a
gen a line usually goes on like the file line it rewrites; after a gen the file resumes where the
rewritten lines end, often to its last line; after the last line comes </program>.
make_drafter() turns the text guesses into token ids through the grammar cursor, for the loop.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cadedit.text.document import Document
from cadedit.text.program import CLOSE, COPY_CLOSE, COPY_OPEN, GEN_CLOSE, GEN_OPEN, OPEN

_COPY = re.compile(r'<copy lines="([0-9]+)-([0-9]+)"/>\n')
_PARTIAL_COPY = re.compile(r'<copy lines="([0-9]*)(?:-([0-9]*))?\Z')
DRAFT_LIMIT = 24  # drafted tokens per forward at most
_MIN_MATCH = 3  # characters of the current gen line that must match the file to look up a continuation


@dataclass(frozen=True)
class Reading:
    """Where a partial program stands: the next file line it is likely to need, the last op's kind,
    and the unfinished tail (a partial literal, or the body of an open gen)."""

    at: int
    last: str  # "" (no op yet), "copy" or "gen"
    tail: str
    in_gen: bool


def _advance_over_gen(body: str, at: int, lines: list[str]) -> int:
    """The file line after the lines a gen body rewrites (a similar line counts as a rewrite)."""
    for new in body.split("\n")[:-1]:
        if at <= len(lines) and difflib.SequenceMatcher(None, new, lines[at - 1]).ratio() >= 0.5:
            at += 1
        elif new.strip() and new in lines[at - 1 :]:
            at += lines[at - 1 :].index(new) + 1
    return at


def read(text: str, lines: list[str]) -> Reading:
    """Read the complete ops of a partial program text and keep its unfinished tail."""
    pos, at, last = (len(OPEN), 1, "") if text.startswith(OPEN) else (0, 1, "")
    while True:
        m = _COPY.match(text, pos)
        if m:
            at, last, pos = int(m.group(2)) + 1, "copy", m.end()
            continue
        if text.startswith(GEN_OPEN, pos):
            end = text.find(GEN_CLOSE, pos + len(GEN_OPEN))
            body = text[pos + len(GEN_OPEN) : end if end >= 0 else len(text)]
            if end < 0:
                return Reading(_advance_over_gen(body, at, lines), "gen", body, True)
            at, last, pos = _advance_over_gen(body, at, lines), "gen", end + len(GEN_CLOSE)
            continue
        return Reading(at, last, text[pos:], False)


def _next_op(reading: Reading, n: int, lines: list[str]) -> str:
    """The whole next op, as a guess."""
    if reading.at > n:
        return CLOSE
    if reading.last == "":
        return f"{COPY_OPEN}1-"
    if reading.last == "copy":
        return GEN_OPEN + lines[reading.at - 1] + "\n"
    return f"{COPY_OPEN}{reading.at}-{n}{COPY_CLOSE}"


def _finish_literal(reading: Reading, n: int, lines: list[str]) -> str:
    """The rest of an op that has been started (a partial `<copy ...`, `<gen>` or `</program>`)."""
    tail = reading.tail
    m = _PARTIAL_COPY.match(tail)
    if m and m.group(2) is not None:  # the end line is being written
        return str(n)[len(m.group(2)) :] + COPY_CLOSE if str(n).startswith(m.group(2)) else ""
    if m:  # the start line is being written
        start = str(reading.at)
        return start[len(m.group(1)) :] + "-" if start.startswith(m.group(1)) else ""
    gen_then = lines[reading.at - 1] + "\n" if reading.at <= n else ""
    copy, gen, close = (COPY_OPEN, f"{reading.at}-"), (GEN_OPEN, gen_then), (CLOSE, "")
    # after a copy the next op is most often a gen; past the last line only the end is left
    literals = (
        (close, gen, copy) if reading.at > n else (gen, copy, close) if reading.last == "copy" else (copy, gen, close)
    )
    for literal, then in literals:
        if literal.startswith(tail):
            return literal[len(tail) :] + then
    return ""


def _continue_line(current: str, expected: str) -> str:
    """Prompt lookup: how `current` (a gen line being written) goes on if it follows `expected`.

    Exact prefix: the rest of the line. Else the longest end of `current` (3+ characters) found in
    `expected`: what follows it there. Else, when most of `current` is a prefix of `expected` (a
    character or two replaced, as in `-` -> `+`), what follows at the same column."""
    if expected.startswith(current):
        return expected[len(current) :] + "\n"
    for size in range(len(current), _MIN_MATCH - 1, -1):
        at = expected.find(current[-size:])
        if at >= 0:
            return expected[at + size :] + "\n"
    common = len(os.path.commonprefix([current, expected]))
    if common >= max(len(current) - 2, 1) and len(current) < len(expected):
        return expected[len(current) :] + "\n"
    return ""


def _in_gen(reading: Reading, n: int, lines: list[str]) -> str:
    body = reading.tail
    current = body.rsplit("\n", 1)[-1]
    if current == "":
        if body == "":
            return lines[reading.at - 1] + "\n" if reading.at <= n else ""
        return GEN_CLOSE + (f"{COPY_OPEN}{reading.at}-{n}{COPY_CLOSE}" if reading.at <= n else CLOSE)
    # the line being written: most likely a rewrite of the line before `at` (counted once it ends)
    # or of line `at` itself
    for k in (reading.at, reading.at - 1):
        if 1 <= k <= n:
            guess = _continue_line(current, lines[k - 1])
            if guess:
                return guess
    return ""


def propose(text: str, document: Document) -> str:
    """A guess at how the program text goes on ("" when there is none)."""
    lines = document.display_lines()
    n = len(lines)
    reading = read(text, lines)
    if reading.in_gen:
        return _in_gen(reading, n, lines)
    if reading.tail:
        return _finish_literal(reading, n, lines)
    return _next_op(reading, n, lines)


# -- draft text -> token ids, through the grammar ------------------------------------------------


def draft_ids(
    cursor, text: str, encode: Callable[[str], list[int]], token_bytes: Sequence[bytes], limit: int
) -> list[int]:
    """Token ids for a drafted continuation, walked through the grammar: forced literals as the grammar
    gives them, other text split as the tokenizer would split it on its own. Stops where the text
    and the grammar disagree, at `limit` tokens, or after a token that closes a copy (its lines must
    be read before the next choice). The cursor is left where it was."""
    data, used, ids = text.encode("utf-8"), 0, []
    try:
        while len(ids) < limit and not cursor.is_done():
            forced = cursor.forced()
            if forced:
                token = forced[0]
            elif used < len(data):
                try:
                    token = encode(data[used:].decode("utf-8"))[0]
                except UnicodeDecodeError:  # the last token ended inside a character
                    break
            else:
                break
            piece = token_bytes[token]
            if data[used : used + len(piece)] != piece[: len(data) - used] or not cursor.advance(token):
                break
            ids.append(token)
            used += len(piece)
            if cursor.completed_copy() is not None:
                break
    finally:
        cursor.rollback(len(ids))
    return ids


def make_drafter(
    propose: Callable[[str], str],
    encode: Callable[[str], list[int]],
    token_bytes: Sequence[bytes],
    limit: int = DRAFT_LIMIT,
) -> Callable[[object], list[int]]:
    """A drafter from a text guesser (cadedit.decode.draft.propose bound to a document)."""

    def drafter(cursor) -> list[int]:
        text = propose(cursor.text())
        return draft_ids(cursor, text, encode, token_bytes, limit) if text else []

    return drafter


# -- prompt lookup: drafts for fenced text from n-grams of the prompt and the output -------------

LOOKUP_TOKENS = 10  # tokens per draft (transformers' documented example value)
LOOKUP_NGRAM = 2  # longest n-gram matched (transformers' default)


class LookupDrafter:
    """Prompt lookup decoding: find the latest n-gram of the output earlier in prompt + output (the
    longest n first, the earliest match first) and propose the tokens that followed it there."""

    def __init__(self, prompt_ids: Sequence[int], budget: int, tokens: int = LOOKUP_TOKENS, ngram: int = LOOKUP_NGRAM):
        self.prompt, self.budget, self.tokens, self.ngram = list(prompt_ids), budget, tokens, ngram

    def __call__(self, cursor, ids: Sequence[int]) -> list[int]:
        seq = self.prompt + list(ids)
        room = min(self.tokens, self.budget - len(ids))
        for n in range(min(self.ngram, len(seq) - 1), 0, -1):
            tail = seq[-n:]
            for start in range(len(seq) - n):
                if seq[start : start + n] == tail:
                    draft = seq[start + n : start + n + room]
                    if draft:
                        return draft
        return []
