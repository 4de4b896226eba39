"""The token-level program FSM on hand-written vocabularies: the exact allowed set at every step."""

import itertools
import random

import numpy as np
import pytest

from cadedit.text import program
from cadedit.decode.fsm import GRAMMAR_PATH, compile_grammar, line_viable, load_syntax, read_syntax
from cadedit.errors import ProgramError
from cadedit.text.program import Copy
from cadedit.backends.vocab import Vocab

PIECES = [
    "<program>\n",
    "<",
    "copy",
    ' lines="',
    "1",
    "2",
    "0",
    "12",
    "-",
    '"/>\n',
    '"/',
    ">\n<",
    "gen",
    ">\n",
    "</",
    "gen>",
    "program>",
    "x",
    "</gen>\n",
    "\n",
    "<|im_end|>",
    "<|im_start|>",
]
EOS, SPECIAL = 20, 21
VOCAB = Vocab(tuple(p.encode() for p in PIECES), frozenset({EOS}), frozenset({SPECIAL}))
ID = {p: i for i, p in enumerate(PIECES)}
BODY_ALL = set(range(20))  # inside a gen body every ordinary token is text

# (token taken, exact allowed set after it) for N=12, monotonic, canonical program
#   <program>\n<copy lines="1-2"/>\n<gen>\nx</gen>\n<copy lines="12-12"/>\n</program>\n
WALK = [
    (None, {"<program>\n", "<"}),
    ("<program>\n", {"<"}),  # no `</`: a program has at least one op
    ("<", {"copy", "gen", "gen>"}),
    ("copy", {' lines="'}),
    (' lines="', {"1", "2", "12"}),  # no leading zero
    ("1", {"1", "2", "0", "-"}),  # 11, 12, 10 fit; 112 does not
    ("-", {"1", "2", "12"}),
    ("2", {'"/>\n', '"/'}),  # 2x > 12
    ('"/', {">\n<", ">\n"}),  # `>\n<` closes the copy and opens the next op
    (">\n<", {"copy", "gen", "gen>"}),  # still no `</` after `<`
    ("gen", {">\n", ">\n<"}),  # `>\n<` enters the body and writes `<`
    (">\n", BODY_ALL),
    ("x", BODY_ALL),
    ("</", BODY_ALL - {ID["program>"]}),  # `</program>` is reserved; `</gen>` closes
    ("gen>", {"\n"}),
    ("\n", {"<", "</"}),
    ("<", {"copy", "gen", "gen>"}),
    ("copy", {' lines="'}),
    (' lines="', {"1", "12"}),  # monotonic: starts at 3 or later, so not `2`
    ("12", {"-"}),
    ("-", {"1", "12"}),
    ("12", {'"/>\n', '"/'}),
    ('"/>\n', {"<", "</"}),  # line 13 > N: no copy left, `<` for a gen or `</` to close
    ("</", {"program>"}),
    ("program>", {"\n", "<|im_end|>"}),
    ("\n", {"<|im_end|>"}),
    ("<|im_end|>", set()),
]


def ids_of(pieces):
    return {ID[p] if isinstance(p, str) else p for p in pieces}


def test_syntax_literals_come_from_the_grammar_file_and_match_program_py():
    sx = load_syntax()
    assert sx.open == program.OPEN.encode() and sx.close == program.CLOSE.encode()
    assert sx.copy_open == program.COPY_OPEN.encode() and sx.copy_close == program.COPY_CLOSE.encode()
    assert sx.gen_open == program.GEN_OPEN.encode() and sx.gen_close == program.GEN_CLOSE.encode()
    assert set(sx.reserved) == {r.encode() for r in program.RESERVED}
    assert sx.copy_sep == b"-" and sx.close_tail == b"\n" and sx.body_end == b"</gen>"


def test_a_grammar_file_in_an_unknown_shape_is_refused():
    text = GRAMMAR_PATH.read_text()
    with pytest.raises(ProgramError, match="copy"):
        read_syntax(text.replace('LINE "-" LINE', 'LINE ":" LINE ":" LINE'))


