"""Verified copy is lossless: on a scripted model and on the tiny random Qwen2 (real KV cache, real
crops), the decode loop with a FenceCursor and a VerifyDrafter returns exactly the ids it returns
without a drafter (one token per forward), for many documents, edits, tokenisations, budgets and
stopping points, while accepting long drafts of the input's own lines; with sampling it keeps drafts
and stays reproducible."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest
import torch

import cadedit.decode.pipeline as pipeline
from cadedit.decode.loop import DecodeStats, Step, decode, sampler_for
from cadedit.text.document import Document
from cadedit.errors import BudgetError
from cadedit.prompt.fence import FenceCursor
from cadedit.backends.model import LoadedModel, CachedLM, encode, new_cache
from cadedit.options import EditOptions, Mode, Sampling
from cadedit.decode.verify import Aligner, Schedule, VerifyDrafter, renames_in, shift_in
from cadedit.backends.vocab import vocab_from_tokenizer
from tests.tinymodel import scaled_model
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
    deterministic garbage token. One-hot logits (times `scale`), so batched and stepwise forwards
    agree exactly. The history is its KV cache: feed appends, crop drops (the decode.LM protocol)."""

    def __init__(self, prompt_len: int, target: list[int], end: int, scale: float = 1.0):
        self.prompt_len, self.target, self.end, self.scale = prompt_len, target, end, scale
        self.feeds = 0
        self.history: list[int] = []
        self.matched = 0  # length of the longest prefix of the output history that follows target

    def feed(self, ids, keep=1):
        rows = []
        self.feeds += 1
        for token in ids:
            self.history.append(token)
            rows.append(self._next(len(self.history) - self.prompt_len))
        return (
            self.scale * torch.nn.functional.one_hot(torch.tensor(rows[-keep:]), len(TOKEN_BYTES)).float()
        )  # [keep, V]

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


@dataclass(frozen=True)
class Run:
    """One decode through the loop: its ids (EOS included), whether the cursor finished within the
    budget, its statistics, and its forwards."""

    ids: tuple[int, ...]
    finished: bool
    stats: DecodeStats
    steps: tuple[Step, ...]

    @property
    def drafts(self) -> int:
        return sum(1 for s in self.steps if s.drafted)

    @property
    def drafts_rejected(self) -> int:
        """Drafts not kept in full."""
        return sum(1 for s in self.steps if s.drafted and s.kept < s.drafted)


def run_loop(lm, prompt, budget: int, drafter=None, sampling: Sampling = Sampling(), cursor=None) -> Run:
    """decode() over a FenceCursor; an answer the budget cut short keeps the ids the cursor took."""
    cursor = cursor or FenceCursor(TOKEN_BYTES, EOS, FENCE)
    steps: list[Step] = []
    running = [DecodeStats()]

    def on_step(stats: DecodeStats, step: Step) -> None:
        steps.append(step)
        running[0] = stats

    try:
        decoded = decode(lm, cursor, prompt, None, sampler_for(sampling), budget, on_step, drafter)
    except BudgetError:
        assert not cursor.is_done()
        return Run(tuple(cursor.ids), False, running[0], tuple(steps))
    assert decoded.text == cursor.text() and decoded.stats.forward_passes == len(steps)
    assert decoded.stats.tokens_new == len(decoded.ids)
    return Run(decoded.ids, True, decoded.stats, tuple(steps))


def run_both(source: str, target: list[int], budget: int, end: int, schedule: Schedule = Schedule()):
    prompt = [5, 6, 7]
    greedy = run_loop(ScriptedLM(len(prompt), target, end), prompt, budget)
    lm = ScriptedLM(len(prompt), target, end)
    verified = run_loop(lm, prompt, budget, VerifyDrafter(source, encode_text, TOKEN_BYTES, budget, schedule))
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
    assert greedy.stats.forward_passes == len(target) and greedy.stats.tokens_drafted == 0
    assert verified.stats.forward_passes <= len(target) // 256 + 8
    assert verified.stats.drafts_kept >= len(target) - verified.stats.forward_passes
    assert verified.drafts_rejected <= 1  # at most the draft that runs past the closing fence
    assert verified.stats.tokens_sampled == len(target) and verified.stats.tokens_copied == verified.stats.drafts_kept


