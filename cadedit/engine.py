"""A shared inference engine as cadedit's model: any OpenAI-compatible server (llama.cpp's llama-server,
llama-cpp-python's server, vLLM, SGLang, Ollama) does the decoding; everything that makes an edit
right (scope, prompt, checks, tests, tries, the resolver, diffs) stays cadedit's.

Contract: EngineClient(url).edit(document, instruction, options) gives the EditResult a local edit
gives, from the same prompt (request.build_request, rendered as Qwen2's ChatML with the answer's
opening prefilled) sent to {url}/completions, and the answer read by request.read_answer. A fenced
answer stops at its closing fence; a scoped edit of several regions asks once per region, the next
region's header appended as the local cursor forces it. Program mode sends the file's program grammar
as GBNF (llama.cpp's `grammar` field) with the line numbers bounded by the file, and splices each
copied line range into the prompt as the local decoder does. Every failure (no engine, a timeout, an
HTTP error, a closed connection, an answer that is not a completion) is an EngineError: one line.
Standard library only; imports no torch.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from cadedit import program as P
from cadedit.document import Document
from cadedit.errors import BudgetError, EngineError
from cadedit.options import EditOptions, Mode
from cadedit.request import SPECIAL_TEXTS, Request, build_request, default_budget, read_answer, render_chatml
from cadedit.resolve import resolve
from cadedit.results import DecodeStats, EditCandidate, EditResult
from cadedit.settings import ENGINE_TIMEOUT

KEY_ENVS = ("CADEDIT_ENGINE_KEY", "OPENAI_API_KEY")  # the API key, from the environment only
BYTES_PER_TOKEN = 3  # the budget without a tokenizer: code runs ~3-4 bytes a token in Qwen's vocabulary
# Engines whose completions take a GBNF grammar, by the owner /v1/models names: llama.cpp's llama-server
# and llama-cpp-python's server. vLLM and SGLang take other grammar forms (Lark, EBNF) that cadedit
# does not send yet.
GRAMMAR_OWNERS = ("llamacpp", "me")


@dataclass
class Usage:
    """What the engine reported over the requests of one edit."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    draft_tokens: int = 0  # speculative tokens proposed, where the engine says (llama-server's timings)
    draft_accepted: int = 0
    seconds: float = 0.0
    first_prompt_tokens: int = 0
    raw: list = field(default_factory=list)

    def add(self, answer: dict, seconds: float) -> None:
        usage = answer.get("usage") or {}
        timings = answer.get("timings") or {}
        self.requests += 1
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.cached_tokens += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        self.draft_tokens += int(timings.get("draft_n") or 0)
        self.draft_accepted += int(timings.get("draft_n_accepted") or 0)
        self.seconds += seconds
        self.first_prompt_tokens = self.first_prompt_tokens or int(usage.get("prompt_tokens") or 0)
        self.raw.append({k: answer[k] for k in ("usage", "timings") if k in answer})

    def stats(self) -> DecodeStats:
        return DecodeStats(forward_passes=0, tokens_prompt=self.prompt_tokens - self.cached_tokens,
                           tokens_reused=self.cached_tokens, tokens_sampled=self.completion_tokens,
                           tokens_drafted=self.draft_tokens, drafts_kept=self.draft_accepted, seconds_total=self.seconds)

    def to_json(self) -> dict:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cached_tokens": self.cached_tokens,
                "draft_tokens": self.draft_tokens, "draft_accepted": self.draft_accepted,
                "seconds": round(self.seconds, 3), "reported": self.raw}


def check_url(url: str) -> str:
    """An engine's base URL (…/v1) without a trailing slash; an EngineError if it is no http(s) URL."""
    if not re.match(r"^https?://[^/\s]+", url or ""):
        raise EngineError(f"engine {url!r}: not an http:// or https:// URL",
                          hint="give the engine's OpenAI-compatible base URL, e.g. http://gpu-box:8000/v1")
    return url.rstrip("/")


