"""Program text: canonical format, strict parse with located errors, and an exact escape."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadedit.errors import ProgramError
from cadedit.text.program import ESC, RESERVED, Copy, Gen, Program, escape, format, parse, unescape

# Adversarial alphabet: pieces of every reserved literal, the escape character, newlines.
pieces = st.sampled_from(
    list(RESERVED) + ["<", "/", ">", "gen", "copy", "program", ESC, ESC * 2, "\n", "\r\n", "a", " ", '"']
)
adversarial = st.lists(pieces | st.text(max_size=3), max_size=20).map("".join)


@settings(max_examples=10_000, deadline=None)
@given(adversarial)
def test_escape_is_an_exact_inverse_on_adversarial_strings(text):
    escaped = escape(text)
    assert not any(r in escaped for r in RESERVED)
    assert unescape(escaped) == text


@given(st.text(max_size=40))
def test_escape_round_trips_any_text(text):
    assert unescape(escape(text)) == text


ops = st.one_of(
    st.builds(Copy, st.integers(1, 2000), st.integers(1, 2000)),
    st.builds(Gen, adversarial),
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(ops, max_size=8))
def test_parse_inverts_format(op_list):
    program = Program(tuple(op_list))
    assert parse(format(program)) == program


def test_canonical_text():
    program = Program((Copy(1, 3), Gen("    return a + b\n"), Copy(5, 9)))
    assert format(program) == (
        "<program>\n<copy lines=\"1-3\"/>\n<gen>\n    return a + b\n</gen>\n<copy lines=\"5-9\"/>\n</program>\n"
    )


def test_file_containing_reserved_literals_is_expressible():
    text = 'x = "</gen>" + "<copy lines=\\"1-2\\"/>"\n'
    program = Program((Gen(text),))
    assert "</gen>" not in format(program)[len("<program>\n<gen>\n") : -len("</gen>\n</program>\n")]
    assert parse(format(program)).ops[0].text == text


def test_whitespace_between_ops_is_allowed():
    text = '  <program>  <copy lines="2-4"/>\n\n  <gen>x\n</gen></program>\n\n'
    assert parse(text) == Program((Copy(2, 4), Gen("x\n")))


@pytest.mark.parametrize(
    "text, message",
    [
        ("<prog>", "program (line 1): expected '<program>', found '<prog>'"),
        ('<program>\n<copy lines="0-2"/>', "op 1 (line 2): expected <copy lines=\"I-J\"/> with 1-based line numbers"),
        ('<program>\n<copy lines="1-2"/>\n<copy line="3-4"/>', "op 2 (line 3): expected <copy lines="),
        ("<program>\n<gen>\nabc", "op 1 (line 2): expected '</gen>' to close this gen, found '<gen>\\nabc'"),
        ("<program>\n<gen>\na<copy</gen>\n</program>", "op 1 (line 3): expected escaped text inside <gen>"),
        ("<program>\n<delete/>", "op 1 (line 2): expected '<copy', '<gen>' or '</program>', found '<delete/>'"),
        ("<program>\n</program>\nmore", "program (line 3): expected nothing after '</program>', found 'more'"),
        ("<program>\n", "op 1 (line 2): expected '<copy', '<gen>' or '</program>', found end of text"),
    ],
)
def test_parse_errors_name_the_op_and_quote_the_text(text, message):
    with pytest.raises(ProgramError) as exc:
        parse(text)
    assert str(exc.value).startswith(message)


def test_records_are_frozen():
    with pytest.raises(AttributeError):
        Copy(1, 2).start = 3
