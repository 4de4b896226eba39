"""`--test` never costs the user's file: a candidate goes into the file's own inode (journaled,
locked, guarded: cadedit.tries.sandbox) and the original comes back whatever kills cadedit; a second run
on the file is refused; a save made during the test is kept; nothing but the bytes changes.

Through the real `cadedit fix` process (tests/test_tries_cli's driver spells a scripted answer with
the tiny model) and `cadedit recover`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import console_script
from tests.test_checks import alive, gone_soon
from tests.test_tries_cli import BEFORE, GOOD, INSTRUCTION, start_cadedit, wait_for, work  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SLEEPING_TEST = "echo $$ > ../pid; touch started; exec sleep 30"


def journal_dir() -> Path:
    return Path(os.environ["HOME"]) / ".local" / "state" / "cadedit" / "journal"


def until(condition, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def guards() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"cadedit.tries.guard" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def killed_with_its_guard(work: Path, tiny_dir: Path) -> subprocess.Popen:
    """A cadedit run killed during its test together with its guard and the test: what a machine that
    went down would leave (the candidate in the file, the journal entry)."""
    proc = start_cadedit(work, tiny_dir, "--test", SLEEPING_TEST)
    wait_for(work / "started", proc)
    for pid in guards():
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate(timeout=30)
    os.kill(int((work.parent / "pid").read_text()), signal.SIGKILL)
    return proc


def cadedit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([console_script(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "signum",
    [signal.SIGKILL, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM],
    ids=["SIGKILL", "SIGQUIT", "SIGUSR1", "SIGALRM"],
)
def test_cadedit_killed_during_the_test_gets_the_original_back_and_ends_the_test(work, tiny_dir, signum):
    inode = (work / "a.py").stat().st_ino
    proc = start_cadedit(work, tiny_dir, "--test", SLEEPING_TEST)
    wait_for(work / "started", proc)
    assert (work / "a.py").read_bytes() == GOOD.encode()
    assert list(journal_dir().glob("*.json"))  # the original is on disk before the candidate is
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signum
    assert until(lambda: (work / "a.py").read_bytes() == BEFORE), "the guard did not give the original back"
    assert (work / "a.py").stat().st_ino == inode
    assert b"restored the original over the untested candidate" in err  # the guard says so on cadedit's stderr
    assert gone_soon(int((work.parent / "pid").read_text()), within=15.0)  # the test did not outlive cadedit
    assert until(lambda: not list(journal_dir().glob("*.json")))


def test_a_run_whose_guard_died_too_is_given_back_by_the_next_run_or_recover(work, tiny_dir):
    proc = killed_with_its_guard(work, tiny_dir)
    assert (work / "a.py").read_bytes() == GOOD.encode()  # what a killed machine would leave
    entries = list(journal_dir().glob("*.json"))
    assert len(entries) == 1 and json.loads(entries[0].read_text())["pid"] == proc.pid
    done = cadedit("recover", cwd=work)
    assert done.returncode == 0 and "a.py: restored the original over the untested candidate" in done.stderr
    assert (work / "a.py").read_bytes() == BEFORE and not list(journal_dir().glob("*.json"))
    assert "nothing to recover" in cadedit("recover", cwd=work).stderr


def test_the_next_fix_of_the_file_gives_the_original_back_first(work, tiny_dir):
    killed_with_its_guard(work, tiny_dir)
    (work / "started").unlink()
    again = start_cadedit(work, tiny_dir, "--tries", "1")
    out, err = again.communicate(timeout=120)
    assert b"restored the original over the untested candidate (left by a cadedit run that was killed" in err, err
    assert again.returncode == 0 and b"-    return a - b" in out  # the diff is against the user's original


def test_a_second_run_on_the_same_file_is_refused_while_the_first_tests(work, tiny_dir):
    first = start_cadedit(work, tiny_dir, "--test", SLEEPING_TEST)
    wait_for(work / "started", first)
    second = start_cadedit(work, tiny_dir, "--test", "true", "--tries", "1")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 1, err
    assert f"a.py: another cadedit run (pid {first.pid}) has a candidate in this file".encode() in err
    assert b"Traceback" not in err
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=30)
    assert (work / "a.py").read_bytes() == BEFORE


def test_a_save_made_while_the_test_runs_is_kept_and_said(work, tiny_dir):
    proc = start_cadedit(work, tiny_dir, "--test", "touch started; sleep 2", "--write")
    wait_for(work / "started", proc)
    (work / "a.py").write_bytes(b"# the user's newer text\n")  # an editor saving in place
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert b"a.py: changed while the test ran, so its new bytes were kept; the original is in" in err
    assert (work / "a.py").read_bytes() == b"# the user's newer text\n"
    kept = Path(err.decode().split("the original is in ", 1)[1].split()[0])
    assert kept.read_bytes() == BEFORE


# An editor that saves at the worst moment: when cadedit's journal entry lands (inotify), it stops
# cadedit (SIGSTOP, so the save is inside the window between the journal and the candidate's write,
# whatever the machine's load), saves a.py (a new file renamed over it, or in place), and lets it go on.
EDITOR = textwrap.dedent("""\
    import ctypes, os, signal, struct, sys
    journal, pidfile, target, how = sys.argv[1:5]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    os.makedirs(journal, mode=0o700, exist_ok=True)
    assert libc.inotify_add_watch(fd, journal.encode(), 0x80) >= 0  # IN_MOVED_TO
    open(pidfile + ".ready", "w").close()
    while True:
        buf, i = os.read(fd, 4096), 0
        while i < len(buf):
            _, _, _, size = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + size].rstrip(b"\\0")
            i += 16 + size
            if name.endswith(b".json"):
                pid = int(open(pidfile).read())
                os.kill(pid, signal.SIGSTOP)
                if how == "in place":
                    with open(target, "r+b") as f:
                        f.write(b"# saved by the user\\n")
                        f.truncate()
                else:
                    with open(target + ".swp", "wb") as f:
                        f.write(b"# saved by the user\\n")
                    os.replace(target + ".swp", target)
                os.kill(pid, signal.SIGCONT)
                sys.exit(0)
