"""Scope resolution: which lines an edit may change, from --lines/--scope or the instruction."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cadedit.text.document import Document
from cadedit.errors import CadeditError, ScopeError
from cadedit.scope.outline import outline
from cadedit.scope.plan import Region, Scope, find_line_refs, merge_regions, parse_line_ranges, resolve_scope

PY = """\
import os

LIMIT = 10


def parse_args(argv):
    opts = {}
    for arg in argv:
        opts[arg] = True
    return opts


def outer(xs):
    total = 0

    def inner(x):
        return x * 2

    for x in xs:
        total += inner(x)
    return total


# Loads the settings.
# Called once at start-up.
@cache
@register(
    name="load",
)
def load_settings(path):
    return open(path).read()


# A comment that a blank line keeps apart.

@cache
def save_settings(path, text):
    # helper_in_comment is only mentioned here, never defined
    return write(path, text)


class Reader:
    kind = "reader"

    def read(self, path):
        return open(path).read()

    def close(self):
        pass


class Writer:
    def read(self):
        return None
"""


def at(src: str, snippet: str) -> int:
    """The 1-based line of the first line of src that contains snippet."""
    return next(k for k, line in enumerate(src.splitlines(), 1) if snippet in line)


def spans(scope: Scope) -> list[tuple[int, int]]:
    return [(r.start, r.end) for r in scope.regions]


def doc(src: str = PY, path: str = "src/app.py") -> Document:
    return Document.from_text(src, path)


PARSE_ARGS = (at(PY, "def parse_args"), at(PY, "return opts"))
OUTER = (at(PY, "def outer"), at(PY, "return total"))
INNER = (at(PY, "def inner"), at(PY, "return x * 2"))
LOAD = (at(PY, "# Loads the settings."), at(PY, "return open(path).read()"))
READER = (at(PY, "class Reader"), at(PY, "pass"))
WRITER_READ = (at(PY, "    def read(self):"), at(PY, "return None"))


# -- definitions named in the instruction --------------------------------------------------------


def test_a_function_named_in_the_instruction_is_its_whole_definition():
    scope = resolve_scope(doc(), "parse_args crashes on an empty list")
    assert spans(scope) == [PARSE_ARGS]
    assert scope.regions[0].reason == "function parse_args"


def test_backticked_names_match_and_partial_identifiers_do_not():
    assert spans(resolve_scope(doc(), "Make `parse_args` return a dict")) == [PARSE_ARGS]
    # parse_args_v2 and my_outer are other identifiers: no definition is named, so the whole file.
    assert resolve_scope(doc(), "Call parse_args_v2 from my_outer").whole_file


def test_a_nested_function_is_its_own_region_not_the_function_around_it():
    assert spans(resolve_scope(doc(), "inner should triple x")) == [INNER]


def test_decorators_and_the_comments_directly_above_belong_to_the_definition():
    scope = resolve_scope(doc(), "load_settings should cache nothing")
    assert spans(scope) == [LOAD]
    assert PY.splitlines()[LOAD[0] - 1] == "# Loads the settings."


def test_a_comment_kept_apart_by_a_blank_line_does_not_belong_to_the_definition():
    (region,) = resolve_scope(doc(), "save_settings must fsync").regions
    assert (region.start, region.end) == (at(PY, "def save_settings") - 1, at(PY, "return write(path"))
    assert PY.splitlines()[region.start - 1] == "@cache"


def test_a_hash_line_inside_a_string_above_a_definition_is_not_a_comment():
    src = 'HELP = """\n# usage: tool """\ndef tool():\n    pass\n'
    assert spans(resolve_scope(doc(src), "tool is wrong")) == [(3, 4)]


