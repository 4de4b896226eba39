"""Decoding modes side by side: program (Copy-as-Decode), rewrite (greedy), lookup (prompt lookup
decoding) and verify (verified copy), on the same cases, one case at a time, every mode in turn.

Cases: HumanEvalFix records (whole file: the declaration with its docstring plus the buggy body;
gold = the canonical body) from each --data JSONL, the first --limit of each; and --long cases
per file: consecutive gold solutions of the same file concatenated to 300+ lines, with ONE of
them replaced by its buggy version where the bug is a one-line change (early, middle or late in
the file), instruction "Fix bugs in NAME.", its hidden test run against the whole edited file.
Per case and mode: wall clock (model loaded once, a warm-up forward first), ratio to rewrite,
forward passes, exact match, hidden test passed, and whether the output ids equal rewrite's.

The lead runs the full benchmark on a quiet machine (a 300-line rewrite at ~250 ms/token takes
over ten minutes), e.g.:
  python benchmarks/modes_bench.py --model MODEL_DIR --data DATA/humanevalfix_python.jsonl \\
      --data DATA/humanevalfix_js.jsonl --limit 20 --long 2 --threads 2 --json modes.json
Smoke test: --limit 1 --long 0 --modes rewrite,verify.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODES = ("program", "rewrite", "lookup", "verify")
LONG_LINES = 300
JS_MD5_SHIM = ("const crypto = require('crypto');\n"
               "module.exports = (s) => crypto.createHash('md5').update(String(s)).digest('hex');\n")


@dataclass(frozen=True)
class Case:
    id: str
    group: str  # "python", "javascript", "long-python", ...
    language: str
    path: str  # a file name for the prompt (its suffix picks the fence's language tag)
    before: str
    after: str
    instruction: str
    test: str


# -- cases ---------------------------------------------------------------------------------------


def read_records(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def language_of(record: dict) -> str:
    return "python" if record["task_id"].lower().startswith("python") else "javascript"


def suffix(language: str) -> str:
    return ".py" if language == "python" else ".js"


def humanevalfix_cases(records: list[dict], limit: int, skip: int = 0) -> list[Case]:
    cases = []
    for r in records[skip : skip + limit]:
        language = language_of(r)
        cases.append(Case(r["task_id"], language, language, "solution" + suffix(language), r["input_code_docs"],
                          r["gold_code_docs"], f"Fix bugs in {r['entry_point']}.", r["test"]))
    return cases


def one_line_bug(record: dict) -> bool:
    """Whether the bug is exactly one changed line (buggy vs canonical body)."""
    a = record["buggy_solution"].splitlines(keepends=True)
    b = record["canonical_solution"].splitlines(keepends=True)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    return len(ops) == 1 and ops[0][0] == "replace" and ops[0][2] - ops[0][1] == 1 and ops[0][4] - ops[0][3] == 1


def long_cases(records: list[dict], count: int) -> list[Case]:
    """Deterministic long files: windows of consecutive gold solutions, one made buggy (see above)."""
    cases = []
    positions = (0.5, 0.2, 0.8)  # where in the file the bug sits, case by case
    for k in range(count):
        first = (17 + 53 * k) % len(records)
        window, lines = [], 0
        while lines < LONG_LINES:
            record = records[(first + len(window)) % len(records)]
            window.append(record)
            lines += record["gold_code_docs"].count("\n") + 1
        buggy = _bug_index(window, positions[k % len(positions)])
        golds = [r["gold_code_docs"] for r in window]
        befores = [r["input_code_docs"] if i == buggy else g for i, (r, g) in enumerate(zip(window, golds))]
        target = window[buggy]
        language = language_of(target)
        cases.append(Case(f"long/{target['task_id']}@{buggy + 1}of{len(window)}", "long-" + language, language,
                          "module" + suffix(language), "\n".join(befores), "\n".join(golds),
                          f"Fix bugs in {target['entry_point']}.", target["test"]))
    return cases


def _bug_index(window: list[dict], where: float) -> int:
    """The one-line bug nearest the wanted position in the window."""
    wanted = int(where * (len(window) - 1))
    usable = [i for i, r in enumerate(window) if one_line_bug(r)] or [wanted]
    return min(usable, key=lambda i: (abs(i - wanted), i))


# -- running a case --------------------------------------------------------------------------------


def passes(language: str, code: str, test: str, timeout: float) -> bool:
    """HumanEvalFix scoring: run code + test; Python exit 0, node exit 0 with an empty stderr."""
    with tempfile.TemporaryDirectory(prefix="modes-bench-") as tmp:
        script = Path(tmp) / ("program.py" if language == "python" else "program.js")
        script.write_text(code + "\n" + test, encoding="utf-8")
        if language != "python":
            shim = Path(tmp) / "node_modules" / "js-md5" / "index.js"
            shim.parent.mkdir(parents=True)
            shim.write_text(JS_MD5_SHIM, encoding="utf-8")
        command = [sys.executable if language == "python" else "node", script.name]
        try:
            done = subprocess.run(command, cwd=tmp, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except (subprocess.TimeoutExpired, FileNotFoundError):
            return False
        return done.returncode == 0 and (language == "python" or not done.stderr.strip())


def run_mode(loaded, case: Case, mode: str, max_new_tokens: int | None) -> dict:
    """One edit in one mode: what the user waits for (prompt, decode, resolve), and what came out."""
    from cadedit.document import Document
    from cadedit.errors import CadeditError
    from cadedit.pipeline import EditOptions, edit_file
    from cadedit.rewrite import rewrite_file

    document = Document.from_text(case.before, case.path)
    start = time.perf_counter()
    try:
        if mode == "program":
            result = edit_file(document, case.instruction, EditOptions(max_new_tokens=max_new_tokens), loaded=loaded)
            ids = None
        else:
            result = rewrite_file(document, case.instruction, mode, loaded, max_new_tokens)
            ids = list(result.output_ids)
    except CadeditError as exc:
        return {"mode": mode, "error": exc.message, "seconds": time.perf_counter() - start, "exact": False,
                "passed": False, "ids": None}
    seconds = time.perf_counter() - start
    diff = "".join(difflib.unified_diff(case.before.splitlines(keepends=True), result.new_text.splitlines(keepends=True),
                                        "before", "after", n=1))
    return {"mode": mode, "seconds": seconds, "exact": result.new_text == case.after, "changed": result.changed,
            "text": result.new_text, "ids": ids, "diff": diff, "stats": asdict(result.stats),
            "forward_passes": result.stats.forward_passes}


def run_case(loaded, case: Case, modes: list[str], args) -> dict:
    rows = {mode: run_mode(loaded, case, mode, args.max_new_tokens) for mode in modes}
    for row in rows.values():
        if "text" in row:
            row["passed"] = passes(case.language, row.pop("text"), case.test, args.timeout)
    base = rows.get("rewrite")
    for mode, row in rows.items():
        if base and "error" not in base and "error" not in row:
            row["speedup_vs_rewrite"] = base["seconds"] / row["seconds"]
        if base and mode in ("lookup", "verify"):
            row["same_as_rewrite"] = row["ids"] is not None and row["ids"] == base["ids"]
            if row["ids"] is not None and base["ids"] is not None and not row["same_as_rewrite"]:
                row["first_difference"] = first_difference(base["ids"], row["ids"])
    for row in rows.values():
        row.pop("ids")
    return {"id": case.id, "group": case.group, "lines": case.before.count("\n") + 1, "modes": rows}


def first_difference(a: list[int], b: list[int]) -> dict:
    """Where two outputs part: the token index and the ids there (None past an end)."""
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"index": k, "rewrite": a[k] if k < len(a) else None, "this": b[k] if k < len(b) else None,
            "lengths": [len(a), len(b)]}


def print_case(result: dict) -> None:
    parts = []
    for mode, row in result["modes"].items():
        mark = "E" if "error" in row else ("=" if row.get("exact") else ("p" if row.get("passed") else "x"))
        same = {True: " same", False: " DIFF"}.get(row.get("same_as_rewrite"), "")
        parts.append(f"{mode} {row['seconds']:7.1f}s {row.get('forward_passes', '-'):>5}fw {mark}{same}")
    print(f"{result['id']:<28} {result['lines']:>4} lines | " + " | ".join(parts), file=sys.stderr, flush=True)


# -- summary ---------------------------------------------------------------------------------------


def summarise(results: list[dict], modes: list[str]) -> dict:
    """Per group and mode: pooled seconds, pooled and median speed-up vs rewrite, exact, passed."""
    summary: dict = {}
    for group in sorted({r["group"] for r in results}):
        rows = [r for r in results if r["group"] == group]
        summary[group] = {mode: _summary(rows, mode) for mode in modes}
        long_targets = group.startswith("long") and all(m in modes for m in ("rewrite", "lookup", "verify"))
        if long_targets:
            s = summary[group]
            summary[group]["targets"] = {
                "verify_vs_lookup": s["lookup"]["seconds"] / s["verify"]["seconds"],
                "verify_vs_rewrite": s["rewrite"]["seconds"] / s["verify"]["seconds"],
                "met": s["lookup"]["seconds"] >= 2 * s["verify"]["seconds"]
                and s["rewrite"]["seconds"] >= 3 * s["verify"]["seconds"],
            }
    return summary


def _summary(rows: list[dict], mode: str) -> dict:
    mine = [r["modes"][mode] for r in rows]
    out = {"cases": len(mine), "seconds": sum(m["seconds"] for m in mine),
           "forward_passes": sum(m.get("forward_passes", 0) for m in mine),
           "exact": sum(bool(m["exact"]) for m in mine), "passed": sum(bool(m.get("passed")) for m in mine),
           "errors": sum("error" in m for m in mine)}
    ratios = [m["speedup_vs_rewrite"] for m in mine if "speedup_vs_rewrite" in m]
    if ratios:
        base = sum(r["modes"]["rewrite"]["seconds"] for r in rows)
        out["speedup_vs_rewrite_pooled"] = base / out["seconds"]
        out["speedup_vs_rewrite_median"] = statistics.median(ratios)
    same = [m["same_as_rewrite"] for m in mine if "same_as_rewrite" in m]
    if same:
        out["same_as_rewrite"] = f"{sum(same)}/{len(same)}"
    return out


def print_summary(summary: dict) -> None:
    for group, by_mode in summary.items():
        print(f"\n{group}")
        for mode, s in by_mode.items():
            if mode == "targets":
                print(f"  targets: verify {s['verify_vs_lookup']:.2f}x faster than lookup (>= 2), "
                      f"{s['verify_vs_rewrite']:.2f}x faster than rewrite (>= 3): {'met' if s['met'] else 'NOT met'}")
                continue
            speed = (f"x{s['speedup_vs_rewrite_pooled']:.2f} pooled, x{s['speedup_vs_rewrite_median']:.2f} median"
                     if "speedup_vs_rewrite_pooled" in s else "")
            print(f"  {mode:<8} {s['seconds']:8.1f}s {speed:<30} forwards {s['forward_passes']:>6}  "
                  f"exact {s['exact']}/{s['cases']}  passed {s['passed']}/{s['cases']}  errors {s['errors']}"
                  + (f"  same as rewrite {s['same_as_rewrite']}" if "same_as_rewrite" in s else ""))


# -- wiring ----------------------------------------------------------------------------------------


def warm_up(loaded) -> None:
    """One small forward so oneDNN's first-call setup is not billed to the first mode."""
    from cadedit.rewrite import CachedLM
    from cadedit.model import new_cache

    CachedLM(loaded.model, new_cache(loaded)).feed(list(range(100, 132)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", action="append", required=True, help="HumanEvalFix JSONL (repeatable)")
    parser.add_argument("--model", help="hub id, model folder or .gguf (default: as cadedit fix chooses)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {','.join(MODES)}")
    parser.add_argument("--limit", type=int, default=20, help="HumanEvalFix cases per --data file")
    parser.add_argument("--skip", type=int, default=0, help="start after this many records of each file")
    parser.add_argument("--long", type=int, default=2, help="long (300+ line) one-line-bug cases per --data file")
    parser.add_argument("--long-only", action="store_true", help="only the long cases")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per hidden test run")
    parser.add_argument("--json", help="write every case and the summary here")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")

    cases: list[Case] = []
    for path in args.data:
        records = read_records(path)
        cases += ([] if args.long_only else humanevalfix_cases(records, args.limit, args.skip)) + long_cases(records, args.long)

    from cadedit.model import load_model

    loaded = load_model(args.model, dtype=args.dtype, threads=args.threads)
    print(f"model {loaded.name}: {loaded.dtype}, {loaded.threads} threads, loaded in {loaded.load_seconds:.1f}s; "
          f"{len(cases)} cases, modes {', '.join(modes)}", file=sys.stderr, flush=True)
    warm_up(loaded)
    results = []
    for case in cases:
        results.append(run_case(loaded, case, modes, args))
        print_case(results[-1])
    summary = summarise(results, modes)
    print_summary(summary)
    if args.json:
        environment = {"model": loaded.name, "dtype": str(loaded.dtype), "threads": loaded.threads,
                       "device": loaded.device, "argv": sys.argv[1:]}
        Path(args.json).write_text(json.dumps({"environment": environment, "summary": summary, "cases": results},
                                              indent=2, default=str))


if __name__ == "__main__":
    main()
