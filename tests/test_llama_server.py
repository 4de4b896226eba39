"""cadedit on llama.cpp's own `llama-server` (tools/install-llama.sh builds it into the venv): several
slots (-np 4, continuous batching), ngram speculation on, a prompt cache per slot, on 127.0.0.1,
serving the tiny GGUFs the tests write (tests/tinygguf.py). Through `cadedit fix --engine URL`: each
fenced mode's answer is the local llama backend's; 8 clients at once each get their own answer; a
second edit of a file reuses the prompt the slot kept (the engine's cached tokens in --json); program
mode's grammar holds the model's text; a server killed mid-answer is a one-line error, the file untouched.

The editing model (test_llama's bigram) answers any fenced prompt with colors.txt's teal -> green; the
random tiny model writes text that depends on the whole prompt (its attention is on), so answers to
different files differ and a mixed-up or corrupted slot would show. Without llama-server these tests
skip, unless CADEDIT_REQUIRE_LLAMA=1 (CI): then they run and fail where it is missing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REQUIRED = os.environ.get("CADEDIT_REQUIRE_LLAMA") == "1"
SERVER = shutil.which("llama-server", path=str(Path(sys.executable).parent)) or shutil.which("llama-server")
if SERVER is None and not REQUIRED:
    pytest.skip("llama-server not installed (tools/install-llama.sh)", allow_module_level=True)

from cadedit.text.document import Document  # noqa: E402
from tests.conftest import console_script  # noqa: E402
from tests.test_engine import cli, colors, no_keys  # noqa: E402, F401 - the engine tests' fixtures and runner
from tests.test_engine_llama import _free_port, _stop  # noqa: E402
from tests.test_rewrite import BEFORE as COLORS, editing_model  # noqa: E402
from tests.tinygguf import save_gguf  # noqa: E402

START_TIMEOUT = 120.0
SLOTS = 4


def _help() -> str:
    if SERVER is None:
        raise RuntimeError("CADEDIT_REQUIRE_LLAMA=1 but llama-server is not installed (tools/install-llama.sh)")
    done = subprocess.run([SERVER, "--help"], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


def start_server(model: Path, log: Path, *extra: str):
    """llama-server on a free port of 127.0.0.1: (process, base URL), once /v1/models answers."""
    port = _free_port()
    args = ["-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "1", "-c", str(4096 * SLOTS)]
    return launch([*args, "-np", str(SLOTS), *extra], port, log)


def launch(args: list[str], port: int, log: Path):
    """llama-server with these arguments, listening on port: (process, base URL) once /v1/models answers."""
    process = subprocess.Popen([SERVER, *args], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as answer:
                if answer.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"llama-server did not start within {START_TIMEOUT:.0f} s: {log.read_text()[-2000:]}")


def speculation() -> tuple[str, ...]:
    """Draft-free ngram speculation, where this llama-server has it."""
    return ("--spec-type", "ngram-simple") if "ngram-simple" in _help() else ()


@pytest.fixture(scope="module")
def editing_gguf(tmp_path_factory) -> Path:
    model = editing_model(Document.from_text(COLORS, "colors.txt")).model
    return save_gguf(tmp_path_factory.mktemp("gguf") / "teal-to-green.gguf", model=model)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return save_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def editing_server(editing_gguf, tmp_path_factory):
    process, url = start_server(editing_gguf, tmp_path_factory.mktemp("server") / "server.log", *speculation())
    yield url
    _stop(process)


@pytest.fixture(scope="module")
def tiny_server(tiny_gguf, tmp_path_factory):
    process, url = start_server(tiny_gguf, tmp_path_factory.mktemp("server") / "server.log", *speculation())
    yield url
    _stop(process)


def _needs_local_llama() -> None:
    if not REQUIRED:
        pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (tools/install-llama.sh)")


def test_the_installed_server_is_the_vendored_release_with_ngram_speculation():
    """tools/install-llama.sh stamps the build with the llama-cpp-python release it came from."""
    version = subprocess.run([SERVER, "--version"], capture_output=True, text=True, timeout=60)
    assert "commit llama-cpp-python-" in version.stdout + version.stderr
    assert "ngram-simple" in _help() and "--parallel" in _help()


def documented_command() -> list[str]:
    """The llama-server command line of docs/engines.md, as its arguments (continuation lines joined)."""
    text = (Path(__file__).parents[1] / "docs" / "engines.md").read_text(encoding="utf-8")
    block = re.search(r"### llama.cpp's llama-server\n.*?```sh\n(.*?)```", text, re.S).group(1)
    line = re.search(r"^llama-server .*?(?<!\\)$", block.replace("\\\n", " "), re.M).group(0)
    return shlex.split(line)[1:]


def test_the_documented_llama_server_command_starts_and_serves_an_edit(colors, editing_gguf, tmp_path):
    """docs/engines.md's llama-server line, run as written on the installed llama-server (the editing
    GGUF as its model, a free port of 127.0.0.1, 1 thread): this release takes every flag (it refuses
    a removed one, as it did `--draft-max`), and cadedit makes the edit through it."""
    args = documented_command()
    assert "--spec-type" in args, args
    port = _free_port()
    for flag, value in {"-m": str(editing_gguf), "--host": "127.0.0.1", "--port": str(port)}.items():
        args[args.index(flag) + 1] = value
    process, url = launch([*args, "-t", "1"], port, tmp_path / "server.log")
    try:
        done = cli("fix", "colors.txt", "Rename teal to green.", "--engine", url, "--json", "-q", cwd=colors)
    finally:
        _stop(process)
    assert done.returncode == 0, done.stderr
    assert "-teal;\r\n+green;\r\n" in json.loads(done.stdout)["diff"]


@pytest.mark.parametrize("mode", ["verify", "rewrite", "lookup"])
def test_each_mode_through_llama_server_makes_the_local_edit(colors, editing_server, editing_gguf, mode):
    _needs_local_llama()
    remote = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        editing_server,
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
    assert remote_data["prompt_tokens"] == local_data["prompt_tokens"]  # the very prompt cadedit renders
    engine = remote_data["engine"]
    assert engine["requests"] == 1 and engine["completion_tokens"] > 0
    written = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        editing_server,
        "--mode",
        mode,
        "--write",
        "-q",
        cwd=colors,
    )
    assert written.returncode == 0, written.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


WORDS = ("amber", "cobalt", "ivory", "jade", "ochre", "scarlet", "umber", "violet")


def _answer(folder: Path, url: str) -> tuple[str, str, int]:
    """One `cadedit fix` of the folder's file through the engine: (diff, the try's error, its exit)."""
    done = cli(
        "fix",
        "shade.txt",
        "Rename the shade to green.",
        "--engine",
        url,
        "--mode",
        "rewrite",
        "--max-new-tokens",
        "24",
        "--tries",
        "1",
        "--json",
        "-q",
        cwd=folder,
    )
    data = json.loads(done.stdout)
    return data["diff"], data["tries"][0]["error"] or "", done.returncode


def test_eight_clients_at_once_each_get_their_own_answer(tmp_path, tiny_server):
    """8 files, 8 `cadedit fix` processes at once on 4 slots: each answer is the one that file gets alone
    (the random model's text depends on the whole prompt), and the files' answers differ."""
    folders = []
    for k, word in enumerate(WORDS):
        folder = tmp_path / f"client{k}"
        folder.mkdir()
        (folder / "shade.txt").write_text(f"{word}:\n{word} {k};\nend {word}\n")
        folders.append(folder)
    alone = [_answer(folder, tiny_server) for folder in folders]
    with ThreadPoolExecutor(len(folders)) as pool:
        together = list(pool.map(lambda folder: _answer(folder, tiny_server), folders))
    assert together == alone
    assert len({error for _, error, _ in alone}) >= 4, alone  # the answers depend on the file
    assert all("last text:" in error or diff for diff, error, _ in alone), alone
    for k, folder in enumerate(folders):
        assert (folder / "shade.txt").read_text() == f"{WORDS[k]}:\n{WORDS[k]} {k};\nend {WORDS[k]}\n"


def test_a_second_edit_of_a_file_reuses_the_prompt_the_slot_kept(tmp_path, editing_server):
    """The same file edited twice: the second request's prompt is (all but its last token) the slot's
    cache; --json reports the engine's cached tokens and counts them as prompt tokens reused."""
    (tmp_path / "notes.txt").write_text("".join(f"note {k}: keep the cache warm\n" for k in range(40)))

    def fix() -> dict:
        done = cli(
            "fix",
            "notes.txt",
            "Number the notes from 1.",
            "--engine",
            editing_server,
            "--mode",
            "rewrite",
            "--tries",
            "1",
            "--json",
            "-q",
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["tries"][0]

    first, second = fix(), fix()
    prompt = second["engine"]["prompt_tokens"]
    assert prompt > 300 and first["engine"]["prompt_tokens"] == prompt
    assert second["engine"]["cached_tokens"] >= prompt - 2 > first["engine"]["cached_tokens"]
    assert second["tokens_prompt_reused"] == second["engine"]["cached_tokens"]
    assert second["tokens_prompt_fed"] == prompt - second["engine"]["cached_tokens"]


def test_program_mode_grammar_holds_the_random_models_text(colors, tiny_server):
    """The random model writes only what the file's GBNF allows (a copy of lines 1-3 or a gen); unbound,
    the same model writes text that is no program at all."""
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        tiny_server,
        "--mode",
        "program",
        "--max-new-tokens",
        "6",
        "--tries",
        "1",
        "--json",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 3, done.stderr
    error = json.loads(done.stdout)["tries"][0]["error"]
    text = re.search(r"last text: (.*)\)$", error)
    assert text, error
    written = ast.literal_eval(text.group(1))  # the repr cadedit wrote of the answer's end
    assert written.startswith(('<program>\n<copy lines="', "<program>\n<gen>\n")), written  # an op, not free text
    assert all(close.startswith(("</gen>\n", "</program>")) for close in re.findall(r"</.{0,10}", written)), written
    assert all(1 <= int(n) <= 3 for n in re.findall(r'<copy lines="([0-9]+)-', written)), written
    assert all(1 <= int(n) <= 3 for n in re.findall(r'<copy lines="[0-9]+-([0-9]+)"', written)), written
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_a_server_killed_mid_answer_is_a_one_line_error(colors, tiny_gguf, tmp_path):
    """kill -9 while the slot is writing a long answer: one error line, exit 1, the file untouched."""
    process, url = start_server(tiny_gguf, tmp_path / "server.log")
    try:
        fix = subprocess.Popen(
            [
                console_script(),
                "fix",
                "colors.txt",
                "Rename teal to green.",
                "--engine",
                url,
                "--mode",
                "rewrite",
                "--max-new-tokens",
                "1500",
                "--tries",
                "1",
                "--write",
            ],
            cwd=colors,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _busy(url):
            time.sleep(0.02)
        assert _busy(url), "the answer was not under way"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    _, stderr = fix.communicate(timeout=120)
    assert fix.returncode == 1, stderr
    assert stderr.count("error:") == 1 and "engine" in stderr.splitlines()[0], stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def _busy(url: str) -> bool:
    """Whether a slot of the server is writing an answer (its /slots)."""
    try:
        with urllib.request.urlopen(url.removesuffix("/v1") + "/slots", timeout=2) as answer:
            return any(slot.get("is_processing") for slot in json.loads(answer.read()))
    except OSError:
        return False


def test_bench_engine_one_file_reports_the_prompt_cache(tmp_path, tiny_server):
    """`bench engine --one-file`: every edit is in the same module, each its own bug; the runs report the
    engine's cached prompt tokens and its speculative drafts beside the throughput."""
    done = cli(
        "bench",
        "engine",
        "--engine",
        tiny_server,
        "--no-local",
        "--one-file",
        "-n",
        "3",
        "--clients",
        "3",
        "--max-new-tokens",
        "8",
        "--packages",
        "click",
        "--json",
        str(tmp_path / "b.json"),
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    (run,) = data["runs"]
    assert data["one_file"] and run["clients"] == 3 and run["edits"] == 3 and run["errors"] == 0, run
    assert len({r["path"] for r in run["rows"]}) == 1 and len({r["id"] for r in run["rows"]}) == 3
    assert run["cached_tokens_per_edit"] is not None and "draft_accepted" in run
    assert "cached) +" in done.stdout and "drafts" in done.stdout
