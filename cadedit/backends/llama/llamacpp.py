"""The llama.cpp backend: a GGUF run at its own size by llama.cpp's kernels, as a model of the one LM interface.

Contract: LlamaModel(path, threads) loads a GGUF through llama-cpp-python's C API (memory-mapped: no
conversion, no second copy of the weights) and behaves as cadedit.backends.torch.qwen2.Qwen2 does for
cadedit.backends.model.CachedLM: model(ids, cache, keep) feeds ids after the cache's positions and returns
the logits of the last `keep` of them ([keep, vocab], a float32 numpy array, valid until the model's next
forward: the decode loop reads each forward's rows before it makes the next), new_cache() gives an empty cache,
and the cache crops (llama_memory_seq_rm) and exports/restores a prefix (llama_state_seq_*) for the
on-disk prefix store. So the decode loop, every mode, grammar masks, forced literals, splices and
drafts are the same code on both backends. The tokenizer is the GGUF's own (cadedit.backends.llama.gguf_file).
Nothing here imports torch: a process on this backend never loads it.

One llama.cpp context holds one decode; several caches of one model take turns (a cache that is
not the context's current one is fed again from its ids when next used). Candidates decoded side by
side are sequence ids of that context (at most MAX_ROWS, one unified KV cache, so the prompt's
cells are shared, never copied): copy() makes one with llama_memory_seq_cp, and one llama_batch
carries every row's tokens, each with its own sequence id and positions.

Build: llama-cpp-python is an optional extra built from source (`pip install 'cadedit[llama]'`,
setup.sh does it). A native build on CPUs with AMX crashes in ggml's AMX matmul at the first
decode, so setup.sh and CI build without AMX (BUILD_FLAGS).
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from cadedit.errors import ModelError
from cadedit.settings import MAX_CANDIDATES, READ_BRANCHES
from cadedit.backends.llama.gguf_file import architecture, context_length, eos_ids

EXTRA = "llama"  # pyproject's optional-dependencies entry
BUILD_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
N_BATCH = 512  # tokens per llama_decode call; a longer feed is split
N_CTX = 16384  # the context llama.cpp allocates (KV cache); at most the model's trained context
MAX_OUTPUTS = 256  # logits rows one llama_decode call of one sequence returns at most (a buffer of this x vocab)
# Sequences the context holds: candidates decoded side by side (cadedit.decode.loop.decode_rows), a later
# try's branches at the reading's tokens (settings.READ_BRANCHES) beside the most --candidates asks.
MAX_ROWS = MAX_CANDIDATES + READ_BRANCHES
ROW_OUTPUTS = 128  # logits rows one llama_decode call of several sequences returns at most
# A forward's logits are copied out of llama.cpp into one buffer the model keeps and reuses, grown to the
# most rows a forward has kept up to KEPT_ROWS (151,936 floats a row for Qwen: 156 MB at most): a fresh
# array per forward would be tens of megabytes of new pages each time, which the kernel faults in one
# by one. A forward that keeps more (several candidates' drafts together) gets a fresh array.
KEPT_ROWS = MAX_OUTPUTS + 1  # a verify forward's draft and its pending token

_FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}


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
        raise ModelError(
            "the llama.cpp backend needs llama-cpp-python, which is not installed",
            hint=f"pip install 'cadedit[{EXTRA}]' (a source build; ./setup.sh does it), or use --backend torch",
        ) from None
    return llama_cpp


def version() -> str | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    return getattr(llama_cpp, "__version__", None)


def build() -> str:
    """llama-cpp-python's version and the CPU features its llama.cpp was built for ("AVX2 = 1 | AVX512
    = 0 | ..."): a rebuild with other flags runs at another speed, so measurements are keyed by both."""
    import llama_cpp

    features = llama_cpp.llama_print_system_info().decode(errors="replace")
    return f"{version()}:{hashlib.sha256(features.encode()).hexdigest()[:12]}"


_QUIET = None  # the log callback must outlive every llama.cpp call