def test_reserved_literals_the_body_automaton_cannot_handle_are_refused():
    text = GRAMMAR_PATH.read_text()
    with pytest.raises(ProgramError, match="reserved"):
        read_syntax(text.replace("<\\/program>)", "x<\\/program>)"))
    with pytest.raises(ProgramError, match="reserved"):
        read_syntax(text.replace("<\\/gen>|", "<\\/gen<|"))


def test_every_step_of_a_program_has_exactly_the_expected_allowed_set():
    cursor = compile_grammar(VOCAB).for_document(12).cursor()
    for taken, expected in WALK:
        if taken is not None:
            assert cursor.advance(ID[taken]), (cursor.text(), taken)
        allowed = set(cursor.allowed_ids().tolist())
        assert allowed == ids_of(expected), (cursor.text(), sorted(PIECES[i] for i in allowed))
        assert set(np.flatnonzero(cursor.allowed_mask()).tolist()) == allowed
    assert cursor.text() == '<program>\n<copy lines="1-2"/>\n<gen>\nx</gen>\n<copy lines="12-12"/>\n</program>\n'
    assert program.parse(cursor.text()).copies == (Copy(1, 2), Copy(12, 12))


def test_disallowed_tokens_are_refused_and_leave_the_state_unchanged():
    cursor = compile_grammar(VOCAB).for_document(12).cursor()
    for token in range(len(PIECES)):
        if token not in (ID["<program>\n"], ID["<"]):
            assert not cursor.advance(token)
    assert cursor.text() == "" and not cursor.advance(-1) and not cursor.advance(len(PIECES))
    cursor.advance(ID["<program>\n"])
    assert not cursor.advance(ID["</"]) and not cursor.advance(EOS) and not cursor.advance(SPECIAL)
    assert cursor.text() == "<program>\n"


def advance_all(cursor, pieces):
    for piece in pieces:
        assert cursor.advance(ID[piece]), (cursor.text(), piece)


def test_completed_copy_is_reported_by_the_token_that_closes_it():
    cursor = compile_grammar(VOCAB).for_document(12).cursor()
    advance_all(cursor, ["<program>\n", "<", "copy", ' lines="', "1", "-", "2", '"/'])
    assert cursor.completed_copy() is None
    advance_all(cursor, [">\n<"])
    assert cursor.completed_copy() == Copy(1, 2)
    advance_all(cursor, ["gen"])
    assert cursor.completed_copy() is None
    cursor.rollback(1)
    assert cursor.completed_copy() == Copy(1, 2)


def test_monotonic_off_allows_copies_in_any_order():
    grammar = compile_grammar(VOCAB)
    text = ["<program>\n", "<", "copy", ' lines="', "12", "-", "12", '"/>\n', "<", "copy", ' lines="']
    on, off = grammar.for_document(12).cursor(), grammar.for_document(12, monotonic=False).cursor()
    advance_all(on, text[:8])
    assert set(on.allowed_ids().tolist()) == ids_of({"<", "</"})
    assert on.advance(ID["<"]) and not on.advance(ID["copy"])
    advance_all(off, text)
    assert set(off.allowed_ids().tolist()) == ids_of({"1", "2", "12"})


def test_forced_literals_stop_at_the_op_boundary_and_at_decisions():
    grammar = compile_grammar(VOCAB)
    cursor = grammar.for_document(12).cursor()
    assert cursor.forced() == (ID["<program>\n"],)
    advance_all(cursor, ["<program>\n"])
    assert cursor.forced() == ()  # the `<` of an op is the model's
    advance_all(cursor, ["<", "copy"])
    assert cursor.forced() == (ID[' lines="'],)
    advance_all(cursor, [' lines="', "12"])
    assert cursor.forced() == (ID["-"], ID["12"], ID['"/>\n'])  # N=12: only 12-12 is left
    advance_all(cursor, ["-", "12", '"/'])
    assert cursor.forced() == (ID[">\n"],)
    advance_all(cursor, [">\n", "</"])
    assert cursor.forced() == (ID["program>"],)
    advance_all(cursor, ["program>"])
    assert cursor.forced() == ()  # the final newline is optional: EOS or "\n"


def test_a_one_line_file_forces_the_whole_copy():
    cursor = compile_grammar(VOCAB).for_document(1).cursor()
    advance_all(cursor, ["<program>\n", "<", "copy"])
    assert cursor.forced() == tuple(ID[p] for p in [' lines="', "1", "-", "1", '"/>\n'])


