"""The resolver is byte-exact on oracle programs, strict on bad copies, and clips when asked."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadedit.document import BOM, Document
from cadedit.errors import ProgramError
from cadedit.oracle import oracle
from cadedit.program import Copy, Gen, Program, format, parse
from cadedit.resolve import Mode, resolve, resolve_ops

# Small line pool so that before/after share many lines; random terminators incl. none at the end.
line_bodies = st.sampled_from(["", " ", "\t", "x", "x ", "def f():", "    return 1", "}", "</gen>", "<copy", "\u27e8", "é"])
terminators = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def documents(draw):
    lines = [b + t for b, t in draw(st.lists(st.tuples(line_bodies, terminators), max_size=15))]
    if draw(st.booleans()):
        lines.append(draw(line_bodies.filter(bool)))  # no final newline
    text = "".join(lines)
    if draw(st.booleans()):
        text = BOM + text
    return Document.from_text(text)


@st.composite
def edits(draw):
    before = draw(documents())
    lines = list(before.lines)
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.integers(0, len(lines)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        new = draw(line_bodies) + draw(terminators)
        if action == "insert" or not lines or k == len(lines):
            lines.insert(k, new)
        elif action == "delete":
            del lines[k]
        else:
            lines[k] = new
    return before, Document.from_text("".join(lines))


@settings(max_examples=3000, deadline=None)
@given(edits())
def test_oracle_round_trips_byte_exactly(pair):
    before, after = pair
    program = oracle(before, after)
    assert resolve(program, before).encode() == after.to_bytes()
    assert resolve(parse(format(program)), before) == after.text


@settings(max_examples=500, deadline=None)
@given(documents(), documents())
def test_oracle_round_trips_unrelated_documents(before, after):
    assert resolve(oracle(before, after), before) == after.text


GOLDEN = [
    ("crlf", "a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"),
    ("no final newline", "a\nb", "a\nb\nc"),
    ("final newline removed", "a\nb\n", "a\nb"),
    ("bom kept", BOM + "x = 1\ny = 2\n", BOM + "x = 1\ny = 3\n"),
    ("bom removed", BOM + "x = 1\n", "x = 1\n"),
    ("tabs and trailing spaces", "\tif x:  \n\t\treturn 1 \n", "\tif x:  \n\t\treturn 2 \n"),
    ("blank line runs", "a\n\n\n\nb\n", "a\n\nb\n\n\n"),
    ("empty before", "", "new\n"),
    ("empty after", "old\n", ""),
    ("both empty", "", ""),
    ("line ending change", "a\nb\n", "a\r\nb\n"),
    ("mixed", "a\r\nb\rc\n", "a\r\nx\rc\n"),
]


@pytest.mark.parametrize("name, before, after", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_round_trips(name, before, after):
    b, a = Document.from_text(before), Document.from_text(after)
    assert resolve(oracle(b, a), b).encode() == a.to_bytes()


def test_copies_keep_terminators_and_gens_are_verbatim():
    doc = Document.from_text("one\r\ntwo\nthree")
    program = Program((Copy(2, 3), Gen("!\n"), Copy(1, 1)))
    # "three" has no terminator; output follows it, so it gets the file's newline (first of the tied)
    assert resolve(program, doc) == "two\nthree\r\n!\none\r\n"


@pytest.mark.parametrize(
    "op, message",
    [
        (Copy(0, 2), 'program op 2: `<copy lines="0-2"/>` but the file has 3 lines'),
        (Copy(2, 4), 'program op 2: `<copy lines="2-4"/>` but the file has 3 lines'),
        (Copy(3, 2), 'program op 2: `<copy lines="3-2"/>` starts after it ends'),
    ],
)
def test_strict_mode_raises_with_op_number(op, message):
    doc = Document.from_text("a\nb\nc\n")
    with pytest.raises(ProgramError) as exc:
        resolve(Program((Gen("x\n"), op)), doc)
    assert str(exc.value) == message


def test_clipped_mode_clips_and_warns():
    doc = Document.from_text("a\nb\nc\n")
    result = resolve_ops(Program((Copy(2, 9), Copy(3, 1), Copy(7, 9))), doc, Mode.CLIPPED)
    assert result.text == "b\nc\na\nb\nc\n"
    assert len(result.warnings) == 3
    assert 'clipped to <copy lines="2-3"/>' in result.warnings[0]
    assert result.warnings[2].endswith("clipped to nothing")


def test_resolve_is_deterministic():
    doc = Document.from_text("a\nb\n")
    program = Program((Copy(1, 2), Gen("c\n")))
    assert {resolve(program, doc) for _ in range(5)} == {"a\nb\nc\n"}
