"""A shared inference engine as cadedit's model: any OpenAI-compatible server (llama.cpp's llama-server,
llama-cpp-python's server, vLLM, SGLang, Ollama) does the decoding; everything that makes an edit
right (scope, prompt, checks, tests, tries, the resolver, diffs) stays cadedit's.

Contract: EngineClient(url).edit(document, instruction, options) gives the EditResult a local edit
gives, from the same prompt (request.build_request, rendered as Qwen2's ChatML with the answer's
opening prefilled) sent to {url}/completions, and the answer read by request.read_answer. A fenced
answer stops at its closing fence; a scoped edit of several regions asks once per region, the next
region's header appended as the local cursor forces it. Program mode sends the file's program grammar
as GBNF (llama.cpp's `grammar`, vLLM's `structured_outputs`, SGLang's `ebnf`: GRAMMAR_FIELDS) with the
line numbers bounded by the file, and splices each copied line range into the prompt as the local
decoder does. Every failure (no engine, a timeout, an HTTP error, a redirect, a closed connection, an
answer that is not a completion) is an EngineError: one line. The wire (no redirects followed, so the
key goes only to the URL given) is engine_http's; every answer's shape is checked in engine_answer
before anything here reads it.
Standard library only; imports no torch.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from cadedit.text import program as P
from cadedit.text.document import Document
from cadedit.server.engine_answer import Completion, read_completion, read_models
from cadedit.server.engine_http import call_json, credentials, without_credentials
from cadedit.errors import BudgetError, EngineError
from cadedit.prompt.fence import writes_again
from cadedit.options import EditOptions, Mode
from cadedit.prompt.request import SPECIAL_TEXTS, Request, build_request, default_budget, read_answer, render_chatml
from cadedit.text.resolve import resolve
from cadedit.results import DecodeStats, EditCandidate, EditResult, Editor
from cadedit.settings import ENGINE_TIMEOUT
from cadedit.tries.loop import candidate_sampling

KEY_ENVS = ("CADEDIT_ENGINE_KEY", "OPENAI_API_KEY")  # the API key, from the environment only
BYTES_PER_TOKEN = 3  # the budget without a tokenizer: code runs ~3-4 bytes a token in Qwen's vocabulary
# A completion's text counts against the budget as at least one token per this many bytes, whatever the
# engine reports (a token of code is a few bytes; runs of longer ones are rare), so an engine that
# reports too few tokens, or none, cannot ask for completion after completion.
BYTES_PER_TOKEN_AT_MOST = 16
# Where each engine reads program mode's grammar in a completion request, by the owner GET /models names
# (owned_by). llama.cpp's llama-server ("llamacpp") and llama-cpp-python's server ("me") read GBNF from
# `grammar`; vLLM ("vllm", 0.12 and later) from `structured_outputs: {"grammar": ...}`; SGLang ("sglang")
# from `ebnf`. vLLM's and SGLang's grammar backend (xgrammar) reads llama.cpp's GBNF as its EBNF, and
# vLLM takes a grammar with a `::=` rule for EBNF, not Lark, so every engine gets the same text. Each
# engine drops the others' keys (and vLLM the old `guided_grammar`) without a word and answers
# unconstrained, so an engine not named here gets no grammar: program mode is refused there.
GRAMMAR_FIELDS = {"llamacpp": "grammar", "me": "grammar", "vllm": "structured_outputs", "sglang": "ebnf"}
# The top log-probabilities asked a token of a branched try's candidate 1: its next choice is the best
# of them that is text (an engine lists control tokens' text as ""). Within every engine's limit:
# vLLM refuses more than its --max-logprobs (20 by default); llama.cpp and SGLang take any number.
TOP_LOGPROBS = 5
# Bounds on an answer's size, so a broken or hostile engine cannot fill memory: a completion's room is
# the JSON around its text plus a token's text per token asked (max_tokens), JSON-escaped, with room to
# spare; with log-probabilities each token also lists its top ones (llama-server adds their bytes).
ANSWER_BYTES = 1 << 20
BYTES_PER_ANSWER_TOKEN = 1024
BYTES_PER_LOGPROB_TOKEN = 16 * 1024
MODELS_BYTES = 4 << 20  # GET /models: a list of model names (an Ollama with hundreds of models: ~100 KB)


@dataclass
class Usage:
    """What the engine reported over the requests of one edit."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    spent: int = 0  # the tokens counted against the budget (counted_tokens of each completion)
    cached_tokens: int = 0
    draft_tokens: int = 0  # speculative tokens proposed, where the engine says (llama-server's timings)
    draft_accepted: int = 0
    seconds: float = 0.0
    first_prompt_tokens: int = 0
    raw: list = field(default_factory=list)

    def add(self, completion: Completion, seconds: float) -> None:
        counts = completion.counts
        self.requests += 1
        self.prompt_tokens += counts.prompt
        self.completion_tokens += counts.completion
        self.spent += counted_tokens(completion.text, counts.completion)
        self.cached_tokens += counts.cached
        self.draft_tokens += counts.drafted
        self.draft_accepted += counts.draft_accepted
        self.seconds += seconds
        self.first_prompt_tokens = self.first_prompt_tokens or counts.prompt
        self.raw.append(completion.reported)

    def stats(self) -> DecodeStats:
        return DecodeStats(
            forward_passes=0,
            tokens_prompt=self.prompt_tokens - self.cached_tokens,
            tokens_reused=self.cached_tokens,
            tokens_sampled=self.completion_tokens,
            tokens_drafted=self.draft_tokens,
            drafts_kept=self.draft_accepted,
            seconds_total=self.seconds,
        )

    def to_json(self) -> dict:
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "draft_tokens": self.draft_tokens,
            "draft_accepted": self.draft_accepted,
            "seconds": round(self.seconds, 3),
            "reported": self.raw,
        }