def test_one_line_edit_in_a_long_file_rejects_few_drafts():
    before = CORPUS * 4
    after = list(before)
    after[150] = "    return 42\n"
    target = encode_text("".join(after) + FENCE + "\n")
    greedy, verified, lm = run_both("".join(before) + FENCE + "\n", target, 10_000, TOK.eos_token_id)
    assert verified.ids == greedy.ids
    assert greedy.stats.forward_passes >= 10 * verified.stats.forward_passes
    assert verified.drafts_rejected <= 4


@dataclass(frozen=True)
class Fixed:
    """Every draft `size` tokens long (a verify.Lengths)."""

    size: int

    def first(self) -> int:
        return self.size

    def after(self, size: int, drafted: int, kept: int) -> int:
        return self.size


@pytest.mark.parametrize("size", range(1, 25))
def test_a_draft_that_ends_where_a_forced_header_starts_hands_over_to_it(size):
    """Two scoped regions: the header between them is forced. Whatever length the drafts have, one
    of them ends right before the header in some case; the header is then fed as forced, nothing is
    sampled there, and the answer equals one token a forward."""
    header = "Lines 6-6, without their common indentation of 4 spaces:\n```python\n"
    source = "return x + 1\n" + FENCE + "\n" + header + "return x - 2\n" + FENCE + "\n"
    answer = "return x + 10\n" + FENCE + "\n" + header + "return x * 2\n" + FENCE + "\n"
    head = encode_text(header)
    first, second = answer.split(header)
    target = encode_text(first) + head + encode_text(second)

    def cursor() -> FenceCursor:
        return FenceCursor(TOKEN_BYTES, EOS, FENCE, headers=[head])

    prompt = [5, 6, 7]
    greedy = run_loop(ScriptedLM(len(prompt), target, TOK.eos_token_id), prompt, 200, cursor=cursor())
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 200, Fixed(size))
    verified = run_loop(ScriptedLM(len(prompt), target, TOK.eos_token_id), prompt, 200, drafter, cursor=cursor())
    assert verified.ids == greedy.ids == tuple(target) and verified.finished
    assert verified.stats.tokens_forced == greedy.stats.tokens_forced == len(head)


def test_schedule_grows_while_accepted_and_restarts_after_a_miss():
    schedule = Schedule(start=16, grow=2, most=64)
    assert [schedule.next(16, True), schedule.next(32, True), schedule.next(64, True)] == [32, 64, 64]
    assert schedule.next(64, False) == 16


def test_aligner_follows_a_different_tokenisation_of_the_same_text():
    aligner = Aligner("abc = 1\nxyz = 2\n```\n", encode_text)
    for piece in (b"a", b"bc", b" = 1\nx"):
        aligner.advance(piece)
    assert aligner.anchor == len("abc = 1\nx")
    assert TOK.decode(aligner.draft(50)) == "yz = 2\n```"


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
    assert TOK.decode(aligner.draft(50)) == "```"


def test_aligner_resumes_mid_line_when_the_model_skips_lines():
    source = "def a():\n    pass\n\n\ndef b():\n    return 1\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"def a():\n    pass\n")
    aligner.advance(b"def")  # both blank lines left out: lost, then found again in line 5
    assert TOK.decode(aligner.draft(50)) == " b():\n    return 1\n```"
    aligner.advance(b" c")  # a changed line: lost until a line matches again
    assert aligner.anchor is None and aligner.draft(50) == []


def test_aligner_drafts_a_line_again_after_lines_inserted_before_it():
    """A line the output inserts (an import before a function) ends where the source's first line ends,
    so it is taken as that line's rewrite; when the output then writes the first line after all, it
    is drafted from its first token, not typed a token a forward until it ends."""
    source = "def f(x):\n    y = g(x)\n    return y\n```\n"
    aligner = Aligner(source, encode_text)
    for token in encode_text("import logging\n"):
        aligner.advance(TOKEN_BYTES[token])
    assert aligner.last_line == 0  # placed on line 1, the next line looked for after it
    aligner.advance(b"def")
    assert TOK.decode(aligner.draft(50)) == " f(x):\n    y = g(x)\n    return y\n```"


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
    model = scaled_model(torch.float64)
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


