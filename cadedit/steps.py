"""One-token steps in int8: every linear layer keeps a second copy of its weight, quantised to int8
with one scale per output row, and uses it when it is fed one token.

Why: a one-token step reads every weight once and does little arithmetic with it, so its time is
the bytes read; int8 reads half of bf16's and a quarter of fp32's. A multi-token forward (the
prompt, a verified draft) is arithmetic-bound and keeps the layer's own weight (AMX bf16 matmul),
so prefill speed and its numbers are unchanged (README, Model, dtype, speed). The int8 copy of a model is made once and kept under the user cache (written to a temporary
file and renamed; a file that does not load is made again), since quantising 0.5B weights takes
seconds. Torch's CPU kernel for it (`_weight_int8pack_mm`) takes bf16 or fp32 activations; with
fp32 it is slower than fp32's own matmul, so only bf16 models use it (hardware.cpu_dtype).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from cadedit.atomic import replace_file
from cadedit.settings import user_cache


class StepLinear(torch.nn.Module):
    """A linear layer whose one-token inputs go through an int8 copy of its weight."""

    def __init__(self, linear: torch.nn.Linear, q: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias  # shared, never copied (tied LM heads too)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("q", q, persistent=False)
        self.register_buffer("scale", scale, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.in_features:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        y = torch._weight_int8pack_mm(x.reshape(1, -1).to(self.scale.dtype), self.q, self.scale)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 rows and one scale per row (symmetric: the row's largest magnitude maps to 127)."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scale


def use_int8_steps(model: torch.nn.Module, identity: str, root: Path | None = None) -> str:
    """Give every linear layer of `model` its int8 copy for one-token steps; returns where the
    copy came from ("made now", "from the cache") for --verbose."""
    linears = {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    dtype = next(model.parameters()).dtype
    path = (root or user_cache("int8")) / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.safetensors"
    tensors = _load(path, linears)
    source = "from the cache"
    if tensors is None:
        tensors = {}
        for name, linear in linears.items():
            tensors[f"{name}.q"], tensors[f"{name}.scale"] = quantize(linear.weight)
        _save(path, tensors)
        source = "made now"
    for name, linear in linears.items():
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        step = StepLinear(linear, tensors[f"{name}.q"], tensors[f"{name}.scale"].to(dtype))
        setattr(parent, attribute, step)
    return source


def _load(path: Path, linears: dict) -> dict | None:
    if not path.is_file():
        return None
    try:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        for name, linear in linears.items():
            if tensors[f"{name}.q"].shape != linear.weight.shape or tensors[f"{name}.q"].dtype != torch.int8:
                raise ValueError(name)
        return tensors
    except Exception:  # noqa: BLE001 - a damaged or foreign file, whatever the reason: make it again
        path.unlink(missing_ok=True)
        return None


def _save(path: Path, tensors: dict) -> None:
    from safetensors.torch import save

    try:
        replace_file(path, lambda f: f.write(save(tensors)), make_parent=True)
    except OSError:  # a read-only or full cache: quantise again next time
        pass
