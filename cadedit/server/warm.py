"""A warm local server: one process keeps the model, and the KV cache of its last prompt, loaded.

Contract: serve(socket_path, loaded, idle_timeout, max_rss_bytes) answers newline-delimited JSON on a
Unix socket (mode 0600, a pid file beside it), one decode at a time so two clients never share the
one KV cache mid-decode. A branched request lets go of the model while its client checks candidate 1
(its test may run for minutes; other edits are served meanwhile) and waits for the answer at most
answer_timeout seconds; its branches then feed whatever of candidate 1's prompt the cache lost. An
edit waits for the model at most as long as its client asked ("wait"), then is refused as busy.
connect(model_spec) returns a ServerClient whose edit() gives the EditResult edit_file would (device,
dtype and threads are the server's), and raises the server's CadeditError as the same class, message,
hint and exit code; None when no server holds that model, or when it stays busy with another edit
longer than the client waits (SERVER_BUSY_WAIT: the client then loads the model itself). Importing this
module imports neither torch nor transformers (serve() and run_server() import them).

Why: a cold `cadedit fix` pays for imports, weights and the prompt before its first token; a warm
server pays them once, and a second request with the same prompt prefix reuses its KV cache
(docs/measurements/design-figures.md). The client imports no torch: what it builds (cadedit.results) is torch-free.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import select
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cadedit.errors import CadeditError
from cadedit.results import Editor
from cadedit.settings import IDLE_TIMEOUT, SERVER_ANSWER_TIMEOUT, SERVER_BUSY_WAIT, not_own
from cadedit import errors
from cadedit.text.document import Document
from cadedit.text.visible import visible
from cadedit.options import EditOptions, Mode, Sampling, TryState
from cadedit.text.program import format as format_program, parse
from cadedit.results import DecodeStats, EditCandidate, EditResult, Step
from cadedit.settings import choose_model
from cadedit.spawn import python_code

PROTOCOL = 1
REQUEST_TIMEOUT = 10.0  # seconds a client has to send its request line once connected
RUNTIME_ENV = "CADEDIT_RUNTIME_DIR"  # where the socket, pid file and log live (tests point it at tmp)
CACHE_ROOM = 1 << 30  # default memory bound: own memory after loading plus this (0.5B fp32: ~40k cached tokens)
START_TIMEOUT = 300.0  # a GGUF is converted on first load: about a minute for 0.5B
_POLL = 0.2  # seconds between checks for stop and idleness in the accept loop
_PROGRESS_EVERY = 0.1  # seconds between progress messages to a client that asked for them


class ServerError(CadeditError):
    """The warm server cannot be started, reached or used (already running, died, refused a request)."""


# -- where ------------------------------------------------------------------------------------


def runtime_dir() -> Path:
    """$CADEDIT_RUNTIME_DIR, else $XDG_RUNTIME_DIR/cadedit, else ~/.cache/cadedit/run: one per user.
    A relative CADEDIT_RUNTIME_DIR is refused: the server runs from / and the clients from anywhere."""
    if os.environ.get(RUNTIME_ENV):
        path = Path(os.environ[RUNTIME_ENV])
        if not path.is_absolute():
            raise ServerError(
                f"{RUNTIME_ENV}={os.environ[RUNTIME_ENV]} is not an absolute path",
                hint=f"set {RUNTIME_ENV} to an absolute folder, or unset it",
            )
        return path
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "cadedit"
    return Path.home() / ".cache" / "cadedit" / "run"


def default_socket() -> Path:
    return runtime_dir() / "server.sock"


def own_folder(folder: Path, create: bool) -> Path:
    """The runtime folder, if it is this user's own: a real folder (not a link), owned by them, mode 0700.
    Anything else (a shared XDG_RUNTIME_DIR, a folder another user made) is refused: its socket could
    be someone else's server, its log and pid file links to the user's files."""
    if create:
        with contextlib.suppress(FileExistsError):
            folder.mkdir(parents=True, mode=0o700)
    try:
        st = folder.lstat()
    except FileNotFoundError:
        return folder
    if not stat.S_ISDIR(st.st_mode) or not_own(folder, private=True) is not None:
        raise ServerError(
            f"{folder}: not a private folder of this user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}); the cadedit server does not use it",
            hint=f"use a folder of yours: {RUNTIME_ENV}=/path/to/private/folder",
        )
    return folder


def _open_private(path: Path, flags: int) -> int:
    """A file in the runtime folder, never through a link."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def pid_file(socket_path: Path) -> Path:
    return socket_path.with_suffix(".pid")