""")


@pytest.mark.parametrize("how", ["renamed over it", "in place"])
def test_a_save_as_the_candidate_goes_in_is_never_overwritten(work, tiny_dir, how):
    pidfile = work.parent / "cadedit.pid"
    (work.parent / "editor.py").write_text(EDITOR)
    editor = subprocess.Popen(
        [sys.executable, str(work.parent / "editor.py"), str(journal_dir()), str(pidfile), str(work / "a.py"), how]
    )
    assert until(lambda: Path(f"{pidfile}.ready").exists() or editor.poll() is not None), "the editor did not start"
    proc = start_cadedit(work, tiny_dir, "--test", "exit 1", "--tries", "1", "--write")
    pidfile.write_text(str(proc.pid))
    _, err = proc.communicate(timeout=120)
    assert editor.wait(timeout=30) == 0, "the editor never saw the journal entry"
    assert (work / "a.py").read_bytes() == b"# saved by the user\n"  # the save is in the file, not the candidate
    assert proc.returncode == 1, err
    # Stopped in the window (the usual case), cadedit says it placed nothing; stopped after the write
    # (a slow editor), the restore keeps the save: either way a one-line error, the saved bytes kept.
    assert (
        b"a.py: changed on disk while cadedit put the candidate in; what was saved is left as it is and the "
        b"test was not run"
        in err
        or b"a.py: changed while the test ran, so its new bytes were kept" in err
    ), err
    assert b"Traceback" not in err and not list(journal_dir().glob("*.json"))


def test_a_test_run_changes_nothing_but_the_bytes_for_its_duration(work, tiny_dir):
    """Inode (hard links), mode with setuid/setgid, xattrs and mtime are the original's afterwards."""
    path = work / "a.py"
    os.link(path, work.parent / "hardlink.py")
    path.chmod(0o6755)
    try:
        os.setxattr(path, "user.cadedit-test", b"kept")
    except OSError:
        pytest.skip("no user xattrs on this filesystem")
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = path.stat()
    proc = start_cadedit(work, tiny_dir, "--test", "grep -q 'a + b' a.py", "--tries", "1")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    after = path.stat()
    assert (after.st_ino, after.st_nlink, after.st_mode, after.st_mtime_ns) == (
        before.st_ino,
        2,
        before.st_mode,
        before.st_mtime_ns,
    )
    assert os.getxattr(path, "user.cadedit-test") == b"kept"
    assert path.read_bytes() == BEFORE == (work.parent / "hardlink.py").read_bytes()