def test_an_empty_file_allows_only_gens():
    cursor = compile_grammar(VOCAB).for_document(0).cursor()
    advance_all(cursor, ["<program>\n", "<"])
    assert set(cursor.allowed_ids().tolist()) == ids_of({"gen", "gen>"})


def test_forced_uses_the_tokenizers_own_encoding_when_given():
    grammar = compile_grammar(VOCAB, encode=lambda s: [ID["<"], ID["program>"], ID["\n"]] if s == "<program>\n" else [])
    assert grammar.for_document(3).cursor().forced() == (ID["<"], ID["program>"], ID["\n"])
    wrong = compile_grammar(VOCAB, encode=lambda s: [ID["x"]])  # not those bytes: fall back to greedy
    assert wrong.for_document(3).cursor().forced() == (ID["<program>\n"],)


def test_rollback_restores_the_state():
    cursor = compile_grammar(VOCAB).for_document(12).cursor()
    advance_all(cursor, ["<program>\n", "<", "gen", ">\n", "x"])
    before = set(cursor.allowed_ids().tolist())
    advance_all(cursor, ["</", "gen>", "\n"])
    cursor.rollback(3)
    assert cursor.text() == "<program>\n<gen>\nx" and set(cursor.allowed_ids().tolist()) == before
    with pytest.raises(ValueError):
        cursor.rollback(6)


def test_eos_only_when_done_and_nothing_after_it():
    cursor = compile_grammar(VOCAB).for_document(3).cursor()
    advance_all(cursor, ["<program>\n", "<", "gen", ">\n", "</gen>\n", "</", "program>"])
    assert cursor.is_done() and cursor.allowed_mask()[EOS]
    assert cursor.advance(EOS) and cursor.is_done()
    assert not cursor.allowed_mask().any() and cursor.forced() == () and not cursor.advance(ID["\n"])


# -- gen bodies: reserved literals and UTF-8 --------------------------------------------------

BODY_PIECES = [
    "<program>\n<gen>\n",
    "<",
    "/",
    "gen",
    ">",
    "copy",
    "program",
    "</",
    "</gen>",
    "\n",
    "\xe2\x9f",
    "\xa8",
    "\x9f\xa8",
    "\xff",
    "\xc0\x80",
    "\xed\xa0\x80",
    "a",
    "gen>\n<",
]
BODY_VOCAB = Vocab(tuple(p.encode("latin-1") for p in BODY_PIECES))
B = {p: i for i, p in enumerate(BODY_PIECES)}


def body_cursor(*pieces):
    cursor = compile_grammar(BODY_VOCAB).for_document(5).cursor()
    for piece in ("<program>\n<gen>\n",) + pieces:
        assert cursor.advance(B[piece]), (cursor.text(), piece)
    return cursor


def allowed_pieces(cursor):
    return {BODY_PIECES[i] for i in cursor.allowed_ids().tolist()}


VALID_TEXT = {"<", "/", "gen", ">", "copy", "program", "</", "</gen>", "\n", "\xe2\x9f", "a", "gen>\n<"}


@pytest.mark.parametrize(
    "prefix, expected",
    [
        ((), VALID_TEXT),  # bad UTF-8 (lone continuation, 0xFF, overlong, surrogate) never
        (("<",), VALID_TEXT - {"copy", "gen>\n<"}),  # `<copy` and `<gen>` are reserved
        (("<", "/"), VALID_TEXT),  # `</program` and `</copy` are not reserved yet
        (("</", "program"), VALID_TEXT - {">"}),  # `</program>` is
        (("</", "copy"), VALID_TEXT - {">"}),
        (("</", "gen"), VALID_TEXT),  # `>` closes the body here; `gen>\n<` too
        (("\xe2\x9f",), {"\xa8"}),  # inside a character: only its last byte, not `</`
        (("a", "<"), VALID_TEXT - {"copy", "gen>\n<"}),
    ],
)
def test_body_allowed_sets(prefix, expected):
    assert allowed_pieces(body_cursor(*prefix)) == expected


