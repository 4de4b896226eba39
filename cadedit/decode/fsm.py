"""The token-level constraint for edit programs: grammars/program.lark + a vocabulary + N lines.

Contract: a token is allowed iff its bytes keep the program text a byte prefix of some valid
program for this file: the syntax of grammars/program.lark (literals read from that file), at
least one op, 1 <= I <= J <= N, optionally I > the previous copy's J (monotonic), gen bodies free
of every reserved literal and valid UTF-8 (a token may end inside a character; `</gen>` cannot
come until it is complete). EOS only where the program may end; special tokens never.
Lifetimes: compile_grammar(vocab) (cached per vocabulary, in memory) -> Grammar.for_document(N)
(lazy, no compile step) -> Constraint.cursor() per decode. Pure: numpy only.

How: a byte-level machine whose states are tuples `(kind, *fields)`; a token is read byte by byte.
The kinds refine the paper's five states (Figure 7; `Constraint.program_state` maps a state to its one):

  Kind      fields            reading                                   Figure 7
  OPEN      pos               `<program>\n` (forced)                    AWAIT_OP (the entry arrow)
  OP        prefix lo has_op  prefix b"": the op boundary               AWAIT_OP
                              `<`, or part of `<copy lines="`/`<gen>\n` AFTER_LT (op type)
                              `</` .. `</program`                       CLOSE
  LINE_I    value lo          the copy's start line, digits so far      COPY_LINES
  SEP       pos i             `-`                                       COPY_LINES
  LINE_J    value i           the copy's end line, digits so far        COPY_LINES
  COPY_END  pos i j           `"/>\n` (its `"/>` edge to AWAIT_OP)      COPY_LINES
  BODY      node utf8 lo      gen text                                  GEN_BODY
  GEN_END   pos lo            the `\n` of `</gen>\n` (its edge out)     GEN_BODY
  END       pos               `</program>` read; optional `\n`, EOS     CLOSE
  STOP      -                 after EOS: nothing more                   CLOSE

`lo` is the lowest line the next copy may start at (1 unless monotonic), `has_op` whether an op
was written (the program may close), `node` the gen body's position in the reserved-literal
automaton, `utf8` its UTF-8 decoder state (cadedit.backends.vocab).

Masks are cached per state: gen-body masks come from per-vocabulary vectorised tables (UTF-8
decoder state x node of the reserved-literal automaton), the others from walking the byte-sorted
vocabulary along the bytes the machine allows. The kinds that carry `lo` without reading it (OP,
BODY, GEN_END) share one mask per document for every `lo` that agrees on whether a copy may come
next, unless one token can reach a copy's line digits from there; so op boundaries, gen bodies and
gen closes are computed once per document, digits once per state.

Hand-written, not a library: only this expresses 1 <= I <= J <= N and ordered copies at token level
(../shared/research/constrained.md), and it is faster than llguidance, the runner-up, which stays a
test oracle: driven by grammars/program.lark, its masks equal these at every step
(tests/test_grammar_walks.py). Costs and the comparison: tools/fsm_bench.py.
"""

from __future__ import annotations

import ast
import enum
import functools
import re
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from cadedit.errors import ProgramError
from cadedit.text.program import Copy
from cadedit.backends.vocab import BodyTables, Vocab, utf8_run, utf8_step

GRAMMAR_PATH = Path(__file__).parent / "grammars" / "program.lark"


class Kind(enum.IntEnum):
    """What a state is reading: the first item of every state tuple (fields: the module docstring).
    An IntEnum, so states stay plain tuples, which the byte machine builds per byte (a NamedTuple
    per kind costs ~5x as much to build)."""

    OPEN = 0
    OP = 1
    LINE_I = 2
    SEP = 3
    LINE_J = 4
    COPY_END = 5
    BODY = 6
    GEN_END = 7
    END = 8
    STOP = 9

    def __repr__(self) -> str:
        return self.name


OPEN, OP, LINE_I, SEP, LINE_J, COPY_END, BODY, GEN_END, END, STOP = Kind


class ProgramState(enum.Enum):
    """The paper's five decoder states (§2.3, Figure 7)."""

    AWAIT_OP = "op boundary: `<` or `</`"
    AFTER_LT = "op type: copy or gen"
    COPY_LINES = "line-index digits, `-`, `\"/>`"
    GEN_BODY = "free text until `</gen>`"
    CLOSE = "`</program>`, then the end"


