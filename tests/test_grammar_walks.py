"""The program FSM on a real-format tokenizer (tests/tinytok.py): random walks that must all parse
and resolve, masks checked token by token against the FSM itself and against llguidance."""

import random
import re

import numpy as np
import pytest

from cadedit.text import program
from cadedit.text.document import Document
from cadedit.decode.fsm import BODY, END, GRAMMAR_PATH, OP, STOP, compile_grammar
from cadedit.text.resolve import Bounds, resolve
from cadedit.backends.vocab import vocab_from_tokenizer
from tinytok import make_tokenizer

CLOSING_TEXT = '0123456789-"/>\n</gen>\n</program>\n'


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def grammar(tok):
    return compile_grammar(vocab_from_tokenizer(tok), encode=lambda s: tok.encode(s, add_special_tokens=False))


def closing_ids(tok):
    """Tokens of canonical structural text (digits, separators, closes)."""
    return {t for piece in CLOSING_TEXT.split() + ["</", "gen", "program", ">\n", '"/>\n'] for t in tok.encode(piece)}


def finishing_token(cursor, allowed, tok, closing, rng):
    """A token that heads for the end of the program: close the body, close the program."""
    state = cursor.state
    want = None
    if state[0] == BODY:
        node = state[1].decode()
        want = "</gen>"[len(node) :] if "</gen>".startswith(node) else "</gen>"
    elif state[0] == OP and not state[1]:  # close the program, or one more op
        if rng.random() < 0.7:
            return rng.choice([t for t in allowed if not tok.decode([t]).startswith("</")])
        want = "</"
    if want is not None:
        first = tok.encode(want, add_special_tokens=False)[0]
        if cursor.allowed_mask()[first]:
            return first
    if state[0] == END:
        return tok.eos_token_id
    return rng.choice([t for t in allowed if t in closing] or allowed)


def random_program(cursor, rng, tok, budget):
    """Sample uniformly among allowed tokens (forced ones taken as forced half the time); after
    `budget` tokens, head for the end. Returns the tokens taken."""
    closing, taken = closing_ids(tok), []
    while cursor.state[0] != STOP:
        assert len(taken) < budget + 1000, f"no way to finish: {cursor.text()[-200:]!r}"
        late = len(taken) > budget
        forced = cursor.forced()
        if forced and (late or rng.random() < 0.5):
            for t in forced:
                assert cursor.advance(t)
            taken += forced
            continue
        allowed = cursor.allowed_ids().tolist()
        assert allowed, cursor.text()
        t = finishing_token(cursor, allowed, tok, closing, rng) if late else rng.choice(allowed)
        assert cursor.advance(t), (cursor.text(), t)
        taken.append(t)
    return taken


def document(n_lines):
    return Document.from_text("".join(f"line {k}\n" for k in range(1, n_lines + 1)))


@pytest.mark.parametrize(
    "n_lines, monotonic, count",
    [(1, True, 400), (2, True, 300), (37, True, 500), (37, False, 300), (1200, True, 500), (1200, False, 200)],
)
def test_random_walks_always_parse_and_resolve(tok, grammar, n_lines, monotonic, count):
    rng = random.Random(n_lines * 2 + monotonic)
    constraint, doc = grammar.for_document(n_lines, monotonic), document(n_lines)
    for _ in range(count):
        cursor = constraint.cursor()
        random_program(cursor, rng, tok, budget=rng.choice([5, 20, 60, 150]))
        text = cursor.text()
        parsed = program.parse(text)
        assert parsed.ops, text
        resolve(parsed, doc, Bounds.STRICT)
        ends = [c.end for c in parsed.copies]
        if monotonic:
            assert all(c.start > prev for c, prev in zip(parsed.copies, [0] + ends)), text
        assert tok.decode(cursor.tokens[:-1]) == text


def test_completed_copies_replay_the_programs_copies(tok, grammar):
    rng = random.Random(3)
    constraint = grammar.for_document(40)
    for _ in range(200):
        cursor = constraint.cursor()
        taken = random_program(cursor, rng, tok, budget=10)
        replay, seen = constraint.cursor(), []
        for t in taken:
            replay.advance(t)
            if replay.completed_copy() is not None:
                seen.append(replay.completed_copy())
        assert tuple(seen) == program.parse(cursor.text()).copies


def brute_force_mask(constraint, state):
    """Every token read byte by byte through the FSM: the definition the masks must equal."""
    vocab = constraint.tables.vocab
    usable = constraint.tables.index.usable
    mask = np.array(
        [bool(usable[t]) and constraint.run(state, tok)[0] is not None for t, tok in enumerate(vocab.tokens)]
    )
    if state[0] == END:
        mask[list(vocab.eos_ids)] = True
    return mask


def test_masks_equal_the_byte_machine_on_every_token_at_every_step(tok, grammar):
    rng = random.Random(11)
    for n_lines, monotonic in [(1, True), (12, True), (120, False)]:
        constraint = grammar.for_document(n_lines, monotonic)
        for _ in range(6):
            cursor = constraint.cursor()
            random_program(cursor, rng, tok, budget=25)
            replay = constraint.cursor()
            for t in cursor.tokens:
                if replay.state[0] == STOP:
                    break
                assert np.array_equal(replay.allowed_mask(), brute_force_mask(constraint, replay.state)), replay.text()
                replay.advance(t)


# -- llguidance, driven by grammars/program.lark -------------------------------------------------
#
# The FSM's rules beyond the grammar's syntax are stated for llguidance as follows, so the two must
# agree on every mask: `op*` becomes `op+` (a program is never empty); `LINE "-" LINE` becomes the
# enumeration of every "I-J" with 1 <= I <= J <= N (small N); BODY, whose lookahead llguidance does
# not take, becomes a lazy lexeme up to the first `</gen>` that contains no other reserved literal.
# Monotonic copies cannot be said in Lark, so the FSM runs with monotonic=False here (the walks
# above check monotonic programs). `no_forcing` stops llguidance from narrowing a forced literal
# to its canonical tokens: the FSM allows every tokenisation of it.


