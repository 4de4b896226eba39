"""One JSON request to an OpenAI-compatible engine, as a hostile or broken engine may answer it.

Contract: call_json(url, method, path, body, key, timeout) sends `body` (JSON; None for a GET) to
url + path with the key as a Bearer header and returns the answer's JSON. No redirect is followed: the
key would go along to wherever it points (urllib keeps the Authorization header across hosts), so a
redirect is a one-line error naming its target. Every failure (no engine, a timeout, an HTTP error, a
closed connection, an answer that is not JSON) is an EngineError of one line naming the engine.
Standard library only.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request

from cadedit.errors import EngineError

ERROR_BODY_BYTES = 64 * 1024  # what an HTTP error's body is read for its message: the message's first line is shown


class _Redirected(Exception):
    """The engine answered with a redirect (which is not followed)."""

    def __init__(self, code: int, target: str):
        super().__init__(target)
        self.code, self.target = code, target


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        fp.close()
        raise _Redirected(code, newurl)


def call_json(url: str, method: str, path: str, body: dict | None, key: str | None, timeout: float):
    """One HTTP request to url + path and its JSON answer; every failure an EngineError."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    where = f"the engine at {url}"
    opener = urllib.request.build_opener(_RefuseRedirects)
    try:
        with opener.open(request, timeout=timeout) as response:
            raw = response.read()
    except _Redirected as exc:
        raise EngineError(f"{where} redirected {method} {path} (HTTP {exc.code}) to {short(exc.target)}; cadedit "
                          "does not follow an engine's redirects (its key would go along)",
                          hint="if you trust that address, give it as --engine") from None
    except urllib.error.HTTPError as exc:
        raise http_error(exc, where + path) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise slow(where, timeout) from None
        raise EngineError(f"no engine answers at {url} ({getattr(reason, 'strerror', None) or reason})",
                          hint="start the engine, or check --engine / CADEDIT_ENGINE") from None
    except (TimeoutError, socket.timeout):
        raise slow(where, timeout) from None
    except (http.client.HTTPException, ConnectionError) as exc:
        raise EngineError(f"{where} closed the connection mid-answer ({type(exc).__name__})",
                          hint="see the engine's log; then retry") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise EngineError(f"{where} answered {path} with something that is not JSON ({short(raw)})",
                          hint="is the URL the engine's OpenAI-compatible base (…/v1)?") from None


def short(value, limit: int = 120) -> str:
    """A value (bytes, text or JSON) as at most `limit` characters of one line."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else json.dumps(value) if not isinstance(
        value, str) else value
    text = " ".join(text.split())
    return (text[:limit] + "…") if len(text) > limit else (text or "nothing")


def slow(where: str, timeout: float) -> EngineError:
    return EngineError(f"{where} did not answer within {timeout:g} s",
                       hint="raise --engine-timeout (or engine_timeout in .cadedit.toml), or check the engine's load")


def http_error(exc: urllib.error.HTTPError, where: str) -> EngineError:
    """An HTTP error as one line: the status and the engine's own message."""
    try:
        body = exc.read(ERROR_BODY_BYTES)
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
    return EngineError(f"{where} answered HTTP {exc.code} ({short(message)})", hint=hint)
