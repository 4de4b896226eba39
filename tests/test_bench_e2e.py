"""`cadedit bench e2e` through the CLI with the tiny random Qwen2 saved as a model folder, the
test harness on real python3 / node subprocesses, and the speedup arithmetic on hand-made attempts.

The model's choices are scripted through the real decode loop (the oracle program of the gold in
program mode; the gold and its closing fence in the fenced modes; given through bench.e2e.methods'
make_sampler, tests/scripting.py), so exact match and test outcomes are known; one test runs the modes
unscripted on a budget too small to finish.
"""

from __future__ import annotations

import json
import shutil

import pytest

from cadedit.bench import e2e as ee
from cadedit.bench.corpus import Case, case_from_record
from cadedit.bench.harness import Verdict, run_test, runnable_program
from cadedit.text.document import Document
from cadedit.errors import CadeditError
from cadedit.options import Mode
from tests.bench_helpers import record, write_corpus
from tests.scripting import editing, inject_e2e, invoke as invoke_cli, spelling

PASSES = record(
    "passes", "def f(a, b):\n    return a - b\n", "def f(a, b):\n    return a + b\n", test="assert f(1, 2) == 3\n"
)
FAILS = record("fails", "def g(x):\n    return x\n", "def g(x):\n    return x * 2\n", test="assert g(2) == 5\n")


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "two.jsonl", [PASSES, FAILS])


@pytest.fixture
def scripted(monkeypatch):
    """Every mode 'chooses' each case's gold through the real loop: the program decoder its oracle
    program, the fenced modes the gold and its closing fence. Returns the modes decoded, in order."""
    golds = {r["before"]: r["after"] for r in (PASSES, FAILS)}
    modes = []
    inject_e2e(
        monkeypatch,
        editing(
            lambda document: Document.from_text(golds[document.text]), lambda prepared: modes.append(prepared.mode)
        ),
    )
    return modes


def invoke(*args: str):
    return invoke_cli(["bench", "e2e", *args])


def test_e2e_program_and_rewrite_with_tests_json_and_bounds(tmp_path, corpus, tiny_dir, scripted):
    kernel = tmp_path / "k.json"
    kernel.write_text(json.dumps({"results": [{"n": 1, "speedup": 1.0}, {"n": 64, "speedup": 8.0}]}))
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--methods",
        "program,rewrite",
        "--max-new-tokens",
        "48",
        "--kernel",
        str(kernel),
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert scripted == [Mode.PROGRAM, Mode.REWRITE] * 2
    data = json.loads(out.read_text())
    assert data["partial"] is False and data["baseline"] == "rewrite" and data["model"] == str(tiny_dir)
    assert data["methods"] == ["program", "rewrite"]
    (two,) = data["corpora"]
    passes, fails = two["cases"]
    assert [passes["id"], fails["id"]] == ["passes", "fails"]
    for case, test_passed in ((passes, True), (fails, False)):
        program = case["program"]
        assert program["exact"] is program["trimmed"] is True and program["error"] is None
        assert program["text"] == (PASSES if case is passes else FAILS)["after"]
        assert program["test"]["passed"] is test_passed
        assert program["forward_passes"] > 0 and program["tokens_spliced"] > 0 and program["seconds"] > 0
        rewrite = case["rewrite"]
        assert rewrite["exact"] is True and rewrite["test"]["passed"] is test_passed and rewrite["error"] is None
        # one forward per token, nothing copied without a step
        assert rewrite["output"].endswith("```\n") and rewrite["forward_passes"] == rewrite["tokens_new"] > 0
        assert rewrite["tokens_spliced"] == 0
    summary = two["summary"]
    assert summary["methods"]["program"] | {"seconds_total": 0, "seconds_mean": 0, "seconds_median": 0} == {
        "n": 2,
        "errors": 0,
        "exact": 2,
        "trimmed": 2,
        "tested": 2,
        "passed": 1,
        "seconds_total": 0,
        "seconds_mean": 0,
        "seconds_median": 0,
        "forward_passes_total": passes["program"]["forward_passes"] + fails["program"]["forward_passes"],
        "tokens_new_total": passes["program"]["tokens_new"] + fails["program"]["tokens_new"],
        "tokens_spliced_total": passes["program"]["tokens_spliced"] + fails["program"]["tokens_spliced"],
        "compared": 0,
        "same_as_first": 0,
        "first_speedup": 1.0,  # the first is what the others are compared with
        "floor_n": 0,
        "floor_seconds_total": None,
        "over_floor": None,  # no --floor
    }
    assert summary["methods"]["rewrite"]["compared"] == summary["methods"]["rewrite"]["same_as_first"] == 2
    assert passes["program"]["same_as_first"] is None and passes["rewrite"]["same_as_first"] is True
    assert summary["methods"]["rewrite"]["exact"] == 2 and summary["methods"]["rewrite"]["passed"] == 1
    speedup = summary["speedup"]
    assert speedup["n"] == speedup["n_both_exact"] == speedup["n_both_edited"] == 2
    assert (
        speedup["wall"]
        == speedup["wall_both_exact"]
        == pytest.approx(
            sum(c["rewrite"]["seconds"] for c in (passes, fails))
            / sum(c["program"]["seconds"] for c in (passes, fails)),
            rel=1e-3,
        )
    )
    assert speedup["forward_passes"] == pytest.approx(
        sum(c["rewrite"]["forward_passes"] for c in (passes, fails))
        / summary["methods"]["program"]["forward_passes_total"]
    )
    assert 1.0 < two["bounds"]["bnd_exact"] < 8.0
    assert "End to end" in result.stdout and "bnd_exact" in result.stdout and "1/2" in result.stdout
    assert "passes: program: exact, test passed" in result.stderr


def test_e2e_measures_verify_against_rewrite_by_default(tmp_path, corpus, tiny_dir, scripted):
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--no-tests",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert ee.DEFAULT_METHODS == ("verify", "rewrite") and scripted == [Mode.VERIFY, Mode.REWRITE] * 2
    data = json.loads(out.read_text())
    assert data["methods"] == ["verify", "rewrite"] and data["baseline"] == "rewrite"
    for case in data["corpora"][0]["cases"]:
        assert set(case) == {"id", "language", "verify", "rewrite"}
        verify, rewrite = case["verify"], case["rewrite"]
        assert verify["exact"] is rewrite["exact"] is True and verify["output"] == rewrite["output"]
        assert verify["forward_passes"] < rewrite["forward_passes"] and verify["tokens_spliced"] > 0
        assert verify["tokens_new"] == rewrite["tokens_new"]  # the same tokens, fewer forwards
    speedup = data["corpora"][0]["summary"]["speedup"]
    assert speedup["n_both_exact"] == 2 and speedup["forward_passes"] > 1.0


def test_e2e_floor_puts_each_methods_wall_clock_over_its_compute_floor(tmp_path, corpus, tiny_dir, scripted):
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--no-tests",
        "--floor",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    floor = ee.Floor(data["floor"]["prefill_ms_per_token"], data["floor"]["step_ms"], 1024, 512)
    assert floor.prefill_ms > 0 and floor.step_ms > 0 and data["floor"]["prefix"] == 1024
    (two,) = data["corpora"]
    for method in ("verify", "rewrite"):
        least = 0.0
        for case in two["cases"]:
            a = case[method]
            assert a["tokens_prompt"] > 0 and 0 < a["tokens_stepped"] <= a["tokens_new"]
            least += floor.seconds(
                ee.Edited(
                    "",
                    "",
                    a["forward_passes"],
                    a["tokens_new"],
                    a["tokens_spliced"],
                    0.0,
                    a["tokens_prompt"],
                    a["tokens_stepped"],
                )
            )
        summary = two["summary"]["methods"][method]
        assert summary["floor_n"] == 2 and summary["floor_seconds_total"] == pytest.approx(least)
        assert summary["over_floor"] == pytest.approx(summary["seconds_total"] / least)
    verify, rewrite = two["cases"][0]["verify"], two["cases"][0]["rewrite"]
    assert (
        verify["tokens_stepped"] < rewrite["tokens_stepped"] == rewrite["tokens_new"]
    )  # kept drafts are fed, not stepped
    assert "wall / floor" in result.stdout and "compute floor: prefill" in result.stderr