# The Figure 7 state of each kind but OP, which Constraint.program_state reads from its prefix.
PROGRAM_STATES = {
    OPEN: ProgramState.AWAIT_OP,
    LINE_I: ProgramState.COPY_LINES,
    SEP: ProgramState.COPY_LINES,
    LINE_J: ProgramState.COPY_LINES,
    COPY_END: ProgramState.COPY_LINES,
    BODY: ProgramState.GEN_BODY,
    GEN_END: ProgramState.GEN_BODY,
    END: ProgramState.CLOSE,
    STOP: ProgramState.CLOSE,
}
# Kinds whose states carry `lo` on without reading it: their masks may be shared (Constraint._shared_key).
_SHAREABLE = (OP, BODY, GEN_END)
_DIGITS = tuple(range(ord("0"), ord("9") + 1))


@dataclass(frozen=True)
class Syntax:
    """The literals of grammars/program.lark (bytes) and the reserved literals of a gen body."""

    open: bytes
    close: bytes
    close_tail: bytes  # optional after close
    copy_open: bytes
    copy_sep: bytes
    copy_close: bytes
    gen_open: bytes
    gen_close: bytes
    reserved: tuple[bytes, ...]

    @property
    def body_end(self) -> bytes:
        """The reserved literal that ends a gen body (the head of gen_close)."""
        return next(r for r in self.reserved if self.gen_close.startswith(r))


_STR = r'("(?:[^"\\]|\\.)*")'
_RULES = {
    "start": rf"^start:\s*{_STR}\s+op\*\s+{_STR}\s+{_STR}\?\s*$",
    "copy": rf"^copy:\s*{_STR}\s+LINE\s+{_STR}\s+LINE\s+{_STR}\s*$",
    "gen": rf"^gen:\s*{_STR}\s+BODY\s+{_STR}\s*$",
    "LINE": r"^LINE:\s*/\[1-9\]\[0-9\]\*/\s*$",
    "BODY": r"^BODY:\s*/\(\?:\(\?!(.*)\)\(\.\|\\n\)\)\*/\s*$",
}


def read_syntax(text: str) -> Syntax:
    """Read the literals from the grammar text; the rules must keep the shapes the FSM knows."""
    found = {}
    for name, pattern in _RULES.items():
        m = re.search(pattern, text, re.M)
        if not m:
            raise ProgramError(f"grammars/program.lark: rule {name!r} is not in a form the FSM supports")
        found[name] = [ast.literal_eval(g).encode() for g in m.groups()] if name != "BODY" else m.group(1)
    reserved = tuple(re.sub(r"\\(.)", r"\1", alt).encode() for alt in found["BODY"].split("|"))
    (op, cl, tail), (co, sep, cc), (go, gc) = found["start"], found["copy"], found["gen"]
    # The body automaton relies on both: each reserved literal is `<` + text without `<`, and
    # the gen close starts with one of them.
    if any(r[:1] != b"<" or b"<" in r[1:] for r in reserved) or not any(gc.startswith(r) for r in reserved):
        raise ProgramError(
            "grammars/program.lark: reserved literals must be `<` + text without `<`, one opening the gen close"
        )
    return Syntax(op, cl, tail, co, sep, cc, go, gc, reserved)


@functools.lru_cache(maxsize=4)
def load_syntax(path: Path = GRAMMAR_PATH) -> Syntax:
    return read_syntax(path.read_text(encoding="utf-8"))


def line_viable(value: int, low: int, high: int) -> bool:
    """Can a decimal number that starts with `value`'s digits land in [low, high]?"""
    scale = 1
    while value * scale <= high:
        if max(value * scale, low) <= min(value * scale + scale - 1, high):
            return True
        scale *= 10
    return False


@functools.lru_cache(maxsize=4)
def _tables(vocab: Vocab, reserved: tuple[bytes, ...], body_end: bytes) -> BodyTables:
    return BodyTables(vocab, reserved, body_end)


def compile_grammar(vocab: Vocab, encode: Callable[[str], list[int]] | None = None) -> "Grammar":
    """The program grammar against one vocabulary. The tables are cached in memory per
    vocabulary (the 4 most recent); `encode` (the tokenizer's own str -> ids) shapes forced()."""
    syntax = load_syntax()
    return Grammar(syntax, _tables(vocab, syntax.reserved, syntax.body_end), encode)


