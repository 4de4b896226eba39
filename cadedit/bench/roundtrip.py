"""Oracle round trip (paper §4.3, Table 4): is the pipeline lossless on a corpus?

For each case: program = oracle(before, after); its canonical text must parse back to the same
program (parse(format(p)) == p); resolving it against `before` in strict and in clipped mode must
give `after` byte for byte (cadedit's standard; the paper allows one trailing newline) and after
.strip() (trimmed EM). The audit counts golds that contain a reserved literal (`</gen>`, `<copy`,
...): the paper found none; cadedit escapes them, so they must round-trip too.
Pure: no torch, no transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

from cadedit.bench.corpus import Case
from cadedit.errors import CadeditError
from cadedit.text.oracle import oracle
from cadedit.text.program import RESERVED, format, parse
from cadedit.text.resolve import Bounds, resolve_ops
from cadedit.bench.options import CorpusOpt, JsonOpt, LimitOpt
from cadedit.bench.running import out, run_corpora
from cadedit.bench.options import load_corpora


MODES = (Bounds.STRICT, Bounds.CLIPPED)


@dataclass(frozen=True)
class ModeResult:
    exact: bool
    trimmed: bool
    warnings: int
    error: str | None = None


@dataclass(frozen=True)
class CaseRoundtrip:
    id: str
    text_roundtrip: bool
    reserved: tuple[str, ...]
    modes: dict[str, ModeResult]


def resolve_case(program_text: str, case: Case, mode: Bounds) -> ModeResult:
    """Parse program text and resolve it against the case's input; compare with the gold."""
    try:
        resolution = resolve_ops(parse(program_text), case.before_doc, mode)
    except CadeditError as exc:
        return ModeResult(False, False, 0, exc.message)
    text = resolution.text
    return ModeResult(text == case.after, text.strip() == case.after.strip(), len(resolution.warnings))


def roundtrip_case(case: Case) -> CaseRoundtrip:
    program = oracle(case.before_doc, case.after_doc)
    text = format(program)
    try:
        same = parse(text) == program
    except CadeditError:
        same = False
    reserved = tuple(lit for lit in RESERVED if lit in case.after)
    return CaseRoundtrip(case.id, same, reserved, {mode.value: resolve_case(text, case, mode) for mode in MODES})


def summarize(results: list[CaseRoundtrip]) -> dict:
    """Counts per mode (Table 4) and the audit, with the ids of any failures."""
    out: dict = {
        "n": len(results),
        "program_text_roundtrip": sum(r.text_roundtrip for r in results),
        "reserved_literal_golds": [r.id for r in results if r.reserved],
        "modes": {},
    }
    for mode in MODES:
        rows = [(r.id, r.modes[mode.value]) for r in results]
        out["modes"][mode.value] = {
            "exact": sum(m.exact for _, m in rows),
            "trimmed": sum(m.trimmed for _, m in rows),
            "out_of_range": sum(m.warnings > 0 or m.error is not None for _, m in rows),
            "failures": [{"id": i, "error": m.error} for i, m in rows if not m.exact],
        }
    return out


def roundtrip(corpus: CorpusOpt, json_path: JsonOpt = None, limit: LimitOpt = None) -> None:
    """Oracle round trip, strict and clipped (Table 4), and the reserved-literal audit (§4.3).

    Each oracle program goes through format, parse and the resolver; exits 1 if any case is not
    byte-exact.

    Example: cadedit bench roundtrip -c humanevalfix_python.jsonl
    """

    corpora = load_corpora(corpus, limit)
    done = run_corpora(
        corpora,
        "roundtrip",
        lambda name, case: roundtrip_case(case),
        lambda done: {"command": "roundtrip", "corpora": {n: summarize(r) for n, r in done.items()}},
        json_path,
    )
    rows, failed = [], []
    for name, cases in done.items():
        s = summarize(cases)
        for mode, m in s["modes"].items():
            rows.append(
                [
                    name,
                    mode,
                    str(s["n"]),
                    f"{m['exact']}/{s['n']}",
                    f"{m['trimmed']}/{s['n']}",
                    f"{m['out_of_range']}/{s['n']}",
                    f"{s['program_text_roundtrip']}/{s['n']}",
                    f"{len(s['reserved_literal_golds'])}/{s['n']}",
                ]
            )
            failed += [f"{name}:{f['id']} ({mode})" for f in m["failures"]]
    out.table(
        "Oracle round trip (byte-exact and trimmed EM)",
        ["corpus", "mode", "cases", "byte-exact", "trimmed", "out of range", "parse(format)", "reserved in gold"],
        rows,
    )
    if failed:
        raise CadeditError(
            f"roundtrip: {len(failed)} case(s) not byte-exact: {', '.join(failed[:5])}"
            + (" ..." if len(failed) > 5 else "")
        )