def check_url(url: str) -> str:
    """An engine's base URL (…/v1) without a trailing slash, its credentials (`user:password@`) taken
    out; an EngineError if it is no http(s) URL, which names the URL without them."""
    bare = without_credentials(url or "")
    if not re.match(r"^https?://[^/\s@]+", bare):
        shown = re.sub(r"^(\w+://)?[^/]*@", r"\1…@", bare)  # `user:password@host` without a scheme
        raise EngineError(
            f"engine {shown!r}: not an http:// or https:// URL",
            hint="give the engine's OpenAI-compatible base URL, e.g. http://gpu-box:8000/v1",
        )
    return bare.rstrip("/")


class EngineClient(Editor):
    """An OpenAI-compatible engine as a results.Editor (the engine decodes: make_sampler and factories are not
    used), with name, backend, dtype, threads and load_seconds as a LoadedModel has them."""

    loaded = None  # no logits here: no where-step through an engine
    shared_engine = True
    backend = "engine"
    dtype = ""
    threads = 0
    load_seconds = 0.0
    phases: tuple = ()

    def __init__(self, url: str, timeout: float = ENGINE_TIMEOUT, model: str | None = None, key: str | None = None):
        self.url = check_url(url)
        self.timeout = timeout
        key = key if key is not None else next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), None)
        self.authorization = credentials(url, key)
        self.model, self.owner = self._served_model(model)
        self.name = f"{self.model} at {self.url}"

    # -- the wire ------------------------------------------------------------------------------

    def _served_model(self, wanted: str | None) -> tuple[str, str]:
        """The model to ask for (`wanted`, else the first the engine serves) and who serves it
        (GET /models's owned_by: which engine it is); also the check that an engine answers. The
        full timeout: an engine that serves one request at a time (llama-cpp-python's server) answers
        /models only after the completions ahead of it."""
        answer = self._call("GET", "/models", None, self.timeout, MODELS_BYTES, "a model list")
        models = read_models(answer, f"the engine at {self.url}")
        chosen = next((m for m in models if m[0] == wanted), models[0])
        return wanted or chosen[0], chosen[1]

    def _call(self, method: str, path: str, body: dict | None, timeout: float, limit: int, what: str):
        """One HTTP request and its JSON answer (at most `limit` bytes); every failure an EngineError
        (engine_http.call_json)."""
        return call_json(self.url, method, path, body, self.authorization, timeout, limit, what)

    def complete(
        self,
        prompt: str,
        max_tokens: int,
        options: EditOptions,
        usage: Usage,
        stop=(),
        grammar: str | None = None,
        logprobs: int | None = None,
    ) -> tuple[str, str, list | None]:
        """One completion: (text, finish_reason, its tokens); the engine's usage added to `usage`. With
        `logprobs` (the top ones asked for a token) the tokens are (text, log-probability, {text:
        log-probability} of the top ones) as the engine gave them (engine_answer.token_logprobs), else None."""
        sampling = options.sampling
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max(1, max_tokens),
            "stream": False,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "stop": list(stop),
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if grammar is not None:
            body.update(grammar_field(self.owner, grammar))
        if logprobs is not None:
            body["logprobs"] = logprobs
        start = time.perf_counter()
        answer = self._call(
            "POST", "/completions", body, self.timeout, answer_limit(body["max_tokens"], logprobs), "a completion"
        )
        completion = read_completion(answer, f"the engine at {self.url}")
        usage.add(completion, time.perf_counter() - start)
        return completion.text, completion.reason, completion.tokens if logprobs is not None else None

    # -- an edit -------------------------------------------------------------------------------

    def edit_candidates(
        self,
        document: Document,
        instruction: str,
        options: EditOptions | None = None,
        k: int = 2,
        on_step=None,
        numbers: range | None = None,
        factories=None,
    ) -> list[EditCandidate]:
        """`--candidates k` through the engine: k requests sent at once (an engine that batches serves
        them together), candidate 1 with the try's own sampling, the others sampled as
        tries.candidate_sampling seeds them (`numbers`: which of them; default 1..k). The engine's
        log-probabilities are not asked for, so every candidate scores 0 and they are checked in their
        order, the try's own first."""
        from dataclasses import replace

        options = options or EditOptions()

        def one(number: int) -> EditCandidate:
            sampled = replace(options, sampling=candidate_sampling(number, options.sampling))
            try:
                return EditCandidate(self.edit(document, instruction, sampled, on_step), 0.0)
            except BudgetError as exc:
                return EditCandidate(None, 0.0, exc)

        return _together(one, numbers or range(1, k + 1))

    def edit_branches(
        self,
        document: Document,
        instruction: str,
        options: EditOptions | None,
        k: int,
        accept,
        on_step=None,
        factories=None,
    ) -> list[EditCandidate]:
        """pipeline.edit_branches through the engine: candidate 1 is the plain completion, asked with the
        top log-probabilities of each token (TOP_LOGPROBS); if accept(it) is false, k-1 branches are sent at once,
        each the answer up to one of the tokens where the model hesitated most (the smallest margins
        between its pick and its next choice) with the next choice in its place, completed with the
        try's own sampling; none that would write candidate 1 again or that an earlier try took
        (options.attempt.branched, hesitation_key each), as pipeline.branch_points leaves out locally. Each scores
        the engine's log-probability of its tokens, as locally. An engine that gives no log-probabilities
        gets sampled candidates 2..k instead (edit_candidates). Fenced modes only. Returns the candidates
        decoded: [candidate 1] when it was accepted. options.attempt.rejoin has no effect here: the engine
        completes each branch itself."""
        options = options or EditOptions()
        trace: list[Hesitation] = []
        first = self._candidate(document, instruction, options, trace=trace)
        if accept(first) or k == 1:
            return [first]
        if not trace:  # no log-probabilities from this engine
            return [first, *self.edit_candidates(document, instruction, options, k, on_step, range(2, k + 1))]
        points = hesitations(trace, k - 1, options.attempt.branched)
        made = _together(lambda point: self._candidate(document, instruction, options, forced=point), points)
        return [first, *(replace(c, branch=hesitation_key(p)) for c, p in zip(made, points))]

    def _candidate(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        forced: Hesitation | None = None,
        trace: list | None = None,
    ) -> EditCandidate:
        """One candidate with its log-probability: the plain answer (its tokens' hesitations into `trace`),
        or the branch `forced` completed."""
        logprob = [forced.logprob if forced else 0.0]
        try:
            result = self._edit(document, instruction, options, forced, trace, logprob)
        except BudgetError as exc:
            return EditCandidate(None, logprob[0], exc)
        return EditCandidate(result, logprob[0])

    def edit(
        self, document: Document, instruction: str, options: EditOptions | None = None, on_step=None, make_sampler=None
    ) -> EditResult:
        """The edit of `document` the engine's model writes; see the module docstring."""
        return self._edit(document, instruction, options or EditOptions())

    def _edit(
        self,
        document: Document,
        instruction: str,
        options: EditOptions,
        forced: Hesitation | None = None,
        trace: list | None = None,
        logprob: list | None = None,
    ) -> EditResult:
        """edit(); a fenced answer may start as `forced` spells it, and with `trace` or `logprob` its
        tokens' log-probabilities are asked for: hesitations added to trace, their sum to logprob[0]."""
        request = build_request(document, instruction, options)
        refuse_special_text(document, request)
        prompt = render_chatml(request.messages, request.opening)
        budget = options.max_new_tokens or default_budget(
            len(request.answer.encode()) // BYTES_PER_TOKEN + 1, bool(request.regions)
        )
        usage = Usage()
        try:
            if request.mode is Mode.PROGRAM:
                text = self._program(document, prompt, budget, options, usage)
            else:
                text = self._fenced(request, prompt, budget, options, usage, forced, trace, logprob)
        except BudgetError as exc:
            exc.engine = usage.to_json()  # the try's JSON still says what the engine did
            raise
        program, problem = read_answer(document, request.mode, text, request.fence, request.regions, request.headers)
        return EditResult(
            document,
            request.mode,
            program,
            text,
            resolve(program, document),
            usage.stats(),
            self.name,
            usage.first_prompt_tokens,
            problem,
            engine=usage.to_json(),
        )

    def _fenced(
        self,
        request: Request,
        prompt: str,
        budget: int,
        options: EditOptions,
        usage: Usage,
        forced: Hesitation | None = None,
        trace: list | None = None,
        logprob: list | None = None,
    ) -> str:
        """The fenced answer, one completion per region; the text as the local cursor spells it. A branch
        (`forced`) starts from its text, in the region that text ends in, its tokens counted."""
        end = "\n" + request.fence + "\n"
        text = forced.text if forced else ""
        spent = forced.tokens if forced else 0
        start = forced.region if forced else 0
        ask = TOP_LOGPROBS if trace is not None else 1 if logprob is not None else None
        for k in range(start, max(1, len(request.regions))):
            if k > start:
                text += request.headers[k - 1]  # forced, as the local cursor forces it
            left = budget - spent - usage.spent
            if left <= 0:
                raise _budget(budget)
            before = spent + usage.spent
            piece, reason, tokens = self.complete(
                prompt + text, left, options, usage, stop=(end, "<|im_end|>"), logprobs=ask
            )
            if tokens is not None:
                kept = _kept(tokens, piece)
                if trace is not None:
                    code = piece if _stopped_at_fence(piece, reason, end) else None
                    trace += _hesitations(kept, text, k, before, logprob[0] if logprob else 0.0, code)
                if logprob is not None:
                    logprob[0] += sum(lp for _, lp, _ in kept)
            if reason == "length":
                raise _budget(budget, text + piece)
            if not _stopped_at_fence(piece, reason, end):
                return text + piece  # the model ended its answer (EOS): no more segments, as locally
            text += piece + end
        return text

    def _program(self, document: Document, prompt: str, budget: int, options: EditOptions, usage: Usage) -> str:
        """A program under the file's grammar; after each copy its lines are spliced into the prompt."""
        if self.owner not in GRAMMAR_FIELDS:
            raise EngineError(
                f"--mode program needs an engine that takes a grammar per request (llama.cpp's "
                f"llama-server, llama-cpp-python's server, vLLM 0.12+ or SGLang); the engine at "
                f"{self.url} ({self.owner or 'unknown'}) is not known to",
                hint="use --mode verify with this engine",
            )
        written = P.OPEN  # the grammar forces it locally; here it is prefilled
        shown = prompt + P.OPEN
        low, has_op, in_body = 1, False, False
        while True:
            left = budget - usage.spent
            if left <= 0:
                raise _budget(budget)
            grammar = program_gbnf(document.n_lines, low, has_op, in_body)
            piece, reason, _ = self.complete(shown, left, options, usage, stop=(P.COPY_CLOSE,), grammar=grammar)
            if reason == "length":
                raise _budget(budget, written + piece)
            written, shown = written + piece, shown + piece
            if piece.rstrip().endswith(P.CLOSE) or not _stopped_at(reason, P.COPY_CLOSE):
                return written
            written, shown = written + P.COPY_CLOSE, shown + P.COPY_CLOSE
            copy, in_body = _last_copy(written)
            if copy is None and not in_body or copy is not None and copy[0] < low:
                raise _off_grammar(self.url, written, low)  # it would be asked the same again
            if copy is not None:
                start, end = copy
                shown += document.display_text(start, min(end, document.n_lines))
                low, has_op = end + 1, True


