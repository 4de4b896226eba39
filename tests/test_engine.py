"""cadedit on a shared inference engine (--engine URL), against a scripted OpenAI-compatible server in
this process: the prompt it gets (byte-equal to the local template's rendering), the answers read as
local answers are, scoped and program-mode requests, the usage in --json, and every way an engine
fails (down, slow, garbage, a connection closed mid-answer, HTTP errors) as a one-line error with the
user's file untouched. The real engine (llama-cpp-python's server) is tests/test_engine_llama.py's."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cadedit.text.document import Document
from cadedit.server import engine as engine_module
from cadedit.server.engine import EngineClient, number_range, program_gbnf
from cadedit.errors import BudgetError
from cadedit.options import EditOptions, Mode
from cadedit.prompt.request import build_request, render_chatml
from cadedit.backends.torch.tokenizer import Tokenizer
from tests.conftest import console_script
from tests.terminal import on_a_terminal

QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5-chat-template.jinja").read_text()
ROOT = Path(__file__).resolve().parents[1]


class Script:
    """What the fake engine answers: (text, finish_reason) per completion, or a failure by name."""

    def __init__(
        self,
        answers=(),
        owner="llamacpp",
        fail: str | None = None,
        sleep: float = 0.0,
        models_sleep: float = 0.0,
        by_temperature: tuple | None = None,
        respond=None,
        redirect: tuple[str, str] | None = None,
        usage: bool = True,
    ):
        self.answers, self.owner, self.fail, self.sleep = list(answers), owner, fail, sleep
        self.redirect = redirect  # (path, URL): that path answers 302 to the URL
        self.usage = usage  # whether answers report their usage
        self.by_temperature = by_temperature  # (greedy answer, sampled answer), instead of answers in turn
        self.models_sleep = models_sleep
        self.respond = respond  # body -> (text, finish_reason, logprobs or None), instead of the above
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.sent = 0  # bytes of a huge answer written before the client stopped reading


def _handler(script: Script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _json(self, code: int, data) -> None:
            body = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _redirected(self) -> bool:
            if script.redirect is None or self.path != script.redirect[0]:
                return False
            self.send_response(302)
            self.send_header("Location", script.redirect[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True

        def _drip(self, headers: bool = False) -> None:
            """A byte every 0.3 s for a minute: the headers too, or a 1 MB body after them at once."""
            start = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
            if not headers:
                self.wfile.write(start)
            try:
                for k in range(200):
                    self.wfile.write(start[k : k + 1] if headers and k < len(start) else b" ")
                    self.wfile.flush()
                    time.sleep(0.3)
            except OSError:  # the client gave up
                pass

        def _huge(self, declared: bool) -> None:
            """256 MiB of blanks, its length declared or not (the body then ends when the connection does)."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if declared:
                self.send_header("Content-Length", str(256 << 20))
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for _ in range(256):
                    self.wfile.write(chunk)
                    script.sent += len(chunk)
            except OSError:  # the client stopped reading
                pass
            self.close_connection = True

        def do_GET(self):
            script.headers.append(dict(self.headers))
            if script.fail == "huge models":
                return self._huge(declared=True)
            if isinstance(script.fail, bytes) and script.fail.startswith(b'{"data"'):  # this model list, as it is
                self.send_response(200)
                self.send_header("Content-Length", str(len(script.fail)))
                self.end_headers()
                self.wfile.write(script.fail)
                return
            if self._redirected():
                return
            if script.fail == "drip models":
                return self._drip()
            if self.path != "/v1/models":
                return self._json(404, {"error": {"message": "not found"}})
            time.sleep(script.models_sleep)
            self._json(200, {"object": "list", "data": [{"id": "tiny-qwen", "owned_by": script.owner}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            script.headers.append(dict(self.headers))
            if self._redirected():
                return
            if script.fail in ("huge", "huge undeclared"):
                return self._huge(declared=script.fail == "huge")
            if script.fail in ("drip", "drip headers"):
                return self._drip(headers=script.fail == "drip headers")
            if script.sleep:
                time.sleep(script.sleep)
            if script.fail == "garbage":
                self.send_response(200)
                self.send_header("Content-Length", "12")
                self.end_headers()
                self.wfile.write(b"<html>hi</ht")
                return
            if script.fail == "close":
                self.send_response(200)
                self.send_header("Content-Length", "400")
                self.end_headers()
                self.wfile.write(b'{"choices": [{"te')
                self.wfile.flush()
                self.close_connection = True
                return
            if script.fail == "500":
                return self._json(500, {"error": {"message": "CUDA out of memory", "type": "server_error"}})
            if script.fail == "401":
                return self._json(401, {"error": {"message": "Invalid API key"}})
            if script.fail == "nochoices":
                return self._json(200, {"id": "x", "object": "text_completion"})
            if isinstance(script.fail, bytes):  # this body, as it is
                self.send_response(200)
                self.send_header("Content-Length", str(len(script.fail)))
                self.end_headers()
                self.wfile.write(script.fail)
                return
            logprobs = None
            if script.respond is not None:
                text, reason, logprobs = script.respond(body)
            elif script.by_temperature is not None:  # concurrent requests: each answered by its sampling
                text, reason = script.by_temperature[body["temperature"] > 0]
            else:
                text, reason = script.answers.pop(0) if script.answers else ("", "stop")
            usage = {
                "prompt_tokens": len(body["prompt"]) // 4,
                "completion_tokens": len(text) // 4 + 1,
                "total_tokens": 0,
            }
            self._json(
                200,
                {
                    "choices": [{"text": text, "finish_reason": reason, "index": 0, "logprobs": logprobs}],
                    **({"usage": usage} if script.usage else {}),
                },
            )

    return Handler


@pytest.fixture
def engine():
    """start(script) -> the fake engine's base URL; stopped after the test."""
    servers = []

    def start(script: Script, host: str = "127.0.0.1") -> str:
        server = ThreadingHTTPServer((host, 0), _handler(script))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://{host}:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def colors(tmp_path):
    (tmp_path / "colors.txt").write_bytes(b"red:\r\nteal;\r\nblue)\r\n")
    return tmp_path


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [console_script(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


# -- the prompt ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(Mode))
def test_the_chatml_prompt_is_byte_equal_to_qwens_template(mode):
    tokenizer = Tokenizer.from_folder(_tokenizer_folder())
    tokenizer.chat_template = QWEN_TEMPLATE
    document = Document.from_text("def f(x):\n    return x + 1\n\n\ndef g():\n    pass\n", "src/m.py")
    options = EditOptions(mode=mode, regions=((2, 2), (6, 6)) if mode is not Mode.PROGRAM else ())
    request = build_request(document, "Fix f; g returns 1.", options)
    local = tokenizer.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
    assert render_chatml(request.messages, request.opening) == local + request.opening


def _tokenizer_folder() -> Path:
    from tests.tinytok import make_tokenizer
    import tempfile

    folder = Path(tempfile.mkdtemp())
    make_tokenizer().save_pretrained(str(folder))
    return folder


def test_number_range_is_exactly_the_numbers_between():
    def regex(gbnf: str) -> str:
        return re.sub(r'"(\d)"', r"\1", gbnf).replace(" ", "")

    for low, high in ((1, 1), (1, 9), (7, 123), (1, 1000), (95, 1204), (10, 19)):
        pattern = re.compile(regex(number_range(low, high)))
        inside = {str(k) for k in range(1, 2000) if pattern.fullmatch(str(k))}
        assert inside == {str(k) for k in range(low, high + 1)}
        assert not pattern.fullmatch("0" + str(low))


def test_the_program_grammar_bounds_copies_by_the_file():
    grammar = program_gbnf(12, low=5, has_op=True)
    assert 'copy ::= "<copy lines=\\"" ([5-9] | "1" ([0-2])) "-" ([1-9] | "1" ([0-2])) "\\"/>\\n"' in grammar
    assert grammar.startswith("root ::= op* close")
    assert "copy" not in program_gbnf(12, low=13, has_op=True)  # past the last line: only gens may follow
    assert program_gbnf(3).startswith("root ::= op op* close")  # at least one op
    assert program_gbnf(3, in_body=True).startswith('root ::= body "</gen>\\n" op* close')


# -- edits through the engine ------------------------------------------------------------------------


def test_fix_through_the_engine_writes_the_engines_edit(engine, colors):
    script = Script([("red:\ngreen;\nblue)", "stop")])
    url = engine(script)
    done = cli("fix", "colors.txt", "Rename teal to green.", "--engine", url, "--json", "-q", cwd=colors)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["passed"] and "-teal;\r\n+green;\r\n" in data["diff"] and data["backend"] == "engine"
    assert data["model"] == f"tiny-qwen at {url}"
    assert data["engine"]["requests"] == 1 and data["engine"]["completion_tokens"] > 0
    assert data["tries"][0]["engine"]["prompt_tokens"] == data["engine"]["prompt_tokens"]
    sent = script.requests[0]
    request = build_request(Document.read(colors / "colors.txt"), "Rename teal to green.", EditOptions())
    assert sent["prompt"] == render_chatml(request.messages, request.opening)
    assert sent["prompt"].endswith("<|im_start|>assistant\n```\n") and sent["stop"][0] == "\n```\n"
    assert sent["model"] == "tiny-qwen" and sent["temperature"] == 0.0 and "grammar" not in sent
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"  # a diff, nothing written
    written = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--write",
        "-q",
        cwd=colors,
        env={"CADEDIT_ENGINE": engine(Script([("red:\ngreen;\nblue)", "stop")]))},
    )
    assert written.returncode == 0, written.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_the_try_lines_of_an_engine_edit_count_no_forwards(engine, colors):
    """The engine's forwards are its own: the try lines give tokens and time, not "0 forward passes"."""
    url = engine(Script([("red:\ngreen;\nblue)", "stop")]))
    done = cli("fix", "colors.txt", "Rename teal to green.", "--engine", url, "--verbose", cwd=colors)
    assert done.returncode == 0, done.stderr
    tried = [line for line in done.stderr.splitlines() if ": try 1 of 3:" in line]
    assert len(tried) == 1 and "5 generated, " in tried[0], done.stderr
    assert "forward" not in done.stderr and "  decode: prompt " in done.stderr, done.stderr


def test_an_engine_busy_with_other_edits_is_waited_for_up_to_the_timeout_also_for_its_model_list(engine, colors):
    """An engine that serves one request at a time (llama-cpp-python's server) answers GET /models
    only after the completions queued ahead of it; the client waits --engine-timeout for it too."""
    script = Script([("red:\ngreen;\nblue)", "stop")], models_sleep=32.0)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--engine-timeout",
        "60",
        "--write",
        "-q",
        cwd=colors,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_a_repository_never_chooses_the_engine_even_approved(engine, colors):
    """A cloned repository's `engine` would receive the user's file and API key: it is ignored, with a
    warning, before and after the user approves the repository's settings (`cadedit trust`)."""
    script = Script([("red:\ngreen;\nblue)", "stop")], sleep=0.0)
    (colors / ".git").mkdir()
    (colors / ".cadedit.toml").write_text(f'engine = "{engine(script)}"\nengine_timeout = 30\n')
    key = {"CADEDIT_ENGINE_KEY": "s3cret", "OPENAI_API_KEY": "sk-s3cret", "CADEDIT_MODEL": str(colors / "no-model")}
    unapproved = cli("fix", "colors.txt", "Rename teal to green.", "--write", "-q", cwd=colors, env=key)
    assert unapproved.returncode == 1 and "are not approved, so cadedit ignored them" in unapproved.stderr
    assert "cadedit trust" in unapproved.stderr
    assert cli("trust", cwd=colors).returncode == 0
    approved = cli("fix", "colors.txt", "Rename teal to green.", "--write", "-q", cwd=colors, env=key)
    assert approved.returncode == 1 and "`engine` ignored: a repository never chooses" in approved.stderr
    assert script.headers == [] and (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_the_engine_and_its_timeout_come_from_the_users_config_and_the_key_from_the_environment(engine, colors):
    script = Script([("red:\ngreen;\nblue)", "stop")], sleep=0.0)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "cadedit" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'engine = "{engine(script)}"\nengine_timeout = 30\n')
    done = cli("fix", "colors.txt", "Rename teal to green.", "-q", cwd=colors, env={"CADEDIT_ENGINE_KEY": "s3cret"})
    assert done.returncode == 0, done.stderr
    assert "-teal;" in done.stdout and script.headers[0]["Authorization"] == "Bearer s3cret"
    bad = cli("fix", "colors.txt", "Rename.", "-q", cwd=colors, env={"CADEDIT_ENGINE": "gpu-box:8000"})
    assert bad.returncode == 1 and "engine 'gpu-box:8000': not an http:// or https:// URL" in bad.stderr
    config.write_text(f'engine = "{engine(script)}"\nengine_timeout = "soon"\n')
    wrong = cli("fix", "colors.txt", "Rename.", "-q", cwd=colors)
    assert wrong.returncode == 1 and "`engine_timeout` must be a positive number" in wrong.stderr
    config.write_text(f'engine = "{engine(script)}"\n')
    config.chmod(0o666)  # a config others may write chooses nothing
    sent = len(script.headers)
    ignored = cli("fix", "colors.txt", "Rename.", "-q", cwd=colors, env={"CADEDIT_MODEL": str(colors / "no-model")})
    assert ignored.returncode == 1 and "no-model" in ignored.stderr and len(script.headers) == sent


def test_tries_feed_back_through_the_engine(engine, colors):
    script = Script([("red:\nteal;\nblue)", "stop"), ("red:\ngreen;\nblue)", "stop")])
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--json",
        "-q",
        "--test",
        "grep -q green colors.txt",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [t["passed"] for t in data["tries"]] == [False, True] and data["answer_try"] == 2
    assert "Try again." in script.requests[1]["prompt"] and "Try again." not in script.requests[0]["prompt"]
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_candidates_through_an_engine_without_logprobs_are_sampled_and_checked_in_turn(engine, colors):
    """--candidates 3 on an engine that gives no log-probabilities (nothing to branch from): the greedy
    candidate 1, then two sampled and seeded completions sent together; the greedy one changes nothing,
    a sampled one passes the test and is the answer."""
    script = Script(by_temperature=(("red:\nteal;\nblue)", "stop"), ("red:\ngreen;\nblue)", "stop")))
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--candidates",
        "3",
        "--json",
        "-q",
        "--test",
        "grep -q green colors.txt",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["passed"] and data["answer_try"] == 1 and data["answer_candidate"] == 2
    assert [t["candidate"] for t in data["tries"]] == [1, 2, 3] and not data["tries"][0]["passed"]
    assert sorted(r["temperature"] for r in script.requests) == [0.0, 0.7, 0.7]
    assert len({r.get("seed") for r in script.requests if r["temperature"] > 0}) == 2
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def legacy_logprobs(tokens) -> dict:
    """The completions API's logprobs of (text, logprob, {alternative: logprob}) tokens, picked one included."""
    return {
        "tokens": [t for t, _, _ in tokens],
        "token_logprobs": [lp for _, lp, _ in tokens],
        "top_logprobs": [{t: lp, **others} for t, lp, others in tokens],
        "text_offset": [0] * len(tokens),
    }


def branching_engine(colors_answer: str = "red:\nteal;\nblue)"):
    """A fake engine whose answer to the plain prompt keeps colors.txt (with a stop string's token after
    it), hesitating at "teal" (next choice "green"), "blue" ("navy") and "red" ("pink"), and nearer still
    at choices that would write the answer again: ":\nteal" (two of its tokens in one), "te" (a prefix of
    the token picked), ")\n" (the same code, then a blank line before the fence); a prompt that ends in a
    next choice is completed as that branch."""
    plain = [
        ("red", -0.1, {"pink": -3.1}),
        (":\n", -0.01, {":\nteal": -0.03}),
        ("teal", -0.5, {"green": -0.9, "te": -0.6}),
        (";\n", -0.01, {}),
        ("blue", -0.2, {"navy": -2.2}),
        (")", -0.01, {")\n": -0.02}),
        ("\n```", -0.01, {}),
    ]
    branches = {"green": ";\nblue)", "navy": ")", "pink": ":\nteal;\nblue)"}

    def respond(body):
        prompt = body["prompt"]
        for choice, rest in branches.items():
            if prompt.endswith(choice):
                return rest, "stop", legacy_logprobs([(rest, -0.05, {})]) if "logprobs" in body else None
        return colors_answer, "stop", legacy_logprobs(plain) if "logprobs" in body else None

    return Script(respond=respond)


def test_a_failing_candidate_1_branches_through_the_engine_where_it_hesitated(engine, colors):
    """--candidates 4 with --test on an engine that gives log-probabilities: candidate 1 (greedy, its top
    ones asked) changes nothing; three branches are sent, each the answer up to a hesitation with the
    next choice, completed greedily; checked likeliest first, "green" passes."""
    script = branching_engine()
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--json",
        "-q",
        "--test",
        "grep -q green colors.txt",
        "--candidates",
        "4",
        "--write",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["answer_try"] == 1 and [t["candidate"] for t in data["tries"]][0] == 1
    winner = next(t for t in data["tries"] if t["passed"])
    assert winner["candidate"] > 1 and winner["logprob"] == pytest.approx(-0.1 - 0.01 - 0.9 - 0.05)
    assert data["tries"][0]["logprob"] == pytest.approx(
        -0.1 - 0.01 - 0.5 - 0.01 - 0.2 - 0.01
    )  # the stop's token left out
    first, *branched = script.requests
    assert first["logprobs"] == engine_module.TOP_LOGPROBS and len(branched) == 3
    assert sorted(r["prompt"][len(first["prompt"]) :] for r in branched) == [
        "pink",
        "red:\ngreen",
        "red:\nteal;\nnavy",
    ]  # none that writes the answer again
    assert all(r["temperature"] == 0.0 for r in branched)
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_a_later_try_through_the_engine_branches_where_no_earlier_try_did(engine, colors):
    """--candidates 2 --tries 2, a test nothing passes: try 2's candidate 1 is try 1's answer again, so its
    branch goes to the next hesitation ("navy"), not to try 1's ("green")."""
    script = branching_engine()
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--json",
        "-q",
        "--test",
        "grep -q purple colors.txt",
        "--candidates",
        "2",
        "--tries",
        "2",
        cwd=colors,
    )
    assert done.returncode == 3, done.stderr  # no try passed
    data = json.loads(done.stdout)
    assert [(t["try"], t["candidate"]) for t in data["tries"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    first, branch1, second, branch2 = (r["prompt"] for r in script.requests)
    assert branch1 == first + "red:\ngreen" and branch2 == second + "red:\nteal;\nnavy"
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_a_passing_candidate_1_sends_no_branches_to_the_engine(engine, colors):
    script = branching_engine("red:\ngreen;\nblue)")
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--json",
        "-q",
        "--test",
        "grep -q green colors.txt",
        "--candidates",
        "4",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    assert [t["candidate"] for t in json.loads(done.stdout)["tries"]] == [1] and len(script.requests) == 1


def test_a_branch_in_a_later_region_is_sent_from_that_region(engine, tmp_path):
    """Scoped to two regions of a file without a language tag (its headers hold a bare fence): the
    branch at region 2's hesitation is one request, from region 2 with region 1's answer kept."""
    (tmp_path / "long.txt").write_text("".join(f"line{k} = {k}\n" for k in range(1, 201)))

    def respond(body):
        prompt = body["prompt"]
        if prompt.endswith("1500"):
            return "", "stop", legacy_logprobs([])
        if prompt.endswith("Lines 150-150:\n```\n"):
            return "line150 = 150", "stop", legacy_logprobs([("line150 = ", -0.1, {}), ("150", -0.3, {"1500": -0.4})])
        return "line3 = 3", "stop", legacy_logprobs([("line3 = 3", -0.1, {})])

    script = Script(respond=respond)
    done = cli(
        "fix",
        "long.txt",
        "Multiply line 150 by ten.",
        "--lines",
        "3-3",
        "--lines",
        "150-150",
        "--engine",
        engine(script),
        "--json",
        "-q",
        "--candidates",
        "2",
        "--test",
        "grep -q 'line150 = 1500' long.txt",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer_candidate"] == 2
    first, second, branch = (r["prompt"] for r in script.requests)
    assert branch == second + "line150 = 1500" and second.endswith("line3 = 3\n```\nLines 150-150:\n```\n")


def test_bench_tries_measures_edits_through_an_engine_as_fix_sends_them(engine, tmp_path):
    """`bench tries --engine`: each case's tries go through the engine (here candidate 1 keeps the bug,
    its branch at " -" passes); without --candidates, fix --engine's default."""
    before, after = "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps(
            {
                "id": "add",
                "language": "python",
                "before": before,
                "after": after,
                "instruction": "Fix add.",
                "test": "assert add(2, 3) == 5\n",
            }
        )
        + "\n"
    )

    def respond(body):
        if body["prompt"].endswith("return a +"):
            return " b", "stop", legacy_logprobs([(" b", -0.01, {})])
        return (
            before.rstrip("\n"),
            "stop",
            legacy_logprobs(
                [("def add(a, b):\n    return a", -0.1, {}), (" -", -0.2, {" +": -0.3}), (" b", -0.01, {})]
            ),
        )

    script = Script(respond=respond)
    out = tmp_path / "t.json"
    done = cli(
        "bench",
        "tries",
        "-c",
        str(corpus),
        "--engine",
        engine(script),
        "--tries",
        "1",
        "--check-tries",
        "0",
        "--candidates",
        "2",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    (row,) = data["corpora"][0]["cases"]
    assert [(t["candidate"], t["test_passed"]) for t in row["tries_with_test"]] == [(1, False), (2, True)]
    assert row["single"]["passed"] is True and data["model"].startswith("tiny-qwen at http://127.0.0.1:")
    default = cli(
        "bench",
        "tries",
        "-c",
        str(corpus),
        "--engine",
        engine(script),
        "--tries",
        "1",
        "--check-tries",
        "0",
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert default.returncode == 0, default.stderr
    assert json.loads(out.read_text())["candidates"] == [1, 1]  # fix --engine's default


def test_token_logprobs_read_both_forms_and_the_kept_tokens_spell_the_text():
    from cadedit.server.engine import _kept
    from cadedit.server.engine_answer import token_logprobs

    legacy = {"logprobs": legacy_logprobs([("a", -0.1, {"b": -2.0}), ("c", -0.2, {})])}
    chat = {
        "logprobs": {
            "content": [
                {
                    "token": "a",
                    "logprob": -0.1,
                    "top_logprobs": [{"token": "b", "logprob": -2.0}, {"token": "a", "logprob": -0.1}],
                },
                {"token": "c", "logprob": -0.2, "top_logprobs": []},
            ]
        }
    }
    assert token_logprobs(legacy) == token_logprobs(chat)[:1] + [("c", -0.2, {"c": -0.2})]
    assert token_logprobs(chat)[0] == ("a", -0.1, {"b": -2.0, "a": -0.1})
    assert token_logprobs({"logprobs": None}) is None and token_logprobs({"logprobs": {"tokens": [1]}}) is None
    tokens = [("ab", 0, {}), ("c", 0, {}), ("\n```", 0, {})]
    assert _kept(tokens, "abc") == tokens[:2] and _kept(tokens, "abx") == tokens[:1]


def test_a_scoped_edit_sends_one_request_per_region_with_the_next_header(engine, tmp_path):
    text = "".join(f"line{k} = {k}\n" for k in range(1, 201))
    (tmp_path / "long.py").write_text(text)
    script = Script([("line3 = 30", "stop"), ("line150 = 1500", "stop")])
    done = cli(
        "fix",
        "long.py",
        "Multiply by ten.",
        "--lines",
        "3-3",
        "--lines",
        "150-150",
        "--engine",
        engine(script),
        "--json",
        "-q",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert "-line3 = 3\n+line3 = 30\n" in data["diff"] and "-line150 = 150\n+line150 = 1500\n" in data["diff"]
    first, second = (r["prompt"] for r in script.requests)
    assert first.endswith("<|im_start|>assistant\nLines 3-3:\n```python\n")
    assert second == first + "line3 = 30\n```\nLines 150-150:\n```python\n"
    assert "line75 = 75" not in first  # only the regions' context is sent, not the whole file


def test_program_mode_sends_the_files_grammar_and_splices_copies(engine, colors):
    script = Script(
        [('<copy lines="1-1', "stop"), ('<gen>\ngreen;\n</gen>\n<copy lines="3-3', "stop"), ("</program>", "stop")]
    )
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--mode",
        "program",
        "--engine",
        engine(script),
        "--json",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert "-teal;\r\n+green;\r\n" in data["diff"] and data["engine"]["requests"] == 3
    first, second, third = script.requests
    assert first["prompt"].endswith("<|im_start|>assistant\n<program>\n")
    assert second["prompt"] == first["prompt"] + '<copy lines="1-1"/>\nred:\n'  # the copied line, as spliced locally
    assert 'copy ::= "<copy lines=\\"" ([1-3]) "-" ([1-3])' in first["grammar"]
    assert 'copy ::= "<copy lines=\\"" ([2-3])' in second["grammar"] and "copy ::=" not in third["grammar"]
    assert first["stop"] == ['"/>\n']


def test_program_mode_stops_at_a_copy_that_does_not_go_forward(engine, colors):
    """An engine that ignores the grammar and writes the same copy again and again (reporting no usage):
    one line at the second, not a request after request until the end of time."""
    script = Script([('<copy lines="1-2', "stop")] * 1000, usage=False)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--mode",
        "program",
        "--engine",
        engine(script),
        "--max-new-tokens",
        "64",
        "--tries",
        "1",
        "--write",
        cwd=colors,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert (
        "does not keep to the program grammar it was sent: it wrote '<copy lines=\"1-2\"/>' where a copy must "
        "start at line 3 or later" in done.stderr
    )
    assert len(script.requests) == 2
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_program_mode_counts_its_budget_from_the_text_when_the_engine_reports_no_usage(engine, colors):
    """A gen body that goes on, 30 bytes a completion, each stopped at a copy's close, usage never
    reported: the text counts against --max-new-tokens 64 (3 bytes a token), so the edit runs out of its
    budget after a few completions."""
    script = Script([("<gen>\n" + "x" * 24, "stop")] + [("y" * 30, "stop")] * 1000, usage=False)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--mode",
        "program",
        "--engine",
        engine(script),
        "--max-new-tokens",
        "64",
        "--tries",
        "1",
        "--json",
        cwd=colors,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "the engine used the budget of 64 new tokens" in done.stderr and len(script.requests) == 7
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_program_mode_on_an_engine_without_grammars_is_a_one_line_error(engine, colors):
    done = cli(
        "fix",
        "colors.txt",
        "Rename.",
        "--mode",
        "program",
        "--engine",
        engine(Script(owner="library")),
        "-q",
        "--model",
        "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        cwd=colors,
    )
    assert done.returncode == 1 and done.stderr.count("error:") == 1
    assert (
        "--mode program needs an engine that takes a grammar per request" in done.stderr and "(library)" in done.stderr
    )


def test_an_answer_out_of_budget_is_a_failed_try(engine, colors):
    script = Script([("red:\ngre", "length")] * 3)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--max-new-tokens",
        "3",
        "-q",
        cwd=colors,
    )
    assert done.returncode == 3 and "budget of 3 new tokens" in done.stderr
    assert script.requests[0]["max_tokens"] == 3
    data = json.loads(
        cli(
            "fix",
            "colors.txt",
            "Rename teal to green.",
            "--engine",
            engine(Script([("red:\ngre", "length")] * 3)),
            "--max-new-tokens",
            "3",
            "--tries",
            "1",
            "--json",
            "-q",
            cwd=colors,
        ).stdout
    )
    assert (
        data["tries"][0]["error"].startswith("the engine used the budget")
        and data["tries"][0]["engine"]["requests"] == 1
    )


@pytest.mark.parametrize("where", ["option", "settings"])
def test_the_hook_runs_through_the_engine(engine, tmp_path, where):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "colors.py").write_text("red = 1\nteal = 2\n")
    script = Script([("red = 1\ngreen = 2", "stop")])
    url = engine(script)
    if where == "settings":  # the user's own config: a repository's never names the engine
        config = Path(os.environ["XDG_CONFIG_HOME"]) / "cadedit" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(f'engine = "{url}"\nengine_timeout = 60\n')
    (tmp_path / ".cadedit.toml").write_text('[[rules]]\nfiles = "*.py"\ninstruction = "Rename teal to green."\n')
    subprocess.run(["git", "add", "colors.py"], cwd=tmp_path, check=True)
    assert cli("trust", cwd=tmp_path).returncode == 0
    done = cli("hook", "run", *(["--engine", url] if where == "option" else []), cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # would change: the diff is shown
    assert "-teal = 2\n+green = 2\n" in done.stdout and "using the engine" in done.stderr
    assert (tmp_path / "colors.py").read_text() == "red = 1\nteal = 2\n"


def test_the_client_imports_no_torch(engine, tmp_path):
    url = engine(Script([("x = 2", "stop")]))
    code = (
        "import sys; from cadedit.server.engine import EngineClient; from cadedit.text.document import Document; "
        f"r = EngineClient({url!r}).edit(Document.from_text('x = 1\\n', 'a.py'), 'Set x to 2.'); "
        "print(repr(r.new_text), 'torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout == "'x = 2\\n' False\n", done.stderr


def test_a_file_holding_control_token_text_is_refused(engine, tmp_path):
    (tmp_path / "chat.md").write_text("say <|im_end|> here\n")
    done = cli("fix", "chat.md", "Fix.", "--engine", engine(Script()), "-q", cwd=tmp_path)
    assert done.returncode == 1 and "contains the text <|im_end|>" in done.stderr


# -- an engine that fails ----------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "fail, message",
    [
        ("down", "no engine answers at http://127.0.0.1:"),
        ("slow", "did not answer within 1 s"),
        ("garbage", "answered /completions with something that is not JSON (<html>hi</ht)"),
        ("close", "closed the connection mid-answer"),
        ("500", "answered HTTP 500 (CUDA out of memory)"),
        ("401", "answered HTTP 401 (Invalid API key)"),
        ("nochoices", "answered something that is not a completion"),
    ],
)
def test_an_engine_that_fails_is_a_one_line_error_and_the_file_is_untouched(engine, colors, fail, message):
    url = (
        f"http://127.0.0.1:{_free_port()}/v1"
        if fail == "down"
        else engine(Script(fail=None if fail == "slow" else fail, sleep=3.0 if fail == "slow" else 0.0))
    )
    started = time.monotonic()
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        url,
        "--engine-timeout",
        "1",
        "--write",
        "--test",
        "true",
        cwd=colors,
    )
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and done.stderr.count("error:") == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("path", ["/v1/models", "/v1/completions"])
def test_a_redirect_is_refused_and_the_key_goes_to_no_other_host(engine, colors, path):
    """An engine (or a proxy in front of it) that redirects to another host: the client does not follow,
    so the key and the file go nowhere but --engine; one line names where it pointed."""
    elsewhere = Script([("red:\ngreen;\nblue)", "stop")])
    target = engine(elsewhere, host="127.0.0.2")
    script = Script([("red:\ngreen;\nblue)", "stop")], redirect=(path, target + path[3:]))
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--write",
        "-q",
        cwd=colors,
        env={"CADEDIT_ENGINE_KEY": "s3cret"},
    )
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert f"redirected {'GET' if 'models' in path else 'POST'} {path[3:]} (HTTP 302) to {target}" in done.stderr
    assert elsewhere.headers == [] and elsewhere.requests == []
    assert script.headers[0]["Authorization"] == "Bearer s3cret"  # the key went to the engine named
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize("fail", ["drip models", "drip", "drip headers"])
def test_the_engine_timeout_bounds_the_whole_request_not_each_read(engine, colors, fail):
    """An engine (or proxy) that sends a byte every 0.3 s, on GET /models or a completion, its body or its
    headers: --engine-timeout 2 ends the request 2 s after it began, whatever each read waits."""
    started = time.monotonic()
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(Script(fail=fail)),
        "--engine-timeout",
        "2",
        "--write",
        cwd=colors,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert "did not answer within 2 s" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 20  # the drip goes on for a minute
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize(
    "fail, message",
    [
        ("huge models", "/models answered 268,435,456 bytes, more than the 4,194,304"),
        ("huge", "/completions answered 268,435,456 bytes, more than the 1,176,576"),
        ("huge undeclared", "/completions answered more than the 1,176,576 bytes"),
    ],
)
def test_an_answer_larger_than_the_request_can_need_is_refused_unread(engine, colors, fail, message):
    """A 256 MiB answer (a broken proxy, a hostile engine): refused by its Content-Length before a byte
    of it is read, or once more than a completion of --max-new-tokens tokens can need has come."""
    script = Script(fail=fail)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        engine(script),
        "--max-new-tokens",
        "125",
        "--write",
        cwd=colors,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert message in done.stderr and "cadedit read no further" in done.stderr
    assert script.sent < 64 << 20  # the rest was never read: the engine's writes failed
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


_CHOICE = b'"choices": [{"text": "red:\\ngreen;\\nblue)", "finish_reason": "stop"}]'


@pytest.mark.parametrize(
    "body, detail",
    [
        (b'{%s, "usage": {"prompt_tokens": "many"}}' % _CHOICE, 'usage.prompt_tokens is "many", not a count'),
        (b'{%s, "usage": {"prompt_tokens": 1e400}}' % _CHOICE, "usage.prompt_tokens is Infinity, not a count"),
        (b'{%s, "usage": {"completion_tokens": NaN}}' % _CHOICE, "usage.completion_tokens is NaN, not a count"),
        (b'{%s, "usage": {"completion_tokens": -3}}' % _CHOICE, "usage.completion_tokens is -3, not a count"),
        (b'{%s, "timings": "fast"}' % _CHOICE, "timings is text, not dict"),
        (b'{%s, "usage": {"prompt_tokens_details": 5}}' % _CHOICE, "usage.prompt_tokens_details is int, not dict"),
        (b'{%s, "usage": {"prompt_tokens": %s}}' % (_CHOICE, b"[" * 900 + b"]" * 900), "usage.prompt_tokens is"),
        (b'{"choices": [{"text": ["red"], "finish_reason": "stop"}]}', "choices[0].text is list, not str"),
        (b'{"choices": {"text": "red"}}', "choices is dict, not list"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested too deep"),
    ],
)
def test_an_answer_of_another_shape_is_not_a_completion(engine, colors, body, detail):
    """Usage or timings of the wrong type, counts that are no counts, JSON nested 100,000 deep: one line
    naming the engine, "answered something that is not a completion", never an internal error."""
    url = engine(Script(fail=body))
    done = cli("fix", "colors.txt", "Rename teal to green.", "--engine", url, "--write", cwd=colors)
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert f"the engine at {url} answered something that is not a completion (" in done.stderr
    assert detail in done.stderr and "internal error" not in done.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize(
    "body",
    [
        b'{"data": [{"id": %s}]}' % (b"[" * 900 + b"]" * 900),
        b'{"data": "tiny-qwen"}',
        b'{"data": [{"id": 7, "owned_by": "llamacpp"}]}',
    ],
)
def test_a_model_list_of_another_shape_lists_no_model(engine, colors, body):
    done = cli("fix", "colors.txt", "Rename teal to green.", "--engine", engine(Script(fail=body)), cwd=colors)
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert "lists no model (GET /models answered" in done.stderr and "internal error" not in done.stderr


def test_the_client_raises_budget_errors(engine):
    client = EngineClient(engine(Script([("a", "length")])))
    with pytest.raises(BudgetError):
        client.edit(Document.from_text("x\n", "a.txt"), "Change it.", EditOptions(max_new_tokens=5))


def test_bench_engine_runs_concurrent_clients_and_reports_throughput(engine, tmp_path):
    script = Script([("", "stop")] * 50)
    done = cli(
        "bench",
        "engine",
        "--engine",
        engine(script),
        "-n",
        "3",
        "--clients",
        "1,3",
        "--no-local",
        "--packages",
        "click",
        "--json",
        str(tmp_path / "engine.json"),
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "engine, 1 client: 3 edits in" in done.stdout and "engine, 3 clients: 3 edits in" in done.stdout
    data = json.loads((tmp_path / "engine.json").read_text())
    assert [r["clients"] for r in data["runs"]] == [1, 3] and data["tasks"] == 3
    run = data["runs"][1]
    assert (
        run["edits"] == 3
        and run["exact"] == 0
        and run["edits_per_minute"] > 0
        and run["p95_seconds"] >= run["p50_seconds"]
    )
    assert (
        len(script.requests) == 6 and run["prompt_tokens_per_edit"] > 0
    )  # one try each, every edit through the engine
    missing = cli("bench", "engine", "--engine", engine(script), "-n", "1", cwd=tmp_path)
    assert missing.returncode == 2 and "--model" in missing.stderr


# -- what a terminal shows of an engine's text, and the engine's credentials (issue 63, items 8, 18) ---

HIDING = "\x1b[2K\x1b[G"  # erase the line, back to column 1: what follows overwrites what came before


def test_a_diff_on_a_terminal_shows_control_characters_visible_and_a_pipe_gets_its_bytes(engine, colors):
    """On a terminal the diff's escapes are shown as ^[ (no ESC of the answer's reaches it); piped, the
    diff is data and keeps them byte for byte, and stderr says so with the line made visible."""
    answer = f"red:\ngreen;  {HIDING}\nblue)"
    args = ("fix", "colors.txt", "Rename teal to green.", "-q")
    code, shown = on_a_terminal(*args, "--engine", engine(Script([(answer, "stop")])), cwd=colors)
    assert code == 0, shown
    assert b"\x1b[2K" not in shown and b"\x1b[G" not in shown and b"green;  ^[[2K^[[G" in shown, shown
    piped = cli(*args, "--engine", engine(Script([(answer, "stop")])), cwd=colors)
    assert piped.returncode == 0 and f"+green;  {HIDING}\n" in piped.stdout, piped.stdout
    assert "\x1b" not in piped.stderr and "warning: the diff holds characters a terminal acts on" in piped.stderr
    assert "    +green;  ^[[2K^[[G\n" in piped.stderr


def test_the_failing_candidates_diff_on_stderr_shows_control_characters_visible(engine, colors):
    answer = f"red:\ngreen;  {HIDING}\nblue)"
    url = engine(Script([(answer, "stop")]))
    done = cli(
        "fix", "colors.txt", "Rename teal to green.", "--engine", url, "--test", "false", "--tries", "1", cwd=colors
    )
    assert done.returncode == 3 and "FAILED its checks; its diff, not applied:" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and "+green;  ^[[2K^[[G" in done.stderr


def test_an_engines_error_text_reaches_stderr_visible(engine, colors):
    url = engine(Script(fail=b"<html>\x1b[2K\x1b[1Aall is well\x07</html>"))
    done = cli("fix", "colors.txt", "Rename teal to green.", "--engine", url, cwd=colors)
    assert done.returncode == 1 and "\x1b" not in done.stderr and "\x07" not in done.stderr, done.stderr
    assert "something that is not JSON (<html>^[[2K^[[1Aall is well^G</html>)" in done.stderr


def test_an_engine_url_with_credentials_sends_them_as_basic_auth_and_shows_them_nowhere(engine, colors):
    """http://user:password@host/v1 (a proxy with basic auth): the credentials go as the Authorization
    header, in place of the key, and no message or --json names them, also when the engine is down."""
    script = Script([("red:\ngreen;\nblue)", "stop")])
    url = engine(script).replace("http://", "http://alice:s3cret%2Fpw@")
    env = {"CADEDIT_ENGINE": url, "CADEDIT_ENGINE_KEY": "a-key-for-another-engine"}
    done = cli("fix", "colors.txt", "Rename teal to green.", "--json", cwd=colors, env=env)
    assert done.returncode == 0, done.stderr
    assert [h["Authorization"] for h in script.headers] == [
        "Basic " + base64.b64encode(b"alice:s3cret/pw").decode()
    ] * 2
    assert "s3cret" not in done.stdout + done.stderr and "alice" not in done.stdout + done.stderr
    down = f"http://alice:s3cret@127.0.0.1:{_free_port()}/v1"
    failed = cli("fix", "colors.txt", "Rename teal to green.", cwd=colors, env={"CADEDIT_ENGINE": down})
    assert failed.returncode == 1 and "no engine answers at http://127.0.0.1:" in failed.stderr, failed.stderr
    assert "s3cret" not in failed.stderr
    bad = cli("fix", "colors.txt", "Fix it.", cwd=colors, env={"CADEDIT_ENGINE": "alice:s3cret@gpu-box:8000/v1"})
    assert bad.returncode == 1 and "not an http:// or https:// URL" in bad.stderr and "s3cret" not in bad.stderr
