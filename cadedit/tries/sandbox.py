"""A candidate in the user's file while a test runs, and the user's bytes back whatever happens.

Contract: Placement(candidate) (a context manager, used by checks.candidate_in_place) puts the
candidate's bytes into the file and the original bytes back afterwards, in place: the same inode,
so hard links, mode (setuid/setgid too), owner, ACLs and xattrs are never touched, and the original
mtime comes back with the original bytes. Before the candidate is written:
- the file is locked for this run (an advisory lock beside the journal): a second cadedit run on
  the same file is refused with a one-line error naming the run that holds it;
- the original is on disk, durably: a journal entry (path, inode, mode, the original's and the
  candidate's bytes) in the user's state folder, fsync'd with its folder;
- a guard process (python -m cadedit.tries.guard) watches this one through a pipe. If cadedit dies by a
  signal it cannot handle (SIGKILL, the OOM killer, SIGQUIT ...), the guard ends the test's process
  group and puts the original back from the journal.
The file is opened once; its identity and bytes are checked through that descriptor, again right
before the candidate is written through it, and the path must still name that inode after the
write: a save that lands while the journal and guard start (in place, or a new file renamed over
it) is never overwritten; the run stops with "changed on disk while cadedit put the candidate in".
Room for the original is reserved past the candidate's end, so a test that fills the disk does not
stop the restore. The restore, too, writes only an inode it has just seen holding what cadedit
left there: the candidate's bytes (whatever inode now has them: a test's `sed -i`), or its own
restore cut short (marked <key>.restoring); the journaled mode comes back before the bytes.
Anything left over (the guard killed too) is given back by recover(): the next cadedit run on that
file, or `cadedit recover`, one line per entry, an entry it cannot handle left for a later try.
Recovery uses only a private folder of this user's and entries this user wrote (owner, not
writable by others), and never creates a file. Over anything else (saved by the user while the
test ran, or gone) nothing is written: the original is kept beside the journal, never over an
earlier kept one, and the message says where. Pure stdlib: the guard imports only this.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cadedit.spawn import python_module

GRACE_S = 1.0  # between SIGTERM and SIGKILL to a test's process group


class SandboxError(Exception):
    """A one-line reason; checks.py turns it into ApplyError."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint


def state_dir() -> Path:
    """cadedit's folder for files that must outlive a run ($XDG_STATE_HOME/cadedit, else ~/.local/state/cadedit)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base, "cadedit", "journal")


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev}-{st.st_ino}"


def _not_private(st: os.stat_result) -> str:
    """Why a journal folder or entry is not this user's to trust ("" when it is): another user's, or
    writable by others (who could plant an entry that recovery would write into any file)."""
    if st.st_uid == os.getuid() and not st.st_mode & 0o022:
        return ""
    return f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"


def _folder_problem(folder: Path) -> str:
    """Why the journal folder may not be used ("" when it may): placement and recovery check it alike."""
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder}: not a folder"
    if why := _not_private(st):
        return f"{folder}: not a private folder of this user ({why})"
    return ""


def _ensure_dir() -> Path:
    folder = state_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if why := _folder_problem(folder):
        raise SandboxError(
            f"{why}; cannot keep the original safe while the test runs",
            hint="remove it, or set XDG_STATE_HOME to a folder of yours",
        )
    return folder


def _forget(journal: Path) -> None:
    """The entry is done with: it and its restore mark go, durably."""
    journal.unlink(missing_ok=True)
    _restoring(journal.parent, journal.name.removesuffix(".json")).unlink(missing_ok=True)
    _fsync_dir(journal.parent)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _read_fd(fd: int) -> bytes:
    """All the bytes of the file open as fd (from offset 0, whatever its position)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def write_fd(fd: int, data: bytes, times_ns: tuple[int, int] | None = None) -> None:
    """Write data into the file open as fd (its own inode, no new file), fsync'd; then set its times if given."""
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)
    os.ftruncate(fd, len(data))
    os.fsync(fd)
    if times_ns is not None:
        os.utime(fd, ns=times_ns)


FALLOC_FL_KEEP_SIZE = 1