def test_every_name_counts_even_a_plain_word_since_a_larger_scope_is_safe():
    # "close" is the English verb here, but dropping a name could drop the function to edit.
    close = (at(PY, "def close"), at(PY, "pass"))
    assert spans(resolve_scope(doc(), "load_settings should close the file")) == [LOAD, close]
    # A backticked name next to a plain one: both, or the function to edit (outer) would be lost.
    assert spans(resolve_scope(doc(), "Return a `Reader` from outer")) == [OUTER, READER]


def test_a_name_that_the_file_mentions_only_in_a_comment_gives_no_region():
    scope = resolve_scope(doc(), "Define helper_in_comment")
    assert scope.whole_file
    assert "names no line or definition" in scope.note


def test_a_qualified_method_is_that_method_and_a_bare_shared_name_is_every_method():
    reader_read = (at(PY, "def read(self, path)"), at(PY, "def read(self, path)") + 1)
    writer_read = (at(PY, "def read(self):"), at(PY, "return None"))
    assert spans(resolve_scope(doc(), "Reader.read must use a context manager")) == [reader_read]
    assert spans(resolve_scope(doc(), "Writer::read should raise")) == [writer_read]
    scope = resolve_scope(doc(), "every read method should log")
    assert spans(scope) == [reader_read, writer_read]
    assert [r.reason for r in scope.regions] == ["method Reader.read", "method Writer.read"]


def test_a_class_named_in_the_instruction_is_the_whole_class():
    assert spans(resolve_scope(doc(), "Make Reader count its instances")) == [READER]


def test_a_new_method_of_a_named_class_is_its_end_not_the_whole_class():
    """Adding is not changing: the new method goes after the class's last method, and only the lines
    from there to the next code are retyped (issue 64)."""
    scope = resolve_scope(doc(), "Add a flush method to Reader")
    close_end = at(PY, "pass")
    assert spans(scope) == [(at(PY, "def close"), at(PY, "class Writer") - 1)]  # close is short: retyped whole
    (region,) = scope.regions
    assert region.insert_after == close_end and scope.as_json()[0]["insert_after"] == close_end
    assert "the end of class Reader, after method Reader.close (chosen" in region.reason


def test_two_regions_are_sorted_and_touching_ones_merged():
    scope = resolve_scope(doc(), "Rename `Writer.read` and `parse_args`")
    assert spans(scope) == [PARSE_ARGS, WRITER_READ]
    # outer and inner overlap: one region, both reasons.
    (merged,) = resolve_scope(doc(), "inner and outer").regions
    assert (merged.start, merged.end) == OUTER
    assert merged.reason == "function outer; function outer.inner"


def test_no_line_and_no_definition_named_is_the_whole_file():
    scope = resolve_scope(doc(), "Add type hints everywhere")
    assert scope.whole_file and scope.as_json() == []
    assert scope.describe() == "scope: whole file (the instruction names no line or definition of this file)"


# -- line references in the instruction ----------------------------------------------------------

LINE = at(PY, "opts[arg] = True")  # inside parse_args


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        (f"Fix line {LINE}", (LINE, LINE)),
        (f"The bug is on Line {LINE}.", (LINE, LINE)),
        (f"lines {LINE}-{LINE + 1}", (LINE, LINE + 1)),
        (f"lines {LINE} to {LINE + 1}", (LINE, LINE + 1)),
        (f"see L{LINE}", (LINE, LINE)),
        (f"see L{LINE - 1}-L{LINE}", (LINE - 1, LINE)),
        (f"https://example.com/blob/main/src/app.py#L{LINE}", (LINE, LINE)),
        (f"app.py:{LINE}: E501 line too long", (LINE, LINE)),
        (f"src/app.py:{LINE}:7: F841 unused variable", (LINE, LINE)),
    ],
)
def test_every_line_reference_form_is_those_lines_and_later_tries_get_the_function(instruction, expected):
    scope = resolve_scope(doc(), instruction)
    assert spans(scope) == [expected]
    assert scope.regions[0].reason.endswith("in the instruction, in function parse_args")
    # Each line is a whole statement; `opts[arg] = True` alone then has its loop as the next scope.
    loop = ((LINE - 1, LINE),)
    assert scope.wider_ranges == ((loop, (PARSE_ARGS,)) if expected == (LINE, LINE) else ((PARSE_ARGS,),))


