"""The decode loop on the tiny random Qwen2 and the real grammar: oracle programs forced through the
loop reproduce the gold file byte for byte; the KV cache holds exactly the interleaved program the
prompt's example shows; one forward per decision; budget, sampling, seams, CRLF and BOM."""

from __future__ import annotations

import random
import shutil
import subprocess

import numpy as np
import pytest

from cadedit.prompt import messages as prompt
from cadedit.decode.loop import allowed_array, sample, sampler_for, script_sampler
from cadedit.text.diff import unified_diff
from cadedit.text.document import Document
from cadedit.errors import BudgetError
from cadedit.backends.model import LoadedModel, encode
from cadedit.options import EditOptions, Mode, Sampling
from cadedit.text.oracle import oracle
from cadedit.decode.pipeline import edit_file, grammar_for
from cadedit.text.program import Copy, Gen, Program, format
from cadedit.text.resolve import to_display_program, to_document_program
from tests.scripting import given
from tests.tinymodel import make_model
from tests.tinytok import make_tokenizer

CASES = {
    "fix one line": (
        "def add(a, b):\n    return a - b\n\n\nprint(add(1, 2))\n",
        "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n",
    ),
    "crlf": ("a = 1\r\nb = 2\r\nc = 3\r\nd = 4\r\n", "a = 1\r\nb = 20\r\nb2 = 21\r\nc = 3\r\nd = 4\r\n"),
    "bom, line 1 changed": ("\ufeffimport os\nx = 1\ny = 2\n", "\ufeffimport sys\nx = 1\ny = 2\n"),
    "bom, line 1 kept": ("\ufeffimport os\nx = 1\ny = 2\n", "\ufeffimport os\nx = 1\n"),
    "no final newline": ("x = 1\ny = 2\nprint(x)", "x = 1\ny = 3\nprint(x)"),
    "last line unterminated and copied": ("x = 1\ny = 2\nprint(x)", "x = 0\ny = 2\nprint(x)"),
    "insert at top, delete at end": ("b\nc\nd\ne\n", "a\nb\nc\nd\n"),
    "reserved literals in the file": ("s = 1\nt = 2\n", 's = "</gen>"\nt = "<copy lines=\\"1-2\\"/>"\n'),
    "unicode": ("name = 'x'\nprint(name)\n", "name = 'café ✓ 😀'\nprint(name)\n"),
    "rewrite everything": ("one\ntwo\n", "three\nfour\nfive\n"),
    "no change": ("keep\nall\nlines\n", "keep\nall\nlines\n"),
    "blank-line runs around copies": ("a = 1\n\n\n\nb = 2\n\n\nc = 3\n", "a = 1\n\n\n\nb = 22\n\n\nc = 3\n"),
    "empty file": ("", "print('hello')\n"),
    "tabs and trailing spaces": ("\tx = 1  \n\ty = 2\t\n", "\tx = 1  \n\ty = 3\t\n\tz = 4 \n"),
}


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    return LoadedModel(make_model(), make_tokenizer(), "tiny", "cpu", "float32", 1, 4096, 0.0)


def program_options(**kwargs) -> EditOptions:
    """This module tests the program mode (the default mode is verify: test_rewrite, test_verify)."""
    return EditOptions(mode=Mode.PROGRAM, **kwargs)


def forced_edit(loaded, before: Document, after: Document, options: EditOptions | None = None, **kwargs):
    target = format(to_display_program(oracle(before, after), before))
    pick = script_sampler(target, grammar_for(loaded).vocab.tokens, lambda text: encode(loaded.tokenizer, text))
    return edit_file(before, "Edit.", options or program_options(), loaded=loaded, make_sampler=given(pick), **kwargs)


@pytest.mark.parametrize("name", CASES)
def test_forcing_the_oracle_program_reproduces_the_gold_file_exactly(loaded, name):
    before, after = (Document.from_text(t, "case.py") for t in CASES[name])
    result = forced_edit(loaded, before, after)
    assert result.new_text == after.text
    assert result.new_text.encode() == after.to_bytes()
    assert result.program == oracle(before, after)
    assert result.changed == (before.text != after.text)
    assert result.mode is Mode.PROGRAM


