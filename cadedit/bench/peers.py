"""llama.cpp beside cadedit in `cadedit bench e2e`: what users run instead (llama-cpp-python).

Methods: llama-rewrite, llama.cpp retyping the file greedily, one token per forward; llama-lookup,
the same with llama-cpp-python's prompt lookup decoding (LlamaPromptLookupDecoding(num_pred_tokens=10)
as draft_model). Both get cadedit's rewrite-mode prompt (pipeline.prepare in rewrite mode: the very
text cadedit's tokenizer encodes, tokenised again by llama.cpp), the same budget, and stop where
cadedit's rewrite mode stops (fence.Stopper fed one token at a time: an EOS, or the closing fence
alone on a line); the answer goes through pipeline.answer_program and resolve as cadedit's does.
Counts: forward passes are Llama.eval calls (the prompt's is one, as in cadedit's loop);
tokens_new the tokens taken up to and including the stop; tokens_spliced the drafted tokens kept
(tokens_new - forward passes: every forward yields one token of its own). A token's bytes come
from llama_token_to_piece with a buffer grown until it fits: Llama.detokenize and token_to_piece
cut every piece at 32 bytes (Qwen's vocabulary has longer whitespace runs).

llama-cpp-python is an optional extra that CI never builds: `pip install 'cadedit[llama]'`. The
package index has only its sdist (a ~15-minute build on 2 cores). A native build on CPUs with
AMX segfaults in ggml's AMX matmul at the first decode, so build without AMX:
    FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
    CMAKE_ARGS="-DCMAKE_C_FLAGS='$FLAGS' -DCMAKE_CXX_FLAGS='$FLAGS'" pip install 'cadedit[llama]'
Memory: llama-lookup keeps the logits of every position, n_ctx x vocabulary x 4 bytes (Qwen2.5 at
n_ctx 8,192: 5 GB); context_for() sizes n_ctx to the run's largest prompt + budget.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

from cadedit.errors import BudgetError, CadeditError, ModelError
from cadedit.decode import pipeline
from cadedit.bench.corpus import document_for, Edited
from cadedit.prompt.fence import Stopper
from cadedit.backends.llama.llamacpp import version as llama_version
from cadedit.backends.model import token_bytes
from cadedit.options import EditOptions, Mode
from cadedit.text.resolve import resolve
from cadedit.results import Decoded, DecodeStats

PEERS = ("llama-rewrite", "llama-lookup")
LOOKUP_TOKENS = 10  # LlamaPromptLookupDecoding(num_pred_tokens=10), as its documentation shows
EXTRA = "llama"  # pyproject's optional-dependencies entry
_ROOM = LOOKUP_TOKENS + 1  # a forward may hold one token and its draft past the budget


def require_llama():
    """llama_cpp, or a one-line error that names the extra to install."""
    try:
        import llama_cpp
        from llama_cpp import llama_speculative  # noqa: F401 - llama-lookup's draft model
    except ImportError:
        raise CadeditError(
            f"methods {' and '.join(PEERS)} need llama-cpp-python, which is not installed",
            hint=f"pip install 'cadedit[{EXTRA}]' (a source build; recipe in cadedit/bench/peers.py)",
        ) from None
    return llama_cpp


def token_piece(llama_cpp, llm, token: int) -> bytes:
    """A token's bytes, however long: llama_token_to_piece returns -size when the buffer is too small."""
    model = llm._model
    vocab = getattr(model, "vocab", None) or model.model  # llama-cpp-python < 0.3.6 passed the model
    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, False)
        if n >= 0:
            return buffer.raw[:n]
        if -n <= size:
            raise ModelError(f"llama.cpp: no bytes for token {token} (llama_token_to_piece returned {n})")
        size = -n


class _Pieces:
    """Token id -> bytes for fence.Stopper, looked up once per token."""

    def __init__(self, llama_cpp, llm):
        self.llama_cpp, self.llm = llama_cpp, llm
        self.known: dict[int, bytes] = {}

    def __getitem__(self, token: int) -> bytes:
        piece = self.known.get(token)
        if piece is None:
            piece = self.known[token] = token_piece(self.llama_cpp, self.llm, token)
        return piece


