"""The llama.cpp backend: a GGUF run at its own size by llama.cpp's kernels, as a model of the one LM interface.

Contract: LlamaModel(path, threads) loads a GGUF through llama-cpp-python's C API (memory-mapped: no
conversion, no second copy of the weights) and behaves as cadedit.qwen2.Qwen2 does for
cadedit.model.CachedLM: model(ids, cache, keep) feeds ids after the cache's positions and returns
the logits of the last `keep` of them ([keep, vocab], float32), new_cache() gives an empty cache,
and the cache crops (llama_memory_seq_rm) and exports/restores a prefix (llama_state_seq_*) for the
on-disk prefix store. So the decode loop, every mode, grammar masks, forced literals, splices and
drafts are the same code on both backends. The tokenizer is the GGUF's own (cadedit.gguf_file).

One llama.cpp context holds one sequence; several caches of one model take turns (a cache that is
not the context's current one is fed again from its ids when next used).

Build: llama-cpp-python is an optional extra built from source (`pip install 'cadedit[llama]'`,
setup.sh does it). A native build on CPUs with AMX crashes in ggml's AMX matmul at the first
decode, so setup.sh and CI build without AMX (BUILD_FLAGS).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from cadedit.errors import ModelError

EXTRA = "llama"  # pyproject's optional-dependencies entry
BUILD_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
N_BATCH = 512  # tokens per llama_decode call; a longer feed is split
N_CTX = 16384  # the context llama.cpp allocates (KV cache); at most the model's trained context
MAX_OUTPUTS = 64  # logits rows one llama_decode call returns at most (llama.cpp keeps a buffer of this x vocab)

_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
               12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
               32: "BF16"}


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def require():
    """llama_cpp's C API, or a one-line error that says how to install it."""
    try:
        import llama_cpp
    except ImportError:
        raise ModelError("the llama.cpp backend needs llama-cpp-python, which is not installed",
                         hint=f"pip install 'cadedit[{EXTRA}]' (a source build; ./setup.sh does it), or use --backend torch") from None
    return llama_cpp


def version() -> str | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    return getattr(llama_cpp, "__version__", None)


_QUIET = None  # the log callback must outlive every llama.cpp call


def _silence(lib) -> None:
    """llama.cpp logs every load to stderr; cadedit says what matters itself."""
    global _QUIET
    if _QUIET is None:
        _QUIET = lib.llama_log_callback(lambda level, text, data: None)
        lib.llama_log_set(_QUIET, ctypes.c_void_p(0))
        lib.llama_backend_init()


def weights_name(meta: dict) -> str:
    """The GGUF's weight type (Q4_K_M, F16, ...), for messages."""
    kind = meta.get("general.file_type")
    return _FILE_TYPES.get(kind, f"GGUF file type {kind}") if isinstance(kind, int) else "GGUF"


class LlamaCache:
    """The positions one decode has fed; llama.cpp's context holds their keys and values while this
    cache is the model's current one."""

    def __init__(self, model: "LlamaModel"):
        self.model = model
        self.ids: list[int] = []

    @property
    def length(self) -> int:
        return len(self.ids)

    def crop(self, n: int) -> None:
        n = max(0, min(n, len(self.ids)))
        if self.model.current is self and n < len(self.ids):
            self.model.remove_after(n)
        del self.ids[n:]

    def export(self, n: int) -> torch.Tensor:
        """The state of this cache as bytes (a uint8 tensor) for a prefix of its first n positions:
        llama.cpp saves a whole sequence, so restore() crops what lies past the prefix."""
        self.model.take(self)
        return torch.from_numpy(self.model.save_state())

    def restore(self, state: torch.Tensor, ids) -> None:
        """Load a state made by export() and keep its first len(ids) positions; ValueError if it does not fit."""
        if state.dtype != torch.uint8 or state.dim() != 1:
            raise ValueError("prefix state")
        self.model.take(self, replay=False)
        self.ids = []
        self.model.clear()
        if not self.model.load_state(state.numpy()) or self.model.positions() < len(ids):
            self.model.clear()
            raise ValueError("llama.cpp refused the stored state")
        self.model.remove_after(len(ids))
        self.ids = list(ids)