def _reserve(fd: int, size: int) -> None:
    """Room for `size` bytes in the file open as fd, past its end with its size unchanged (Linux
    fallocate, FALLOC_FL_KEEP_SIZE): blocks kept for the original while the candidate is in, so that a
    test that fills the disk does not stop the restore halfway. Best effort: a system or filesystem
    without it, or a disk already too full, only loses that guarantee (recovery still finishes a
    restore cut short)."""
    if size <= os.fstat(fd).st_size:
        return
    with contextlib.suppress(AttributeError, OSError):
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
        fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, size)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _at_path(path: Path) -> tuple[int, int] | None:
    """The identity of what the path names now (a symlink is not followed), or None when nothing is."""
    try:
        return _identity(os.lstat(path))
    except OSError:
        return None


class Lock:
    """An advisory lock on one file's journal entry, holding the pid of the run that has it. The lock
    file lives only while a run holds it: release unlinks it before letting go, and acquire checks
    that the file it locked is still the one at the path (else a run that released it in between
    unlinked it, and the lock is taken again on a fresh file), so the folder keeps no file per
    tested inode and two runs never hold locks on two different files of one name."""

    def __init__(self, folder: Path, key: str):
        self.path = folder / f"{key}.lock"
        self.fd: int | None = None

    def acquire(self, wait: float = 0.0) -> bool:
        deadline = time.monotonic() + wait
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            if not _flock(fd, deadline):
                os.close(fd)
                return False
            if _same_file(fd, self.path):
                break
            os.close(fd)  # locked a file its holder unlinked on release: lock the one there now
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return True

    def holder(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            return f"pid {int(self.path.read_text().split()[0])}"
        return "another process"

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):  # still held: no other run can have this file locked
                if _same_file(self.fd, self.path):
                    self.path.unlink()
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def _flock(fd: int, deadline: float) -> bool:
    """An exclusive flock on fd, tried until deadline; False when another process kept it."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                return False
        time.sleep(0.05)


def _same_file(fd: int, path: Path) -> bool:
    """Whether path names the file open as fd."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _entry(path: Path, st: os.stat_result, original: bytes, candidate: bytes) -> dict:
    """What the journal keeps of one placement (in memory: the path as str, the bytes as bytes). The
    candidate's bytes too: a restore cut short (a full disk, a kill) leaves the original's start over
    the candidate's rest, which recovery must recognise as its own to finish it."""
    return {
        "path": str(path),
        "dev": st.st_dev,
        "ino": st.st_ino,
        "mode": st.st_mode & 0o7777,
        "times_ns": [st.st_atime_ns, st.st_mtime_ns],
        "original": original,
        "candidate": candidate,
        "candidate_sha256": hashlib.sha256(candidate).hexdigest(),
        "pid": os.getpid(),
        "created": time.time(),
    }


def _dump(entry: dict) -> bytes:
    return json.dumps(
        {
            **entry,
            "path": base64.b64encode(os.fsencode(entry["path"])).decode(),
            "original": base64.b64encode(entry["original"]).decode(),
            "candidate": base64.b64encode(entry["candidate"]).decode(),
        }
    ).encode()


class ForeignEntry(Exception):
    """A journal entry this user did not write (another user's, or writable by others): never used."""


def _load(journal: Path) -> dict | None:
    """The journal entry (None when it is unreadable or malformed); ForeignEntry when it is not this user's."""
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if why := _not_private(st) or ("" if stat.S_ISREG(st.st_mode) else "not a regular file"):
            raise ForeignEntry(f"{journal}: not a journal entry of this user ({why}); skipped, nothing was written")
        entry = json.loads(_read_fd(fd))
        entry["path"] = os.fsdecode(base64.b64decode(entry["path"]))
        entry["original"] = base64.b64decode(entry["original"])
        if "candidate" in entry:  # entries written before the candidate was kept have only its digest
            entry["candidate"] = base64.b64decode(entry["candidate"])
        return entry
    except (ValueError, KeyError, TypeError, RecursionError):  # malformed (not an OSError: it may hold an original)
        return None
    finally:
        os.close(fd)


RESTORED, KEPT = "restored", "kept"


class _Changed(Exception):
    """What is at the path changed between cadedit's look at it and its write: the write did not happen."""


def _holds_candidate(data: bytes, entry: dict) -> bool:
    if "candidate" in entry:
        return data == entry["candidate"]
    return hashlib.sha256(data).hexdigest() == entry["candidate_sha256"]


def _restoring(folder: Path, key: str) -> Path:
    """The mark that a restore of this entry began: until the entry is forgotten, the file may hold the
    original's start over the candidate's rest (a restore cut short), and recovery finishes it."""
    return folder / f"{key}.restoring"


