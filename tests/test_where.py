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

from cadedit.decode.loop import script_sampler
from cadedit.backends.model import encode, language_model, load_model, token_bytes
from cadedit.decode.where import LineNumberCursor, surprise_score
from tests.scripting import inject_picks, invoke
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
    """where_says("50\\n"): the where-step's sampler spells that answer; returns the calls made."""
    calls: list[str] = []

    def script(answer: str):
        def sampler(loaded):  # called when the where-step runs
            calls.append(answer)
            return script_sampler(answer, token_bytes(loaded))

        inject_picks(monkeypatch, lambda k: None if k else sampler)
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
    assert data["tries"][0]["checks"][-1]["detail"] == "the edit changed nothing"
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


def least_expected_line(tiny_dir, first: int, last: int, lines=LINES, skip=()) -> int:
    """The line of `lines` first..last (but not those in `skip`) the tiny model least expected, computed
    here in one forward of the whole text (the where-step feeds it in chunks): the largest p(its
    choice) - p(the token)."""
    loaded = load_model(str(tiny_dir), "cpu", "fp32", 1)
    text = "".join(line + "\n" for line in lines[:last])
    ids = encode(loaded.tokenizer, text)
    lm = language_model(loaded)
    lm.reset()
    logits = lm.feed(ids, keep=len(ids))
    pieces = token_bytes(loaded)
    best, best_line, line = -1.0, None, 1 + pieces[ids[0]].count(b"\n")
    for i in range(1, len(ids)):
        row = np.exp(np.asarray(logits[i - 1], dtype=np.float64))
        row /= row.sum()
        if first <= line <= last and line not in skip and row.max() - row[ids[i]] > best:
            best, best_line = row.max() - row[ids[i]], line
        line += pieces[ids[i]].count(b"\n")
    lm.reset()
    return best_line


def test_by_default_the_where_step_names_the_line_the_model_least_expected(work, tiny_dir, scripted):
    """No answer is decoded: the where-step reads the function as code (in several forwards: it is
    longer than one) and names the line with the most surprising token; try 1 retypes its statement."""
    expected = least_expected_line(tiny_dir, 1, 50)
    calls = scripted(unchanged, fixed_line)
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = fix(tiny_dir, VAGUE, "--json", "--where")
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    where = data["where"]
    assert where["by"] == "surprise" and where["lines"] == [expected] and where["forward_passes"] > 1
    assert data["tries"][0]["regions"] == where["levels"][0] == [[expected, expected]]
    assert calls[0].prepared.regions == ((expected, expected),)
    assert f"where: the model least expected line {expected} of lines 1-50" in result.stderr
    assert "+    return v1 + v2" in data["diff"]