def fenced_run(loaded: LoadedModel, prepared: pipeline.Prepared, mode: Mode, lm=None) -> Run:
    """One decode of the prepared fenced answer in `mode` with the pipeline's own cursor and drafter,
    over a fresh KV cache (unless `lm` is given)."""
    cursor, span_ids, drafter = pipeline.mode_parts(
        loaded, None, replace(prepared, mode=mode), True
    )  # fenced: no document needed
    assert span_ids is None
    lm = lm or CachedLM(loaded.model, new_cache(loaded))
    return run_loop(lm, prepared.prompt_ids, prepared.budget, drafter, cursor=cursor)


def prepared_for(loaded: LoadedModel, document: Document, budget: int) -> pipeline.Prepared:
    return pipeline.prepare(loaded, document, "Fix it.", EditOptions(mode=Mode.REWRITE, max_new_tokens=budget))


@pytest.mark.parametrize("seed", range(4))
def test_verify_equals_rewrite_on_the_tiny_model(tiny, seed):
    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 8)), "x.py")
    prepared = prepared_for(tiny, document, 120)
    greedy = fenced_run(tiny, prepared, Mode.REWRITE)
    verified = fenced_run(tiny, prepared, Mode.VERIFY)
    assert verified.ids == greedy.ids and verified.finished == greedy.finished
    assert greedy.stats.tokens_drafted == 0 and greedy.stats.forward_passes == greedy.stats.tokens_sampled
    assert verified.drafts >= 1


@pytest.mark.parametrize("seed", range(3))
def test_lookup_equals_rewrite_on_the_tiny_model(tiny, seed):
    """The lookup mode drafts n-grams of the prompt (which holds the file) and of its own output:
    the random model repeats itself, so drafts are made and kept, and the ids are the rewrite's."""
    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 8)), "x.py")
    prepared = prepared_for(tiny, document, 120)
    greedy = fenced_run(tiny, prepared, Mode.REWRITE)
    looked_up = fenced_run(tiny, prepared, Mode.LOOKUP)
    assert looked_up.ids == greedy.ids and looked_up.finished == greedy.finished
    assert looked_up.drafts >= 1 and looked_up.stats.drafts_kept >= 1
    assert looked_up.stats.forward_passes < greedy.stats.forward_passes


@pytest.mark.parametrize("seed", range(3))
def test_verify_accepts_and_crops_on_the_tiny_model(tiny, seed):
    """Draft from a perturbed copy of the model's own output: long accepts, misses, relocations and
    crops on a real KV cache, and still exactly the greedy ids."""
    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 6)), "x.py")
    prepared = prepared_for(tiny, document, 160)
    greedy = fenced_run(tiny, prepared, Mode.REWRITE)
    text = b"".join(TOKEN_BYTES[t] for t in greedy.ids).decode("utf-8", errors="replace")
    source = "".join(edited(text.splitlines(keepends=True), rng, 2)) + FENCE + "\n"
    lm = CachedLM(tiny.model, new_cache(tiny))
    cursor = FenceCursor(TOKEN_BYTES, EOS, prepared.fence)
    drafter = VerifyDrafter(
        source, reference_encoder(list(greedy.ids)), TOKEN_BYTES, prepared.budget, Schedule(start=8, grow=2, most=32)
    )
    verified = run_loop(lm, prepared.prompt_ids, prepared.budget, drafter, cursor=cursor)
    assert verified.ids == greedy.ids
    assert verified.stats.drafts_kept >= 40 and verified.drafts_rejected >= 1
    assert verified.stats.forward_passes < greedy.stats.forward_passes - 40
    held = lm.cache.length
    assert held - len(prepared.prompt_ids) in (len(greedy.ids) - 1, len(greedy.ids))
    assert lm.ids == list(prepared.prompt_ids) + list(greedy.ids[: held - len(prepared.prompt_ids)])


# -- sampling through the loop with drafts ------------------------------------------------------