def test_no_guard_or_journal_outlives_a_normal_run(work, tiny_dir):
    proc = start_cadedit(work, tiny_dir, "--test", "grep -q 'a + b' a.py", "--write")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert (work / "a.py").read_bytes() == GOOD.encode()
    assert not list(journal_dir().glob("*.json")) and until(lambda: not guards(), 5.0)


def test_the_journal_folder_keeps_no_file_per_tested_file_after_runs_end(work, tiny_dir):
    """Each run's lock goes with it: an editor's save (a new inode) before every run does not grow the
    folder, whether the test passed, failed or a second run was refused meanwhile."""
    for test in ("true", "exit 1"):
        (work / "new.py").write_bytes(BEFORE)
        (work / "new.py").replace(work / "a.py")  # a new inode, as an editor's save makes
        proc = start_cadedit(work, tiny_dir, "--test", test, "--tries", "1")
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 3), err
        assert list(journal_dir().iterdir()) == [], err
    first = start_cadedit(work, tiny_dir, "--test", SLEEPING_TEST)
    wait_for(work / "started", first)
    assert [p.suffix for p in journal_dir().iterdir()] in ([".json", ".lock"], [".lock", ".json"])
    second = start_cadedit(work, tiny_dir, "--test", "true", "--tries", "1")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 1 and b"another cadedit run" in err, err
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=30)
    assert list(journal_dir().iterdir()) == [] and (work / "a.py").read_bytes() == BEFORE


def test_ctrl_c_as_the_test_starts_never_leaves_it_running(work, tiny_dir):
    """Ctrl-C arriving while the test's shell is being started: the shell is ended, not orphaned."""
    for delay in (0.0, 0.01, 0.05):
        (work / "a.py").write_bytes(BEFORE)
        marker = work.parent / "pid"
        marker.unlink(missing_ok=True)
        proc = start_cadedit(work, tiny_dir, "--test", "echo $$ > ../pid; sleep 30")
        deadline = time.monotonic() + 90
        while (work / "a.py").read_bytes() == BEFORE and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert (work / "a.py").read_bytes() == BEFORE
        if marker.exists() and marker.read_text().strip():
            assert gone_soon(int(marker.read_text()), within=5.0)


# A test command no other process runs: the fuzz below finds any survivor by it in /proc.
SURVIVOR = "sleep 37.19"