def _silence(lib) -> None:
    """llama.cpp logs every load to stderr; cadedit says what matters itself.

    The sink is a C function, not a Python callback: llama.cpp logs hundreds of lines while it loads
    a model, and a Python callback takes the GIL for each one, so the load (one C call that releases
    the GIL) would stall behind whatever another thread runs meanwhile (cadedit.backends.model builds the
    tokenizer then). Py_IsInitialized takes no arguments and only reads a flag; the C calling
    conventions of the platforms llama.cpp runs on (x86-64 System V and Windows, AArch64) leave
    arguments a callee does not read unread and unharmed."""
    global _QUIET
    if _QUIET is None:
        _QUIET = ctypes.cast(ctypes.pythonapi.Py_IsInitialized, lib.llama_log_callback)
        lib.llama_log_set(_QUIET, ctypes.c_void_p(0))
        lib.llama_backend_init()


def weights_name(meta: dict) -> str:
    """The GGUF's weight type (Q4_K_M, F16, ...), for messages."""
    kind = meta.get("general.file_type")
    return _FILE_TYPES.get(kind, f"GGUF file type {kind}") if isinstance(kind, int) else "GGUF"


class LlamaCache:
    """The positions one decode has fed; llama.cpp's context holds their keys and values while this
    cache (or, for a row made by copy(), the cache it was copied from) is the model's current one."""

    def __init__(self, model: "LlamaModel", seq: int = 0, base: "LlamaCache | None" = None):
        self.model, self.seq, self.base = model, seq, base
        self.ids: list[int] = []

    @property
    def length(self) -> int:
        return len(self.ids)

    def crop(self, n: int) -> None:
        n = max(0, min(n, len(self.ids)))
        if self.model.current is (self.base or self) and n < len(self.ids):
            self.model.remove_after(n, self.seq)
        del self.ids[n:]

    def copy(self) -> "LlamaCache":
        """Another row holding the same positions: a sequence id of the same context (llama_memory_seq_cp
        shares the cells), valid until drop() or until another cache takes the context."""
        base = self.base or self
        self.model.take(base)
        used = {row.seq for row in self.model.rows}
        seq = next((s for s in range(1, MAX_ROWS) if s not in used), None)
        if seq is None:
            raise ModelError(
                f"llama.cpp's context holds at most {MAX_ROWS} candidates", hint=f"use --candidates {MAX_ROWS} or fewer"
            )
        self.model.lib.llama_memory_seq_rm(self.model._memory, seq, 0, -1)
        self.model.lib.llama_memory_seq_cp(self.model._memory, self.seq, seq, 0, -1)
        row = LlamaCache(self.model, seq, base)
        row.ids = list(self.ids)
        self.model.rows.append(row)
        return row

    def extend_from(self, other: "LlamaCache") -> None:
        """Take the positions `other` (a row of the same context) holds past this one's: their cells are shared."""
        start = len(self.ids)
        if len(other.ids) > start:
            self.model.lib.llama_memory_seq_cp(self.model._memory, other.seq, self.seq, start, -1)
        self.ids = list(other.ids)

    def drop(self) -> None:
        """A row's sequence is freed (its cells stay while another sequence holds them)."""
        if self.base is not None and self in self.model.rows:
            self.model.rows.remove(self)
            if self.model.current is self.base:
                self.model.lib.llama_memory_seq_rm(self.model._memory, self.seq, 0, -1)

    def export(self, n: int) -> np.ndarray:
        """The state of this cache as bytes (uint8) for a prefix of its first n positions:
        llama.cpp saves a whole sequence, so restore() crops what lies past the prefix."""
        self.model.take(self)
        return self.model.save_state()

    def restore(self, state: np.ndarray, ids) -> None:
        """Load a state made by export() and keep its first len(ids) positions; ValueError if it does not fit."""
        if not isinstance(state, np.ndarray) or state.dtype != np.uint8 or state.ndim != 1:
            raise ValueError("prefix state")
        self.model.take(self, replay=False)
        self.ids = []
        self.model.clear()
        if not self.model.load_state(state) or self.model.positions() < len(ids):
            self.model.clear()
            raise ValueError("llama.cpp refused the stored state")
        self.model.remove_after(len(ids))
        self.ids = list(ids)

    def write_prefix(self, file, n: int) -> None:
        """export(n) into an open file, after a header that names the format (cadedit.backends.prefix_store)."""
        file.write(STATE_MAGIC)
        file.write(self.export(n).tobytes())

    def read_prefix(self, path: Path, ids) -> None:
        """restore() what write_prefix wrote; ValueError for any other file."""
        data = path.read_bytes()
        if not data.startswith(STATE_MAGIC):
            raise ValueError("not a llama.cpp prefix state")
        self.restore(np.frombuffer(data, np.uint8, offset=len(STATE_MAGIC)), ids)


