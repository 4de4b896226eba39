"""A tiny Qwen2-style tokenizer for tests: byte-level BPE with Qwen2's pre-tokenisation, no download.

`make_tokenizer()` returns a transformers PreTrainedTokenizerFast (vocabulary VOCAB_SIZE = 768:
256 byte tokens + merges learned from a small built-in corpus of code and program text, then the
specials <|endoftext|>, <|im_start|>, <|im_end|> at the END of the vocabulary, as in Qwen2).
Digits are split one per token (Qwen2's regex), eos is <|im_end|>, pad is <|endoftext|>, and the
chat template is Qwen's im_start/im_end format. Deterministic; built once per process (~0.1 s).
The returned object is shared: do not mutate it.
"""

from __future__ import annotations

import functools

# Qwen2's pre-tokenizer regex, copied from its tokenizer.json.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB_SIZE = 768

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_CODE = '''\
def add(a, b):
    """Return the sum of a and b."""
    return a + b


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()


def fib(n: int) -> int:
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


for i in range(10):
    print(i, fib(i))

import os
import sys
from typing import List, Optional

def read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()

if __name__ == "__main__":
    main(sys.argv[1:])

function greet(name) {
  return `Hello, ${name}!`;
}
const xs = [1, 2, 3].map((x) => x * 2);
if (xs.length > 0 && xs[0] <= 2) { console.log(xs); }
<div class="box"><p>Text</p></div>
'''

_MORE = '''\
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    name: str
    retries: int = 3
    timeout: float = 1.5
    tags: tuple[str, ...] = ()


def load_config(path: Path) -> Config:
    """Load a configuration file written as JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        logger.warning("missing config %s, using defaults", path)
        return Config(name="default")
    except json.JSONDecodeError as error:
        raise ValueError(f"bad config {path}: {error}") from error
    return Config(**data)


def parse_version(text: str) -> tuple[int, int, int]:
    major, minor, patch = (int(part) for part in text.strip().split("."))
    return major, minor, patch


def chunks(items, size):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def is_palindrome(word: str) -> bool:
    cleaned = "".join(ch.lower() for ch in word if ch.isalnum())
    return cleaned == cleaned[::-1]


def binary_search(values, target):
    lo, hi = 0, len(values) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if values[mid] == target:
            return mid
        if values[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


class Counter(dict):
    def add(self, key, amount=1):
        self[key] = self.get(key, 0) + amount
        return self[key]

    def most_common(self, count=None):
        ordered = sorted(self.items(), key=lambda kv: (-kv[1], kv[0]))
        return ordered if count is None else ordered[:count]


async function fetchJson(url, options = {}) {
  const response = await fetch(url, { ...options, headers: { Accept: "application/json" } });
  if (!response.ok) {
    throw new Error(`request failed: ${response.status}`);
  }
  return response.json();
}

export default class Queue {
  constructor() { this.head = null; this.tail = null; this.length = 0; }
  enqueue(value) {
    const node = { value, next: null };
    if (this.tail) { this.tail.next = node; } else { this.head = node; }
    this.tail = node;
    this.length += 1;
  }
}
'''

_PROGRAM = '''\
<program>
<copy lines="1-4"/>
<gen>
    return a - b
</gen>
<copy lines="6-12"/>
<gen>
def sub(a, b):
    return a - b
</gen>
<copy lines="13-27"/>
<copy lines="30-31"/>
</program>
'''


def _corpus() -> list[str]:
    # Repeat the program text so its literals win merges (`<copy`, ` lines`, `"/>`, `</gen>` ...).
    return [_CODE] * 3 + [_MORE] * 2 + [_PROGRAM] * 6 + ["Fix the bug. Rename x to y. Add a docstring.\n"]


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIALS),
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens(list(SPECIALS))
    return tok.to_str()


@functools.lru_cache(maxsize=1)
def make_tokenizer():
    """The shared tiny tokenizer (PreTrainedTokenizerFast, len == VOCAB_SIZE)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf
