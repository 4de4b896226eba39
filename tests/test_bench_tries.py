"""`cadedit bench tries` and `cadedit bench longfile` through the CLI, the tiny model's answers
scripted through the real decode loop: which try passed the corpus's test, what each row of the
table counts, scoped long-file edits scored against the original."""

from __future__ import annotations

import json

import pytest

from cadedit.decode.loop import script_sampler
from cadedit.text.document import Document
from cadedit.backends.model import encode, token_bytes
from cadedit.prompt.regions import scoped_source
from tests.scripting import inject_picks, invoke, scripted_sampler

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "assert add(2, 3) == 5\n"


@pytest.fixture(scope="module")
def long_context_dir(tmp_path_factory):
    from tests.tinymodel import save_model

    return save_model(tmp_path_factory.mktemp("models") / "tiny-32k", context=32768)


def answers(monkeypatch, *texts: str) -> list:
    """Try k of each run answers texts[k] (the last one repeats), through tries.edit_verified's picks,
    which bench tries and bench longfile take from the CLI's context as `cadedit fix` does
    (tests/scripting.py). Returns the prepared requests decoded."""
    seen = []

    def picks(k: int):
        after = Document.from_text(texts[min(k, len(texts)) - 1])

        def make_sampler(loaded, document, prepared):
            seen.append(prepared)
            if prepared.regions:
                answer = scoped_source(after, prepared.fence, prepared.regions, prepared.headers)
                return script_sampler(answer, token_bytes(loaded), lambda text: encode(loaded.tokenizer, text))
            return scripted_sampler(loaded, document, prepared, after)

        return make_sampler if k else None  # 0: the where-step, scripted by the tests that ask where

    inject_picks(monkeypatch, picks)
    return seen


def where_says(monkeypatch, answer: str) -> None:
    """The where-step's sampler spells `answer` (tries.edit_verified's picks(0))."""
    inject_picks(monkeypatch, lambda k: None if k else (lambda loaded: script_sampler(answer, token_bytes(loaded))))