def counted_tokens(text: str, reported: int) -> int:
    """The tokens a completion counts against the budget: what the engine reports, but at least one per
    BYTES_PER_TOKEN_AT_MOST bytes of its text, and one; where it reports none, the budget's own estimate
    (BYTES_PER_TOKEN bytes a token)."""
    size = len(text.encode("utf-8", "replace"))
    if reported > 0:
        return max(reported, -(-size // BYTES_PER_TOKEN_AT_MOST))
    return max(1, -(-size // BYTES_PER_TOKEN))


def answer_limit(max_tokens: int, logprobs: int | None) -> int:
    """The most bytes a completion of max_tokens tokens is read to (its log-probabilities asked or not)."""
    return ANSWER_BYTES + max_tokens * (BYTES_PER_LOGPROB_TOKEN if logprobs is not None else BYTES_PER_ANSWER_TOKEN)


def grammar_field(owner: str, grammar: str) -> dict:
    """The request keys that give the engine `owner` (GET /models's owned_by) the grammar, as it documents
    them (GRAMMAR_FIELDS); an EngineError for an engine that takes none."""
    field_name = GRAMMAR_FIELDS.get(owner)
    if field_name is None:
        raise EngineError(
            f"the engine ({owner or 'unknown'}) takes no grammar that cadedit knows how to send",
            hint="use --mode verify with this engine",
        )
    return {field_name: {"grammar": grammar}} if field_name == "structured_outputs" else {field_name: grammar}


@dataclass(frozen=True)
class Hesitation:
    """Where an engine's answer hesitated: its text up to a token with the model's next choice in that
    token's place (a branch starts from it)."""

    text: str  # the answer up to the token, then the next choice
    region: int  # the scoped region (0 unscoped) whose completion the token is in
    tokens: int  # the answer's tokens through the next choice
    margin: float  # log p(the picked token) - log p(the next choice): the smaller, the nearer a tie
    logprob: float  # the log-probability of the answer up to the token, then of the next choice


def _kept(tokens: list, piece: str) -> list:
    """The tokens that spell the completion's text (an engine may list the stop string's tokens after
    it), up to the first whose text does not follow on (a character split between tokens)."""
    kept, at = [], 0
    for token in tokens:
        text = token[0]
        if not text or at >= len(piece) or not piece.startswith(text, at):
            break
        kept.append(token)
        at += len(text)
    return kept


def _hesitations(tokens: list, text: str, region: int, before: int, logprob: float, code: str | None = None) -> list:
    """Each token's next choice as a Hesitation of the answer `text` the tokens follow in `region`
    (`before` tokens and `logprob` in). A next choice that would write the answer again
    (fence.writes_again; `code`: the completion's text where the closing fence stopped it, so where the
    tokens spell all of it their code ends there) or that is control-token text is left out."""
    found, piece, at = [], "".join(t[0] for t in tokens), 0
    code_end = len(piece) if piece == code else -1
    for i, (picked, lp, top) in enumerate(tokens):
        others = [(v, t) for t, v in top.items() if t and "<|" not in t and not writes_again(t, piece, at, code_end)]
        if others:
            value, choice = max(others)
            found.append(Hesitation(text + choice, region, before + i + 1, lp - value, logprob + value))
        text, logprob, at = text + picked, logprob + lp, at + len(picked)
    return found


def hesitations(trace: list, n: int, taken: Collection[int] = ()) -> list:
    """The n hesitations with the smallest margins, one a branch's text, none an earlier try branched at
    from the same answer (`taken`: hesitation_key each)."""
    points, seen = [], set()
    for point in sorted(trace, key=lambda h: h.margin):
        if point.text not in seen and not (taken and hesitation_key(point) in taken):
            seen.add(point.text)
            points.append(point)
        if len(points) == n:
            break
    return points


def hesitation_key(point: Hesitation) -> int:
    """A branch point as a number, as pipeline.branch_key is locally: its region and text (never 0)."""
    digest = hashlib.blake2b(f"{point.region}\0{point.text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (1 << 61) or 1


def _together(one, items) -> list:
    """one(item) for every item, the requests sent at once (an engine that batches serves them together)."""
    from concurrent.futures import ThreadPoolExecutor

    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(len(items), thread_name_prefix="cadedit-engine") as pool:
        return list(pool.map(one, items))


def refuse_special_text(document: Document, request: Request) -> None:
    """An engine reads control-token text in the prompt as the control token; a file holding one is refused."""
    texts = [m["content"] for m in request.messages] + [request.opening]
    for special in SPECIAL_TEXTS:
        if any(special in text for text in texts):
            raise EngineError(
                f"{document.path}: contains the text {special}, which an engine would read as a control token",
                hint="edit this file without --engine (the local model keeps it text)",
            )


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
    tail = written[at + len(P.GEN_CLOSE) :] if at >= 0 else written[len(P.OPEN) :]
    if tail[_COPIES.match(tail).end() :].startswith(P.GEN_OPEN):
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
    return (
        "\n".join(
            line
            for line in (
                root,
                op,
                copy,
                'gen ::= "<gen>\\n" body "</gen>\\n"',
                'body ::= ([^<] | "<" [^/])*',
                'close ::= "</program>" "\\n"?',
            )
            if line
        )
        + "\n"
    )


# -- errors ----------------------------------------------------------------------------------------


def _off_grammar(url: str, written: str, low: int) -> EngineError:
    """An engine that wrote what the program grammar it was sent forbids, at a copy's close."""
    last = written.rstrip("\n").rpartition("\n")[2]
    return EngineError(
        f"the engine at {url} does not keep to the program grammar it was sent: it wrote {last!r} "
        f"where a copy must start at line {low} or later",
        hint="use --mode verify with this engine",
    )


def _budget(budget: int, text: str = "") -> BudgetError:
    """The budget spent; `text`: the answer so far, whose end the message shows as a local edit's does."""
    return BudgetError(
        f"the engine used the budget of {budget} new tokens before the answer was complete"
        + (f" (last text: {text[-60:]!r})" if text else ""),
        hint="raise --max-new-tokens",
    )