class Recording:
    """Wraps the loaded model's LM (cadedit.backends.model.CachedLM) for one decode: what each forward
    is fed; what its cache holds is the LM's own id list (fed ids, minus cropped drafts)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def feed(self, ids, keep=1):
        self.calls.append(list(ids))
        return self.inner.feed(ids, keep)

    def crop(self, n):
        self.inner.crop(n)

    def reuse(self, prompt_ids):
        return self.inner.reuse(prompt_ids)

    @property
    def cache_ids(self):
        assert self.inner.cache.length == len(self.inner.ids)
        return self.inner.ids


@pytest.fixture
def recording(monkeypatch):
    import cadedit.decode.pipeline as pipeline

    made = []
    real = pipeline.language_model
    monkeypatch.setattr(pipeline, "language_model", lambda loaded: made.append(Recording(real(loaded))) or made[-1])
    return made


@pytest.mark.parametrize("draft", [False, True])
def test_the_cache_holds_the_interleaved_program_the_prompt_example_shows(loaded, recording, draft):
    """Everything the cache holds after the prompt, decoded, is the program with each copy's lines after it."""
    before, after = (Document.from_text(t) for t in CASES["blank-line runs around copies"])
    result = forced_edit(loaded, before, after, options=program_options(draft=draft))
    model = recording[-1]
    seen = loaded.tokenizer.decode(model.cache_ids[result.prompt_tokens :])
    expected = prompt.interleaved(to_display_program(result.program, before), before)
    assert expected.startswith(seen) and len(expected) - len(seen) <= len("</program>")
    stats = result.stats
    assert len(model.calls) == stats.forward_passes
    assert stats.copies == 2 and stats.tokens_spliced > 0 and stats.tokens_forced > 0
    if draft:
        assert stats.drafts_kept > 0 and stats.forward_passes < stats.tokens_sampled
    else:  # one forward per decision, forced literals and spliced lines riding along
        assert stats.forward_passes == stats.tokens_sampled and stats.tokens_drafted == 0
        assert all(len(call) >= 1 for call in model.calls[1:])


@pytest.mark.parametrize(
    "name", ["fix one line", "crlf", "insert at top, delete at end", "unicode", "reserved literals in the file"]
)
def test_drafts_save_forwards_and_never_change_the_program(loaded, name):
    before, after = (Document.from_text(t, "case.py") for t in CASES[name])
    plain = forced_edit(loaded, before, after, options=program_options(draft=False))
    drafted = forced_edit(loaded, before, after, options=program_options(draft=True))
    assert drafted.program_text == plain.program_text and drafted.new_text == after.text
    assert drafted.stats.forward_passes < plain.stats.forward_passes
    assert (
        drafted.stats.tokens_sampled + drafted.stats.tokens_forced
        == plain.stats.tokens_sampled + plain.stats.tokens_forced
    )


def test_drafts_do_not_change_what_the_random_model_picks(loaded):
    """Greedy decoding with drafts verified in one forward and cropped on rejection gives exactly the
    tokens of one-step-at-a-time decoding: the logits over a cropped cache are the same."""
    before = Document.from_text("def f(x):\n    return x\n\nprint(f(2))\n", "case.py")
    vocab_tokens = grammar_for(loaded).vocab.tokens
    for seed in range(4):
        texts = []
        for draft in (False, True):
            pick = _biased(sampler_for(Sampling()), vocab_tokens, seed)
            try:
                texts.append(
                    edit_file(
                        before,
                        "Edit.",
                        program_options(max_new_tokens=120, draft=draft),
                        loaded=loaded,
                        make_sampler=given(pick),
                    ).program_text
                )
            except BudgetError as exc:
                texts.append(str(exc))
        assert texts[0] == texts[1]


def test_kept_drafts_are_among_the_tokens_the_picker_chose(loaded):
    before, after = (Document.from_text(t, "case.py") for t in CASES["fix one line"])
    stats = forced_edit(loaded, before, after, options=program_options(draft=True)).stats
    assert stats.drafts_kept > 0 and stats.tokens_forced > 0
    assert stats.drafts_kept <= stats.tokens_sampled
    assert stats.tokens_copied <= stats.tokens_spliced + stats.tokens_sampled


@pytest.mark.parametrize("draft", [False, True])
def test_spliced_tokens_are_the_lines_tokenised_on_their_own(loaded, draft):
    tok = loaded.tokenizer
    before, after = (Document.from_text(t) for t in CASES["fix one line"])
    steps = []
    forced_edit(
        loaded, before, after, options=program_options(draft=draft), on_step=lambda stats, step: steps.append(step)
    )
    expected = [len(encode(tok, before.display_text(c.start, c.end))) for c in (Copy(1, 1), Copy(3, 5))]
    assert [(s.copies, s.spliced) for s in steps if s.copies] == [(1, n) for n in expected]