class EngineClient:
    """An OpenAI-compatible engine, used like a LoadedModel by tries.edit_verified (it has edit())."""

    backend = "engine"
    dtype = ""
    threads = 0
    load_seconds = 0.0
    phases: tuple = ()

    def __init__(self, url: str, timeout: float = ENGINE_TIMEOUT, model: str | None = None, key: str | None = None):
        self.url = check_url(url)
        self.timeout = timeout
        self.key = key if key is not None else next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), None)
        self.model, self.owner = self._served_model(model)
        self.name = f"{self.model} at {self.url}"

    # -- the wire ------------------------------------------------------------------------------

    def _served_model(self, wanted: str | None) -> tuple[str, str]:
        """The model to ask for (`wanted`, else the first the engine serves) and who serves it
        (GET /models's owned_by: which engine it is); also the check that an engine answers. The
        full timeout: an engine that serves one request at a time (llama-cpp-python's server) answers
        /models only after the completions ahead of it."""
        answer = self._call("GET", "/models", None, self.timeout)
        models = answer.get("data") if isinstance(answer, dict) else None
        models = [m for m in models if isinstance(m, dict) and "id" in m] if isinstance(models, list) else []
        if not models:
            raise EngineError(f"the engine at {self.url} lists no model (GET /models answered {_short(answer)})",
                              hint="is the URL the engine's OpenAI-compatible base (…/v1)?")
        chosen = next((m for m in models if m["id"] == wanted), models[0])
        return wanted or str(chosen["id"]), str(chosen.get("owned_by", ""))

    def _call(self, method: str, path: str, body: dict | None, timeout: float):
        """One HTTP request and its JSON answer; every failure an EngineError."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        where = f"the engine at {self.url}"
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(exc, where + path) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise _slow(where, timeout) from None
            raise EngineError(f"no engine answers at {self.url} ({getattr(reason, 'strerror', None) or reason})",
                              hint="start the engine, or check --engine / CADEDIT_ENGINE") from None
        except (TimeoutError, socket.timeout):
            raise _slow(where, timeout) from None
        except (http.client.HTTPException, ConnectionError) as exc:
            raise EngineError(f"{where} closed the connection mid-answer ({type(exc).__name__})",
                              hint="see the engine's log; then retry") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise EngineError(f"{where} answered {path} with something that is not JSON ({_short(raw)})",
                              hint="is the URL the engine's OpenAI-compatible base (…/v1)?") from None

    def complete(self, prompt: str, max_tokens: int, options: EditOptions, usage: Usage, stop=(),
                 grammar: str | None = None) -> tuple[str, str]:
        """One completion: (text, finish_reason); the engine's usage added to `usage`."""
        sampling = options.sampling
        body = {"model": self.model, "prompt": prompt, "max_tokens": max(1, max_tokens), "stream": False,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "stop": list(stop)}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if grammar is not None:
            body["grammar"] = grammar
        start = time.perf_counter()
        answer = self._call("POST", "/completions", body, self.timeout)
        usage.add(answer if isinstance(answer, dict) else {}, time.perf_counter() - start)
        try:
            choice = answer["choices"][0]
            text, reason = choice["text"], choice.get("finish_reason")
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise EngineError(f"the engine at {self.url} answered something that is not a completion "
                              f"({_short(answer)})", hint="is the URL the engine's OpenAI-compatible base (…/v1)?") from None
        if choice.get("stop_reason") is not None and isinstance(choice.get("stop_reason"), str):
            reason = "stop:" + choice["stop_reason"]  # vLLM and SGLang name the stop string that matched
        return text, str(reason)

    # -- an edit -------------------------------------------------------------------------------

    def edit_candidates(self, document: Document, instruction: str, options: EditOptions | None = None, k: int = 2,
                        on_step=None) -> list[EditCandidate]:
        """`--candidates k` through the engine: k requests sent at once (an engine that batches serves
        them together), candidate 1 with the try's own sampling, the others sampled as
        tries.candidate_sampling seeds them. The engine's log-probabilities are not asked for, so every
        candidate scores 0 and they are checked in their order, the try's own first."""
        from concurrent.futures import ThreadPoolExecutor
        from dataclasses import replace

        from cadedit.tries import candidate_sampling

        options = options or EditOptions()

        def one(number: int) -> EditCandidate:
            sampled = replace(options, sampling=candidate_sampling(number, options.sampling))
            try:
                return EditCandidate(self.edit(document, instruction, sampled, on_step), 0.0)
            except BudgetError as exc:
                return EditCandidate(None, 0.0, exc)

        with ThreadPoolExecutor(k, thread_name_prefix="cadedit-engine") as pool:
            return list(pool.map(one, range(1, k + 1)))

    def edit(self, document: Document, instruction: str, options: EditOptions | None = None, on_step=None) -> EditResult:
        """The edit of `document` the engine's model writes; see the module docstring."""
        options = options or EditOptions()
        request = build_request(document, instruction, options)
        refuse_special_text(document, request)
        prompt = render_chatml(request.messages, request.opening)
        budget = options.max_new_tokens or default_budget(len(request.answer.encode()) // BYTES_PER_TOKEN + 1,
                                                          bool(request.regions))
        usage = Usage()
        try:
            if request.mode is Mode.PROGRAM:
                text = self._program(document, prompt, budget, options, usage)
            else:
                text = self._fenced(request, prompt, budget, options, usage)
        except BudgetError as exc:
            exc.engine = usage.to_json()  # the try's JSON still says what the engine did
            raise
        program, problem = read_answer(document, request.mode, text, request.fence, request.regions, request.headers)
        return EditResult(document, request.mode, program, text, resolve(program, document), usage.stats(),
                          self.name, usage.first_prompt_tokens, problem, engine=usage.to_json())

    def _fenced(self, request: Request, prompt: str, budget: int, options: EditOptions, usage: Usage) -> str:
        """The fenced answer, one completion per region; the text as the local cursor spells it."""
        end = "\n" + request.fence + "\n"
        text = ""
        for k in range(max(1, len(request.regions))):
            if k:
                text += request.headers[k - 1]  # forced, as the local cursor forces it
            left = budget - usage.completion_tokens
            if left <= 0:
                raise _budget(budget)
            piece, reason = self.complete(prompt + text, left, options, usage, stop=(end, "<|im_end|>"))
            if reason == "length":
                raise _budget(budget)
            if not _stopped_at_fence(piece, reason, end):
                return text + piece  # the model ended its answer (EOS): no more segments, as locally
            text += piece + end
        return text

    def _program(self, document: Document, prompt: str, budget: int, options: EditOptions, usage: Usage) -> str:
        """A program under the file's grammar; after each copy its lines are spliced into the prompt."""
        if self.owner not in GRAMMAR_OWNERS:
            raise EngineError(f"--mode program needs an engine that takes a GBNF grammar per request (llama.cpp's "
                              f"llama-server or llama-cpp-python's server); the engine at {self.url} "
                              f"({self.owner or 'unknown'}) is not known to", hint="use --mode verify with this engine")
        written = P.OPEN  # the grammar forces it locally; here it is prefilled
        shown = prompt + P.OPEN
        low, has_op, in_body = 1, False, False
        while True:
            left = budget - usage.completion_tokens
            if left <= 0:
                raise _budget(budget)
            grammar = program_gbnf(document.n_lines, low, has_op, in_body)
            piece, reason = self.complete(shown, left, options, usage, stop=(P.COPY_CLOSE,), grammar=grammar)
            if reason == "length":
                raise _budget(budget)
            written, shown = written + piece, shown + piece
            if piece.rstrip().endswith(P.CLOSE) or not _stopped_at(reason, P.COPY_CLOSE):
                return written
            written, shown = written + P.COPY_CLOSE, shown + P.COPY_CLOSE
            copy, in_body = _last_copy(written)
            if copy is not None:
                start, end = copy
                shown += document.display_text(start, min(end, document.n_lines))
                low, has_op = end + 1, True


