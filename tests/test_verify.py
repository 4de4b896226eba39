"""Verified copy is lossless: on a scripted model and on the tiny random Qwen2 (real KV cache, real
crops), verify_rewrite returns exactly the ids greedy_rewrite returns, for many documents, edits,
tokenisations, budgets and stopping points, while accepting long drafts of the input's own lines."""

from __future__ import annotations

import random

import pytest
import torch

from cadedit import rewrite as R
from cadedit.model import LoadedModel, encode, new_cache
from cadedit.verify import Aligner, Schedule, agreement, verify_rewrite
from cadedit.vocab import vocab_from_tokenizer
from tests.tinymodel import make_model
from tests.tinytok import _MORE, make_tokenizer

FENCE = "```"
TOK = make_tokenizer()
TOKEN_BYTES = vocab_from_tokenizer(TOK).tokens
EOS = frozenset({TOK.eos_token_id})
CORPUS = [line + "\n" for line in _MORE.splitlines()]


def encode_text(text: str) -> list[int]:
    return encode(TOK, text)


class ScriptedLM:
    """Greedily writes `target` after the prompt; once its history leaves the target it writes a
    deterministic garbage token. One-hot logits, so batched and stepwise forwards agree exactly.
    The history is its KV cache: feed appends, crop drops."""

    def __init__(self, prompt_len: int, target: list[int], end: int):
        self.prompt_len, self.target, self.end = prompt_len, target, end
        self.history: list[int] = []
        self.matched = 0  # length of the longest prefix of the output history that follows target

    def feed(self, ids, keep=1):
        rows = []
        for token in ids:
            self.history.append(token)
            rows.append(self._next(len(self.history) - self.prompt_len))
        return torch.nn.functional.one_hot(torch.tensor(rows[-keep:]), len(TOKEN_BYTES)).float()  # [keep, V]

    def crop(self, n):
        assert 0 <= n <= len(self.history) - self.prompt_len
        del self.history[len(self.history) - n :]
        self.matched = min(self.matched, len(self.history) - self.prompt_len)

    def _next(self, n_out: int) -> int:
        """The prediction after n_out output tokens (the history ends with the n_out-th one)."""
        if n_out > 0 and self.matched == n_out - 1 and n_out <= len(self.target):
            self.matched += self.history[-1] == self.target[n_out - 1]
        if n_out <= 0 or self.matched == n_out:
            return self.target[n_out] if n_out < len(self.target) else self.end
        return 3 + (self.history[-1] * 31 + n_out) % 200  # a byte token: never EOS, rarely a newline


def split_some(ids: list[int], rng: random.Random, rate: float) -> list[int]:
    """A non-canonical tokenisation of the same text: some tokens spelled out byte by byte."""
    by_bytes = {piece: i for i, piece in reversed(list(enumerate(TOKEN_BYTES))) if piece}
    out: list[int] = []
    for token in ids:
        piece = TOKEN_BYTES[token]
        if len(piece) > 1 and rng.random() < rate:
            out += [by_bytes[bytes([b])] for b in piece]
        else:
            out.append(token)
    return out


def edited(lines: list[str], rng: random.Random, n_edits: int) -> list[str]:
    lines = list(lines)
    for _ in range(n_edits):
        k = rng.randrange(len(lines) + 1)
        kind = rng.choice(["replace", "insert", "delete", "duplicate"])
        if kind == "insert" or not lines or k == len(lines):
            lines.insert(k, rng.choice(CORPUS))
        elif kind == "replace":
            lines[k] = "    value = " + str(rng.randrange(1000)) + "\n"
        elif kind == "delete":
            del lines[k]
        else:
            lines.insert(k, lines[k])
    return lines


def run_both(source: str, target: list[int], budget: int, end: int, schedule: Schedule = Schedule()):
    prompt = [5, 6, 7]
    output = lambda: R.Output(R.Stopper(TOKEN_BYTES, EOS, FENCE), budget)  # noqa: E731
    greedy = R.greedy_rewrite(ScriptedLM(len(prompt), target, end), prompt, output())
    lm = ScriptedLM(len(prompt), target, end)
    verified = verify_rewrite(lm, prompt, source, encode_text, TOKEN_BYTES, output(), schedule)
    return greedy, verified, lm


