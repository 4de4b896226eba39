"""Fenced text: the answer format of the rewrite modes, and its cursor for the decode loop.

The model answers inside a Markdown code fence; the answer ends at an EOS token or at the closing
fence alone on a line. FenceCursor is the decode loop's cursor for that format: any token is
allowed, nothing is forced inside a segment, and it is done at the stopping rule. An answer may
have several segments (one per scoped region): between them the cursor forces the next segment's
header, so the model writes only the regions' text and every header is a forced literal.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cadedit.text.document import Document, line_terminator


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in the file (as CommonMark does), at least 3."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


class Stopper:
    """The stopping rule: an EOS token, or the closing fence alone on a line.

    feed() takes the output one token at a time, so a loop that accepts many tokens at once
    stops at exactly the token where one-at-a-time decoding would have stopped.
    """

    def __init__(self, token_bytes: Sequence[bytes], eos_ids: frozenset[int], fence: str):
        self.token_bytes = token_bytes
        self.eos_ids = eos_ids
        self.marker = b"\n" + fence.encode() + b"\n"
        self.text = bytearray(b"\n")  # a virtual line start: a fence on the first output line counts

    def feed(self, token: int) -> bool:
        if token in self.eos_ids:
            return True
        piece = self.token_bytes[token]
        self.text += piece
        return self.marker in self.text[-(len(piece) + len(self.marker)) :]


class FenceCursor:
    """The decode loop's cursor over fenced text: anything allowed, done at the stopping rule.

    headers[k] are the token ids forced before segment k + 1 (after segment k's closing fence);
    with no headers the answer is one segment. ids are the output tokens, EOS excluded, forced
    headers included; segments() cuts them back into the segments' texts.
    """

    def __init__(
        self, token_bytes: Sequence[bytes], eos_ids: frozenset[int], fence: str, headers: Sequence[Sequence[int]] = ()
    ):
        self.token_bytes, self.eos_ids, self.fence = token_bytes, eos_ids, fence
        self.headers = [tuple(h) for h in headers]
        self.ids: list[int] = []
        self.bounds: list[tuple[int, int]] = []  # (start, end) in ids of each finished segment
        self._start = 0
        self._stopper = Stopper(token_bytes, eos_ids, fence)
        self._forced: tuple[int, ...] = ()
        self._done = False
        self._eos = False

    # -- the cursor protocol (cadedit.decode.loop.Cursor) --

    def allowed_mask(self):
        return None  # every token

    def forced(self) -> tuple[int, ...]:
        return self._forced

    def completed_copy(self):
        return None

    def is_done(self) -> bool:
        return self._done

    def advance(self, token: int) -> bool:
        if self._done:
            return False
        if self._forced:
            if token != self._forced[0]:
                return False
            self._forced = self._forced[1:]
            self.ids.append(token)
            if not self._forced:
                self._start = len(self.ids)
                self._stopper = Stopper(self.token_bytes, self.eos_ids, self.fence)
            return True
        stop = self._stopper.feed(token)
        if token in self.eos_ids:
            self._eos = True
        else:
            self.ids.append(token)
        if stop:
            self.bounds.append((self._start, len(self.ids)))
            if self._eos or len(self.bounds) > len(self.headers):
                self._done = True
            else:
                self._forced = self.headers[len(self.bounds) - 1]
        return True

    def text(self) -> str:
        return self.decode(self.ids)

    # -- the answer --

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes[t] for t in ids).decode("utf-8", errors="replace")

    def segments(self) -> list[str]:
        """Each finished segment's raw text (its closing fence included); an unfinished last one too."""
        bounds = list(self.bounds)
        if not self._done and self._start < len(self.ids) and not self._forced:
            bounds.append((self._start, len(self.ids)))
        return [self.decode(self.ids[a:b]) for a, b in bounds]


def output_text(output: str, fence: str, document: Document | None = None, unterminated: bool | None = None) -> str:
    """The new text in display form: the output up to its closing fence line (or all of it).

    Text whose last line had no terminator keeps none (`unterminated`, or the document's last
    line): the fence forces the model to end its last line with a newline that is not part of it.
    An answer that ends right at its last line of code keeps the blank lines that ended the document:
    a model closes its fence after the code whatever followed it, so their loss is not an edit.
    """
    kept = []
    for line in re.findall(r"[^\n]*\n|[^\n]+$", output):  # "\n" only: a form feed is not a line end here
        if line.rstrip() == fence:
            break
        kept.append(line)
    text = "".join(kept)
    if unterminated is None:
        unterminated = bool(document is not None and document.lines and not line_terminator(document.lines[-1]))
    if unterminated:
        return text[:-1] if text.endswith("\n") else text
    if document is not None and text.endswith("\n") and text.strip() and not _blank_tail(text):
        text += _blank_tail(document.display_text(1, document.n_lines))
    return text


# The blank lines (spaces and tabs at most) after a text's last line of code.
_BLANK_TAIL = re.compile(r"\n((?:[ \t]*\n)+)\Z")


def _blank_tail(text: str) -> str:
    found = _BLANK_TAIL.search(text)
    return found.group(1) if found else ""


def writes_again(spelled, answer, at: int, code_end: int) -> bool:
    """Whether a branch that puts `spelled` where `answer` goes on from `at` writes that answer again
    (bytes or str alike): it spells the answer's next bytes in other pieces (a prefix of the picked
    token, or several tokens in one), or it writes the rest of the code, which ends at `code_end` (the
    line of the closing fence; -1: none), differing only in the whitespace after it (a blank line the
    answer places again: output_text)."""
    if not spelled:
        return False
    if answer.startswith(spelled, at):
        return True
    return bool(code_end >= 0 and spelled.strip() and answer[at:code_end].rstrip() == spelled.rstrip())
