"""The real `cadedit` console script with its stdout and stderr on a pseudo-terminal: the bytes a
terminal would get, as the user's terminal gets them (isatty() true on both)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

from tests.conftest import console_script


def on_a_terminal(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> tuple[int, bytes]:
    """(exit code, every byte written to the terminal) of `cadedit ARGS` run with stdout and stderr on
    one pseudo-terminal of 200 columns and stdin from /dev/null."""
    leader, follower = pty.openpty()
    os.set_blocking(leader, False)
    wide = {"COLUMNS": "200", "LINES": "50", "TERM": "xterm-256color"}
    with open(os.devnull, "rb") as stdin:
        process = subprocess.Popen(
            [console_script(), *args],
            cwd=cwd,
            stdin=stdin,
            stdout=follower,
            stderr=follower,
            env={**os.environ, **wide, **(env or {})},
        )
    os.close(follower)
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(out)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