@pytest.mark.parametrize("seed", range(40))
def test_verify_equals_greedy_on_scripted_edits(seed):
    rng = random.Random(seed)
    start = rng.randrange(len(CORPUS))
    before = (CORPUS[start:] + CORPUS[:start])[: rng.randrange(1, 60)]
    after = edited(before, rng, rng.randrange(0, 5))
    ending = rng.choice(["fence", "eos", "never"])
    text = "".join(after) + (FENCE + "\n" if ending == "fence" else "")
    target = split_some(encode_text(text), rng, rate=rng.choice([0.0, 0.05, 0.3]))
    end = TOK.eos_token_id if ending != "never" else 3
    budget = rng.choice([len(target) + 40, max(1, len(target) // 2), len(target)])
    greedy, verified, lm = run_both("".join(before) + FENCE + "\n", target, budget, end)
    assert verified.ids == greedy.ids
    assert verified.finished == greedy.finished
    # Whatever was cropped, the cache holds only output tokens: no rejected draft token stays.
    cached = lm.history[lm.prompt_len :]
    assert cached == list(verified.ids[: len(cached)]) and len(cached) >= len(verified.ids) - 1


def test_unchanged_file_needs_few_forwards_and_drafts_grow():
    before = CORPUS * 3  # ~230 lines, ~2,000 tokens, every line repeated three times
    target = encode_text("".join(before) + FENCE + "\n")
    greedy, verified, lm = run_both("".join(before) + FENCE + "\n", target, 10_000, TOK.eos_token_id)
    assert verified.ids == greedy.ids and verified.finished
    # 16, 32, ..., 256-token drafts: about len/256 + 5 forwards instead of one per token.
    assert verified.stats.forward_passes <= len(target) // 256 + 8
    assert verified.stats.tokens_accepted >= len(target) - verified.stats.forward_passes
    assert verified.stats.drafts_rejected <= 1  # at most the draft that runs past the closing fence


def test_one_line_edit_in_a_long_file_rejects_few_drafts():
    before = CORPUS * 4
    after = list(before)
    after[150] = "    return 42\n"
    target = encode_text("".join(after) + FENCE + "\n")
    greedy, verified, lm = run_both("".join(before) + FENCE + "\n", target, 10_000, TOK.eos_token_id)
    assert verified.ids == greedy.ids
    assert greedy.stats.forward_passes >= 10 * verified.stats.forward_passes
    assert verified.stats.drafts_rejected <= 4


def test_schedule_grows_while_accepted_and_restarts_after_a_miss():
    schedule = Schedule(start=16, grow=2, most=64)
    assert [schedule.next(16, True), schedule.next(32, True), schedule.next(64, True)] == [32, 64, 64]
    assert schedule.next(64, False) == 16


def test_agreement_counts_the_greedy_prefix():
    assert agreement([1, 2, 3, 9], [1, 2, 3]) == 3
    assert agreement([1, 5, 3, 9], [1, 2, 3]) == 1
    assert agreement([7], []) == 0


def test_aligner_follows_a_different_tokenisation_of_the_same_text():
    aligner = Aligner("abc = 1\nxyz = 2\n```\n", encode_text)
    for piece in (b"a", b"bc", b" = 1\nx"):
        aligner.advance(piece)
    assert aligner.anchor == len("abc = 1\nx")
    assert TOK.decode(aligner.draft(50)) == "yz = 2\n```\n"


def test_aligner_places_a_repeated_line_by_the_lines_before_it():
    source = "def a():\n    pass\n\ndef b():\n    x = 1\n    pass\n\ndef c():\n    pass\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"def b():\n")  # found again at line 4
    aligner.advance(b"    x = 2\n")  # diverges on line 5
    assert aligner.anchor is None
    aligner.advance(b"    pass\n")  # "    pass" is lines 2, 6 and 9: the one after the last aligned line wins
    assert TOK.decode(aligner.draft(50)).startswith("\ndef c():")
    aligner = Aligner(source, encode_text)
    aligner.advance(b"zzz\ndef c():\n    pass\n")  # two lines match at line 9, one at lines 2 and 6
    assert TOK.decode(aligner.draft(50)) == "```\n"


def test_aligner_resumes_mid_line_when_the_model_skips_lines():
    source = "def a():\n    pass\n\n\ndef b():\n    return 1\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"def a():\n    pass\n")
    aligner.advance(b"def")  # both blank lines left out: lost, then found again in line 5
    assert TOK.decode(aligner.draft(50)) == " b():\n    return 1\n```\n"
    aligner.advance(b" c")  # a changed line: lost until a line matches again
    assert aligner.anchor is None and aligner.draft(50) == []


def test_aligner_has_no_draft_when_lost_or_inside_a_character():
    aligner = Aligner("é = 1\n```\n", encode_text)
    aligner.advance("é".encode()[:1])
    assert aligner.draft(10) == []
    aligner.advance(b"q")
    assert aligner.anchor is None and aligner.draft(10) == []


# -- the tiny random Qwen2: real KV cache, real crops ------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    """fp64 so that batched and stepwise logits agree far below any argmax margin; weights scaled
    up so the random model writes varied text with newlines instead of one repeated token; the
    LM head rows of tokens that are not printable ASCII zeroed (their logit 0 never wins against
    768 random ones), so the output is valid text that drafts can follow."""
    model = make_model(0).double()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "norm" not in name:
                weight.mul_(10)
        for token, piece in enumerate(TOKEN_BYTES):
            if not piece or any(b > 126 or (b < 32 and b != 10) for b in piece) or token in TOK.all_special_ids:
                model.lm_head.weight[token] = 0.0
    return LoadedModel(model, TOK, "tiny", "cpu", torch.float64, 1, 4096, 0.0)


def reference_encoder(reference: list[int]):
    """Tokenise like the reference output where the text continues it from one of its token
    boundaries (so drafts can match the random model's own, non-canonical tokens), else canonically."""
    offsets, pos = [], 0
    for token in reference:
        offsets.append(pos)
        pos += len(TOKEN_BYTES[token])
    data = b"".join(TOKEN_BYTES[t] for t in reference)

    def common(a: bytes, b: bytes) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    def encode_like(text: str) -> list[int]:
        raw = text.encode()
        k = max(range(len(reference)), key=lambda i: common(data[offsets[i] :], raw))
        same, ids, used = common(data[offsets[k] :], raw), [], 0
        while k < len(reference) and used + len(TOKEN_BYTES[reference[k]]) <= same:
            ids.append(reference[k])
            used += len(TOKEN_BYTES[reference[k]])
            k += 1
        rest = raw[used:]
        return ids + (encode_text(rest.decode()) if rest else [])

    return encode_like


@pytest.mark.parametrize("seed", range(4))
def test_verify_equals_rewrite_on_the_tiny_model(tiny, seed):
    rng = random.Random(seed)
    document = R.Document.from_text("".join(rng.sample(CORPUS, 8)), "x.py")
    request = R.prepare_rewrite(tiny, document, "Fix it.", max_new_tokens=120)
    greedy = R.generate(tiny, request, "rewrite")
    verified = R.generate(tiny, request, "verify")
    assert verified.ids == greedy.ids
    assert verified.stats.drafts_proposed >= 1


@pytest.mark.parametrize("seed", range(3))
def test_verify_accepts_and_crops_on_the_tiny_model(tiny, seed):
    """Draft from a perturbed copy of the model's own output: long accepts, misses, relocations and
    crops on a real DynamicCache, and still exactly the greedy ids."""
    rng = random.Random(seed)
    document = R.Document.from_text("".join(rng.sample(CORPUS, 6)), "x.py")
    request = R.prepare_rewrite(tiny, document, "Fix it.", max_new_tokens=160)
    greedy = R.generate(tiny, request, "rewrite")
    text = b"".join(TOKEN_BYTES[t] for t in greedy.ids).decode("utf-8", errors="replace")
    source = "".join(edited(text.splitlines(keepends=True), rng, 2)) + FENCE + "\n"
    lm = R.CachedLM(tiny.model, new_cache(tiny))
    verified = verify_rewrite(lm, request.prompt_ids, source, reference_encoder(list(greedy.ids)), TOKEN_BYTES,
                              request.output(), Schedule(start=8, grow=2, most=32))
    assert verified.ids == greedy.ids
    assert verified.stats.tokens_accepted >= 40
    assert verified.stats.forward_passes < greedy.stats.forward_passes - 40
    assert lm.cache.get_seq_length() - len(request.prompt_ids) in (len(greedy.ids) - 1, len(greedy.ids))
