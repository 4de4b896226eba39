"""Token counting for the benchmarks: any tokenizer with `encode`, loaded cheaply from a path.

Contract: TokenCounter(tokenizer).ids(text) are the token ids of text without special tokens
(no BOS), cached per text. load_tokenizer(spec) reads a tokenizer.json file or a model folder
with one with the `tokenizers` library (no torch), and a .gguf file or a hub id through
transformers; the tokenizer of a .gguf file is converted once and cached as tokenizer.json under
$XDG_CACHE_HOME/cadedit/tokenizers (the conversion is slow, the cached file fast: docs/measurements/design-figures.md#figures-moved-from-docstrings).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from cadedit.errors import ModelError
from cadedit.settings import cache_problem
from cadedit.text.atomic import replace_file
from cadedit.settings import choose_model, user_cache


class TokenCounter:
    """Token ids and counts of text under one tokenizer; results are memoised."""

    def __init__(self, tokenizer: object, name: str = "tokenizer"):
        self.name = name
        self._encode = _encoder(tokenizer)
        self._cache: dict[str, tuple[int, ...]] = {}

    def ids(self, text: str) -> tuple[int, ...]:
        if not text:
            return ()
        hit = self._cache.get(text)
        if hit is None:
            hit = self._cache[text] = tuple(self._encode(text))
        return hit

    def count(self, text: str) -> int:
        return len(self.ids(text))


def _encoder(tokenizer: object) -> Callable[[str], list[int]]:
    """A function text -> ids for a `tokenizers.Tokenizer`, a transformers tokenizer or any `encode`."""
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        raise TypeError(f"{type(tokenizer).__name__} has no encode method")
    try:
        probe = encode("a", add_special_tokens=False)
    except TypeError:  # a minimal tokenizer: encode(text) only
        return lambda text: list(encode(text))
    if hasattr(probe, "ids"):  # tokenizers.Encoding
        return lambda text: encode(text, add_special_tokens=False).ids
    return lambda text: list(encode(text, add_special_tokens=False))


def tokenizer_spec(tokenizer: str | None, model: str | None) -> str:
    """Which tokenizer to load: --tokenizer, else the model's, chosen as every command chooses it
    (--model, $CADEDIT_MODEL, `model` in .cadedit.toml / pyproject.toml, the default hub id)."""

    return tokenizer or choose_model(model)


def load_tokenizer(spec: str) -> TokenCounter:
    """A TokenCounter for a tokenizer.json file, a model folder, a .gguf file or a hub id."""
    path = Path(os.path.expanduser(spec))
    if path.is_file() and path.suffix == ".json":
        return TokenCounter(_from_json(path), spec)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return TokenCounter(_from_json(path / "tokenizer.json"), spec)
    if path.is_file() and path.suffix == ".gguf":
        return TokenCounter(_from_json(_gguf_tokenizer_json(path)), spec)
    if path.is_dir():  # a model folder without tokenizer.json (vocab + merges files): transformers reads it
        return TokenCounter(_from_transformers(str(path)), spec)
    if path.exists():
        raise ModelError(f"{spec}: not a tokenizer.json file, a model folder or a .gguf file")
    return TokenCounter(_from_transformers(spec), spec)


def _from_json(path: Path):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception on a bad file
        raise ModelError(f"{path}: cannot read tokenizer ({exc})") from None


def _from_transformers(spec: str, **kwargs):
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(spec, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"{spec}: cannot load tokenizer ({str(exc).splitlines()[0]})",
            hint="pass --tokenizer with a local tokenizer.json, model folder or .gguf file",
        ) from None


def cache_dir() -> Path:
    """The cadedit user cache (config.user_cache)."""

    return user_cache()


def _gguf_tokenizer_json(path: Path) -> Path:
    """The tokenizer.json converted from a GGUF file, cached by the file's path, size and mtime."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    target = cache_dir() / "tokenizers" / f"{path.stem}-{key}.json"
    foreign = cache_problem(target)  # another user's file would count the tokens
    if foreign is not None:
        raise ModelError(
            f"{path}: its converted tokenizer's cache is not used: {foreign}",
            hint="point XDG_CACHE_HOME at a folder of yours, or pass --tokenizer tokenizer.json",
        )
    if not target.is_file():
        tok = _from_transformers(str(path.parent), gguf_file=path.name)

        replace_file(target, tok.backend_tokenizer.to_str().encode("utf-8"), make_parent=True)
    return target
