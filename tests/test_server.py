"""The warm server (cadedit.server.warm) with the tiny random Qwen2: in a thread of this process for the
protocol (the model's choices scripted through serve()'s make_sampler, so answers are exact), in a subprocess
for the `cadedit serve` commands. Sockets live in a short folder under /tmp (CADEDIT_RUNTIME_DIR):
a Unix socket path holds about 100 bytes."""

from __future__ import annotations

import contextlib
import os
import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import socket
import time
from pathlib import Path

import pytest

import cadedit.decode.pipeline as pipeline
from cadedit import errors
from cadedit.server import warm as server
from cadedit.decode.loop import DecodeStats, script_sampler
from cadedit.text.document import Document
from cadedit.backends.model import language_model, load_model
from cadedit.options import EditOptions, Mode
from cadedit.text.oracle import oracle
from cadedit.text.program import format
from cadedit.text.resolve import to_display_program
from tests.scripting import every_try, inject_picks, invoke
from tests.tinymodel import save_model

BEFORE = b"def add(a, b):\r\n    return a - b\r\n\r\n\r\nprint(add(1, 2))\r\n"
AFTER = b"def add(a, b):\r\n    return a + b\r\n\r\n\r\nprint(add(1, 2))\r\n"
OTHER_BEFORE = b"def sub(a, b):\n    return a + b\n"
OTHER_AFTER = b"def sub(a, b):\n    return a - b\n"


@pytest.fixture(scope="module")
def held(tiny_dir):
    """The server's model: loaded apart from `local`, so each has its own KV cache."""
    return load_model(str(tiny_dir), "cpu", "fp32", 1)


@pytest.fixture(scope="module")
def local(tiny_dir):
    return load_model(str(tiny_dir), "cpu", "fp32", 1)


@pytest.fixture(autouse=True)
def fresh_caches(held, local):
    for loaded in (held, local):
        language_model(loaded).reset()


