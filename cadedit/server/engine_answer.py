"""What an OpenAI-compatible engine answers, checked in one place: a completion (its text, why it
stopped, its tokens' log-probabilities, the usage it reports) or a model list.

Contract: read_completion(answer, where) and read_models(answer, where) take the parsed JSON of an
answer (engine_http.call_json) and return frozen records whose every field has its type and range. An
engine is outside the user's control, so an answer of another shape (a count that is "many", 1e400 or
NaN, usage that is a string, a text that is a list) is an EngineError of one line naming the engine,
"answered something that is not a completion", never an exception further on. Standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from cadedit.server.engine_http import short
from cadedit.errors import EngineError

MAX_COUNT = 2**53  # a token count past this is no engine's (and would not survive a JSON reader as an int)
_HINT = "is the URL the engine's OpenAI-compatible base (…/v1)?"


@dataclass(frozen=True)
class Counts:
    """The tokens an engine reports for one completion (0 where it reports none)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0  # prompt tokens it had cached (usage.prompt_tokens_details.cached_tokens)
    drafted: int = 0  # speculative tokens proposed (llama-server's timings.draft_n)
    draft_accepted: int = 0


@dataclass(frozen=True)
class Completion:
    text: str
    reason: str  # finish_reason ("stop", "length", ...); "stop:<s>" where the engine names the stop string s
    tokens: list | None  # (text, log-probability, {text: log-probability} of the top ones) per token, or None
    counts: Counts
    reported: dict  # its usage and timings as the engine gave them, numbers and text only (for --json)


class _Shape(Exception):
    """A field of the answer that is not what a completion holds (its message says which)."""


def read_completion(answer, where: str) -> Completion:
    """The completion in an answer to POST /completions; an EngineError if it is none."""
    try:
        choices = _field(answer, "choices", list, "")
        if not choices or not isinstance(choices[0], dict):
            raise _Shape("choices holds no completion")
        choice = choices[0]
        text = _field(choice, "text", str, "choices[0]")
        reason = _field(choice, "finish_reason", str, "choices[0]", default="")
        matched = choice.get("stop_reason", choice.get("matched_stop"))  # vLLM's name for it, SGLang's
        if isinstance(matched, str):
            reason = "stop:" + matched  # the stop string that matched (an end-of-text token is a number)
        counts, reported = _counts(answer)
    except _Shape as exc:
        raise EngineError(
            f"{where} answered something that is not a completion ({exc}: {short(answer)})", hint=_HINT
        ) from None
    return Completion(text, reason, token_logprobs(choice), counts, reported)


def read_models(answer, where: str) -> list[tuple[str, str]]:
    """The (id, owned_by) of each model an answer to GET /models lists; an EngineError if none."""
    data = answer.get("data") if isinstance(answer, dict) else None
    models = [
        (m["id"], m.get("owned_by") if isinstance(m.get("owned_by"), str) else "")
        for m in (data if isinstance(data, list) else [])
        if isinstance(m, dict) and isinstance(m.get("id"), str)
    ]
    if not models:
        raise EngineError(f"{where} lists no model (GET /models answered {short(answer)})", hint=_HINT)
    return models


def _counts(answer: dict) -> tuple[Counts, dict]:
    usage = _field(answer, "usage", dict, "", default={})
    timings = _field(answer, "timings", dict, "", default={})
    details = _field(usage, "prompt_tokens_details", dict, "usage", default={})
    counts = Counts(
        _count(usage, "prompt_tokens", "usage"),
        _count(usage, "completion_tokens", "usage"),
        _count(details, "cached_tokens", "usage.prompt_tokens_details"),
        _count(timings, "draft_n", "timings"),
        _count(timings, "draft_n_accepted", "timings"),
    )
    reported = {name: _plain(answer[name]) for name in ("usage", "timings") if answer.get(name) is not None}
    return counts, reported


def _field(parent, name: str, kind: type, where: str, default=None):
    """parent[name] if it is a `kind`; `default` where it is missing or null (if one is given)."""
    if not isinstance(parent, dict):
        raise _Shape(f"{where or 'the answer'} is not an object")
    value = parent.get(name)
    if value is None and default is not None:
        return default
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _Shape(f"{where + '.' if where else ''}{name} is {_kind(value)}, not {kind.__name__}")
    return value


def _count(parent: dict, name: str, where: str) -> int:
    """A token count: a whole number from 0 to MAX_COUNT (an integral float is taken), 0 where missing."""
    value = parent.get(name)
    if value is None:
        return 0
    whole = isinstance(value, int) or isinstance(value, float) and math.isfinite(value) and value.is_integer()
    if isinstance(value, bool) or not whole or not 0 <= value <= MAX_COUNT:
        shown = short(json.dumps(value) if isinstance(value, str) else value, 40)
        raise _Shape(f"{where}.{name} is {shown}, not a count of tokens")
    return int(value)


def _kind(value) -> str:
    return "missing" if value is None else type(value).__name__ if not isinstance(value, str) else "text"


def _plain(value, depth: int = 2):
    """A reported field kept for --json: numbers (finite), text, true/false, and objects of them two deep."""
    if isinstance(value, dict) and depth:
        kept = {str(k): _plain(v, depth - 1) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None}
    if isinstance(value, (str, bool, int)) or isinstance(value, float) and math.isfinite(value):
        return value
    return None


def token_logprobs(choice: dict) -> list | None:
    """A completion's tokens as (text, log-probability, {text: log-probability} of the top ones), from
    the legacy completions form (tokens, token_logprobs, top_logprobs: llama-cpp-python, vLLM) or the
    chat form (content: token, logprob, top_logprobs: llama-server); None where the engine gave none, or
    gave them in another shape (a text that is no text, a log-probability that is no finite number)."""
    found = choice.get("logprobs")
    try:
        if isinstance(found, dict) and isinstance(found.get("tokens"), list):
            tops = found.get("top_logprobs") or [None] * len(found["tokens"])
            return [
                (_text(text), _logprob(lp), {_text(t): _logprob(v) for t, v in (top or {}).items()})
                for text, lp, top in zip(found["tokens"], found["token_logprobs"], tops)
            ]
        if isinstance(found, dict) and isinstance(found.get("content"), list):
            return [
                (
                    _text(c["token"]),
                    _logprob(c["logprob"]),
                    {_text(a["token"]): _logprob(a["logprob"]) for a in c.get("top_logprobs") or ()},
                )
                for c in found["content"]
            ]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError
    return value


def _logprob(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError
    return float(value)
