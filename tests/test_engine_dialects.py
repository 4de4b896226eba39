"""cadedit on vLLM and SGLang, against in-process fakes that check every request body as the engine
reads it: the keys and types of its completions request (vLLM's CompletionRequest with its
StructuredOutputsParams, vllm/entrypoints/openai/completion/protocol.py and vllm/sampling_params.py;
SGLang's CompletionRequest, python/sglang/srt/entrypoints/openai/protocol.py), each grammar as the engine's
grammar backend reads it (EBNF with `::=` rules, every rule it names defined), and each limit (vLLM's
--max-logprobs, 20 by default). A key the engine does not define is refused with HTTP 400 here where the
real engine would drop it without a word (vLLM's old `guided_grammar`, llama.cpp's `grammar`) and answer
unconstrained. Each fake names itself in GET /v1/models's owned_by as the engine does ("vllm", "sglang")
and reports the stop string that matched as it does (vLLM's `stop_reason`, SGLang's `matched_stop`).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.test_engine import branching_engine, cli, colors, no_keys  # noqa: F401 - fixtures and runner


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _str(value) -> bool:
    return isinstance(value, str)


def _bool(value) -> bool:
    return isinstance(value, bool)


def _opt(check):
    return lambda value: value is None or check(value)


def _stop(value) -> bool:
    return value is None or _str(value) or (isinstance(value, list) and all(_str(v) for v in value))


def _prompt(value) -> bool:
    return _str(value) or (isinstance(value, list) and all(_str(v) or _int(v) for v in value))


def _dict(value) -> bool:
    return isinstance(value, dict)


def _ints(value) -> bool:
    return isinstance(value, list) and all(_int(v) for v in value)


# The completions request's fields and their types, as each engine's protocol defines them.
VLLM_COMPLETION = {
    "model": _opt(_str),
    "prompt": _prompt,
    "echo": _opt(_bool),
    "frequency_penalty": _opt(_num),
    "logit_bias": _opt(_dict),
    "logprobs": _opt(_int),
    "max_tokens": _opt(_int),
    "n": _int,
    "presence_penalty": _opt(_num),
    "seed": _opt(_int),
    "stop": _stop,
    "stream": _opt(_bool),
    "stream_options": _opt(_dict),
    "suffix": _opt(_str),
    "temperature": _opt(_num),
    "top_p": _opt(_num),
    "user": _opt(_str),
    "use_beam_search": _bool,
    "top_k": _opt(_int),
    "min_p": _opt(_num),
    "repetition_penalty": _opt(_num),
    "length_penalty": _num,
    "stop_token_ids": _opt(_ints),
    "include_stop_str_in_output": _bool,
    "ignore_eos": _bool,
    "min_tokens": _int,
    "skip_special_tokens": _bool,
    "spaces_between_special_tokens": _bool,
    "truncate_prompt_tokens": _opt(_int),
    "allowed_token_ids": _opt(_ints),
    "prompt_logprobs": _opt(_int),
    "bad_words": lambda v: isinstance(v, list),
    "add_special_tokens": _bool,
    "response_format": _opt(_dict),
    "structured_outputs": _opt(_dict),
    "priority": _int,
    "request_id": _str,
    "cache_salt": _opt(_str),
    "return_tokens_as_token_ids": _opt(_bool),
    "return_token_ids": _opt(_bool),
    "kv_transfer_params": _opt(_dict),
    "vllm_xargs": _opt(_dict),
}
VLLM_STRUCTURED = {
    "json": lambda v: _str(v) or _dict(v),
    "regex": _str,
    "choice": lambda v: isinstance(v, list),
    "grammar": _str,
    "json_object": _bool,
    "structural_tag": _str,
    "disable_any_whitespace": _bool,
    "disable_additional_properties": _bool,
    "whitespace_pattern": _opt(_str),
}
VLLM_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
VLLM_MAX_LOGPROBS = 20  # vllm serve --max-logprobs, its default

SGLANG_COMPLETION = {
    "model": _str,
    "prompt": _prompt,
    "best_of": _opt(_int),
    "echo": _bool,
    "frequency_penalty": _num,
    "logit_bias": _opt(_dict),
    "logprobs": _opt(_int),
    "max_tokens": _int,
    "n": _int,
    "presence_penalty": _num,
    "seed": _opt(_int),
    "stop": _stop,
    "stream": _bool,
    "stream_options": _opt(_dict),
    "suffix": _opt(_str),
    "temperature": _num,
    "top_p": _num,
    "user": _opt(_str),
    "return_hidden_states": _bool,
    "top_k": _int,
    "min_p": _num,
    "min_tokens": _int,
    "json_schema": _opt(_str),
    "regex": _opt(_str),
    "ebnf": _opt(_str),
    "repetition_penalty": _num,
    "stop_token_ids": _opt(_ints),
    "no_stop_trim": _bool,
    "ignore_eos": _bool,
    "skip_special_tokens": _bool,
    "lora_path": lambda v: True,
    "session_params": _opt(_dict),
    "response_format": _opt(_dict),
    "custom_params": _opt(_dict),
    "rid": lambda v: True,
    "extra_key": lambda v: True,
    "cache_salt": lambda v: True,
    "priority": _opt(_int),
}
SGLANG_CONSTRAINTS = ("json_schema", "regex", "ebnf")

_QUOTED = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')


def ebnf_problems(grammar: str) -> list[str]:
    """What an EBNF grammar backend (xgrammar's GBNF dialect) would refuse in `grammar`: no `::=` rules
    (vLLM would read it as Lark), no root rule, a rule named but not defined."""
    defined, used = set(), set()
    for line in grammar.splitlines():
        if not line.strip():
            continue
        found = re.match(r"^([A-Za-z][A-Za-z0-9_-]*)\s*::=(.*)$", line)
        if not found:
            return [f"not an EBNF rule: {line!r}"]
        defined.add(found.group(1))
        used |= set(re.findall(r"[A-Za-z][A-Za-z0-9_-]*", _QUOTED.sub(" ", found.group(2))))
    problems = [] if "root" in defined else ["no root rule"]
    return problems + [f"rule {name} is not defined" for name in sorted(used - defined)]


def vllm_problems(body: dict) -> list[str]:
    """Why vLLM would refuse the completions request `body`, or drop part of it unread."""
    problems = [f"{key}: vLLM does not read it" for key in body if key not in VLLM_COMPLETION]
    problems += [
        f"{key}: wrong type {type(v).__name__}"
        for key, v in body.items()
        if key in VLLM_COMPLETION and not VLLM_COMPLETION[key](v)
    ]
    if _int(body.get("logprobs")) and not 0 <= body["logprobs"] <= VLLM_MAX_LOGPROBS:
        problems.append(f"logprobs: {body['logprobs']} is past --max-logprobs {VLLM_MAX_LOGPROBS}")
    if _int(body.get("max_tokens")) and body["max_tokens"] < 1:
        problems.append("max_tokens: below 1")
    structured = body.get("structured_outputs")
    if isinstance(structured, dict):
        problems += [
            f"structured_outputs.{key}: vLLM does not read it" for key in structured if key not in VLLM_STRUCTURED
        ]
        problems += [
            f"structured_outputs.{key}: wrong type"
            for key, v in structured.items()
            if key in VLLM_STRUCTURED and not VLLM_STRUCTURED[key](v)
        ]
        if sum(structured.get(key) is not None for key in VLLM_CONSTRAINTS) != 1:
            problems.append("structured_outputs: exactly one constraint")
        if _str(structured.get("grammar")):
            problems += ebnf_problems(structured["grammar"])
    return problems


def sglang_problems(body: dict) -> list[str]:
    """Why SGLang would refuse the completions request `body`, or drop part of it unread."""
    problems = [f"{key}: SGLang does not read it" for key in body if key not in SGLANG_COMPLETION]
    problems += [
        f"{key}: wrong type {type(v).__name__}"
        for key, v in body.items()
        if key in SGLANG_COMPLETION and not SGLANG_COMPLETION[key](v)
    ]
    if "prompt" not in body:
        problems.append("prompt: required")
    if _int(body.get("max_tokens")) and body["max_tokens"] <= 0:
        problems.append("max_tokens must be positive")
    if sum(body.get(key) is not None for key in SGLANG_CONSTRAINTS) > 1:
        problems.append("only one of json_schema, regex, ebnf")
    if _str(body.get("ebnf")):
        problems += ebnf_problems(body["ebnf"])
    return problems


class Fake:
    """vLLM or SGLang: answers (text, the stop that matched: a string, or an end-of-text token) in turn,
    or respond(body) -> (text, "stop", logprobs); every request checked first."""

    def __init__(self, owner: str, answers=(), respond=None):
        self.owner, self.answers, self.respond = owner, list(answers), respond
        self.requests: list[dict] = []
        self.refused: list[list[str]] = []

    def check(self, body: dict) -> list[str]:
        return vllm_problems(body) if self.owner == "vllm" else sglang_problems(body)

    def answer(self, body: dict) -> dict:
        logprobs, matched = None, None
        if self.respond is not None:
            text, _, logprobs = self.respond(body)
            matched = body["stop"][0]  # each of its answers stops at the closing fence, the first stop string
        else:
            text, matched = self.answers.pop(0)
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "stop"}
        if self.owner == "vllm":
            choice.update(stop_reason=matched, prompt_logprobs=None)
        else:
            choice.update(matched_stop=151645 if matched is None else matched)  # <|im_end|>'s id: an end of text
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": "qwen",
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(body["prompt"]) // 4,
                "completion_tokens": len(text) // 4 + 1,
                "total_tokens": 0,
            },
        }


def _handler(fake: Fake):
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

        def do_GET(self):
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "qwen",
                            "object": "model",
                            "created": 0,
                            "owned_by": fake.owner,
                            "root": "qwen",
                            "parent": None,
                        }
                    ],
                },
            )

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(body)
            problems = fake.check(body)
            if problems:
                fake.refused.append(problems)
                return self._json(
                    400, {"object": "error", "message": "; ".join(problems), "type": "BadRequestError", "code": 400}
                )
            self._json(200, fake.answer(body))

    return Handler


@pytest.fixture
def serve():
    """serve(fake) -> the fake engine's base URL; stopped after the test."""
    servers = []

    def start(fake: Fake) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()


def test_the_checks_refuse_what_each_engine_would_drop_or_refuse():
    """The fakes prove something: the bodies an engine would ignore (the old guided_* keys, another
    engine's grammar key) or refuse (too many log-probabilities, a Lark grammar, two constraints) fail."""
    base = {"model": "qwen", "prompt": "x", "max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "stop": ["a"]}
    gbnf = 'root ::= "a" b\nb ::= [0-9]\n'
    assert vllm_problems({**base, "structured_outputs": {"grammar": gbnf}, "logprobs": 5}) == []
    assert sglang_problems({**base, "ebnf": gbnf, "logprobs": 5}) == []
    assert vllm_problems({**base, "guided_grammar": gbnf}) == ["guided_grammar: vLLM does not read it"]
    assert vllm_problems({**base, "grammar": gbnf}) == ["grammar: vLLM does not read it"]
    assert sglang_problems({**base, "grammar": gbnf}) == ["grammar: SGLang does not read it"]
    assert sglang_problems({**base, "structured_outputs": {"grammar": gbnf}}) == [
        "structured_outputs: SGLang does not read it"
    ]
    assert vllm_problems({**base, "logprobs": 21}) == ["logprobs: 21 is past --max-logprobs 20"]
    assert vllm_problems({**base, "structured_outputs": {"grammar": "start: 'a'"}}) == [
        "not an EBNF rule: \"start: 'a'\""
    ]
    assert vllm_problems({**base, "structured_outputs": {"grammar": 'root ::= b\n'}}) == ["rule b is not defined"]
    assert vllm_problems({**base, "structured_outputs": {"grammar": gbnf, "regex": "a"}}) == [
        "structured_outputs: exactly one constraint"
    ]
    assert sglang_problems({**base, "ebnf": gbnf, "regex": "a"}) == ["only one of json_schema, regex, ebnf"]


PROGRAM = [('<copy lines="1-1', '"/>\n'), ('<gen>\ngreen;\n</gen>\n<copy lines="3-3', '"/>\n'), ("</program>", None)]


@pytest.mark.parametrize("owner,key", [("vllm", "structured_outputs"), ("sglang", "ebnf")])
def test_program_mode_sends_the_grammar_where_the_engine_reads_it(serve, colors, owner, key):
    """Program mode on vLLM (structured_outputs.grammar) and SGLang (ebnf): every request is one the engine
    reads whole, the file's grammar in it; the copies are spliced and the edit is the right one."""
    fake = Fake(owner, PROGRAM)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--mode",
        "program",
        "--engine",
        serve(fake),
        "--json",
        "-q",
        "--write",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    assert fake.refused == [] and len(fake.requests) == 3
    grammars = [r[key]["grammar"] if owner == "vllm" else r[key] for r in fake.requests]
    assert 'copy ::= "<copy lines=\\"" ([1-3]) "-" ([1-3])' in grammars[0] and "copy ::=" not in grammars[2]
    assert all("grammar" not in r for r in fake.requests)
    assert fake.requests[1]["prompt"] == fake.requests[0]["prompt"] + '<copy lines="1-1"/>\nred:\n'
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


@pytest.mark.parametrize("owner", ["vllm", "sglang"])
def test_branched_candidates_ask_log_probabilities_within_the_engines_limit(serve, colors, owner):
    """--candidates 4 with a failing candidate 1: its top log-probabilities are asked within vLLM's
    --max-logprobs; the branches' requests are read whole too, and the passing branch is written."""
    script = branching_engine()
    fake = Fake(owner, respond=script.respond)
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--engine",
        serve(fake),
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
    assert fake.refused == [] and len(fake.requests) == 4
    assert 0 < fake.requests[0]["logprobs"] <= VLLM_MAX_LOGPROBS
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_an_engine_that_takes_no_grammar_refuses_program_mode_in_one_line(serve, colors):
    """Ollama (owned_by "library") reads no grammar: program mode is refused before any request."""
    fake = Fake("library", PROGRAM)
    done = cli(
        "fix", "colors.txt", "Rename teal to green.", "--mode", "program", "--engine", serve(fake), "-q", cwd=colors
    )
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert (
        "--mode program needs an engine that takes a grammar per request" in done.stderr and "(library)" in done.stderr
    )
    assert fake.requests == [] and (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"