def levels(scope: Scope) -> list[list[tuple[int, int]]]:
    """The scope of try 1, then each wider one."""
    return [spans(scope)] + [list(level) for level in scope.wider_ranges]


def test_a_traceback_frame_is_the_whole_function_since_the_fix_may_be_elsewhere_in_it():
    tb = f'Traceback (most recent call last):\n  File "/repo/src/app.py", line {LINE}, in parse_args\nKeyError'
    scope = resolve_scope(doc(), tb)
    assert spans(scope) == [PARSE_ARGS]
    assert scope.regions[0].reason.endswith("in the instruction, in function parse_args")
    assert scope.wider == ()


STATEMENTS = (
    """\
def f(items, flag):
    total = 0
    for item in items:
        if item and \\
                flag:
            total += 1
        elif item:
            pass
        else:
            # nothing to count
            total -= 1
    values = [
        1,
        2,
    ]
    table = {
"""
    + "".join(f"        {k}: {k},\n" for k in range(30))
    + """\
    }
    return total
"""
)


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        # a compound statement's header, then the whole statement, then the function
        ("for item in items:", [[(3, 3)], [(3, 11)], [(1, 48)]]),
        ("if item and", [[(4, 4)], [(4, 5)], [(4, 11)], [(1, 48)]]),  # a header over two lines
        ("                flag:", [[(5, 5)], [(4, 5)], [(4, 11)], [(1, 48)]]),
        ("total += 1", [[(6, 6)], [(4, 11)], [(1, 48)]]),  # a simple statement is its line: then its block
        ("elif item:", [[(7, 7)], [(7, 11)], [(1, 48)]]),
        ("        else:", [[(9, 9)], [(7, 11)], [(1, 48)]]),  # no statement starts here: the line itself
        ("# nothing to count", [[(10, 10)], [(7, 11)], [(1, 48)]]),
        ("    values = [", [[(12, 12)], [(12, 15)], [(1, 48)]]),  # a statement over several lines: all of it
        ("        1,", [[(13, 13)], [(12, 15)], [(1, 48)]]),
        ("        7: 7,", [[(24, 24)], [(1, 48)]]),  # in a 32-line statement: the line alone
    ],
)
def test_a_line_then_its_statement_then_its_block_then_the_function(snippet, expected):
    assert len(STATEMENTS.splitlines()) == 48 and at(STATEMENTS, snippet) == expected[0][0][0]
    assert levels(resolve_scope(doc(STATEMENTS), f"line {at(STATEMENTS, snippet)}")) == expected


def test_a_block_longer_than_the_limit_is_skipped_for_the_function():
    src = "def f(xs):\n    for x in xs:\n" + "        y = x\n" * 45 + "    return y\n"
    assert levels(resolve_scope(doc(src), "line 5")) == [[(5, 5)], [(1, 48)]]


def test_the_def_line_of_a_function_is_the_whole_function():
    scope = resolve_scope(doc(), f"line {PARSE_ARGS[0]} takes one more argument")
    assert spans(scope) == [PARSE_ARGS]
    assert scope.wider == ()


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        ("Fix line 95", [(95, 95)]),
        ("lines 10-20 and lines 3 to 4", [(10, 20), (3, 4)]),
        ("from line 5 to line 9", [(5, 9)]),
        ("lines 3, 5 and 7-9", [(3, 3), (5, 5), (7, 9)]),
        ("L10-L20 then L7", [(10, 20), (7, 7)]),
        ("app.py:12:3: E501 and tool.py:4", [(12, 12)]),
        ("use the L2 norm and an L1 cache", []),
        ("meet at 10:30 on localhost:8080", []),
        ("a split_lines 3 helper", []),
    ],
)
def test_line_references_are_read_in_order_and_other_files_are_skipped(instruction, expected):
    assert [(r.start, r.end) for r in find_line_refs(instruction, "src/app.py")] == expected


