"""cadedit on a real engine: llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`)
on 127.0.0.1, serving the tiny GGUFs the tests write (tests/tinygguf.py). `cadedit fix`, the hook,
`--test` tries, program mode's grammar and `bench engine` run through it end to end.

The editing model (test_llama's bigram) answers any fenced prompt with colors.txt's teal -> green, so
an engine edit can be compared with the same edit made locally by the llama backend.
Without llama-cpp-python (and its server extra) these tests skip, unless CADEDIT_REQUIRE_LLAMA=1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

if os.environ.get("CADEDIT_REQUIRE_LLAMA") != "1":
    pytest.importorskip(
        "llama_cpp.server.app", reason="llama-cpp-python[server] not installed (tools/install-llama.sh)"
    )

from cadedit.text.document import Document  # noqa: E402
from tests.test_engine import cli, colors, no_keys  # noqa: E402, F401 - the engine tests' fixtures and runner
from tests.test_rewrite import BEFORE as COLORS, editing_model  # noqa: E402
from tests.tinygguf import save_gguf  # noqa: E402

START_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_engine(model: Path, log: Path, *extra: str):
    """llama-cpp-python's server on a free port: (process, base URL), once /v1/models answers."""
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",
            "1",
            *extra,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the engine exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as answer:
                if answer.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"the engine did not start within {START_TIMEOUT:.0f} s: {log.read_text()[-2000:]}")


def _stop(process) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def editing_gguf(tmp_path_factory) -> Path:
    model = editing_model(Document.from_text(COLORS, "colors.txt")).model
    return save_gguf(tmp_path_factory.mktemp("gguf") / "teal-to-green.gguf", model=model)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return save_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def editing_engine(editing_gguf, tmp_path_factory):
    process, url = start_engine(editing_gguf, tmp_path_factory.mktemp("engine") / "engine.log")
    yield url
    _stop(process)


@pytest.fixture(scope="module")
def tiny_engine(tiny_gguf, tmp_path_factory):
    process, url = start_engine(
        tiny_gguf, tmp_path_factory.mktemp("engine") / "engine.log", "--draft_model", "prompt-lookup-decoding"
    )
    yield url
    _stop(process)


@pytest.mark.parametrize("mode", ["verify", "rewrite"])
def test_fix_through_the_engine_makes_the_local_edit(colors, editing_engine, editing_gguf, mode):
    remote = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        editing_engine,
        "--mode",
        mode,
        "--json",
        "-q",
        cwd=colors,
    )
    assert remote.returncode == 0, remote.stderr
    local = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--backend",
        "llama",
        "--mode",
        mode,
        "--threads",
        "1",
        "--json",
        "-q",
        cwd=colors,
    )
    assert local.returncode == 0, local.stderr
    remote_data, local_data = json.loads(remote.stdout), json.loads(local.stdout)
    assert "-teal;\r\n+green;\r\n" in remote_data["diff"] and remote_data["diff"] == local_data["diff"]
    assert (
        remote_data["prompt_tokens"] == local_data["prompt_tokens"]
    )  # the engine read the very prompt cadedit renders
    engine = remote_data["engine"]
    assert engine["requests"] == 1 and engine["completion_tokens"] > 0 and engine["prompt_tokens"] > 0
    written = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--write",
        "-q",
        cwd=colors,
        env={"CADEDIT_ENGINE": editing_engine},
    )
    assert written.returncode == 0, written.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_test_tries_run_through_the_engine(colors, editing_engine):
    failing = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        editing_engine,
        "--test",
        "false",
        "--json",
        "-q",
        "--write",
        cwd=colors,
    )
    assert failing.returncode == 3, failing.stderr
    data = json.loads(failing.stdout)
    assert len(data["tries"]) == 3 and all(t["engine"]["requests"] == 1 for t in data["tries"])
    assert [c["name"] for c in data["tries"][0]["checks"]] == ["syntax", "change", "test"]  # a .txt: no code checks
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"
    passing = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        editing_engine,
        "--test",
        "grep -q green colors.txt",
        "--write",
        "-q",
        cwd=colors,
    )
    assert passing.returncode == 0, passing.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_a_failing_candidate_1_branches_through_the_real_engine(colors, editing_engine):
    """llama-cpp-python's server gives the tokens' log-probabilities the branches start from: candidate 1
    (teal -> green) fails `false`; the branches are other answers, each scored by the engine's numbers."""
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        editing_engine,
        "--test",
        "false",
        "--candidates",
        "3",
        "--tries",
        "1",
        "--json",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 3, done.stderr
    tries = json.loads(done.stdout)["tries"]
    assert [t["candidate"] for t in tries][0] == 1 and sorted(t["candidate"] for t in tries) == [1, 2, 3]
    assert all(t["logprob"] < 0 for t in tries)  # scored: the engine's log-probabilities were read
    assert len({t["logprob"] for t in tries}) == 3 and all(t["temperature"] == 0.0 for t in tries)
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_the_hook_runs_through_the_engine(tmp_path, editing_engine):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "colors.txt").write_text(COLORS)
    (tmp_path / ".cadedit.toml").write_text('[[rules]]\nfiles = "*.txt"\ninstruction = "Rename teal to green."\n')
    subprocess.run(["git", "add", "colors.txt"], cwd=tmp_path, check=True)
    assert cli("trust", cwd=tmp_path).returncode == 0
    done = cli("hook", "run", "--fix", cwd=tmp_path, env={"CADEDIT_ENGINE": editing_engine})
    assert done.returncode == 1, done.stderr  # fixed: review and stage again
    assert "using the engine" in done.stderr and "colors.txt: fixed" in done.stderr
    assert (tmp_path / "colors.txt").read_text() == COLORS.replace("teal", "green")


