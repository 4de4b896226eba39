"""llama.cpp as an e2e baseline (bench/peers.py) without building llama.cpp: a fake `llama_cpp` module
in sys.modules whose Llama scripts its tokens (one byte per token, Qwen's two end tokens, and one
40-byte piece that Llama.detokenize drops as the real one does), the tiny Qwen2 for cadedit's side.

Pinned: the prompt is cadedit's rewrite-mode prompt byte for byte, greedy settings, the stop at the
closing fence or an EOS (nothing after it taken), token and forward counting for greedy and
prompt-lookup decoding, the budget, and the CLI: --methods llama-* without the package is a
one-line error naming the extra, before any model is loaded.
"""

from __future__ import annotations

import ctypes
import json
import sys
import types

import pytest

import cadedit.decode.pipeline as pipeline
from cadedit.bench import peers as pe
from cadedit.text.document import Document
from cadedit.errors import BudgetError
from cadedit.backends.model import load_model, render_chat
from cadedit.options import EditOptions, Mode
from cadedit.prompt.messages import fenced_source, language_tag, rewrite_messages
from tests.bench_helpers import record, write_corpus
from tests.scripting import editing, inject_e2e, invoke as invoke_cli

EOS, ENDOFTEXT, LONG = 256, 257, 258
SPECIALS = {b"<|im_end|>": EOS, b"<|endoftext|>": ENDOFTEXT}
LONG_PIECE = b" " * 40
BEFORE = "def f(a, b):\n" + " " * 40 + "return a - b\n"
AFTER = "def f(a, b):\n" + " " * 40 + "return a + b\n"


def fake_tokenize(text: bytes, special: bool) -> list[int]:
    ids, i = [], 0
    while i < len(text):
        hit = next((s for s in SPECIALS if special and text.startswith(s, i)), None)
        if hit:
            ids.append(SPECIALS[hit])
            i += len(hit)
        elif text.startswith(LONG_PIECE, i):
            ids.append(LONG)
            i += len(LONG_PIECE)
        else:
            ids.append(text[i])
            i += 1
    return ids


def fake_piece(token: int, special: bool = False) -> bytes:
    if token == LONG:
        return LONG_PIECE
    if token in SPECIALS.values():
        return next(s for s, t in SPECIALS.items() if t == token) if special else b""
    return bytes([token])


def llama_token_to_piece(vocab, token, buffer, size, lstrip, special):
    assert vocab == "the vocab"
    piece = fake_piece(token, special)
    if len(piece) > size:
        return -len(piece)
    ctypes.memmove(buffer, piece, len(piece))
    return len(piece)


class FakeLlama:
    """Llama's surface that peers.py uses; generate() yields answer(prompt bytes), one token per
    forward, or after the prompt's `accept` tokens per forward when it has a draft model."""

    answer = staticmethod(lambda prompt: b"")
    accept = 4
    made: list["FakeLlama"] = []

    def __init__(self, **kwargs):
        self.kwargs, self.draft_model = kwargs, kwargs["draft_model"]
        self._model = types.SimpleNamespace(vocab="the vocab")
        self.evals: list[list[int]] = []
        self.generated: list[tuple[list[int], dict]] = []
        FakeLlama.made.append(self)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        assert add_bos is False
        return fake_tokenize(text, special)

    def detokenize(self, tokens, prev_tokens=None, special=False) -> bytes:
        return b"".join(
            p for p in (fake_piece(t, special) for t in tokens) if len(p) <= 32
        )  # as llama.cpp's 32-byte buffer

    def token_eos(self) -> int:
        return EOS

    def n_ctx(self) -> int:
        return self.kwargs["n_ctx"]

    def eval(self, tokens) -> None:
        # As llama-cpp-python: with a draft model it stores every position's logits, in rows it
        # allocates only when asked for logits_all; otherwise a prompt past one batch cannot be stored.
        if self.draft_model is not None and not self.kwargs.get("logits_all") and len(tokens) > self.kwargs["n_batch"]:
            raise ValueError("could not broadcast input array into shape (0,)")
        self.evals.append(list(tokens))

    def reset(self) -> None:
        pass

    def generate(self, tokens, **kwargs):
        self.generated.append((list(tokens), kwargs))
        script = fake_tokenize(self.answer(b"".join(fake_piece(t, True) for t in tokens)), special=True)
        step = self.accept if self.draft_model is not None else 1
        self.eval(tokens)
        i = 0
        while i < len(script):
            group = script[i : i + (step if i else 1)]  # the prompt's forward has no draft to check
            yield from group
            i += len(group)
            self.eval(group)


