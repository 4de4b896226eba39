"""The model side's entry: load_model(spec) -> LoadedModel, and CachedLM, the one LM interface the
decode loop feeds (feed / crop / reuse over one KV cache, whichever backend holds it).

Contract: load_model(spec) returns a LoadedModel (tokenizer + causal LM ready for the decode loop)
for a hub id (offline, only if already in the Hugging Face cache), a local folder, or a .gguf file,
on the backend settings.choose_backend and hardware.choose_backend_for pick: torch (cadedit.backends.torch.qwen2;
a GGUF is dequantised once and cached as safetensors under the user cache, written atomically) or
llama.cpp (cadedit.backends.llama.llamacpp: the GGUF at its own size). The machine's threads, device and dtype
come from cadedit.backends.hardware; prompt prefixes on disk from cadedit.backends.prefix_store. Every failure is a
one-line ModelError with a hint. Also here: the chat prompt as token ids (special-token text in a
file stays text) and each token's bytes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadedit.settings import cache_problem, choose_model, user_cache
from cadedit.errors import ModelError
from cadedit.backends.hardware import choose_backend_for, choose_device, choose_dtype, cpu_steps, default_threads
from cadedit.backends.hardware import llama_variant, tell
from cadedit.backends.llama import gguf_file
from cadedit.backends.llama.gguf_file import check_model, four_bit_layers, gguf_tokenizer
from cadedit.backends.llama.llamacpp import LlamaModel, VARIANTS, weights_name
from cadedit.backends.model_files import gguf_path
from cadedit.settings import choose_backend
from cadedit.backends.torch.tokenizer import Tokenizer
from cadedit.backends.vocab import token_bytes_of
from cadedit.backends.model_files import weights_identity

if TYPE_CHECKING:
    import torch

HINT = "pass --model PATH (a model folder or a .gguf file) or set CADEDIT_MODEL"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class LoadedModel:
    """A tokenizer and a causal LM ready for the decode loop, and how they were loaded."""

    model: Any
    tokenizer: Any
    name: str
    device: str
    dtype: Any  # a torch.dtype on torch, the GGUF's weight type ("Q4_K_M") on llama.cpp
    threads: int
    context_limit: int
    load_seconds: float
    phases: tuple[tuple[str, float], ...] = ()  # (phase, seconds) of the load, in order
    dtype_reason: str = ""
    steps: str = ""  # one-token steps read "int8" or "int4" copies of the weights (cadedit.backends.torch.steps), "": the weights
    backend: str = "torch"  # "torch" (cadedit.backends.torch.qwen2) or "llama" (cadedit.backends.llama.llamacpp: the GGUF through llama.cpp)
    backend_reason: str = ""

    def first_forward(self) -> float | None:
        """Seconds from the process's start to its first forward (None: none has run yet)."""
        return FIRST_FORWARD[0] if FIRST_FORWARD else None


# -- GGUF conversion cache ---------------------------------------------------------------------


def cache_root() -> Path:
    """Where converted GGUF weights live."""
    return user_cache("models")


def gguf_cache_dir(path: Path) -> Path:
    """Where the converted weights of a GGUF live: keyed by name, size and mtime (no 500 MB hash)."""
    st = path.stat()
    return cache_root() / f"{path.stem}-{st.st_size}-{st.st_mtime_ns}"


def _is_complete(folder: Path) -> bool:
    return (
        (folder / "config.json").is_file()
        and (folder / "tokenizer_config.json").is_file()
        and any(folder.glob("*.safetensors"))
    )


