"""`cadedit fix` with tries and checks, end to end through the CLI, with scripted candidates.

The tiny random-weight Qwen2 (tests/tinymodel.py) is saved as a model folder and loaded by the CLI;
try k spells a chosen fenced answer through the real decode loop (real model, real cursor, real
drafter), given through tries.edit_verified's picks seam (tests/scripting.py), and every try's
prompt is recorded so the feedback of a failed try can be found in the next prompt. Exit codes are
checked exactly (0 passed, 1 error, 2 usage, 3 no try passed, 130 SIGINT, 143 SIGTERM) and the
user's file is compared byte for byte wherever nothing may be written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import cadedit.backends.model as model_module
import cadedit.decode.pipeline as pipeline
from cadedit.decode.loop import script_sampler
from cadedit.backends.model import token_bytes
from tests.conftest import as_foreground
from tests.scripting import inject_picks, invoke

REPO = Path(__file__).resolve().parents[1]

BEFORE = b"def add(a, b):\n    return a - b\n\n\nprint(add(1, 2))\n"
GOOD = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
BROKEN = "def add(a, b):\n    return a +\n\n\nprint(add(1, 2))\n"  # line 2 does not parse
WRONG = "def add(a, b):\n    return a * b\n\n\nprint(add(1, 2))\n"  # parses, fails the test
SAME = BEFORE.decode()
INSTRUCTION = "Fix the bug."  # names no line or definition: the scope is the whole file

# Exits 1 (printing why) unless the file has the fix.
GREP_TEST = "grep -q 'a + b' a.py || { echo 'expected a + b in add'; exit 1; }"

# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _models():
    return {}


@pytest.fixture(autouse=True)
def load_once(monkeypatch, _models):
    """The CLI loads the model through cadedit.backends.model.load_model; load each folder once per session
    (the load is most of a tiny-model run; the decode loop, checks and printing stay real)."""
    real = model_module.load_model

    def load_model(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in _models:
            _models[key] = real(*args, **kwargs)
        return _models[key]

    monkeypatch.setattr(model_module, "load_model", load_model)


@pytest.fixture
def work(tmp_path, monkeypatch):
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    (folder / "a.py").write_bytes(BEFORE)
    return folder


@dataclass
class Call:
    prompt: str  # the prompt ids decoded with the tokenizer
    prepared: pipeline.Prepared


@pytest.fixture
def scripted(monkeypatch):
    """scripted(*answers): try k spells answers[k - 1] (the last one again for later tries).
    A str is the candidate file's display text (the fence is added); a callable gets the Prepared
    and returns the whole answer. Returns the list of calls, one per try."""
    calls: list[Call] = []

    def script(*answers):
        def picks(k: int):
            answer = answers[min(k, len(answers)) - 1]

            def make_sampler(loaded, document, prepared):
                calls.append(Call(loaded.tokenizer.decode(list(prepared.prompt_ids)), prepared))
                text = answer(prepared) if callable(answer) else answer + prepared.fence + "\n"
                return script_sampler(text, token_bytes(loaded))

            return make_sampler if k else None  # 0: the where-step, not scripted here

        inject_picks(monkeypatch, picks)
        return calls

    return script


def fix(tiny_dir, *args: str, instruction: str = INSTRUCTION):
    """`cadedit fix` with one candidate a try (scripted answers are tries; with --test the default would
    make try 1 several candidates: tests/test_candidates.py)."""
    return invoke(
        [
            "fix",
            "a.py",
            instruction,
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--candidates",
            "1",
            *args,
        ]
    )


def tries_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": try " in line]


def left_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# -- 1. a failed try feeds back and tries again ------------------------------------------------


def test_syntax_error_then_good_passes_on_try_2(work, tiny_dir, scripted):
    calls = scripted(BROKEN, GOOD)
    result = fix(tiny_dir)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("diff --git a/a.py b/a.py\n")
    assert "-    return a - b\n+    return a + b\n" in result.stdout
    assert "return a +\n" not in result.stdout  # try 1's candidate is not the one shown
    lines = tries_lines(result.stderr)
    assert len(lines) == 2
    assert "try 1 of 3: failed: syntax (line 2: invalid syntax)" in lines[0]
    assert "try 2 of 3: passed: syntax, names, kept, body, public, change" in lines[1]
    assert (work / "a.py").read_bytes() == BEFORE
    assert len(calls) == 2


def test_the_second_prompt_quotes_the_syntax_error_last(work, tiny_dir, scripted):
    calls = scripted(BROKEN, GOOD)
    assert fix(tiny_dir).exit_code == 0
    first, second = calls[0].prompt, calls[1].prompt
    told = "Your previous answer did not parse: line 2: invalid syntax (`    return a +`)."
    assert told not in first and "Try again." not in first
    assert told + "\nTry again." in second
    # The feedback goes last in the user message: try 2's prompt extends try 1's up to the end of
    # its user message, so the KV cache of that prefix is reused.
    user_end = first.rindex("<|im_end|>")
    assert second.startswith(first[:user_end])
    assert second.index(told) > len(first[:user_end]) - 1
    assert calls[1].prepared.prompt_ids[:10] == calls[0].prepared.prompt_ids[:10]


def test_three_broken_tries_exit_3_and_show_the_best_diff_on_stderr(work, tiny_dir, scripted):
    calls = scripted(BROKEN)
    result = fix(tiny_dir, "--write")
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}
    assert [line.split(": try ")[1].split(" (")[0] for line in tries_lines(result.stderr)] == [
        "1 of 3: failed: syntax",
        "2 of 3: failed: syntax",
        "3 of 3: failed: syntax",
    ]
    assert (
        "the best candidate (try 1 of 3) FAILED its checks; its diff, not applied:" in result.stderr
    )  # equals: the earliest
    assert "+    return a +\n" in result.stderr
    assert (
        "error: a.py: no try of 3 passed its checks (failed: syntax (line 2: invalid syntax)); nothing was "
        "written" in result.stderr
    )
    assert "wrote" not in result.stderr
    assert len(calls) == 3


def test_tries_1_stops_after_one_candidate(work, tiny_dir, scripted):
    calls = scripted(BROKEN, GOOD)
    result = fix(tiny_dir, "--tries", "1")
    assert result.exit_code == 3, result.output
    assert len(calls) == 1 and "try 1 of 1: failed: syntax" in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE


def test_tries_0_is_a_usage_error(work, tiny_dir, scripted):
    calls = scripted(GOOD)
    assert fix(tiny_dir, "--tries", "0").exit_code == 2
    assert calls == []


def test_a_passing_try_is_written_with_write(work, tiny_dir, scripted):
    scripted(BROKEN, GOOD)
    result = fix(tiny_dir, "--write")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert (work / "a.py").read_bytes() == GOOD.encode()
    assert left_in(work) == {"a.py"}
    assert "wrote a.py" in result.stderr


def test_quiet_prints_no_try_lines(work, tiny_dir, scripted):
    scripted(BROKEN, GOOD)
    result = fix(tiny_dir, "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert "+    return a + b\n" in result.stdout


# -- 2. a candidate that changes nothing -------------------------------------------------------


def test_no_change_is_a_failed_try(work, tiny_dir, scripted):
    calls = scripted(SAME)
    result = fix(tiny_dir, "--write")
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}
    assert "try 1 of 3: failed: change (the edit changed nothing)" in result.stderr
    assert (
        "no try of 3 passed its checks (failed: change (the edit changed nothing)); nothing was written"
        in result.stderr
    )
    # A bug fix must change something: the hint does not offer to accept no change
    assert "hint: the model found nothing to change: name the function or line to fix" in result.stderr
    assert "--allow-no-change" not in result.stderr
    assert len(calls) == 3
    told = "Your previous answer did not change the file although the instruction asks for a change."
    assert told not in calls[0].prompt and told in calls[1].prompt and told in calls[2].prompt


def test_a_candidate_that_empties_the_file_fails_unless_the_instruction_asks(work, tiny_dir, scripted):
    calls = scripted("", GOOD)
    result = fix(tiny_dir, "--write", "--no-scope")
    assert result.exit_code == 0, result.output
    assert "change (the edit empties the file, which the instruction does not ask for)" in tries_lines(result.stderr)[0]
    assert "deleted everything although the instruction does not ask for that" in calls[1].prompt
    assert (work / "a.py").read_bytes() == GOOD.encode()


def test_a_candidate_that_empties_the_file_passes_when_the_instruction_asks(work, tiny_dir, scripted):
    scripted("")
    asked = fix(tiny_dir, "--write", "--no-scope", instruction="Delete everything in this file.")
    assert asked.exit_code == 0, asked.output
    assert (work / "a.py").read_bytes() == b""


def test_no_change_then_a_change_passes_on_try_2(work, tiny_dir, scripted):
    scripted(SAME, GOOD)
    result = fix(tiny_dir)
    assert result.exit_code == 0, result.output
    assert "try 1 of 3: failed: change" in result.stderr and "try 2 of 3: passed" in result.stderr
    assert "+    return a + b\n" in result.stdout


def test_best_candidate_is_the_broken_one_when_the_last_changes_nothing(work, tiny_dir, scripted):
    scripted(BROKEN, SAME)
    result = fix(tiny_dir, "--tries", "2")
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    # Both failed one check; the later one (no change) counts as best, so there is no diff to show.
    assert "no try of 2 passed its checks (failed: change" in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE


def test_allow_no_change_accepts_it_and_says_no_change(work, tiny_dir, scripted):
    calls = scripted(SAME)
    result = fix(tiny_dir, "--allow-no-change", "--write")
    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    assert result.stdout == ""
    assert (work / "a.py").read_bytes() == BEFORE
    assert "try 1 of 3: passed" in result.stderr
    assert "no change" in result.stderr


def test_allow_no_change_exits_0_on_try_1_and_writes_nothing(work, tiny_dir, scripted):
    calls = scripted(SAME)
    result = fix(tiny_dir, "--allow-no-change", "--write")
    assert result.exit_code == 0, result.output
    assert len(calls) == 1 and result.stdout == ""
    assert "try 1 of 3: passed: syntax, names, kept, body, public (" in result.stderr  # no "change": none made
    assert "wrote" not in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}


def test_check_with_no_change_exits_0(work, tiny_dir, scripted):
    calls = scripted(SAME)
    result = fix(tiny_dir, "--check")
    assert result.exit_code == 0, result.output
    assert len(calls) == 1 and result.stdout == ""
    assert (work / "a.py").read_bytes() == BEFORE
    # the "change" check passes an allowed no-change; the lines must not read as if a change were made
    said = [line for line in result.stderr.splitlines() if line.startswith("a.py: no change (")]
    assert len(said) == 1 and "passed: syntax, names, kept, body, public, try 1 of 3)" in said[0], result.stderr
    assert "change," not in result.stderr and "change;" not in result.stderr, result.stderr


def test_a_bad_lines_or_scope_is_refused_before_the_model_loads(work):
    """--lines past the end and --scope naming no definition: one line, exit 1, and no model is
    looked for (the model named here does not exist)."""
    for extra, said in (
        (("--lines", "90-99"), "error: --lines 90-99: a.py has 5 lines"),
        (("--scope", "nosuch"), "error: --scope nosuch: a.py defines no function, method or class named nosuch"),
    ):
        result = invoke(["fix", "a.py", INSTRUCTION, "--model", str(work / "no-model"), *extra])
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines()[0] == said, result.stderr
        assert "model" not in result.stderr
        assert (work / "a.py").read_bytes() == BEFORE


def test_check_with_a_change_exits_1_and_writes_nothing(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--check")
    assert result.exit_code == 1, result.output
    assert "+    return a + b\n" in result.stdout
    assert (work / "a.py").read_bytes() == BEFORE


def test_check_with_only_broken_candidates_exits_3(work, tiny_dir, scripted):
    scripted(BROKEN)
    result = fix(tiny_dir, "--check", "--tries", "2")
    assert result.exit_code == 3, result.output
    assert (work / "a.py").read_bytes() == BEFORE


# -- 3. --test ---------------------------------------------------------------------------------


def test_failing_then_passing_test_passes_on_try_2(work, tiny_dir, scripted):
    calls = scripted(WRONG, GOOD)
    result = fix(tiny_dir, "--test", GREP_TEST)
    assert result.exit_code == 0, result.output
    lines = tries_lines(result.stderr)
    assert "try 1 of 3: failed: test (exit 1)" in lines[0]
    assert "try 2 of 3: passed: syntax, names, kept, body, public, change, test" in lines[1]
    assert "+    return a + b\n" in result.stdout
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}
    told = "The tests failed (exit 1):\nexpected a + b in add"
    assert told not in calls[0].prompt and told in calls[1].prompt


def test_the_best_failing_candidate_is_the_one_that_got_furthest(work, tiny_dir, scripted):
    scripted(WRONG, BROKEN)
    result = fix(tiny_dir, "--test", GREP_TEST)
    assert result.exit_code == 3, result.output
    assert (
        "the candidate that changed least and broke nothing but the test (try 1 of 3) FAILED its checks"
        in result.stderr
    )
    assert "+    return a * b\n" in result.stderr


def test_test_sees_the_candidate_in_place(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--tries", "1", "--json", "--test", "cat a.py; cmp -s a.py ../seen || cp a.py ../seen")
    assert result.exit_code == 0, result.output
    assert (work.parent / "seen").read_bytes() == GOOD.encode()
    assert (work / "a.py").read_bytes() == BEFORE


def test_a_test_that_hangs_times_out_and_the_file_is_restored(work, tiny_dir, scripted):
    scripted(GOOD)
    start = time.monotonic()
    result = fix(tiny_dir, "--tries", "1", "--test", "sleep 30", "--test-timeout", "1")
    assert time.monotonic() - start < 20
    assert result.exit_code == 3, result.output
    assert "try 1 of 1: failed: test (timed out after 1s)" in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}


def test_a_test_that_crashes_fails_the_try(work, tiny_dir, scripted):
    calls = scripted(GOOD)
    result = fix(tiny_dir, "--tries", "2", "--test", "kill -SEGV $$")
    assert result.exit_code == 3, result.output
    assert "try 1 of 2: failed: test (killed by SIGSEGV)" in result.stderr
    assert "The tests failed (killed by SIGSEGV)" in calls[1].prompt
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}


def test_a_test_that_deletes_the_file_leaves_the_original(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--tries", "2", "--test", "rm a.py; exit 1")
    assert result.exit_code == 3, result.output
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}


@pytest.mark.parametrize("command", ["echo junk > a.py; exit 1", "echo junk > a.py"])
def test_a_test_that_rewrites_the_file_keeps_its_bytes_and_says_where_the_original_is(
    work, tiny_dir, scripted, command
):
    """Only what cadedit placed is taken back: bytes written during the test (a user's save, or the test's
    own) stay, nothing is written, and the original is kept where the message says."""
    scripted(GOOD)
    result = fix(tiny_dir, "--tries", "2", "--test", command, "--write")
    assert result.exit_code == 1, result.output
    assert "a.py: changed while the test ran, so its new bytes were kept; the original is in" in result.stderr
    assert (work / "a.py").read_bytes() == b"junk\n" and left_in(work) == {"a.py"}
    kept = Path(result.stderr.split("the original is in ", 1)[1].split()[0])
    assert kept.read_bytes() == BEFORE


def test_write_with_a_passing_test_writes_the_candidate(work, tiny_dir, scripted):
    scripted(WRONG, GOOD)
    result = fix(tiny_dir, "--test", GREP_TEST, "--write")
    assert result.exit_code == 0, result.output
    assert "try 2 of 3: passed: syntax, names, kept, body, public, change, test" in result.stderr
    assert (work / "a.py").read_bytes() == GOOD.encode()
    assert left_in(work) == {"a.py"}


def test_the_test_is_not_run_for_a_candidate_that_does_not_parse(work, tiny_dir, scripted):
    scripted(BROKEN, GOOD)
    result = fix(tiny_dir, "--test", "echo ran >> ../runs")
    assert result.exit_code == 0, result.output
    assert (work.parent / "runs").read_text() == "ran\n"  # try 2 only


# -- 4. signals while the test runs (a real process) -------------------------------------------

DRIVER = textwrap.dedent("""\
    import os, sys
    from cadedit.cli import root as cli
    from cadedit.cli.common import Scripted
    from cadedit.decode.loop import script_sampler
    from cadedit.backends.model import token_bytes

    ANSWER = os.environ["SCRIPTED_ANSWER"]

    def spell(loaded, document, prepared):
        return script_sampler(ANSWER + prepared.fence + "\\n", token_bytes(loaded))

    sys.argv[0] = "cadedit"
    cli.app(prog_name="cadedit", obj=Scripted(picks=lambda k: spell if k else None))
