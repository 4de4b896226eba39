"""Prompt prefixes on disk: the KV cache of a prompt's instruction-free part, shared by every cadedit
process of this user, so a second edit of the same file skips prefilling it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cadedit.text.atomic import replace_file
from cadedit.settings import cache_problem, user_cache
from cadedit.backends.llama.llamacpp import version
from cadedit.backends.model_files import weights_identity

if TYPE_CHECKING:
    from cadedit.backends.model import CachedLM, LoadedModel


# -- prompt prefixes on disk ---------------------------------------------------------------------

PREFIX_STORE_BYTES = 2 * 1024**3  # at most this much on disk; the least recently used go first
PREFIX_MIN_TOKENS = (
    32  # a prefix this short or longer loads faster than it prefills (docs/measurements/design-figures.md)
)


class PrefixStore:
    """KV caches of prompt prefixes on disk, shared by every cadedit process of this user.

    An entry is the cache's own record of a token prefix (cadedit.backends.torch.qwen2.KVCache: the key and value
    tensors of every layer; cadedit.backends.llama.llamacpp.LlamaCache: llama.cpp's sequence state), keyed by the model's
    identity (its weight files' paths, sizes and mtimes), the dtype and the prefix ids themselves,
    so a stale entry can never be found. Written to a temporary file and renamed (a reader sees a
    whole entry or none; a file that does not load is deleted and ignored); total size bounded. A
    store, or an entry, that is not this user's own (settings.cache_problem) is neither read nor
    written: another user's KV states would steer the model, and ours would show them the code.
    """

    def __init__(self, root: Path | None = None, limit: int = PREFIX_STORE_BYTES):
        self.root, self.limit = root or user_cache("prefixes"), limit
        self.top = user_cache() if root is None else root  # where the ownership check starts

    def path(self, identity: str, ids: Sequence[int]) -> Path:
        import hashlib

        digest = hashlib.sha256(identity.encode())
        digest.update(b"|" + b",".join(str(i).encode() for i in ids))
        return self.root / f"{digest.hexdigest()[:32]}.kv"

    def load(self, lm: CachedLM, identity: str, ids: Sequence[int]) -> bool:
        """Put the stored cache of exactly `ids` into lm (True), or leave lm as it was (False)."""
        path = self.path(identity, ids)
        if not path.is_file() or cache_problem(path, self.top) is not None:
            return False
        lm.reset()
        try:
            lm.cache.read_prefix(path, ids)
        except Exception:
            lm.reset()
            with contextlib.suppress(OSError):  # a damaged entry goes; in a read-only store it stays, ignored
                path.unlink()
            return False
        lm.ids = list(ids)
        with contextlib.suppress(OSError):  # a store this user may read but not write still serves
            os.utime(path)  # recently used
        return True

    def save(self, lm: CachedLM, identity: str, n: int) -> None:
        """Store the cache of lm's first n ids (once), then keep the store under its size limit."""
        path = self.path(identity, lm.ids[:n])
        if path.is_file() or n > len(lm.ids) or cache_problem(path, self.top) is not None:
            return
        cache = lm.cache
        try:
            replace_file(path, lambda f: cache.write_prefix(f, n), make_parent=True)
        except OSError:  # a store this user may not write: skipped
            return
        self._evict()

    def _evict(self) -> None:
        entries = []
        for entry in self.root.glob("*.kv"):
            with contextlib.suppress(OSError):
                st = entry.stat()
                entries.append((st.st_mtime, st.st_size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries):
            if total <= self.limit:
                break
            with contextlib.suppress(OSError):
                entry.unlink()
                total -= size


def model_identity(loaded: LoadedModel) -> str:
    """What a stored prefix must match: the backend (and llama.cpp's version), the weight and config
    files (path, size, mtime), the dtype, the step weights."""
    backend = loaded.backend
    if backend == "llama":
        backend += f"-{version()}"
    return f"{backend}|{weights_identity(loaded.model, loaded.name, loaded.dtype)}" + (
        f"|{loaded.steps}-steps" if loaded.steps else ""
    )
