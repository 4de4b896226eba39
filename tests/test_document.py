"""Documents keep every byte: terminators, a missing final newline, a BOM; bad files are refused."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadedit.text.document import BOM, Document, line_body, line_terminator, split_lines
from cadedit.errors import DocumentError

terminators = st.sampled_from(["\n", "\r\n", "\r"])
bodies = st.text(alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=["Cs"]), max_size=12)


@st.composite
def line_lists(draw):
    lines = draw(st.lists(st.tuples(bodies, terminators), max_size=12))
    text = "".join(b + t for b, t in lines)
    if draw(st.booleans()):
        text += draw(bodies)  # maybe an unterminated last line
    if draw(st.booleans()):
        text = BOM + text
    return text


@given(line_lists())
def test_bytes_round_trip(text):
    data = text.encode("utf-8")
    doc = Document.from_bytes(data)
    assert doc.to_bytes() == data
    assert "".join(doc.lines) == text


@pytest.mark.parametrize(
    "text, lines",
    [
        ("", ()),
        ("a", ("a",)),
        ("a\n", ("a\n",)),
        ("a\r\nb\rc\nd", ("a\r\n", "b\r", "c\n", "d")),
        ("\n\n\n", ("\n", "\n", "\n")),
        ("x\r\r\n", ("x\r", "\r\n")),
        ("\tt  \n", ("\tt  \n",)),
    ],
)
def test_split_lines_keeps_terminators(text, lines):
    assert split_lines(text) == lines


def test_line_parts():
    assert line_body("ab\r\n") == "ab" and line_terminator("ab\r\n") == "\r\n"
    assert line_body("ab") == "ab" and line_terminator("ab") == ""


def test_bom_and_newline_and_display():
    doc = Document.from_bytes((BOM + "a\r\nb\r\nc").encode())
    assert doc.bom and doc.newline == "\r\n"
    assert doc.display_lines() == ["a", "b", "c"]
    assert doc.display_text(1, 3) == "a\nb\nc"
    assert doc.display_text(2, 2) == "b\n"


def test_numbered_rendering_pads_numbers():
    doc = Document.from_text("".join(f"l{k}\n" for k in range(1, 11)))
    shown = doc.numbered().splitlines()
    assert shown[0] == " 1 | l1" and shown[9] == "10 | l10"


@pytest.mark.parametrize(
    "data, message",
    [
        (b"a\x00b", "binary file (NUL byte at offset 1)"),
        (b"ok\n\xff\xfe\n", "not UTF-8 (invalid byte 0xff at line 2, offset 3)"),
    ],
)
def test_bad_bytes_are_refused(tmp_path, data, message):
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    with pytest.raises(DocumentError) as exc:
        Document.read(path)
    assert str(exc.value).startswith(f"{path}: {message}")


def test_missing_and_directory_are_refused(tmp_path):
    with pytest.raises(DocumentError, match="no such file"):
        Document.read(tmp_path / "nope.py")
    with pytest.raises(DocumentError, match="is a directory"):
        Document.read(tmp_path)


def test_read_records_stat(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(b"x = 1\n")
    doc = Document.read(path)
    assert doc.size == 6 and doc.mtime_ns == path.stat().st_mtime_ns and doc.path == str(path)
