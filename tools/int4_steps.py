"""One-token steps through int4 weights against int8 and bf16 (the kernels cadedit.backends.torch.steps chooses
among), on the Qwen2.5-0.5B's linear shapes (random weights: only the kernels' speed is measured).

    python tools/int4_steps.py [--threads 2]

Per shape the median of 50 calls of each kernel with one token of bf16 activations, timed as the
per-machine choice times them (cadedit.backends.hardware._time_linear: torch's `_weight_int8pack_mm`,
`_weight_int4pack_mm_for_cpu` with cadedit.backends.torch.steps.GROUP, a bf16 linear); then one step's total over
the 24 layers' q/k/v/o, gate/up/down and the LM head.
"""

from __future__ import annotations

import argparse

import torch

from cadedit.backends.hardware import _time_linear

# (out, in, per step): 24 layers of q and o (896x896), k and v (128x896), gate and up (4864x896),
# down (896x4864), and the tied LM head once.
SHAPES = [(4864, 896, 48), (896, 4864, 24), (896, 896, 48), (128, 896, 48), (151936, 896, 1)]
KERNELS = ("int8", "int4", "bf16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    torch.set_num_threads(parser.parse_args().threads)
    total = dict.fromkeys(KERNELS, 0.0)
    for out_f, in_f, count in SHAPES:
        found = {k: 1000 * _time_linear(torch.bfloat16, 1, 50, k, (out_f, in_f)) for k in KERNELS}
        print(f"{out_f}x{in_f}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in found.items()))
        for k, v in found.items():
            total[k] += v * count
    print("one step's linear layers: " + ", ".join(f"{k} {v:.1f} ms" for k, v in total.items()))


if __name__ == "__main__":
    main()