def test_floor_feeds_prompt_and_copied_tokens_and_steps_the_written_ones():
    floor = ee.Floor(prefill_ms=2.0, step_ms=50.0, prefix=1024, span=512)
    edited = ee.Edited("", "", 5, tokens_new=100, tokens_spliced=0, tokens_prompt=1000, tokens_stepped=4)
    assert floor.seconds(edited) == pytest.approx(((1000 + 96) * 2.0 + 4 * 50.0) / 1000)
    assert floor.seconds(ee.Edited("", "", None, 10)) is None and floor.seconds(None) is None  # a peer: not counted


def test_e2e_one_method_and_ctrl_c_leaves_partial_json(tmp_path, corpus, tiny_dir, scripted, monkeypatch):
    real, calls = ee.run_case, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(ee, "run_case", interrupted)
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--methods",
        "program",
        "--no-tests",
        "--json",
        str(out),
    )
    assert result.exit_code == 130
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["methods"] == ["program"] and data["baseline"] == ""
    (case,) = data["corpora"][0]["cases"]
    assert set(case) == {"id", "language", "program"} and case["program"]["exact"] is True
    assert case["program"]["test"]["passed"] is None and data["corpora"][0]["summary"]["speedup"] is None


def test_e2e_budget_failures_are_results_not_crashes(tmp_path, corpus, tiny_dir):
    out = tmp_path / "e2e.json"  # the random model, unscripted, with a budget of 3 tokens per edit
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--methods",
        "program,verify,rewrite",
        "--max-new-tokens",
        "3",
        "--limit",
        "1",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    case = json.loads(out.read_text())["corpora"][0]["cases"][0]
    for method in ("program", "verify", "rewrite"):
        assert case[method]["error"].startswith("BudgetError: ") and case[method]["text"] is None
        assert case[method]["test"] == {"passed": False, "detail": "no edit", "seconds": 0.0}


@pytest.mark.parametrize(
    "args",
    [
        ["--methods", "nope"],
        ["--methods", "verify,nope"],
        ["--methods", ","],
        ["--counting", "nope"],
        ["--baseline", "rewrite"],
    ],
)
def test_e2e_bad_options_are_usage_errors(corpus, args):
    assert invoke("-c", str(corpus), *args).exit_code == 2


def test_methods_are_fix_then_the_modes_in_order_then_the_peers():
    assert ee.MODES == ("program", "rewrite", "lookup", "verify")
    assert ee.METHODS == ("fix",) + ee.MODES + ("llama-rewrite", "llama-lookup")
    assert list(ee.methods(["lookup", "program"])) == ["lookup", "program"]
    with pytest.raises(CadeditError, match="unknown method 'fastest'"):
        ee.methods(["fastest"])
    with pytest.raises(CadeditError, match="no method"):
        ee.methods([])
    with pytest.raises(CadeditError, match="llama-lookup needs llama.cpp") as raised:
        ee.methods(["verify", "llama-lookup"])
    assert raised.value.hint == "pass --gguf PATH"


# -- the test harness --------------------------------------------------------------------------


def case(language: str, test: str | None, prefix: str = "") -> Case:
    return Case("c", language, "", "", "Fix it.", test, prefix)


def test_python_program_is_prefix_text_newline_test():
    c = case("python", "assert f() == 1\n", prefix="def f():\n")
    assert runnable_program(c, "    return 1") == "def f():\n    return 1\nassert f() == 1\n"
    assert run_test(c, "    return 1").passed is True
    failed = run_test(c, "    return 2")
    assert failed.passed is False and "AssertionError" in failed.detail