def test_a_traceback_counts_only_the_frames_of_this_file():
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main\n'
        f'  File "/repo/src/app.py", line {at(PY, "total += inner(x)")}, in outer\n'
        f'  File "/repo/src/app.py", line {at(PY, "return x * 2")}, in inner\n'
        "TypeError: unsupported operand\n"
    )
    scope = resolve_scope(doc(), tb)
    # Both frames of app.py land in outer (inner is inside it); runpy.py line 198 is not this file.
    assert spans(scope) == [OUTER]


def test_path_references_count_for_any_file_like_path_when_the_document_has_none():
    refs = find_line_refs('tool.py:4 and File "x.py", line 9 and Note:3', "<stdin>")
    assert [(r.start, r.label) for r in refs] == [(4, "tool.py:4"), (9, 'File "x.py", line 9')]
    assert find_line_refs("tool.py:4", "src/app.py") == ()


def test_a_top_level_line_stays_that_line_only():
    scope = resolve_scope(doc(), f"line {at(PY, 'LIMIT = 10')} should be 20")
    assert spans(scope) == [(3, 3)]
    assert scope.describe() == "scope: line 3 (line 3 in the instruction)"


def test_a_line_in_a_class_body_but_no_method_stays_that_line():
    line = at(PY, 'kind = "reader"')
    assert spans(resolve_scope(doc(), f"line {line}")) == [(line, line)]


def test_a_line_of_a_nested_function_widens_to_the_innermost_one_on_later_tries():
    line = at(PY, "return x * 2")
    assert levels(resolve_scope(doc(), f"line {line}")) == [[(line, line)], [INNER]]
    line = at(PY, "total = 0")
    assert levels(resolve_scope(doc(), f"line {line}")) == [[(line, line)], [OUTER]]


def test_a_range_over_two_functions_spans_both():
    scope = resolve_scope(doc(), f"lines {LINE}-{at(PY, 'total = 0')}")
    (region,) = scope.regions
    assert (region.start, region.end) == (LINE, at(PY, "total = 0"))
    assert scope.wider_ranges == (((PARSE_ARGS[0], OUTER[1]),),)
    assert scope.wider[0][0].reason.endswith("in function parse_args and function outer")


def test_line_references_win_over_names_in_the_instruction():
    scope = resolve_scope(doc(), f"In Reader.read, see line {LINE}")
    assert levels(scope) == [[(LINE, LINE)], [(LINE - 1, LINE)], [PARSE_ARGS]]


def test_a_line_past_the_end_is_a_one_line_error_naming_the_reference_and_the_length():
    n = len(PY.splitlines())
    with pytest.raises(ScopeError) as info:
        resolve_scope(doc(), f"Fix parse_args at line {n + 1}")
    assert str(info.value) == f"line {n + 1} in the instruction: app.py has {n} lines"
    assert "\n" not in str(info.value) and info.value.exit_code == 1
    with pytest.raises(ScopeError, match=r"^lines 1-99 in the instruction: the file has 2 lines$"):
        resolve_scope(Document.from_text("a\nb\n"), "lines 1-99")


def test_a_range_written_backwards_in_the_instruction_is_an_error():
    with pytest.raises(ScopeError, match="^lines 9-3 in the instruction: start after end$"):
        resolve_scope(doc(), "lines 9-3")


# -- --lines and --scope ---------------------------------------------------------------------------


def test_options_win_over_everything_in_the_instruction():
    scope = resolve_scope(doc(), f"parse_args, line {LINE}", lines=["1-2", "5"], names=["Writer.read"])
    assert spans(scope) == [(1, 2), (5, 5), WRITER_READ]
    assert [r.reason for r in scope.regions] == ["--lines 1-2", "--lines 5", "method Writer.read"]


