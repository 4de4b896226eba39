"""Token vocabularies as plain bytes, and the per-vocabulary tables the grammar FSM needs.

`Vocab(tokens, eos_ids, special_ids)` is what the grammar compiles against: one byte string per
token id, so tests can write vocabularies by hand. `vocab_from_tokenizer` adapts a Hugging Face
byte-level BPE tokenizer (Qwen2), cached per tokenizer object in memory. `TokenIndex` holds the
tables built once per vocabulary: tokens sorted by bytes (prefix ranges by bisection) and each
token's UTF-8 behaviour from every UTF-8 decoder state. Pure: numpy only, no torch/transformers.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cadedit.errors import ModelError

# UTF-8 decoder states: 0 = between characters; the others wait for continuation bytes. Each
# waiting state has a count of bytes still needed and the range its next byte must fall in
# (the narrow ranges exclude overlong forms, surrogates and code points above U+10FFFF).
UTF8_NEED = (0, 1, 2, 2, 2, 3, 3, 3)
UTF8_RANGE = ((0, 0), (0x80, 0xBF), (0x80, 0xBF), (0xA0, 0xBF), (0x80, 0x9F), (0x80, 0xBF), (0x90, 0xBF), (0x80, 0x8F))
UTF8_STATES = len(UTF8_NEED)
_GENERIC_WAIT = {1: 1, 2: 2, 3: 5}  # state that waits for n more bytes, any continuation byte


def _lead_state(byte: int) -> int:
    """The decoder state after a byte read between characters; -1 if it cannot start one."""
    if byte < 0x80:
        return 0
    if 0xC2 <= byte <= 0xDF:
        return 1
    if byte == 0xE0:
        return 3
    if byte == 0xED:
        return 4
    if 0xE1 <= byte <= 0xEF:
        return 2
    if byte == 0xF0:
        return 6
    if 0xF1 <= byte <= 0xF3:
        return 5
    if byte == 0xF4:
        return 7
    return -1


def utf8_step(state: int, byte: int) -> int:
    """One byte through the UTF-8 decoder; -1 when the bytes can no longer be valid UTF-8."""
    if state == 0:
        return _lead_state(byte)
    low, high = UTF8_RANGE[state]
    if not low <= byte <= high:
        return -1
    return _GENERIC_WAIT.get(UTF8_NEED[state] - 1, 0)


def utf8_run(state: int, data: bytes) -> int:
    for byte in data:
        state = utf8_step(state, byte)
        if state < 0:
            return -1
    return state


@dataclass(frozen=True, eq=False)
class Vocab:
    """One byte string per token id; EOS ids (allowed only where a program may end) and special
    ids (never allowed). Equality and hashing use a digest of the contents, computed once."""

    tokens: tuple[bytes, ...]
    eos_ids: frozenset[int] = frozenset()
    special_ids: frozenset[int] = frozenset()
    digest: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        h = hashlib.sha256(np.fromiter(map(len, self.tokens), np.int64, len(self.tokens)).tobytes())
        h.update(b"".join(self.tokens))
        h.update(repr((sorted(self.eos_ids), sorted(self.special_ids))).encode())
        object.__setattr__(self, "digest", h.hexdigest())

    def __len__(self) -> int:
        return len(self.tokens)

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and other.digest == self.digest


@dataclass(frozen=True, eq=False)
class TokenIndex:
    """Tables over the usable tokens (not special, not EOS, not empty) of one vocabulary."""

    size: int
    sorted_bytes: list  # usable token bytes, ascending
    sorted_ids: np.ndarray  # token id of each sorted_bytes entry
    by_bytes: dict  # bytes -> lowest usable token id with exactly those bytes
    usable: np.ndarray  # bool [V]
    utf8_end: np.ndarray  # int8 [UTF8_STATES, V]: decoder state after the token, -1 = invalid

    def prefix_range(self, prefix: bytes, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
        """The slice of sorted_bytes (within lo:hi) whose entries start with prefix."""
        hi = len(self.sorted_bytes) if hi is None else hi
        start = bisect_left(self.sorted_bytes, prefix, lo, hi)
        stop = start
        if prefix and prefix[-1] < 255:
            stop = bisect_left(self.sorted_bytes, prefix[:-1] + bytes([prefix[-1] + 1]), start, hi)
        elif prefix:
            stop = _scan_prefix(self.sorted_bytes, prefix, start, hi)
        else:
            stop = hi
        return start, stop


def _scan_prefix(items: list, prefix: bytes, start: int, hi: int) -> int:
    while start < hi and items[start].startswith(prefix):
        start += 1
    return start


def _utf8_profile(token: bytes) -> tuple[int, int]:
    """(leading continuation bytes, decoder state after the rest read from state 0)."""
    lead = 0
    while lead < len(token) and 0x80 <= token[lead] <= 0xBF:
        lead += 1
    try:  # Python's strict decoder does the bulk; the state comes from an unfinished tail
        token[lead:].decode("utf-8")
        return lead, 0
    except UnicodeDecodeError as error:
        if error.reason != "unexpected end of data":
            return lead, -1
        return lead, utf8_run(0, token[lead + error.start :])


def _utf8_table(tokens: tuple[bytes, ...]) -> np.ndarray:
    """[UTF8_STATES, V]: state after each token from each state. A waiting state accepts a token
    iff its first byte is in range and the token either ends inside the wait or completes it
    exactly and reads the rest from state 0 (vectorised over the vocabulary)."""
    size = len(tokens)
    lead = np.zeros(size, np.int16)
    rest = np.zeros(size, np.int8)
    first = np.zeros(size, np.int16)
    length = np.fromiter(map(len, tokens), np.int32, size)
    for tid, token in enumerate(tokens):
        if token and not token.isascii():
            lead[tid], rest[tid] = _utf8_profile(token)
            first[tid] = token[0]
    table = np.full((UTF8_STATES, size), -1, np.int8)
    table[0] = np.where(lead == 0, rest, -1)
    for state in range(1, UTF8_STATES):
        need = UTF8_NEED[state]
        low, high = UTF8_RANGE[state]
        ok_first = (lead >= 1) & (first >= low) & (first <= high)
        inside = ok_first & (lead == length) & (length < need)
        exact = ok_first & (lead == need)
        partial = np.array([_GENERIC_WAIT.get(need - n, 0) for n in range(4)], np.int8)
        table[state] = np.where(exact, rest, np.where(inside, partial[np.minimum(length, 3)], -1))
    return table


def build_index(vocab: Vocab) -> TokenIndex:
    """Sort the usable tokens and profile their UTF-8, once per vocabulary."""
    usable = np.fromiter(map(bool, vocab.tokens), bool, len(vocab))
    usable[list(vocab.eos_ids | vocab.special_ids)] = False
    ids = np.flatnonzero(usable).tolist()
    order = sorted(ids, key=vocab.tokens.__getitem__)
    by_bytes = {vocab.tokens[tid]: tid for tid in reversed(ids)}
    return TokenIndex(
        size=len(vocab),
        sorted_bytes=[vocab.tokens[i] for i in order],
        sorted_ids=np.array(order, np.int64),
        by_bytes=by_bytes,
        usable=usable,
        utf8_end=_utf8_table(vocab.tokens),
    )


def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable character that stands for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


_BYTE_TABLE = {ord(ch): b for ch, b in _byte_decoder().items()}
_VOCAB_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _is_byte_level(hf_tokenizer) -> bool:
    decoder = getattr(getattr(hf_tokenizer, "backend_tokenizer", None), "decoder", None)
    return type(decoder).__name__ == "ByteLevel"


def vocab_from_tokenizer(hf_tokenizer, n_logits: int | None = None, eos_ids=None) -> Vocab:
    """The Vocab of a byte-level BPE Hugging Face tokenizer; cached per tokenizer object.

    Added tokens (special or not) are never allowed, except the EOS ids (default: the
    tokenizer's eos_token_id). `n_logits` pads the vocabulary to the model's logits width with
    empty, never-allowed ids (Qwen2.5: 151,665 tokens, 151,936 logits).
    """
    key = (n_logits, tuple(sorted(eos_ids)) if eos_ids is not None else None)
    cached = _VOCAB_CACHE.get(hf_tokenizer, {})
    if key in cached:
        return cached[key]
    if not _is_byte_level(hf_tokenizer):
        raise ModelError("the grammar needs a byte-level BPE tokenizer (like Qwen2's)", hint="use a Qwen2/2.5 model")
    vocab = _read_vocab(hf_tokenizer, n_logits, eos_ids)
    _VOCAB_CACHE.setdefault(hf_tokenizer, {})[key] = vocab
    return vocab


def _piece_bytes(piece: str | None) -> bytes:
    """A byte-level BPE piece (bytes written as printable characters) as the bytes it stands for."""
    return piece.translate(_BYTE_TABLE).encode("latin-1") if piece else b""


class TokenBytes(Sequence):
    """Each token id's bytes (added tokens as their UTF-8 text; b"" past the vocabulary), as wide
    as n_logits, looked up when first asked for: an edit reads a few thousand ids, and building the
    whole table would cost every cold `cadedit fix` a noticeable share of its start. The grammar's Vocab builds all of it."""

    def __init__(self, hf_tokenizer, n_logits: int | None = None):
        self._tokenizer = hf_tokenizer
        self._added = _added_bytes(hf_tokenizer)
        self._size = max(len(hf_tokenizer), n_logits or 0)
        self._known: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        index = index + self._size if index < 0 else index
        if not 0 <= index < self._size:
            raise IndexError(index)
        piece = self._known.get(index)
        if piece is None:
            piece = self._added.get(index)
            if piece is None:
                piece = _piece_bytes(self._tokenizer.convert_ids_to_tokens(index))
            self._known[index] = piece
        return piece


_BYTES_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def token_bytes_of(hf_tokenizer, n_logits: int | None = None) -> TokenBytes:
    """The TokenBytes of a tokenizer, one per tokenizer object and width."""
    cached = _BYTES_CACHE.setdefault(hf_tokenizer, {})
    if n_logits not in cached:
        cached[n_logits] = TokenBytes(hf_tokenizer, n_logits)
    return cached[n_logits]


def _added_bytes(hf_tokenizer) -> dict[int, bytes]:
    return {tid: str(tok).encode("utf-8") for tid, tok in hf_tokenizer.added_tokens_decoder.items()}


def _read_vocab(hf_tokenizer, n_logits: int | None, eos_ids) -> Vocab:
    added = _added_bytes(hf_tokenizer)
    pieces = hf_tokenizer.get_vocab()
    size = max([len(hf_tokenizer), n_logits or 0, max(pieces.values()) + 1])
    tokens = [b""] * size
    for piece, tid in pieces.items():
        if tid not in added:
            tokens[tid] = _piece_bytes(piece)
    for tid, content in added.items():
        tokens[tid] = content
    if eos_ids is None:
        eos_ids = {hf_tokenizer.eos_token_id} - {None}
    eos = frozenset(int(i) for i in eos_ids)
    never = {i for i, t in enumerate(tokens) if not t} | set(added) | _unreachable(hf_tokenizer, pieces)
    return Vocab(tuple(tokens), eos, frozenset(never) - eos)


def _unreachable(hf_tokenizer, pieces: dict) -> set[int]:
    """Vocabulary entries that no merge produces, so the tokenizer never emits them and the model
    never saw them (GGUF-converted Qwen2.5 carries 271 `[PAD151xxx]` pieces)."""
    try:  # parse only the merges array of the tokenizer's JSON (the whole file takes ~3x longer)
        text = hf_tokenizer.backend_tokenizer.to_str()
        merges = json.JSONDecoder().raw_decode(text, text.index("[", text.index('"merges"')))[0]
    except (AttributeError, TypeError, ValueError):
        return set()
    made = {"".join(m.split(" ", 1)) if isinstance(m, str) else "".join(m) for m in merges}
    return {tid for piece, tid in pieces.items() if len(piece) > 1 and piece not in made}


class BodyTables:
    """Per-vocabulary tables shared by every document: the token index; per token whether a gen
    body read from its reserved-literal root dies in it (`dead`: a reserved literal other than
    `body_end`) or ends in it (`exits`); static body masks; `memo` for the grammar's own use."""

    def __init__(self, vocab: Vocab, reserved: tuple[bytes, ...], body_end: bytes):
        self.vocab, self.reserved, self.body_end = vocab, reserved, body_end
        self.index: TokenIndex = build_index(vocab)
        self.prefixes = {r[:k] for r in reserved for k in range(len(r) + 1)}
        self.dead = np.zeros(len(vocab), bool)
        exits = []
        for tid in np.flatnonzero(self.index.usable).tolist():
            token = vocab.tokens[tid]
            if b"<" in token:
                verdict = self._scan(token)
                self.dead[tid] = verdict != ""
                if verdict == "exit":
                    exits.append(tid)
        self.exits = np.array(exits, np.int64)
        self._static: dict = {}
        self.memo: dict = {}
        for node in self.prefixes - set(reserved):  # the states a decode meets, once per vocabulary
            self.static_body_mask(node, 0)

    def ac_step(self, node: bytes, byte: int) -> bytes:
        """Aho-Corasick over the reserved literals: each starts with `<` and has no other `<`."""
        longer = node + bytes([byte])
        if longer in self.prefixes:
            return longer
        return b"<" if byte == 0x3C else b""

    def _scan(self, token: bytes) -> str:
        node = b""
        for byte in token:
            node = self.ac_step(node, byte)
            if node in self.reserved:
                return "exit" if node == self.body_end else "dead"
        return ""

    def static_body_mask(self, node: bytes, utf8: int) -> np.ndarray:
        """Tokens allowed from body state (node, utf8) whatever the document; exits excluded."""
        key = (node, utf8)
        if key not in self._static:
            mask = (self.index.utf8_end[utf8] >= 0) & self.index.usable & ~self.dead
            for literal in self.reserved:
                if literal.startswith(node) and literal != node:
                    start, stop = self.index.prefix_range(literal[len(node) :])
                    mask[self.index.sorted_ids[start:stop]] = False
            mask.flags.writeable = False
            self._static[key] = mask
        return self._static[key]