def convert_gguf(path: Path) -> Path:
    """Dequantise a GGUF into a plain safetensors folder in the cache (once); return the folder. Only
    from and into a cache that is this user's own, down to each file of the folder: weights another
    user put there would be run as this GGUF's."""
    target = gguf_cache_dir(path)
    foreign = cache_problem(target, contents=True)
    if foreign is not None:
        raise ModelError(
            f"{path}: the cache of its converted weights is not used: {foreign}",
            hint="point XDG_CACHE_HOME at a folder of yours, or use --backend llama",
        )
    if _is_complete(target):
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tell(f"converting {path.name} for torch into {target} (once per model file; about a minute per GB of GGUF)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    except OSError as exc:  # the cache path is a file, or not writable
        raise ModelError(
            f"{path}: cannot convert it into the cache folder {target.parent} ({exc.strerror or exc}; "
            f"XDG_CACHE_HOME is {os.environ.get('XDG_CACHE_HOME') or 'not set'})",
            hint="point XDG_CACHE_HOME at a folder of yours, or use --backend llama",
        ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.bfloat16)
        # The weights are dequantised now; drop the GGUF marker so the folder saves as a plain checkpoint.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        try:
            os.rename(tmp, target)  # atomic: readers see no folder or a complete one
        except OSError:
            if not _is_complete(target):  # lost a race only if the winner finished
                raise
    except Exception as exc:
        raise ModelError(
            f"{path}: cannot convert GGUF ({type(exc).__name__}: {exc})",
            hint="check the file is a complete GGUF of a Qwen2-family model; `pip install gguf`",
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# -- loading -----------------------------------------------------------------------------------


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _source(spec: str) -> tuple[str, bool]:
    """(what to pass to from_pretrained, whether it is a hub id) for --model SPEC (a GGUF is converted)."""

    gguf = gguf_path(spec)
    if gguf is not None:
        return str(convert_gguf(gguf)), False
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder {spec} has no config.json", hint=HINT)
        if not any((path / name).is_file() for name in _TOKENIZER_FILES):
            raise ModelError(
                f"model folder {spec} has no tokenizer files ({', '.join(_TOKENIZER_FILES[:2])} ...)",
                hint="copy the tokenizer files of the model next to its config.json",
            )
        return str(path), False
    if path.exists() or not _HUB_ID.match(spec):
        raise ModelError(f"model {spec!r} is neither a model folder, a .gguf file nor a hub id", hint=HINT)
    return spec, True


_HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "merges.txt"]  # what a Qwen2 folder needs, no other formats


def _folder(source: str, hub: bool) -> Path:
    """The model folder of --model: the folder itself, or a hub id's snapshot in the local cache."""
    if not hub:
        return Path(source)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=_offline(), allow_patterns=_HUB_FILES))
    except Exception as exc:  # noqa: BLE001 - the hub client raises many kinds for "not here"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"cannot load model {source}: not in the local Hugging Face cache and cannot be downloaded ({first[:160]})",
            hint=HINT,
        ) from None


def _load_tokenizer(folder: Path):
    """tokenizer.json read directly (cadedit.backends.torch.tokenizer); a folder with only vocab + merges files goes
    through transformers, which can build one from them."""
    if (folder / "tokenizer.json").is_file():
        return _round_trips(Tokenizer.from_folder(folder), folder)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        raise ModelError(f"cannot load the tokenizer of model {folder} ({str(exc).strip()[:200]})", hint=HINT) from None
    return _round_trips(tokenizer, folder)


_PROBE_TEXT = "def add(a, b):\n    return a + b  # 42\n"


def _round_trips(tokenizer, folder: Path):
    """The tokenizer, if it turns text into ids and back into the same text; else a one-line error
    (a folder without its tokenizer.json can load a fallback that encodes everything to nothing)."""
    try:
        ids = list(tokenizer.encode(_PROBE_TEXT, add_special_tokens=False))
        same = bool(ids) and tokenizer.decode(ids) == _PROBE_TEXT
    except Exception:  # noqa: BLE001 - any failure here means the same: this tokenizer cannot be used
        same = False
    if not same:
        raise ModelError(
            f"model folder {folder}: its tokenizer does not encode and decode text faithfully "
            "(tokenizer.json missing or damaged?)",
            hint="copy the model's tokenizer.json next to its config.json",
        )
    return tokenizer


def _tokenizer_fits(tokenizer, vocab_size: int, folder: Path) -> None:
    """A tokenizer with more tokens than the weights have rows is a one-line error naming both files
    (its ids would index past the embedding); CachedLM.feed refuses any id past it all the same."""
    n = len(tokenizer)
    if n > vocab_size:
        raise ModelError(
            f"{folder / 'tokenizer.json'}: {n} tokens, more than the vocab_size of {vocab_size} in "
            f"{folder / 'config.json'}",
            hint="the tokenizer does not belong to these weights: download the model again",
        )


