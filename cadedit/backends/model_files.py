"""GGUF files people already have, by name: `ollama:NAME[:TAG]` and `lmstudio:NAME`.

Contract: gguf_path(spec) returns the GGUF file a --model spec names (a .gguf path, an Ollama model
through its manifest, an LM Studio download), None when the spec is not a GGUF (a folder, a hub
id), or raises a one-line ModelError naming what is missing. No torch, no llama.cpp.

Ollama keeps models as content-addressed blobs: models/manifests/<host>/<namespace>/<name>/<tag> is
a JSON manifest whose layer of media type application/vnd.ollama.image.model is the GGUF, stored
as models/blobs/sha256-<hex>. The models folder is $OLLAMA_MODELS, else ~/.ollama/models. LM Studio
keeps plain .gguf files under ~/.lmstudio/models/<publisher>/<repo>/ (older: ~/.cache/lm-studio/models).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cadedit.text.document import read_regular
from cadedit.errors import CadeditError, ModelError

_MODEL_LAYER = "application/vnd.ollama.image.model"
MANIFEST_BYTES = 1 << 20  # an Ollama manifest is a few hundred bytes of JSON


def ollama_root() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


def lmstudio_roots() -> list[Path]:
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def gguf_path(spec: str) -> Path | None:
    """The GGUF file `spec` names, or None when it names no GGUF."""
    if spec.startswith("ollama:"):
        return ollama_gguf(spec.removeprefix("ollama:"))
    if spec.startswith("lmstudio:"):
        return lmstudio_gguf(spec.removeprefix("lmstudio:"))
    path = Path(spec).expanduser()
    if path.suffix.lower() != ".gguf":
        return None
    if not path.is_file():
        raise ModelError(
            f"model file {spec} not found" if not path.exists() else f"model file {spec} is not a regular file",
            hint="pass --model PATH (a model folder or a .gguf file) or set CADEDIT_MODEL",
        )
    return path


def ollama_gguf(name: str) -> Path:
    """The GGUF blob of an Ollama model `name[:tag]` (tag `latest` when absent; `ns/name` for a namespace)."""
    if not name or any(part in ("", ".", "..") for part in name.replace(":", "/").split("/")):
        raise ModelError(
            f"ollama:{name}: not an Ollama model name", hint="use ollama:NAME[:TAG], e.g. ollama:qwen2.5-coder:1.5b"
        )
    model, _, tag = name.partition(":")
    tag = tag or "latest"
    namespace, _, model = model.rpartition("/")
    root = ollama_root()
    manifests = root / "manifests"
    found = sorted(manifests.glob(f"*/{namespace or 'library'}/{model}/{tag}")) if manifests.is_dir() else []
    if not found:
        raise ModelError(
            f"ollama:{name}: no such model in {root} (no manifest for {model}:{tag})",
            hint=f"`ollama pull {model}:{tag}` first, or set OLLAMA_MODELS to Ollama's models folder",
        )
    manifest = found[0]
    try:
        data, _ = read_regular(manifest, MANIFEST_BYTES)  # a FIFO there would block, /dev/zero fill memory
    except CadeditError as exc:
        raise ModelError(f"ollama:{name}: {exc.message}", hint="`ollama pull` the model again") from None
    try:
        layers = json.loads(data.decode("utf-8")).get("layers", [])
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == _MODEL_LAYER)
    except (OSError, ValueError, AttributeError, StopIteration, KeyError, TypeError, RecursionError):
        raise ModelError(
            f"{manifest}: not an Ollama manifest with a model layer", hint="`ollama pull` the model again"
        ) from None
    blob = root / "blobs" / str(digest).replace(":", "-")
    if not blob.is_file() or "/" in str(digest):
        what = "is not a regular file" if blob.exists() else "is missing"
        raise ModelError(f"ollama:{name}: its model file {blob} {what}", hint="`ollama pull` the model again")
    return blob


def lmstudio_gguf(name: str) -> Path:
    """The one .gguf under LM Studio's models folders whose path contains `name`."""
    found = sorted(
        {
            p
            for root in lmstudio_roots()
            if root.is_dir()
            for p in root.rglob("*.gguf")
            if name.lower() in str(p.relative_to(root)).lower() and p.is_file()
        }
    )
    if not found:
        raise ModelError(
            f"lmstudio:{name}: no .gguf whose path contains {name!r} under "
            f"{' or '.join(str(r) for r in lmstudio_roots())}",
            hint="download the model in LM Studio first",
        )
    if len(found) > 1:
        shown = ", ".join(p.name for p in found[:4]) + (" ..." if len(found) > 4 else "")
        raise ModelError(f"lmstudio:{name}: {len(found)} GGUF files match ({shown})", hint="name the file more fully")
    return found[0]


def weights_identity(model, name: str, dtype) -> str:
    """The model's weight and config files (path, size, mtime) and dtype: what cached tensors derived from them must match."""
    source = str(getattr(model, "folder", "") or name)
    parts = [str(source), str(dtype)]
    folder = Path(source)
    if folder.is_file():
        st = folder.stat()
        parts.append(f"{folder.name}:{st.st_size}:{st.st_mtime_ns}")
    elif folder.is_dir():
        for weights in sorted([*folder.glob("*.safetensors"), *folder.glob("*.json")]):
            st = weights.stat()
            parts.append(f"{weights.name}:{st.st_size}:{st.st_mtime_ns}")
    else:
        parts.append(f"object:{id(model)}")  # an in-memory model: its own process only
    return "|".join(parts)