class LlamaModel:
    """A GGUF through llama.cpp, called as cadedit's Qwen2 is: model(ids, cache, keep) -> [keep, V]."""

    def __init__(self, path: Path, meta: dict, threads: int, n_ctx: int = N_CTX, repack: bool = False,
                 flash: bool | None = False):
        lib = self.lib = require()
        _silence(lib)
        from cadedit.gguf_file import architecture, context_length, eos_ids

        arch = architecture(path, meta)
        trained = context_length(path, meta, arch)
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        # Repacking: llama.cpp copies quantised weights into interleaved layouts for its CPU kernels
        # (a second copy in memory, the mapped file's pages aside). It speeds up one-token steps on
        # some CPUs and slows prompts on others: the backend probe measures both (cadedit.model).
        params.use_extra_bufts = repack
        self._model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ModelError(f"{path}: llama.cpp cannot load this GGUF", hint="check the file is a whole Qwen2 GGUF")
        self._ctx = None
        context = lib.llama_context_default_params()
        context.n_ctx = min(n_ctx, trained)
        context.n_batch = context.n_ubatch = N_BATCH
        context.n_seq_max = 1
        context.n_outputs_max = MAX_OUTPUTS
        context.n_threads = context.n_threads_batch = threads
        context.no_perf = True
        context.flash_attn_type = {None: -1, False: 0, True: 1}[flash]  # None: llama.cpp decides
        self._ctx = lib.llama_init_from_model(self._model, context)
        if not self._ctx:
            raise ModelError(f"{path}: llama.cpp cannot make a context of {context.n_ctx} tokens",
                             hint="free some memory, or use --backend torch")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(N_BATCH, 0, 1)
        vocab = lib.llama_model_get_vocab(self._model)
        self.n_vocab = lib.llama_vocab_n_tokens(vocab)
        self.n_ctx = lib.llama_n_ctx(self._ctx)
        self.config = SimpleNamespace(vocab_size=self.n_vocab, max_position_embeddings=self.n_ctx)
        self.device = torch.device("cpu")
        self.folder = path  # the model's identity for the prefix store (cadedit.model)
        self.eos_token_ids = eos_ids(meta)
        self.threads = threads
        self.current: LlamaCache | None = None  # the cache whose positions the context holds

    def __del__(self):
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
        if getattr(self, "_ctx", None):
            lib.llama_free(self._ctx)
        if getattr(self, "_model", None):
            lib.llama_model_free(self._model)

    def new_cache(self) -> LlamaCache:
        return LlamaCache(self)

    def set_threads(self, steps: int, batches: int) -> None:
        self.lib.llama_set_n_threads(self._ctx, steps, batches)

    # -- the context's one sequence --

    def clear(self) -> None:
        self.lib.llama_memory_clear(self._memory, True)

    def remove_after(self, n: int) -> None:
        self.lib.llama_memory_seq_rm(self._memory, 0, n, -1)

    def positions(self) -> int:
        """How many positions the context's sequence holds."""
        return self.lib.llama_memory_seq_pos_max(self._memory, 0) + 1

    def take(self, cache: LlamaCache, replay: bool = True) -> None:
        """Make `cache` the context's current one, feeding its ids again if another held the context."""
        if self.current is cache:
            return
        self.current = cache
        self.clear()
        if replay and cache.ids:
            self._decode(cache.ids, 0, 0)

    def save_state(self) -> np.ndarray:
        size = self.lib.llama_state_seq_get_size(self._ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = self.lib.llama_state_seq_get_data(self._ctx, buffer, size, 0)
        return np.frombuffer(buffer, np.uint8, written).copy()

    def load_state(self, state: np.ndarray) -> bool:
        data = np.ascontiguousarray(state)
        pointer = data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        return self.lib.llama_state_seq_set_data(self._ctx, pointer, data.size, 0) == data.size

    # -- forward --

    def __call__(self, ids: torch.Tensor, cache: LlamaCache, keep: int = 1) -> torch.Tensor:
        tokens = [int(t) for t in ids.tolist()]
        self.take(cache)
        start = len(cache.ids)
        try:
            logits = self._decode(tokens, start, keep)
        except BaseException:
            self.remove_after(start)  # a decode cut short: the cache is what it was before it
            raise
        cache.ids += tokens
        return torch.from_numpy(logits)

    def _decode(self, tokens: list[int], start: int, keep: int) -> np.ndarray:
        """Feed tokens at positions start.., in batches of N_BATCH; the logits of the last `keep`."""
        if start + len(tokens) > self.n_ctx:
            raise ModelError(f"llama.cpp's context of {self.n_ctx} tokens is full ({start} held, {len(tokens)} more)",
                             hint="edit a smaller region, or use --backend torch")
        rows = []
        first_kept = len(tokens) - keep
        batch = self._batch
        for at, stop in _chunks(len(tokens), first_kept):
            chunk = tokens[at:stop]
            outputs = 0
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + at + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                wanted = at + i >= first_kept
                batch.logits[i] = wanted
                outputs += wanted
            batch.n_tokens = len(chunk)
            status = self.lib.llama_decode(self._ctx, batch)
            if status != 0:
                raise ModelError(f"llama.cpp could not run a forward of {len(chunk)} tokens (llama_decode returned "
                                 f"{status})", hint="free some memory, or use --backend torch")
            if outputs:
                pointer = self.lib.llama_get_logits(self._ctx)
                rows.append(np.ctypeslib.as_array(pointer, shape=(outputs, self.n_vocab)).copy())
        if not rows:
            return np.empty((0, self.n_vocab), np.float32)
        return rows[0] if len(rows) == 1 else np.concatenate(rows)


def _chunks(n: int, first_kept: int):
    """(start, stop) of each llama_decode call for n tokens whose logits are kept from first_kept on:
    at most N_BATCH tokens a call, and at most MAX_OUTPUTS kept rows."""
    at = 0
    while at < n:
        stop = min(n, at + N_BATCH)
        if stop > first_kept:
            stop = min(stop, max(first_kept, at) + MAX_OUTPUTS)
        yield at, stop
        at = stop


# The configurations the backend probe compares: name -> (repack, flash attention). Flash attention
# stays off (llama-cpp-python's default): on CPUs it made long-prompt steps and drafts slower
# (README, "llama.cpp backend").
VARIANTS = {"llama": (False, False), "llama-repack": (True, False)}


def edit_work_seconds(path: Path, meta: dict, threads: int, work, repack: bool = False,
                      flash: bool | None = False) -> float:
    """llama.cpp's time for an edit's model work on this GGUF: `work` is ((tokens per forward, forwards), ...),
    each forward timed on the real model after a warm-up (the first touches the mapped weights)."""
    import time

    model = LlamaModel(path, meta, threads, n_ctx=1024, repack=repack, flash=flash)
    cache = model.new_cache()
    filler = [int(t) % model.n_vocab for t in range(1000, 1000 + 768)]
    prefix = 512  # an edit's steps follow a prompt of several hundred tokens
    model(torch.tensor(filler[:prefix]), cache)  # also the warm-up: the first forward touches the mapped weights
    total = 0.0
    for rows, times in work:
        timings = []
        for _ in range(2 if rows > 1 else 5):
            cache.crop(prefix)
            start = time.perf_counter()
            model(torch.tensor(filler[prefix : prefix + rows]), cache)
            timings.append(time.perf_counter() - start)
        total += times * min(timings)
    return total