def log_file(socket_path: Path) -> Path:
    return socket_path.with_suffix(".log")


def resolve_spec(spec: str) -> str:
    """A model spec as both sides compare it: an existing path made absolute, a hub id as it is."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


# -- the wire: one JSON object per line -------------------------------------------------------


def _send(stream, message: dict) -> None:
    stream.write(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")
    stream.flush()


def _receive(stream) -> dict | None:
    line = stream.readline()
    try:
        return json.loads(line) if line else None
    except RecursionError:  # nested deeper than the parser goes: malformed, as every caller takes it
        raise ValueError("a message nested too deeply") from None


def options_to_wire(options) -> dict:
    data = dataclasses.asdict(options)
    data["mode"] = options.mode.value if hasattr(options.mode, "value") else str(options.mode)
    return data


def options_from_wire(data: dict):

    unknown = set(data) - {f.name for f in dataclasses.fields(EditOptions)}
    if unknown:
        raise ServerError(
            f"the server does not know the option(s) {', '.join(sorted(unknown))}",
            hint="it runs older code: cadedit serve stop, then start it again",
        )
    return EditOptions(
        **{
            **data,
            "sampling": Sampling(**data["sampling"]),
            "mode": Mode(data["mode"]),
            "regions": tuple(tuple(r) for r in data["regions"]),
            "wider": tuple(tuple(tuple(r) for r in level) for level in data.get("wider", ())),
            "referenced": tuple(data["referenced"]),
            "attempt": _attempt_from_wire(data.get("attempt", {})),
        }
    )


def _attempt_from_wire(data: dict):
    return TryState(
        **{
            **data,
            "expected": tuple(tuple(e) for e in data.get("expected", ())),
            "branched": tuple(data.get("branched", ())),
        }
    )


def result_to_wire(result) -> dict:

    return {
        "mode": result.mode.value,
        "program": format_program(result.program),
        "program_text": result.program_text,
        "new_text": result.new_text,
        "stats": dataclasses.asdict(result.stats),
        "model": result.model,
        "prompt_tokens": result.prompt_tokens,
        "placement": result.placement,
    }


def candidate_to_wire(candidate) -> dict:
    """An EditCandidate: its edit or its error, and its log-probability."""
    return {
        "result": result_to_wire(candidate.result) if candidate.result else None,
        "logprob": candidate.logprob,
        "error": error_to_wire(candidate.error) if isinstance(candidate.error, CadeditError) else None,
        "branch": candidate.branch,
    }


def candidate_from_wire(data: dict, document):

    return EditCandidate(
        result_from_wire(data["result"], document) if data["result"] else None,
        data["logprob"],
        error_from_wire(data["error"]) if data["error"] else None,
        data.get("branch", 0),
    )


def result_from_wire(data: dict, document):

    return EditResult(
        document,
        Mode(data["mode"]),
        parse(data["program"]),
        data["program_text"],
        data["new_text"],
        DecodeStats(**data["stats"]),
        data["model"],
        data["prompt_tokens"],
        data.get("placement", ""),
    )


def error_to_wire(exc: CadeditError) -> dict:
    return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}


def error_from_wire(data: dict) -> CadeditError:
    """The server's error as the same class (any CadeditError of cadedit.errors, or ServerError)."""

    cls = getattr(errors, data.get("type", ""), None) or {"ServerError": ServerError}.get(data.get("type"))
    if not (isinstance(cls, type) and issubclass(cls, CadeditError)):
        cls = CadeditError
    exc = cls(data["message"], hint=data.get("hint"))
    if data.get("exit_code") != cls.exit_code:
        exc.exit_code = int(data.get("exit_code") or 1)
    return exc


# -- the client -------------------------------------------------------------------------------


