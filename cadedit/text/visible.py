"""Text that came from elsewhere (a repository's settings, a model's answer, an engine's error, a
path) as a terminal is to show it: every character a terminal would act on instead of printing made
visible, as git's pager (less) shows it, so that no byte of it moves the cursor, erases a line, sets
the title or the clipboard, or reorders what follows.

Notation (docs/trust.md, "What cadedit shows you"): a C0 control character or DEL in caret notation
(ESC `^[`, BEL `^G`, CR `^M`, NUL `^@`, DEL `^?`); a C1 control, a format character (bidirectional
overrides, zero-width characters, tags; the joiners emoji need are kept) or a line or paragraph
separator as `<U+XXXX>`; an undecodable byte of a path (os.fsdecode's surrogate) as `<FF>`. A tab
is kept; with lines=True so is every newline, and a CR that ends a line (CRLF). Pure: a str in, a
str out, the same str when there is nothing to show.
"""

from __future__ import annotations

import re
import unicodedata

_ONE_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\x7f]+")
_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|[^\x00-\x7f]+")
_SHOWN_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_KEPT = {"\u200c", "\u200d"}  # zero-width (non-)joiners: emoji sequences and several scripts need them


def visible(text: str, lines: bool = False) -> str:
    """`text` with every character a terminal acts on shown in the module's notation; with `lines`,
    newlines (and a CR before one) are kept, for text of several lines such as a diff or a hint."""
    return (_LINES if lines else _ONE_LINE).sub(_shown, text)


def _shown(match: re.Match) -> str:
    run = match.group()
    if len(run) == 1 and run < "\x80":
        return "^?" if run == "\x7f" else "^" + chr(ord(run) + 64)
    if run.isprintable():  # the common case of non-ASCII text: letters, symbols, emoji
        return run
    return "".join(_one(ch) for ch in run)


def _one(ch: str) -> str:
    if ch in _KEPT or unicodedata.category(ch) not in _SHOWN_CATEGORIES:
        return ch  # printable, or a space other than U+0020 (no-break, ideographic): shown as such
    if 0xDC80 <= ord(ch) <= 0xDCFF:
        return f"<{ord(ch) - 0xDC00:02X}>"
    return f"<U+{ord(ch):04X}>"