def _mark_restoring(folder: Path, key: str) -> None:
    # An empty file: it can still be made on a full disk. Not fsync'd: a process that dies leaves it in
    # the page cache; after a power cut without it, a cut-short restore is kept beside the journal, not lost.
    with contextlib.suppress(OSError):
        os.close(os.open(_restoring(folder, key), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))


def _common_prefix(a: bytes, b: bytes) -> int:
    n, step, i = min(len(a), len(b)), 1 << 16, 0
    while i < n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return min(i, n)


def _ours(data: bytes, entry: dict, same_file: bool, folder: Path, key: str) -> bool:
    """Whether the file holds what cadedit left there: the candidate's bytes, or (its own inode, a
    restore begun) a restore cut short: the original's first k bytes over the candidate's rest."""
    if _holds_candidate(data, entry):
        return True
    if not same_file or "candidate" not in entry or not _restoring(folder, key).exists():
        return False
    k = _common_prefix(data, entry["original"])
    return data == entry["original"][:k] + entry["candidate"][k:]


def _restore_inode(fd: int, entry: dict, folder: Path, key: str) -> bool:
    """The original into the inode open (for writing) as fd, if it holds the candidate now; whether it did."""
    data = _read_fd(fd)
    if data == entry["original"] or not _ours(data, entry, True, folder, key):
        return False
    if "mode" in entry and stat.S_IMODE(os.fstat(fd).st_mode) != entry["mode"]:  # the test chmod-ed it
        with contextlib.suppress(OSError):
            os.fchmod(fd, entry["mode"])
    _mark_restoring(folder, key)
    write_fd(fd, entry["original"], tuple(entry["times_ns"]))
    return True


def _restore_path(
    path: Path, entry: dict, seen: os.stat_result, data: bytes, own_mode: bool, folder: Path, key: str
) -> None:
    """The original into the file at path, which was `seen` holding `data`: written only if, right
    before the write, the path still names that inode and it still holds those bytes (a save in
    between, in place or renamed over it, is never overwritten: _Changed). The journaled mode comes
    back first (own_mode: the inode cadedit placed in), so a test that made the file read-only does
    not keep the candidate in it."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if _identity(os.fstat(fd)) != _identity(seen):
            raise _Changed
        if own_mode and "mode" in entry and stat.S_IMODE(seen.st_mode) != entry["mode"]:  # the test chmod-ed it
            with contextlib.suppress(OSError):  # not the owner: the write below says whether it matters
                os.fchmod(fd, entry["mode"])
        out = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if _identity(os.fstat(out)) != _identity(seen) or _read_fd(fd) != data or _at_path(path) != _identity(seen):
                raise _Changed
            _mark_restoring(folder, key)
            write_fd(out, entry["original"], tuple(entry["times_ns"]))
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _look(path: Path) -> tuple[bytes, os.stat_result] | None:
    """The bytes and stat of what is at path now (b"" for anything but a regular file; a symlink is not
    followed), or None when nothing is."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # the file, or a folder on its way, is gone
        return None
    if not stat.S_ISREG(st.st_mode):
        return b"", st
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return _read_fd(fd), os.fstat(fd)
    finally:
        os.close(fd)


def _keep(folder: Path, key: str, original: bytes) -> Path:
    """The original beside the journal, where the message says; never over an earlier run's kept
    original of the same file that the user may not have looked at yet (the same bytes are one file)."""
    for n in range(1000):
        kept = folder / (f"{key}.original" if n == 0 else f"{key}.{n}.original")
        try:
            if kept.read_bytes() == original:
                return kept
        except FileNotFoundError:
            break
    _write_durably(kept, original)
    return kept