@pytest.mark.parametrize(
    "tokens",
    [("</", "gen", ">"), ("<", "/", "gen", ">"), ("</gen>",), ("</", "gen>\n<")],
)
def test_gen_close_is_recognised_however_it_is_tokenised(tokens):
    cursor = body_cursor(*tokens)
    assert cursor.text().endswith("</gen>" if tokens[-1] != "gen>\n<" else "</gen>\n<")
    if tokens[-1] != "gen>\n<":
        assert allowed_pieces(cursor) == {"\n"}


def test_gen_close_split_inside_a_token_boundary_is_not_a_close():
    cursor = body_cursor("<", "/", "gen", "a", ">")  # `</gena>` is text
    assert allowed_pieces(cursor) == VALID_TEXT


def test_a_split_character_completes_and_then_the_body_can_close():
    cursor = body_cursor("\xe2\x9f", "\xa8", "</gen>", "\n")
    assert cursor.text() == "<program>\n<gen>\n\u27e8</gen>\n"  # U+27E8 is the escape: it reads as `<`
    assert program.parse(cursor.text() + "</program>").ops == (program.Gen("<"),)


# -- line numbers against a brute-force oracle ------------------------------------------------

DIGIT_PIECES = [str(d) for d in range(10)]
DIGIT_PIECES += ["10", "12", "123", "00", "05", "99", "-", '"/>\n', '"', "1-", "-1", '2"/>\n']
PREFIX_PIECES = ["<program>\n", "<copy", ' lines="', "<gen>\n", "</gen>\n"]
NUM_VOCAB = Vocab(tuple(p.encode() for p in DIGIT_PIECES + PREFIX_PIECES))
NUM = {p: i for i, p in enumerate(DIGIT_PIECES + PREFIX_PIECES)}


def valid_copy_texts(low, n_lines):
    return [f'{i}-{j}"/>\n' for i in range(low, n_lines + 1) for j in range(i, n_lines + 1)]


@pytest.mark.parametrize("n_lines", [1, 2, 9, 10, 11, 12, 19, 99, 100, 101, 123, 130])
@pytest.mark.parametrize("previous_end", [None, 1, 9, 12])
def test_line_number_masks_match_brute_force(n_lines, previous_end):
    grammar = compile_grammar(NUM_VOCAB)
    head = ["<program>\n"]
    if previous_end is not None:
        if previous_end > n_lines:
            return
        head += ["<copy", ' lines="'] + list(str(previous_end)) + ["-"] + list(str(previous_end)) + ['"/>\n']
    low = 1 if previous_end is None else previous_end + 1
    if low > n_lines:
        return
    texts = valid_copy_texts(low, n_lines)
    reachable = {t[:k] for t in texts for k in range(len(t) + 1)}
    prefixes = sorted(p for p in reachable if p and '"' not in p[:-1] and "/" not in p)
    for prefix in [""] + random.Random(n_lines).sample(prefixes, min(80, len(prefixes))):
        cursor = grammar.for_document(n_lines).cursor()
        for piece in head + ["<copy", ' lines="'] + list(prefix):
            assert cursor.advance(NUM[piece]), (cursor.text(), piece)
        expected = {NUM[p] for p in DIGIT_PIECES if prefix + p in reachable}
        allowed = set(cursor.allowed_ids().tolist()) & set(range(len(DIGIT_PIECES)))
        assert allowed == expected, (n_lines, low, prefix)


def test_line_viable_matches_enumeration():
    for low, high in itertools.product(range(1, 40, 3), range(0, 130, 7)):
        for value in range(1, 200):
            want = any(str(x).startswith(str(value)) for x in range(low, high + 1))
            assert line_viable(value, low, high) == want, (value, low, high)


def test_a_new_document_reuses_the_compiled_tables():
    first = compile_grammar(Vocab(VOCAB.tokens, VOCAB.eos_ids, VOCAB.special_ids))
    second = compile_grammar(VOCAB)
    assert first.tables is second.tables
    assert second.for_document(5).tables is second.tables


def test_masks_are_read_only_so_the_cache_cannot_be_corrupted():
    mask = compile_grammar(VOCAB).for_document(5).cursor().allowed_mask()
    with pytest.raises(ValueError):
        mask[0] = False


def test_random_corruptions_never_get_past_the_first_invalid_token():
    rng = random.Random(7)
    grammar = compile_grammar(VOCAB)
    for _ in range(300):
        cursor = grammar.for_document(12).cursor()
        for _step in range(30):
            token = rng.randrange(len(PIECES))
            allowed = bool(cursor.allowed_mask()[token])
            assert cursor.advance(token) == allowed