class LookupDecoding:
    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        self.num_pred_tokens = num_pred_tokens


@pytest.fixture
def fake_llama(monkeypatch):
    module = types.ModuleType("llama_cpp")
    speculative = types.ModuleType("llama_cpp.llama_speculative")
    speculative.LlamaPromptLookupDecoding = LookupDecoding
    module.Llama, module.llama_speculative, module.__version__ = FakeLlama, speculative, "0.3.fake"
    module.llama_token_to_piece = llama_token_to_piece
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", speculative)
    monkeypatch.setattr(FakeLlama, "made", [])
    return module


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return load_model(str(tiny_dir), "cpu", "fp32", 1)


def answering(monkeypatch, text: bytes) -> None:
    monkeypatch.setattr(FakeLlama, "answer", staticmethod(lambda prompt: text))


def peer(name: str, n_ctx: int = 4096) -> pe.LlamaPeer:
    return pe.load_peers([name], "model.gguf", 1, n_ctx)[name]


def test_token_pieces_longer_than_32_bytes_come_through_whole(fake_llama):
    llm = FakeLlama(draft_model=None, n_ctx=64)
    assert llm.detokenize([LONG]) == b""  # what Llama.detokenize does with it
    assert pe.token_piece(fake_llama, llm, LONG) == LONG_PIECE and pe.token_piece(fake_llama, llm, ord("x")) == b"x"
    assert pe.token_piece(fake_llama, llm, EOS) == b""


def test_llama_rewrite_gets_cadedits_prompt_and_stops_at_the_closing_fence(fake_llama, loaded, monkeypatch):
    document = Document.from_text(BEFORE, "solution.py")
    answer = fenced_source(Document.from_text(AFTER), "```").encode()
    answering(monkeypatch, answer + b"print('after the fence')\n```\n<|im_end|>")
    rewrite = peer("llama-rewrite")
    edited = rewrite(loaded, document, "Fix it.", None)
    ((prompt, kwargs),) = rewrite.llm.generated
    expected = render_chat(loaded.tokenizer, rewrite_messages(document, "Fix it.", "```", "", "after"))
    assert (
        b"".join(fake_piece(t, True) for t in prompt)
        == (expected + "```" + language_tag("solution.py") + "\n").encode()
    )
    assert kwargs["temp"] == 0.0 and kwargs["top_k"] == 1 and kwargs["repeat_penalty"] == 1.0
    assert edited.text == AFTER and edited.output == answer.decode()  # the 40-space piece included
    assert edited.tokens_new == len(fake_tokenize(answer, False)) and LONG in fake_tokenize(answer, False)
    assert edited.forward_passes == edited.tokens_new and edited.tokens_spliced == 0  # one forward per token
    assert rewrite.llm.kwargs["draft_model"] is None and rewrite.llm.kwargs["n_ctx"] == 4096


def test_an_eos_stops_it_too_and_is_counted(fake_llama, loaded, monkeypatch):
    body = AFTER.encode()
    answering(monkeypatch, body + b"<|im_end|>more")
    edited = peer("llama-rewrite")(loaded, Document.from_text(BEFORE, "solution.py"), "Fix it.", None)
    assert edited.text == AFTER and edited.output == AFTER
    assert edited.tokens_new == len(fake_tokenize(body, False)) + 1  # as cadedit's loop counts the EOS it samples


def test_llama_lookup_drafts_with_prompt_lookup_and_counts_kept_drafts(fake_llama, loaded, monkeypatch):
    answer = fenced_source(Document.from_text(AFTER), "```").encode()
    answering(monkeypatch, answer + b"tail")
    lookup = peer("llama-lookup")
    edited = lookup(loaded, Document.from_text(BEFORE, "solution.py"), "Fix it.", None)
    draft = lookup.llm.kwargs["draft_model"]
    assert isinstance(draft, LookupDecoding) and draft.num_pred_tokens == 10
    assert lookup.llm.kwargs["logits_all"] is True and peer("llama-rewrite").llm.kwargs["logits_all"] is False
    n = len(fake_tokenize(answer, False))
    assert edited.text == AFTER and edited.tokens_new == n
    assert (
        edited.forward_passes == 1 + (n - 1 + FakeLlama.accept - 1) // FakeLlama.accept
    )  # the prompt's, then 4 a forward
    assert edited.tokens_spliced == n - edited.forward_passes > 0