def test_a_function_after_other_code_is_read_after_it_and_without_room_beside_the_cache_in_it(
    work, tiny_dir, scripted, monkeypatch
):
    """The lines before the function are the reading's context: fed, their logits not kept, never
    named. The reading feeds a row beside the LM's cache; where that row finds no room (llama.cpp's
    context full), the cache itself is emptied and read in, and the same line is named."""
    from cadedit.errors import ModelError
    from cadedit.backends.model import CachedLM

    lines = ["def helper(x):", "    return x * 2", "", "", *LINES]
    expected = least_expected_line(tiny_dir, 5, 54, lines)
    feed_rows, fed = CachedLM.feed_rows, []

    def full_beside(self, rows, ids, keeps):
        fed.append(tuple(rows))
        if list(rows) == [1] and full:
            self.reset()  # as a forward cut short leaves it
            raise ModelError("llama.cpp could not run a forward of 256 tokens (llama_decode returned 1)")
        return feed_rows(self, rows, ids, keeps)

    monkeypatch.setattr(CachedLM, "feed_rows", full_beside)
    for full in (False, True):
        scripted(unchanged)
        (work / "a.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = fix(tiny_dir, VAGUE, "--json", "--where")
        assert result.exit_code in (0, 3), result.output
        where = json.loads(result.stdout)["where"]
        assert where["lines"] == [expected] and where["asked"] == [[5, 54]], result.output
        beside = fed.count((1,))  # forwards of the reading's own row
        assert beside == 1 if full else beside == where["forward_passes"] > 1
        fed.clear()


def test_the_reading_names_a_line_of_code_never_a_docstring_or_comment_line(work, tiny_dir, scripted):
    """Prose the model could not have guessed is not a bug's line: the where-step scores only the
    function's code, so it names the least expected line outside its docstring and comments (the
    tiny model least expects a prose line of this function when every line is scored)."""
    lines = [
        "def parse(items):",
        '    """Parse the items.',
        "    quasar quasar quasar",
        '    """',
        "    # quasar quasar",
        "    a = items[0]",
        "    b = items[1]",
        "    return a - b",
        "",
        "",
        "print(parse([1, 2]))",
    ]
    skip = {2, 3, 4, 5}
    assert least_expected_line(tiny_dir, 1, 8, lines) in skip  # what scoring every line would name
    expected = least_expected_line(tiny_dir, 1, 8, lines, skip)
    scripted(unchanged)
    (work / "a.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = fix(tiny_dir, VAGUE, "--json", "--where")
    data = json.loads(result.stdout)
    assert data["where"]["lines"] == [expected] and expected not in skip
    assert f"where: the model least expected line {expected} of lines 1-8" in result.stderr


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
    from cadedit.decode.where import LineTextCursor

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
    result = invoke(
        ["fix", "a.py", VAGUE, "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", "--where", "--json"]
    )
    data = json.loads(result.stdout)
    expected = data["where"]["expected"]
    assert expected and all(line == data["where"]["lines"][0] for line, *_ in expected)
    first_try = [t for t in data["tries"] if t["try"] == 1]
    assert first_try[0]["candidate"] == 1 and not first_try[0]["changed"]
    assert "candidate 1 of 4" in result.stderr and len(first_try) > 1


def test_the_expected_token_becomes_a_branch_point_where_candidate_1_has_a_token_at_its_column():
    from cadedit.text.document import Document
    from cadedit.decode.pipeline import expected_points

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


def test_the_reading_shows_as_many_lines_before_the_function_as_context_says(work, tiny_dir, scripted):
    """--context N: the reading starts N lines before the function (all: at the file's first line),
    as the prompt does; the lines before it are read, never named."""
    preamble = [f"CONSTANT_{k} = {k} * 3" for k in range(60)]
    lines = preamble + LINES
    (work / "a.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tokenizer = load_model(str(tiny_dir), "cpu", "fp32", 1).tokenizer
    for context, first in (("0", 61), ("5", 56), ("all", 1)):
        scripted(unchanged, fixed_line)
        result = fix(tiny_dir, VAGUE, "--json", "--where", "--context", context)
        assert result.exit_code == 0, result.output
        where = json.loads(result.stdout)["where"]
        assert where["asked"] == [[61, 110]] and all(61 <= line <= 110 for line in where["lines"])
        read = encode(tokenizer, "".join(line + "\n" for line in lines[first - 1 : 110]))
        assert where["tokens_prompt"] == len(read), context


def test_a_quoted_line_says_it_was_found_by_quote(work, tiny_dir, scripted):
    """--where-by quote: the model's greedy quote names a line of the function, and --json says how."""
    scripted(unchanged, unchanged, fixed_line)
    result, data = run(work, tiny_dir, VAGUE, by="quote")
    assert result.exit_code == 0, result.output
    assert data["where"]["by"] == "quote" and all(1 <= k <= 50 for k in data["where"]["lines"])


def test_where_a_test_decides_the_next_try_retypes_the_next_surprising_lines_before_the_function(
    work, tiny_dir, scripted
):
    """--where (by surprise) with --test: a try whose line was wrong is followed by one that retypes the
    statements of the named line and of the next most surprising lines (where.RUNNERS_UP), its branches
    put in what the reading expected on each of them in turn (Where.spread); then the function. Without
    a test nothing tells a wrong line's change from the fix, so the next try is the function, as before."""
    from cadedit.scope.plan import merge_spans

    for args, answers in ((("--test", "grep -q 'return v1 + v2' a.py"), (unchanged, unchanged)), ((), (unchanged,))):
        scripted(*answers, fixed_line)
        (work / "a.py").write_text(BUGGY, encoding="utf-8")
        result = fix(tiny_dir, VAGUE, "--json", "--where", *args)
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        where, regions = data["where"], [t["regions"] for t in data["tries"]]
        [named], runners_up = where["lines"], where["runners_up"]
        assert len(runners_up) == 3 and named not in runners_up and where["levels"] == [[[named, named]], [[1, 50]]]
        assert [line for line, *_ in where["spread"][:4]] == [named, *runners_up]  # each line's first, in turn
        assert data["tries"][-1]["passed"] and "+    return v1 + v2" in data["diff"]
        if args:  # each of BODY's lines is a statement of its own
            spread = [list(span) for span in merge_spans((k, k) for k in (named, *runners_up))]
            assert regions == [[[named, named]], spread, [[1, 50]]]
            assert f"try 2 of 3 [scope widened to line {min(named, *runners_up)}, " in result.stderr
        else:
            assert regions == [[[named, named]], [[1, 50]]]


def test_once_try_1_failed_its_test_the_function_is_read_and_the_later_tries_branch_there_too(
    work, tiny_dir, scripted, monkeypatch
):
    """No --where, with --test (cadedit fix's default, settings.READ_LATER): try 1 retypes the function as
    always, nothing read before it. Once it failed, the model reads the function by surprise and every
    later try keeps its scope and adds a branch at each of the reading's first points (Where.spread,
    settings.READ_BRANCHES) to its 8 candidates; --json has the reading (later: true). A try 1 that
    passes reads nothing, and without a test or with sampled candidates nothing is read."""
    from cadedit.decode import pipeline
    from cadedit.settings import READ_BRANCHES

    asked: list[tuple] = []
    branches = pipeline.edit_branches

    def recording(document, instruction, options, *args, **kwargs):
        asked.append(options.attempt.expected)
        return branches(document, instruction, options, *args, **kwargs)

    monkeypatch.setattr(pipeline, "edit_branches", recording)
    monkeypatch.setenv("CADEDIT_PREFIX_CACHE", "0")  # what try 2 reuses comes from memory, not from disk
    test = ["--test", "grep -q 'return v1 + v2' a.py"]
    scripted(unchanged, unchanged, fixed_line)
    (work / "a.py").write_text(BUGGY, encoding="utf-8")
    result = invoke(
        ["fix", "a.py", VAGUE, "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", "--json", *test]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    where = data["where"]
    assert where["later"] and where["lines"] == [least_expected_line(tiny_dir, 1, 50)]
    read = [tuple(point) for point in where["spread"][:READ_BRANCHES]]
    assert len(read) == READ_BRANCHES and asked == [(), tuple(read), tuple(read)]
    assert {tuple(map(tuple, t["regions"])) for t in data["tries"]} == {((1, 50),)}  # the scope stays the function
    assert "try 2 of 3, candidate 1 of 11: the same as try 1's candidate 1" in result.stderr
    assert "try 3 of 3, candidate 1 of 11: passed" in result.stderr
    assert f"read: the model least expected line {where['lines'][0]}" in result.stderr
    assert data["tries"][-1]["passed"] and "+    return v1 + v2" in data["diff"]
    # the reading fed a row of its own: try 2 still reuses the prompt try 1 left in the cache
    candidates_1 = [t for t in data["tries"] if t["candidate"] == 1]
    assert candidates_1[1]["try"] == 2 and candidates_1[1]["tokens_prompt_reused"] > 0
    for args, answers in (
        (test, (fixed_line,)),
        ((), (fixed_line,)),
        ([*test, "--candidates-by", "sample"], (unchanged, fixed_line)),
    ):
        # try 1 passes; no test; sampled candidates, which have no branch points to put the reading's tokens at
        scripted(*answers)
        (work / "a.py").write_text(BUGGY, encoding="utf-8")
        result = invoke(
            ["fix", "a.py", VAGUE, "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", "--json", *args]
        )
        assert result.exit_code == 0 and json.loads(result.stdout)["where"] is None, result.output
    assert "read:" not in result.stderr