def test_lines_are_taken_as_given_without_widening():
    assert spans(resolve_scope(doc(), "", lines=[str(LINE)])) == [(LINE, LINE)]


def test_a_scope_name_shared_by_two_classes_is_both_methods():
    assert spans(resolve_scope(doc(), "", names=["read"])) == [
        (at(PY, "def read(self, path)"), at(PY, "def read(self, path)") + 1),
        WRITER_READ,
    ]


def test_an_unknown_scope_name_is_an_error_that_lists_what_the_file_defines():
    with pytest.raises(ScopeError) as info:
        resolve_scope(doc(), "parse_args", names=["helper_in_comment"])
    message = "--scope helper_in_comment: app.py defines no function, method or class named helper_in_comment"
    assert str(info.value) == message
    assert info.value.hint.startswith("defined there: parse_args, outer, outer.inner, load_settings")


def test_lines_past_the_end_are_an_error():
    with pytest.raises(ScopeError, match=r"^--lines 40-400: app.py has \d+ lines$"):
        resolve_scope(doc(), "", lines=["40-400"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("10-20", (10, 20)), ("7", (7, 7)), (" 3 - 4 ", (3, 4)), ("5\u20136", (5, 6)), ("2:9", (2, 9))],
)
def test_parse_line_ranges_reads_a_range_or_one_line(spec, expected):
    assert parse_line_ranges(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("20-10", "--lines 20-10: start after end"),
        ("x", "--lines x: not a line range"),
        ("", "--lines : not a line range"),
        ("1-2-3", "--lines 1-2-3: not a line range"),
        ("0-4", "--lines 0-4: lines are numbered from 1"),
    ],
)
def test_parse_line_ranges_refuses_bad_input_in_one_line(spec, message):
    with pytest.raises(ScopeError) as info:
        parse_line_ranges(spec)
    assert str(info.value) == message and isinstance(info.value, CadeditError)


# -- files that do not parse, line endings -------------------------------------------------------


def test_a_python_file_that_does_not_parse_is_the_whole_file_never_a_crash():
    broken = PY.replace("def outer(xs):", "def outer(xs:")
    for instruction in ("parse_args is slow", f"line {LINE}", "anything"):
        scope = resolve_scope(doc(broken), instruction)
        assert scope.whole_file
        assert scope.note.startswith(f"app.py does not parse as Python (line {at(PY, 'def outer')}")
    assert spans(resolve_scope(doc(broken), "", lines=["2-3"])) == [(2, 3)]
    with pytest.raises(ScopeError, match="^--scope parse_args: app.py does not parse as Python"):
        resolve_scope(doc(broken), "", names=["parse_args"])


def test_a_file_of_an_unknown_language_is_the_whole_file_for_instruction_references():
    scope = resolve_scope(Document.from_text("a\nb\nc\n", "notes.txt"), "line 2")
    assert scope.whole_file and "no parser" in scope.note


@pytest.mark.parametrize(
    "data",
    [
        PY.replace("\n", "\r\n").encode(),
        ("\ufeff" + PY).encode(),
        ("\ufeff" + PY.replace("\n", "\r\n")).encode(),
        PY.replace("\n", "\r").encode(),
    ],
    ids=["crlf", "bom", "bom-crlf", "cr"],
)
def test_crlf_cr_and_bom_files_count_lines_as_document_does(data):
    document = Document.from_bytes(data, "app.py")
    assert document.n_lines == len(PY.splitlines())
    assert spans(resolve_scope(document, "parse_args and load_settings")) == [PARSE_ARGS, LOAD]
    line = at(PY, "return x * 2")
    assert resolve_scope(document, f"line {line}").wider_ranges == ((INNER,),)
    assert spans(resolve_scope(document, f"line {line}")) == [(line, line)]
    with pytest.raises(ScopeError, match=f"has {document.n_lines} lines$"):
        resolve_scope(document, f"line {document.n_lines + 1}")


