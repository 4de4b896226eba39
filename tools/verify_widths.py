"""What a verify forward of k tokens costs on the llama.cpp backend, with its logits kept for the last
token only (what a prompt needs) and for every token (what a verified draft needs), per token.

    python tools/verify_widths.py --model M.gguf [--prefix 900] [--widths 16,64,256] [--threads 2]

Loads the GGUF once, feeds `prefix` tokens, then for each width feeds k tokens both ways (best of
`reps`), cropping them off again after each. A verified token costing much more than a prompt token
is what the verify forward's output path costs (llama.cpp's LM head and logits copy, cadedit's copy).
"""

from __future__ import annotations

import argparse
import math
import time

from cadedit.backends.model import language_model, load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prefix", type=int, default=900)
    parser.add_argument("--widths", default="16,64,256")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    loaded = load_model(args.model, threads=args.threads, backend="llama")
    lm = language_model(loaded)
    lm.reset()
    vocab = loaded.model.config.vocab_size
    widths = [int(k) for k in args.widths.split(",")]
    filler = [(1000 + 7 * t) % vocab for t in range(args.prefix + max(widths))]
    start = time.perf_counter()
    lm.feed(filler[: args.prefix])
    prompt = time.perf_counter() - start
    print(f"prompt of {args.prefix} tokens: {1000 * prompt / args.prefix:.2f} ms a token")
    for k in widths:
        costs = []
        for keep in (1, k):
            best = math.inf
            for _ in range(args.reps):
                start = time.perf_counter()
                lm.feed(filler[args.prefix : args.prefix + k], keep=keep)
                best = min(best, time.perf_counter() - start)
                lm.crop(k)
            costs.append(1000 * best / k)
        print(f"k={k}: logits of the last token {costs[0]:.2f} ms a token, of every token {costs[1]:.2f} ms a token")


if __name__ == "__main__":
    main()
