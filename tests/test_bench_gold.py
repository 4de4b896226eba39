"""`cadedit bench checks` through the real CLI: every check a candidate gets, run on gold fixes; a
table per check, the failures one line each, exit 1 when a correct fix would be refused; and (only
when the shared data folder exists) no false alarm on HumanEvalFix and the Aider polyglot subset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadedit.cli.root import app
from tests.bench_helpers import record, write_corpus

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def invoke(*args: str):
    return CliRunner().invoke(app, ["bench", "checks", *args])


def js(id: str, before: str, after: str) -> dict:
    return {**record(id, before, after), "language": "javascript"}


GOOD_JS = js("js-good", "function f(a) {\n  return a - 1;\n}\n", "function f(a) {\n  return Math.abs(a) + 1;\n}\n")
UNDEFINED_JS = js("js-undefined", "function f(a) {\n  return a - 1;\n}\n", "function f(a) {\n  return b + 1;\n}\n")
DATACLASS = record(
    "dataclass",
    "class Box:\n    def __init__(self, n):\n        self.n = n\n\n    def __eq__(self, o):\n"
    "        return self.n == o.n\n",
    "import dataclasses\n\n\n@dataclasses.dataclass\nclass Box:\n    n: int\n",
)


def test_a_gold_fix_a_check_refuses_is_listed_and_exits_1(tmp_path):
    corpus = write_corpus(tmp_path / "small.jsonl", [GOOD_JS, UNDEFINED_JS])
    out = tmp_path / "checks.json"
    result = invoke("-c", str(corpus), "--json", str(out))
    assert result.exit_code == 1, result.output
    assert "small:js-undefined: names: line 2: undefined name 'b'" in result.stdout
    assert "error: checks: 1 gold fix(es) failed a check" in result.output
    summary = json.loads(out.read_text())["corpora"]["small"]
    assert summary["cases"] == 2 and summary["cases_failed"] == 1
    assert summary["checks"]["names"] == {
        "ran": 2,
        "failed": 1,
        "failures": [{"id": "js-undefined", "detail": "line 2: undefined name 'b'"}],
    }


def test_gold_fixes_that_break_nothing_pass_every_check(tmp_path):
    corpus = write_corpus(tmp_path / "small.jsonl", [GOOD_JS, DATACLASS])
    result = invoke("-c", str(corpus))
    assert result.exit_code == 0, result.output
    assert "Checks on gold fixes" in result.stdout and "│ small  │  names │      2 │      0 │" in result.stdout


def test_reversed_the_buggy_side_is_checked_as_an_edit_of_the_gold(tmp_path):
    corpus = write_corpus(
        tmp_path / "small.jsonl", [js("js-lost", UNDEFINED_JS["after"], UNDEFINED_JS["before"]), GOOD_JS]
    )
    result = invoke("-c", str(corpus), "--reverse")
    assert result.exit_code == 0, result.output
    assert "Checks on the buggy side (failed = a bug caught)" in result.stdout
    assert "small:js-lost: names: line 2: undefined name 'b'" in result.stdout and "js-good" not in result.stdout


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared data is not here (optional)")
@pytest.mark.parametrize(
    "corpus",
    [
        "humanevalfix/humanevalfix_python.jsonl",
        "humanevalfix/humanevalfix_js.jsonl",
        "aider_polyglot_python/polyglot_python.jsonl",
    ],
)
def test_no_gold_fix_of_the_shared_corpora_fails_a_check(corpus):
    result = invoke("-c", str(SHARED / corpus))
    assert result.exit_code == 0, result.output