# -- JavaScript and TypeScript -------------------------------------------------------------------

JS = """\
import fs from "fs";

/**
 * Sum of a list.
 */
export function sum(xs) {
  let total = 0;
  for (const x of xs) total += x;
  return total;
}

const double = (x) => {
  return x * 2;
};

let legacy = function (a) {
  // helperInComment is only named in this comment
  return a;
};

class Cart {
  constructor() {
    this.items = [];
  }

  // Adds one item.
  add(item) {
    this.items.push(item);
  }

  onClick = (event) => {
    this.add(event.item);
  };
}

function outer() {
  function inner() {
    return 1;
  }
  return inner();
}
"""


def jsdoc(src: str = JS, path: str = "web/cart.js") -> Document:
    return Document.from_text(src, path)


@pytest.mark.parametrize(
    ("instruction", "first", "last"),
    [
        ("sum ignores negatives", "/**", "  return total;"),
        ("double should triple", "const double", "return x * 2"),
        ("legacy must copy a", "let legacy", "  return a;"),
        ("Cart.add should dedupe", "// Adds one item.", "this.items.push"),
        ("onClick should stop propagation", "onClick = (event)", "this.add(event.item)"),
        ("inner returns 2", "function inner", "    return 1;"),
    ],
)
def test_javascript_definitions_come_from_tree_sitter(instruction, first, last):
    # Each definition ends on the line that closes it, just after `last`.
    assert spans(resolve_scope(jsdoc(), instruction)) == [(at(JS, first), at(JS, last) + 1)]


def test_a_javascript_class_and_a_line_in_a_method():
    cart = (at(JS, "class Cart"), at(JS, "  };") + 1)
    assert spans(resolve_scope(jsdoc(), "Cart needs a clear method")) == [cart]
    add = (at(JS, "// Adds one item."), at(JS, "this.items.push") + 1)
    line = at(JS, "this.items.push")
    assert levels(resolve_scope(jsdoc(), f"line {line}")) == [[(line, line)], [add]]


def test_a_javascript_line_is_its_statement_and_a_header_only_its_line():
    loop = at(JS, "for (const x of xs)")
    assert spans(resolve_scope(jsdoc(), f"line {loop}")) == [(loop, loop)]
    src = "function f(x) {\n  if (x) {\n    return g(\n      x,\n    );\n  } else {\n    return 0;\n  }\n}\n"
    document = Document.from_text(src, "f.js")
    # `if (x) {`: its header, then the whole if statement; a line in a call over three lines: the
    # call, then the if around it; `} else {`: the line, then the if.
    assert levels(resolve_scope(document, "line 2")) == [[(2, 2)], [(2, 8)], [(1, 9)]]
    assert levels(resolve_scope(document, "line 4")) == [[(4, 4)], [(3, 5)], [(2, 8)], [(1, 9)]]
    assert levels(resolve_scope(document, "line 6")) == [[(6, 6)], [(2, 8)], [(1, 9)]]


def test_a_javascript_name_only_in_a_comment_gives_no_region():
    assert resolve_scope(jsdoc(), "helperInComment").whole_file


def test_typescript_decorators_and_exports_belong_to_the_definition():
    ts = (
        "// The view.\n"
        "@Component({ selector: 'x' })\n"
        "export class View<T> {\n"
        "  @Input() name: string = '';\n"
        "\n"
        "  @HostListener('click')\n"
        "  onClick(): void {\n"
        "    console.log(this.name);\n"
        "  }\n"
        "}\n"
    )
    document = Document.from_text(ts, "view.ts")
    assert spans(resolve_scope(document, "View")) == [(1, 10)]
    assert spans(resolve_scope(document, "View.onClick")) == [(6, 9)]
    tsx = Document.from_text("export const App = () => <div>hi</div>;\n", "app.tsx")
    assert spans(resolve_scope(tsx, "App")) == [(1, 1)]


