"""Microbenchmark of the program FSM (cadedit.decode.fsm) on a real tokenizer: build times and mask times.

Reports, for the tokenizer at PATH (a Hugging Face folder, a folder holding a .gguf, or a .gguf file;
default $CADEDIT_DEV_MODELS or ~/.cache/cadedit-dev):
  - first build for a tokenizer: vocab_from_tokenizer + compile_grammar, in this fresh process;
  - the same again (cached) and a new document (new N): Grammar.for_document;
  - mask time per masked step (a step where forced() is empty, so the model samples), median / p99 /
    max, cold (a new document, caches empty) and warm (the same document again), over canonical
    programs of code edits and over random walks that sample uniformly from the mask;
  - with --llguidance, the runner-up on the same programs (syntax only: no bounds, no monotonic).
Usage: python tools/fsm_bench.py [PATH] [--programs 40] [--llguidance]

Measured 2026-11-30 on a 2-core CPU shared with other jobs, Qwen2.5 vocabulary (151,936 ids),
`python tools/fsm_bench.py --llguidance`: first build for a tokenizer 0.87-1.8 s wall, 0.86-0.94 s
CPU, then cached in memory (per tokenizer object and per vocabulary; nothing on disk); new document
(new N) 0.5 us, its first mask <= 0.15 ms; mask per masked step median 0.4 us, p99 53-80 us cold
(first visit of each state), 1.4 us warm; outside gen bodies (op choice, digits) cold median 32 us,
p99 0.12-0.16 ms. llguidance, the runner-up, on the same programs with syntax only: 1.9-2.0 ms per
document, mask median 9.8 us, p99 1.3-5 ms, and no ordered copies (I <= J only by listing every start).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cadedit.text import program  # noqa: E402
from cadedit.decode.fsm import BODY, GRAMMAR_PATH, STOP, compile_grammar  # noqa: E402
from cadedit.backends.vocab import vocab_from_tokenizer  # noqa: E402

CODE = '''def parse(text: str) -> list[int]:
    """Numbers in text; `<` and `</e` are fine here, and so is 日本語 and ⟨escaped⟩ text."""
    out = []
    for part in text.split(","):
        if part.strip() and int(part) < 10 and "</em" not in part:
            out.append(int(part))
    return out  # <</gen-like> tags in comments: <<copy
'''


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    if path.is_dir() and (path / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(path))
    if path.is_dir():
        folders = sorted(p for p in path.iterdir() if (p / "tokenizer.json").exists())
        if folders:
            return AutoTokenizer.from_pretrained(str(folders[0]))
        ggufs = sorted(path.glob("*.gguf"))
        if not ggufs:
            sys.exit(f"no tokenizer.json or .gguf under {path}")
        path = ggufs[0]
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def canonical_programs(count: int, rng: random.Random) -> list[tuple[int, str]]:
    """(N, program text) for edits of files of 37 .. 1200 lines: copies in order with gens between."""
    programs = []
    for _ in range(count):
        n_lines = rng.choice([37, 120, 400, 1200])
        ops, line = [], 1
        while line <= n_lines:
            end = min(n_lines, line + rng.randint(0, n_lines // 4))
            ops.append(program.Copy(line, end))
            if rng.random() < 0.6:
                ops.append(program.Gen("\n".join(CODE.splitlines()[: rng.randint(1, 7)]) + "\n"))
            line = end + 1 + rng.randint(0, 5)
        programs.append((n_lines, program.format(program.Program(tuple(ops)))))
    return programs


def mask_times(constraint, token_ids, structural: list | None = None) -> list[float]:
    """Seconds per allowed_mask() call at the masked steps of one program (forced steps skipped);
    the steps outside gen bodies (op choice, line digits) are also appended to `structural`."""
    cursor, times = constraint.cursor(), []
    for t in token_ids:
        if not cursor.forced():
            in_body = cursor.state[0] == BODY
            start = time.perf_counter()
            mask = cursor.allowed_mask()
            times.append(time.perf_counter() - start)
            if structural is not None and not in_body:
                structural.append(times[-1])
            assert mask[t], (cursor.text()[-60:], t)
        assert cursor.advance(t), (cursor.text()[-60:], t)
    return times


def random_walk(constraint, rng: random.Random, limit: int = 150) -> list[int]:
    cursor, taken = constraint.cursor(), []
    while cursor.state[0] != STOP and len(taken) < limit:
        ids = cursor.allowed_ids()
        t = int(ids[rng.randrange(len(ids))])
        cursor.advance(t)
        taken.append(t)
    return taken


def summary(name: str, seconds: list[float]) -> str:
    us = np.array(seconds) * 1e6
    return (
        f"{name:<34} n={len(us):>6}  median {np.median(us):8.1f} us  p99 {np.percentile(us, 99):8.1f} us"
        f"  max {us.max():8.1f} us"
    )


def bench_fsm(tok, args) -> None:
    cpu = time.process_time()
    (vocab, t_vocab) = timed(vocab_from_tokenizer, tok)
    encode = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    (grammar, t_compile) = timed(compile_grammar, vocab, encode)
    cpu = time.process_time() - cpu
    print(f"vocabulary: {len(vocab)} ids, {len(vocab.special_ids)} never allowed, eos {sorted(vocab.eos_ids)}")
    print(
        f"first build for this tokenizer: {t_vocab + t_compile:.3f} s wall, {cpu:.3f} s CPU "
        f"(vocab_from_tokenizer {t_vocab:.3f} s + compile_grammar {t_compile:.3f} s), then cached in memory"
    )
    (_, t_again) = timed(lambda: compile_grammar(vocab_from_tokenizer(tok), encode))
    print(f"again (cached): {t_again * 1e3:.3f} ms")
    rng = random.Random(0)
    programs = canonical_programs(args.programs, rng)
    new_n = [timed(grammar.for_document, n_lines + k)[1] for k, (n_lines, _) in enumerate(programs)]
    first_masks = []
    for n_lines in (37, 1200, 5000, 100_000):
        cursor = grammar.for_document(n_lines).cursor()
        first_masks.append(timed(cursor.allowed_mask)[1])
    print(
        f"new document (for_document, new N): median {statistics.median(new_n) * 1e6:.1f} us, "
        f"max {max(new_n) * 1e6:.1f} us; its first mask: max {max(first_masks) * 1e6:.1f} us"
    )
    cold, warm, walks_cold, forced, structural = [], [], [], [], []
    for n_lines, text in programs:
        ids = encode(text) + [sorted(vocab.eos_ids)[0]]
        constraint = grammar.for_document(n_lines)
        cold += mask_times(constraint, ids, structural)
        warm += mask_times(constraint, ids)
        cursor = constraint.cursor()
        for t in ids:
            forced.append(timed(cursor.forced)[1])
            cursor.advance(t)
    for k in range(args.programs):
        constraint = grammar.for_document(rng.choice([1, 37, 1200]), monotonic=bool(k % 2))
        walks_cold += mask_times(constraint, random_walk(constraint, rng))
    print(summary("mask, canonical programs, cold", cold))
    print(summary("mask, canonical programs, warm", warm))
    print(summary("mask, random walks, cold", walks_cold))
    print(summary("mask, all of the above", cold + warm + walks_cold))
    print(summary("mask, cold, outside gen bodies", structural))
    print(summary("forced(), every step", forced))
    if args.llguidance:
        bench_llguidance(tok, programs, encode)


def bench_llguidance(tok, programs, encode) -> None:
    """The runner-up on the same canonical programs; syntax only (it cannot bound or order lines)."""
    import llguidance
    import llguidance.hf

    lltok, t_tok = timed(llguidance.hf.from_tokenizer, tok)
    text = GRAMMAR_PATH.read_text()
    text = re.sub(r"^gen:.*$", lambda _: 'gen: "<gen>\\n" body "\\n"', text, flags=re.M)
    body = "body[lazy]: /(?s:.*)<\\/gen>/ & ~/(?s:.*)(<copy|<\\/copy>|<gen>|<\\/program>)(?s:.*)/"
    text = re.sub(r"^BODY:.*$", lambda _: body, text, flags=re.M)
    lark = '%llguidance {"no_forcing": true}\n' + text.replace("op*", "op+")
    builds, times = [], []
    for _, program_text in programs:
        matcher, t_build = timed(llguidance.LLMatcher, lltok, lark, log_level=0)
        builds.append(t_build)
        for t in encode(program_text):
            start = time.perf_counter()
            matcher.compute_bitmask()
            times.append(time.perf_counter() - start)
            matcher.consume_token(t)
    print(f"llguidance: tokenizer {t_tok:.3f} s; matcher per document median {statistics.median(builds) * 1e3:.2f} ms")
    print(summary("llguidance mask, every step", times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path(os.environ.get("CADEDIT_DEV_MODELS", Path.home() / ".cache" / "cadedit-dev"))
    parser.add_argument("path", nargs="?", type=Path, default=default)
    parser.add_argument("--programs", type=int, default=40)
    parser.add_argument("--llguidance", action="store_true", help="also time llguidance on the same programs")
    args = parser.parse_args()
    tok, t_load = timed(load_tokenizer, args.path.expanduser())
    print(f"tokenizer: {type(tok).__name__}, {len(tok)} ids, loaded in {t_load:.2f} s (not part of the build)")
    bench_fsm(tok, args)


if __name__ == "__main__":
    main()