class LlamaPeer:
    """One llama.cpp model as an e2e method: (loaded, document, instruction, max_new_tokens) -> Edited."""

    def __init__(self, llama_cpp, llm):
        self.llm = llm
        self.pieces = _Pieces(llama_cpp, llm)
        self.eos = self._eos_ids()
        self.forwards = 0
        real_eval = llm.eval

        def counted_eval(tokens):  # Llama.generate calls self.eval once per forward
            self.forwards += 1
            return real_eval(tokens)

        llm.eval = counted_eval

    def _eos_ids(self) -> frozenset[int]:
        """llama.cpp's EOS and Qwen's two end tokens (cadedit.backends.model.eos_ids stops at the same ones)."""
        ids = {self.llm.token_eos()}
        for special in (b"<|im_end|>", b"<|endoftext|>"):
            found = self.llm.tokenize(special, add_bos=False, special=True)
            if len(found) == 1:
                ids |= set(found)
        return frozenset(i for i in ids if i is not None and i >= 0)

    def warm_up(self) -> None:
        self.llm.eval(self.llm.tokenize(b"def f(x):\n    return x + 1\n" * 4, add_bos=False))
        self.llm.reset()

    def __call__(self, loaded, document, instruction: str, max_new_tokens: int | None):
        options = EditOptions(model=loaded.name, max_new_tokens=max_new_tokens, mode=Mode.REWRITE)
        prepared = pipeline.prepare(loaded, document, instruction, options)
        ids, raw, prompt, prefill = self.retype(loaded, document, prepared)
        stats = DecodeStats(forward_passes=self.forwards, tokens_prompt=len(prompt), tokens_sampled=len(ids))
        program = pipeline.answer_program(document, prepared, Decoded(raw, tuple(ids), stats))
        return Edited(
            resolve(program, document), raw, self.forwards, len(ids), max(0, len(ids) - self.forwards), prefill
        )

    def retype(self, loaded, document, prepared) -> tuple[list[int], str, list[int], float]:
        """The prepared request's prompt (pipeline.prepare: the text cadedit's ids spell, tokenised
        again by llama.cpp) answered greedily: (ids, the answer's text, the prompt's ids, prefill seconds)."""
        vocab = token_bytes(loaded)
        prompt = self.llm.tokenize(b"".join(vocab[t] for t in prepared.prompt_ids), add_bos=False, special=True)
        budget = min(prepared.budget, self.llm.n_ctx() - len(prompt) - _ROOM)
        if budget <= 0:
            raise ModelError(
                f"{document.path}: a {len(prompt)}-token prompt does not fit llama.cpp's context of "
                f"{self.llm.n_ctx()} tokens",
                hint="raise --llama-ctx",
            )
        ids, prefill = self.generate(prompt, prepared.fence, budget)
        raw = b"".join(self.pieces[t] for t in ids if t not in self.eos).decode("utf-8", errors="replace")
        return ids, raw, prompt, prefill

    def generate(self, prompt: Sequence[int], fence: str, budget: int) -> tuple[list[int], float]:
        """Greedy tokens up to the stopping rule, and the seconds until the first one (the prefill)."""

        stopper = Stopper(self.pieces, self.eos, fence)
        self.forwards, ids, prefill = 0, [], 0.0
        start = time.perf_counter()
        tokens = self.llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
        try:
            for token in tokens:
                prefill = prefill or time.perf_counter() - start
                ids.append(int(token))
                if stopper.feed(int(token)):
                    return ids, prefill
                if len(ids) > budget:
                    tail = b"".join(self.pieces[t] for t in ids[-12:]).decode("utf-8", errors="replace")
                    raise BudgetError(
                        f"llama.cpp used its budget of {budget} new tokens before finishing its answer "
                        f"(last text: {tail[-60:]!r})",
                        hint="raise --max-new-tokens",
                    )
        finally:
            tokens.close()
        return ids, prefill


def context_for(loaded, cases: Sequence, max_new_tokens: int | None) -> int:
    """n_ctx for the run: the largest rewrite prompt + budget over the cases, within the model's limit."""

    options = EditOptions(model=loaded.name, max_new_tokens=max_new_tokens, mode=Mode.REWRITE)
    need = 512
    for case in cases:
        try:
            prepared = pipeline.prepare(loaded, document_for(case), case.instruction, options)
        except CadeditError:
            continue  # too large for the model: its attempts fail the same way
        need = max(need, len(prepared.prompt_ids) + prepared.budget + _ROOM + 16)
    return min(need, loaded.context_limit)


def load_peers(names: Sequence[str], gguf: str, threads: int, n_ctx: int) -> dict[str, LlamaPeer]:
    """The named peers, each its own llama.cpp context on the one GGUF (weights mmapped once)."""
    llama_cpp = require_llama()
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    peers: dict[str, LlamaPeer] = {}
    for name in (n for n in names if n in PEERS):
        draft = LlamaPromptLookupDecoding(num_pred_tokens=LOOKUP_TOKENS) if name == "llama-lookup" else None
        try:
            # A draft model needs the logits of every position; without logits_all the Python side
            # keeps rows for one batch only and the first prompt longer than a batch fails.
            llm = llama_cpp.Llama(
                model_path=str(gguf),
                n_ctx=n_ctx,
                n_batch=512,
                n_threads=threads,
                n_threads_batch=threads,
                draft_model=draft,
                logits_all=draft is not None,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"llama.cpp cannot load {gguf}: {exc}", hint="pass a .gguf file as --gguf") from None
        peers[name] = LlamaPeer(llama_cpp, llm)
        peers[name].warm_up()
    return peers


def version() -> str | None:

    return llama_version()
