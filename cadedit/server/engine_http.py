"""One JSON request to an OpenAI-compatible engine, as a hostile or broken engine may answer it.

Contract: call_json(url, method, path, body, authorization, timeout, limit) sends `body` (JSON; None
for a GET) to url + path with that Authorization header (credentials() makes it: the URL's own
`user:password@` as HTTP basic auth, else the key as a Bearer token) and returns the answer's JSON;
the URL it is given holds no credentials (without_credentials), so no message can show them. Every
read is bounded:
- where: no redirect is followed (urllib keeps the Authorization header across hosts, so the key
  would go along); a redirect is a one-line error naming its target;
- time: `timeout` bounds the whole request (connect, sending, the headers, every read of the
  answer), not each read, so an engine or proxy that sends a byte now and then is cut off;
- size: an answer over `limit` bytes is refused, by its Content-Length before a byte is read, else
  once that much has come; an HTTP error's body is read to ERROR_BODY_BYTES;
- depth: JSON nested past Python's recursion limit (about 1,000) is refused as json reads it.
Every failure (no engine, a timeout, an HTTP error, a closed connection, an answer that is not JSON)
is an EngineError of one line naming the engine. Standard library only.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from cadedit.errors import EngineError

ERROR_BODY_BYTES = 64 * 1024  # what an HTTP error's body is read for its message: the message's first line is shown
_CHUNK = 1 << 16


class _Redirected(Exception):
    """The engine answered with a redirect (which is not followed)."""

    def __init__(self, method: str, code: int, target: str):
        super().__init__(target)
        self.method, self.code, self.target = method, code, target


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        fp.close()
        raise _Redirected(req.get_method(), code, newurl)


class _Deadline:
    """One request's total time. A socket read has its own timeout only, so a watchdog shuts the
    request's sockets down at the deadline: a read blocked then returns at once."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    def left(self) -> float:
        return max(0.001, self.end - time.monotonic())

    def track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed: the request is over
        pass


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """urllib with the environment's proxies, no redirects, and connections whose sockets the deadline
    tracks: the plain socket from its creation (a proxy's tunnel, the TLS handshake), then the TLS one
    that takes its place; each connect is given the time left."""

    def timed(base):
        class Connection(base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                create = self._create_connection
                self._create_connection = lambda *a, **k: deadline.track(create(*a, **k))

            def connect(self):
                self.timeout = deadline.left()
                super().connect()
                deadline.track(self.sock)

        return Connection

    plain, secure = timed(http.client.HTTPConnection), timed(http.client.HTTPSConnection)

    class Plain(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(plain, req)

    class Secure(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(secure, req, context=self._context)

    return urllib.request.build_opener(Plain, Secure, _RefuseRedirects)


def without_credentials(url: str) -> str:
    """The URL without the `user:password@` of its authority (`http://gpu-box:8000/v1`), for the wire
    and for every message; the URL itself when it has none."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def credentials(url: str, key: str | None) -> str | None:
    """The Authorization header for an engine URL: HTTP basic auth from its `user:password@`
    (percent-decoded, as RFC 3986 writes them), else `Bearer KEY`, else None. With both, the URL's:
    one header holds one of them, and the URL names this engine where a key in the environment may
    be meant for another."""
    netloc = urllib.parse.urlsplit(url).netloc
    if "@" in netloc:
        user, _, password = netloc.rpartition("@")[0].partition(":")
        pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        return "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return f"Bearer {key}" if key else None


def call_json(
    url: str,
    method: str,
    path: str,
    body: dict | None,
    authorization: str | None,
    timeout: float,
    limit: int,
    what: str = "an engine's answer",
):
    """One HTTP request to url + path and its JSON answer (at most `limit` bytes, nested no deeper than
    Python's recursion limit lets json read: about 1,000); every failure an EngineError. `what` the
    answer should be, for the message when it is nested deeper."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    where = f"the engine at {url}"
    with _Deadline(timeout) as deadline:
        try:
            raw = _answer(_opener(deadline), request, deadline, where + path, limit)
        except (_Redirected, http.client.HTTPException, OSError) as exc:  # URLError and timeouts are OSErrors
            if deadline.expired:
                raise slow(where, timeout) from None
            raise _failure(exc, url, where, path, timeout) from None
    try:
        return json.loads(raw)
    except ValueError:
        raise EngineError(
            f"{where} answered {path} with something that is not JSON ({short(raw)})",
            hint="is the URL the engine's OpenAI-compatible base (…/v1)?",
        ) from None
    except RecursionError:
        raise EngineError(
            f"{where} answered something that is not {what} (JSON nested too deep: {short(raw)})",
            hint="is the URL the engine's OpenAI-compatible base (…/v1)?",
        ) from None


def _answer(opener, request, deadline: _Deadline, where: str, limit: int) -> bytes:
    """The answer's body, read before the deadline (a read the watchdog cut short ends the body early)."""
    try:
        with opener.open(request, timeout=deadline.left()) as response:
            raw = _body(response, where, limit)
    except urllib.error.HTTPError as exc:
        raise http_error(exc, where) from None  # its body read inside the deadline too
    if deadline.expired:
        raise TimeoutError
    return raw


def _body(response: http.client.HTTPResponse, where: str, limit: int) -> bytes:
    """The body, refused past `limit` bytes: by its Content-Length before a byte is read, else as it comes."""
    declared = response.headers.get("Content-Length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        raise _too_large(where, limit, int(declared))
    chunks, size = [], 0
    while chunk := response.read(min(_CHUNK, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large(where, limit)
    if response.length:  # the connection closed before the declared length came
        raise http.client.IncompleteRead(b"".join(chunks), response.length)
    return b"".join(chunks)


def _too_large(where: str, limit: int, declared: int | None = None) -> EngineError:
    said = f"{declared:,} bytes, more than the {limit:,}" if declared else f"more than the {limit:,} bytes"
    return EngineError(
        f"{where} answered {said} that this request's answer can need; cadedit read no further",
        hint="is the URL the engine's OpenAI-compatible base (…/v1)?",
    )


def _failure(exc: Exception, url: str, where: str, path: str, timeout: float) -> EngineError:
    """A failed request as one line."""
    if isinstance(exc, _Redirected):
        return EngineError(
            f"{where} redirected {exc.method} {path} (HTTP {exc.code}) to {short(exc.target)}; "
            "cadedit does not follow an engine's redirects (its key would go along)",
            hint="if you trust that address, give it as --engine",
        )
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, (TimeoutError, socket.timeout)):
        reason = exc.reason
        return EngineError(
            f"no engine answers at {url} ({getattr(reason, 'strerror', None) or reason})",
            hint="start the engine, or check --engine / CADEDIT_ENGINE",
        )
    if isinstance(exc, (urllib.error.URLError, TimeoutError, socket.timeout)):
        return slow(where, timeout)
    return EngineError(
        f"{where} closed the connection mid-answer ({type(exc).__name__})", hint="see the engine's log; then retry"
    )


def short(value, limit: int = 120) -> str:
    """A value (bytes, text or parsed JSON, however deep) as at most `limit` characters of one line."""
    if isinstance(value, bytes):
        text = value[: limit * 4].decode("utf-8", "replace")
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value)
        except (ValueError, TypeError, RecursionError):  # nested deeper than json writes
            text = f"a {type(value).__name__} nested too deep to show"
    text = " ".join(text[: limit * 4].split())
    return (text[:limit] + "…") if len(text) > limit else (text or "nothing")


def slow(where: str, timeout: float) -> EngineError:
    return EngineError(
        f"{where} did not answer within {timeout:g} s",
        hint="raise --engine-timeout (or engine_timeout in .cadedit.toml), or check the engine's load",
    )


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
    except (ValueError, RecursionError):
        message = body
    hint = {
        401: "set the engine's API key in CADEDIT_ENGINE_KEY (or OPENAI_API_KEY)",
        403: "set the engine's API key in CADEDIT_ENGINE_KEY (or OPENAI_API_KEY)",
        404: "give the engine's OpenAI-compatible base URL, ending in /v1",
    }.get(exc.code, "see the engine's log")
    return EngineError(f"{where} answered HTTP {exc.code} ({short(message)})", hint=hint)
