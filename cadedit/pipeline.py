"""edit_file(): one edit, from a document and an instruction to the edited text, as numbered steps.

Contract: edit_file(document, instruction, options) loads the model (or takes a loaded one),
refuses a file whose prompt cannot fit the model's context before any model work, decodes a
grammar-constrained program with copy splices, and resolves it strictly against the document.
Nothing is written here: the caller shows or applies EditResult.new_text. The helpers (prompt ids,
the fit check, the grammar, one decode) are public so benchmarks reuse exactly this code path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from cadedit import program as P
from cadedit.decode import Decoded, DecodeStats, Picker, Sampling, Step, decode, model_forward, sampling_picker
from cadedit.resolve import to_document_program
from cadedit.draft import DRAFT_LIMIT, make_drafter, propose
from cadedit.document import Document
from cadedit.errors import ModelError
from cadedit.model import LoadedModel, encode, load_model, new_cache, render_chat
from cadedit.prompt import VARIANTS, build_messages
from cadedit.resolve import resolve

# Room for the program's own tokens (op literals, line numbers) beyond the file itself, and for the
# drafted tokens a forward may hold before the rejected ones are cropped.
PROGRAM_ROOM = 64


@dataclass(frozen=True)
class EditOptions:
    model: str | None = None  # hub id, folder or .gguf; None: model.choose_model()
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    max_new_tokens: int | None = None  # None: twice the file's tokens + 256 (a full rewrite fits)
    variant: str = "default"  # prompt variant, see prompt.VARIANTS
    draft: bool = True  # guess program tokens ahead and verify them in the same forward (cadedit.draft)
    mode: str = "program"  # or a whole-file rewrite mode: rewrite, lookup, verify (cadedit.rewrite)


@dataclass(frozen=True)
class EditResult:
    document: Document
    program: P.Program  # in the file's own newlines: resolve(program, document) == new_text
    program_text: str  # as the model wrote it
    new_text: str
    stats: DecodeStats
    model: str
    prompt_tokens: int

    @property
    def changed(self) -> bool:
        return self.new_text != self.document.text


@dataclass(frozen=True)
class Prepared:
    """What a decode needs: the prompt's token ids, the file's size in tokens, the budget."""

    prompt_ids: tuple[int, ...]
    file_tokens: int
    budget: int


def prepare(loaded: LoadedModel, document: Document, instruction: str, options: EditOptions) -> Prepared:
    """Tokenise the prompt; refuse a file that cannot fit (prompt + the edited file + program)."""
    if options.variant not in VARIANTS:
        raise ModelError(f"unknown prompt variant {options.variant!r}", hint=f"use one of {', '.join(VARIANTS)}")
    messages = build_messages(document, instruction, VARIANTS[options.variant])
    prompt_ids = tuple(encode(loaded.tokenizer, render_chat(loaded.tokenizer, messages)))
    file_tokens = len(encode(loaded.tokenizer, document.display_text(1, document.n_lines))) if document.lines else 0
    room = loaded.context_limit - len(prompt_ids) - file_tokens - PROGRAM_ROOM
    if room < 0:
        raise ModelError(
            f"{document.path}: too large for {loaded.name}: {document.n_lines} lines, a {len(prompt_ids)}-token prompt "
            f"plus {file_tokens} tokens for the edited file, but the context limit is {loaded.context_limit} tokens",
            hint="edit a smaller file, or split it first",
        )
    budget = options.max_new_tokens or 2 * file_tokens + 256
    return Prepared(prompt_ids, file_tokens, min(budget, room + PROGRAM_ROOM - DRAFT_LIMIT))


_GRAMMARS: dict[int, tuple[object, object]] = {}


def grammar_for(loaded: LoadedModel):
    """The program grammar compiled against this model's vocabulary (once per tokenizer, ~0.8 s)."""
    from cadedit.grammar import compile_grammar
    from cadedit.vocab import vocab_from_tokenizer

    key = id(loaded.tokenizer)
    if key not in _GRAMMARS:
        vocab = vocab_from_tokenizer(loaded.tokenizer, n_logits=loaded.model.config.vocab_size)
        grammar = compile_grammar(vocab, encode=lambda text: encode(loaded.tokenizer, text))
        _GRAMMARS[key] = (loaded.tokenizer, grammar)  # keep the tokenizer alive so its id stays unique
    return _GRAMMARS[key][1]


def run_decode(loaded: LoadedModel, document: Document, prepared: Prepared, pick: Picker,
               on_step: Callable[[DecodeStats, Step], None] | None = None, draft: bool = True) -> Decoded:
    """One decode of a program for `document` over a fresh KV cache."""
    grammar = grammar_for(loaded)
    cursor = grammar.for_document(document.n_lines, monotonic=True).cursor()
    forward = model_forward(loaded.model, new_cache(loaded))
    drafter = None
    if draft:
        drafter = make_drafter(lambda text: propose(text, document), lambda text: encode(loaded.tokenizer, text),
                               grammar.vocab.tokens)

    def span_ids(copy: P.Copy) -> list[int]:
        # The program text before a splice ends with '"/>\n' and the span starts at a line start, so
        # tokenising the span on its own is how Qwen's BPE splits the joint text -- except when the span
        # starts with a blank line ('"/>\n\n' would be one pre-token): the model still reads exactly
        # the right text, in a slightly different split. Checked on the 1,246 oracle copies of
        # HumanEvalFix Python+JS (both contexts): 329 start with a blank line and differ, no other
        # start seam differs, and no end seam (span, then the next op's "<") ever differs.
        return encode(loaded.tokenizer, document.display_text(copy.start, copy.end))

    return decode(forward, cursor, prepared.prompt_ids, span_ids, pick, prepared.budget, on_step, drafter)


def edit_file(document: Document, instruction: str, options: EditOptions = EditOptions(), *,
              loaded: LoadedModel | None = None, pick: Picker | None = None,
              on_step: Callable[[DecodeStats, Step], None] | None = None,
              on_loaded: Callable[[LoadedModel], None] | None = None) -> EditResult:
    """Edit one document as the instruction says; see the module docstring."""
    # 1. The model (the caller may pass one already loaded).
    loaded = loaded or load_model(options.model, options.device, options.dtype, options.threads)
    if on_loaded is not None:
        on_loaded(loaded)
    if options.mode != "program":  # the model retypes the file (greedy); reported as a program all the same
        from cadedit.rewrite import rewrite_file

        return rewrite_file(document, instruction, options.mode, loaded, options.max_new_tokens, on_step)
    # 2. The prompt as token ids; a file that cannot fit is refused here, before any model work.
    prepared = prepare(loaded, document, instruction, options)
    # 3. Decode: masked model steps, forced literals, one forward per copy splice.
    decoded = run_decode(loaded, document, prepared, pick or sampling_picker(options.sampling), on_step,
                         draft=options.draft)
    # 4. The program in the file's own newlines (CRLF, BOM), resolved strictly against the file.
    program = to_document_program(P.parse(decoded.text), document)
    new_text = resolve(program, document)
    return EditResult(document, program, decoded.text, new_text, decoded.stats, loaded.name, len(prepared.prompt_ids))


def result_json(result: EditResult, diff_text: str) -> dict:
    """The machine-readable form of an edit (`cadedit fix --json`)."""
    stats = asdict(result.stats)
    stats["seconds_forwards"] = result.stats.seconds_forwards
    return {
        "file": result.document.path,
        "model": result.model,
        "changed": result.changed,
        "program": P.format(result.program),
        "program_as_written": result.program_text,
        "diff": diff_text,
        "prompt_tokens": result.prompt_tokens,
        "statistics": stats,
    }
