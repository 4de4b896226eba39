"""Which prompt makes the model choose better spans: every variant in cadedit.prompt.VARIANTS (or the
ones named) on the same HumanEvalFix cases, greedy, drafts on.

Per variant: programs that finished (no budget error), exact matches, hidden tests passed, and how
close the edited file is to gold compared with the input (line-level difflib ratio; > 0 means the
edit moved the file towards gold, < 0 that it damaged it), copies per program, wall clock.

  python benchmarks/prompt_eval.py --data DATA/humanevalfix_python.jsonl --model MODEL --cases 6
  python benchmarks/prompt_eval.py --data ... --model ... --variants default,two-shot --start 20
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decode_bench as bench  # noqa: E402


def closeness(text: str, gold: str) -> float:
    return difflib.SequenceMatcher(None, text.splitlines(), gold.splitlines(), autojunk=False).ratio()


def main(argv: list[str] | None = None) -> None:
    from cadedit.prompt import VARIANTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--model")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--context", choices=("docs", "nodocs"), default="docs")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    loaded = bench.load(args)
    cases = bench.load_cases(args.data, args.cases, args.context, args.start)
    results = {}
    for variant in args.variants.split(","):
        rows = []
        for case in cases:
            row = bench.own_case(loaded, case, variant, args.timeout)
            edited = row.get("program") and _edited(case, row)
            row["gain"] = closeness(edited, case.after) - closeness(case.before, case.after) if edited else None
            rows.append(row)
            print(f"{variant:<10} {row['id']:<12} exact={row['exact']!s:<5} passed={row['passed']!s:<5} "
                  f"gain={row['gain'] if row['gain'] is None else round(row['gain'], 3)} {row['seconds']:.0f}s", flush=True)
        done = [r for r in rows if "error" not in r]
        results[variant] = {
            "finished": len(done), "exact": sum(r["exact"] for r in rows), "passed": sum(bool(r["passed"]) for r in rows),
            "mean_gain": sum(r["gain"] for r in done) / len(done) if done else None,
            "copies": sum(r["copies"] for r in done) / len(done) if done else None,
            "seconds": sum(r["seconds"] for r in rows), "cases": rows,
        }
    print(f"\n{'variant':<10} finished exact passed mean_gain copies seconds")
    for variant, r in results.items():
        gain = "-" if r["mean_gain"] is None else f"{r['mean_gain']:+.3f}"
        copies = "-" if r["copies"] is None else f"{r['copies']:.1f}"
        print(f"{variant:<10} {r['finished']:>4}/{len(cases)} {r['exact']:>5} {r['passed']:>6} {gain:>9} {copies:>6} "
              f"{r['seconds']:>7.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


def _edited(case, row) -> str:
    """The edited text, re-resolved from the program the model wrote."""
    from cadedit.resolve import to_document_program
    from cadedit.document import Document
    from cadedit.program import parse
    from cadedit.resolve import resolve

    before = Document.from_text(case.before)
    return resolve(to_document_program(parse(row["program"]), before), before)


if __name__ == "__main__":
    main()