@pytest.mark.parametrize("span", ["    return x\n", "def f():\n    pass\n", "x = 1\n\ny = 2\n", "  \n  z\n"])
def test_span_seam_tokenises_like_the_joint_text(span):
    """Qwen2's pre-tokeniser never merges across the '"/>\\n' that ends the program text before a splice
    (unless the span starts with a blank line, see the next test), so splicing the span's own tokens
    is exactly what the model would have produced."""
    tok = make_tokenizer()
    before = '<program>\n<copy lines="1-3"/>\n'
    assert encode(tok, before + span) == encode(tok, before) + encode(tok, span)


def test_span_starting_with_a_blank_line_is_the_one_seam_that_differs():
    """'"/>\\n\\n' is one pre-token, so the joint text would tokenise differently. We still splice the
    span's own tokens (the text the model reads is identical; only its split differs)."""
    tok = make_tokenizer()
    before = '<program>\n<copy lines="1-3"/>\n'
    assert tok.decode(encode(tok, before) + encode(tok, "\nx = 1\n")) == before + "\nx = 1\n"
    assert encode(tok, before + "\nx = 1\n") != encode(tok, before) + encode(tok, "\nx = 1\n")


def test_budget_runs_out_with_an_error_that_says_so(loaded):
    before, after = (Document.from_text(t) for t in CASES["rewrite everything"])
    with pytest.raises(BudgetError, match="budget of 5 new tokens") as info:
        forced_edit(loaded, before, after, options=program_options(max_new_tokens=5))
    assert "--max-new-tokens" in info.value.hint


# -- sampling -----------------------------------------------------------------------------------


def test_masked_argmax_never_picks_a_disallowed_token():
    logits = np.array([9.0, 1.0, 5.0, 8.0, 0.0, 0.0], np.float32)
    mask = np.array([False, True, True, False])  # narrower than the logits: padding is never allowed
    assert sample(logits, allowed_array(mask, 6), Sampling(), None) == 2


def test_top_p_keeps_only_the_nucleus_and_seed_makes_it_reproducible():
    logits = np.array([3.0, 2.9, -5.0, -5.0], np.float32)
    allowed = np.ones(4, dtype=bool)
    picks = {sample(logits, allowed, Sampling(1.0, 0.5), np.random.default_rng(s)) for s in range(50)}
    assert picks == {0, 1} or picks <= {0, 1}
    assert 2 not in picks and 3 not in picks
    wide = {sample(logits * 0, allowed, Sampling(1.0, 1.0), np.random.default_rng(s)) for s in range(50)}
    assert wide == {0, 1, 2, 3}


LOGITS = np.array([1.0, 0.2, -0.5, 2.0, 0.0, -1.0, 0.7, 1.5], np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits.astype(np.float64) - logits.max())
    return e / e.sum()


def frequencies(n: int, seed: int, sampling: Sampling, guess: int | None, allowed=None) -> np.ndarray:
    generator = np.random.default_rng(seed)
    counts = np.zeros(len(LOGITS))
    for _ in range(n):
        counts[sample(LOGITS, allowed, sampling, generator, guess)] += 1
    return counts / n


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p - q).sum())


@pytest.mark.parametrize("guess", [None, 3, 0])  # no draft; the likeliest token (p 0.44); a middling one (p 0.13)
def test_sampling_with_a_drafted_guess_draws_the_plain_distribution(guess):
    """A drafted token is accepted with the model's probability of it, else the rest is sampled
    without it: together exactly softmax(logits / T) (20,000 draws, a fixed seed)."""
    sampling = Sampling(temperature=0.8)
    expected = softmax(LOGITS / 0.8)
    seen = frequencies(20_000, 7, sampling, guess)
    assert total_variation(seen, expected) < 0.02
    if guess is not None:  # not the degenerate "always take the guess"
        assert abs(seen[guess] - expected[guess]) < 0.02


def nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of the likeliest tokens whose mass reaches top_p, renormalised."""
    order = np.argsort(-probs)
    before = np.cumsum(probs[order]) - probs[order]
    kept = np.zeros_like(probs)
    kept[order[before <= top_p]] = probs[order[before <= top_p]]
    return kept / kept.sum()


@pytest.mark.parametrize("guess", [0, 2, 4])  # in the nucleus; masked out; outside the nucleus
def test_a_guess_keeps_the_nucleus_and_the_mask(guess):
    """With top_p and a mask, a guess outside what plain sampling may draw is never returned, and the
    distribution is that of plain sampling (8,000 draws against the exact nucleus)."""
    sampling = Sampling(temperature=1.0, top_p=0.8)
    allowed = np.array([True, True, False, True, True, True, True, True])
    expected = nucleus(softmax(np.where(allowed, LOGITS, -np.inf)), 0.8)
    assert expected[2] == expected[4] == 0.0 and expected[0] > 0.1  # the case is what the ids say
    drafted = frequencies(8_000, 2, sampling, guess, allowed)
    assert (drafted[expected == 0] == 0).all()  # nothing masked or outside the nucleus, the guess included
    assert total_variation(drafted, expected) < 0.03


def test_greedy_ignores_the_guess():
    allowed = np.ones(len(LOGITS), dtype=bool)
    assert {sample(LOGITS, allowed, Sampling(), None, guess) for guess in (None, 0, 5, 99)} == {3}
    assert sample(LOGITS, None, Sampling(), None, 0) == 3


def test_a_sampled_guess_is_reproducible_with_a_seed():
    picks = []
    for seed in (4, 4, 5):
        pick = sampler_for(Sampling(temperature=1.0, seed=seed))
        picks.append([pick(LOGITS, None, [], guess) for guess in [0, 1, 3, None] * 25])
    assert picks[0] == picks[1] != picks[2]


def _biased(pick, vocab_tokens, seed=0):
    """The random model, nudged towards the program's literals, and closing a gen (about one token in
    six) so that it finishes programs within a small budget; the text of gens stays random."""
    literals = '<program>\n</program>\n<copy lines="-"/>\n<gen>\n0123456789'.encode()
    bias = np.array([3.0 if t and t in literals else 0.0 for t in vocab_tokens], np.float32)
    close, rng = b"</gen>\n", random.Random(seed)

    def biased(logits, mask, ids, guess=None):
        text = b"".join(vocab_tokens[i] for i in ids)
        if text.rfind(b"<gen>") > text.rfind(b"</gen>"):  # inside a gen body
            done = max(k for k in range(len(close)) if text.endswith(close[:k]))
            if done or rng.random() < 1 / 6:
                fits = [i for i in np.flatnonzero(mask) if vocab_tokens[i] and close[done:].startswith(vocab_tokens[i])]
                if fits:
                    return int(max(fits, key=lambda i: len(vocab_tokens[i])))
        return pick(logits + bias[: logits.shape[-1]], mask, ids, guess)

    return biased


def _patch_applies(tmp_path, before: Document, new_text: str) -> bool:
    work = tmp_path / "w"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "case.py").write_bytes(before.to_bytes())
    diff = unified_diff(before.text, new_text, "case.py")
    if not diff:
        return new_text == before.text
    subprocess.run(["patch", "-p1", "-s", "--binary"], cwd=work, input=diff.encode(), check=True)
    return (work / "case.py").read_bytes() == new_text.encode()


@pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) not installed")
def test_whatever_the_random_model_writes_resolves_and_its_diff_applies(loaded, tmp_path):
    before = Document.from_text("\ufeffdef f(x):\r\n    return x\r\n\r\nprint(f(2))\r\n", "case.py")
    vocab_tokens = grammar_for(loaded).vocab.tokens
    finished = 0
    for seed in range(10):
        pick = _biased(sampler_for(Sampling(temperature=1.0, seed=seed)), vocab_tokens, seed)
        try:
            result = edit_file(
                before, "Do something.", program_options(max_new_tokens=120), loaded=loaded, make_sampler=given(pick)
            )
        except BudgetError:
            continue
        finished += 1
        assert result.new_text.startswith("\ufeff")
        assert _patch_applies(tmp_path, before, result.new_text)
    assert finished >= 6


def test_same_seed_same_program_greedy_is_deterministic(loaded):
    before = Document.from_text("x = 1\ny = 2\n")
    vocab_tokens = grammar_for(loaded).vocab.tokens
    runs = []
    for seed in (5, 5, 6):
        pick = _biased(sampler_for(Sampling(temperature=1.0, seed=seed)), vocab_tokens, seed)
        try:
            runs.append(
                edit_file(
                    before, "Edit.", program_options(max_new_tokens=60), loaded=loaded, make_sampler=given(pick)
                ).program_text
            )
        except BudgetError as exc:
            runs.append(str(exc))
    assert runs[0] == runs[1] != runs[2]


# -- display form <-> document form ------------------------------------------------------------


def test_gens_get_the_files_newline_and_the_bom_survives_a_regenerated_line_1():
    doc = Document.from_text("\ufeffa\r\nb\r\n")
    assert to_document_program(Program((Gen("x\ny\n"), Copy(2, 2))), doc) == Program(
        (Gen("\ufeffx\r\ny\r\n"), Copy(2, 2))
    )
    assert to_document_program(Program((Copy(2, 2),)), doc) == Program((Gen("\ufeff"), Copy(2, 2)))
    assert to_document_program(Program((Copy(1, 2),)), doc) == Program((Copy(1, 2),))
    lf = Document.from_text("a\nb\n")
    assert to_document_program(Program((Gen("x\n"),)), lf) == Program((Gen("x\n"),))