def test_program_mode_grammar_is_taken_by_the_engine(colors, tiny_engine):
    """The random tiny model writes under the file's GBNF until its budget: llama.cpp parsed the grammar."""
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        tiny_engine,
        "--mode",
        "program",
        "--max-new-tokens",
        "24",
        "--tries",
        "1",
        "--json",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 3, done.stderr
    data = json.loads(done.stdout)
    assert "budget of 24 new tokens" in data["tries"][0]["error"] or data["tries"][0]["checks"]
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_bench_engine_through_the_cli(tmp_path, tiny_engine, tiny_gguf):
    done = cli(
        "bench",
        "engine",
        "--engine",
        tiny_engine,
        "--model",
        str(tiny_gguf),
        "-n",
        "2",
        "--clients",
        "1,2",
        "--max-new-tokens",
        "8",
        "--threads",
        "1",
        "--packages",
        "click",
        "--json",
        str(tmp_path / "b.json"),
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert [(r["where"], r["clients"]) for r in data["runs"]] == [("engine", 1), ("engine", 2), ("local", 1)]
    assert all(r["edits"] == 2 and r["errors"] == 0 for r in data["runs"][:2]), data["runs"]
    assert "local llama, one at a time: 2 edits" in done.stdout
    # each engine run's files against the local run's, byte for byte, task by task
    local = {row["id"]: row["sha256"] for row in data["runs"][2]["rows"]}
    for run in data["runs"][:2]:
        assert all(len(row["sha256"]) == 64 for row in run["rows"])
        same = sum(row["sha256"] == local[row["id"]] for row in run["rows"])
        assert run["same_as_local"] == same
        assert f"{same}/2 edited files byte-identical to the local run's" in done.stdout


def test_bench_engine_local_only_needs_no_engine_and_starts_each_edit_cold(tmp_path, editing_gguf):
    """--local-only: the one-at-a-time local runs alone; each edit without saved prompt prefixes
    (CADEDIT_PREFIX_CACHE=0), as cold as an engine's first sight of the file."""
    done = cli(
        "bench",
        "engine",
        "--local-only",
        "--model",
        str(editing_gguf),
        "-n",
        "1",
        "--max-new-tokens",
        "64",
        "--threads",
        "1",
        "--packages",
        "click",
        "--json",
        str(tmp_path / "b.json"),
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "CADEDIT_ENGINE": "", "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert [(r["where"], r["clients"]) for r in data["runs"]] == [("local", 1)]
    assert not (tmp_path / "cache" / "cadedit" / "prefixes").exists()
