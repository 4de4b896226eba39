"""The prompt: messages in chat order, the numbered file, the few-shot answers in the interleaved form
the decoder's KV cache will hold, and no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cadedit.text.document import Document
from cadedit.text.program import Copy, Program, format, parse
from cadedit.prompt.messages import EXAMPLES, VARIANTS, build_messages, interleaved
from cadedit.text.resolve import resolve

DOC = Document.from_text("import os\n\ndef main():\n    print(os.getcwd())\n", "src/tool.py")


@pytest.mark.parametrize("name", VARIANTS)
def test_messages_alternate_and_end_with_the_request(name):
    variant = VARIANTS[name]
    messages = build_messages(DOC, "  Print the home directory instead.\n", variant)
    roles = [m["role"] for m in messages]
    assert roles == ["system"] + ["user", "assistant"] * variant.examples + ["user"]
    request = messages[-1]["content"]
    assert request.startswith("File tool.py") and request.endswith("Instruction: Print the home directory instead.")
    assert f"4{variant.sep}    print(os.getcwd())\n" in request
    assert ("(4 lines)" in request) == variant.count
    assert '<copy lines="I-J"/>' in messages[0]["content"] and "</gen>" in messages[0]["content"]


def test_default_states_the_line_count_and_shows_one_example():
    messages = build_messages(DOC, "Fix.")
    assert len(messages) == 4 and "File tool.py (4 lines):" in messages[-1]["content"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.path)
def test_examples_show_each_copy_followed_by_its_lines(example):
    before = Document.from_text(example.before)
    shown = interleaved(example.program, before)
    assert shown.startswith("<program>\n") and shown.endswith("</program>")
    expected = "<program>\n"
    for op in example.program.ops:
        expected += format(Program((op,)))[len("<program>\n") : -len("</program>\n")]
        if isinstance(op, Copy):
            expected += "".join(before.lines[op.start - 1 : op.end])
    assert shown == expected + "</program>"
    resolve(example.program, before)  # the example program is valid for its file
    assert parse(format(example.program)) == example.program


def test_the_average_example_fixes_its_bug():
    example = EXAMPLES[0]
    fixed = resolve(example.program, Document.from_text(example.before))
    assert "return total / len(values)\n" in fixed and "len(values) - 1" not in fixed


def test_stdin_documents_are_called_the_file():
    messages = build_messages(Document.from_text("x = 1\n", "<stdin>"), "Fix.")
    assert messages[-1]["content"].startswith("File the file (1 line):\n1 | x = 1\n")


PURE = (
    "prompt.messages",
    "text.program",
    "text.document",
    "text.resolve",
    "text.oracle",
    "text.diff",
    "prompt.fence",
    "decode.verify",
    "decode.draft",
    "options",
    "prompt.regions",
    "results",
    "tries.checks",
    "tries.loop",
    "scope.plan",
    "text.languages",
)


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_torch(module):
    """The prompt, the program, the answer formats, the drafters and the options are pure Python:
    the CLI's model-free paths and the warm server's client import them without torch."""
    code = (
        f"import sys, cadedit.{module}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
