"""One-token steps of several model configurations, taking turns in one process, so a noisy machine
slows them alike: the configurations' ratio is what this measures.

    python tools/step_ab.py --model M.gguf --configs torch:bf16-int8,torch:bf16-int4,llama \
        [--prefix 1024] [--rounds 15] [--steps 4] [--threads 2]

Each configuration (backend:dtype, or llama) is loaded once and fed the same random prefix; then
`rounds` times, each in turn feeds `steps` one-token steps and crops them off again. Prints the
median step per configuration and its ratio to the first.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cadedit.backends.model import language_model, load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--configs", default="torch:bf16-int8,torch:bf16-int4,llama")
    parser.add_argument("--prefix", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    lms = {}
    for config in args.configs.split(","):
        backend, _, dtype = config.partition(":")
        loaded = load_model(args.model, "cpu", dtype or "auto", args.threads, backend=backend)
        lm = language_model(loaded)
        vocab = loaded.model.config.vocab_size
        lm.feed([(100 + k % 5000) % vocab for k in range(args.prefix)])
        lms[config] = (lm, vocab)
        print(f"{config}: {loaded.dtype_reason}", flush=True)
    times: dict[str, list[float]] = {config: [] for config in lms}
    for r in range(args.rounds):
        for config, (lm, vocab) in lms.items():
            for k in range(args.steps):
                start = time.perf_counter()
                lm.feed([(200 + 7 * r + k) % vocab])
                times[config].append(time.perf_counter() - start)
            lm.crop(args.steps)
    first = statistics.median(next(iter(times.values())))
    for config, runs in times.items():
        median = statistics.median(runs)
        print(
            f"{config}: one-token step after {args.prefix} tokens {1000 * median:.1f} ms "
            f"(IQR {1000 * statistics.quantiles(runs, n=4)[0]:.1f}-{1000 * statistics.quantiles(runs, n=4)[2]:.1f}), "
            f"{median / first:.2f}x the first"
        )


if __name__ == "__main__":
    main()