def test_sampled_verify_keeps_drafts_and_finishes():
    """temperature 1 on a peaked model: each drafted token is accepted with the model's probability
    of it (nearly 1 here), so an unchanged file is written in a few forwards."""
    before = CORPUS * 2
    text = "".join(before) + FENCE + "\n"
    target = encode_text(text)
    prompt = [5, 6, 7]
    lm = ScriptedLM(len(prompt), target, TOK.eos_token_id, scale=40.0)
    sampling = Sampling(temperature=1.0, seed=3)
    drafter = VerifyDrafter(text, encode_text, TOKEN_BYTES, 10_000)
    verified = run_loop(lm, prompt, 10_000, drafter, sampling)
    assert verified.finished and verified.ids == tuple(target)
    assert verified.stats.drafts_kept >= len(target) - verified.stats.forward_passes
    assert verified.stats.forward_passes <= len(target) // 64 + 10


def test_sampled_verify_is_reproducible_and_leaves_drafts_where_the_sample_does():
    """A flat model (p of the scripted token ~0.8): the sample leaves the draft now and then; the
    same seed gives the same ids, the cache holds exactly the output, and drafts are still kept."""
    before = CORPUS[:40]
    text = "".join(before) + FENCE + "\n"
    target = encode_text(text)
    prompt = [5, 6, 7]
    runs = []
    for seed in (11, 11, 12):
        lm = ScriptedLM(len(prompt), target, TOK.eos_token_id, scale=8.0)
        drafter = VerifyDrafter(text, encode_text, TOKEN_BYTES, len(target) + 40)
        run = run_loop(lm, prompt, len(target) + 40, drafter, Sampling(temperature=1.0, seed=seed))
        cached = lm.history[lm.prompt_len :]
        assert cached == list(run.ids[: len(cached)]) and len(cached) >= len(run.ids) - 1
        assert run.stats.drafts_kept > 0 and run.drafts_rejected > 0
        assert run.stats.forward_passes == lm.feeds
        runs.append(run.ids)
    assert runs[0] == runs[1] != runs[2]
    assert runs[0] != tuple(target)  # the sample did leave the scripted text


def test_a_scoped_drafter_stops_at_the_fence_and_drafts_the_tail_to_a_model_that_runs_past():
    """A scoped answer's drafts end at its closing fence; a model that writes the file's next lines
    instead gets those drafted (the tail), not one token a forward."""
    drafter = VerifyDrafter("a = 1\nb = 2\n```\n", encode_text, TOKEN_BYTES, 200, tail="c = 3\nd = 4\ne = 5\n")
    first = drafter(None, [])
    assert b"".join(TOKEN_BYTES[t] for t in first) == b"a = 1\nb = 2\n```"  # never past the fence
    ran_past = encode_text("a = 1\nb = 2\nc = 3\n")
    draft = drafter(None, ran_past)
    assert b"".join(TOKEN_BYTES[t] for t in draft) == b"d = 4\ne = 5\n"
    without = VerifyDrafter("a = 1\nb = 2\n```\n", encode_text, TOKEN_BYTES, 200)
    without(None, [])
    assert without(None, ran_past) == []  # what the drafter did before: nothing to propose there


def test_nothing_is_drafted_once_the_output_has_written_the_closing_fence():
    """The token after the closing fence ends the decode (an EOS, or the fence's line break by the
    stopping rule), so a draft there, of the fence's break and the file's next lines, is never kept
    past its first token and only widens the last forward."""
    drafter = VerifyDrafter("a = 1\nb = 2\n```\n", encode_text, TOKEN_BYTES, 200, tail="c = 3\nd = 4\n")
    drafter(None, [])
    assert drafter(None, encode_text("a = 1\nb = 2\n```")) == []
    also = VerifyDrafter("a = 1\n```\n", encode_text, TOKEN_BYTES, 200, also=("    a = 1\n```\n", "c = 3\n"))
    also(None, [])
    assert also(None, encode_text("    a = 1\n```")) == []  # the file's own indentation, written to its fence


