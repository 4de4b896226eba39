"""The copy ceiling (paper §4.2, Table 2, Appendix D) and the speedup bounds of eq. (3).

Line level, "paper" counting (reproduces Table 2 exactly, e.g. HumanEvalFix-Python with the
Qwen2.5-Coder tokenizer: T = 8,872, T_copy = 6,577, K = 295, f = 74.1%): the gold is the `after`
text alone; both texts are split with text.split("\\n") (so a final newline leaves an empty last
"line"); difflib.SequenceMatcher(autojunk=False) aligns them; every equal block is one copy op
(K counts them all, even the empty last line, which has 0 tokens); a span's tokens are those of
its lines joined with "\\n", tokenised on their own; T = tokens of the whole gold (not a sum of
pieces) and T_gen = T - T_copy. "splice" counting instead uses cadedit's own oracle program
(lines with terminators) and counts each copy as the tokens cadedit splices, display_text(i, j).
Span length percentiles are per span (linear); the mean matches Table 2 (22.3 / 37.7) but the
paper's p50/p95 (19/56, 25/102) follow from no per-span or per-case percentile we tried.
Token level: greedy left-to-right longest match of the gold's tokens anywhere in the input's,
taken when at least m tokens long (else one gen token); 91.0% / 93.3% at m = 8 as the paper.
Bounds with s(N) from a kernel JSON, interpolated linearly in log N (clamped at the ends):
bnd_m8 = 1/((1-f) + f/s(8)), bnd_N̄ = 1/((1-f) + f/s(N̄)), bnd_exact = T/(T_gen + Σ N_k/s(N_k)).
Pure: no torch.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cadedit.bench.corpus import Case
from cadedit.bench.report import percentile
from cadedit.bench.tokens import TokenCounter
from cadedit.errors import CadeditError
from cadedit.text.oracle import oracle
from cadedit.text.program import Copy
from cadedit.bench.options import CorpusOpt, CountingOpt, JsonOpt, KernelOpt, LimitOpt, ModelOpt, TokenizerOpt
from cadedit.cli.common import err
from cadedit.bench.running import out, run_corpora
from cadedit.bench.options import load_corpora
from cadedit.bench.report import fmt_float, fmt_int, fmt_pct
from cadedit.bench.tokens import load_tokenizer, tokenizer_spec

MIN_SPANS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class CaseCeiling:
    """One case: gold tokens, copy span lengths in tokens, and the token-level greedy cover per m."""

    id: str
    total: int
    spans: tuple[int, ...]
    greedy: dict[int, int] = field(default_factory=dict)

    @property
    def copied(self) -> int:
        return sum(self.spans)


@dataclass(frozen=True)
class Ceiling:
    """Aggregates over a corpus (or several pooled): the Table 2 row plus the greedy covers."""

    name: str
    cases: tuple[CaseCeiling, ...]

    @property
    def n(self) -> int:
        return len(self.cases)

    @property
    def total(self) -> int:
        return sum(c.total for c in self.cases)

    @property
    def copied(self) -> int:
        return sum(c.copied for c in self.cases)

    @property
    def generated(self) -> int:
        return self.total - self.copied

    @property
    def spans(self) -> list[int]:
        return [n for c in self.cases for n in c.spans]

    @property
    def fraction(self) -> float:
        return self.copied / self.total if self.total else math.nan

    def greedy_fraction(self, m: int) -> float:
        return sum(c.greedy.get(m, 0) for c in self.cases) / self.total if self.total else math.nan

    def summary(self) -> dict:
        spans = self.spans
        return {
            "name": self.name,
            "n": self.n,
            "T": self.total,
            "T_copy": self.copied,
            "T_gen": self.generated,
            "f": self.fraction,
            "K": len(spans),
            "span_mean": sum(spans) / len(spans) if spans else math.nan,
            "span_p50": percentile(spans, 50),
            "span_p95": percentile(spans, 95),
            "greedy": {str(m): self.greedy_fraction(m) for m in MIN_SPANS},
        }


def paper_spans(case: Case, tokens: TokenCounter) -> tuple[int, ...]:
    """Copy-span token lengths under the paper's counting (see the module docstring)."""
    before, after = case.before.split("\n"), case.after.split("\n")
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return tuple(tokens.count("\n".join(after[j1:j2])) for tag, _, _, j1, j2 in matcher.get_opcodes() if tag == "equal")