@pytest.fixture
def run_dir(monkeypatch):
    folder = Path(tempfile.mkdtemp(prefix="cad-", dir="/tmp"))
    monkeypatch.setenv(server.RUNTIME_ENV, str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def sock(run_dir):
    return server.default_socket()


@pytest.fixture
def scripted():
    """A sampler factory (pipeline.SamplerFactory): the model 'chooses' the oracle program of each document's
    known edit; the server takes it as serve(make_sampler=...), a local edit as edit_file's."""
    answers = {BEFORE: AFTER, OTHER_BEFORE: OTHER_AFTER}

    def make_sampler(loaded, document, prepared):
        after = Document.from_bytes(answers[document.to_bytes()])
        target = format(to_display_program(oracle(document, after), document))
        return script_sampler(target, pipeline.grammar_for(loaded).vocab.tokens)

    return make_sampler


@contextlib.contextmanager
def serving(loaded, socket_path: Path, **kwargs):
    """serve() in a thread until the block ends (then stopped and joined)."""
    ready, failed = threading.Event(), []

    def run() -> None:
        try:
            server.serve(socket_path, loaded, on_ready=lambda status: ready.set(), **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(20) and not failed, failed
    try:
        yield thread
    finally:
        with contextlib.suppress(server.ServerError):
            server.stop(socket_path)
        thread.join(20)
        assert not failed, failed


def options(tiny_dir, **changes) -> EditOptions:
    return EditOptions(model=str(tiny_dir), mode=Mode.PROGRAM, **changes)


def counts(stats: DecodeStats) -> dict:
    return {k: v for k, v in dataclasses.asdict(stats).items() if not k.startswith("seconds")}


# --- the client path starts fast --------------------------------------------------------------


def test_the_client_path_imports_neither_torch_nor_transformers(run_dir):
    probe = (
        "import sys\nfrom cadedit.server import warm as server\nfrom cadedit.cli.root import main\n"
        "assert server.connect('some/model') is None\n"
        "sys.argv = ['cadedit', 'serve', 'status']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'numpy'})\n"
        "sys.stderr.write(f'HEAVY={heavy}')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
    assert done.stderr.decode().endswith("HEAVY=[]"), done.stderr.decode()


# --- edits through the server -----------------------------------------------------------------


def test_an_edit_through_the_server_is_the_local_edit(held, local, tiny_dir, sock, scripted):
    document = Document.from_bytes(BEFORE, "a.py")
    steps = []
    with serving(held, sock, make_sampler=scripted):
        client = server.connect(str(tiny_dir))
        assert client is not None and (client.name, client.load_seconds) == (str(tiny_dir), 0.0)
        remote = client.edit(document, "Fix add.", options(tiny_dir), on_step=lambda stats, step: steps.append(stats))
    mine = pipeline.edit_file(document, "Fix add.", options(tiny_dir), loaded=local, make_sampler=scripted)
    assert remote.new_text == mine.new_text == AFTER.decode()
    assert (remote.program, remote.program_text, remote.mode, remote.prompt_tokens) == (
        mine.program,
        mine.program_text,
        mine.mode,
        mine.prompt_tokens,
    )
    assert counts(remote.stats) == counts(mine.stats) and remote.stats.tokens_copied > 0
    assert remote.document is document and remote.changed
    assert steps and isinstance(steps[0], DecodeStats)


def test_the_second_edit_reuses_the_cached_prompt(held, tiny_dir, sock, scripted):
    document = Document.from_bytes(BEFORE, "a.py")
    with serving(held, sock, make_sampler=scripted):
        client = server.connect(str(tiny_dir))
        first = client.edit(document, "Fix add.", options(tiny_dir))
        second = client.edit(document, "Fix add.", options(tiny_dir))
    assert first.stats.tokens_reused == 0 and second.stats.tokens_reused == second.prompt_tokens - 1


@pytest.mark.parametrize("changes", [{"max_new_tokens": 3}, {"variant": "no-such-variant"}])
def test_an_error_on_the_server_is_raised_as_the_same_error(held, local, tiny_dir, sock, changes):
    document = Document.from_bytes(BEFORE, "a.py")
    with pytest.raises(errors.CadeditError) as here:
        pipeline.edit_file(document, "Fix add.", options(tiny_dir, **changes), loaded=local)
    with serving(held, sock), pytest.raises(errors.CadeditError) as there:
        server.connect(str(tiny_dir)).edit(document, "Fix add.", options(tiny_dir, **changes))
    assert type(there.value) is type(here.value)
    assert (there.value.message, there.value.hint, there.value.exit_code) == (
        here.value.message,
        here.value.hint,
        here.value.exit_code,
    )


@pytest.mark.parametrize(
    "exc",
    [
        errors.CheckFailedError("no try passed", hint="raise --tries"),
        errors.BudgetError("out of budget"),
        server.ServerError("refused", hint="restart"),
    ],
)
def test_errors_cross_the_wire_with_their_class_and_exit_code(exc):
    back = server.error_from_wire(server.error_to_wire(exc))
    assert (type(back), back.message, back.hint, back.exit_code) == (type(exc), exc.message, exc.hint, exc.exit_code)


def test_two_clients_at_once_are_served_in_turn(held, local, tiny_dir, sock, scripted):
    active, most = [0], [0]

    def watched(loaded, document, prepared):  # how many edits are past their prompt at a time
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.2)  # without the lock the other client's edit would get here too
        active[0] -= 1
        return scripted(loaded, document, prepared)

    documents = [Document.from_bytes(BEFORE, "a.py"), Document.from_bytes(OTHER_BEFORE, "b.py")]
    results: dict[str, str] = {}
    with serving(held, sock, make_sampler=watched):
        client = server.connect(str(tiny_dir))
        threads = [
            threading.Thread(
                target=lambda d=d: results.__setitem__(d.path, client.edit(d, "Fix it.", options(tiny_dir)).new_text)
            )
            for d in documents
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        status = client.status()
    assert results == {"a.py": AFTER.decode(), "b.py": OTHER_AFTER.decode()}
    assert most[0] == 1 and status["requests"] == 2


# --- status, stop, memory, idleness -----------------------------------------------------------


def test_status_then_stop(held, tiny_dir, sock):
    with serving(held, sock, idle_timeout=0) as thread:
        status = server.ServerClient.open().status()
        assert (status["model"], status["pid"], status["threads"], status["dtype"]) == (
            str(tiny_dir),
            os.getpid(),
            1,
            "torch.float32",
        )
        assert status["requests"] == 0 and status["rss_bytes"] > 0 and status["uptime_seconds"] >= 0
        assert (sock.stat().st_mode & 0o777, server.running_pid(sock)) == (0o600, os.getpid())
        assert server.stop(sock) == os.getpid()
        thread.join(10)
        assert not thread.is_alive()
    assert not sock.exists() and not server.pid_file(sock).exists()
    assert server.connect(str(tiny_dir)) is None and server.stop(sock) is None


def test_above_the_memory_bound_the_cache_is_dropped(held, tiny_dir, sock, scripted):
    document = Document.from_bytes(BEFORE, "a.py")
    with serving(held, sock, max_rss_bytes=1, make_sampler=scripted):
        client = server.connect(str(tiny_dir))
        client.edit(document, "Fix add.", options(tiny_dir))
        second = client.edit(document, "Fix add.", options(tiny_dir))
        status = client.status()
    assert second.stats.tokens_reused == 0
    assert (status["cache_drops"], status["cached_tokens"]) == (2, 0)


def test_the_server_exits_after_its_idle_timeout(held, sock):
    with serving(held, sock, idle_timeout=0.5) as thread:
        thread.join(10)
        assert not thread.is_alive()
    assert not sock.exists()


# --- which server, and only one ---------------------------------------------------------------


def test_connect_returns_none_for_another_model_and_the_server_refuses_it(held, tiny_dir, sock, tmp_path):
    other = save_model(tmp_path / "other", seed=1)
    document = Document.from_bytes(BEFORE, "a.py")
    with serving(held, sock):
        assert server.connect(str(other)) is None
        assert server.connect(None) is None  # the default model, not this one
        with pytest.raises(server.ServerError, match="holds .*tiny.*, not .*other"):
            server.ServerClient.open().edit(document, "Fix add.", options(other))


def test_connect_follows_choose_model(held, tiny_dir, sock, monkeypatch):
    monkeypatch.setenv("CADEDIT_MODEL", str(tiny_dir))
    with serving(held, sock):
        assert server.connect(None) is not None
        monkeypatch.chdir(tiny_dir.parent)
        assert server.connect(tiny_dir.name) is not None  # a relative folder is the same model


def test_a_stale_socket_and_pid_file_are_replaced(held, tiny_dir, sock):
    sock.parent.mkdir(exist_ok=True)
    dead = server.socket.socket(server.socket.AF_UNIX)
    dead.bind(str(sock))
    dead.close()  # the socket file stays, nothing listens
    server.pid_file(sock).write_text("999999\n")
    assert server.connect(str(tiny_dir)) is None and server.running_pid(sock) is None
    with serving(held, sock):
        assert server.connect(str(tiny_dir)) is not None


def test_a_second_server_on_the_same_socket_is_refused(held, local, sock):
    with serving(held, sock):
        with pytest.raises(server.ServerError, match="already running"):
            server.serve(sock, local)
        assert server.ServerClient.open().status()["pid"] == os.getpid()  # the first one still serves


# --- the commands -----------------------------------------------------------------------------


def cadedit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cadedit", *args], capture_output=True, text=True, timeout=timeout)


def wait_for(sock: Path, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(server.ServerError):
            server.ServerClient.open(sock)
            return
        time.sleep(0.1)
    raise AssertionError(
        f"no server answered; exit {process.poll()}: {process.stderr.read() if process.stderr else ''}"
    )


def test_serve_start_foreground_status_stop(tiny_dir, sock):
    start = ["start", "--foreground", "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1"]
    process = subprocess.Popen([sys.executable, "-m", "cadedit", "serve", *start], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(sock, process)
        status = cadedit("serve", "status")
        assert status.returncode == 0, status.stderr
        assert f"model: {tiny_dir}\n" in status.stdout and f"pid: {process.pid}\n" in status.stdout
        again = cadedit("serve", *start)
        assert (
            again.returncode == 1 and f"error: a cadedit server is already running (pid {process.pid}" in again.stderr
        )
        stopped = cadedit("serve", "stop")
        assert (stopped.returncode, stopped.stderr) == (0, f"stopped the cadedit server (pid {process.pid})\n")
        assert process.wait(20) == 0
        assert "cadedit server: serving" in process.stderr.read()
    finally:
        process.kill()
    status = cadedit("serve", "status")
    assert status.returncode == 1 and status.stderr.startswith("error: no cadedit server answers on ")
    assert "hint: start one: cadedit serve start" in status.stderr
    assert (cadedit("serve", "stop").stderr, cadedit("serve", "stop").returncode) == (
        "no cadedit server was running\n",
        0,
    )


def test_serve_start_runs_in_the_background_until_stopped(tiny_dir, sock):
    try:
        started = cadedit("serve", "start", "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1")
        assert started.returncode == 0, started.stderr
        status = server.ServerClient.open(sock).status()
        assert f"cadedit server: serving {tiny_dir} (pid {status['pid']}, torch, float32, 1 threads)" in started.stderr
        assert status["pid"] != os.getpid() and "serving" in server.log_file(sock).read_text()
        again = cadedit("serve", "start", "--model", str(tiny_dir))
        assert again.returncode == 1 and f"already running (pid {status['pid']}" in again.stderr
    finally:
        assert server.stop(sock) is not None


def test_serve_start_says_why_the_model_did_not_load(tmp_path, sock):
    (tmp_path / "empty").mkdir()
    started = cadedit("serve", "start", "--model", str(tmp_path / "empty"))
    assert started.returncode == 1
    assert started.stderr.startswith(
        f"error: the cadedit server exited while starting: error: model folder {tmp_path / 'empty'} has no config.json"
    )
    assert not sock.exists() and server.running_pid(sock) is None


def test_serve_status_while_the_server_is_still_loading(sock):
    server.claim(sock)  # what run_server holds while load_model runs, before the socket exists
    try:
        status = cadedit("serve", "status")
    finally:
        server.release(sock)
    assert status.returncode == 1
    assert status.stderr.startswith(f"error: the cadedit server (pid {os.getpid()}) does not answer yet")


# --- fix and the hook use a running server by themselves ---------------------------------------


def test_fix_uses_the_running_server_and_loads_nothing_itself(held, tiny_dir, sock, scripted, tmp_path, monkeypatch):
    import cadedit.backends.model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_bytes(BEFORE)
    monkeypatch.setattr(
        cadedit.backends.model, "load_model", lambda *a, **k: pytest.fail("fix loaded the model itself")
    )
    with serving(held, sock, make_sampler=scripted):
        result = invoke(
            [
                "fix",
                "a.py",
                "Fix add.",
                "--model",
                str(tiny_dir),
                "--mode",
                "program",
                "--no-scope",
                "--tries",
                "1",
                "--write",
            ]
        )
    assert result.exit_code == 0, result.output
    assert "using the cadedit server" in result.stderr
    assert (tmp_path / "a.py").read_bytes() == AFTER


def test_fix_loads_locally_when_the_server_is_turned_off(held, tiny_dir, sock, scripted, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CADEDIT_SERVER", "0")
    (tmp_path / "a.py").write_bytes(BEFORE)
    inject_picks(monkeypatch, every_try(scripted))  # the local edit's answer
    with serving(held, sock, make_sampler=scripted):
        result = invoke(
            [
                "fix",
                "a.py",
                "Fix add.",
                "--model",
                str(tiny_dir),
                "--mode",
                "program",
                "--no-scope",
                "--tries",
                "1",
                "--dtype",
                "fp32",
                "--threads",
                "1",
            ]
        )
    assert result.exit_code == 0, result.output
    assert "using the cadedit server" not in result.stderr and "loaded in" in result.stderr


def test_the_memory_bound_counts_the_servers_own_memory_not_the_weight_files_it_maps(tmp_path):
    """Mapped weights are the page cache's: touching all 64 MiB of them must not look like the KV
    cache growing, or every request would drop the cached prompt."""
    import torch
    from safetensors.torch import save_file

    from cadedit.backends.torch.qwen2 import read_safetensors
    from cadedit.server.warm import _status_bytes, rss_bytes

    if "RssAnon" not in _status_bytes():
        pytest.skip("no RssAnon in /proc/self/status")
    save_file({"w": torch.ones(16 * 2**20)}, str(tmp_path / "w.safetensors"))  # 64 MiB of fp32
    own, resident = rss_bytes(), _status_bytes()["VmRSS"]
    weights = read_safetensors(tmp_path / "w.safetensors")["w"]
    assert weights.sum().item() == 16 * 2**20  # every page read
    assert _status_bytes()["VmRSS"] - resident > 48 * 2**20  # resident: the mapped pages count
    assert rss_bytes() - own < 16 * 2**20  # own memory: they do not


def test_an_idle_client_cannot_keep_the_server_from_stopping(held, sock, monkeypatch):
    """A client that connects and never sends its request is closed after REQUEST_TIMEOUT; stop stops."""
    monkeypatch.setattr(server, "REQUEST_TIMEOUT", 0.5)
    with serving(held, sock):
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        idle.connect(str(sock))
        try:
            start = time.monotonic()
            server.ServerClient.open(sock).stop()
            deadline = time.monotonic() + 10
            while server.running_pid(sock) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.running_pid(sock) is None and time.monotonic() - start < 10
            assert idle.recv(1) == b""  # the server closed the silent connection
        finally:
            idle.close()


def test_a_client_that_drips_its_request_cannot_keep_the_server_from_stopping(held, sock, monkeypatch):
    """REQUEST_TIMEOUT bounds the whole request line, not each read: a byte every 0.2 s is cut off."""
    monkeypatch.setattr(server, "REQUEST_TIMEOUT", 1.0)
    with serving(held, sock):
        drip = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        drip.connect(str(sock))

        def send() -> None:
            with contextlib.suppress(OSError):  # until the server cuts it off
                for _ in range(150):
                    drip.send(b" ")
                    time.sleep(0.2)

        sending = threading.Thread(target=send, daemon=True)
        sending.start()
        try:
            time.sleep(0.5)
            start = time.monotonic()
            server.ServerClient.open(sock).stop()
            while server.running_pid(sock) is not None and time.monotonic() - start < 20:
                time.sleep(0.05)
            assert server.running_pid(sock) is None and time.monotonic() - start < 5
        finally:
            drip.close()


def test_candidates_side_by_side_through_the_server_are_the_local_ones(held, local, tiny_dir, sock):
    from cadedit.tries.loop import candidate_factories

    document = Document.from_bytes(BEFORE, "a.py")
    chosen = EditOptions(model=str(tiny_dir), mode=Mode.VERIFY, max_new_tokens=40)
    with serving(held, sock):
        remote = server.connect(str(tiny_dir)).edit_candidates(document, "Fix add.", chosen, 3)
    mine = pipeline.edit_candidates(document, "Fix add.", chosen, candidate_factories(3, chosen.sampling), loaded=local)
    assert len(remote) == len(mine) == 3
    for theirs, ours in zip(remote, mine):
        assert (theirs.result is None) == (ours.result is None)
        if ours.result is not None:
            assert theirs.result.new_text == ours.result.new_text
        else:  # the random model runs out of budget: the error crosses the wire with its class and message
            assert type(theirs.error) is type(ours.error) and theirs.error.message == ours.error.message
        assert theirs.logprob == pytest.approx(ours.logprob, rel=1e-6)


@pytest.mark.parametrize("passes", [False, True])
def test_branches_through_the_server_are_the_local_ones_and_candidate_1_is_checked_here(
    held, local, tiny_dir, sock, passes
):
    """The server sends candidate 1, the client's accept decides; a rejected one is followed by the
    branches the server decodes from its own cache, as a local edit_branches decodes them."""
    from cadedit.tries.loop import branch_factories

    document = Document.from_bytes(BEFORE, "a.py")
    chosen = EditOptions(model=str(tiny_dir), mode=Mode.VERIFY, max_new_tokens=40)
    asked, mine_asked = [], []
    with serving(held, sock):
        remote = server.connect(str(tiny_dir)).edit_branches(
            document, "Fix add.", chosen, 3, lambda first: asked.append(first) or passes
        )
    mine = pipeline.edit_branches(
        document,
        "Fix add.",
        chosen,
        branch_factories(3, chosen.sampling),
        lambda first: mine_asked.append(first) or passes,
        loaded=local,
    )
    assert len(asked) == len(mine_asked) == 1 and len(remote) == len(mine) == (1 if passes else 3)
    for theirs, ours in zip([*asked, *remote], [*mine_asked, *mine]):
        assert (theirs.result is None) == (ours.result is None)
        if ours.result is not None:
            assert theirs.result.new_text == ours.result.new_text
        else:
            assert type(theirs.error) is type(ours.error) and theirs.error.message == ours.error.message
        assert theirs.logprob == pytest.approx(ours.logprob, rel=1e-6)
    assert len({c.logprob for c in mine}) == len(mine)  # the branches are other candidates


def test_a_client_that_hangs_up_while_checking_candidate_1_leaves_the_server_serving(held, tiny_dir, sock):
    document = Document.from_bytes(BEFORE, "a.py")
    chosen = EditOptions(model=str(tiny_dir), mode=Mode.VERIFY, max_new_tokens=40)

    class Gone(Exception):
        pass

    def accept(first):
        raise Gone  # the client dies mid-check: its socket closes

    with serving(held, sock):
        client = server.connect(str(tiny_dir))
        with pytest.raises(Gone):
            client.edit_branches(document, "Fix add.", chosen, 3, accept)
        assert len(client.edit_branches(document, "Fix add.", chosen, 2, lambda first: True)) == 1
        assert client.status()["requests"] == 2


def test_fix_with_a_test_branches_through_the_server_as_it_does_locally(held, tiny_dir, sock, tmp_path, monkeypatch):
    """`cadedit fix --test` on a running server: try 1's candidate 1 checked first, then its branches, the
    same candidates as the local default (`CADEDIT_SERVER=0`)."""
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_bytes(BEFORE)
    args = [
        "fix",
        "a.py",
        "Fix add.",
        "--model",
        str(tiny_dir),
        "--mode",
        "verify",
        "--no-scope",
        "--tries",
        "1",
        "--max-new-tokens",
        "40",
        "--test",
        "false",
        "--json",
        "--dtype",
        "fp32",
        "--threads",
        "1",
    ]
    with serving(held, sock):
        remote = invoke(args)
    monkeypatch.setenv("CADEDIT_SERVER", "0")
    mine = invoke(args)
    assert "using the cadedit server" in remote.stderr and "using the cadedit server" not in mine.stderr
    assert remote.exit_code == mine.exit_code != 0, remote.output

    def candidates(result):
        return [
            (t["candidate"], round(t["logprob"], 4), t["error"], t["changed"])
            for t in json.loads(result.stdout)["tries"]
        ]

    assert candidates(remote) == candidates(mine) and len(candidates(mine)) == 4
    assert candidates(mine)[0][0] == 1


# --- a client that does not answer, a server that is busy ---------------------------------------


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """The real `cadedit` script (the server's socket from CADEDIT_RUNTIME_DIR, set by run_dir)."""
    from tests.conftest import console_script

    return subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=timeout)


def _branching(client, document, chosen, accept) -> tuple[threading.Thread, list]:
    """client.edit_branches in a thread: ([candidates] or [the error]) once it ends."""
    out: list = []

    def run() -> None:
        try:
            out.append(client.edit_branches(document, "Fix add.", chosen, 3, accept))
        except errors.CadeditError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_client_checking_candidate_1_holds_up_no_other_edit_and_serve_stop_stops(
    held, local, tiny_dir, sock, tmp_path, monkeypatch
):
    """While a branched edit's client checks candidate 1 (its test runs, or it sits stopped with Ctrl-Z),
    the server serves other edits: `cadedit fix` through it is answered at once; the branches after it
    are the local ones still (fed from whatever the cache lost meanwhile). `cadedit serve stop` stops a
    server whose client never answers, and that client is told so."""
    from cadedit.tries.loop import branch_factories

    document = Document.from_bytes(BEFORE, "a.py")
    chosen = EditOptions(model=str(tiny_dir), mode=Mode.VERIFY, max_new_tokens=40)
    (tmp_path / "b.py").write_bytes(OTHER_BEFORE)
    monkeypatch.chdir(tmp_path)
    asked, go = threading.Event(), threading.Event()

    def testing(first) -> bool:  # the client's test: until `go`
        asked.set()
        return not go.wait(120)

    with serving(held, sock):
        thread, remote = _branching(server.connect(str(tiny_dir)), document, chosen, testing)
        assert asked.wait(60)
        other = _cli(
            "fix",
            "b.py",
            "Fix sub.",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--mode",
            "verify",
            "--no-scope",
            "--tries",
            "1",
            "--max-new-tokens",
            "20",
            timeout=60,
        )
        assert "using the cadedit server" in other.stderr and other.returncode in (0, 1, 3), other.stderr
        assert "busy" not in other.stderr
        status = _cli("serve", "status", "--json")
        assert '"waiting": 1' in status.stdout and '"busy": false' in status.stdout
        go.set()
        thread.join(120)
        mine = pipeline.edit_branches(
            document, "Fix add.", chosen, branch_factories(3, chosen.sampling), lambda first: False, loaded=local
        )
        assert [c.result.new_text if c.result else c.error.message for c in remote[0]] == [
            c.result.new_text if c.result else c.error.message for c in mine
        ]
        assert [c.logprob for c in remote[0]] == pytest.approx([c.logprob for c in mine], rel=1e-6)

        asked.clear()
        thread, stopped = _branching(
            server.connect(str(tiny_dir)), document, chosen, lambda first: asked.set() or time.sleep(8) or False
        )
        assert asked.wait(60)
        start = time.monotonic()
        stop = _cli("serve", "stop", timeout=60)
        assert stop.returncode == 0 and "stopped the cadedit server" in stop.stderr, stop.stderr
        assert time.monotonic() - start < 8  # not after the client's 8 s test
        thread.join(60)
        assert isinstance(stopped[0], server.ServerError)
        assert "was stopped while this client checked candidate 1" in stopped[0].message


def test_the_server_waits_for_a_clients_answer_only_so_long(held, tiny_dir, sock):
    document = Document.from_bytes(BEFORE, "a.py")
    chosen = EditOptions(model=str(tiny_dir), mode=Mode.VERIFY, max_new_tokens=40)
    with serving(held, sock, answer_timeout=1.0):
        client = server.connect(str(tiny_dir))
        thread, out = _branching(client, document, chosen, lambda first: time.sleep(4) or False)
        thread.join(60)
        assert isinstance(out[0], server.ServerError), out
        assert "waited 1 s for this client's checks of candidate 1" in out[0].message
        assert "--answer-timeout" in out[0].hint
        assert len(client.edit_branches(document, "Fix add.", chosen, 2, lambda first: True)) == 1


def test_a_client_that_finds_the_server_busy_is_told_and_loads_the_model_itself(
    held, tiny_dir, sock, scripted, tmp_path, monkeypatch
):
    """An edit on the server takes long (here its sampler waits): `cadedit fix` says the server is busy
    and for how long, waits SERVER_BUSY_WAIT for it, then loads the model itself and edits."""
    inside, go = threading.Event(), threading.Event()

    def slow(loaded, document, prepared):
        inside.set()
        go.wait(120)
        return scripted(loaded, document, prepared)

    (tmp_path / "b.py").write_bytes(OTHER_BEFORE)
    monkeypatch.chdir(tmp_path)
    with serving(held, sock, make_sampler=slow):
        out: list = []
        thread = threading.Thread(
            target=lambda: out.append(
                server.connect(str(tiny_dir)).edit(Document.from_bytes(BEFORE, "a.py"), "Fix add.", options(tiny_dir))
            ),
            daemon=True,
        )
        thread.start()
        assert inside.wait(60)
        try:
            start = time.monotonic()
            done = _cli(
                "fix",
                "b.py",
                "Fix sub.",
                "--model",
                str(tiny_dir),
                "--dtype",
                "fp32",
                "--threads",
                "1",
                "--mode",
                "verify",
                "--no-scope",
                "--tries",
                "1",
                "--max-new-tokens",
                "20",
                timeout=90,
            )
            waited = time.monotonic() - start
        finally:
            go.set()
        thread.join(60)
    assert re.search(
        r"the cadedit server \(pid \d+\) is busy with another edit \(for \d+ s so far\); waiting up "
        r"to 10 s for it",
        done.stderr,
    ), done.stderr
    assert (
        "still busy after 10 s: loading the model here" in done.stderr and "using the cadedit server" not in done.stderr
    )
    assert done.returncode in (0, 1, 3) and "Traceback" not in done.stderr and waited >= 10
    assert out and out[0].new_text.encode() == AFTER  # the slow edit finished as it would have