def test_aligner_resumes_mid_line_after_a_renamed_name():
    source = "def f(cur_line, width):\n    cur_line.append(width)\n    return cur_line\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"def f(current")  # the name changed: lost
    assert aligner.anchor is None
    aligner.advance(b"_line")  # the line's end is found again just after the point lost
    assert TOK.decode(aligner.draft(50)) == ", width):\n    cur_line.append(width)\n    return cur_line\n```"
    aligner.advance(b", width):\n")
    aligner.advance(b"    current")
    aligner.advance(b"_line")  # the second line's occurrence, not the first's nor the third's
    assert TOK.decode(aligner.draft(50)) == ".append(width)\n    return cur_line\n```"


def test_aligner_finds_a_short_end_only_after_the_point_lost_in_its_line():
    source = "x = f(a)\ny = g(b)\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"x = f(a_2")
    aligner.advance(b")")  # ")" occurs in both lines: the one after the point lost wins
    assert TOK.decode(aligner.draft(50)) == "\ny = g(b)\n```"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"x = h")
    aligner.advance(b"(")  # one byte: found after the point lost, in its line
    assert TOK.decode(aligner.draft(50)) == "a)\ny = g(b)\n```"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"x = f(a)\nz = h")
    aligner.advance(b"(b")  # in line 2 after the point lost: not line 1's "(a"
    assert TOK.decode(aligner.draft(50)) == ")\n```"


def test_a_guess_that_fails_does_not_move_the_point_lost():
    source = "    a = 1\n    b = 2\n    return b\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"    a = 1\n")
    aligner.advance(b"    c = b;")  # lost in line 2
    aligner.advance(b" return")  # found in line 3: a guess
    assert aligner.anchor is not None and aligner.guessed
    aligner.advance(b" 42")  # the guess fails: the point lost stays in line 2
    aligner.advance(b"\n")  # so the line's end is line 2's, and line 3 is drafted next
    assert TOK.decode(aligner.draft(50)) == "    return b\n```"


def test_the_drafter_follows_an_answer_in_the_other_indentation():
    dedented = "def f(x):\n    return x\n```\n"
    indented = "    def f(x):\n        return x\n```\n"
    drafter = VerifyDrafter(dedented, encode_text, TOKEN_BYTES, 200, also=(indented, ""))
    assert b"".join(TOKEN_BYTES[t] for t in drafter(None, [])) == b"def f(x):\n    return x\n```"
    draft = drafter(None, encode_text("    def"))
    assert b"".join(TOKEN_BYTES[t] for t in draft) == b" f(x):\n        return x\n```"
    alone = VerifyDrafter(dedented, encode_text, TOKEN_BYTES, 200)
    alone(None, [])
    assert alone(None, encode_text("    def")) == []  # without it: lost for the whole answer


def test_after_a_guess_that_missed_guesses_draft_little():
    source = "def f(x):\n    return the_value(x)\n```\n"
    aligner = Aligner(source, encode_text)
    aligner.advance(b"def f(x):\n")
    aligner.advance(b'    """Return')  # new text: lost
    aligner.advance(b" the")  # found in line 2: a guess, drafted in full
    assert TOK.decode(aligner.draft(50)) == "_value(x)\n```"
    aligner.advance(b" value")  # it missed
    aligner.advance(b" the")  # the next guess drafts a few tokens, never past its line
    assert 1 <= len(aligner.draft(50)) <= 4 and "\n" not in TOK.decode(aligner.draft(50))


def _drafted(drafter, text: str) -> str:
    return TOK.decode(drafter(None, encode_text(text)))


def test_the_drafter_drafts_a_rename_to_a_new_name_from_its_first_use():
    source = "a = cur_line\nb = cur_line\nc = cur_line\n```\n"
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 500)
    drafter(None, [])
    assert _drafted(drafter, "a = current_line\n").startswith("b = current_line\nc = c")
    assert drafter.renames == {b"cur_line": b"current_line"}


def test_the_drafter_drafts_a_rename_to_a_name_in_use_once_the_output_made_it_twice():
    source = "a = x + y\nb = x\nc = x\nd = x\n```\n"
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 500)
    drafter(None, [])
    assert _drafted(drafter, "a = y + y\n").startswith("b = x\n")  # once: maybe a fix of that use
    assert _drafted(drafter, "a = y + y\nb = y\n").startswith("c = y\nd = y\n")


