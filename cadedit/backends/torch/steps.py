"""One-token steps through compact weights: every linear layer keeps a second copy of its weight
and uses it when it is fed one token. The copy is int4 where the GGUF file stores the layer in a
4-bit block format (its own 4-bit numbers and per-32 scales, passed as stored), else int8 with one
scale per output row.

Why: a one-token step reads every weight once and does little arithmetic with it, so its time is
the bytes read: int8 reads half of bf16's, the GGUF's 4-bit blocks about a third. A multi-token
forward (the prompt, a verified draft) is arithmetic-bound and keeps the layer's own weight (AMX
bf16 matmul), so prefill speed and its numbers are unchanged (docs/measurements/speed.md). The
copies are made once and kept under the user cache (written to a temporary file and renamed; a
file that does not load is made again). Torch's CPU kernels for them (`_weight_int8pack_mm`,
`_weight_int4pack_mm_for_cpu`) take bf16 activations fast; with fp32 they are slower than fp32's
own matmul, so only bf16 models use them (hardware.cpu_steps).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import torch

from cadedit.text.atomic import replace_file
from cadedit.settings import cache_problem, user_cache

GROUP = 32  # weights per scale in an int4 copy: the GGUF 4-bit formats' own group
EXACT_TOP = 64  # an int4 LM head's highest logits recomputed from the head's own weight


class StepLinear(torch.nn.Module):
    """A linear layer whose one-token inputs go through an int8 (q, scale) or int4 (packed weights,
    scales and zeros per GROUP) copy of its weight. exact_top: the output's highest values are then
    computed again from the layer's own weight (an LM head: the logits that decide are exact)."""

    def __init__(self, linear: torch.nn.Linear, q: torch.Tensor, scale: torch.Tensor, exact_top: int = 0):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias  # shared, never copied (tied LM heads too)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.int4 = q.dtype == torch.uint8
        self.exact_top = min(exact_top, self.out_features)
        self.register_buffer("q", q, persistent=False)
        self.register_buffer("scale", scale, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.in_features:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        row = x.reshape(1, -1).to(self.scale.dtype)
        if self.int4:
            y = torch._weight_int4pack_mm_for_cpu(row, self.q, GROUP, self.scale)
        else:
            y = torch._weight_int8pack_mm(row, self.q, self.scale)
        if self.bias is not None:
            y = y + self.bias
        if self.exact_top:
            top = y[0].topk(self.exact_top).indices
            exact = torch.nn.functional.linear(
                row.to(self.weight.dtype), self.weight[top], None if self.bias is None else self.bias[top]
            )
            y[0, top] = exact[0].to(y.dtype)
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 rows and one scale per row (symmetric: the row's largest magnitude maps to 127)."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scale


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """4-bit rows, a scale and a low per GROUP weights (asymmetric: each group's least and largest
    values map to 0 and 15), in pack_int4's (q, scale, low) form."""
    w = weight.detach().float()
    rows, cols = w.shape
    groups = w.reshape(rows, -1, GROUP)
    low = groups.amin(-1)
    scale = ((groups.amax(-1) - low) / 15).clamp(min=1e-12)
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp_(0, 15).to(torch.uint8)
    return q.reshape(rows, cols), scale, low


def pack_int4(q, scale, low) -> tuple[torch.Tensor, torch.Tensor]:
    """A 4-bit weight (q in 0..15 [out, in], weight = q * scale + low per GROUP; numpy or torch) as
    torch's int4 kernel takes it: packed nibbles and [in / GROUP, out, 2] scales and zeros, where
    its weight is (q - 8) * scale + zero."""
    q, scale, low = (torch.as_tensor(a) for a in (q, scale, low))
    packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 1)
    zeros = low.float() + 8 * scale.float()
    return packed, torch.stack([scale.float(), zeros], -1).transpose(0, 1).contiguous().to(torch.bfloat16)


def unpack_int4(q, scale, low) -> torch.Tensor:
    """The weight that pack_int4's copy computes with (its scales and zeros rounded to bf16)."""
    q, scale, low = (torch.as_tensor(a) for a in (q, scale, low))
    s = scale.to(torch.bfloat16).float()
    zero = (low.float() + 8 * scale.float()).to(torch.bfloat16).float()
    rows, cols = q.shape
    return ((q.float().reshape(rows, -1, GROUP) - 8) * s[..., None] + zero[..., None]).reshape(rows, cols)


def use_step_weights(
    model: torch.nn.Module,
    identity: str,
    four_bit: dict[str, Callable] | None = None,
    root: Path | None = None,
    int4_head: bool = False,
    announce: Callable[[str], None] | None = None,
) -> str:
    """Give every linear layer of `model` its copy for one-token steps: int4 for the layers named in
    four_bit (layer name -> a function giving (q, scale, low), gguf_file.four_bit_tensors' form) whose
    4-bit weight is the layer's own (checked), int8 for the others. int4_head: the LM head (lm_head) is
    int4 even where it was stored otherwise, its highest EXACT_TOP logits computed again from its own
    weight. Returns what was done and where the copies came from, for --verbose. announce: told once
    before the copies are made (not when they come from the cache), for a first run's progress."""
    linears = {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    dtype = next(model.parameters()).dtype
    four_bit = {
        name: decode for name, decode in (four_bit or {}).items() if name in linears and _int4_fits(linears[name])
    }
    if int4_head and "lm_head" in linears and "lm_head" not in four_bit and _int4_fits(linears["lm_head"]):
        four_bit["lm_head"] = lambda: quantize_int4(linears["lm_head"].weight)
    key = identity + ("|int4:" + ",".join(sorted(four_bit)) if four_bit else "") + ("|int4-head" if int4_head else "")
    path = (root or user_cache("int8")) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.safetensors"
    # Another user's copies would be run as this model's weights: a cache not this user's own is not used.
    foreign = cache_problem(path, root or user_cache())
    cached = foreign is None and path.is_file()
    tensors = _load(path, linears) if foreign is None else None
    source = "from the cache"
    if tensors is None:
        if cached and announce is not None:  # the cache held a bad file: say which, as it is replaced
            announce(f"{path}: a damaged copy of the one-token step weights; making it again")
        elif announce is not None:
            announce(f"making the compact one-token step weights into {path.parent} (once per model file)")
        tensors = {name: _copy(linear, four_bit.get(name)) for name, linear in linears.items()}
        tensors = {
            f"{name}.{part}": t for name, (q, scale) in tensors.items() for part, t in (("q", q), ("scale", scale))
        }
        if foreign is None:
            _save(path, tensors)
        source = "made again (the cached copy was damaged)" if cached else "made now"
        source = source if foreign is None else f"made now, not cached ({foreign})"
    int4 = 0
    for name, linear in linears.items():
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        q, scale = tensors[f"{name}.q"], tensors[f"{name}.scale"]
        int4_here = q.dtype == torch.uint8
        step = StepLinear(
            linear,
            q,
            scale if int4_here else scale.to(dtype),
            exact_top=EXACT_TOP if int4_here and name == "lm_head" else 0,
        )
        int4 += step.int4
        setattr(parent, attribute, step)
    return f"int4 for {int4} of {len(linears)} layers (the rest int8), {source}" if int4 else f"int8, {source}"


def _int4_fits(linear: torch.nn.Linear) -> bool:
    return linear.in_features % GROUP == 0 and linear.out_features % 16 == 0  # the kernel's packing


def _copy(linear: torch.nn.Linear, decode: Callable | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's step copy: its 4-bit weight packed, if decode gives one that is the layer's own
    weight to within 4-bit rounding (a name mapped wrongly or a transposed tensor would not be), else int8."""
    if decode is not None:
        q, scale, low = decode()
        if tuple(q.shape) == tuple(linear.weight.shape):
            weight = linear.weight.detach().float()
            error = (unpack_int4(q, scale, low) - weight).abs().amax(1)
            step = torch.as_tensor(scale).float().abs().amax(1)  # Q4_0 scales may be negative
            if bool((error <= step / 2 + 0.01 * weight.abs().amax(1)).all()):  # half a step, and bf16's rounding
                return pack_int4(q, scale, low)
    return quantize(linear.weight)


def _load(path: Path, linears: dict) -> dict | None:
    """The cached copies, if every layer's q and scale have the shapes and dtypes its kernel takes; else
    None, the file deleted (a damaged or half-written entry is made again, never run)."""
    if not path.is_file():
        return None
    try:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        for name, linear in linears.items():
            if not _fits(tensors[f"{name}.q"], tensors[f"{name}.scale"], linear):
                raise ValueError(name)
        return tensors
    except Exception:  # noqa: BLE001 - a damaged or foreign file, whatever the reason: make it again
        path.unlink(missing_ok=True)
        return None


def _fits(q: torch.Tensor, scale: torch.Tensor, linear: torch.nn.Linear) -> bool:
    """Whether (q, scale) is a copy of this layer as quantize or pack_int4 make it."""
    rows, cols = linear.out_features, linear.in_features
    if q.dtype == torch.int8:
        return tuple(q.shape) == (rows, cols) and tuple(scale.shape) == (rows,) and scale.is_floating_point()
    if q.dtype == torch.uint8:
        packed = tuple(q.shape) == (rows, cols // 2)
        return packed and tuple(scale.shape) == (cols // GROUP, rows, 2) and scale.dtype == torch.bfloat16
    return False


def _save(path: Path, tensors: dict) -> None:
    from safetensors.torch import save

    try:
        replace_file(path, lambda f: f.write(save(tensors)), make_parent=True)
    except OSError:  # a read-only or full cache: quantise again next time
        pass