class ServerClient(Editor):
    """A running server as a results.Editor (edit_file and its candidates run there; scripted samplers
    do not travel, so make_sampler and factories are not used), with name, dtype, threads and load_seconds
    (0.0: already loaded) as a LoadedModel has them."""

    loaded = None  # the model is in the server's process: no where-step here
    shared_engine = False

    def __init__(self, socket_path: Path, status: dict):
        self.socket_path = socket_path
        self.name: str = status["model"]
        self.dtype: str = status["dtype"]  # "torch.float32": prints like a torch.dtype
        self.threads: int = status["threads"]
        self.pid: int = status["pid"]
        self.load_seconds = 0.0

    @classmethod
    def open(cls, socket_path: Path | None = None, timeout: float = 5.0) -> ServerClient:
        """The server on socket_path (default: the user's); a ServerError if none answers."""
        path = socket_path or default_socket()
        return cls(path, _ask(path, {"op": "status"}, timeout))

    def status(self) -> dict:
        return _ask(self.socket_path, {"op": "status"}, 5.0)

    def stop(self) -> dict:
        return _ask(self.socket_path, {"op": "stop"}, 5.0)

    def edit(self, document, instruction: str, options=None, on_step: Callable | None = None, make_sampler=None):
        """edit_file(document, instruction, options) run by the server; the same EditResult, or its error."""
        return result_from_wire(self._edit(document, instruction, options, on_step, 1), document)

    def edit_candidates(
        self, document, instruction: str, options=None, k: int = 2, on_step: Callable | None = None, factories=None
    ):
        """pipeline.edit_candidates with `--candidates k`'s samplers, run by the server: k EditCandidates."""
        answer = self._edit(document, instruction, options, on_step, k)
        if "candidates" not in answer:
            raise ServerError(
                "the cadedit server does not decode candidates side by side",
                hint="it runs older code: cadedit serve stop, then start it again",
            )
        return [candidate_from_wire(c, document) for c in answer["candidates"]]

    def edit_branches(
        self,
        document,
        instruction: str,
        options,
        k: int,
        accept: Callable,
        on_step: Callable | None = None,
        factories=None,
    ):
        """pipeline.edit_branches run by the server: it sends candidate 1, accept(candidate 1) is asked
        here (where the user's test runs) and answered; if false, the server decodes the k-1 branches
        from its own cache. Returns the candidates decoded, as edit_branches does."""
        asked = []

        def reply(message: dict) -> dict:
            asked.append(candidate_from_wire(message["first"], document))
            return {"accept": bool(accept(asked[0]))}

        answer = self._edit(document, instruction, options, on_step, k, by="branch", reply=reply)
        if "candidates" not in answer:
            raise ServerError(
                "the cadedit server does not decode candidates side by side",
                hint="it runs older code: cadedit serve stop, then start it again",
            )
        found = [candidate_from_wire(c, document) for c in answer["candidates"]]
        if not asked and found:  # a server that samples its candidates instead: candidate 1 is checked first still
            accept(found[0])
        return found

    def _edit(
        self,
        document,
        instruction: str,
        options,
        on_step: Callable | None,
        k: int,
        by: str = "sample",
        reply: Callable | None = None,
    ) -> dict:

        options = options or EditOptions()
        # The model resolved here, where the user's cwd and settings are; the server refuses another one.
        options = dataclasses.replace(options, model=resolve_spec(choose_model(options.model)))
        request = {
            "op": "edit",
            "path": document.path,
            "document": base64.b64encode(document.to_bytes()).decode(),
            "instruction": instruction,
            "options": options_to_wire(options),
            "progress": on_step is not None,
            "candidates": k,
            "by": by,
            "wait": SERVER_BUSY_WAIT,
        }
        for message in _exchange(self.socket_path, request, None, reply):
            if "progress" in message and on_step is not None:
                on_step(DecodeStats(**message["progress"]["stats"]), Step(**message["progress"]["step"]))
            elif "result" in message:
                return message["result"]
        raise ServerError(
            f"the cadedit server (pid {self.pid}) closed the connection during the edit",
            hint=f"see its log, {log_file(self.socket_path)}; then retry",
        )


def connect(
    model_spec: str | None = None,
    socket_path: Path | None = None,
    wait: float = SERVER_BUSY_WAIT,
    on_busy: Callable[[str], None] | None = None,
) -> ServerClient | None:
    """A client of the running server if it holds the model choose_model(model_spec) names and is free
    within `wait` seconds, else None. While it is busy with another edit, on_busy(message) says so."""

    wanted = resolve_spec(choose_model(model_spec))
    try:
        client = ServerClient.open(socket_path, timeout=2.0)
        if resolve_spec(client.name) != wanted:
            return None
        return client if _free(client, client.status(), wait, on_busy) else None
    except ServerError:
        return None


def _free(client: ServerClient, status: dict, wait: float, on_busy: Callable[[str], None] | None) -> bool:
    """Whether the server is free for an edit, waiting up to `wait` seconds while another edit holds it."""
    if not status.get("busy"):
        return True
    tell = on_busy or (lambda message: None)
    tell(
        f"the cadedit server (pid {client.pid}) is busy with another edit (for {status.get('busy_seconds', 0):.0f} s"
        f" so far); waiting up to {wait:g} s for it"
    )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if not client.status().get("busy"):
            return True
    tell(f"the cadedit server is still busy after {wait:g} s: loading the model here")
    return False