def test_timeouts_and_cases_without_a_runner():
    assert run_test(case("python", "while True: pass\n"), "", timeout=0.5) == Verdict(
        False, "timeout after 0.5 s", pytest.approx(0.5, abs=2.0)
    )
    assert run_test(case("python", None), "x = 1").passed is None
    assert run_test(case("cobol", "x"), "x").detail == "no runner for cobol"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_fails_on_anything_written_to_stderr_and_has_the_md5_shim():
    c = case("javascript", "console.assert(f() === 1)\n")
    assert run_test(c, "const f = () => 1").passed is True
    failed = run_test(c, "const f = () => 2")  # exits 0, but prints "Assertion failed"
    assert failed.passed is False and failed.detail.startswith("stderr: Assertion failed")
    md5 = case("javascript", "console.assert(require('js-md5')('password') === '5f4dcc3b5aa765d61d8327deb882cf99')\n")
    assert run_test(md5, "").passed is True


# -- the arithmetic ----------------------------------------------------------------------------


def attempt(method: str, seconds: float, prefill: float, passes: int | None, exact: bool) -> ee.Attempt:
    return ee.Attempt(method, seconds, ee.Edited("x", "x", passes, 1, 0, prefill), exact, exact)


def test_speedups_sum_costs_over_cases():
    results = [
        ee.CaseResult("a", "python", (attempt("program", 1.0, 0.5, 10, True), attempt("rewrite", 4.0, 0.5, 40, True))),
        ee.CaseResult("b", "python", (attempt("program", 3.0, 1.0, 30, False), attempt("rewrite", 4.0, 1.0, 50, True))),
        ee.CaseResult(
            "c",
            "python",
            (ee.Attempt("program", 2.0, None, error="BudgetError: x"), attempt("rewrite", 2.0, 1.0, 20, False)),
        ),
    ]
    s = ee.speedups(results, "rewrite")
    assert s["n"] == 3 and s["wall"] == pytest.approx(10.0 / 6.0)
    assert s["n_both_exact"] == 1 and s["wall_both_exact"] == pytest.approx(4.0)
    assert s["n_both_edited"] == 2 and s["decode"] == pytest.approx((3.5 + 3.0) / (0.5 + 2.0))
    assert s["forward_passes"] == pytest.approx(90 / 40)
    summary = ee.summarize(results, "rewrite")["methods"]
    assert summary["program"]["errors"] == 1 and summary["program"]["exact"] == 1
    assert summary["rewrite"]["forward_passes_total"] == 110


# -- long cases and the identity column --------------------------------------------------------


def humanevalpack(k: int, buggy: str, canonical: str) -> dict:
    return {
        "task_id": f"Python/{k}",
        "entry_point": f"f{k}",
        "declaration": f"def f{k}(x):\n",
        "buggy_solution": buggy,
        "canonical_solution": canonical,
        "test": f"assert f{k}(1) == {k + 1}\n",
    }


PACK = [
    humanevalpack(0, "    y = x\n    return y + 1\n", "    y = x\n    return y\n"),  # one line changed
    humanevalpack(1, "    return x\n", "    return x + 1\n"),
    humanevalpack(2, "    y = 0\n    return x\n", "    return x + 2\n"),  # two lines into one: not one-line
    humanevalpack(3, "    return x - 3\n", "    return x + 3\n"),
]


def test_long_cases_join_gold_files_and_keep_one_one_line_bug():
    cases = [case_from_record(r, f"pack:{k}") for k, r in enumerate(PACK)]
    (long,) = ee.long_cases(cases, 1, lines=7)  # starts at case 17 % 4 = 1: files 1, 2, 3 (2 + 2 + 2 lines + joins)
    golds = [c.prefix + c.after for c in (cases[1], cases[2], cases[3])]
    assert long.after == "\n".join(golds) and long.prefix == ""
    # the bug nearest the middle that is a one-line change: case 2 (the middle) is not, 1 and 3 are
    # equally near, the earlier wins
    assert long.id == "long/Python/1@1of3"
    assert long.before == "\n".join([cases[1].prefix + cases[1].before, golds[1], golds[2]])
    assert long.test == cases[1].test and long.instruction == "Fix bugs in f1."
    assert [ee.one_line_bug(c) for c in cases] == [True, True, False, True]
    assert run_test(long, long.after).passed is True and run_test(long, long.before).passed is False
    assert len(ee.long_cases(cases, 3, lines=7)) == 3 and ee.long_cases([], 2) == []


