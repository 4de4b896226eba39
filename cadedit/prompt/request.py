"""What an edit asks of a model and how its answer is read, with no model: the pure halves of pipeline.

Contract: build_request(document, instruction, options) gives the chat messages, the assistant's
prefilled opening (the fence header; none in program mode), the fence, the regions and what an
unchanged answer prints; read_answer(document, request, text) turns the model's answer text into a
copy/gen program in the file's own newlines. pipeline.prepare tokenises a Request for a local model;
cadedit.server.engine renders it as ChatML text (render_chatml) for an inference engine. Both read the
answer here, so a local edit and an engine's edit of the same text are the same edit.
Pure: no torch, no tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from cadedit.text import program as P
from cadedit.text.document import Document
from cadedit.errors import ModelError
from cadedit.prompt.fence import fence_for, output_text
from cadedit.options import EditOptions, Mode
from cadedit.text.oracle import oracle
from cadedit.prompt.messages import LAYOUTS, VARIANTS, build_messages, fenced_source, language_tag, rewrite_messages
from cadedit.prompt.messages import scoped_messages
from cadedit.prompt.regions import context_spans, scoped_layout, scoped_text
from cadedit.text.resolve import to_document_program
from cadedit.settings import MIN_ANSWER_TOKENS


@dataclass(frozen=True)
class Request:
    """One edit's prompt before any tokenizer: messages, the answer's forced opening, and for the
    fenced modes the fence and the text an unchanged answer would print."""

    mode: Mode
    messages: tuple[dict[str, str], ...]
    opening: str  # the assistant's answer starts with this (the fence header); the model writes on from it
    answer: str  # what an unchanged answer spells (sizes the budget: the file, or its regions)
    room_needed: int  # context room beyond the prompt and the answer
    hint: str  # what to do when the file does not fit
    fence: str = ""
    source: str = ""
    regions: tuple[tuple[int, int], ...] = ()  # scoped: the ranges retyped, in file order
    headers: tuple[str, ...] = ()  # scoped: the forced text before each region after the first
    draft_tail: str = ""  # scoped: the file's lines after the last region (the verify drafter's)
    task: str = ""  # the instruction as the prompt states it (where the instruction-free prefix ends)
    # scoped, a region indented as a whole: the unchanged answer and tail in the file's own
    # indentation, which the verify drafter also follows (a model may keep that indentation)
    draft_indented: tuple[str, str] | None = None


# Room for the program's own tokens (op literals, line numbers) beyond the file itself, and for the
# drafted tokens a forward may hold before the rejected ones are cropped.
PROGRAM_ROOM = 64


def default_budget(file_tokens: int, scoped: bool) -> int:
    """New tokens an answer may take. A whole file may be retyped with room to grow; a scoped answer
    is about its region's size, and a small model that loses its place there retypes other parts of
    the file until the budget ends. Either may also grow well past a small file or region (a stub
    implemented, a method added), so no answer gets fewer than MIN_ANSWER_TOKENS."""
    grown = file_tokens + file_tokens // 2 + 128 if scoped else 2 * file_tokens + 256
    return max(grown, MIN_ANSWER_TOKENS)


def parse_mode(options: EditOptions) -> Mode:
    try:
        return Mode(options.mode)
    except ValueError:
        raise ModelError(
            f"unknown mode {options.mode!r}", hint=f"use one of {', '.join(m.value for m in Mode)}"
        ) from None


def scoped_regions(document: Document, options: EditOptions, mode: Mode) -> tuple[tuple[int, int], ...]:
    """The regions a fenced edit retypes; empty for the whole file (or program mode)."""
    whole = ((1, document.n_lines),)
    return tuple(options.regions) if mode is not Mode.PROGRAM and options.regions != whole else ()


def build_request(document: Document, instruction: str, options: EditOptions) -> Request:
    """The prompt of one edit in the options' mode and layout (see the module docstring)."""
    mode = parse_mode(options)
    if options.layout not in LAYOUTS:
        raise ModelError(f"unknown prompt layout {options.layout!r}", hint=f"use one of {', '.join(LAYOUTS)}")
    regions = scoped_regions(document, options, mode)
    task = f"Instruction: {instruction.strip()}"
    if mode is Mode.PROGRAM:
        if options.variant not in VARIANTS:
            raise ModelError(f"unknown prompt variant {options.variant!r}", hint=f"use one of {', '.join(VARIANTS)}")
        messages = build_messages(document, instruction, VARIANTS[options.variant])
        answer = document.display_text(1, document.n_lines) if document.lines else ""
        return Request(mode, tuple(messages), "", answer, PROGRAM_ROOM, "edit a smaller file, or split it first")
    fence = fence_for(document.text)
    if regions:
        context = context_spans(document.n_lines, regions, options.context)
        messages = scoped_messages(
            document, instruction, fence, regions, options.referenced, options.attempt.feedback, options.layout, context
        )
        layout = scoped_layout(document, fence, regions)
        return Request(
            mode,
            tuple(messages),
            layout.opening,
            layout.source,
            0,
            "edit a smaller file, or split it first",
            fence,
            layout.source,
            regions,
            layout.headers,
            layout.tail,
            task,
            (layout.indented_source, layout.indented_tail) if layout.indented_source else None,
        )
    messages = rewrite_messages(document, instruction, fence, options.attempt.feedback, options.layout)
    source = fenced_source(document, fence)
    return Request(
        mode,
        tuple(messages),
        fence + language_tag(document.path) + "\n",
        source,
        0,
        "edit a smaller file, or use --mode program",
        fence,
        source,
        task=task,
    )


def read_answer(
    document: Document, mode: Mode, text: str, fence: str = "", regions=(), headers=()
) -> tuple[P.Program, str]:
    """The answer as a copy/gen program in the file's own newlines (CRLF, BOM, missing final newline),
    and why a scoped answer could not be placed in its regions exactly ("" when it could, or when the
    answer is not scoped: regions.scoped_text). A fenced answer is aligned with the file by the
    oracle: lines retyped unchanged become copies."""
    if mode is Mode.PROGRAM:
        return to_document_program(P.parse(text), document), ""
    problem = ""
    if regions:
        placed = scoped_text(document, regions, headers, fence, text)
        new_display, problem = placed.text, placed.problem
    else:
        new_display = output_text(text, fence, document)
    before = Document.from_text(document.display_text(1, document.n_lines) if document.lines else "")
    return to_document_program(oracle(before, Document.from_text(new_display)), document), problem


# -- ChatML: the chat format of the Qwen2 family, rendered as Qwen's own template renders it ----------

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TEXTS = (IM_START, IM_END, "<|endoftext|>")


def render_chatml(messages, opening: str = "") -> str:
    """The prompt text Qwen2's chat template writes for messages that start with a system message,
    with the assistant's turn opened and `opening` prefilled (tests/test_engine.py compares the two)."""
    turns = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return f"{turns}{IM_START}assistant\n{opening}"