def test_the_budget_and_the_context_bound_the_answer(fake_llama, loaded, monkeypatch):
    answering(monkeypatch, b"x" * 100)
    document = Document.from_text(BEFORE, "solution.py")
    with pytest.raises(BudgetError, match="budget of 5 new tokens"):
        peer("llama-rewrite")(loaded, document, "Fix it.", 5)
    with pytest.raises(pe.ModelError, match="does not fit llama.cpp's context of 300 tokens"):
        peer("llama-rewrite", n_ctx=300)(loaded, document, "Fix it.", None)


def test_context_for_fits_the_largest_prompt_and_budget(loaded):
    from cadedit.bench.corpus import Case

    small, big = Case("a", "python", "x = 1\n", "x = 2\n", "Fix."), Case("b", "python", "y = 1\n" * 50, "y\n", "Fix.")
    prepared = pipeline.prepare(
        loaded, Document.from_text(big.before, "solution.py"), "Fix.", EditOptions(mode=Mode.REWRITE)
    )
    assert pe.context_for(loaded, [small, big], None) == len(prepared.prompt_ids) + prepared.budget + 11 + 16
    assert pe.context_for(loaded, [small], 1) == 512


# -- through the CLI ---------------------------------------------------------------------------


def invoke(*args: str):
    return invoke_cli(["bench", "e2e", *args])


def test_e2e_puts_llama_beside_cadedit_in_one_table(fake_llama, tiny_dir, tmp_path, monkeypatch):
    rec = record("fix", BEFORE, AFTER, test="assert f(1, 2) == 3\n")
    corpus = write_corpus(tmp_path / "c.jsonl", [rec])
    answering(monkeypatch, fenced_source(Document.from_text(AFTER), "```").encode())
    inject_e2e(monkeypatch, editing(lambda document: Document.from_text(AFTER)))  # verify "chooses" the gold
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--methods",
        "verify,llama-rewrite,llama-lookup",
        "--gguf",
        str(tmp_path / "m.gguf"),
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["gguf"] == str(tmp_path / "m.gguf") and data["llama_cpp"] == "0.3.fake" and data["llama_ctx"] >= 512
    assert data["baseline"] == "llama-rewrite"
    (case,) = data["corpora"][0]["cases"]
    for method in ("verify", "llama-rewrite", "llama-lookup"):
        assert case[method]["exact"] is True and case[method]["test"]["passed"] is True, case[method]
    assert case["llama-rewrite"]["same_as_first"] is case["llama-lookup"]["same_as_first"] is True
    assert [m.kwargs["n_ctx"] for m in FakeLlama.made] == [data["llama_ctx"]] * 2
    assert "llama-lookup" in result.stdout and "same output as verify" in result.stdout
    assert data["corpora"][0]["summary"]["speedup"]["n_both_exact"] == 1


def test_llama_methods_without_the_package_are_a_one_line_error_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    corpus = write_corpus(tmp_path / "c.jsonl", [record("fix", BEFORE, AFTER)])
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tmp_path / "no-such-model"),
        "--methods",
        "verify,llama-rewrite",
        "--gguf",
        str(tmp_path / "m.gguf"),
    )
    assert result.exit_code == 1  # before the (missing) model is looked at
    lines = result.output.strip().splitlines()
    assert lines[0] == "error: methods llama-rewrite and llama-lookup need llama-cpp-python, which is not installed"
    assert lines[1].startswith("hint: pip install 'cadedit[llama]'") and len(lines) == 2


def test_llama_methods_need_a_gguf(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", [record("fix", BEFORE, AFTER)])
    result = invoke("-c", str(corpus), "--methods", "verify,llama-lookup")
    assert result.exit_code == 2 and "--gguf" in result.output
