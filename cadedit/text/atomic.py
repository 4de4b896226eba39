"""One way to replace a file: write a temporary file in the same folder, then rename it over the target.

Readers see the old file or the new one, never a part; a failure (or an exception from `before_rename`)
removes the temporary file and re-raises, leaving the target as it was. Used for the user's files
(diff.write_atomic adds mode, owner, xattrs and the change checks through `before_rename`) and for
every cache and results file cadedit keeps. Pure: no torch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TEMP_SUFFIX = ".cadedit-tmp"


def replace_file(
    path: str | os.PathLike[str],
    data: bytes | Callable[[BinaryIO], None],
    *,
    durable: bool = False,
    before_rename: Callable[[str], None] | None = None,
    make_parent: bool = False,
) -> None:
    """Write `data` (bytes, or a function that writes to the open file) to `path` atomically.

    durable: fsync the data before the rename (the user's files; caches can be rebuilt).
    before_rename(tmp): a last step on the written temporary file (permissions, checks); raising aborts.
    Raises OSError (the caller words it); the temporary file never outlives the call.
    """
    target = Path(path)
    if make_parent:
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, (bytes, bytearray)):
                f.write(data)
            else:
                data(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if before_rename is not None:
            before_rename(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
