"""Helpers for the bench tests: a character tokenizer, a byte-level tokenizer.json, corpora on disk."""

from __future__ import annotations

import json
from pathlib import Path


class CharTokenizer:
    """One token per character: token counts are string lengths, so expectations are hand-checkable."""

    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]


def write_byte_tokenizer(path: Path) -> Path:
    """A byte-level BPE tokenizer.json with no merges: one token per UTF-8 byte (len(text) for ASCII)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: k for k, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(path))
    return path


def write_corpus(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def record(id: str, before: str, after: str, **extra) -> dict:
    return {"id": id, "language": "python", "before": before, "after": after, "instruction": "Fix it.", **extra}


# Small cases: a one-line fix, a fix whose minimal anchor also occurs earlier, an insertion, a CRLF
# file without a final newline, and a gold that contains reserved program literals.
CASES = [
    record(
        "fix",
        "def f(a, b):\n    return a - b\n\nprint(f(1, 2))\n",
        "def f(a, b):\n    return a + b\n\nprint(f(1, 2))\n",
    ),
    record("ambiguous", "x = 1\ny = 2\nx = 1\nz = 3\n", "x = 1\ny = 2\nx = 10\nz = 3\n"),
    record("insert", "a\nb\nc\nd\ne\n", "a\nb\nnew\nc\nd\ne\n"),
    record("crlf", "one\r\ntwo\r\nthree", "one\r\nTWO\r\nthree"),
    record("reserved", "s = ''\nt = 1\n", "s = '</gen>'\nt = 1\n"),
]