def test_e2e_long_cases_and_same_output_column(tmp_path, tiny_dir, monkeypatch):
    corpus = write_corpus(tmp_path / "pack.jsonl", PACK)
    cases = [case_from_record(r, "x") for r in PACK]
    golds = {c.before: c.after for c in cases + ee.long_cases(cases, 1)}
    inject_e2e(monkeypatch, editing(lambda document: Document.from_text(golds[document.text])))
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--methods",
        "verify,rewrite,program",
        "--long",
        "1",
        "--limit",
        "2",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["long"] == 1 and [c["name"] for c in data["corpora"]] == ["pack", "pack long"]
    assert data["imports_seconds"] >= 0 and {"tokenizer", "weights"} <= data["load_phases"].keys()
    short, long = data["corpora"]
    assert [c["id"] for c in short["cases"]] == ["Python/0", "Python/1"]
    (case,) = long["cases"]
    assert case["id"] == ee.long_cases(cases, 1)[0].id
    for method in ("verify", "rewrite", "program"):
        assert case[method]["exact"] is True and case[method]["test"]["passed"] is True
    assert case["verify"]["same_as_first"] is None
    assert case["rewrite"]["same_as_first"] is case["program"]["same_as_first"] is True
    assert long["summary"]["methods"]["program"]["same_as_first"] == 1
    methods = short["summary"]["methods"]
    assert methods["rewrite"]["first_speedup"] == pytest.approx(
        methods["rewrite"]["seconds_total"] / methods["verify"]["seconds_total"]
    )
    assert "verify faster by" in result.stdout
    assert "same output as verify" in result.stdout and "pack long" in result.stdout
    assert "rewrite: exact, test passed" in result.stderr and ", same" in result.stderr


def test_compare_outputs_marks_each_attempt_against_the_first():
    a = attempt("verify", 1.0, 0.0, 1, True)
    same, other = attempt("rewrite", 1.0, 0.0, 1, True), ee.Attempt("lookup", 1.0, ee.Edited("y", "y", 1, 1))
    failed = ee.Attempt("program", 1.0, None, error="BudgetError: x")
    marked = ee.compare_outputs([a, same, other, failed])
    assert [m.same_as_first for m in marked] == [None, True, False, None]
    assert ee.compare_outputs([failed, a])[1].same_as_first is None  # nothing to compare with
    summary = ee.method_summary(marked[1:3])
    assert summary["compared"] == 2 and summary["same_as_first"] == 1


LONG_BEFORE = "import os\n\n\ndef f(a, b):\n    x = 1\n    return a - b\n" + "".join(
    f"Y{k} = {k}\n" for k in range(150)
)


def test_e2e_fix_retypes_only_the_line_the_instruction_names(tmp_path, tiny_dir, monkeypatch):
    after = LONG_BEFORE.replace("return a - b", "return a + b")
    corpus = write_corpus(tmp_path / "long.jsonl", [record("long", LONG_BEFORE, after, instruction="Fix line 6.")])
    seen = []

    def answer(prepared) -> str:
        seen.append((prepared.mode, prepared.regions))
        return prepared.source.replace("a - b", "a + b") if prepared.regions else after + prepared.fence + "\n"

    inject_e2e(monkeypatch, spelling(answer))
    out = tmp_path / "e2e.json"
    result = invoke(
        "-c",
        str(corpus),
        "--model",
        str(tiny_dir),
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--methods",
        "fix,verify",
        "--no-tests",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert seen == [(Mode.VERIFY, ((6, 6),)), (Mode.VERIFY, ())]
    (case,) = json.loads(out.read_text())["corpora"][0]["cases"]
    assert case["fix"]["exact"] is case["verify"]["exact"] is True  # the same file; the scoped answer is one line
    assert case["fix"]["forward_passes"] <= case["verify"]["forward_passes"]
