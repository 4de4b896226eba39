"""Edit programs: Copy and Gen ops, their canonical text, a strict parser, and the literal escape.

Syntax (grammars/program.lark is the source; this module and the FSM follow it):

    <program>\\n ( <copy lines="I-J"/>\\n | <gen>\\nBODY</gen>\\n )* </program>[\\n]

Contract: `parse(format(p)) == p` for every Program, and `unescape(escape(s)) == s` for every
string. Gen.text is the real text (after unescaping); BODY is that text escaped, so a file that
contains `</gen>` or `<copy` can still be expressed (paper §2.2). The escape is a bijection: the
escape character itself is doubled, and a `<` that starts a reserved literal becomes a single
escape character, which is always followed by a non-escape character.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from cadedit.errors import ProgramError

# The structural literals that may never appear raw inside a gen body (paper §2.2).
RESERVED = ("<copy", "</copy>", "<gen>", "</gen>", "</program>")
ESC = "\u27e8"  # MATHEMATICAL LEFT ANGLE BRACKET, unused by code in practice

OPEN = "<program>\n"
CLOSE = "</program>"
COPY_OPEN = '<copy lines="'
COPY_CLOSE = '"/>\n'
GEN_OPEN = "<gen>\n"
GEN_CLOSE = "</gen>\n"

_RESERVED_RE = re.compile("|".join(re.escape(r) for r in RESERVED))
_COPY_RE = re.compile(r'<copy lines="([1-9][0-9]*)-([1-9][0-9]*)"/>')
_WS = re.compile(r"[ \t\r\n]*")
MAX_DIGITS = 18  # no file has 10^18 lines; Python refuses int() of 4,300+ digits with a ValueError


@dataclass(frozen=True)
class Copy:
    """Emit input lines start..end (1-based, inclusive), terminators included."""

    start: int
    end: int


@dataclass(frozen=True)
class Gen:
    """Emit new text verbatim."""

    text: str


Op = Union[Copy, Gen]


@dataclass(frozen=True)
class Program:
    ops: tuple[Op, ...] = ()

    @property
    def copies(self) -> tuple[Copy, ...]:
        return tuple(op for op in self.ops if isinstance(op, Copy))


def escape(text: str) -> str:
    """Make text safe for a gen body: no reserved literal survives raw. Inverse: unescape."""
    text = text.replace(ESC, ESC + ESC)
    return _RESERVED_RE.sub(lambda m: ESC + m.group(0)[1:], text)


def unescape(body: str) -> str:
    """Invert escape(): a doubled escape is one escape character; a single one is `<`."""
    out = []
    k = 0
    while k < len(body):
        ch = body[k]
        if ch == ESC:
            if k + 1 < len(body) and body[k + 1] == ESC:
                out.append(ESC)
                k += 2
                continue
            out.append("<")
        else:
            out.append(ch)
        k += 1
    return "".join(out)


def format_op(op: Op) -> str:
    if isinstance(op, Copy):
        return f"{COPY_OPEN}{op.start}-{op.end}{COPY_CLOSE}"
    return f"{GEN_OPEN}{escape(op.text)}{GEN_CLOSE}"


def format(program: Program) -> str:  # noqa: A001 - the module's verb, as in json.dumps/format
    """The canonical text of a program (what the FSM makes the model write)."""
    return OPEN + "".join(format_op(op) for op in program.ops) + CLOSE + "\n"


def _excerpt(text: str, pos: int, width: int = 40) -> str:
    chunk = text[pos : pos + width]
    return repr(chunk + ("..." if len(text) > pos + width else "")) if chunk else "end of text"


def _fail(text: str, pos: int, op_number: int, expected: str) -> ProgramError:
    line = text.count("\n", 0, pos) + 1
    where = f"op {op_number}" if op_number else "program"
    return ProgramError(f"{where} (line {line}): expected {expected}, found {_excerpt(text, pos)}")


def parse(text: str) -> Program:
    """Parse program text strictly. Whitespace between ops is allowed; everything else is exact.

    Errors name the op number and quote the text where parsing stopped.
    """
    pos = _WS.match(text, 0).end()
    if not text.startswith("<program>", pos):
        raise _fail(text, pos, 0, "'<program>'")
    pos += len("<program>")
    ops: list[Op] = []
    while True:
        pos = _WS.match(text, pos).end()
        number = len(ops) + 1
        if text.startswith(CLOSE, pos):
            pos = _WS.match(text, pos + len(CLOSE)).end()
            if pos != len(text):
                raise _fail(text, pos, 0, "nothing after '</program>'")
            return Program(tuple(ops))
        if text.startswith("<copy", pos):
            m = _COPY_RE.match(text, pos)
            if not m:
                raise _fail(text, pos, number, '<copy lines="I-J"/> with 1-based line numbers')
            if max(len(m.group(1)), len(m.group(2))) > MAX_DIGITS:
                raise _fail(text, pos, number, f"line numbers of at most {MAX_DIGITS} digits")
            ops.append(Copy(int(m.group(1)), int(m.group(2))))
            pos = m.end()
        elif text.startswith("<gen>", pos):
            start = pos + len("<gen>")
            if text.startswith("\r", start):  # a CRLF program: the CR would start every gen with a line break
                error = _fail(text, start, number, "'\\n' after '<gen>' (the program has CR line ends)")
                error.hint = "write programs with \\n line ends (dos2unix converts one); CRs inside gen text are kept"
                raise error
            if text.startswith("\n", start):
                start += 1
            end = text.find("</gen>", start)
            if end < 0:
                raise _fail(text, pos, number, "'</gen>' to close this gen")
            body = text[start:end]
            if _RESERVED_RE.search(body):
                bad = _RESERVED_RE.search(body)
                raise _fail(text, start + bad.start(), number, "escaped text inside <gen> (reserved literal)")
            ops.append(Gen(unescape(body)))
            pos = end + len("</gen>")
        else:
            raise _fail(text, pos, number, "'<copy', '<gen>' or '</program>'")