def splice_spans(case: Case, tokens: TokenCounter) -> tuple[int, ...]:
    """Copy-span token lengths of cadedit's oracle program: the tokens each copy splice feeds."""
    before = case.before_doc
    program = oracle(before, case.after_doc)
    return tuple(tokens.count(before.display_text(op.start, op.end)) for op in program.ops if isinstance(op, Copy))


def longest_matches(src: Sequence[int], gold: Sequence[int]) -> np.ndarray:
    """L[i] = length of the longest run gold[i:i+L] found anywhere in src (dynamic programming, O(|src||gold|))."""
    s = np.asarray(src, dtype=np.int64)
    out = np.zeros(len(gold), dtype=np.int64)
    run = np.zeros(len(s) + 1, dtype=np.int64)  # run[k] = match length of gold[i:] at src[k:]
    for i in range(len(gold) - 1, -1, -1):
        run = np.concatenate(((s == gold[i]) * (1 + run[1:]), [0]))
        out[i] = run.max() if len(s) else 0
    return out


def greedy_cover(matches: np.ndarray, m: int) -> int:
    """Tokens covered by the greedy left-to-right longest-match cover with spans of at least m tokens."""
    covered, i = 0, 0
    while i < len(matches):
        length = int(matches[i])
        if length >= m:
            covered += length
            i += length
        else:
            i += 1
    return covered


def case_ceiling(case: Case, tokens: TokenCounter, counting: str = "paper", token_level: bool = True) -> CaseCeiling:
    spans = paper_spans(case, tokens) if counting == "paper" else splice_spans(case, tokens)
    greedy: dict[int, int] = {}
    if token_level:
        matches = longest_matches(tokens.ids(case.before), tokens.ids(case.after))
        greedy = {m: greedy_cover(matches, m) for m in MIN_SPANS}
    return CaseCeiling(case.id, tokens.count(case.after), spans, greedy)


# -- the kernel curve and the bounds of eq. (3) ------------------------------------------------


@dataclass(frozen=True)
class SpeedupCurve:
    """Measured s(N) at span lengths N; s() interpolates linearly in log N, clamped at the ends."""

    n: tuple[int, ...]
    s: tuple[float, ...]
    source: str = ""

    def __call__(self, n: float) -> float:
        return float(np.interp(math.log(max(n, 1)), [math.log(k) for k in self.n], self.s))


def load_curve(path: str | Path) -> SpeedupCurve:
    """s(N) from a `cadedit bench kernel` JSON (results: [{n, speedup}, ...])."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        points = sorted((int(r["n"]), float(r["speedup"])) for r in data["results"] if r.get("speedup"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CadeditError(
            f"{path}: not a kernel results file ({exc})", hint="make one with: cadedit bench kernel --json kernel.json"
        ) from None
    if not points:
        raise CadeditError(f"{path}: the kernel results have no speedups yet")
    return SpeedupCurve(tuple(n for n, _ in points), tuple(s for _, s in points), str(path))


def bounds(ceiling: Ceiling, s: Callable[[float], float], m: int = 8) -> dict[str, float]:
    """bnd_m (conservative), bnd_N̄ (aspirational) and bnd_exact (eq. 3 over the span histogram)."""
    spans, f, T = ceiling.spans, ceiling.fraction, ceiling.total
    mean = sum(spans) / len(spans) if spans else 0.0
    splice_cost = sum(n / s(n) for n in spans if n > 0)
    return {
        f"s_m{m}": s(m),
        f"bnd_m{m}": 1 / ((1 - f) + f / s(m)),
        "bnd_mean": 1 / ((1 - f) + f / s(mean)) if spans else 1.0,
        "bnd_exact": T / (ceiling.generated + splice_cost) if T else math.nan,
    }


def greedy_bounds(ceiling: Ceiling, s: Callable[[float], float]) -> dict[str, float]:
    """Token-level conservative bound per m: 1/((1-f_m) + f_m/s(m)) (paper Figure 4b)."""
    return {str(m): 1 / ((1 - f) + f / s(m)) for m in MIN_SPANS if (f := ceiling.greedy_fraction(m)) == f}


def ceiling(
    corpus: CorpusOpt,
    tokenizer: TokenizerOpt = None,
    model: ModelOpt = None,
    kernel: KernelOpt = None,
    counting: CountingOpt = "paper",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Line-level copy ceiling (Table 2), token-level greedy cover (m = 1..32) and the bounds of eq. (3).

    Example: cadedit bench ceiling -c humanevalfix_python.jsonl -c humanevalfix_js.jsonl --tokenizer model.gguf
    """

    corpora = load_corpora(corpus, limit)
    curve = load_curve(kernel) if kernel else None
    tokens = load_tokenizer(tokenizer_spec(tokenizer, model))
    done = run_corpora(
        corpora,
        "ceiling",
        lambda name, case: case_ceiling(case, tokens, counting),
        lambda done: _ceiling_json(done, tokens.name, counting, curve),
        json_path,
    )
    _print_ceiling(_ceilings(done), curve, tokens.name, counting)


