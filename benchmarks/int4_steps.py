"""One-token steps through int4 weights against int8 (what steps.py uses) and bf16, on the
Qwen2.5-0.5B's linear shapes (random weights: only the kernels' speed is measured).

    python benchmarks/int4_steps.py [--threads 2]

Per shape the median of 50 calls of torch's `_weight_int8pack_mm`, `_weight_int4pack_mm_for_cpu`
(group 128, asymmetric) and a bf16 linear with one token of bf16 activations; then one step's total
over the 24 layers' q/k/v/o, gate/up/down and the LM head.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

# (out, in, per step): 24 layers of q and o (896x896), k and v (128x896), gate and up (4864x896),
# down (896x4864), and the tied LM head once.
SHAPES = [(4864, 896, 48), (896, 4864, 24), (896, 896, 48), (128, 896, 48), (151936, 896, 1)]


def timed(f, n: int = 50) -> float:
    for _ in range(5):
        f()
    runs = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000


def kernels(out_f: int, in_f: int) -> dict[str, float]:
    w = torch.randn(out_f, in_f)
    x = torch.randn(1, in_f, dtype=torch.bfloat16)
    scale = w.abs().amax(1) / 127
    q8 = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    s8 = scale.to(torch.bfloat16)
    group = 128
    wg = w.reshape(out_f, -1, group)
    low, high = wg.amin(-1, keepdim=True), wg.amax(-1, keepdim=True)
    step = ((high - low) / 15).clamp(min=1e-6)
    q4 = torch.round((wg - low) / step).clamp(0, 15).to(torch.int32).reshape(out_f, in_f)
    packed = torch._convert_weight_to_int4pack_for_cpu(q4, 1)
    scales_zeros = torch.stack([step.squeeze(-1), (low + 8 * step).squeeze(-1)], -1).transpose(0, 1)
    scales_zeros = scales_zeros.contiguous().to(torch.bfloat16)
    wb = w.to(torch.bfloat16)
    return {"int8": timed(lambda: torch._weight_int8pack_mm(x, q8, s8)),
            "int4": timed(lambda: torch._weight_int4pack_mm_for_cpu(x, packed, group, scales_zeros)),
            "bf16": timed(lambda: torch.nn.functional.linear(x, wb))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    torch.set_num_threads(parser.parse_args().threads)
    total = {"int8": 0.0, "int4": 0.0, "bf16": 0.0}
    for out_f, in_f, count in SHAPES:
        found = kernels(out_f, in_f)
        print(f"{out_f}x{in_f}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in found.items()))
        for k, v in found.items():
            total[k] += v * count
    print("one step's linear layers: " + ", ".join(f"{k} {v:.1f} ms" for k, v in total.items()))


if __name__ == "__main__":
    main()