class Grammar:
    """The program grammar compiled against one vocabulary; makes a Constraint per document."""

    def __init__(self, syntax: Syntax, tables: BodyTables, encode: Callable[[str], list[int]] | None):
        self.syntax, self.tables, self.encode = syntax, tables, encode

    @property
    def vocab(self) -> Vocab:
        return self.tables.vocab

    def line_candidates(self, kind: Kind, started: bool) -> list[int]:
        """Tokens that can follow some line-number state of this kind: those valid when every
        number is allowed (a file of 10**30 lines, any order). Computed once per vocabulary."""
        key = ("line candidates", kind, started)
        if key not in self.tables.memo:  # shared by every Grammar of the vocabulary
            ids: list = []
            anything = Constraint(self, 10**30, monotonic=False)
            anything._walk((kind, int(started), 1), b"", 0, len(self.tables.index.sorted_bytes), ids)
            self.tables.memo[key] = sorted(set(ids))
        return self.tables.memo[key]

    def reaches_lines(self, op_prefix: bytes | None) -> bool:
        """Can one token carry the machine into a copy's line digits and read one, from an OP state
        with this prefix (None: from a gen body or its close)? Digits come only after the whole
        copy opener, so only a token that starts with the rest of the opener (op_prefix is its
        head) or holds all of it, then one byte more. Computed once per vocabulary and prefix."""
        opener, memo = self.syntax.copy_open, self.tables.memo
        key = ("reaches lines", opener, op_prefix)
        if key not in memo:
            inside = ("opener inside", opener)
            if inside not in memo:
                memo[inside] = self._opener_inside_a_token()
            memo[key] = memo[inside] or (op_prefix is not None and self._starts_past(opener, op_prefix))
        return memo[key]

    def _starts_past(self, opener: bytes, op_prefix: bytes) -> bool:
        """Does a usable token start with the rest of the opener after op_prefix, and go on?"""
        if not opener.startswith(op_prefix):
            return False
        rest, index = opener[len(op_prefix) :], self.tables.index
        start, stop = index.prefix_range(rest)
        return bisect_right(index.sorted_bytes, rest, start, stop) < stop  # one is longer than rest

    def _opener_inside_a_token(self) -> bool:
        """Does a usable token hold the copy opener with a byte after it? When the opener holds a
        reserved literal, only tokens the body tables mark dead can (a few, not the vocabulary)."""
        opener, tables = self.syntax.copy_open, self.tables
        if any(r in opener for r in tables.reserved):
            candidates = (tables.vocab.tokens[t] for t in np.flatnonzero(tables.dead).tolist())
        else:
            candidates = iter(tables.index.sorted_bytes)
        return any(opener in token[:-1] for token in candidates)

    def for_document(self, n_lines: int, monotonic: bool = True) -> "Constraint":
        """The constraint for a file of n_lines lines; masks are built lazily, per state."""
        if n_lines < 0:
            raise ValueError(f"n_lines must be >= 0, not {n_lines}")
        return Constraint(self, n_lines, monotonic)


class _Allowed:
    """The allowed set of one state: a bool mask [V] and (lazily) its sorted ids."""

    __slots__ = ("mask", "_ids")

    def __init__(self, mask: np.ndarray, ids: np.ndarray | None = None):
        mask.flags.writeable = False
        self.mask, self._ids = mask, ids

    @property
    def ids(self) -> np.ndarray:
        if self._ids is None:
            self._ids = np.flatnonzero(self.mask)
            self._ids.flags.writeable = False
        return self._ids


