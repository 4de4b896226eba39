"""`cadedit bench apply` and the tool that builds its corpus: a corpus built from a few HumanEvalFix-like
tasks (deterministic: the same seed, the same bytes), every form and style in it, run through the bench's
CLI, and each verdict (exact, wrong-but-exit-0, refused) counted as it is."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from cadedit.bench.apply import CORPUS, load_cases
from tests.scripting import invoke

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("make_apply_corpus", ROOT / "tools" / "make_apply_corpus.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

PY = [
    ("def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"),
    ("def double(x):\n    y = x\n    return y * 3\n", "def double(x):\n    y = x\n    return y * 2\n"),
    ("def neg(x):\n    return x\n", "def neg(x):\n    return -x\n"),
]
JS = [
    ("const inc = (x) => {\n  return x - 1;\n}\n", "const inc = (x) => {\n  return x + 1;\n}\n"),
    ("const half = (x) => {\n  return x * 2;\n}\n", "const half = (x) => {\n  return x / 2;\n}\n"),
]


def data(folder: Path) -> Path:
    folder.mkdir()
    for name, lang, pairs in (("humanevalfix_python.jsonl", "Python", PY), ("humanevalfix_js.jsonl", "JavaScript", JS)):
        rows = [
            {"task_id": f"{lang}/{k}", "input_code_docs": buggy, "gold_code_docs": fixed}
            for k, (buggy, fixed) in enumerate(pairs)
        ]
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_corpus_is_built_deterministically_in_every_form(tmp_path):
    source = data(tmp_path / "data")
    assert tool.build(source, tmp_path / "a", 65, 2) == tool.build(source, tmp_path / "b", 65, 2)
    for name in ("cases.jsonl", "programs.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    cases = [json.loads(line) for line in (tmp_path / "a" / "cases.jsonl").read_text().splitlines()]
    assert {(c["form"], c["style"]) for c in cases} == set(tool.STYLES)
    assert {c["lang"] for c in cases} == {"py", "js"}


def test_bench_apply_counts_each_verdict(tmp_path):
    corpus = tmp_path / "corpus"
    tool.build(data(tmp_path / "data"), corpus, 65, 2)
    rows = [json.loads(line) for line in (corpus / "cases.jsonl").read_text().splitlines()]
    first = next(r for r in rows if r["form"] == "search-replace" and r["style"] == "exact")
    note = "# a line the real edit lacks" if first["lang"] == "py" else "// a line the real edit lacks"
    wrong = dict(first, id="wrong", sketch=first["sketch"].replace(">>>>>>> REPLACE", f"{note}\n>>>>>>> REPLACE", 1))
    refused = dict(
        first, id="refused", style="nowhere", sketch="<<<<<<< SEARCH\nnot here\n=======\nx\n>>>>>>> REPLACE\n"
    )
    (corpus / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (first, wrong, refused)))
    out = tmp_path / "apply.json"
    result = invoke(["bench", "apply", "--corpus", str(corpus), "--json", str(out)])
    assert result.exit_code == 0, result.output
    verdicts = {c["id"]: c["verdict"] for c in json.loads(out.read_text())["cases"]}
    assert verdicts == {first["id"]: "exact", "wrong": "wrong", "refused": "refused"}
    assert "WRONG (exit 0): wrong" in result.stderr
    assert "search-replace/exact" in result.stderr and "search-replace/nowhere" in result.stderr


def test_the_real_corpus_loads_and_holds_out_a_part():
    cases = load_cases(CORPUS)
    assert {c.split for c in cases} == {"tune", "heldout"}
    assert {c.form for c in cases} == {"lazy", "search-replace", "diff", "whole", "answer"}
    assert all(c.before != c.after for c in cases)