def test_the_drafter_forgets_a_rename_the_output_does_not_make_and_waits_for_two_uses_after():
    source = "a = x + 1\nb = x + 2\nc = x + 3\nd = x + 4\ne = x + 5\n```\n"  # x -> y: a new name
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 500)
    drafter(None, [])
    assert _drafted(drafter, "a = y + 1\n").startswith("b = y + 2\n")
    assert _drafted(drafter, "a = y + 1\nb = y + 2\nc = x + 3\n").startswith("d = x + 4\ne = x + 5\n")
    assert drafter.renames == {}
    assert _drafted(drafter, "a = y + 1\nb = y + 2\nc = x + 3\nd = z + 4\n").startswith("e = x + 5\n")


def test_only_a_line_that_renames_names_and_changes_nothing_else_teaches_a_rename():
    assert renames_in(b"    a = cur(x)\n", b"    a = current(x)\n") == {b"cur": b"current"}
    assert renames_in(b"    self.w = w\n", b"    self.width = w\n") is None  # the same name renamed in one use only
    assert renames_in(b"    a = cur(x)\n", b"    a = current(x, y)\n") is None  # an argument added
    assert renames_in(b"    a = cur(x)\n", b"        a = current(x)\n") is None  # indentation changed
    assert renames_in(b"    a = cur(cur)\n", b"    a = current(other)\n") is None  # one name, two new ones
    assert renames_in(b"    n = 1\n", b"    n = 2\n") is None  # a number is not a name


def test_a_line_re_indented_as_a_block_is_told_from_one_changed_otherwise():
    assert shift_in(b"    x = f(a)\n", b"        x = f(a)\n") == (b"", b"    ")  # wrapped in a block
    assert shift_in(b"        x = f(a)\n", b"    x = f(a)\n") == (b"    ", b"")  # unwrapped
    assert shift_in(b"    x = f(a)\n", b"        y = f(a)\n") == (b"", b"    ")  # and renamed
    assert shift_in(b"    x = f(a)\n", b"        x = g(a, b)\n") is None  # and changed
    assert shift_in(b"    x = f(a)\n", b"    x = f(a)\n") is None  # not re-indented


def test_the_drafter_re_indents_a_block_until_a_line_keeps_its_indentation():
    source = "def f(a):\n    b = a\n    c = b\n    d = c\n    return d\n```\n"
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 500)
    drafter(None, [])
    wrapped = "def f(a):\n    try:\n        b = a\n"
    assert _drafted(drafter, wrapped).startswith("        c = b\n        d = c\n")
    unwrapped = wrapped + "        c = b\n    except ValueError:\n        raise\n    d = c\n"
    assert _drafted(drafter, unwrapped).startswith("    return d\n")


def test_a_re_indented_block_that_runs_to_the_answers_end_leaves_its_closing_fence_where_it_is():
    """A body wrapped in try to its last line: the drafts re-indent every body line but not the closing
    fence, which the model writes where it always stands."""
    source = "def f(a):\n    b = a\n    c = b\n    return c\n```\n"
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 500)
    drafter(None, [])
    wrapped = "def f(a):\n    try:\n        b = a\n"
    assert _drafted(drafter, wrapped) == "        c = b\n        return c\n```"


def test_the_drafter_follows_a_block_moved_to_another_indentation():
    """Lines moved out of a nesting level and up (create the image before the link, at the function's
    top): the first moved line is found again by its text, its new indentation learnt, and the moved
    block's next lines drafted in it."""
    source = (
        "function attach (element) {\n"
        "  if (element) {\n"
        "    var a = create('a')\n"
        "    a.href = 'index.html'\n"
        "    a.target = '_blank'\n"
        "    a.rel = 'noopener'\n"
        "  }\n"
        "\n"
        "  element.parent.insert(a)\n"
        "  var img = create('img')\n"
        "  img.src = 'img/ferris.svg'\n"
        "  img.title = element.title\n"
        "}\n```\n"
    )
    drafter = VerifyDrafter(source, encode_text, TOKEN_BYTES, 500, Schedule(start=64))
    drafter(None, [])
    moved = "function attach (element) {\n  if (element) {\n    var img = create('img')\n"
    assert _drafted(drafter, moved).startswith("    img.src = 'img/ferris.svg'\n    img.title = element.title\n")
