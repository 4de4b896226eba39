"""`cadedit bench` through the real CLI: tables on stdout, --json results, one-line errors, partial
results after Ctrl-C, no torch import for the commands that need no model, and (only when the
shared data folder exists) the paper's round trip on HumanEvalFix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadedit.cli.root import app
from tests.conftest import approve_settings
from tests.bench_helpers import CASES, record, write_byte_tokenizer, write_corpus

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "humanevalfix"


def invoke(*args: str):
    return CliRunner().invoke(app, ["bench", *args])


@pytest.fixture
def files(tmp_path):
    corpus = write_corpus(tmp_path / "small.jsonl", CASES)
    tok = write_byte_tokenizer(tmp_path / "tokenizer.json")
    return corpus, tok, tmp_path


def test_ceiling_table_and_json(files):
    corpus, tok, tmp = files
    kernel = tmp / "k.json"
    kernel.write_text(
        json.dumps({"results": [{"n": 1, "speedup": 1.0}, {"n": 8, "speedup": 4.0}, {"n": 64, "speedup": 16.0}]})
    )
    out = tmp / "ceiling.json"
    result = invoke("ceiling", "-c", str(corpus), "--tokenizer", str(tok), "--kernel", str(kernel), "--json", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["partial"] is False and data["counting"] == "paper"
    small = data["corpora"][0]
    # One token per byte: T is the gold's length; the fix case copies "def f(a, b):" and "\nprint(f(1, 2))\n".
    assert small["T"] == sum(len(r["after"].encode()) for r in CASES)
    fix = next(c for c in small["cases"] if c["id"] == "fix")
    assert fix["spans"] == [len("def f(a, b):"), len("\nprint(f(1, 2))\n")]
    assert set(small["bounds"]) == {"s_m8", "bnd_m8", "bnd_mean", "bnd_exact"} and small["bounds"]["s_m8"] == 4.0
    assert "Line-level copy ceiling" in result.stdout and "bnd_exact" in result.stdout and "m=32" in result.stdout


def test_ceiling_pools_several_corpora_and_splice_counting(files):
    corpus, tok, tmp = files
    other = write_corpus(tmp / "other.jsonl", [record("o", "a\nb\n", "a\nc\n")])
    out = tmp / "c.json"
    result = invoke(
        "ceiling",
        "-c",
        str(corpus),
        "-c",
        str(other),
        "--tokenizer",
        str(tok),
        "--counting",
        "splice",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    names = [c["name"] for c in json.loads(out.read_text())["corpora"]]
    assert names == ["small", "other", "pooled"]
    assert "pooled" in result.stdout


def test_ceiling_tokenizer_follows_the_project_settings(files, monkeypatch):
    corpus, tok, tmp = files
    monkeypatch.chdir(tmp)
    (tmp / ".cadedit.toml").write_text(f"model = {str(tok)!r}\n")
    approve_settings(tmp)
    out = tmp / "c.json"
    result = invoke("ceiling", "-c", str(corpus), "--json", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["tokenizer"] == str(tok)


def test_ceiling_without_a_usable_tokenizer_is_a_one_line_error(files, monkeypatch):
    corpus, _, tmp = files
    monkeypatch.chdir(tmp)
    result = invoke("ceiling", "-c", str(corpus))  # the default hub id, not cached, offline
    assert result.exit_code == 1
    assert "cannot load tokenizer" in result.output and "hint: pass --tokenizer" in result.output


def test_bad_corpus_names_file_and_line(files):
    _, tok, tmp = files
    bad = tmp / "bad.jsonl"
    bad.write_text(json.dumps(record("a", "x", "y")) + "\n{oops\n")
    result = invoke("roundtrip", "-c", str(bad))
    assert result.exit_code == 1 and f"{bad}:2: not JSON" in result.output


def test_bad_options_are_usage_errors(files):
    corpus, tok, _ = files
    assert invoke("perturb", "-c", str(corpus), "--eps", "1,x").exit_code == 2
    assert invoke("ceiling", "-c", str(corpus), "--tokenizer", str(tok), "--counting", "nope").exit_code == 2


def test_roundtrip_command(files):
    corpus, _, tmp = files
    out = tmp / "rt.json"
    result = invoke("roundtrip", "-c", str(corpus), "--json", str(out))
    assert result.exit_code == 0, result.output
    small = json.loads(out.read_text())["corpora"]["small"]
    assert small["modes"]["strict"]["exact"] == 5 and small["modes"]["clipped"]["exact"] == 5
    assert small["reserved_literal_golds"] == ["reserved"]
    assert "5/5" in result.stdout


def test_roundtrip_failure_exits_1(files, monkeypatch):
    from cadedit.bench import roundtrip as rt
    from cadedit.text.program import Gen, Program

    corpus, _, _ = files
    monkeypatch.setattr(rt, "oracle", lambda before, after: Program((Gen("nope\n"),)))
    result = invoke("roundtrip", "-c", str(corpus))
    assert result.exit_code == 1 and "error: roundtrip: 10 case(s) not byte-exact: small:fix (strict)" in result.output


def test_perturb_command(files):
    corpus, _, tmp = files
    out = tmp / "p.json"
    result = invoke("perturb", "-c", str(corpus), "--eps", "0,1", "--trials", "3", "--seed", "4", "--json", str(out))
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["corpora"]["small"]
    assert [r["eps"] for r in rows] == [0, 1] and rows[0]["trimmed_median"] == 1.0 and rows[1]["trials"] == 3
    paper = invoke("perturb", "-c", str(corpus), "--eps", "0", "--trials", "1", "--semantics", "paper")
    assert paper.exit_code == 0 and "paper semantics" in paper.stdout


def test_formats_command(files):
    corpus, tok, tmp = files
    out = tmp / "f.json"
    result = invoke("formats", "-c", str(corpus), "--tokenizer", str(tok), "--json", str(out))
    assert result.exit_code == 0, result.output
    small = json.loads(out.read_text())["corpora"]["small"]
    assert small["search_replace"]["rt_em"] == 4 and small["search_replace"]["failures"][0]["id"] == "ambiguous"
    assert small["program"]["rt_em"] == small["unified_diff"]["rt_em"] == small["full"]["rt_em"] == 5
    assert small["full"]["total"] == sum(len(r["after"].encode()) for r in CASES)
    assert "search/replace" in result.stdout and "anchors found more than once in the input: 1" in result.stdout


def test_ctrl_c_leaves_partial_json(files, monkeypatch):
    from cadedit.bench import roundtrip as rt

    corpus, _, tmp = files
    real, calls = rt.roundtrip_case, []

    def interrupted(case):
        calls.append(case.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(case)

    monkeypatch.setattr(rt, "roundtrip_case", interrupted)
    out = tmp / "rt.json"
    result = invoke("roundtrip", "-c", str(corpus), "--json", str(out))
    assert result.exit_code == 130
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["corpora"]["small"]["n"] == 2


@pytest.mark.parametrize(
    "command",
    [["roundtrip"], ["perturb", "--trials", "1"], ["ceiling", "--tokenizer", "TOK"], ["formats", "--tokenizer", "TOK"]],
)
def test_model_free_commands_never_import_torch(files, command):
    corpus, tok, _ = files
    args = ["bench", command[0], "-c", str(corpus), *[str(tok) if a == "TOK" else a for a in command[1:]]]
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom cadedit.cli.root import app\n"
        f"r = CliRunner().invoke(app, {args!r})\nassert r.exit_code == 0, r.output\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared HumanEvalFix data is not here (optional)")
def test_humanevalfix_round_trips_164_of_164():
    for name in ("humanevalfix_python.jsonl", "humanevalfix_js.jsonl"):
        result = invoke("roundtrip", "-c", str(SHARED / name))
        assert result.exit_code == 0, result.output
        assert result.stdout.count("164/164") == 2 * 3  # byte-exact, trimmed and parse(format), per mode
