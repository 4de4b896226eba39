"""`cadedit serve start|stop|status`: the warm server (cadedit.server.warm) as commands.

Wiring only; cli/root.py registers `app` as the `serve` sub-command and formats the CadeditErrors raised
here. Importing this module imports neither torch nor transformers (start --foreground loads the model
inside the command). Status is data (stdout); progress and confirmations go to stderr.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from cadedit.cli.common import BackendOpt, DtypeOpt, err, escape_markup, ModelOpt, say, sub_app, ThreadsOpt
from cadedit.settings import IDLE_TIMEOUT, SERVER_ANSWER_TIMEOUT
from cadedit.settings import choose_model
from cadedit.text.visible import visible
from cadedit.server.warm import ServerClient, ServerError, default_socket, running_pid
from cadedit.server.warm import ServerConfig, resolve_spec, run_server, start_daemon
from cadedit.server.warm import stop as stop_server

app = sub_app("serve", "A local server that keeps the model loaded (and its last prompt cached) between edits.")

_Foreground = Annotated[
    bool,
    typer.Option(
        "--foreground", help="Serve in this process (log on stderr; Ctrl-C stops it) instead of in the background."
    ),
]
_IdleTimeout = Annotated[
    float,
    typer.Option("--idle-timeout", metavar="S", min=0.0, help="Exit after S seconds without a request (0: never)."),
]
_MaxRss = Annotated[
    Optional[float],
    typer.Option(
        "--max-rss-gb",
        metavar="G",
        min=0.01,
        show_default=False,
        help="Drop the cached prompt after a request that leaves the process's own memory above G GiB "
        "(the mapped weight files not counted; default: its own memory once loaded plus 1 GiB).",
    ),
]
_AnswerTimeout = Annotated[
    float,
    typer.Option(
        "--answer-timeout",
        metavar="S",
        min=1.0,
        help="Seconds a branched edit waits for its client's checks of candidate 1 (its --test) before it drops "
        "the other candidates; other edits are served meanwhile.",
    ),
]
_Json = Annotated[bool, typer.Option("--json", help="Print the status as JSON.")]


def _serving(status: dict) -> str:
    idle = status["idle_timeout"]
    until = f"exits after {_duration(idle)} without requests" if idle else "runs until `cadedit serve stop`"
    return (
        f"cadedit server: serving {status['model']} (pid {status['pid']}, {status.get('backend', 'torch')}, {_dtype(status)}, "
        f"{status['threads']} threads) on {status['socket']}; {until}"
    )


def _dtype(status: dict) -> str:
    return status["dtype"].removeprefix("torch.")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


@app.command("start")
def start(
    model: ModelOpt = None,
    dtype: DtypeOpt = "auto",
    threads: ThreadsOpt = None,
    foreground: _Foreground = False,
    idle_timeout: _IdleTimeout = IDLE_TIMEOUT,
    max_rss_gb: _MaxRss = None,
    backend: BackendOpt = None,
    answer_timeout: _AnswerTimeout = SERVER_ANSWER_TIMEOUT,
) -> None:
    """Load the model once and serve edits on a Unix socket (one per user) until stopped or idle.

    Exit codes: 0 serving (or, with --foreground, stopped cleanly), 1 already running or the model failed to load.

    Examples: cadedit serve start --model ~/models/qwen2.5-coder-0.5b-instruct

              cadedit serve start --foreground --idle-timeout 0
    """

    config = ServerConfig(
        model=resolve_spec(choose_model(model)),
        dtype=dtype,
        threads=threads,
        backend=backend,
        idle_timeout=idle_timeout,
        max_rss_bytes=int(max_rss_gb * 2**30) if max_rss_gb else None,
        answer_timeout=answer_timeout,
    )
    if foreground:
        say(f"cadedit server: loading {config.model} ...")
        run_server(config, on_ready=lambda status: say(_serving(status)))
        return
    with err.status(escape_markup(f"starting the cadedit server (loading {config.model}) ...")):
        status = start_daemon(config)
    say(_serving(status))


@app.command("stop")
def stop() -> None:
    """Stop the running server (an edit under way finishes first). Exit 0 also when none was running."""

    pid = stop_server()
    say(f"stopped the cadedit server (pid {pid})" if pid is not None else "no cadedit server was running")


@app.command("status")
def status(as_json: _Json = False) -> None:
    """Print what the running server holds: model, dtype, threads, pid, memory, uptime, requests.

    Exit codes: 0 a server answered, 1 none is running.
    """

    try:
        data = ServerClient.open().status()
    except ServerError:
        pid = running_pid(default_socket())
        if pid is None:
            raise
        raise ServerError(
            f"the cadedit server (pid {pid}) does not answer yet: it may still be loading its model",
            hint="wait and retry; see " + str(default_socket().with_suffix(".log")),
        ) from None
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    cap = data["max_rss_bytes"]
    lines = [
        f"model: {data['model']}",
        f"pid: {data['pid']}",
        f"dtype: {_dtype(data)}, {data['threads']} threads, {data['device']}",
        f"memory: {data['rss_bytes'] / 2**30:.2f} GiB of its own (the cached prompt is dropped above "
        f"{cap / 2**30:.2f} GiB), {data.get('mapped_bytes', 0) / 2**30:.2f} GiB of mapped weight files",
        f"cached prompt: {data['cached_tokens']} tokens (dropped {data['cache_drops']} times)",
        f"requests: {data['requests']}"
        + (f" (one under way for {data.get('busy_seconds', 0):.0f} s)" if data["busy"] else "")
        + (f"; {data['waiting']} waiting for their clients' checks" if data.get("waiting") else ""),
        f"uptime: {data['uptime_seconds']:.0f} s; idle timeout: "
        + (_duration(data["idle_timeout"]) if data["idle_timeout"] else "none"),
        f"socket: {data['socket']}",
    ]
    typer.echo(visible("\n".join(lines), lines=True))  # the model's name may come from a repository's settings
