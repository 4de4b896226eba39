"""The scoped-answer repair (regions.scoped_text), property-tested: a model's answer for a region —
written with the file's indentation or as the region is shown (without its shared indentation), with
some of the file's lines around the region retyped, its lines replaced, inserted, deleted, moved or
wrapped in a new block — is placed exactly (the region's new lines, in the file's indentation,
where it was; lines the answer skipped at either end may come back, but only lines it does not have)
or the placement fails with a problem. It never nests the region in a retyped line, never
duplicates or loses a line. `cadedit fix` with such answers: tests/test_scoped.py.
"""

from __future__ import annotations

import itertools

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cadedit.text.document import Document
from cadedit.prompt.regions import dedent, scoped_text

FENCE = "```"
INDENTS = ("", "    ", "        ")
STEP = "    "


@st.composite
def case(draw):
    """(file lines, region span, the region's new lines as the file would have them, the answer's
    text, whether the edit is plain: lines replaced or inserted, at least one kept)."""
    names = (f"v{k}()" for k in itertools.count())
    indent = draw(st.sampled_from(INDENTS))

    def context(n):  # lines around the region: blank, or at any indentation up to one step in
        return [
            draw(st.sampled_from(["", draw(st.sampled_from(INDENTS[: len(indent) // 4 + 2])) + next(names)]))
            for _ in range(n)
        ]

    before, after = context(draw(st.integers(0, 4))), context(draw(st.integers(0, 4)))
    # The region: (relative indentation, text) per line; blank only inside; one line at the region's indentation.
    size = draw(st.integers(1, 5))
    region = [
        ("", "")
        if 0 < k < size - 1 and draw(st.booleans()) and draw(st.booleans())
        else (draw(st.sampled_from(["", STEP])), next(names))
        for k in range(size)
    ]
    assume(any(text and not rel for rel, text in region))
    body, plain = list(region), True
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["replace", "insert", "delete", "swap", "wrap"]))
        at = draw(st.integers(0, len(body) - 1)) if body else 0
        if op == "replace" and body and body[at][1]:
            body[at] = (body[at][0], next(names))
        elif op == "insert":
            body.insert(at, (body[at][0] if body else "", next(names)))
        elif op == "delete" and body and body[at][1]:
            del body[at]
            plain = False
        elif op == "swap" and len(body) > 1:
            other = draw(st.integers(0, len(body) - 1))
            body[at], body[other] = body[other], body[at]
            plain = False
        elif op == "wrap" and body and body[at][1] and plain:
            # Lines wrapped in a new block, one wrap only and by two spaces: wrapped by the region's own
            # indentation, an answer written as shown would read as the region's lines unchanged.
            end = draw(st.integers(at, len(body) - 1))
            body[at : end + 1] = [(body[at][0], next(names))] + [
                (rel + "  " if text else rel, text) for rel, text in body[at : end + 1]
            ]
            plain = False
    assume(not body or (body[0][1] and body[-1][1]))  # the ends of the answer are lines, as the region's are
    plain = (plain and any(line in body for line in region if line[1])) or not body  # deleted whole: plain too
    as_shown = draw(st.booleans())  # the answer without the region's indentation, as the prompt shows it
    # Written as shown, an answer has a line at the region's own indentation or a line of the region to
    # tell it by; one with neither, every line indented further, reads as written with the file's.
    assume(not as_shown or any(text and (not rel or (rel, text) in region) for rel, text in body) or not body)
    shown = (lambda line: dedent(line, indent)) if as_shown else (lambda line: line)
    retyped_before = before[len(before) - draw(st.integers(0, len(before))) :]
    retyped_after = after[: draw(st.integers(0, len(after)))]
    lines = (
        [shown(line) for line in retyped_before]
        + [("" if as_shown else indent) + rel + text if text else "" for rel, text in body]
        + [shown(line) for line in retyped_after]
    )
    answer = "".join(line + "\n" for line in lines) + FENCE + "\n"
    file_region = [indent + rel + text if text else "" for rel, text in region]
    new_region = [indent + rel + text if text else "" for rel, text in body]
    span = (len(before) + 1, len(before) + len(region))
    return before + file_region + after, span, new_region, answer, plain


def skip_readings(region: list[str], new: list[str]) -> list[list[str]]:
    """The region's new lines, and the same with region lines the answer skipped at either end put
    back: a prefix and a suffix of the region whose lines the answer does not have."""
    texts = {line.strip() for line in new if line.strip()}
    absent = [not line.strip() or line.strip() not in texts for line in region]
    readings = []
    for s in range(len(region) + 1):
        if not all(absent[:s]):
            break
        for e in range(len(region), -1, -1):
            if e < s or not all(absent[e:]):
                break
            readings.append(region[:s] + new + region[e:])
    return readings


@settings(max_examples=600, deadline=None, derandomize=True)
@given(case())
def test_an_answer_is_placed_exactly_or_fails(example):
    lines, (a, b), new_region, answer, plain = example
    document = Document.from_text("".join(line + "\n" for line in lines), "a.py")
    placed = scoped_text(document, ((a, b),), (), FENCE, answer)
    if placed.problem:
        assert not plain, (placed.problem, answer)  # a plain edit always places
        assert "\n" not in placed.problem and f"lines {a}-{b}: " in placed.problem
        return
    got = placed.text.split("\n")[:-1]
    assert got[: a - 1] == lines[: a - 1] and got[len(got) - (len(lines) - b) :] == lines[b:]
    middle = got[a - 1 : len(got) - (len(lines) - b)]
    assert middle in skip_readings(lines[a - 1 : b], new_region), (answer, middle, new_region)
    if plain:
        assert middle == new_region


def test_the_reported_answers_place_exactly_or_fail():
    """The red-team cases: the def line retyped before a region inside it (at the file's indentation,
    or with the body as shown); two lines swapped; a region that moved its first line down; an answer
    that has only some of the lines it seems to skip; an unchanged line that repeats the line before."""
    file = "def setup():\n    connect()\n    load_config()\n    start_workers()\n"
    document = Document.from_text(file, "app.py")

    def place(span, answer):
        return scoped_text(document, (span,), (), FENCE, answer + FENCE + "\n")

    swapped = "def setup():\n    load_config()\n    connect()\n    start_workers()\n"
    assert place((2, 4), "def setup():\n    connect()\n    load_config()\n    start_workers()\n").text == file
    assert place((2, 4), "def setup():\nload_config()\nconnect()\nstart_workers()\n").text == swapped
    assert place((2, 3), "def setup():\n    load_config()\n    connect()\n    start_workers()\n").text == swapped
    assert place((2, 3), "load_config()\nconnect()\n").text == swapped
    assert place((2, 4), "load_config()\nconnect()\nstart_workers()\n").text == swapped
    assert place((2, 4), "load_config()\nstart_workers()\n").text == file  # line 2 skipped: put back
    partial = place((2, 4), "load_config()\nconnect()\n")
    assert partial.problem == (
        "lines 2-4: the answer ends with line 2 yet has only some of lines 3-4, so it cannot be placed in them exactly"
    )
    nested = place((2, 4), "    def setup():\n    connect()\n    load_config()\n    start_workers()\n")
    assert "retypes line 1 (def setup():)" in nested.problem
    emptied = place((3, 3), "")  # an answer with no line: the region deleted, nothing to indent
    assert (emptied.text, emptied.problem) == ("def setup():\n    connect()\n    start_workers()\n", "")
    repeated = Document.from_text("def f():\n    x = 1\n    x = 1\n    y = 2\n", "a.py")
    assert scoped_text(repeated, ((3, 3),), (), FENCE, "x = 1\n" + FENCE + "\n").text == repeated.text