def refuse_special_text(document: Document, request: Request) -> None:
    """An engine reads control-token text in the prompt as the control token; a file holding one is refused."""
    texts = [m["content"] for m in request.messages] + [request.opening]
    for special in SPECIAL_TEXTS:
        if any(special in text for text in texts):
            raise EngineError(f"{document.path}: contains the text {special}, which an engine would read as a "
                              "control token", hint="edit this file without --engine (the local model keeps it text)")


def _stopped_at(reason: str, stop: str) -> bool:
    """Whether a completion ended at the stop string `stop` (the engine drops it from the text)."""
    if reason.startswith("stop:"):
        return reason == "stop:" + stop
    return reason == "stop"


def _stopped_at_fence(piece: str, reason: str, end: str) -> bool:
    """Whether a fenced answer stopped at its closing fence rather than at an end-of-text token: an
    engine that does not name the stop string says "stop" for both, and a fence stop leaves a text
    that does not end its last line (an EOS after a finished line is taken as the answer's end)."""
    if reason.startswith("stop:"):
        return reason == "stop:" + end
    return reason == "stop" and not piece.endswith("\n")


_COPY_AT_END = re.compile(r'<copy lines="([1-9][0-9]*)-([1-9][0-9]*)"/>\n$')
_COPIES = re.compile(r'(?:<copy lines="[0-9]+-[0-9]+"/>\n)*')


