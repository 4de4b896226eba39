"""The where-step through `cadedit fix --where`: a bug report that names a function but no line finds
the line first -- by default where the model, reading the code, least expected what is written
(--where-by surprise); or asked, a few tokens under a grammar of the function's line numbers
(--where-by number) -- then retypes from that line up the scope ladder; a wrong line costs one
try, the next widens.

The tiny random-weight Qwen2 runs the real decode loop; the asked where-step's answer and each try's
are scripted through tries.edit_verified's picks seam (picks(0) and picks(k), tests/scripting.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from cadedit import cli
from cadedit.decode import script_picker
from cadedit.model import encode, language_model, load_model, token_bytes
from cadedit.where import READ_ON_LINES, READ_ON_PER_LINE, READ_ON_TOKENS, LineNumberCursor, surprise_score
from tests.scripting import inject_picks
from tests.test_scoped import fix, retype, scripted, verbatim, work  # noqa: F401 - fixtures
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures

# `parse` is lines 1-50 (longer than the ladder's block level of 40); the bug is on line 50.
BODY = ["def parse(items):"] + [f"    v{k} = items[{k}] + {k}" for k in range(1, 49)] + ["    return v1 - v2"]
LINES = BODY + ["", "", "print(parse(list(range(60))))"]
BUGGY = "\n".join(LINES) + "\n"
FIXED = BUGGY.replace("return v1 - v2", "return v1 + v2")
VAGUE = "There is a bug in `parse`, fix it."


@pytest.fixture
def where_says(monkeypatch):
    """where_says("50\\n"): the where-step's picker spells that answer; returns the calls made."""
    calls: list[str] = []

    def script(answer: str):
        def picker(loaded):  # called when the where-step runs
            calls.append(answer)
            return script_picker(answer, token_bytes(loaded))

        inject_picks(monkeypatch, lambda k: None if k else picker)
        return calls

    return script


def fixed_line(prepared) -> str:
    return retype(("return v1 - v2", "return v1 + v2"))(prepared)


def unchanged(prepared) -> str:
    return prepared.source


def run(work, tiny_dir, instruction: str = VAGUE, *args: str, by: str = "number"):
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = fix(tiny_dir, instruction, "--json", "--where", "--where-by", by, *args)
    return result, json.loads(result.stdout) if result.stdout.strip().startswith("{") else None


def test_a_vague_bug_report_asks_where_and_retypes_the_line_named(work, tiny_dir, scripted, where_says):
    asked = where_says("50\n")
    calls = scripted(fixed_line)
    result, data = run(work, tiny_dir)
    assert result.exit_code == 0, result.output
    assert asked and data["where"]["lines"] == [50] and data["where"]["asked"] == [[1, 50]]
    assert data["where"]["levels"] == [[[50, 50]], [[1, 50]]]
    assert [t["regions"] for t in data["tries"]] == [[[50, 50]]]
    assert calls[0].prepared.regions == ((50, 50),)  # one line retyped, not the 50-line function
    assert "+    return v1 + v2" in data["diff"]
    assert "where: the model named line 50 of lines 1-50; try 1 retypes line 50" in result.stderr


def test_a_wrong_location_costs_one_try_and_the_next_widens_to_the_function(work, tiny_dir, scripted, where_says):
    where_says("10\n")
    calls = scripted(unchanged, fixed_line)  # line 10 has nothing to fix: copied as it is
    result, data = run(work, tiny_dir)
    assert result.exit_code == 0, result.output
    assert [t["regions"] for t in data["tries"]] == [[[10, 10]], [[1, 50]]]
    assert data["tries"][0]["checks"][1]["detail"] == "the edit changed nothing"
    assert [c.prepared.regions for c in calls] == [((10, 10),), ((1, 50),)]
    assert "try 2 of 3 [scope widened to lines 1-50]" in result.stderr
    assert (work / "a.py").read_text() == BUGGY  # printed, not written
    assert "+    return v1 + v2" in data["diff"]


def test_a_wrong_location_that_fails_the_test_widens_too(work, tiny_dir, scripted, where_says):
    where_says("10\n")
    scripted(retype(("v9 = items[9] + 9", "v9 = items[9] + 8")), fixed_line)
    result, data = run(work, tiny_dir, VAGUE, "--test", "grep -q 'return v1 + v2' a.py")
    assert result.exit_code == 0, result.output
    assert [t["regions"] for t in data["tries"]] == [[[10, 10]], [[1, 50]]]
    assert [t["passed"] for t in data["tries"]] == [False, True]


