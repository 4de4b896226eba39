"""Whole-file rewrite modes: the model retypes the edited file inside a code fence (paper eq. 1).

Contract: rewrite_file(document, instruction, mode, loaded) runs one of three decoders over the
same prompt and the same stopping rule and returns a RewriteResult: `rewrite` (greedy, one token
per forward, an explicit KV-cache loop), `lookup` (transformers' prompt lookup decoding) and
`verify` (cadedit.verify: input lines as long drafts, checked in one forward). The output ends at
an EOS token or at the closing fence on a line of its own; it is parsed into display text, aligned
with the input by the oracle and reported as a copy/gen program in the file's own newlines (CRLF,
BOM, missing final newline), so resolve(program, document) is the edited file.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

import torch

from cadedit.document import Document, line_terminator
from cadedit.errors import BudgetError, ModelError
from cadedit.model import LoadedModel, encode, new_cache, render_chat
from cadedit.oracle import oracle
from cadedit.program import Program
from cadedit.resolve import resolve

MODES = ("rewrite", "lookup", "verify")
LOOKUP_TOKENS = 10  # transformers' documented example value for prompt_lookup_num_tokens

SYSTEM = """\
You edit files. You receive a file and an instruction.
Reply with the complete edited file in one code block and nothing else.
Copy every line that the instruction does not change exactly as it is, including comments, blank lines and indentation."""

LANGUAGES = {
    ".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript", ".tsx": "tsx",
    ".jsx": "jsx", ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".go": "go", ".rs": "rust", ".rb": "ruby", ".sh": "bash", ".md": "markdown", ".json": "json",
    ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".html": "html", ".css": "css", ".sql": "sql",
}


# -- the prompt (pure) -------------------------------------------------------------------------


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in the file (as CommonMark does), at least 3."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def language_tag(path: str) -> str:
    return LANGUAGES.get(PurePath(path).suffix.lower(), "") if not path.startswith("<") else ""


def fenced_source(document: Document, fence: str) -> str:
    """The file as the model sees it and retypes it: display text, a final newline, the closing fence."""
    body = document.display_text(1, document.n_lines) if document.lines else ""
    return body + ("\n" if body and not body.endswith("\n") else "") + fence + "\n"


def rewrite_messages(document: Document, instruction: str, fence: str) -> list[dict[str, str]]:
    """The instruction, the file, the instruction again and the size of the expected answer.

    Measured on Qwen2.5-Coder-0.5B-Instruct (greedy): with the file first and the instruction
    last it passed 6/16 HumanEvalFix-Python tests but answered 300-line files with the one
    function to fix (27 of 306 lines); this layout passed 4/16 and kept 298-320 of ~310 lines.
    """
    name = PurePath(document.path).name if not document.path.startswith("<") else "the file"
    opening = fence + language_tag(document.path) + "\n"
    task = f"Instruction: {instruction.strip()}"
    user = (f"{task}\n\nFile {name} ({document.n_lines} lines):\n{opening}{fenced_source(document, fence)}\n{task}\n"
            f"Reply with the complete file, all {document.n_lines} lines, with the instruction applied.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


# -- where the output ends, and what it means --------------------------------------------------


class Stopper:
    """The stopping rule shared by every mode: an EOS token, or the closing fence alone on a line.

    feed() takes the output one token at a time, so decoders that accept many tokens at once
    stop at exactly the token where one-at-a-time greedy decoding would have stopped.
    """

    def __init__(self, token_bytes: Sequence[bytes], eos_ids: frozenset[int], fence: str):
        self.token_bytes = token_bytes
        self.eos_ids = eos_ids
        self.marker = b"\n" + fence.encode() + b"\n"
        self.text = bytearray(b"\n")  # a virtual line start: a fence on the first output line counts

    def feed(self, token: int) -> bool:
        if token in self.eos_ids:
            return True
        piece = self.token_bytes[token]
        self.text += piece
        return self.marker in self.text[-(len(piece) + len(self.marker)) :]


class Output:
    """The output token ids, fed one at a time: done at the stopping rule or after `budget` tokens."""

    def __init__(self, stopper: Stopper, budget: int):
        self.stopper, self.budget = stopper, budget
        self.ids: list[int] = []
        self.finished = False

    def add(self, token: int) -> bool:
        """Take one token; True when the output is complete (finished) or the budget is spent."""
        if self.stopper.feed(token):
            self.finished = True
            if token not in self.stopper.eos_ids:
                self.ids.append(token)
            return True
        self.ids.append(token)
        return len(self.ids) >= self.budget


def output_text(output: str, fence: str, document: Document) -> str:
    """The new file in display form: the output up to its closing fence line (or all of it).

    A file whose last line had no terminator keeps none: the fence forces the model to end
    its last line with a newline that is not part of the file.
    """
    kept = []
    for line in re.findall(r"[^\n]*\n|[^\n]+$", output):  # "\n" only: a form feed is not a line end here
        if line.rstrip() == fence:
            break
        kept.append(line)
    text = "".join(kept)
    unterminated = document.lines and not line_terminator(document.lines[-1])
    return text[:-1] if unterminated and text.endswith("\n") else text


def program_for(document: Document, new_display: str) -> Program:
    """The copy/gen program of the rewrite, in the file's own newlines: input lines the model
    retyped unchanged become copies (oracle line alignment), the rest gens."""
    from cadedit.resolve import to_document_program

    before = Document.from_text(document.display_text(1, document.n_lines) if document.lines else "")
    return to_document_program(oracle(before, Document.from_text(new_display)), document)


# -- the model as a KV cache one can feed and crop ---------------------------------------------


class LM(Protocol):
    """One KV cache over a causal LM: feed ids, get the logits of the last `keep` positions; crop."""

    def feed(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor: ...  # [keep, V]
    def crop(self, n: int) -> None: ...


class CachedLM:
    """A Hugging Face causal LM over one DynamicCache (transformers 5.24 names the kwarg `cache=`)."""

    def __init__(self, model, cache):
        self.model, self.cache = model, cache

    @torch.inference_mode()
    def feed(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.model.device)  # [1, T]
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0]  # [keep, V]

    def crop(self, n: int) -> None:
        """Drop the last n positions (5.24's crop takes a negative count; a positive one raises)."""
        if n:
            self.cache.crop(-n)


@dataclass(frozen=True)
class RewriteStats:
    forward_passes: int = 0
    tokens_prompt: int = 0
    tokens_sampled: int = 0  # tokens the model chose itself (one per forward)
    tokens_accepted: int = 0  # draft tokens greedy decoding confirmed
    tokens_drafted: int = 0
    drafts_proposed: int = 0
    drafts_rejected: int = 0  # drafts not accepted in full
    seconds_prefill: float = 0.0
    seconds_total: float = 0.0

    @property
    def tokens_new(self) -> int:
        return self.tokens_sampled + self.tokens_accepted

    @property
    def tokens_spliced(self) -> int:
        """Input tokens taken over in parallel forwards (the name `cadedit fix` reports for copies)."""
        return self.tokens_accepted

    @property
    def seconds_forwards(self) -> float:
        return self.seconds_total


@dataclass(frozen=True)
class Generated:
    ids: tuple[int, ...]  # output ids, the EOS excluded
    finished: bool
    stats: RewriteStats


def argmax(logits: torch.Tensor) -> int:
    return int(logits.float().argmax())


OnStep = Callable[[RewriteStats], None]


def greedy_rewrite(lm: LM, prompt_ids: Sequence[int], output: Output, on_step: OnStep | None = None) -> Generated:
    """The baseline: prefill the prompt, then one forward per output token, greedy."""
    start = time.perf_counter()
    logits = lm.feed(prompt_ids)  # [1, V]
    prefill = time.perf_counter() - start
    passes = 1
    while not output.add(token := argmax(logits[-1])):
        logits = lm.feed([token])
        passes += 1
        if on_step is not None:
            on_step(RewriteStats(passes, len(prompt_ids), passes, seconds_total=time.perf_counter() - start))
    stats = RewriteStats(passes, len(prompt_ids), passes, seconds_prefill=prefill,
                         seconds_total=time.perf_counter() - start)
    return Generated(tuple(output.ids), output.finished, stats)


def lookup_rewrite(model, prompt_ids: Sequence[int], output: Output, new_output: Callable[[], Output],
                   lookup_tokens: int = LOOKUP_TOKENS) -> Generated:
    """transformers' prompt lookup decoding (greedy), then the shared stopping rule over its output.

    new_output() makes a second Output that follows generate()'s sequence as it grows, so it
    stops where the other decoders stop (it may overshoot within one accepted block; `output`
    then cuts at the same token).
    """
    from transformers import StoppingCriteria, StoppingCriteriaList

    class SharedStop(StoppingCriteria):
        def __init__(self):
            self.probe, self.seen, self.done = new_output(), len(prompt_ids), False

        def __call__(self, input_ids, scores, **kwargs):
            for token in input_ids[0, self.seen :].tolist():
                self.done = self.done or self.probe.add(token)
            self.seen = input_ids.shape[1]
            return torch.full((input_ids.shape[0],), self.done, dtype=torch.bool, device=input_ids.device)

    eos = sorted(output.stopper.eos_ids)
    passes = []
    counter = model.register_forward_hook(lambda *_: passes.append(1))
    start = time.perf_counter()
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=model.device)  # [1, P]
    try:
        with torch.inference_mode():
            generated = model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=output.budget,
                do_sample=False, repetition_penalty=1.0, prompt_lookup_num_tokens=lookup_tokens,
                eos_token_id=eos, pad_token_id=eos[0], stopping_criteria=StoppingCriteriaList([SharedStop()]),
            )
    finally:
        counter.remove()
    for token in generated[0, len(prompt_ids) :].tolist():
        if output.add(token):
            break
    # Tokens generate() accepted from the prompt vs chose itself are not reported: split them as
    # the other decoders do, one chosen token per forward.
    chosen = min(len(passes), len(output.ids))
    stats = RewriteStats(len(passes), len(prompt_ids), chosen, len(output.ids) - chosen,
                         seconds_total=time.perf_counter() - start)
    return Generated(tuple(output.ids), output.finished, stats)