def _ask(path: Path, request: dict, timeout: float | None) -> dict:
    """One request, its one answer."""
    for message in _exchange(path, request, timeout):
        return message
    raise ServerError(
        f"the cadedit server on {path} closed the connection without answering", hint=f"see its log, {log_file(path)}"
    )


def _exchange(path: Path, request: dict, timeout: float | None, reply: Callable | None = None) -> Iterator[dict]:
    """Send a request; yield the answers (progress, then a result); an error answer is raised. A question
    from the server (a "first" candidate to accept or not) is answered with reply(message)."""
    own_folder(path.parent, create=False)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise ServerError(
                f"no cadedit server answers on {path} ({exc.strerror or exc})", hint="start one: cadedit serve start"
            ) from None
        _check_peer(sock, path)
        stream = sock.makefile("rwb")
        _send(stream, request)
        while (message := _receive_from_server(stream, path)) is not None:
            if "error" in message:
                raise error_from_wire(message["error"])
            if "first" in message:
                if reply is None:
                    raise ServerError(
                        "the cadedit server asked a question this request did not expect",
                        hint="use a client of the same cadedit version",
                    )
                with contextlib.suppress(OSError):  # it stopped waiting: its error is the next message
                    _send(stream, reply(message))
                continue
            yield message
            if "progress" not in message:
                return
    except (TimeoutError, socket.timeout):
        raise ServerError(
            f"the cadedit server on {path} did not answer within {timeout:.0f} s",
            hint="it may be stuck: cadedit serve stop, or kill the pid in " + str(pid_file(path)),
        ) from None
    finally:
        sock.close()


def _receive_from_server(stream, path: Path) -> dict | None:
    try:
        return _receive(stream)
    except ConnectionError:
        raise ServerError(
            f"the cadedit server on {path} closed the connection during the edit",
            hint=f"see its log, {log_file(path)}; then retry",
        ) from None


def _check_peer(sock: socket.socket, path: Path) -> None:
    """The process on the other end must run as this user (SO_PEERCRED, Linux): another user's server
    would see the file and could answer anything."""
    if not hasattr(socket, "SO_PEERCRED"):
        return
    import struct

    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():
        raise ServerError(
            f"the server on {path} runs as another user (uid {uid}, pid {pid}); cadedit does not use it",
            hint=f"set {RUNTIME_ENV} to a private folder of yours",
        )


# -- the server -------------------------------------------------------------------------------


_CLAIMS: dict[Path, int] = {}  # the pid files this process holds locked (one server per socket)