STATE_MAGIC = b"cadedit llama.cpp sequence state 1\n"  # the head of a prefix-store entry of this backend


class LlamaModel:
    """A GGUF through llama.cpp, called as cadedit's Qwen2 is: model(ids, cache, keep) -> [keep, V]."""

    def __init__(
        self, path: Path, meta: dict, threads: int, n_ctx: int = N_CTX, repack: bool = False, flash: bool | None = False
    ):
        lib = self.lib = require()
        _silence(lib)

        arch = architecture(path, meta)
        trained = context_length(path, meta, arch)
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        # Repacking: llama.cpp copies quantised weights into interleaved layouts for its CPU kernels
        # (a second copy in memory, the mapped file's pages aside). It speeds up one-token steps on
        # some CPUs and slows prompts on others: the backend probe measures both (cadedit.backends.model).
        params.use_extra_bufts = repack
        self._model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ModelError(f"{path}: llama.cpp cannot load this GGUF", hint="check the file is a whole Qwen2 GGUF")
        self._ctx = None
        context = lib.llama_context_default_params()
        context.n_ctx = min(n_ctx, trained)
        context.n_batch = context.n_ubatch = N_BATCH
        context.n_seq_max = MAX_ROWS
        context.kv_unified = True  # the rows share the prompt's cells
        context.n_outputs_max = max(MAX_OUTPUTS, ROW_OUTPUTS)
        context.n_threads = context.n_threads_batch = threads
        context.no_perf = True
        context.flash_attn_type = {None: -1, False: 0, True: 1}[flash]  # None: llama.cpp decides
        self._ctx = lib.llama_init_from_model(self._model, context)
        if not self._ctx:
            raise ModelError(
                f"{path}: llama.cpp cannot make a context of {context.n_ctx} tokens",
                hint="free some memory, or use --backend torch",
            )
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(N_BATCH, 0, 1)
        vocab = lib.llama_model_get_vocab(self._model)
        self.n_vocab = lib.llama_vocab_n_tokens(vocab)
        self.n_ctx = lib.llama_n_ctx(self._ctx)
        self.config = SimpleNamespace(vocab_size=self.n_vocab, max_position_embeddings=self.n_ctx)
        self.device = "cpu"
        self.folder = path  # the model's identity for the prefix store (cadedit.backends.model)
        self.eos_token_ids = eos_ids(meta)
        self.threads = threads
        self.repack = repack
        self.current: LlamaCache | None = None  # the cache whose positions the context holds
        self.rows: list[LlamaCache] = []  # rows copied from the current cache (other sequence ids)
        self._out = np.empty((0, self.n_vocab), np.float32)  # the kept logits of the last forward

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
        self.rows = []

    def remove_after(self, n: int, seq: int = 0) -> None:
        self.lib.llama_memory_seq_rm(self._memory, seq, n, -1)

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

    def __call__(self, ids, cache: LlamaCache, keep: int = 1) -> np.ndarray:
        """ids: the token ids to feed (a list, or an array or tensor of them); [keep, V] float32 logits."""
        return self.forward_rows([ids], [cache], [keep])[0]

    def forward_logits(self, ids: list[list[int]], caches: list[LlamaCache], keeps: list[int]) -> list[np.ndarray]:
        """What cadedit.backends.model.CachedLM feeds: the rows' logits are numpy arrays already."""
        return self.forward_rows(ids, caches, keeps)

    def forward_rows(self, ids: list, caches: list[LlamaCache], keeps: list[int]) -> list[np.ndarray]:
        """Row i feeds ids[i] after caches[i]'s positions, all rows in the same llama_decode calls;
        the [keeps[i], V] logits of each row's last positions."""
        tokens = [[int(t) for t in np.asarray(row).reshape(-1).tolist()] for row in ids]
        self.take(caches[0].base or caches[0])
        feeds = [(row, len(cache.ids), cache.seq, keep) for row, cache, keep in zip(tokens, caches, keeps)]
        try:
            logits = self._decode_rows(feeds)
        except BaseException:
            for row, start, seq, _ in feeds:
                self.remove_after(start, seq)  # a decode cut short: each cache is what it was before it
            raise
        for row, cache in zip(tokens, caches):
            cache.ids += row
        return logits

    def _decode(self, tokens: list[int], start: int, keep: int) -> np.ndarray:
        return self._decode_rows([(tokens, start, 0, keep)])[0]

    def _decode_rows(self, feeds: list[tuple[list[int], int, int, int]]) -> list[np.ndarray]:
        """Feed each (tokens, start, sequence, keep) at positions start.. of its sequence, in llama_decode
        calls of at most N_BATCH tokens and MAX_OUTPUTS kept rows (ROW_OUTPUTS for several sequences);
        the logits of each feed's last `keep` tokens."""
        for tokens, start, _, _ in feeds:
            if start + len(tokens) > self.n_ctx:
                raise ModelError(
                    f"llama.cpp's context of {self.n_ctx} tokens is full ({start} held, {len(tokens)} more)",
                    hint="edit a smaller region, or use --backend torch",
                )
        items = [
            (token, start + i, seq, k, i >= len(tokens) - keep)
            for k, (tokens, start, seq, keep) in enumerate(feeds)
            for i, token in enumerate(tokens)
        ]
        most = MAX_OUTPUTS if len(feeds) == 1 else ROW_OUTPUTS
        out = self._outputs(sum(item[4] for item in items))
        at = 0
        for chunk in _chunks(items, most):
            at += self._decode_batch(chunk, out[at:])
        bounds = list(itertools.accumulate((min(keep, len(tokens)) for tokens, _, _, keep in feeds), initial=0))
        return [out[a:b] for a, b in zip(bounds, bounds[1:])]  # a feed's kept rows are contiguous, in order

    def _outputs(self, n: int) -> np.ndarray:
        """The first n rows of the model's logits buffer, grown if it is short (its pages then stay mapped);
        past KEPT_ROWS, an array of this forward's own."""
        if n <= len(self._out):
            return self._out[:n]
        fresh = np.zeros((n, self.n_vocab), np.float32)
        if n <= KEPT_ROWS:
            self._out = fresh
        return fresh

    def _decode_batch(self, chunk: list[tuple[int, int, int, int, bool]], out: np.ndarray) -> int:
        """One llama_decode call: (token, position, sequence, feed, wanted) each; the wanted rows' logits
        go to the first rows of `out`; how many they are."""
        batch = self._batch
        outputs = 0
        for i, (token, pos, seq, _, wanted) in enumerate(chunk):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = wanted
            outputs += wanted
        batch.n_tokens = len(chunk)
        status = self.lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise ModelError(
                f"llama.cpp could not run a forward of {len(chunk)} tokens (llama_decode returned {status})",
                hint="free some memory, or use --backend torch",
            )
        if outputs:
            pointer = self.lib.llama_get_logits(self._ctx)
            np.copyto(out[:outputs], np.ctypeslib.as_array(pointer, shape=(outputs, self.n_vocab)))
        return outputs


def _chunks(items: list, most: int):
    """The llama_decode calls for these tokens: at most N_BATCH tokens a call, and at most `most` of
    them whose logits are kept (item[4])."""
    chunk: list = []
    outputs = 0
    for item in items:
        chunk.append(item)
        outputs += item[4]
        if len(chunk) == N_BATCH or outputs == most:
            yield chunk
            chunk, outputs = [], 0
    if chunk:
        yield chunk


# The configurations the backend probe compares: name -> (repack, flash attention). Flash attention
# stays off (llama-cpp-python's default): on CPUs it made long-prompt steps and drafts slower
# (docs/measurements/design-figures.md).
VARIANTS = {"llama": (False, False), "llama-repack": (True, False)}