def _give_back(entry: dict, folder: Path, key: str, placed: int | None = None) -> tuple[str, str]:
    """Put the journal's original back where the file still holds the candidate (or is gone).
    placed: the live run's own descriptor of the inode it wrote the candidate into (restored first,
    for its hard links, whatever the path names now). Returns (RESTORED | KEPT | "", what happened)."""
    path = Path(entry["path"])
    restored = placed is not None and _restore_inode(placed, entry, folder, key)
    found = _look(path)
    if found is None and placed is None:  # recovery creates no file: the entry alone does not say one belongs there
        kept = _keep(folder, key, entry["original"])
        return KEPT, f"{path}: gone, so nothing was restored; the original is in {kept}"
    if found is None:  # the live run's test deleted the file it had a moment ago: it comes back
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with contextlib.suppress(OSError, KeyError):
                os.fchmod(fd, entry["mode"])
            write_fd(fd, entry["original"], tuple(entry["times_ns"]))
        finally:
            os.close(fd)
        return RESTORED, f"{path}: restored the original (the file was gone)"
    data, st = found
    same_file = _identity(st) == (entry["dev"], entry["ino"])
    if data == entry["original"] and stat.S_ISREG(st.st_mode):
        if restored and same_file:
            return RESTORED, f"{path}: restored the original over the untested candidate"
        return "", ""
    # Exactly the candidate's bytes: what cadedit placed, even under a new inode (a test's `sed -i` or a
    # formatter that always writes renames a copy over it); that inode keeps its own mode and owner.
    if stat.S_ISREG(st.st_mode) and _ours(data, entry, same_file, folder, key):
        with contextlib.suppress(_Changed):
            _restore_path(path, entry, st, data, same_file, folder, key)
            return RESTORED, f"{path}: restored the original over the untested candidate"
    kept = _keep(folder, key, entry["original"])
    what = "its new bytes were kept" if stat.S_ISREG(st.st_mode) else "what is there now was left alone"
    return KEPT, f"{path}: changed while the test ran, so {what}; the original is in {kept}"


SKIPPED, FAILED = "skipped", "failed"


@dataclass(frozen=True)
class Recovery:
    """What recovery did with one journal entry: RESTORED, KEPT (the file changed; the original kept
    beside the journal), SKIPPED (not this user's entry: nothing written) or FAILED (an error; the
    entry stays for a later try), and in words."""

    kind: str
    said: str


def recover(journal: Path, wait: float = 0.0) -> Recovery | None:
    """Give back one journal entry whose run is gone (its lock free); None when there was nothing to do
    or its run is still alive. Only an entry of this user in a private folder of theirs is used: one
    planted by someone else is skipped, with a note."""
    folder, key = journal.parent, journal.name.removesuffix(".json")
    if why := _folder_problem(folder):
        return Recovery(SKIPPED, f"{why}; its journal entries were not used")
    entry = None
    lock = Lock(folder, key)
    try:
        _load(journal)
        if not lock.acquire(wait):
            return None
        entry = _load(journal)  # again, now that no run can be writing it
        if entry is None:
            _forget(journal)
            return None
        kind, said = _give_back(entry, folder, key)
        _forget(journal)
        return Recovery(kind, said) if said else None
    except ForeignEntry as exc:
        return Recovery(SKIPPED, str(exc))
    except OSError as exc:  # this entry only: the others are still recovered
        where = entry["path"] if entry is not None else journal
        return Recovery(
            FAILED,
            f"{where}: cannot give the original back now ({exc.strerror or exc}); it stays in the journal ({journal})",
        )
    finally:
        lock.release()


def recover_all() -> list[Recovery]:
    """Every journal entry left by a run that died: given back (`cadedit recover`)."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    if why := _folder_problem(folder):
        return [Recovery(SKIPPED, f"{why}; its journal entries were not used")]
    return [done for journal in sorted(folder.glob("*.json")) if (done := recover(journal))]


def recover_file(path: str | os.PathLike[str]) -> Recovery | None:
    """The journal entry of this file, if a run that died left one (each cadedit run checks its files)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    journal = state_dir() / f"{_key(st)}.json"
    return recover(journal) if journal.is_file() else None


def held_by(path: str | os.PathLike[str]) -> str | None:
    """Who has a candidate in this file right now ("pid N"), or None: what the file holds now is not
    its user's text while another cadedit run tests in it. A folder that is not this user's own
    says nothing (its locks could be anyone's)."""
    try:
        folder = state_dir()
        lock = Lock(folder, _key(os.stat(path)))
        if _folder_problem(folder) or not lock.path.exists():
            return None
        if lock.acquire():
            lock.release()
            return None
        return lock.holder()
    except OSError:
        return None


CHANGED_WHILE_PLACING = (
    "changed on disk while cadedit put the candidate in; what was saved is left as it is and the test was not run"
)