def corpus(tmp_path, n: int = 1):
    path = tmp_path / "c.jsonl"
    records = [
        {
            "id": f"case{k}",
            "language": "python",
            "before": BUGGY,
            "after": FIXED,
            "instruction": "Fix add.",
            "test": TEST,
        }
        for k in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_tries_counts_the_single_try_checks_only_and_the_test_loop(tmp_path, monkeypatch, tiny_dir):
    # With the test: try 1 unchanged (fails the change check), try 2 wrong, try 3 right.
    # Checks only: try 1 unchanged, try 2 wrong but it parses and changes, so it is the answer.
    answers(monkeypatch, BUGGY, "def add(a, b):\n    return a * b\n", FIXED)
    out = tmp_path / "t.json"
    result = invoke(
        [
            "bench",
            "tries",
            "-c",
            str(corpus(tmp_path)),
            "--model",
            str(tiny_dir),
            "--tries",
            "5",
            "--check-tries",
            "3",
            "--candidates",
            "1",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (row,) = data["corpora"][0]["cases"]
    assert row["single"] == {
        "passed": False,
        "exact": False,
        "answered": True,
        "tries": 1,
        "seconds": row["single"]["seconds"],
    }
    assert row["checks"]["passed"] is False and row["checks"]["tries"] == 2
    assert row["test3"]["passed"] is True and row["test3"]["tries"] == 3
    assert row["test5"] == row["test3"]
    assert [t["test_passed"] for t in row["tries_with_test"]] == [False, False, True]
    summary = data["corpora"][0]["summary"]
    assert summary["single"]["passed"] == 0 and summary["test5"]["passed"] == 1
    assert summary["checks_turned_fail_into_pass"] == 0
    assert row["test5"]["exact"] is True and "test5    tests passed 1/1, exact 1" in result.stdout


def test_tries_without_the_checks_run(tmp_path, monkeypatch, tiny_dir):
    answers(monkeypatch, FIXED)
    out = tmp_path / "t.json"
    result = invoke(
        [
            "bench",
            "tries",
            "-c",
            str(corpus(tmp_path, 2)),
            "--model",
            str(tiny_dir),
            "--tries",
            "1",
            "--check-tries",
            "0",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["corpora"][0]["cases"]
    assert [r["single"]["passed"] for r in rows] == [True, True]
    assert all("checks" not in r and r["tries_checks_only"] == [] for r in rows)


def test_tries_decodes_as_many_candidates_a_try_as_fix_would(tmp_path, monkeypatch, tiny_dir):
    """No --candidates: the loop with the test makes 4 candidates a try, the checks alone 1 (fix's defaults)."""
    answers(monkeypatch, BUGGY, FIXED)
    out = tmp_path / "t.json"
    result = invoke(
        [
            "bench",
            "tries",
            "-c",
            str(corpus(tmp_path)),
            "--model",
            str(tiny_dir),
            "--tries",
            "3",
            "--check-tries",
            "2",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["candidates"] == [4, 8] and data["candidates_checks_only"] == 1
    (row,) = data["corpora"][0]["cases"]
    # Candidate 1 of try 1 fails the test, so 3 branches of it follow; try 2's candidate 1 passes: no branches.
    assert sorted((t["try"], t["candidate"]) for t in row["tries_with_test"]) == [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 1),
    ]
    assert [(t["try"], t["candidate"]) for t in row["tries_checks_only"]] == [(1, 0), (2, 0)]
    assert row["test3"]["passed"] is True and row["test3"]["tries"] == 2
    summary = data["corpora"][0]["summary"]
    assert summary["greedy"]["passed"] == 0 and summary["try1_with_more"] == 1
    # Walls: the loop costs more than its first candidate; try 1's branches at least as much as candidate 1
    # (they may finish within the same forwards, so not strictly more on a busy machine).
    assert summary["loop_over_greedy_median"] > 1 and summary["try1_decode_over_first_median"] >= 1
    assert "try 1 made more candidates in 1 cases" in result.output


@pytest.mark.parametrize("scoping", ["on", "off"])
def test_tries_with_candidates_scores_try_one_by_its_first_passing_candidate(tmp_path, monkeypatch, tiny_dir, scoping):
    """--candidates 3 --candidates-by sample: try 1 is one batched decode whose candidates are checked in turn; the case is
    scoped as `cadedit fix` scopes "Fix add." (the function), or not with --scoping off."""
    other = "\n\ndef sub(a, b):\n    return a - b\n"  # so that add's lines are a part of the file
    wrong = "def add(a, b):\n    return a * b\n" + other
    asked = []

    def spell(text: str):
        after = Document.from_text(text)

        def make_sampler(loaded, document, prepared):
            asked.append(prepared.regions)
            if prepared.regions:
                answer = scoped_source(after, prepared.fence, prepared.regions, prepared.headers)
                return script_sampler(answer, token_bytes(loaded), lambda t: encode(loaded.tokenizer, t))
            return scripted_sampler(loaded, document, prepared, after)

        return make_sampler

    def picks(k: int):
        return [spell(BUGGY + other), spell(wrong), spell(FIXED + other)] if k == 1 else spell(wrong) if k else None

    inject_picks(monkeypatch, picks)
    out = tmp_path / "t.json"
    cases = tmp_path / "c.jsonl"
    cases.write_text(
        json.dumps(
            {
                "id": "case",
                "language": "python",
                "before": BUGGY + other,
                "after": FIXED + other,
                "instruction": "Fix add.",
                "test": TEST,
            }
        )
        + "\n"
    )
    result = invoke(
        [
            "bench",
            "tries",
            "-c",
            str(cases),
            "--model",
            str(tiny_dir),
            "--tries",
            "3",
            "--check-tries",
            "0",
            "--candidates",
            "3",
            "--scoping",
            scoping,
            "--candidates-by",
            "sample",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (row,) = data["corpora"][0]["cases"]
    assert data["candidates"] == [3, 3] and row["regions"] == ([[1, 2]] if scoping == "on" else [])
    assert set(asked) == ({((1, 2),)} if scoping == "on" else {()})
    made = row["tries_with_test"]
    assert {t["try"] for t in made} == {1} and sorted(t["candidate"] for t in made) == [1, 2, 3]
    assert row["single"]["passed"] and row["single"]["tries"] == 1 and row["test3"] == row["single"]
    decode = max(t["seconds"] - t["checks_seconds"] for t in made)
    assert row["single"]["seconds"] == pytest.approx(decode + sum(t["checks_seconds"] for t in made))


def test_longfile_scores_a_scoped_fix_of_a_real_module(tmp_path, monkeypatch, long_context_dir):
    from cadedit.bench import longfile

    task = longfile.build_tasks([__import__("rich").__path__[0]], 1, seed=0)[0]
    answers(monkeypatch, task["after"])
    out = tmp_path / "l.json"
    result = invoke(
        [
            "bench",
            "longfile",
            "--model",
            str(long_context_dir),
            "--packages",
            "rich",
            "-n",
            "1",
            "--instructions",
            "explicit",
            "--scoping",
            "on",
            "--tries",
            "1",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert row["path"] == task["path"] and row["scoped"] and row["regions"]
    start, end = row["regions"][0]
    assert start <= task["bug_line"] <= end and end - start < row["lines"]  # the function, not the file
    assert row["verified"] == {
        "exact": True,
        "lines_changed_outside": 0,
        "lines_changed_inside": 1,
    }  # vs the buggy file
    assert data["summary"]["explicit/scoped"]["exact_verified"] == 1


def test_longfile_vague_asks_where_first_and_compares_with_the_whole_function(tmp_path, monkeypatch, long_context_dir):
    from cadedit.bench import longfile

    tasks = longfile.build_tasks([__import__("rich").__path__[0]], 12, seed=0)
    task = next(t for t in tasks if t["function_end"] - t["function_start"] + 1 > 40)  # longer than the block level
    tasks_file = tmp_path / "tasks.jsonl"
    longfile.write_tasks([task], tasks_file)
    answers(monkeypatch, task["after"])
    where_says(monkeypatch, f"{task['bug_line']}\n")
    out = tmp_path / "l.json"
    result = invoke(
        [
            "bench",
            "longfile",
            "--model",
            str(long_context_dir),
            "--tasks-file",
            str(tasks_file),
            "-n",
            "1",
            "--instructions",
            "vague",
            "--where",
            "both",
            "--where-by",
            "number",
            "--tries",
            "2",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    located, whole = data["rows"]
    assert located["located"] and not whole["located"]
    assert located["where"]["lines"] == [task["bug_line"]] and located["where_named_bug_line"]
    assert located["tries_regions"] == [located["where"]["levels"][0]]  # the statement there, not the function
    start, end = located["tries_regions"][0][0]
    assert start <= task["bug_line"] <= end and end - start < 20
    assert whole["where"] is None and whole["tries_regions"] == [[[task["function_start"], task["function_end"]]]]
    assert located["verified"]["exact"] and whole["verified"]["exact"]
    summary = data["summary"]
    assert (
        summary["vague/scoped"]["where_named_bug_line"] == 1 and summary["vague/scoped/no-where"]["exact_verified"] == 1
    )
    assert "vague/scoped: " in result.stdout and "vague/scoped/no-where: " in result.stdout


def test_longfile_with_the_oracle_test_a_wrong_lines_change_fails_and_the_next_try_widens(
    tmp_path, monkeypatch, long_context_dir
):
    """--oracle-test: each edit is checked by a test that passes the original file only, as `fix --test`
    with a test that finds the bug; without it a change on a wrong line passes the checks and is the answer."""
    import ast

    from cadedit.bench import longfile

    tasks = longfile.build_tasks([__import__("rich").__path__[0]], 12, seed=0)
    task = next(t for t in tasks if t["function_end"] - t["function_start"] + 1 > 40)
    wrong = next(
        node.lineno
        for node in ast.walk(ast.parse(task["before"]))
        if isinstance(node, (ast.Assign, ast.Return))
        and node.lineno == node.end_lineno
        and task["function_start"] < node.lineno <= task["function_end"]
        and node.lineno != task["bug_line"]
    )
    lines = task["before"].splitlines(keepends=True)
    lines[wrong - 1] = lines[wrong - 1].rstrip("\n") + "  # changed\n"
    tasks_file = tmp_path / "tasks.jsonl"
    longfile.write_tasks([task], tasks_file)
    for flags, widened in ((["--oracle-test"], True), ([], False)):
        answers(monkeypatch, "".join(lines), task["after"])
        where_says(monkeypatch, f"{wrong}\n")
        out = tmp_path / "l.json"
        result = invoke(
            [
                "bench",
                "longfile",
                "--model",
                str(long_context_dir),
                "--tasks-file",
                str(tasks_file),
                "-n",
                "1",
                "--instructions",
                "vague",
                "--where-by",
                "number",
                "--tries",
                "2",
                *flags,
                "--dtype",
                "fp32",
                "--threads",
                "1",
                "--json",
                str(out),
            ]
        )
        assert result.exit_code == 0, result.output
        data = json.loads(out.read_text())
        (row,) = data["rows"]
        assert row["tested"] is widened and data["oracle_test"] is widened
        assert row["where"]["lines"] == [wrong] and (row["tries_regions"][-1] != row["tries_regions"][0]) is widened
        assert row["verified"]["exact"] is widened and row["first"]["exact"] is False


def test_longfile_rejects_an_unknown_where(tmp_path, long_context_dir):
    result = invoke(["bench", "longfile", "--model", str(long_context_dir), "--where", "maybe"])
    assert result.exit_code == 2 and "--where" in result.output


def test_longfile_where_by_quote_takes_the_line_the_model_quotes(tmp_path, monkeypatch, long_context_dir):
    from cadedit.bench import longfile

    tasks = longfile.build_tasks([__import__("rich").__path__[0]], 12, seed=0)
    task = next(t for t in tasks if t["function_end"] - t["function_start"] + 1 > 40)
    tasks_file = tmp_path / "tasks.jsonl"
    longfile.write_tasks([task], tasks_file)
    answers(monkeypatch, task["after"])
    quoted = Document.from_text(task["before"]).display_lines()[task["bug_line"] - 1].strip()
    where_says(monkeypatch, quoted + "\n")
    out = tmp_path / "l.json"
    result = invoke(
        [
            "bench",
            "longfile",
            "--model",
            str(long_context_dir),
            "--tasks-file",
            str(tasks_file),
            "-n",
            "1",
            "--instructions",
            "vague",
            "--where-by",
            "quote",
            "--tries",
            "1",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["rows"]
    assert task["bug_line"] in row["where"]["lines"] and row["where"]["answer"] == quoted
    assert row["verified"]["exact"]


STUB = "def add(a, b):\n    pass\n"
POLYGLOT_TEST = (
    "import unittest\n\nfrom adder import add\n\n\nclass AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def test_tries_runs_a_polyglot_cases_test_files_beside_the_file_they_import(tmp_path, monkeypatch, tiny_dir):
    # An Aider polyglot record: the stub is adder.py, its unittest file imports it by that name.
    # Try 1 writes something that changes nothing the test wants; try 2 implements it.
    answers(monkeypatch, "def add(a, b):\n    return a - b\n", FIXED)
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "python/adder",
                "language": "python",
                "instructions": "Implement add.",
                "input_code": STUB,
                "gold_code": FIXED,
                "solution_file": "adder.py",
                "test_files": {"adder_test.py": POLYGLOT_TEST},
            }
        )
        + "\n"
    )
    out = tmp_path / "t.json"
    result = invoke(
        [
            "bench",
            "tries",
            "-c",
            str(path),
            "--model",
            str(tiny_dir),
            "--tries",
            "3",
            "--check-tries",
            "0",
            "--candidates",
            "1",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["corpora"][0]["cases"]
    assert "skipped" not in row and row["single"]["passed"] is False
    assert [t["test_passed"] for t in row["tries_with_test"]] == [False, True]  # the loop's --test ran them too
    assert row["test3"]["passed"] is True and row["test3"]["exact"] is True


def test_tries_with_where_reads_the_function_for_the_line_first(tmp_path, monkeypatch, tiny_dir):
    """--where on: "Fix add." names a definition and no line, so each case is read for the line first
    and try 1 retypes that line's statement, as `cadedit fix --where` does; later (the default) and off
    retype the function, later reading it once try 1 failed (branched tries: 2 candidates here)."""
    before = "def add(a, b):\n    c = a\n    d = b\n    e = c\n    return e - d\n"
    path = tmp_path / "c.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "case",
                "language": "python",
                "before": before,
                "after": before.replace("e - d", "e + d"),
                "instruction": "Fix add.",
                "test": "assert add(2, 3) == 5\n",
            }
        )
        + "\n"
    )
    rows = {}
    for where, tries in (("on", "1"), ("later", "2"), ("off", "2")):
        seen = answers(monkeypatch, before)
        out = tmp_path / f"{where}.json"
        result = invoke(
            [
                "bench",
                "tries",
                "-c",
                str(path),
                "--model",
                str(tiny_dir),
                "--tries",
                tries,
                "--check-tries",
                "0",
                "--candidates",
                "1" if where == "on" else "2",
                "--where",
                where,
                "--dtype",
                "fp32",
                "--threads",
                "1",
                "--json",
                str(out),
            ]
        )
        assert result.exit_code == 0, result.output
        data = json.loads(out.read_text())
        (rows[where],) = data["corpora"][0]["cases"]
        assert data["where"] == where
        rows[where]["retyped"] = {prepared.regions for prepared in seen}
    (line,) = rows["on"]["where"]["lines"]
    assert 2 <= line <= 5 and rows["on"]["retyped"] == {((line, line),)}
    # later and off: the function, here the whole file, so the prompt shows it as the file
    assert rows["later"]["where"]["later"] and rows["later"]["where"]["lines"] and rows["later"]["retyped"] == {()}
    assert [t["candidate"] for t in rows["later"]["tries_with_test"] if t["try"] == 2][0] == 1
    assert rows["off"]["where"] is None and rows["off"]["retyped"] == {()}
