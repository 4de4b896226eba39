"""Which prompt makes the model choose better spans: every variant in cadedit.prompt.messages.VARIANTS (or the
ones named) on the same corpus cases, program mode, greedy, drafts on.

Per variant: programs that finished (no budget error), exact matches, tests passed, and how close
the edited file is to gold compared with the input (line-level difflib ratio; > 0 means the edit
moved the file towards gold, < 0 that it damaged it), copies per program, wall clock. Cases come
from the shared corpus loader (cadedit.bench.corpus), tests run through cadedit.bench.harness.
The numbers in cadedit/prompt/messages.py were measured on whole HumanEvalFix files with their docstrings
(a generic corpus with before = input_code_docs, after = gold_code_docs).

  python tools/prompt_eval.py --corpus DATA/humanevalfix_python.jsonl --model MODEL --cases 6
  python tools/prompt_eval.py --corpus ... --model ... --variants default,two-shot --skip 20
"""

from __future__ import annotations

import argparse
import difflib
import json
import time
from pathlib import Path


def closeness(text: str, gold: str) -> float:
    return difflib.SequenceMatcher(None, text.splitlines(), gold.splitlines(), autojunk=False).ratio()


def own_case(loaded, case, variant: str, timeout: float) -> dict:
    """The model's own program for one case with one prompt variant."""
    from cadedit.bench.e2e import document_for
    from cadedit.bench.harness import run_test
    from cadedit.errors import CadeditError
    from cadedit.options import EditOptions, Mode
    from cadedit.decode.pipeline import edit_file

    start = time.perf_counter()
    try:
        result = edit_file(
            document_for(case),
            case.instruction,
            EditOptions(model=loaded.name, mode=Mode.PROGRAM, variant=variant),
            loaded=loaded,
        )
    except CadeditError as exc:
        return {
            "id": case.id,
            "error": exc.message,
            "seconds": time.perf_counter() - start,
            "exact": False,
            "passed": False,
            "gain": None,
        }
    return {
        "id": case.id,
        "exact": result.new_text == case.after,
        "passed": run_test(case, result.new_text, timeout).passed,
        "seconds": time.perf_counter() - start,
        "copies": result.stats.copies,
        "gain": closeness(result.new_text, case.after) - closeness(case.before, case.after),
    }


def main(argv: list[str] | None = None) -> None:
    from cadedit.bench.corpus import load_corpus
    from cadedit.backends.model import load_model
    from cadedit.prompt.messages import VARIANTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="a corpus JSONL (cadedit/bench/corpus.py)")
    parser.add_argument("--model")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    loaded = load_model(args.model, dtype=args.dtype, threads=args.threads)
    cases = load_corpus(args.corpus, args.skip + args.cases)[args.skip :]
    results = {}
    for variant in args.variants.split(","):
        rows = []
        for case in cases:
            row = own_case(loaded, case, variant, args.timeout)
            rows.append(row)
            print(
                f"{variant:<10} {row['id']:<12} exact={row['exact']!s:<5} passed={row['passed']!s:<5} "
                f"gain={row['gain'] if row['gain'] is None else round(row['gain'], 3)} {row['seconds']:.0f}s",
                flush=True,
            )
        done = [r for r in rows if "error" not in r]
        results[variant] = {
            "finished": len(done),
            "exact": sum(r["exact"] for r in rows),
            "passed": sum(bool(r["passed"]) for r in rows),
            "mean_gain": sum(r["gain"] for r in done) / len(done) if done else None,
            "copies": sum(r["copies"] for r in done) / len(done) if done else None,
            "seconds": sum(r["seconds"] for r in rows),
            "cases": rows,
        }
    print(f"\n{'variant':<10} finished exact passed mean_gain copies seconds")
    for variant, r in results.items():
        gain = "-" if r["mean_gain"] is None else f"{r['mean_gain']:+.3f}"
        copies = "-" if r["copies"] is None else f"{r['copies']:.1f}"
        print(
            f"{variant:<10} {r['finished']:>4}/{len(cases)} {r['exact']:>5} {r['passed']:>6} {gain:>9} {copies:>6} "
            f"{r['seconds']:>7.0f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