# -- Figure 7 and masks shared across copies --------------------------------------------------

FIG7_AFTER_WALK = [
    "AWAIT_OP",
    "AWAIT_OP",
    "AFTER_LT",
    "AFTER_LT",
    "COPY_LINES",
    "COPY_LINES",
    "COPY_LINES",
    "COPY_LINES",
    "COPY_LINES",
    "AFTER_LT",
    "AFTER_LT",
    "GEN_BODY",
    "GEN_BODY",
    "GEN_BODY",
    "GEN_BODY",
    "AWAIT_OP",
    "AFTER_LT",
    "AFTER_LT",
    "COPY_LINES",
    "COPY_LINES",
    "COPY_LINES",
    "COPY_LINES",
    "AWAIT_OP",
    "CLOSE",
    "CLOSE",
    "CLOSE",
    "CLOSE",
]


def test_each_state_of_the_walk_refines_its_figure7_state():
    constraint = compile_grammar(VOCAB).for_document(12)
    cursor, seen = constraint.cursor(), []
    for taken, _ in WALK:
        if taken is not None:
            assert cursor.advance(ID[taken])
        seen.append(constraint.program_state(cursor.state).name)
    assert seen == FIG7_AFTER_WALK


# Tokens that reach a copy's line digits from a gen body, an op boundary and `<`: their masks
# depend on where the next copy may start, so they are not shared with the states before the copy.
REACH_PIECES = [
    "<program>\n",
    '<copy lines="',
    "1",
    "2",
    "3",
    "-",
    '"/>\n',
    "<gen>\n",
    "x",
    "</gen>\n",
    '</gen>\n<copy lines="1',
    '<copy lines="2',
    "<",
    'copy lines="2',
    "</program>",
    "<|im_end|>",
]
HOLD_OPENER = ('</gen>\n<copy lines="1', '<copy lines="2')  # the whole copy opener and a digit


def reach_cursor(pieces, n_lines):
    vocab = Vocab(tuple(p.encode() for p in pieces), frozenset({len(pieces) - 1}))
    constraint = compile_grammar(vocab).for_document(n_lines)
    cursor, ids = constraint.cursor(), {p: i for i, p in enumerate(pieces)}

    def advance(*taken):
        for piece in taken:
            assert cursor.advance(ids[piece]), (cursor.text(), piece)

    def allowed():
        mask = cursor.allowed_mask()
        by_bytes = [constraint.run(cursor.state, t)[0] is not None for t in vocab.tokens[:-1]]
        assert mask[:-1].tolist() == by_bytes, cursor.text()
        return {pieces[i] for i in np.flatnonzero(mask)}

    return cursor, advance, allowed


def test_masks_that_reach_line_digits_follow_the_previous_copy():
    cursor, advance, allowed = reach_cursor(REACH_PIECES, 3)
    advance("<program>\n", "<gen>\n", "x")
    assert '</gen>\n<copy lines="1' in allowed()  # the next copy may start at 1
    advance("</gen>\n", '<copy lines="', "1", "-", "1", '"/>\n')
    assert '<copy lines="2' in allowed()
    advance("<")
    assert 'copy lines="2' in allowed()
    cursor.rollback(1)
    advance("<gen>\n", "x")
    assert '</gen>\n<copy lines="1' not in allowed()  # the same body state, but copies start at 2 now
    advance("</gen>\n", '<copy lines="', "2", "-", "2", '"/>\n')
    assert '<copy lines="2' not in allowed() and "<" in allowed()  # from 3 on
    advance("<")
    assert 'copy lines="2' not in allowed()


def test_a_token_that_ends_the_copy_opener_and_reads_a_digit_follows_the_previous_copy():
    cursor, advance, allowed = reach_cursor([p for p in REACH_PIECES if p not in HOLD_OPENER], 3)
    advance("<program>\n", "<gen>\n", "</gen>\n", "<")
    assert 'copy lines="2' in allowed()
    advance('copy lines="2', "-", "2", '"/>\n', "<")  # the same op state, but copies start at 3 now
    assert 'copy lines="2' not in allowed()