# -- one edit ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewriteRequest:
    """Everything a decoder needs for one file: prompt ids, the text it retypes, the stop rule."""

    prompt_ids: tuple[int, ...]
    source: str  # fenced_source(): what an unchanged rewrite would print, closing fence included
    fence: str
    budget: int
    eos_ids: frozenset[int]
    token_bytes: tuple[bytes, ...]

    def output(self) -> Output:
        return Output(Stopper(self.token_bytes, self.eos_ids, self.fence), self.budget)


@dataclass(frozen=True)
class RewriteResult:
    document: Document
    mode: str
    program: Program  # in the file's own newlines: resolve(program, document) == new_text
    program_text: str  # what the model wrote: the file, its closing fence (pipeline.EditResult's name)
    new_text: str
    stats: RewriteStats
    model: str
    prompt_tokens: int
    output_ids: tuple[int, ...]

    @property
    def changed(self) -> bool:
        return self.new_text != self.document.text


def eos_ids_of(loaded: LoadedModel) -> frozenset[int]:
    """EOS ids: the tokenizer's, the generation config's and Qwen's <|endoftext|>."""
    ids = {loaded.tokenizer.eos_token_id}
    configured = getattr(getattr(loaded.model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured) if isinstance(configured, (list, tuple)) else {configured}
    ids.add(loaded.tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    return frozenset(int(i) for i in ids if i is not None and i != loaded.tokenizer.unk_token_id)


def prepare_rewrite(loaded: LoadedModel, document: Document, instruction: str,
                    max_new_tokens: int | None = None) -> RewriteRequest:
    """Tokenise the prompt (its answer opens with the fence); refuse a file that cannot fit twice."""
    from cadedit.vocab import vocab_from_tokenizer

    fence = fence_for(document.text)
    prompt = render_chat(loaded.tokenizer, rewrite_messages(document, instruction, fence))
    prompt_ids = tuple(encode(loaded.tokenizer, prompt + fence + language_tag(document.path) + "\n"))
    source = fenced_source(document, fence)
    file_tokens = len(encode(loaded.tokenizer, source))
    room = loaded.context_limit - len(prompt_ids) - file_tokens
    if room < 0:
        raise ModelError(
            f"{document.path}: too large for {loaded.name}: {document.n_lines} lines, a {len(prompt_ids)}-token prompt "
            f"plus {file_tokens} tokens for the rewritten file, but the context limit is {loaded.context_limit} tokens",
            hint="edit a smaller file, or use --mode program",
        )
    budget = min(max_new_tokens or 2 * file_tokens + 256, room + file_tokens)
    vocab = vocab_from_tokenizer(loaded.tokenizer, n_logits=loaded.model.config.vocab_size)
    return RewriteRequest(prompt_ids, source, fence, budget, eos_ids_of(loaded), vocab.tokens)


def generate(loaded: LoadedModel, request: RewriteRequest, mode: str, on_step: OnStep | None = None) -> Generated:
    """Run one decoder over a fresh KV cache (on_step sees running statistics; not for lookup)."""
    if mode == "rewrite":
        return greedy_rewrite(CachedLM(loaded.model, new_cache(loaded)), request.prompt_ids, request.output(),
                              on_step)
    if mode == "lookup":
        return lookup_rewrite(loaded.model, request.prompt_ids, request.output(), request.output)
    if mode == "verify":
        from cadedit.verify import verify_rewrite

        lm = CachedLM(loaded.model, new_cache(loaded))
        return verify_rewrite(lm, request.prompt_ids, request.source, lambda text: encode(loaded.tokenizer, text),
                              request.token_bytes, request.output(), on_step=on_step)
    raise ModelError(f"unknown mode {mode!r}", hint=f"use one of program, {', '.join(MODES)}")


def rewrite_file(document: Document, instruction: str, mode: str, loaded: LoadedModel,
                 max_new_tokens: int | None = None, on_step: Callable[[RewriteStats, None], None] | None = None,
                 ) -> RewriteResult:
    """Edit one document by having the model retype it; see the module docstring. on_step(stats, None)
    after each forward (the signature of pipeline.edit_file's progress callback)."""
    # 1. The prompt as token ids (a file that cannot fit is refused before any model work).
    request = prepare_rewrite(loaded, document, instruction, max_new_tokens)
    # 2. Decode with the chosen decoder; running out of budget writes nothing.
    generated = generate(loaded, request, mode, None if on_step is None else lambda stats: on_step(stats, None))
    if not generated.finished:
        raise BudgetError(f"the model used its budget of {request.budget} new tokens before closing the file; "
                          "nothing was written", hint="raise --max-new-tokens, or give a narrower instruction")
    # 3. The output as the new file, and as a copy/gen program in the file's own newlines.
    raw = b"".join(request.token_bytes[t] for t in generated.ids).decode("utf-8", errors="replace")
    program = program_for(document, output_text(raw, request.fence, document))
    return RewriteResult(document, mode, program, raw, resolve(program, document), generated.stats, loaded.name,
                         len(request.prompt_ids), generated.ids)