class Placement:
    """The candidate's bytes in the file while the block runs (see the module docstring)."""

    def __init__(self, path: Path, original: bytes, new: bytes, st: os.stat_result, mtime_ns: int):
        self.path, self.original, self.new, self.st, self.mtime_ns = path, original, new, st, mtime_ns
        self.guard: subprocess.Popen | None = None
        self.lock: Lock | None = None
        self.journal: Path | None = None
        self.entry: dict | None = None
        self.fd: int | None = None  # the file, opened once: every check and write goes through it
        self.placed = False

    def _unchanged(self) -> bool:
        """Whether the path still names the inode cadedit read, and that inode still holds its bytes and mtime."""
        st = os.fstat(self.fd)
        return (
            _identity(st) == _identity(self.st) == _at_path(self.path)
            and (st.st_size, st.st_mtime_ns) == (self.st.st_size, self.st.st_mtime_ns)
            and _read_fd(self.fd) == self.original
        )

    def begin(self) -> None:
        folder = _ensure_dir()
        self.fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        if not self._unchanged():
            raise SandboxError(
                f"{self.path}: changed on disk since cadedit read it; the test was not run",
                hint="run cadedit again on the current file",
            )
        key = _key(self.st)
        self.lock = Lock(folder, key)
        if not self.lock.acquire():
            holder = self.lock.holder()
            self.lock = None
            raise SandboxError(
                f"{self.path}: another cadedit run ({holder}) has a candidate in this file; the test was not run",
                hint="wait for it to finish, then run cadedit again",
            )
        journal = folder / f"{key}.json"
        if journal.exists():  # left by a run that died after this one read the file
            try:
                entry = _load(journal)
            except ForeignEntry as exc:
                raise SandboxError(f"{exc}; the test was not run", hint="remove it") from None
            said = _give_back(entry, folder, key)[1] if entry is not None else ""
            _forget(journal)
            raise SandboxError(
                f"{self.path}: a killed cadedit run had left a candidate in this file"
                + (f" ({said})" if said else "")
                + "; the test was not run",
                hint="run cadedit again on the file as it is now",
            )
        self.entry = _entry(self.path, self.st, self.original, self.new)
        _restoring(folder, key).unlink(missing_ok=True)  # a mark no entry owns says nothing about this one
        _write_durably(journal, _dump(self.entry))
        self.journal = journal
        self.guard = subprocess.Popen(
            python_module("cadedit.tries.guard", str(journal)),  # the user's folder on no path of it
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._place()

    def _place(self) -> None:
        """The candidate into the inode open as self.fd, unless the user saved since cadedit read the file:
        the journal and the guard took time, so it is compared again right before the write, and after
        it the path must still name this inode (a save renamed over it during the write keeps its bytes)."""
        times = (self.st.st_atime_ns, self.st.st_mtime_ns)
        if not self._unchanged():
            raise SandboxError(f"{self.path}: {CHANGED_WHILE_PLACING}", hint="run cadedit again on the current file")
        self.placed = True  # from here on the inode may hold (part of) the candidate
        try:
            write_fd(self.fd, self.new, (self.st.st_atime_ns, self.mtime_ns))
            _reserve(self.fd, len(self.original))
            if _at_path(self.path) != _identity(self.st):
                raise SandboxError(
                    f"{self.path}: {CHANGED_WHILE_PLACING}", hint="run cadedit again on the current file"
                )
        except BaseException:
            write_fd(self.fd, self.original, times)  # this inode only: what now has the path is the user's
            self.placed = False
            raise

    def watch(self, pgid: int) -> None:
        """The test's process group: the guard ends it if cadedit dies."""
        if self.guard is not None and self.guard.stdin is not None:
            with contextlib.suppress(OSError):
                self.guard.stdin.write(f"pgid {pgid}\n".encode())
                self.guard.stdin.flush()

    def end(self) -> str:
        """Put the original back (only over the candidate); "" or what happened instead, in words."""
        said = ""
        try:
            if self.placed:
                kind, said = _give_back(
                    self.entry, self.journal.parent, self.journal.name.removesuffix(".json"), placed=self.fd
                )
                said = said if kind == KEPT else ""
            if self.journal is not None:
                _forget(self.journal)
        finally:
            if self.guard is not None:
                with contextlib.suppress(OSError):
                    self.guard.stdin.write(b"done\n")
                    self.guard.stdin.close()
                self.guard.wait()
            if self.lock is not None:
                self.lock.release()
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        return said


def end_group(pgid: int) -> None:
    """SIGTERM to a process group, SIGKILL after a grace (the guard's and checks.py's way to end a test)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