def test_javascript_that_does_not_parse_is_the_whole_file():
    scope = resolve_scope(jsdoc(JS.replace("const double = (x) =>", "const double = (x =>")), "double")
    assert scope.whole_file and scope.note.startswith("cart.js does not parse as JavaScript (line ")


def test_without_tree_sitter_javascript_is_the_whole_file_with_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "tree_sitter", None)  # import tree_sitter now raises ImportError
    scope = resolve_scope(jsdoc(), "sum ignores negatives")
    assert scope.whole_file and scope.note.startswith("tree-sitter is not installed")
    assert resolve_scope(Document.from_text("def sum(): pass\n", "a.py"), "sum").regions  # Python is unaffected
    with pytest.raises(ScopeError, match="^--scope sum: tree-sitter is not installed"):
        resolve_scope(jsdoc(), "", names=["sum"])


def test_the_language_can_be_given_for_a_file_without_a_path():
    stdin = Document.from_text(PY, "<stdin>")
    assert resolve_scope(stdin, "parse_args").whole_file
    assert spans(resolve_scope(stdin, "parse_args", language="python")) == [PARSE_ARGS]
    with pytest.raises(ScopeError, match="^language 'cobol': expected one of python"):
        resolve_scope(stdin, "x", language="cobol")


# -- the records -----------------------------------------------------------------------------------


def test_merge_keeps_apart_regions_with_a_gap_and_joins_touching_ones():
    merged = merge_regions([Region(10, 12, "b"), Region(1, 3, "a"), Region(4, 5, "c"), Region(4, 5, "c")])
    assert merged == (Region(1, 5, "a; c"), Region(10, 12, "b"))


def test_describe_and_json_for_regions():
    scope = Scope((Region(88, 104, "function parse_args"), Region(120, 120, "--lines 120")))
    assert scope.describe() == "scope: lines 88-104 (function parse_args), line 120 (--lines 120)"
    assert scope.as_json() == [
        {"start": 88, "end": 104, "reason": "function parse_args"},
        {"start": 120, "end": 120, "reason": "--lines 120"},
    ]
    assert not scope.whole_file


def test_outline_qualnames_and_kinds():
    kinds = {d.qualname: d.kind for d in outline(doc(), "python").definitions}
    assert kinds == {
        "parse_args": "function",
        "outer": "function",
        "outer.inner": "function",
        "load_settings": "function",
        "save_settings": "function",
        "Reader": "class",
        "Reader.read": "method",
        "Reader.close": "method",
        "Writer": "class",
        "Writer.read": "method",
    }


def test_scope_imports_no_torch():
    code = "import sys, cadedit.scope.plan; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_prose_is_docstring_and_whole_line_comment_lines_and_never_a_string_in_code():
    src = (
        '"""Module."""\n# note\ndef f(x):\n    """Doc\n    more."""\n    s = """\n# not a comment\n"""\n'
        '    return x  # trailing\n'
    )
    assert sorted(outline(doc(src), "python", prose=True).prose) == [1, 2, 4, 5]
    one_line = "def f(): 'Doc.'; return 1\nclass C:\n    \"\"\"Doc.\"\"\"; x = 1\n"
    assert outline(doc(one_line), "python", prose=True).prose == frozenset()  # each line holds code too


def test_javascript_prose_is_comment_lines_with_nothing_else_on_them():
    pytest.importorskip("tree_sitter_javascript")
    src = (
        "/* Adds.\n   Twice. */\nconst f = (x) => {\n  // why\n  return x + 1; // trailing\n  /* a */ let y = 2;\n"
        "  const s = 'éé' /* é */\n  /* é */ // é\n};\n"
    )
    found = outline(Document.from_text(src, "f.js"), "javascript", prose=True)
    assert found.known and sorted(found.prose) == [1, 2, 4, 8]  # columns count bytes: é is two
    assert found.code_lines(1, 9) == (3, 5, 6, 7, 9) and found.code_lines(1, 2) == (1, 2)
