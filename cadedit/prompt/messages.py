"""The prompt: chat messages that ask the model for an edit program over a numbered file.

Contract: build_messages(document, instruction, variant) returns chat messages (system, few-shot
user/assistant turns, the real request); the model's chat template turns them into text elsewhere
(model.render_chat). The assistant's answer starts with program.OPEN, which the grammar forces.
Few-shot answers are shown in the *interleaved* form the model will see in its own KV cache: each
`<copy lines="i-j"/>` is followed by the text of lines i..j (spliced by the decoder), then the next
op. Pure: no torch, no transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from cadedit.text.document import Document
from cadedit.text.languages import fence_tag
from cadedit.text.program import CLOSE, OPEN, Copy, Gen, Program, format_op

SYSTEM = """\
You edit a file by writing a short edit program instead of retyping the whole file.
The file is shown with a line number before each line ("12{sep}code"); the numbers are not part of the file.
The program has two operations:
- <copy lines="I-J"/> keeps lines I to J (inclusive) of the original file unchanged.
- <gen> ... </gen> writes new text: the exact new lines, without line numbers, each ending with a newline.
Write the new file from top to bottom as <program>, then operations, then </program>.
Copy every run of lines that stays the same; use <gen> only for new or changed lines; leave out deleted lines.
Line numbers always refer to the original file; copies go forward through the file and never overlap.
After each copy you see the copied lines, so you always know where you are in the file.
Change only what the instruction asks for."""


@dataclass(frozen=True)
class Example:
    """A few-shot example: a file, an instruction and the program that answers it."""

    path: str
    before: str
    instruction: str
    program: Program


EXAMPLES = (
    Example(
        "stats.py",
        "def average(values):\n"
        '    """Return the mean of a list of numbers."""\n'
        "    if not values:\n"
        "        return 0.0\n"
        "    total = 0\n"
        "    for v in values:\n"
        "        total += v\n"
        "    return total / (len(values) - 1)\n"
        "\n"
        "\n"
        "def main():\n"
        "    print(average([1, 2, 3]))\n",
        "Fix the bug in average.",
        Program((Copy(1, 7), Gen("    return total / len(values)\n"), Copy(9, 12))),
    ),
    Example(
        "queue.js",
        "class Queue {\n"
        "  constructor() {\n"
        "    this.items = [];\n"
        "  }\n"
        "  push(item) {\n"
        "    this.items.push(item);\n"
        "  }\n"
        "  pop() {\n"
        "    return this.items.shift();\n"
        "  }\n"
        "}\n",
        "Make pop throw an Error when the queue is empty, and remove push.",
        Program(
            (
                Copy(1, 4),
                Copy(8, 8),
                Gen('    if (this.items.length === 0) {\n      throw new Error("empty queue");\n    }\n'),
                Copy(9, 11),
            )
        ),
    ),
)


@dataclass(frozen=True)
class Variant:
    """How the request is rendered: the separator after line numbers and how many examples to show."""

    name: str = "default"
    sep: str = " | "
    examples: int = 1
    count: bool = False  # say how many lines the file has, and that the program goes to the last one
    close: bool = False  # insist that a gen ends with </gen> (the 0.5B model tried `<gen end>`, `<gen/>`)


# Program-mode prompt variants (tools/prompt_eval.py; figures in docs/measurements/design-figures.md):
# an untrained model damages most files whatever the prompt; stating the line count helps most.
VARIANTS = {
    "default": Variant("default", " | ", 1, count=True),
    "uncounted": Variant("uncounted", " | ", 1),
    "colon": Variant("colon", ": ", 1),
    "two-shot": Variant("two-shot", " | ", 2),
    "zero-shot": Variant("zero-shot", " | ", 0),
    "two-shot-count": Variant("two-shot-count", " | ", 2, count=True),
    "count-close": Variant("count-close", " | ", 1, count=True, close=True),
}

COUNT_NOTE = (
    "\nThe program must account for every line up to the last one: copy the unchanged lines after the edit too."
)
CLOSE_NOTE = "\nEvery <gen> ends with </gen> on a line of its own, right after its last new line; nothing else ends it."


def interleaved(program: Program, document: Document) -> str:
    """Program text as the model sees it in its cache: each copy followed by the copied lines."""
    parts = [OPEN]
    for op in program.ops:
        parts.append(format_op(op))
        if isinstance(op, Copy):
            parts.append(document.display_text(op.start, op.end))
    parts.append(CLOSE)
    return "".join(parts)


def user_message(document: Document, instruction: str, variant: Variant) -> str:
    name = PurePath(document.path).name if not document.path.startswith("<") else "the file"
    size = f" ({document.n_lines} line{'s' * (document.n_lines != 1)})" if variant.count else ""
    return f"File {name}{size}:\n{document.numbered(sep=variant.sep)}\nInstruction: {instruction.strip()}"


def build_messages(
    document: Document, instruction: str, variant: Variant = VARIANTS["default"]
) -> list[dict[str, str]]:
    """System prompt, few-shot turns, then the request; the assistant's reply is the program."""
    system = (
        SYSTEM.format(sep=variant.sep) + (COUNT_NOTE if variant.count else "") + (CLOSE_NOTE if variant.close else "")
    )
    messages = [{"role": "system", "content": system}]
    for example in EXAMPLES[: variant.examples]:
        before = Document.from_text(example.before, example.path)
        messages.append({"role": "user", "content": user_message(before, example.instruction, variant)})
        messages.append({"role": "assistant", "content": interleaved(example.program, before)})
    messages.append({"role": "user", "content": user_message(document, instruction, variant)})
    return messages