class Constraint:
    """The byte-level FSM of programs for one document, with token masks cached per state.
    States are tuples (Kind, *fields); the fields of each kind are in the module docstring."""

    CACHE_SIZE = 128  # masks are 150 KB each for Qwen2.5

    def __init__(self, grammar: Grammar, n_lines: int, monotonic: bool):
        self.grammar, self.n_lines, self.monotonic = grammar, n_lines, monotonic
        self.tables, self.syntax = grammar.tables, grammar.syntax
        self.start = (OPEN, 0)
        self._cache: OrderedDict = OrderedDict()
        self._shared: dict = {}  # shared key (see _shared_key) -> mask, for the whole document
        sx = self.syntax
        self._literals = {
            OPEN: sx.open,
            SEP: sx.copy_sep,
            COPY_END: sx.copy_close,
            GEN_END: sx.gen_close,
            END: sx.close_tail,
        }
        self._forced: dict = {}

    def cursor(self) -> "ProgramCursor":
        return ProgramCursor(self)

    def program_state(self, s: tuple) -> ProgramState:
        """The paper's Figure 7 state that s refines (the table in the module docstring)."""
        if s[0] != OP:
            return PROGRAM_STATES[s[0]]
        prefix, sx = s[1], self.syntax
        if not prefix:
            return ProgramState.AWAIT_OP
        if sx.copy_open.startswith(prefix) or sx.gen_open.startswith(prefix):
            return ProgramState.AFTER_LT
        return ProgramState.CLOSE

    # -- the byte machine -------------------------------------------------------------------

    def _choices(self, lo: int, has_op: bool):
        sx = self.syntax
        if lo <= self.n_lines:
            yield sx.copy_open, (LINE_I, 0, lo)
        yield sx.gen_open, (BODY, b"", 0, lo)
        if has_op:
            yield sx.close, (END, 0)

    def step(self, s: tuple, byte: int):
        """The state after one more byte, or None if no valid program continues that way."""
        kind = s[0]
        if kind == BODY:
            return self._body_step(s, byte)
        if kind == OP:
            _, prefix, lo, has_op = s
            prefix += bytes((byte,))
            for literal, target in self._choices(lo, has_op):
                if literal == prefix:
                    return target
                if literal.startswith(prefix):
                    return (OP, prefix, lo, has_op)
            return None
        if kind == LINE_I or kind == LINE_J:
            return self._line_step(s, byte)
        literal, pos = self._literals.get(kind, b""), s[1]  # OPEN, SEP, COPY_END, GEN_END, END
        if pos >= len(literal) or literal[pos] != byte:
            return None
        if pos + 1 < len(literal) or kind == END:
            return (kind, pos + 1) + s[2:]
        if kind == OPEN:
            return (OP, b"", 1, False)
        if kind == SEP:
            return (LINE_J, 0, s[2])
        if kind == COPY_END:  # (COPY_END, pos, i, j): the next copy starts after j
            return (OP, b"", s[3] + 1 if self.monotonic else 1, True)
        return (OP, b"", s[2], True)  # (GEN_END, pos, lo)

    def _line_step(self, s: tuple, byte: int):
        kind, value, bound = s  # bound: the lowest allowed value (LINE_J: the start line)
        if 0x30 <= byte <= 0x39 and (value or byte != 0x30):
            value = value * 10 + byte - 0x30
            return (kind, value, bound) if line_viable(value, bound, self.n_lines) else None
        if not (value and bound <= value <= self.n_lines):
            return None
        return self.step((SEP, 0, value) if kind == LINE_I else (COPY_END, 0, bound, value), byte)

    def _body_step(self, s: tuple, byte: int):
        _, node, utf8, lo = s
        utf8 = utf8_step(utf8, byte)
        if utf8 < 0:
            return None
        node = self.tables.ac_step(node, byte)
        if node in self.syntax.reserved:
            if node != self.syntax.body_end:
                return None
            return (GEN_END, len(node), lo) if len(node) < len(self.syntax.gen_close) else (OP, b"", lo, True)
        return (BODY, node, utf8, lo)

    def run(self, s: tuple, data: bytes) -> tuple:
        """(state after data or None, copies closed on the way)."""
        copies = ()
        for k, byte in enumerate(data):
            if s[0] == BODY and s[1] == b"" and b"<" not in data[k:]:
                utf8 = 0 if s[2] == 0 and data[k:].isascii() else utf8_run(s[2], data[k:])
                return ((BODY, b"", utf8, s[3]) if utf8 >= 0 else None), copies
            new = self.step(s, byte)
            if new is None:
                return None, copies
            if new[0] == OP and s[0] in (LINE_J, COPY_END):  # (LINE_J, j, i) or (COPY_END, pos, i, j)
                copies += (Copy(s[2], s[1] if s[0] == LINE_J else s[3]),)
            s = new
        return s, copies

    def options(self, s: tuple):
        """(byte, next state) for every byte allowed in a non-body state."""
        kind = s[0]
        if kind == OP:
            candidates = {lit[len(s[1])] for lit, _ in self._choices(s[2], s[3]) if lit.startswith(s[1])}
        elif kind in (LINE_I, LINE_J):
            candidates = set(_DIGITS) | {self.syntax.copy_sep[0], self.syntax.copy_close[0]}
        else:
            literal = self._literals.get(kind, b"")
            candidates = {literal[s[1]]} if s[1] < len(literal) else set()
        result = [(b, self.step(s, b)) for b in sorted(candidates)]
        return [(b, t) for b, t in result if t is not None]

    # -- token masks --------------------------------------------------------------------------

    def allowed(self, s: tuple) -> _Allowed:
        """The allowed tokens in state s (cached per state, least recently used dropped)."""
        hit = self._cache.get(s)
        if hit is not None:
            self._cache.move_to_end(s)
            return hit
        shared = self._shared_key(s)
        hit = self._shared.get(shared) if shared is not None else None
        if hit is None:
            hit = self._body_allowed(s) if s[0] == BODY else self._walk_allowed(s)
            if shared is not None:
                self._shared[shared] = hit
        self._cache[s] = hit
        if len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)
        return hit

    def _shared_key(self, s: tuple):
        """The key of s's mask among the states that differ from s only in `lo` and agree on
        whether a copy may come next (lo <= N), or None if s's mask is its own. A mask reads `lo`
        only through that answer and through a copy's line digits (bounded below by it), so it is
        shared by kind: OP, BODY, GEN_END, unless a copy may come and one token can reach its
        digits (Grammar.reaches_lines). Op boundaries, gen bodies and gen closes are then computed
        once per document, not once per copy."""
        kind = s[0]
        if kind not in _SHAREABLE:
            return None
        if kind == OP:
            _, prefix, lo, has_op = s
            copy_next = lo <= self.n_lines
            if copy_next and self.grammar.reaches_lines(prefix):
                return None
            return (OP, prefix, copy_next, has_op)
        copy_next = s[-1] <= self.n_lines
        if copy_next and self.grammar.reaches_lines(None):
            return None
        return s[:-1] + (copy_next,)

    def _walk_allowed(self, s: tuple) -> _Allowed:
        index = self.tables.index
        ids: list = []
        if s[0] in (LINE_I, LINE_J):  # a few candidates, read directly: faster than the walk
            ids = self._line_allowed(s)
        else:
            self._walk(s, b"", 0, len(index.sorted_bytes), ids)
        if s[0] == END:
            ids += sorted(self.grammar.vocab.eos_ids)
        ids_array = np.array(sorted(set(ids)), np.int64)
        mask = np.zeros(index.size, bool)
        mask[ids_array] = True
        ids_array.flags.writeable = False
        return _Allowed(mask, ids_array)

    def _line_allowed(self, s: tuple) -> list[int]:
        kind, value, bound = s
        tokens, ids = self.tables.vocab.tokens, []
        for t in self.grammar.line_candidates(kind, value > 0):
            token = tokens[t]
            if token.isdigit():  # viable digits have viable prefixes: test the whole number at once
                number = value * 10 ** len(token) + int(token)
                if (value or token[0] != 0x30) and line_viable(number, bound, self.n_lines):
                    ids.append(t)
            elif self.run(s, token)[0] is not None:
                ids.append(t)
        return ids

    def _walk(self, s: tuple, prefix: bytes, lo: int, hi: int, out: list) -> None:
        """Collect the tokens in sorted_bytes[lo:hi] (all start with prefix, which led to state s)
        that stay valid, descending only along bytes the FSM allows (bisection per byte)."""
        index = self.tables.index
        words, ids = index.sorted_bytes, index.sorted_ids
        while lo < hi and len(words[lo]) == len(prefix):
            out.append(ids[lo])
            lo += 1
        if lo >= hi:
            return
        if s[0] == BODY:  # entered a gen body inside these tokens: read each rest directly
            n = len(prefix)
            out.extend(ids[k] for k in range(lo, hi) if self.run(s, words[k][n:])[0] is not None)
            return
        for byte, target in self.options(s):
            longer = prefix + bytes([byte])
            start, stop = index.prefix_range(longer, lo, hi)
            if start < stop:
                self._walk(target, longer, start, stop, out)

    def _body_allowed(self, s: tuple) -> _Allowed:
        """Static mask for (node, utf8) plus the tokens that close the body inside them, which
        depend on the document (what may follow `</gen>\n`): those are read exactly."""
        _, node, utf8, _lo = s
        tables, end = self.tables, self.syntax.body_end
        mask = tables.static_body_mask(node, utf8).copy()
        extra = [t for t in tables.exits.tolist() if self.run(s, tables.vocab.tokens[t])[0] is not None]
        if end.startswith(node) and end != node:
            rest = end[len(node) :]
            start, stop = tables.index.prefix_range(rest)
            after = self.run(s, rest)[0]
            if start < stop and after is not None:
                self._walk(after, rest, start, stop, extra)
        mask[np.array(extra, np.int64)] = True
        return _Allowed(mask)

    # -- forced literals ----------------------------------------------------------------------

    def forced(self, s: tuple) -> tuple[int, ...]:
        """Token ids for the only continuation the grammar admits from s, up to the next
        decision (a digit choice, gen text, the op boundary, or the end)."""
        if s not in self._forced:
            self._forced[s] = self._tokenize_forced(self.forced_bytes(s))
        return self._forced[s]

    def forced_bytes(self, s: tuple) -> bytes:
        out = bytearray()
        while s[0] not in (BODY, END, STOP) and not (s[0] == OP and s[1] == b""):
            options = self.options(s)
            if len(options) != 1:
                break
            out.append(options[0][0])
            s = options[0][1]
        return bytes(out)

    def _tokenize_forced(self, data: bytes) -> tuple[int, ...]:
        if not data:
            return ()
        tokens, by_bytes = self.tables.vocab.tokens, self.tables.index.by_bytes
        if self.grammar.encode is not None:
            ids = tuple(int(i) for i in self.grammar.encode(data.decode("utf-8")))
            if (
                all(0 <= i < len(tokens) and by_bytes.get(tokens[i]) is not None for i in ids)
                and b"".join(tokens[i] for i in ids) == data
            ):
                return ids
        return _greedy(data, by_bytes)


