"""Run a corpus case's test against an edited text: does the edit make the code pass?

Contract: run_test(case, text, timeout) runs case.prefix + text + "\\n" + case.test (for
HumanEvalFix: declaration + edited body + the hidden test, which ends by calling its check) in a
fresh temporary directory and returns a Verdict. Python runs with python3 and passes on exit
code 0; JavaScript runs with node and passes on exit code 0 with nothing on stderr, because
`console.assert` only prints "Assertion failed" there (../shared/data/humanevalfix/README.md). The
temporary directory holds a js-md5 shim (node_modules/js-md5, md5 hex through node's crypto) for
HumanEvalFix JavaScript/162. A case with test files instead (the Aider polyglot subset: Exercism's
`<slug>_test.py` unittest files, which import the edited file by its name) gets the edited text as
its solution file and the test files beside it, and runs `python3 -m unittest` on the `*_test.py`
modules. A run past the time limit is killed and fails. Pure: no torch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cadedit.bench.corpus import Case
from cadedit.settings import BENCH_TEST_TIMEOUT

JS_MD5_SHIM = (
    "const crypto = require('crypto');\n"
    "module.exports = (s) => crypto.createHash('md5').update(String(s)).digest('hex');\n"
)
LANGUAGES = {"python": "python", "py": "python", "javascript": "node", "js": "node"}


@dataclass(frozen=True)
class Verdict:
    """passed is None when nothing ran: the case has no test, or no runner for its language."""

    passed: bool | None
    detail: str = ""  # why it failed or did not run: exit code, timeout, the last stderr line
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"passed": self.passed, "detail": self.detail, "seconds": round(self.seconds, 4)}


def runner_for(language: str) -> str | None:
    """ "python" or "node" for a corpus language name, None for any other."""
    return LANGUAGES.get(language.lower())


def interpreter(runner: str) -> str | None:
    """The executable for a runner: python3 on PATH (else this Python), node on PATH."""
    if runner == "python":
        return shutil.which("python3") or sys.executable
    return shutil.which("node")


def runnable_program(case: Case, text: str) -> str:
    """What runs: the prefix (e.g. the declaration), the edited text, a newline, the test."""
    return case.prefix + text + "\n" + (case.test or "")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _judge(runner: str, done: subprocess.CompletedProcess) -> tuple[bool, str]:
    stderr = done.stderr.decode("utf-8", errors="replace")
    if done.returncode != 0:
        return False, f"exit code {done.returncode}: {_last_line(stderr)}".rstrip(": ")
    if runner == "node" and stderr.strip():
        return False, f"stderr: {_last_line(stderr)}"
    return True, ""


def test_modules(case: Case) -> list[str]:
    """The unittest modules among a case's test files (Exercism's `<slug>_test.py`)."""
    return [Path(name).stem for name, _ in case.test_files if name.endswith("_test.py")]


def has_test(case: Case) -> bool:
    return bool(case.test or (test_modules(case) and runner_for(case.language) == "python"))


def write_test_files(case: Case, folder: Path) -> list[str]:
    """Write a test-files case's test files into folder; the arguments after the interpreter that run them."""
    for name, text in case.test_files:
        (folder / name).write_text(text, encoding="utf-8")
    return ["-m", "unittest", *test_modules(case)]


def run_test(case: Case, text: str, timeout: float = BENCH_TEST_TIMEOUT) -> Verdict:
    """Run the case's test against `text` (see the module docstring)."""
    runner = runner_for(case.language)
    if not has_test(case):
        return Verdict(None, "no test")
    exe = interpreter(runner) if runner else None
    if exe is None:
        return Verdict(None, f"no runner for {case.language}" if runner is None else f"{runner} not found")
    with tempfile.TemporaryDirectory(prefix="cadedit-test-") as tmp:
        if not case.test:  # test files import the edited file by its name
            (Path(tmp) / case.solution_file).write_text(text, encoding="utf-8")
            args = write_test_files(case, Path(tmp))
        else:
            script = Path(tmp) / ("program.py" if runner == "python" else "program.js")
            script.write_text(runnable_program(case, text), encoding="utf-8")
            args = [script.name]
        if runner == "node":
            shim = Path(tmp) / "node_modules" / "js-md5" / "index.js"
            shim.parent.mkdir(parents=True)
            shim.write_text(JS_MD5_SHIM, encoding="utf-8")
        start = time.perf_counter()
        try:
            done = subprocess.run([exe, *args], cwd=tmp, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Verdict(False, f"timeout after {timeout:g} s", time.perf_counter() - start)
        passed, detail = _judge(runner, done)
        return Verdict(passed, detail, time.perf_counter() - start)