# -- the rewrite modes' prompt: the whole file in a fence, retyped ------------------------------

REWRITE_SYSTEM = """\
You edit files. You receive a file and an instruction.
Reply with the complete edited file in one code block and nothing else.
Copy every line that the instruction does not change exactly as it is, including comments, blank lines and indentation."""


def language_tag(path: str) -> str:
    """The code fence's language tag for a file name (cadedit.text.languages)."""
    return fence_tag(path)


def fenced_source(document: Document, fence: str) -> str:
    """The file as the model sees it and retypes it: display text, a final newline, the closing fence."""
    return _region_source(document, 1, document.n_lines, fence) if document.lines else fence + "\n"


# Where the instruction goes in the fenced modes' prompt. "both": before and after the file;
# "after": after the file only, so prompts for different instructions share the file's KV cache;
# "quoted" (scoped edits): after the file, with the region to retype quoted again before it.
# Why (figures in docs/measurements/design-figures.md): "both" and "after" tie on quality, and only "after"
# and "quoted" let a second edit of the same file reuse the file's KV cache (prefix_store.PrefixStore); for
# whole files "quoted" is "after". Shown a window of a long file, a small model loses its place and
# retypes other lines of the window unless the region is quoted right before the instruction; shown
# a short file whole, there is no place to lose and the quote only invites a copy, so "auto" (the
# default) quotes the region when the file is shown in parts.
LAYOUTS = ("both", "after", "quoted", "auto")
_UNQUOTED = {"quoted": "after", "auto": "after"}  # each layout that quotes the region, and the same without


def unquoted(layout: str) -> str:
    """The layout with the region no longer quoted before the instruction (a try after one that
    copied it unchanged); a layout that never quotes is itself."""
    return _UNQUOTED.get(layout, layout)


def rewrite_messages(
    document: Document, instruction: str, fence: str, feedback: str = "", layout: str = "both"
) -> list[dict[str, str]]:
    """The file, the instruction (also before the file with layout "both") and the size of the answer.

    Measured on Qwen2.5-Coder-0.5B-Instruct (greedy): with the file first and the instruction
    last it passed 6/16 HumanEvalFix-Python tests but answered 300-line files with the one
    function to fix (27 of 306 lines); "both" passed 4/16 and kept 298-320 of ~310 lines.
    """
    name = PurePath(document.path).name if not document.path.startswith("<") else "the file"
    opening = fence + language_tag(document.path) + "\n"
    task = f"Instruction: {instruction.strip()}"
    head = f"{task}\n\n" if layout == "both" else ""
    user = (
        f"{head}File {name} ({document.n_lines} lines):\n{opening}{fenced_source(document, fence)}\n{task}\n"
        f"Reply with the complete file, all {document.n_lines} lines, with the instruction applied."
    )
    return [{"role": "system", "content": REWRITE_SYSTEM}, {"role": "user", "content": user + _after(feedback)}]


def _region_source(document: Document, a: int, b: int, fence: str) -> str:
    body = document.display_text(a, b)
    return body + ("\n" if body and not body.endswith("\n") else "") + fence + "\n"


def _after(feedback: str) -> str:
    """What failed in the previous try, last in the prompt, so every try shares the prompt up to here."""
    return f"\n\n{feedback.strip()}\nTry again." if feedback.strip() else ""


SCOPED_SYSTEM = """\
You edit files. You receive a file, an instruction and the lines of the file to rewrite.
Reply with those lines only, edited as the instruction says, in one code block per range and nothing else.
Copy every line that the instruction does not change exactly as it is, including comments, blank lines and indentation."""