def _greedy(data: bytes, by_bytes: dict) -> tuple[int, ...]:
    """Longest-match tokenisation of data; stops early if some byte has no token."""
    ids, pos = [], 0
    while pos < len(data):
        for end in range(len(data), pos, -1):
            tid = by_bytes.get(data[pos:end])
            if tid is not None:
                ids.append(tid)
                pos = end
                break
        else:
            break
    return tuple(ids)


class ProgramCursor:
    """One decode's position in the program grammar's constraint (a decode.Cursor): advance, rollback, masks, forced, copies."""

    def __init__(self, constraint: Constraint):
        self.constraint = constraint
        self._states: list = [constraint.start]
        self._tokens: list[int] = []
        self._copies: list[tuple] = [()]

    @property
    def state(self) -> tuple:
        return self._states[-1]

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    def allowed_mask(self) -> np.ndarray:
        """bool [V], read-only; shared with the cache, do not modify."""
        return self._allowed().mask

    def allowed_ids(self) -> np.ndarray:
        return self._allowed().ids

    def _allowed(self) -> _Allowed:
        if self.state[0] == STOP:
            return _Allowed(np.zeros(self.constraint.tables.index.size, bool), np.zeros(0, np.int64))
        return self.constraint.allowed(self.state)

    def advance(self, token_id: int) -> bool:
        """Take one token; False (and nothing changes) if it is not allowed here."""
        c = self.constraint
        vocab = c.tables.vocab
        if token_id in vocab.eos_ids:
            new, copies = ((STOP,) if self.state[0] == END else None), ()
        elif 0 <= token_id < len(vocab) and c.tables.index.usable[token_id] and self.state[0] != STOP:
            new, copies = c.run(self.state, vocab.tokens[token_id])
        else:
            new = None
        if new is None:
            return False
        self._states.append(new)
        self._tokens.append(int(token_id))
        self._copies.append(copies)
        return True

    def forced(self) -> tuple[int, ...]:
        return self.constraint.forced(self.state) if self.state[0] != STOP else ()

    def completed_copy(self) -> Copy | None:
        """The copy closed by the last advanced token, if any (the last one, if it closed two)."""
        return self._copies[-1][-1] if self._copies[-1] else None

    def completed_copies(self) -> tuple[Copy, ...]:
        return self._copies[-1]

    def is_done(self) -> bool:
        return self.state[0] in (END, STOP)

    def rollback(self, k: int) -> None:
        if not 0 <= k <= len(self._tokens):
            raise ValueError(f"cannot roll back {k} of {len(self._tokens)} tokens")
        for _ in range(k):
            self._states.pop()
            self._tokens.pop()
            self._copies.pop()

    def text(self) -> str:
        tokens = self.constraint.tables.vocab.tokens
        data = b"".join(tokens[t] for t in self._tokens if t not in self.constraint.tables.vocab.eos_ids)
        return data.decode("utf-8", errors="replace")