def llguidance_grammar(n_lines):
    text = GRAMMAR_PATH.read_text()
    reserved = re.search(r"\(\?!(.*?)\)\(", text).group(1)
    pairs = " | ".join(f'"{i}-{j}"' for i in range(1, n_lines + 1) for j in range(i, n_lines + 1))
    rules = {
        "start": lambda line: line.replace("op*", "op+"),
        "copy": lambda line: line.replace('LINE "-" LINE', "PAIR") + "\nPAIR: " + pairs,
        "gen": lambda line: line.replace('BODY "</gen>\\n"', 'body "\\n"'),
        "BODY": lambda line: (
            "body[lazy]: /(?s:.*)<\\/gen>/ & ~/(?s:.*)(" + reserved.replace("<\\/gen>|", "") + ")(?s:.*)/"
        ),
    }
    lines = []
    for line in text.splitlines():
        name = line.split(":", 1)[0]
        lines.append(rules[name](line) if name in rules and ":" in line else line)
    return '%llguidance {"no_forcing": true}\n' + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def lltok(tok):
    llguidance_hf = pytest.importorskip("llguidance.hf")
    return llguidance_hf.from_tokenizer(tok)


def llguidance_mask(matcher, size):
    bits = np.frombuffer(matcher.compute_bitmask(), np.uint8)
    return np.unpackbits(bits, bitorder="little")[:size].astype(bool)


def corrupt(text, rng):
    pieces = ["<", "</", "gen>", "copy", "\n", '"', "-", "0", "99", "</program>", "\u27e8", "é", ">"]
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(chars) + 1)
        action = rng.choice(["insert", "delete", "replace"])
        if action == "insert":
            chars.insert(k, rng.choice(pieces))
        elif chars and k < len(chars):
            chars[k] = rng.choice(pieces) if action == "replace" else ""
    return "".join(chars)


def compare_on_tokens(matcher, cursor, tokens, size):
    """Walk both over tokens while they accept; masks must match at every step.
    Returns (steps compared, whether both refused a token)."""
    for step, t in enumerate(tokens):
        assert np.array_equal(llguidance_mask(matcher, size), cursor.allowed_mask()), (step, cursor.text())
        accepted = cursor.advance(t)
        assert accepted == bool(matcher.consume_token(t)), (cursor.text(), t)
        if not accepted:
            return step + 1, True
    return len(tokens), False


@pytest.mark.parametrize("n_lines", [1, 12])
def test_masks_match_llguidance_on_random_and_corrupted_programs(tok, grammar, lltok, n_lines):
    import llguidance

    lark = llguidance_grammar(n_lines)
    constraint, size = grammar.for_document(n_lines, monotonic=False), len(tok)
    rng, steps, refused = random.Random(n_lines), 0, 0
    for trial in range(200):
        cursor = constraint.cursor()
        tokens = random_program(cursor, rng, tok, budget=rng.choice([5, 15, 40]))
        if trial % 2:
            tokens = tok.encode(corrupt(cursor.text(), rng), add_special_tokens=False) + [tok.eos_token_id]
        matcher = llguidance.LLMatcher(lltok, lark, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        compared, stopped = compare_on_tokens(matcher, constraint.cursor(), tokens, size)
        steps, refused = steps + compared, refused + stopped
    assert steps > 3000 and refused > 30


# -- the paper's Figure 7 ------------------------------------------------------------------------

# Its edges, read a byte at a time: an op starts with `<` at the op boundary, `</` passes through
# `<` on its way to the close, a copy's digits and a gen body each lead back to the op boundary.
FIGURE7_EDGES = {
    ("AWAIT_OP", "AFTER_LT"),
    ("AFTER_LT", "COPY_LINES"),
    ("AFTER_LT", "GEN_BODY"),
    ("AFTER_LT", "CLOSE"),
    ("COPY_LINES", "AWAIT_OP"),
    ("GEN_BODY", "AWAIT_OP"),
}


def figure7_path(constraint, tokens, vocab):
    """The Figure 7 state after each byte of the tokens, runs of one state merged."""
    state, path = constraint.start, [constraint.program_state(constraint.start).name]
    for byte in b"".join(vocab.tokens[t] for t in tokens if t not in vocab.eos_ids):
        state = constraint.step(state, byte)
        name = constraint.program_state(state).name
        if name != path[-1]:
            path.append(name)
    return path


@pytest.mark.parametrize("n_lines, monotonic", [(1, True), (37, True), (37, False)])
def test_random_walks_follow_the_figure7_transitions(tok, grammar, n_lines, monotonic):
    rng, vocab = random.Random(n_lines + monotonic), grammar.vocab
    constraint = grammar.for_document(n_lines, monotonic)
    for _ in range(150):
        cursor = constraint.cursor()
        tokens = random_program(cursor, rng, tok, budget=rng.choice([5, 20, 60]))
        path, parsed = figure7_path(constraint, tokens, vocab), program.parse(cursor.text())
        assert all(edge in FIGURE7_EDGES for edge in zip(path, path[1:])), (path, cursor.text())
        assert path[0] == "AWAIT_OP" and path[-1] == "CLOSE" and path.count("CLOSE") == 1
        assert path.count("COPY_LINES") == len(parsed.copies)  # each copy passes through its digits once
        assert path.count("GEN_BODY") == len(parsed.ops) - len(parsed.copies)
        assert constraint.program_state(cursor.state).name == "CLOSE" and cursor.state[0] == STOP