def claim(socket_path: Path) -> None:
    """Take the socket's pid file lock (held until exit); remove a stale socket; ServerError if it runs."""
    import fcntl

    own_folder(socket_path.parent, create=True)
    fd = _open_private(pid_file(socket_path), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ServerError(
            f"a cadedit server is already running (pid {holder}, socket {socket_path})",
            hint="use it, or stop it first: cadedit serve stop",
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()  # no process holds the lock, so nothing listens: a stale socket
    _CLAIMS[socket_path] = fd


def release(socket_path: Path) -> None:
    fd = _CLAIMS.pop(socket_path, None)
    if fd is not None:
        for path in (socket_path, pid_file(socket_path)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        os.close(fd)


def running_pid(socket_path: Path) -> int | None:
    """The pid holding the socket's lock, or None (no server, or a stale pid file)."""
    import fcntl

    try:
        fd = _open_private(pid_file(socket_path), os.O_RDONLY)
    except (FileNotFoundError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except OSError:
        text = os.read(fd, 32).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)


def _status_bytes() -> dict[str, int]:
    """The memory fields of /proc/self/status in bytes (Linux), else {}."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    return {
        name: int(rest.split()[0]) * 1024
        for name, _, rest in (line.partition(":") for line in lines)
        if name.startswith(("Vm", "Rss")) and rest.split() and rest.split()[0].isdigit()
    }


def rss_bytes() -> int:
    """This process's own resident memory now: heap, KV cache, int8 copies (Linux RssAnon). The
    weight files it maps are not counted: those pages are the page cache's, shared with every other
    cadedit process, and the kernel can drop them. Elsewhere: the peak resident size (getrusage)."""
    return _own_bytes(_status_bytes())


def _own_bytes(fields: dict[str, int]) -> int:
    own = fields.get("RssAnon", fields.get("VmRSS"))
    if own is not None:
        return own
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _log(message: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} cadedit server: {visible(message)}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def _cut_off_after(conn: socket.socket, seconds: float):
    """The connection shut down once the block has taken `seconds` in all (a socket's own timeout is per
    read); yields an Event set if it was."""
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()


class _ClientGone(Exception):
    """The client hung up during its edit (Ctrl-C): the decode stops, the server goes on."""


@dataclasses.dataclass
class _Hold:
    """Whether an edit holds the model now (a branched one lets go while its client checks candidate 1)."""

    held: bool = True


class _Server:
    """The state of one serve(): the model, one lock for edits, counters for status."""

    def __init__(
        self,
        socket_path: Path,
        loaded,
        idle_timeout: float,
        max_rss_bytes: int,
        make_sampler=None,
        answer_timeout: float = SERVER_ANSWER_TIMEOUT,
    ):
        self.socket_path, self.loaded, self.make_sampler = socket_path, loaded, make_sampler
        self.idle_timeout, self.max_rss_bytes, self.answer_timeout = idle_timeout, max_rss_bytes, answer_timeout
        self.edit_lock = threading.Lock()  # one decode at a time: the model has one KV cache
        self.busy_since = 0.0  # when the decode holding edit_lock took it
        self.stopping = threading.Event()
        self.started = self.last_request = time.monotonic()
        self.requests = self.cache_drops = 0
        self.waiting: set[int] = set()  # the handlers (thread ids) waiting for a client's checks of candidate 1
        self.handlers: list[threading.Thread] = []

    def idle(self) -> bool:
        quiet = time.monotonic() - self.last_request
        return (
            bool(self.idle_timeout) and quiet > self.idle_timeout and not self.edit_lock.locked() and not self.waiting
        )

    def busy_seconds(self) -> float:
        return round(time.monotonic() - self.busy_since, 1) if self.edit_lock.locked() else 0.0

    def handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            try:
                conn.settimeout(REQUEST_TIMEOUT)  # a client that connects and says nothing cannot hold the server
                with _cut_off_after(conn, REQUEST_TIMEOUT) as expired:  # nor one that sends a byte now and then
                    try:
                        request = _receive(stream)
                    except ValueError:
                        if not expired.is_set():
                            raise
                if expired.is_set():
                    raise TimeoutError
                conn.settimeout(None)  # an edit's answer takes as long as the edit
                if request is not None:
                    self.answer(request, stream, conn)
            except _ClientGone:
                _log("the client hung up during its edit")
            except (TimeoutError, socket.timeout):
                _log(f"a client sent no request within {REQUEST_TIMEOUT:g} s; closed")
            except (OSError, ValueError) as exc:
                _log(f"bad connection: {type(exc).__name__}: {exc}")

    def answer(self, request: dict, stream, conn: socket.socket) -> None:
        op = request.get("op")
        try:
            if op == "status":
                _send(stream, self.status())
            elif op == "stop":
                self.stopping.set()
                _send(stream, {"stopping": True, "pid": os.getpid()})
            elif op == "edit":
                _send(stream, {"result": self.edit(request, stream, conn)})
            else:
                raise ServerError(f"unknown request {op!r}", hint="use a client of the same cadedit version")
        except CadeditError as exc:
            _send(stream, {"error": error_to_wire(exc)})
        except (_ClientGone, OSError):
            raise
        except Exception as exc:  # a bug: the client gets one line, the log the traceback
            import traceback

            traceback.print_exc()
            _send(
                stream,
                {
                    "error": error_to_wire(
                        ServerError(
                            f"internal error in the cadedit server: {type(exc).__name__}: {exc}",
                            hint=f"see its log, {log_file(self.socket_path)}",
                        )
                    )
                },
            )

    def status(self) -> dict:
        from cadedit.backends.model import (
            language_model,
        )  # lazy: the client side (connect, status) imports no numpy or torch

        memory = _status_bytes()
        return {
            "protocol": PROTOCOL,
            "model": self.loaded.name,
            "dtype": str(self.loaded.dtype),
            "backend": self.loaded.backend,
            "device": self.loaded.device,
            "threads": self.loaded.threads,
            "pid": os.getpid(),
            "rss_bytes": _own_bytes(memory),
            "mapped_bytes": memory.get("RssFile", 0),
            "max_rss_bytes": self.max_rss_bytes,
            "uptime_seconds": round(time.monotonic() - self.started, 1),
            "requests": self.requests,
            "cache_drops": self.cache_drops,
            "cached_tokens": len(language_model(self.loaded).ids),
            "idle_timeout": self.idle_timeout,
            "busy": self.edit_lock.locked(),
            "busy_seconds": self.busy_seconds(),
            "waiting": len(self.waiting),
            "answer_timeout": self.answer_timeout,
            "socket": str(self.socket_path),
        }

    def edit(self, request: dict, stream, conn: socket.socket) -> dict:
        from cadedit.decode.pipeline import (
            edit_branches,
            edit_candidates,
            edit_file,
        )  # lazy: the client side (connect, status) imports no numpy or torch
        from cadedit.tries.loop import (
            branch_factories,
            candidate_factories,
        )  # lazy: the client side (connect, status) imports no numpy or torch

        options = options_from_wire(request["options"])
        if options.model is not None and resolve_spec(options.model) != resolve_spec(self.loaded.name):
            raise ServerError(
                f"this cadedit server holds {self.loaded.name}, not {options.model}",
                hint="load the model locally, or restart the server: cadedit serve start --model ...",
            )
        document = Document.from_bytes(base64.b64decode(request["document"]), request["path"])
        on_step = self.progress(stream) if request.get("progress") else None
        k = int(request.get("candidates") or 1)
        with self.model_for(float(request.get("wait", SERVER_BUSY_WAIT))) as hold:
            start = time.perf_counter()
            try:
                if k > 1 and request.get("by") == "branch":
                    found = edit_branches(
                        document,
                        request["instruction"],
                        options,
                        branch_factories(k, options.sampling),
                        self.asker(stream, conn, hold),
                        loaded=self.loaded,
                        on_step=on_step,
                    )
                elif k > 1:
                    found = edit_candidates(
                        document,
                        request["instruction"],
                        options,
                        candidate_factories(k, options.sampling),
                        loaded=self.loaded,
                        on_step=on_step,
                    )
                else:
                    result = edit_file(
                        document,
                        request["instruction"],
                        options,
                        loaded=self.loaded,
                        on_step=on_step,
                        make_sampler=self.make_sampler,
                    )
            finally:
                self.requests += 1
                self.last_request = time.monotonic()
                if hold.held:  # not while another edit decodes (a branched edit whose client went away)
                    self.bound_memory()
        _log(
            f"edit {document.path}: {len(found)} of {k} candidates, {time.perf_counter() - start:.2f} s"
            if k > 1
            else f"edit {document.path}: {result.stats.forward_passes} forwards, "
            f"{result.stats.tokens_reused} prompt tokens reused, {time.perf_counter() - start:.2f} s"
        )
        if k > 1:
            return {"candidates": [candidate_to_wire(c) for c in found]}
        return result_to_wire(result)

    @contextlib.contextmanager
    def model_for(self, wait: float):
        """The model for one edit, once no other decode holds it: waited for up to `wait` seconds, then
        refused as busy (the client loads the model itself or says so); refused once stopping."""
        if not self.edit_lock.acquire(timeout=max(0.0, wait)):
            raise ServerError(
                f"the cadedit server (pid {os.getpid()}) is busy with another edit (for {self.busy_seconds():.0f} s)",
                hint="retry when it is done, or load the model here: CADEDIT_SERVER=0 cadedit ...",
            )
        hold = _Hold()
        try:
            if self.stopping.is_set():
                raise ServerError("the cadedit server is stopping", hint="retry: the model is then loaded here")
            self.busy_since = time.monotonic()
            yield hold
        finally:
            if hold.held:
                self.edit_lock.release()

    def asker(self, stream, conn: socket.socket, hold: _Hold) -> Callable:
        """edit_branches' accept: candidate 1 goes to the client, whose checks say whether to branch. The
        model is let go meanwhile: the client's test may take minutes, and a client stopped with
        Ctrl-Z would otherwise hold every other edit (and `serve stop`) until it went on."""

        def accept(first) -> bool:
            try:
                _send(stream, {"first": candidate_to_wire(first)})
            except OSError:
                raise _ClientGone from None
            me = threading.get_ident()
            self.waiting.add(me)
            hold.held = False
            self.edit_lock.release()
            try:
                answer = self.client_answer(stream, conn)
            finally:
                self.waiting.discard(me)
            self.edit_lock.acquire()  # behind a decode under way (bounded by its budget)
            hold.held, self.busy_since = True, time.monotonic()
            return bool(answer.get("accept"))

        return accept

    def client_answer(self, stream, conn: socket.socket) -> dict:
        """The client's answer to a question, waited for until answer_timeout or a stop request."""
        deadline = time.monotonic() + self.answer_timeout
        while not select.select([conn], [], [], _POLL)[0]:
            if self.stopping.is_set():
                raise ServerError(
                    "the cadedit server was stopped while this client checked candidate 1; its other "
                    "candidates were not decoded",
                    hint="run the edit again",
                )
            if time.monotonic() > deadline:
                break
        try:
            conn.settimeout(max(0.1, deadline - time.monotonic()))  # a line begun must end by the deadline too
            answer = _receive(stream)
        except (TimeoutError, socket.timeout):
            raise ServerError(
                f"the cadedit server waited {self.answer_timeout:g} s for this client's checks of "
                "candidate 1; its other candidates were not decoded",
                hint="give it longer: cadedit serve start --answer-timeout S",
            ) from None
        except (OSError, ValueError):
            raise _ClientGone from None
        finally:
            conn.settimeout(None)
        if not isinstance(answer, dict):
            raise _ClientGone
        return answer

    def progress(self, stream) -> Callable:
        last = [0.0]

        def on_step(stats, step) -> None:
            if time.monotonic() - last[0] < _PROGRESS_EVERY:
                return
            last[0] = time.monotonic()
            try:
                _send(stream, {"progress": {"stats": dataclasses.asdict(stats), "step": dataclasses.asdict(step)}})
            except OSError:
                raise _ClientGone from None

        return on_step

    def bound_memory(self) -> None:
        """Drop the KV cache when the process holds more than max_rss_bytes (the next prompt is fed whole)."""
        from cadedit.backends.model import (
            language_model,
        )  # lazy: the client side (connect, status) imports no numpy or torch

        rss = rss_bytes()
        if self.max_rss_bytes and rss > self.max_rss_bytes:
            language_model(self.loaded).reset()
            self.cache_drops += 1
            _trim_heap()
            _log(
                f"RSS {rss / 2**30:.2f} GiB > {self.max_rss_bytes / 2**30:.2f} GiB: dropped the KV cache "
                f"(now {rss_bytes() / 2**30:.2f} GiB)"
            )


def _trim_heap() -> None:
    """Hand freed heap back to the OS (glibc keeps it otherwise, and RSS would not fall)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def serve(
    socket_path: Path,
    loaded,
    idle_timeout: float = IDLE_TIMEOUT,
    max_rss_bytes: int | None = None,
    on_ready: Callable[[dict], None] | None = None,
    make_sampler: Callable | None = None,
    answer_timeout: float = SERVER_ANSWER_TIMEOUT,
) -> None:
    """Serve `loaded` on socket_path until a stop request, idle_timeout seconds without one (0: never),
    SIGTERM or Ctrl-C. max_rss_bytes None: the RSS now plus CACHE_ROOM. make_sampler: each single edit's
    sampler factory (pipeline.SamplerFactory; None: the request's sampling; tests script answers with it).
    answer_timeout: seconds a branched edit waits for its client's checks of candidate 1."""
    claim(socket_path)
    try:
        _serve_claimed(socket_path, loaded, idle_timeout, max_rss_bytes, on_ready, make_sampler, answer_timeout)
    finally:
        release(socket_path)


def _serve_claimed(
    socket_path: Path,
    loaded,
    idle_timeout: float,
    max_rss_bytes: int | None,
    on_ready: Callable[[dict], None] | None,
    make_sampler: Callable | None = None,
    answer_timeout: float = SERVER_ANSWER_TIMEOUT,
) -> None:
    server = _Server(
        socket_path, loaded, idle_timeout, max_rss_bytes or rss_bytes() + CACHE_ROOM, make_sampler, answer_timeout
    )
    listener = _listen(socket_path)
    try:
        with _stop_on_sigterm(server.stopping):
            _log(f"serving {loaded.name} on {socket_path} (pid {os.getpid()})")
            if on_ready is not None:
                on_ready(server.status())
            _accept_until_done(listener, server)
        # An edit under way finishes and answers first; one waiting for the model or for its client's
        # checks is refused (model_for, client_answer: they watch `stopping`).
        for handler in server.handlers:
            handler.join()
    finally:
        listener.close()


def _listen(socket_path: Path) -> socket.socket:
    if len(os.fsencode(socket_path)) > 100:  # sun_path holds 108 bytes on Linux, 104 on macOS
        raise ServerError(
            f"socket path {socket_path} is too long for a Unix socket", hint=f"set {RUNTIME_ENV} to a shorter folder"
        )
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600: no moment when another user could connect
    try:
        listener.bind(str(socket_path))
    finally:
        os.umask(old)
    os.chmod(socket_path, 0o600)
    listener.listen(16)
    listener.settimeout(_POLL)
    return listener


def _accept_until_done(listener: socket.socket, server: _Server) -> None:
    while not server.stopping.is_set():
        if server.idle():
            _log(f"no request for {server.idle_timeout:.0f} s: exiting")
            return
        try:
            conn, _ = listener.accept()
        except (TimeoutError, socket.timeout):
            continue
        conn.settimeout(None)
        handler = threading.Thread(target=server.handle, args=(conn,), daemon=True)
        handler.start()
        server.handlers = [h for h in server.handlers if h.is_alive()] + [handler]
    _log("stopped by request")


@contextlib.contextmanager
def _stop_on_sigterm(stopping: threading.Event):
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- starting and stopping --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """What `cadedit serve start` passes to the server process."""

    model: str
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    idle_timeout: float = IDLE_TIMEOUT
    backend: str | None = None
    max_rss_bytes: int | None = None
    socket: str = ""
    answer_timeout: float = SERVER_ANSWER_TIMEOUT


def run_server(config: ServerConfig, on_ready: Callable[[dict], None] | None = None) -> None:
    """In this process: claim the socket (before the slow load, so a second start fails at once), load, serve."""
    from cadedit.backends.model import load_model  # lazy: the client side (connect, status) imports no numpy or torch

    socket_path = Path(config.socket) if config.socket else default_socket()
    claim(socket_path)
    try:
        loaded = load_model(config.model, config.device, config.dtype, config.threads, config.backend)
        _log(
            f"loaded {loaded.name} in {loaded.load_seconds:.1f} s ({loaded.backend}: {loaded.backend_reason}; "
            f"{loaded.dtype}, {loaded.threads} threads)"
        )
        _serve_claimed(
            socket_path,
            loaded,
            config.idle_timeout,
            config.max_rss_bytes,
            on_ready,
            answer_timeout=config.answer_timeout,
        )
    finally:
        release(socket_path)


def start_daemon(config: ServerConfig, timeout: float = START_TIMEOUT) -> dict:
    """Start the server in its own session (output to the log beside the socket); return its status once
    it answers, or raise a ServerError with the log's last line if it exits or stays silent."""
    import subprocess

    socket_path = Path(config.socket) if config.socket else default_socket()
    pid = running_pid(socket_path)
    if pid is not None:
        raise ServerError(
            f"a cadedit server is already running (pid {pid}, socket {socket_path})",
            hint="use it, or stop it first: cadedit serve stop",
        )
    own_folder(socket_path.parent, create=True)
    log = log_file(socket_path)
    config = dataclasses.replace(config, socket=str(socket_path))
    with contextlib.suppress(FileNotFoundError):
        log.unlink()  # a fresh log; O_EXCL below: never a file someone linked here
    with os.fdopen(_open_private(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as out:
        child = subprocess.Popen(
            python_code(
                "from cadedit.server.warm import _daemon_main; _daemon_main(sys.argv[1])",
                json.dumps(dataclasses.asdict(config)),
            ),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd="/",
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise ServerError(f"the cadedit server exited while starting: {_last_line(log)}", hint=f"see {log}")
        with contextlib.suppress(ServerError):
            status = _ask(socket_path, {"op": "status"}, 2.0)
            if status.get("pid") == child.pid:
                child.returncode = 0  # it lives on in its own session; no zombie to reap, no warning
                return status
        time.sleep(0.1)
    child.terminate()
    raise ServerError(f"the cadedit server did not answer within {timeout:.0f} s: {_last_line(log)}", hint=f"see {log}")


def _last_line(log: Path) -> str:
    """The log's last 'error:' line if any, else its last line (what a failed start says)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors_ = [line for line in lines if line.startswith("error:")]
    return (errors_ or lines or ["(the log is empty)"])[-1]


def _daemon_main(config_json: str) -> None:
    """The daemon's entry point: one line per failure in the log, exit code as the CLI's."""
    config = ServerConfig(**json.loads(config_json))
    try:
        run_server(config)
    except CadeditError as exc:
        shown = f"error: {exc.message}\n" + (f"hint: {exc.hint}\n" if exc.hint else "")
        sys.stderr.write(visible(shown, lines=True))
        sys.exit(exc.exit_code)


def stop(socket_path: Path | None = None, timeout: float = 30.0) -> int | None:
    """Ask the server to stop and wait until it has (an edit under way finishes first); its pid, or None."""
    path = socket_path or default_socket()
    try:
        pid = ServerClient.open(path, timeout=5.0).stop()["pid"]
    except ServerError:
        if running_pid(path) is None:
            return None
        raise
    deadline = time.monotonic() + timeout
    while running_pid(path) is not None:
        if time.monotonic() > deadline:
            raise ServerError(
                f"the cadedit server (pid {pid}) did not stop within {timeout:.0f} s "
                "(an edit under way finishes first)",
                hint=f"wait, or kill {pid}",
            )
        time.sleep(0.05)
    return pid