def _offline() -> bool:
    return any(os.environ.get(v, "") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def process_seconds() -> float | None:
    """Seconds since this process started (interpreter start included; Linux /proc), else None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


FIRST_FORWARD: list[float] = []  # process_seconds() when this process ran its first forward


def load_model(
    spec: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    threads: int | None = None,
    backend: str | None = None,
) -> LoadedModel:
    """Load tokenizer + model. spec: a hub id, a model folder, a .gguf file or an Ollama / LM Studio
    name (None: choose_model()); backend: auto, torch or llama (None: config.choose_backend())."""

    start = time.perf_counter()
    before = process_seconds()
    phases: list[tuple[str, float]] = (
        [("process start to load", before)] if before is not None and not FIRST_FORWARD else []
    )
    spec = spec or choose_model()
    threads = threads or default_threads()
    gguf = gguf_path(spec)
    if gguf is not None:
        check_model(gguf)  # before llama.cpp (the backend probe too) or the converter reads it
    name, reason = choose_backend_for(choose_backend(backend), gguf, device, dtype, threads)
    if name == "llama":
        return _load_llama(spec, gguf, threads, reason, start, phases, llama_variant(gguf, threads))
    loaded = _load_torch(spec, device, dtype, threads, start, phases)
    return dataclasses.replace(loaded, backend_reason=reason)


def _load_llama(
    spec: str, gguf: Path, threads: int, reason: str, start: float, phases: list, variant: str
) -> LoadedModel:

    t = time.perf_counter()
    meta = gguf_file.read_metadata(gguf)
    phases.append(("metadata", time.perf_counter() - t))

    def tokenizer_timed():
        since = time.perf_counter()
        return gguf_tokenizer(gguf, meta), time.perf_counter() - since

    # The tokenizer is built while llama.cpp loads the weights: the load is one C call that releases
    # the GIL (and logs without Python: llamacpp._silence), so the two take the time of the longer.
    t = time.perf_counter()
    repack, flash = VARIANTS[variant]
    with ThreadPoolExecutor(1, thread_name_prefix="cadedit-tokenizer") as pool:
        pending = pool.submit(tokenizer_timed)
        try:
            model = LlamaModel(gguf, meta, threads, repack=repack, flash=flash)
        except BaseException:
            pending.result()  # a file whose tokenizer is broken says so first, as when it was built first
            raise
        weights = time.perf_counter() - t
        tokenizer, seconds = pending.result()
    phases += [("tokenizer", seconds), ("weights", weights)]
    if tokenizer.chat_template is None:
        raise ModelError(f"model {spec} has no chat template (tokenizer.chat_template)", hint="use an Instruct model")
    return LoadedModel(
        model,
        tokenizer,
        spec,
        "cpu",
        weights_name(meta),
        threads,
        model.n_ctx,
        time.perf_counter() - start,
        tuple(phases),
        f"the GGUF's own weights through llama.cpp ({'repacked' if repack else 'as stored'})",
        backend="llama",
        backend_reason=reason,
    )


def _load_torch(spec: str, device: str, dtype: str, threads: int, start: float, phases: list) -> LoadedModel:
    def phase(name: str, since: float) -> float:
        now = time.perf_counter()
        phases.append((name, now - since))
        return now

    import torch  # here, not at the top: a process on llama.cpp never imports it

    t = phase("import torch", start)
    torch.set_num_threads(threads)
    device = choose_device(device)
    source, hub = _source(spec)
    t = phase("find", t)
    torch_dtype, why = choose_dtype(dtype, device, threads)
    t = phase("dtype", t)
    folder = _folder(source, hub)
    tokenizer = _load_tokenizer(folder)
    t = phase("tokenizer", t)
    from cadedit.backends.torch.qwen2 import load_qwen2  # lazy: imports torch (the backend boundary)

    model = load_qwen2(folder, torch_dtype, device)
    t = phase("weights", t)
    _tokenizer_fits(tokenizer, model.config.vocab_size, folder)
    if tokenizer.chat_template is None:
        raise ModelError(f"model {spec} has no chat template", hint="use an Instruct model")
    steps = {"bf16-int8": "int8", "bf16-int4": "int4"}.get(dtype, "")
    if dtype == "auto" and device == "cpu" and torch_dtype == torch.bfloat16:
        steps, step_why = cpu_steps(threads)
        why += f"; one-token steps {steps}, {step_why}"
        steps = "" if steps == "bf16" else steps
    if steps:
        why += f"; step weights {_step_weights(model, spec, torch_dtype, steps)}"
        phase("step weights", t)
    limit = model.config.max_position_embeddings
    return LoadedModel(
        model,
        tokenizer,
        spec,
        device,
        torch_dtype,
        threads,
        limit,
        time.perf_counter() - start,
        tuple(phases),
        why,
        steps,
    )


def _step_weights(model, spec: str, dtype: "torch.dtype", steps: str) -> str:
    """Give the model its copies for one-token steps (cadedit.backends.torch.steps): where steps is "int4", a GGUF's own
    4-bit tensors and an int4 LM head; int8 for every other layer."""
    from cadedit.backends.torch.steps import use_step_weights  # lazy: imports torch (the backend boundary)

    gguf = gguf_path(spec) if steps == "int4" else None
    four_bit = {}
    if gguf is not None:
        four_bit = four_bit_layers(gguf)
    return use_step_weights(
        model, weights_identity(model, spec, dtype), four_bit, int4_head=steps == "int4", announce=tell
    )


def new_cache(loaded: LoadedModel):
    """An empty KV cache for one decode (cadedit.backends.torch.qwen2.KVCache)."""
    return loaded.model.new_cache()


def check_ids(ids: Sequence[int], vocab_size: int) -> None:
    """Token ids a model can take: a tokenizer whose ids run past the weights' rows (not one of this
    model's) is a one-line error, not an index error deep in a lookup or the forward."""
    if ids and not 0 <= min(ids) <= max(ids) < vocab_size:
        bad = next(i for i in ids if not 0 <= i < vocab_size)
        raise ModelError(
            f"token id {bad} is outside the model's vocabulary of {vocab_size} (config.json vocab_size)",
            hint="the tokenizer does not belong to these weights: download the model again",
        )


class CachedLM:
    """The language-model interface of the decode loop: one KV cache that one feeds ids (getting
    the logits of the last `keep` positions) and crops back.

    It remembers the ids its cache holds, so a new decode whose prompt shares a prefix with the
    last one (another try of the same edit, the next file with the same instruction) feeds only
    the rest: reuse(prompt) crops the cache to the common prefix and says how long it is.
    keep: only those positions go through the LM head (151,936 wide for Qwen: a quarter of the
    0.5B model's FLOPs per token).
    """

    def __init__(self, model, cache):
        self.model, self.cache = model, cache
        self.ids: list[int] = []
        self.rows: list[tuple[Any, list[int]]] = []  # after fork(k): (cache, ids) of rows 1 .. k-1

    def feed(self, ids: Sequence[int], keep: int = 1):
        return self.feed_rows([0], [ids], [keep])[0]  # [keep, V]

    def feed_rows(self, rows: Sequence[int], ids: Sequence[Sequence[int]], keeps: Sequence[int]) -> list:
        """Feed row i (0: the cache itself, then the rows fork made) its ids, all in one forward;
        the logits of each row's last keeps[i] positions ([keep, V] each, float32 numpy rows:
        cadedit.decode.loop.Logits)."""
        ids = [[int(i) for i in row_ids] for row_ids in ids]
        for row_ids in ids:
            check_ids(row_ids, self.model.config.vocab_size)
        if not FIRST_FORWARD:
            FIRST_FORWARD.append(process_seconds() or 0.0)
        caches = [self._row(r)[0] for r in rows]
        try:
            logits = self.model.forward_logits(ids, caches, list(keeps))
        except BaseException:
            self.reset()  # a forward cut short leaves the cache in an unknown state
            raise
        for r, row_ids in zip(rows, ids):
            self._row(r)[1].extend(row_ids)
        return logits

    def _row(self, r: int) -> tuple[Any, list[int]]:
        return (self.cache, self.ids) if r == 0 else self.rows[r - 1]

    def fork(self, k: int) -> None:
        """k rows: row 0 is the cache, rows 1 .. k-1 start as copies of it; fork(1) drops them."""
        for cache, _ in self.rows[k - 1 :]:
            getattr(cache, "drop", lambda: None)()
        del self.rows[k - 1 :]
        while len(self.rows) < k - 1:
            self.rows.append((self.cache.copy(), list(self.ids)))

    def copy_row(self, source: int, row: int) -> None:
        """Row `row`, which holds a prefix of row `source`'s positions, takes the rest of them (no forward)."""
        (from_cache, from_ids), (cache, ids) = self._row(source), self._row(row)
        cache.extend_from(from_cache)
        ids.extend(from_ids[len(ids) :])

    def crop(self, n: int) -> None:
        """Forget the last n positions (drafted tokens that were not kept)."""
        self.crop_row(0, n)

    def crop_row(self, r: int, n: int) -> None:
        if n:
            cache, ids = self._row(r)
            cache.crop(cache.length - n)
            del ids[-n:]

    def reuse(self, prompt_ids: Sequence[int]) -> int:
        """Keep the cache of the longest common prefix with prompt_ids (at least one id left to feed)."""
        common = len(os.path.commonprefix([list(self.ids), list(prompt_ids[:-1])]))
        self.crop(len(self.ids) - common)
        return common

    def reset(self) -> None:
        self.fork(1)
        self.cache = self.model.new_cache()
        self.ids = []


_LMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def language_model(loaded: LoadedModel) -> CachedLM:
    """The one CachedLM of a loaded model (its cache is reused from one decode to the next)."""
    lm = _LMS.get(loaded.model)
    if lm is None:
        lm = _LMS[loaded.model] = CachedLM(loaded.model, new_cache(loaded))
    return lm


def token_bytes(loaded: LoadedModel) -> Sequence[bytes]:
    """Each token id's bytes, as wide as the model's logits."""

    return token_bytes_of(loaded.tokenizer, n_logits=loaded.model.config.vocab_size)


def eos_ids(loaded: LoadedModel) -> frozenset[int]:
    """EOS ids: the tokenizer's, the model folder's configs' and Qwen's <|endoftext|>."""
    tokenizer = loaded.tokenizer
    ids = {tokenizer.eos_token_id, *getattr(loaded.model, "eos_token_ids", ())}
    ids.add(tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    return frozenset(int(i) for i in ids if i is not None and i != tokenizer.unk_token_id)


def render_chat(tokenizer, messages: list[dict[str, str]]) -> str:
    """The prompt text for chat messages, ending with the assistant's turn header."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


_SPECIALS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _specials(tokenizer) -> tuple[str, ...]:
    """The added tokens' texts, once per tokenizer (encode runs for every draft)."""
    found = _SPECIALS.get(tokenizer)
    if found is None:
        found = _SPECIALS[tokenizer] = tuple(str(t) for t in tokenizer.added_tokens_decoder.values() if str(t))
    return found


def _backend(tokenizer):
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of plain text (a file, an instruction): a special token's text in it ("<|im_end|>" in
    a Markdown file) is encoded as the characters it is, never as the control token."""
    if not any(special in text for special in _specials(tokenizer)):
        return list(tokenizer.encode(text, add_special_tokens=False))
    backend = _backend(tokenizer)
    before = backend.encode_special_tokens
    backend.encode_special_tokens = True
    try:
        return list(backend.encode(text, add_special_tokens=False).ids)
    finally:
        backend.encode_special_tokens = before


_SENTINEL = "\x00cadedit-content-{}\x00"


def chat_prompt(tokenizer, messages: list[dict[str, str]], suffix: str = "") -> tuple[str, list[int]]:
    """The chat prompt (render_chat + suffix) and its ids: only the template's own markers are special
    tokens; the messages' contents and the suffix are plain text (encode)."""
    prompt = render_chat(tokenizer, messages) + suffix
    contents = [m["content"] for m in messages] + [suffix]
    if not any(special in text for text in contents for special in _specials(tokenizer)):
        return prompt, list(tokenizer.encode(prompt, add_special_tokens=False))
    marked = [{**m, "content": _SENTINEL.format(i)} for i, m in enumerate(messages)]
    template = render_chat(tokenizer, marked)
    pieces, ids = [], []
    for i, content in enumerate(contents[:-1]):
        head, mark, template = template.partition(_SENTINEL.format(i))
        pieces += [head, content]
        ids += list(tokenizer.encode(head, add_special_tokens=False)) + encode(tokenizer, content)
        if not mark:
            break
    ids += list(tokenizer.encode(template, add_special_tokens=False)) + encode(tokenizer, suffix)
    if (
        "".join(pieces) + template + suffix != prompt
    ):  # a template that rewrites the text: its markers cannot be told apart
        raise ModelError(
            "the model's chat template changes the message text, so a special token's text in the "
            "file cannot be kept apart from the template's",
            hint="edit the file with another model",
        )
    return prompt, ids