""")


def start_cadedit(work: Path, tiny_dir: Path, *args: str) -> subprocess.Popen:
    driver = work.parent / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SCRIPTED_ANSWER": GOOD}
    return subprocess.Popen(
        [sys.executable, str(driver), "fix", "a.py", INSTRUCTION, "--model", str(tiny_dir), "--dtype", "fp32",
         "--threads", "1", *args], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=as_foreground,
    )  # fmt: skip


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"cadedit exited {proc.returncode} before the test started:\n{err.decode()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the test command never started")
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_test_runs_restores_the_file(work, tiny_dir, signum, code):
    proc = start_cadedit(work, tiny_dir, "--write", "--test", "echo $$ > ../pid; touch started; exec sleep 30")
    wait_for(work / "started", proc)
    assert (work / "a.py").read_bytes() == GOOD.encode()  # the candidate is in place while the test runs
    start = time.monotonic()
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert time.monotonic() - start < 10  # the test's group is ended, not waited for
    assert proc.returncode == code, err.decode()
    assert b"Traceback" not in err
    if signum == signal.SIGINT:  # Ctrl-C says so; SIGTERM (a supervisor's stop) ends quietly
        assert err.decode().rstrip().splitlines()[-1] == "interrupted; nothing written", err.decode()
    assert (work / "a.py").read_bytes() == BEFORE
    assert left_in(work) == {"a.py", "started"}  # no temporary file left
    assert gone(int((work.parent / "pid").read_text()))  # the test's sleep did not outlive cadedit


def test_a_second_ctrl_c_while_the_test_is_ended_still_restores_the_file(work, tiny_dir):
    # The test ignores SIGTERM, so cadedit waits out its grace before SIGKILL; Ctrl-C again meanwhile.
    proc = start_cadedit(work, tiny_dir, "--test", "trap '' TERM; touch started; sleep 30")
    wait_for(work / "started", proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    # 130 from the first Ctrl-C; on a loaded machine the second may land after the original is back and
    # the exit is under way, where Python ends by SIGINT itself (-2 here; a shell reports both as 130).
    assert proc.returncode in (130, -signal.SIGINT), err.decode()
    assert (work / "a.py").read_bytes() == BEFORE
    assert left_in(work) == {"a.py", "started"}


# -- 5. --json ---------------------------------------------------------------------------------


def test_json_lists_every_try_with_its_checks(work, tiny_dir, scripted):
    scripted(BROKEN, GOOD)
    result = fix(tiny_dir, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True and data["answer_try"] == 2 and data["scope"] == []
    assert data["changed"] is True and "+    return a + b\n" in data["diff"]
    assert isinstance(data["load_seconds"], float)
    one, two = data["tries"]
    assert [one["try"], two["try"]] == [1, 2]
    assert [one["passed"], two["passed"]] == [False, True]
    assert [one["temperature"], two["temperature"]] == [0.0, 0.0]
    assert one["error"] is None and one["changed"] is True
    syntax, change = one["checks"]  # the code checks read only code that parses
    assert syntax == {
        "name": "syntax",
        "passed": False,
        "skipped": False,
        "detail": "line 2: invalid syntax",
        "output_tail": "    return a +",
        "seconds": syntax["seconds"],
    }
    assert change["name"] == "change" and change["passed"] is True
    assert [c["name"] for c in two["checks"]] == ["syntax", "names", "kept", "body", "public", "change"]
    assert all(c["passed"] for c in two["checks"])
    for t in (one, two):
        assert isinstance(t["seconds"], float) and t["seconds"] > 0
        assert isinstance(t["tokens_new"], int) and t["tokens_new"] > 0
        for key in ("tokens_copied", "tokens_prompt_fed", "tokens_prompt_reused"):
            assert isinstance(t[key], int)
    assert two["tokens_prompt_reused"] > 0  # try 2 shares try 1's prompt prefix


def test_json_with_no_passing_try_exits_3_and_still_prints_the_tries(work, tiny_dir, scripted):
    scripted(BROKEN)
    result = fix(tiny_dir, "--json")
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is False and data["answer_try"] is None and data["best_try"] == 1  # equals: the earliest
    assert [t["try"] for t in data["tries"]] == [1, 2, 3]
    assert [t["temperature"] for t in data["tries"]] == [0.0, 0.0, 0.7]
    assert not any(t["passed"] for t in data["tries"])
    assert "+    return a +\n" in data["diff"]
    assert "FAILED its checks" not in result.stderr  # the diff is in the JSON, not on stderr
    assert (work / "a.py").read_bytes() == BEFORE


def test_json_test_check_has_the_output_tail(work, tiny_dir, scripted):
    scripted(WRONG, GOOD)
    result = fix(tiny_dir, "--json", "--test", GREP_TEST)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer_try"] == 2
    test = data["tries"][0]["checks"][-1]
    assert test["name"] == "test" and test["passed"] is False and test["detail"] == "exit 1"
    assert test["output_tail"] == "expected a + b in add"
    assert data["tries"][1]["checks"][-1]["passed"] is True


# -- more of --test: what a test command may do to the file and to cadedit ---------------------


def test_a_test_that_leaves_a_background_process_does_not_hang_cadedit(work, tiny_dir, scripted):
    scripted(GOOD)
    start = time.monotonic()
    result = fix(tiny_dir, "--tries", "1", "--test", "sleep 30 & echo $! > ../bg; exit 0")
    assert time.monotonic() - start < 20
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + 5
    while not gone(int((work.parent / "bg").read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(int((work.parent / "bg").read_text()))  # the test's process group was ended
    assert (work / "a.py").read_bytes() == BEFORE


def test_a_test_that_chmods_the_file_gets_the_mode_back(work, tiny_dir, scripted):
    (work / "a.py").chmod(0o640)
    scripted(WRONG, GOOD)
    result = fix(tiny_dir, "--tries", "2", "--test", "chmod 777 a.py; " + GREP_TEST, "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == GOOD.encode()
    assert (work / "a.py").stat().st_mode & 0o777 == 0o640


def test_a_symlinked_file_stays_a_symlink(work, tiny_dir, scripted):
    (work / "real.py").write_bytes(BEFORE)
    (work / "a.py").unlink()
    (work / "a.py").symlink_to("real.py")
    scripted(WRONG, GOOD)
    result = fix(tiny_dir, "--test", GREP_TEST, "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").is_symlink() and os.readlink(work / "a.py") == "real.py"
    assert (work / "real.py").read_bytes() == GOOD.encode()
    assert left_in(work) == {"a.py", "real.py"}


def test_a_long_or_binary_test_output_is_cut_to_its_tail(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--tries", "1", "--json", "--test", r"seq 1 100000; printf 'bad \377 byte\n'; exit 1")
    assert result.exit_code == 3, result.output
    tail = json.loads(result.stdout)["tries"][0]["checks"][-1]["output_tail"]
    lines = tail.splitlines()
    assert len(lines) <= 60 and lines[-1] == "bad \ufffd byte" and lines[-2] == "100000"


@pytest.mark.parametrize("args", [["--test-timeout", "0", "--test", "true"], ["--tries", "-1"]])
def test_bad_test_options_are_usage_errors(work, tiny_dir, scripted, args):
    calls = scripted(GOOD)
    assert fix(tiny_dir, *args).exit_code == 2 and calls == []


def test_test_with_stdin_is_a_usage_error(work, tiny_dir, scripted):
    calls = scripted(GOOD)
    result = invoke(["fix", "-", INSTRUCTION, "--model", str(tiny_dir), "--test", "true"], input=BEFORE)
    assert result.exit_code == 2 and calls == []


# -- out of budget -----------------------------------------------------------------------------


def test_every_try_out_of_budget_exits_3_and_writes_nothing(work, tiny_dir, scripted):
    calls = scripted(GOOD)
    result = fix(tiny_dir, "--max-new-tokens", "2", "--write")
    assert result.exit_code == 3, result.output
    assert "try 1 of 3: failed: the model used its budget of 2 new tokens" in result.stderr
    assert len(calls) == 3
    told = "Your previous answer was too long and did not finish"
    assert told not in calls[0].prompt and told in calls[1].prompt
    assert (work / "a.py").read_bytes() == BEFORE and left_in(work) == {"a.py"}


def test_every_try_out_of_budget_hints_at_max_new_tokens(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--max-new-tokens", "2")
    assert result.exit_code == 3, result.output
    assert "--max-new-tokens" in result.stderr.split("error:", 1)[1]


def test_json_when_every_try_is_out_of_budget(work, tiny_dir, scripted):
    scripted(GOOD)
    result = fix(tiny_dir, "--max-new-tokens", "2", "--json", "--tries", "2")
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is False and data["answer_try"] is None and data["diff"] == ""
    assert [t["error"][:40] for t in data["tries"]] == ["the model used its budget of 2 new token"] * 2
    assert all(t["checks"] == [] and t["tokens_new"] is None for t in data["tries"])


# -- the file changes under cadedit ------------------------------------------------------------

USER_EDIT = b"# the user's own edit\n" + BEFORE


@pytest.fixture
def user_edits_during_decode(work):
    """An answer for `scripted`: GOOD, and the user saves their own edit of a.py as the decode starts."""

    def answer(prepared) -> str:
        (work / "a.py").write_bytes(USER_EDIT)
        return GOOD + prepared.fence + "\n"

    return answer


@pytest.mark.parametrize("args", [["--write"], ["--test", "true"], ["--test", "true", "--write"]])
def test_a_file_edited_during_the_decode_is_never_overwritten(work, tiny_dir, scripted, user_edits_during_decode, args):
    scripted(user_edits_during_decode)
    result = fix(tiny_dir, *args)
    assert result.exit_code == 1, result.output
    assert "changed on disk" in result.stderr and "Traceback" not in result.stderr
    assert (work / "a.py").read_bytes() == USER_EDIT
    assert left_in(work) == {"a.py"}


# -- several files -----------------------------------------------------------------------------


def test_several_files_are_tested_together(work, tiny_dir, scripted):
    (work / "b.py").write_bytes(BEFORE)
    scripted(GOOD)
    both = "grep -q 'a + b' a.py && grep -q 'a + b' b.py"
    result = invoke(
        [
            "fix",
            "a.py",
            "b.py",
            "-i",
            INSTRUCTION,
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--tries",
            "1",
            "--test",
            both,
            "--write",
        ]
    )
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == (work / "b.py").read_bytes() == GOOD.encode()


# -- the syntax check per file type ------------------------------------------------------------


def _node_missing() -> bool:
    import shutil

    return shutil.which("node") is None


@pytest.mark.parametrize("name, before, broken, good, detail", [
    ("a.json", '{"a": 1,\n "b": 2}\n', '{"a": 1,\n "b": }\n', '{"a": 1,\n "b": 3}\n', "line 2, column 7: Expecting value"),
    ("a.toml", "a = 1\nb = 2\n", "a = 1\nb = \n", "a = 1\nb = 3\n", "line 2, column 5: Invalid value"),
    ("a.yaml", "a: 1\nb: [2]\n", "a: 1\nb: [3\n", "a: 1\nb: [3]\n", "line 3, column 1: did not find expected ',' or ']'"),
    pytest.param("a.js", "function f() {\n  return 1;\n}\n", "function f() {\n  return 2;\n\n",
                 "function f() {\n  return 2;\n}\n", "line 4: Unexpected end of input",
                 marks=pytest.mark.skipif(_node_missing(), reason="node not on PATH")),
])  # fmt: skip
def test_syntax_check_per_file_type(work, tiny_dir, scripted, name, before, broken, good, detail):
    (work / name).write_text(before)
    calls = scripted(broken, good)
    result = invoke(
        ["fix", name, INSTRUCTION, "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", "--write"]
    )
    assert result.exit_code == 0, result.output
    assert f"try 1 of 3: failed: syntax ({detail})" in result.stderr
    assert f"did not parse: {detail}" in calls[1].prompt
    assert (work / name).read_text() == good


def test_a_file_that_did_not_parse_before_is_not_held_to_it(work, tiny_dir, scripted):
    (work / "a.py").write_bytes(b"def f(:\n    return 1\n")
    calls = scripted("def f(:\n    return 2\n")
    result = fix(tiny_dir)
    assert result.exit_code == 0, result.output
    assert "try 1 of 3: passed: change; syntax skipped (the file did not parse before the edit)" in result.stderr
    assert len(calls) == 1


def test_verbose_shows_the_test_output(work, tiny_dir, scripted):
    scripted(WRONG, GOOD)
    result = fix(tiny_dir, "--verbose", "--test", GREP_TEST)
    assert result.exit_code == 0, result.output
    assert "  test output:\nexpected a + b in add" in result.stderr
