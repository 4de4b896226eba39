"""Corpus loading: the documented JSONL, HumanEvalPack and polyglot records, and one-line errors with file:line."""

from __future__ import annotations

import json

import pytest

from cadedit.bench.corpus import CorpusError, load_corpus
from tests.bench_helpers import record, write_corpus

HEP = {
    "task_id": "Python/3",
    "entry_point": "below_zero",
    "declaration": "def below_zero(ops):\n",
    "buggy_solution": "    return False\n",
    "canonical_solution": "    return True\n",
    "test": "assert below_zero([]) is True\n",
    "language": "python",
    "prompt": "ignored",
}


def test_generic_records_keep_every_field(tmp_path):
    path = write_corpus(
        tmp_path / "c.jsonl",
        [record("a", "x\n", "y\n", test="assert 1\n", prefix="import os\n"), record("b", "p", "q")],
    )
    first, second = load_corpus(path)
    assert (first.id, first.language, first.before, first.after, first.instruction) == (
        "a",
        "python",
        "x\n",
        "y\n",
        "Fix it.",
    )
    assert (first.test, first.prefix) == ("assert 1\n", "import os\n")
    assert (second.test, second.prefix) == (None, "")


def test_humanevalpack_records_are_read_as_the_paper_does(tmp_path):
    (case,) = load_corpus(write_corpus(tmp_path / "hep.jsonl", [HEP]))
    assert case.before == "    return False\n" and case.after == "    return True\n"
    assert case.instruction == "Fix bugs in below_zero."
    assert case.test == HEP["test"] and case.prefix == HEP["declaration"]
    assert case.id == "Python/3" and case.language == "python"


def test_polyglot_records_bring_their_test_files(tmp_path):
    rec = {
        "id": "python/bob",
        "language": "python",
        "input_code": "def hey(): pass\n",
        "gold_code": "def hey(): return 1\n",
        "instructions": "Implement hey.",
        "test_files": {"bob_test.py": "import bob\n"},
    }
    (case,) = load_corpus(write_corpus(tmp_path / "p.jsonl", [rec]))
    assert (case.before, case.after, case.instruction) == (rec["input_code"], rec["gold_code"], "Implement hey.")
    assert case.test_files == (("bob_test.py", "import bob\n"),)


def test_limit_and_blank_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(record(str(k), "a", "b")) for k in range(5)) + "\n\n")
    assert [c.id for c in load_corpus(path)] == ["0", "1", "2", "3", "4"]
    assert [c.id for c in load_corpus(path, limit=2)] == ["0", "1"]


@pytest.mark.parametrize(
    "lines, expected",
    [
        (
            [json.dumps(record("a", "x", "y")), "{not json"],
            "c.jsonl:2: not JSON (Expecting property name enclosed in double quotes at column 2)",
        ),
        (
            [json.dumps({"id": "a", "language": "py", "before": "x", "after": 3, "instruction": "i"})],
            "c.jsonl:1: field 'after' must be a string, found a int",
        ),
        (
            [json.dumps({"id": "a", "before": "x", "after": "y", "instruction": "i"})],
            "c.jsonl:1: field 'language' must be a string, found missing",
        ),
        ([json.dumps({"foo": 1})], "c.jsonl:1: unknown record shape (keys: foo)"),
        (["[1, 2]"], "c.jsonl:1: expected a JSON object, found list"),
        ([json.dumps(record("a", "x", "y")), json.dumps(record("a", "x", "z"))], "c.jsonl:2: duplicate id 'a'"),
        ([json.dumps(record("a", "x", "y", test=5))], "c.jsonl:1: field 'test' must be a string or absent"),
        (["", "  "], "c.jsonl: corpus has no cases"),
    ],
)
def test_bad_corpora_fail_with_file_and_line(tmp_path, lines, expected):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert str(info.value) == f"{tmp_path}/{expected}"
    assert "\n" not in str(info.value)


def test_missing_corpus_file(tmp_path):
    with pytest.raises(CorpusError, match="cannot read corpus"):
        load_corpus(tmp_path / "nope.jsonl")


def test_polyglot_records_name_plain_files(tmp_path):
    rec = {
        "id": "python/bob",
        "language": "python",
        "input_code": "",
        "gold_code": "",
        "instructions": "Implement hey.",
        "solution_file": "bob.py",
        "test_files": {"bob_test.py": "import bob\n"},
    }
    (case,) = load_corpus(write_corpus(tmp_path / "p.jsonl", [rec]))
    assert case.solution_file == "bob.py"
    for bad in (
        {"solution_file": "../bob.py"},
        {"test_files": {"sub/bob_test.py": ""}},
        {"test_files": {"b_test.py": 3}},
    ):
        with pytest.raises(CorpusError, match="plain file names"):
            load_corpus(write_corpus(tmp_path / "bad.jsonl", [{**rec, **bad}]))