def test_an_instruction_with_a_line_skips_the_where_step(work, tiny_dir, scripted, where_says):
    asked = where_says("10\n")
    scripted(fixed_line)
    result, data = run(work, tiny_dir, "There is a bug in `parse` on line 50, fix it.")
    assert result.exit_code == 0, result.output
    assert asked == [] and data["where"] is None
    assert data["tries"][0]["regions"] == [[50, 50]]
    assert "where:" not in result.stderr


def test_a_short_function_gets_the_where_step_too(work, tiny_dir, scripted, where_says):
    asked = where_says("2\n")
    (work / "a.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    calls = scripted(retype(("a - b", "a + b")))
    result = fix(tiny_dir, "There is a bug in `add`, fix it.", "--json", "--where", "--where-by", "number")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert asked and data["where"]["lines"] == [2] and data["tries"][0]["regions"] == [[2, 2]]
    assert calls[0].prepared.regions == ((2, 2),)
    assert "+    return a + b" in data["diff"]


def corrected_line(tiny_dir, first: int, last: int) -> int:
    """The line of BUGGY's lines first..last the where-step should name, computed here from whole-text
    forwards (the where-step reads in chunks and crops one cache): each token scores p(the model's
    choice) - p(the token); the READ_ON_LINES lines whose best token scores most are corrected at their
    READ_ON_PER_LINE best tokens -- the choice in the token's place; deleting the token where the
    choice is the token after it; inserting the choice where the model would then write the token --
    and the line whose correction gains the READ_ON_TOKENS tokens after it the most log-probability
    is named."""
    loaded = load_model(str(tiny_dir), "cpu", "fp32", 1)
    ids = encode(loaded.tokenizer, "".join(line + "\n" for line in LINES[:last]))
    lm = language_model(loaded)

    def logprobs(fed):
        lm.reset()
        rows = np.asarray(lm.feed(fed, keep=len(fed)), dtype=np.float64)
        rows = rows - rows.max(axis=1, keepdims=True)
        return rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))

    def gain(changed, kept_from):  # the log-probability ids[kept_from:] gain, read after `changed`
        kept = ids[kept_from : kept_from + READ_ON_TOKENS]
        again = logprobs([*changed, *kept])
        return sum(again[len(changed) + j - 1][t] - read[kept_from + j - 1][t] for j, t in enumerate(kept))

    read, pieces = logprobs(ids), token_bytes(loaded)
    scored: dict[int, list[tuple[float, int]]] = {}  # line: (score, position) of its tokens
    line = 1 + pieces[ids[0]].count(b"\n")
    for i in range(1, len(ids)):
        p = np.exp(read[i - 1])
        if first <= line <= last and p.max() - p[ids[i]] > 0:
            scored.setdefault(line, []).append((p.max() - p[ids[i]], i))
        line += pieces[ids[i]].count(b"\n")
    lines = sorted(scored, key=lambda k: (-max(scored[k])[0], k))[:READ_ON_LINES]
    gains = {}
    for k in lines:
        for _, i in sorted(scored[k], key=lambda found: (-found[0], -found[1]))[:READ_ON_PER_LINE]:
            choice = int(read[i - 1].argmax())
            found = [gain([*ids[:i], choice], i + 1)]
            if i + 1 < len(ids) and choice == ids[i + 1]:
                found.append(gain(ids[:i], i + 1))
            if int(logprobs([*ids[:i], choice])[-1].argmax()) == ids[i]:
                found.append(gain([*ids[:i], choice], i))
            gains[k] = max(gains.get(k, -np.inf), *found)
    lm.reset()
    return max(lines, key=lambda k: (gains[k], -k)) if len(lines) > 1 else lines[0]


def test_by_default_the_where_step_names_the_line_whose_correction_reads_best(work, tiny_dir, scripted):
    """No answer is decoded: the where-step reads the function as code (in several forwards: it is
    longer than one), corrects its most surprising lines and names the one whose correction makes the
    code after it read best; try 1 retypes its statement."""
    expected = corrected_line(tiny_dir, 1, 50)
    calls = scripted(unchanged, fixed_line)
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = fix(tiny_dir, VAGUE, "--json", "--where")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    where = data["where"]
    assert where["by"] == "surprise" and where["lines"] == [expected] and where["forward_passes"] > 1
    assert len(where["read_on"]) == READ_ON_LINES and where["read_on"][0][0] == expected
    assert data["tries"][0]["regions"] == where["levels"][0] == [[expected, expected]]
    assert calls[0].prepared.regions == ((expected, expected),)
    assert f"where: the model would correct line {expected} of lines 1-50" in result.stderr
    assert "+    return v1 + v2" in data["diff"]