def region_header(start: int, end: int, fence: str, path: str, indent: str = "") -> str:
    """The text that opens the answer for one region; forced, never written by the model. A region
    indented as a whole (a method) is answered without that indentation, as code in a fresh block
    is written; cadedit puts it back."""
    shown = f", without their common indentation of {_indent_words(indent)}" if indent else ""
    return f"Lines {start}-{end}{shown}:\n{fence}{language_tag(path)}\n"


def _indent_words(indent: str) -> str:
    if set(indent) == {" "}:
        return f"{len(indent)} spaces" if len(indent) != 1 else "1 space"
    if set(indent) == {"\t"}:
        return f"{len(indent)} tabs" if len(indent) != 1 else "1 tab"
    return repr(indent)


def scoped_messages(
    document: Document,
    instruction: str,
    fence: str,
    regions: Sequence[tuple[int, int]],
    referenced: Sequence[int] = (),
    feedback: str = "",
    layout: str = "both",
    context: Sequence[tuple[int, int]] | None = None,
) -> list[dict[str, str]]:
    """The file for context (whole, or the `context` line ranges: regions.context_spans), then the
    instruction and the line ranges the answer retypes. Lines the instruction refers to by number
    are quoted with their numbers, since the file is shown without them."""
    name = PurePath(document.path).name if not document.path.startswith("<") else "the file"
    opening = fence + language_tag(document.path) + "\n"
    whole = context is None or tuple(context) == ((1, document.n_lines),)
    if whole:
        shown_file = f"File {name} ({document.n_lines} lines):\n{opening}{fenced_source(document, fence)}\n"
    else:
        shown_file = f"File {name} ({document.n_lines} lines), the parts around the lines to edit:\n" + "".join(
            f"Lines {a}-{b}:\n{opening}{_region_source(document, a, b, fence)}\n" for a, b in context
        )
    task = f"Instruction: {instruction.strip()}"
    bodies = document.display_lines()
    quoted = "".join(f"Line {k}: {bodies[k - 1]}\n" for k in referenced if 1 <= k <= len(bodies))
    ranges = ", ".join(f"{a}-{b}" for a, b in regions)
    count = sum(b - a + 1 for a, b in regions)
    head = f"{task}\n\n" if layout == "both" else ""
    shown = ""
    if layout == "quoted" or (layout == "auto" and not whole):
        shown = "".join(
            f"Lines {a}-{b} now read:\n{opening}{_region_source(document, a, b, fence)}\n" for a, b in regions
        )
    user = (
        f"{head}{shown_file}"
        + (f"{quoted}\n" if quoted else "")
        + shown
        + f"{task}\nReply with lines {ranges} of the file ({count} line{'s' if count != 1 else ''}), with the instruction applied, "
        "one code block per range, each opened by its line range."
    )
    return [{"role": "system", "content": SCOPED_SYSTEM}, {"role": "user", "content": user + _after(feedback)}]


# -- the where-step's prompt: which line of a long definition to change (cadedit.decode.where) ----------

WHERE_SYSTEM = """\
You find where a file must change. You receive lines of a file, each after its line number, and an instruction.
Reply with the number of the line that must change, and nothing else."""
WHERE_ANSWER = "Line "  # the answer's forced start; the line numbers follow (where.LineNumberCursor)


WHERE_QUOTE_SYSTEM = """\
You find where a file must change. You receive lines of a file and an instruction.
Reply with the one line that must change, copied exactly as it is (without its indentation), and nothing else."""


def where_messages(
    document: Document, instruction: str, regions: Sequence[tuple[int, int]], quote: bool = False
) -> list[dict[str, str]]:
    """The regions' lines, numbered as in the file (quote: as code, to be quoted back), then the
    instruction and the question."""
    name = PurePath(document.path).name if not document.path.startswith("<") else "the file"
    bodies = document.display_lines()
    width = len(str(max(b for _, b in regions)))
    if quote:
        fence = "```"
        shown = "".join(
            f"Lines {a}-{b} of {name}:\n{fence}{language_tag(document.path)}\n"
            + "".join(f"{bodies[k - 1]}\n" for k in range(a, b + 1))
            + f"{fence}\n\n"
            for a, b in regions
        )
        question = "Which line must change to do this? Reply with that line only, copied exactly."
        system = WHERE_QUOTE_SYSTEM
    else:
        shown = "".join(
            f"Lines {a}-{b} of {name}:\n" + "".join(f"{k:>{width}} | {bodies[k - 1]}\n" for k in range(a, b + 1)) + "\n"
            for a, b in regions
        )
        question = "Which line must change to do this? Reply with its line number only."
        system = WHERE_SYSTEM
    user = f"{shown}Instruction: {instruction.strip()}\n{question}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