def _ceilings(done: dict[str, list]) -> list:

    rows = [Ceiling(name, tuple(cases)) for name, cases in done.items()]
    if len(rows) > 1:
        rows.append(Ceiling("pooled", tuple(c for row in rows for c in row.cases)))
    return rows


def _ceiling_json(done: dict[str, list], tokenizer: str, counting: str, curve) -> dict:

    corpora = []
    for row in _ceilings(done):
        entry = row.summary()
        if curve and row.total:
            entry["bounds"] = bounds(row, curve)
            entry["greedy_bounds"] = greedy_bounds(row, curve)
        if row.name != "pooled":
            entry["cases"] = [
                {"id": c.id, "T": c.total, "spans": list(c.spans), "greedy": {str(m): v for m, v in c.greedy.items()}}
                for c in row.cases
            ]
        corpora.append(entry)
    return {
        "command": "ceiling",
        "tokenizer": tokenizer,
        "counting": counting,
        "kernel": curve.source if curve else None,
        "corpora": corpora,
    }


def _print_ceiling(rows: list, curve, tokenizer: str, counting: str) -> None:

    line = []
    for row in rows:
        s = row.summary()
        line.append(
            [
                row.name,
                str(row.n),
                fmt_int(row.total),
                fmt_int(row.copied),
                fmt_int(row.generated),
                fmt_pct(row.fraction),
                str(s["K"]),
                fmt_float(s["span_mean"]),
                fmt_float(s["span_p50"], 0),
                fmt_float(s["span_p95"], 0),
            ]
        )
    out.table(
        f"Line-level copy ceiling ({counting} counting, tokenizer {tokenizer}); span tokens: mean, p50, p95",
        ["corpus", "n", "T", "T_copy", "T_gen", "f", "K", "mean", "p50", "p95"],
        line,
    )
    greedy = [[row.name, *(fmt_pct(row.greedy_fraction(m)) for m in MIN_SPANS)] for row in rows]
    out.table(
        "Token-level greedy cover (aspirational), fraction of gold tokens",
        ["corpus", *(f"m={m}" for m in MIN_SPANS)],
        greedy,
    )
    if curve is None:
        err.print("no --kernel: speedup bounds skipped (make one with `cadedit bench kernel --json K.json`)")
        return
    bnd = []
    for row in rows:
        b, g = bounds(row, curve), greedy_bounds(row, curve)
        bnd.append(
            [
                row.name,
                fmt_float(b["s_m8"], 2, "x"),
                fmt_float(b["bnd_m8"], 2, "x"),
                fmt_float(b["bnd_mean"], 2, "x"),
                fmt_float(b["bnd_exact"], 2, "x"),
                fmt_float(g.get("8"), 2, "x"),
            ]
        )
    out.table(
        f"Speedup bounds, eq. (3), s(N) from {curve.source}",
        ["corpus", "s(8)", "bnd_m8", "bnd_mean", "bnd_exact", "token m=8"],
        bnd,
    )