def test_a_confident_other_guess_outranks_a_name_the_model_could_not_guess():
    planted = surprise_score(0.99, 0.02)  # it expected `+` (p 0.99) and read `-`
    unfamiliar = surprise_score(0.30, 0.001)  # a new name: its own guess was unsure, the name unlikely
    assert planted == pytest.approx(0.97) and unfamiliar == pytest.approx(0.299) and planted > unfamiliar


def test_the_model_itself_names_a_line_of_the_function(work, tiny_dir, scripted):
    """Unscripted: the tiny model's greedy answer under the cursor is one of the function's lines."""
    scripted(unchanged, unchanged, fixed_line)
    result, data = run(work, tiny_dir, VAGUE, "--verbose", by="number")
    assert result.exit_code == 0, result.output
    lines = data["where"]["lines"]
    assert lines and all(1 <= k <= 50 for k in lines)
    assert data["tries"][0]["regions"] == data["where"]["levels"][0]
    assert data["tries"][-1]["regions"] == [[1, 50]]
    assert "  where: prompt " in result.stderr


def test_the_cursor_allows_only_the_regions_line_numbers(work, tiny_dir):
    pieces = [b"1", b"2", b"5", b"0", b",", b" ", b", ", b"x", b"\n", b""]
    cursor = LineNumberCursor(pieces, [8, 9], range(10, 13), most=2)
    allowed = lambda: {pieces[t] for t in np.flatnonzero(cursor.allowed_mask())}  # noqa: E731
    assert allowed() == {b"1"}  # 10, 11, 12 all start with 1
    assert cursor.advance(0) and allowed() == {b"1", b"2", b"0"}
    assert not cursor.advance(2)  # 15 is not a line of the region
    assert cursor.advance(1) and allowed() == {b",", b", ", b"\n", b""}  # 12: a comma or the end
    assert cursor.advance(6) and allowed() == {b"1"}
    assert cursor.advance(0) and cursor.advance(3) and allowed() == {b"\n", b""}  # two lines: the most
    assert cursor.advance(8) and cursor.is_done() and cursor.lines() == (12, 10)


def test_the_quote_cursor_allows_only_the_regions_lines_text():
    from cadedit.where import LineTextCursor

    pieces = [b"ret", b"urn", b" x", b" y", b"\n", b"", b"pass", b"return"]
    cursor = LineTextCursor(pieces, [4, 5], {1: "def f():", 2: "    return x", 3: "    return y", 4: "    return x"})
    allowed = lambda: {pieces[t] for t in np.flatnonzero(cursor.allowed_mask())}  # noqa: E731
    assert allowed() == {b"ret", b"return"}  # no "pass": no line reads so
    assert cursor.advance(7) and allowed() == {b" x", b" y"}
    assert not cursor.advance(6)
    assert cursor.advance(2) and allowed() == {b"\n", b""}
    assert cursor.advance(4) and cursor.is_done() and cursor.lines() == (2, 4)  # both lines read so