def running(command: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            try:
                if (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip() == command.encode():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_signals_at_random_moments_during_the_test_never_cost_the_file(work, tiny_dir):
    """SIGINT, SIGTERM, SIGKILL or SIGQUIT at a random moment of a `--test` run (as the candidate goes
    in, as the test starts, while it runs): afterwards the file holds the original bytes (at once, or
    after the guard or `cadedit recover` gives them back) and no test process is left. Seeded: the
    same 6 moments every run, each signal at least once."""
    import random

    rng = random.Random(19)
    signals = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGQUIT, signal.SIGKILL, signal.SIGINT]
    rng.shuffle(signals)
    moments = []
    for signum in signals:
        anchor = rng.choice(["placed", "started"])  # placed: within 50 ms of the candidate going in
        moments.append((signum, anchor, rng.uniform(0.0, 0.05 if anchor == "placed" else 0.25)))
    for signum, anchor, delay in moments:
        (work / "a.py").write_bytes(BEFORE)
        (work / "started").unlink(missing_ok=True)
        proc = start_cadedit(work, tiny_dir, "--test", f"touch started; exec {SURVIVOR}", "--write")
        if anchor == "placed":  # from the moment the candidate is in the file (the placement, the Popen)
            assert until(lambda: (work / "a.py").read_bytes() != BEFORE or proc.poll() is not None, 90)
        else:
            wait_for(work / "started", proc)
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        moment = (signal.Signals(signum).name, anchor, round(delay, 3), proc.returncode, err.decode()[-600:])
        assert proc.returncode != 0, moment  # the test never ends by itself
        if not until(lambda: (work / "a.py").read_bytes() == BEFORE, 10):
            done = cadedit("recover", cwd=work)
            assert done.returncode == 0, (moment, done.stderr)
        assert (work / "a.py").read_bytes() == BEFORE, moment
        assert until(lambda: not running(SURVIVOR), 10), moment
        assert until(lambda: not list(journal_dir().glob("*.json")), 10), moment
        assert b"Traceback" not in err, moment


# -- recovery trusts only this user's own journal ------------------------------------------------


def plant(path: Path, original: bytes, key: str = "1-1", holds: bytes = b"") -> Path:
    """A journal entry as someone else could write it into a shared state folder: recovery would put
    `original` into `path` where the file holds `holds` (or create it)."""
    import base64
    import hashlib

    folder = journal_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    entry = folder / f"{key}.json"
    entry.write_text(
        json.dumps(
            {
                "path": base64.b64encode(os.fsencode(path)).decode(),
                "dev": 1,
                "ino": 1,
                "mode": 0o600,
                "times_ns": [0, 0],
                "original": base64.b64encode(original).decode(),
                "candidate_sha256": hashlib.sha256(holds).hexdigest(),
                "pid": 999999,
                "created": time.time(),
            }
        )
    )
    return entry


def as_another_user(entry: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(entry, 4243, 4243)


@pytest.mark.parametrize("whose", ["another user's", "writable by others"])
def test_recover_never_writes_a_file_on_a_foreign_entrys_word(work, whose):
    target = work / "authorized_keys"
    entry = plant(target, b"ssh-ed25519 AAAAplanted attacker\n")
    as_another_user(entry) if whose == "another user's" else entry.chmod(0o666)
    done = cadedit("recover", cwd=work)
    assert done.returncode == 0, done.stderr
    assert f"cadedit: {entry}: not a journal entry of this user (owner uid" in done.stderr
    assert "skipped, nothing was written" in done.stderr and "Traceback" not in done.stderr
    assert not target.exists() and entry.exists()  # nothing created, and someone else's file not removed


def test_recover_never_uses_a_journal_folder_others_may_write(work):
    target = work / "authorized_keys"
    plant(target, b"ssh-ed25519 AAAAplanted attacker\n")
    journal_dir().chmod(0o777)
    done = cadedit("recover", cwd=work)
    assert done.returncode == 0, done.stderr
    assert (
        f"cadedit: {journal_dir()}: not a private folder of this user (owner uid {os.getuid()}, mode 0777); its "
        "journal entries were not used" in " ".join(done.stderr.split())
    )
    assert not target.exists()


def test_the_recovery_a_fix_runs_first_skips_a_foreign_entry_of_its_file(work, tiny_dir):
    st = (work / "a.py").stat()
    entry = plant(work / "a.py", b"import os; os.system('planted')\n", key=f"{st.st_dev}-{st.st_ino}", holds=BEFORE)
    entry.chmod(0o646)
    proc = start_cadedit(work, tiny_dir, "--tries", "1")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"cadedit: {entry}: not a journal entry of this user".encode() in err
    assert (work / "a.py").read_bytes() == BEFORE


def test_recover_drops_a_malformed_entry_also_one_nested_too_deeply(work):
    folder = journal_dir()
    folder.mkdir(mode=0o700, parents=True)
    for key, text in (("1-1", "[" * 100_000), ("1-2", "{not json")):
        (folder / f"{key}.json").write_text(text)
        (folder / f"{key}.json").chmod(0o600)
    done = cadedit("recover", cwd=work)
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
    assert list(folder.iterdir()) == []


def test_recovery_creates_no_file_that_is_gone(work):
    target = work / "gone.py"
    plant(target, b"def f():\n    pass\n")  # this user's own entry, of a file deleted since
    done = cadedit("recover", cwd=work)
    assert done.returncode == 0, done.stderr
    assert f"cadedit: {target}: gone, so nothing was restored; the original is in" in done.stderr
    assert not target.exists() and not list(journal_dir().glob("*.json"))
    kept = Path(done.stderr.split("the original is in ", 1)[1].split()[0])
    assert kept.read_bytes() == b"def f():\n    pass\n"


@pytest.mark.parametrize("stale", ["its folder is gone", "its path cannot be looked up"])
def test_recover_gives_back_every_entry_whatever_one_stale_entry_does(work, tiny_dir, stale):
    """A killed run's entry for a.py, and before it (0-0 sorts first) an entry of a checkout deleted
    since, or one whose path the system refuses (a name too long): a.py still gets its original back,
    each entry has its line, and only an entry that could not be handled stays (exit 1)."""
    gone = work / "ci-checkout" / "b.py" if stale == "its folder is gone" else work / ("x" * 300) / "b.py"
    plant(gone, b"def g():\n    pass\n", key="0-0")
    killed_with_its_guard(work, tiny_dir)
    assert (work / "a.py").read_bytes() == GOOD.encode()
    done = cadedit("recover", cwd=work)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert f"cadedit: {work / 'a.py'}: restored the original over the untested candidate" in done.stderr
    assert (work / "a.py").read_bytes() == BEFORE
    if stale == "its folder is gone":
        assert done.returncode == 0, done.stderr
        assert f"cadedit: {gone}: gone, so nothing was restored; the original is in" in done.stderr
        assert not gone.parent.exists() and not list(journal_dir().glob("*.json"))
    else:
        assert done.returncode == 1, done.stderr
        assert (
            f"cadedit: {gone}: cannot give the original back now (File name too long); it stays in the "
            f"journal ({journal_dir() / '0-0.json'})" in " ".join(done.stderr.split())
        )
        assert [p.name for p in journal_dir().glob("*.json")] == ["0-0.json"]


def as_a_plain_user() -> list[str]:
    """A command prefix that runs as this user without root's right to write any file (root without
    CAP_DAC_OVERRIDE/FOWNER), so that a read-only mode holds as it does for everyone else."""
    if os.getuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv to drop root's override of file modes")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]


def test_recover_puts_the_mode_back_before_the_bytes_of_a_file_the_test_made_read_only(work, tiny_dir):
    proc = start_cadedit(work, tiny_dir, "--test", "chmod a-w a.py; " + SLEEPING_TEST)
    wait_for(work / "started", proc)
    for pid in guards():
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate(timeout=30)
    os.kill(int((work.parent / "pid").read_text()), signal.SIGKILL)
    assert (work / "a.py").read_bytes() == GOOD.encode() and (work / "a.py").stat().st_mode & 0o777 == 0o444
    done = subprocess.run(
        [*as_a_plain_user(), console_script(), "recover"], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "a.py: restored the original over the untested candidate" in done.stderr
    assert (work / "a.py").read_bytes() == BEFORE and (work / "a.py").stat().st_mode & 0o777 == 0o644


def test_a_test_that_rewrites_the_candidates_bytes_under_a_new_inode_still_gets_the_original_back(work, tiny_dir):
    """`sed -i`, `perl -pi` or a formatter that always writes: the same bytes renamed over the file. It
    holds exactly the candidate, so the original comes back, into that new inode (its own mode stays)."""
    inode = (work / "a.py").stat().st_ino
    proc = start_cadedit(
        work, tiny_dir, "--test", "cp a.py b.tmp && chmod 600 b.tmp && mv b.tmp a.py; exit 1", "--tries", "1"
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err  # the candidate failed its test; nothing else went wrong
    assert b"changed while the test ran" not in err
    after = (work / "a.py").stat()
    assert (work / "a.py").read_bytes() == BEFORE
    assert after.st_ino != inode and after.st_mode & 0o777 == 0o600
    assert not [p for p in journal_dir().iterdir() if p.suffix in (".json", ".original")]  # none left behind


def test_recover_finishes_a_restore_that_was_cut_short(work, tiny_dir):
    """The disk fills (here: the test caps cadedit's file size, as a full disk would stop the write)
    while the original goes back: the file is left as the original's first 100 bytes. The run says so;
    `cadedit recover` knows its own half-written restore and finishes it."""
    original = b'"""Adds two numbers."""\n' * 12 + BEFORE
    (work / "a.py").write_bytes(original)
    cap = (
        f"{sys.executable} -c 'import resource, sys; resource.prlimit(int(sys.argv[1]), resource.RLIMIT_FSIZE, "
        f"(100, 100))' $PPID; exit 1"
    )
    proc = start_cadedit(work, tiny_dir, "--test", cap, "--tries", "1")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert (
        b"a.py: cannot restore it after the test (File too large); it may hold the candidate or a cut-short "
        b"original until then, the original is kept in" in b" ".join(err.split())
    )
    assert (work / "a.py").read_bytes() == original[:100]  # what a full disk leaves
    done = cadedit("recover", cwd=work)
    assert done.returncode == 0, done.stderr
    assert "a.py: restored the original over the untested candidate" in done.stderr
    assert (work / "a.py").read_bytes() == original
    assert not [p for p in journal_dir().iterdir() if p.suffix in (".json", ".original", ".restoring")]


def test_a_test_that_fills_the_disk_does_not_stop_the_restore(work, tiny_dir, tmp_path):
    """Room for the original is kept while the candidate is in (blocks past its end): a test that fills
    the disk with its output leaves no room to take, and the original (much larger than the candidate)
    comes back at once. A 1 MiB tmpfs as the full disk (root only)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        os.getuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        folder = disk / "work"
        folder.mkdir()
        original = BEFORE + b"#" + b" " * 4500 + b"\n"  # a page more than the candidate, in few tokens
        (folder / "a.py").write_bytes(original)
        proc = start_cadedit(folder, tiny_dir, "--test", "cat /dev/zero > ../filler; exit 1", "--tries", "1")
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, err
        assert (folder / "a.py").read_bytes() == original
        assert b"cannot restore" not in err
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_an_original_kept_beside_the_journal_is_never_replaced_by_a_later_one(work, tiny_dir):
    """Two runs whose tests each rewrite a.py keep two originals: the second never overwrites the first."""
    kept = []
    for saved in (b"# the first save\n", b"# the second save\n"):
        proc = start_cadedit(
            work, tiny_dir, "--test", f"printf '{saved.decode().strip()}\\n' > a.py; exit 1", "--tries", "1"
        )
        before = (work / "a.py").read_bytes()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1 and (work / "a.py").read_bytes() == saved, err
        kept.append((Path(err.decode().split("the original is in ", 1)[1].split()[0]), before))
    (first, first_bytes), (second, second_bytes) = kept
    assert first != second and first.read_bytes() == first_bytes == BEFORE
    assert second.read_bytes() == second_bytes == b"# the first save\n"


def test_a_fix_stops_when_its_files_leftover_candidate_cannot_be_given_back(work, tiny_dir):
    """What a.py holds may be a killed run's candidate: if its original cannot be put back now, the fix
    does not take that for the user's text, and says why in one line."""
    st = (work / "a.py").stat()
    entry = plant(work / ("x" * 300) / "a.py", b"the original\n", key=f"{st.st_dev}-{st.st_ino}", holds=BEFORE)
    proc = start_cadedit(work, tiny_dir, "--tries", "1", "--write")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert b"cannot give the original back now (File name too long); it stays in the journal" in err
    assert b"; nothing was done" in err and b"Traceback" not in err
    assert (work / "a.py").read_bytes() == BEFORE and entry.exists()
