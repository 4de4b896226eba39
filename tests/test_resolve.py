"""The resolver is byte-exact on oracle programs, strict on bad copies, and clips when asked."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadedit.text.document import BOM, Document
from cadedit.errors import ProgramError
from cadedit.text.oracle import oracle
from cadedit.text.program import Copy, Gen, Program, format, parse
from cadedit.text.resolve import Bounds, resolve, resolve_ops

# Small line pool so that before/after share many lines; random terminators incl. none at the end.
line_bodies = st.sampled_from(
    ["", " ", "\t", "x", "x ", "def f():", "    return 1", "}", "</gen>", "<copy", "\u27e8", "é"]
)
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
    result = resolve_ops(Program((Copy(2, 9), Copy(3, 1), Copy(7, 9))), doc, Bounds.CLIPPED)
    assert result.text == "b\nc\na\nb\nc\n"
    assert len(result.warnings) == 3
    assert 'clipped to <copy lines="2-3"/>' in result.warnings[0]
    assert result.warnings[2].endswith("clipped to nothing")


def test_resolve_is_deterministic():
    doc = Document.from_text("a\nb\n")
    program = Program((Copy(1, 2), Gen("c\n")))
    assert {resolve(program, doc) for _ in range(5)} == {"a\nb\nc\n"}


# -- the BOM, last-line and CRLF rules, across the resolver, the oracle and the display form -------

from cadedit.errors import ProgramError as _ProgramError  # noqa: E402
from cadedit.text.resolve import to_display_program, to_document_program  # noqa: E402

plain_bodies = st.sampled_from(["", "x", "y = 2", "    return 1", "é", "\t"])


@st.composite
def consistent_documents(draw):
    """A file as editors write them: one newline kind, maybe a BOM, maybe no final newline."""
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    bodies = draw(st.lists(plain_bodies, min_size=1, max_size=8))
    text = newline.join(bodies) + ("" if draw(st.booleans()) and bodies[-1] else newline)
    return Document.from_text((BOM if draw(st.booleans()) else "") + text), newline


@st.composite
def display_programs(draw, n_lines: int):
    """What a model writes: copies in range, gens of whole lines (each ending in "\\n")."""
    ops = []
    for _ in range(draw(st.integers(0, 5))):
        if n_lines and draw(st.booleans()):
            start = draw(st.integers(1, n_lines))
            ops.append(Copy(start, draw(st.integers(start, n_lines))))
        else:
            ops.append(Gen("".join(body + "\n" for body in draw(st.lists(plain_bodies, min_size=1, max_size=3)))))
    return Program(tuple(ops))


def expected_text(program: Program, document: Document, newline: str) -> str:
    """The model's meaning: copies are whole display lines, the file's newline and BOM come back,
    and the file keeps no final newline only where its unterminated last line ends the output."""
    bodies, parts, open_end = document.display_lines(), [], False
    for op in program.ops:
        if isinstance(op, Copy):
            parts.append("".join(body + "\n" for body in bodies[op.start - 1 : op.end]))
            open_end = op.end == document.n_lines and not document.text.endswith(("\n", "\r"))
        elif op.text:
            parts.append(op.text)
            open_end = False
    text = "".join(parts)
    if open_end:
        text = text[:-1]
    return (BOM if document.bom else "") + text.replace("\n", document.newline)  # "\n" for a file without one


@settings(max_examples=1500, deadline=None)
@given(st.data())
def test_a_models_program_means_the_same_in_the_files_own_bytes(data):
    document, newline = data.draw(consistent_documents())
    program = data.draw(display_programs(document.n_lines))
    assert resolve(to_document_program(program, document), document) == expected_text(program, document, newline)


@settings(max_examples=1500, deadline=None)
@given(st.data())
def test_oracle_programs_survive_the_display_form_and_back(data):
    before, newline = data.draw(consistent_documents())
    program = data.draw(display_programs(before.n_lines))
    after = Document.from_text(resolve(to_document_program(program, before), before))
    oracle_program = oracle(before, after)
    assert resolve(oracle_program, before) == after.text
    assert resolve(to_document_program(to_display_program(oracle_program, before), before), before) == after.text
    assert after.text.count(BOM) == before.text.count(BOM)  # a BOM never moves into the middle


@settings(max_examples=500, deadline=None)
@given(edits())
def test_a_program_written_with_crlf_line_ends_is_refused_when_it_has_a_gen(pair):
    program = oracle(*pair)
    text = format(program).replace("\n", "\r\n")
    if any(isinstance(op, Gen) for op in program.ops):
        with pytest.raises(_ProgramError, match="CR line ends"):
            parse(text)
    else:
        assert parse(text) == program