def _last_copy(written: str) -> tuple[tuple[int, int] | None, bool]:
    """After a stop at a copy's close: (the copy's lines, False), or (None, True) when the close was
    text inside a gen body. The ops after the last gen close (a body never holds "</") are copies,
    then perhaps a gen that is still open."""
    at = written.rfind(P.GEN_CLOSE)
    tail = written[at + len(P.GEN_CLOSE):] if at >= 0 else written[len(P.OPEN):]
    if tail[_COPIES.match(tail).end():].startswith(P.GEN_OPEN):
        return None, True
    found = _COPY_AT_END.search(written)
    return ((int(found.group(1)), int(found.group(2))), False) if found else (None, False)


# -- the program grammar as GBNF, its line numbers bounded by the file ----------------------------


def number_range(low: int, high: int) -> str:
    """A GBNF alternation of the decimal numbers low..high (no leading zeros)."""
    parts = []
    for digits in range(len(str(low)), len(str(high)) + 1):
        a = max(low, 10 ** (digits - 1))
        b = min(high, 10**digits - 1)
        if a <= b:
            parts += _same_length(str(a), str(b))
    return "(" + " | ".join(parts) + ")"


def _same_length(a: str, b: str) -> list[str]:
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    if a[0] == b[0]:
        return [f'"{a[0]}" (' + " | ".join(_same_length(a[1:], b[1:])) + ")"]
    rest = len(a) - 1
    out = [f'"{a[0]}" (' + " | ".join(_same_length(a[1:], "9" * rest)) + ")"]
    if int(b[0]) - int(a[0]) > 1:
        out.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}]" + " [0-9]" * rest)
    out.append(f'"{b[0]}" (' + " | ".join(_same_length("0" * rest, b[1:])) + ")")
    return out


def program_gbnf(n_lines: int, low: int = 1, has_op: bool = False, in_body: bool = False) -> str:
    """The rest of an edit program as GBNF: copies start at `low` or later (copies go forward), every
    line number is at most n_lines, at least one op before </program>, gen bodies free of "</" (the
    close), `in_body`: the text so far ends inside a gen body."""
    ops = "op* close" if has_op or in_body else "op op* close"
    start = number_range(low, n_lines) if low <= n_lines else None
    copy = f'copy ::= "<copy lines=\\"" {start} "-" {number_range(1, max(1, n_lines))} "\\"/>\\n"' if start else ""
    op = "op ::= copy | gen" if copy else "op ::= gen"
    root = f"root ::= body \"</gen>\\n\" {ops}" if in_body else f"root ::= {ops}"
    return "\n".join(line for line in (
        root, op, copy, 'gen ::= "<gen>\\n" body "</gen>\\n"', 'body ::= ([^<] | "<" [^/])*',
        'close ::= "</program>" "\\n"?') if line) + "\n"


# -- errors ----------------------------------------------------------------------------------------


def _short(value, limit: int = 120) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else json.dumps(value) if not isinstance(
        value, str) else value
    text = " ".join(text.split())
    return (text[:limit] + "…") if len(text) > limit else (text or "nothing")


def _slow(where: str, timeout: float) -> EngineError:
    return EngineError(f"{where} did not answer within {timeout:g} s",
                       hint="raise --engine-timeout (or engine_timeout in .cadedit.toml), or check the engine's load")


def _budget(budget: int) -> BudgetError:
    return BudgetError(f"the engine used the budget of {budget} new tokens before the answer was complete",
                       hint="raise --max-new-tokens")


def _http_error(exc: urllib.error.HTTPError, where: str) -> EngineError:
    """An HTTP error as one line: the status and the engine's own message."""
    try:
        body = exc.read()
    except (OSError, http.client.HTTPException):
        body = b""
    try:
        data = json.loads(body)
        error = data.get("error", data.get("detail", data)) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        message = body
    hint = {401: "set the engine's API key in CADEDIT_ENGINE_KEY (or OPENAI_API_KEY)",
            403: "set the engine's API key in CADEDIT_ENGINE_KEY (or OPENAI_API_KEY)",
            404: "give the engine's OpenAI-compatible base URL, ending in /v1"}.get(exc.code, "see the engine's log")
    return EngineError(f"{where} answered HTTP {exc.code} ({_short(message)})", hint=hint)