def test_without_where_a_vague_bug_report_retypes_the_function(work, tiny_dir, scripted, where_says):
    asked = where_says("50\n")
    scripted(fixed_line)
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = fix(tiny_dir, VAGUE, "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert asked == [] and data["where"] is None and data["tries"][0]["regions"] == [[1, 50]]


def test_a_located_try_without_a_test_branches_first_where_the_reading_expected_otherwise(work, tiny_dir, scripted):
    """No --test, no --candidates: after the where-step the try decodes branched candidates (as where a test
    decides), so a candidate 1 that copies the line named is not the end; the branches start at the
    tokens the reading expected otherwise (Where.expected), most surprising first."""
    scripted(unchanged)
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = CliRunner().invoke(cli.app, ["fix", "a.py", VAGUE, "--model", str(tiny_dir), "--dtype", "fp32",
                                          "--threads", "1", "--where", "--json"])
    data = json.loads(result.stdout)
    expected = data["where"]["expected"]
    assert expected and all(line == data["where"]["lines"][0] for line, *_ in expected)
    first_try = [t for t in data["tries"] if t["try"] == 1]
    assert first_try[0]["candidate"] == 1 and not first_try[0]["changed"]
    assert "candidate 1 of 4" in result.stderr and len(first_try) > 1


def test_the_expected_token_becomes_a_branch_point_where_candidate_1_has_a_token_at_its_column():
    from cadedit.document import Document
    from cadedit.pipeline import expected_points

    tokens = [b"```\n", b"x", b" =", b" a", b" -", b" b", b"\n", b" +", b"```", b" - b"]
    document = Document.from_text("x = a - b\n", "a.py")
    ids = [0, 1, 2, 3, 4, 5, 6, 8]  # the fenced answer, candidate 1 copying the line
    through = [(k + 1, -0.5 * (k + 1)) for k in range(len(ids))]
    [point] = expected_points(document, [(1, 5, 7, -0.25)], ids, through, tokens)  # column 5: " -"
    assert (point.at, point.token) == (4, 7) and point.logprob == pytest.approx(-2.0 - 0.25)
    assert expected_points(document, [(1, 6, 7, -0.25)], ids, through, tokens) == []  # inside " -"
    merged = [0, 1, 2, 3, 9, 6, 8]  # " - b" as one token: it starts at column 5, so it is replaced whole
    placed = expected_points(document, [(1, 5, 7, -0.25), (1, 6, 7, -0.25)], merged, through, tokens)
    assert [p.at for p in placed] == [4]
    twice = Document.from_text("x = a - b\nx = a - b\n", "a.py")
    assert expected_points(twice, [(1, 5, 7, -0.25)], ids + ids, through, tokens) == []  # the line is there twice


class _Bigram:
    """A language model whose next token depends only on the last one: logits TABLE[last]."""

    TABLE = np.log(np.array([[0.1, 0.8, 0.1],   # after 0: 1 expected
                             [0.1, 0.1, 0.8],   # after 1: 2 expected
                             [0.8, 0.1, 0.1]]))  # after 2: 0 expected

    def __init__(self, ids):
        self.ids = list(ids)

    def feed(self, ids, keep=1):
        self.ids += ids
        return [self.TABLE[t] for t in self.ids[-keep:]]

    def crop(self, n):
        del self.ids[len(self.ids) - n :]


def test_reading_on_prefers_the_correction_the_code_after_it_fits():
    """Under a model whose next token depends on the last one (0 -> 1 -> 2 -> 0 expected), three
    surprising tokens are corrected: the choice in their place, deleted where the choice is the token
    after, inserted where the model would then write the token. Each line's gain is the best of its
    corrections' (what the tokens after the change gain), and the cache is left holding a prefix."""
    from cadedit.where import _Read, read_on

    table = _Bigram.TABLE
    ids = [0, 1, 0, 1, 2, 2, 0, 1, 1, 0, 1]

    def logprob(seq, start):  # the log-probability of seq[start:] after seq[:start]
        return sum(table[seq[k - 1]][seq[k]] for k in range(start, len(seq)))

    written = {i: float(table[ids[i - 1]][ids[i]]) for i in range(1, len(ids))}
    positions = {1: 2, 2: 5, 3: 8}  # line: the surprising token's position
    corrections = [_Read(0.7, -line, 0, int(table[ids[p - 1]].argmax()), np.log(0.8), p,
                         float(table[ids[p - 1]][ids[p + 1]])) for line, p in positions.items()]
    lm = _Bigram(ids)
    gains, fed, forwards = read_on(lm, ids, written, corrections)
    for line, p in positions.items():
        top = int(table[ids[p - 1]].argmax())
        found = [logprob([*ids[:p], top, *ids[p + 1 :]], p + 1) - logprob(ids, p + 1)]  # replaced
        if top == ids[p + 1]:
            found.append(logprob([*ids[:p], *ids[p + 1 :]], p) - logprob(ids, p + 1))  # deleted
        if int(table[top].argmax()) == ids[p]:
            found.append(logprob([*ids[:p], top, *ids[p:]], p + 1) - logprob(ids, p))  # inserted
        assert gains[line] == pytest.approx(max(found))
    replaced_only = logprob([*ids[:5], 0, *ids[6:]], 6) - logprob(ids, 6)
    assert gains[2] > replaced_only  # 2, 2, 0: deleting the second 2 reads better than making it 0
    assert READ_ON_TOKENS >= len(ids) and forwards >= len(positions) and fed > 0 and lm.ids == ids[:2]


def test_the_reading_shows_as_many_lines_before_the_function_as_context_says(work, tiny_dir, scripted):
    """--context N: the reading starts N lines before the function (all: at the file's first line),
    as the prompt does; the lines before it are read, never named."""
    preamble = [f"CONSTANT_{k} = {k} * 3" for k in range(60)]
    (work / "a.py").write_text("\n".join(preamble) + "\n" + BUGGY, encoding="utf-8")
    read = {}
    for context in ("0", "all"):
        scripted(unchanged, fixed_line)
        result = fix(tiny_dir, VAGUE, "--json", "--where", "--context", context)
        assert result.exit_code == 0, result.output
        read[context] = json.loads(result.stdout)["where"]
        assert all(61 <= line <= 110 for line in read[context]["lines"])
    # the 60 lines before cost hundreds of tokens more than reading on after 4 corrections can differ by
    assert read["all"]["tokens_prompt"] - read["0"]["tokens_prompt"] > READ_ON_LINES * (READ_ON_TOKENS + 1)
