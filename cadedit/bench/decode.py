"""`cadedit bench decode`: the decode loop on oracle programs against the bound of eq. (3).

Contract: oracle_case(loaded, case, draft) forces the case's oracle program through the real loop
(pipeline.prepare and run_decode in program mode, decode.script_sampler choosing: real masks,
forced literals, copy splices and, with draft, drafted program tokens) and checks that it resolves
to the gold; then the same model regenerates the gold file one token per forward after the same
prompt, taking the argmax each step (what greedy decoding costs). Both clocks leave the prompt
prefill out. bound() is eq. (3) over the case's own splice spans (bench/ceiling.py: the one
implementation), with s(N) from `cadedit bench kernel --json` or measured_curve() at the prompt's
length in the same process.

Measured (docs/measurements/paper-reproductions.md; HumanEvalFix-Python 0-9 docs context, fp32, 2 threads, 0.5B): pooled
8.96x with drafts against a bound of 8.85x (101%), 4.87x without (53%), 4-10 and 21-29 forwards
per case: eq. (3) charges nothing for the op type, line digits and `</gen>`, which cost one forward
each on a CPU unless drafted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from cadedit.decode import pipeline
from cadedit.bench.ceiling import CaseCeiling, Ceiling, SpeedupCurve, bounds, case_ceiling
from cadedit.bench.corpus import Case
from cadedit.bench.e2e import document_for
from cadedit.bench.tokens import TokenCounter
from cadedit.decode.loop import script_sampler
from cadedit.text.document import Document
from cadedit.errors import CadeditError
from cadedit.backends.model import LoadedModel, CachedLM, encode, new_cache
from cadedit.options import EditOptions, Mode
from cadedit.text.oracle import oracle
from cadedit.text.program import format
from cadedit.text.resolve import resolve, to_display_program
from cadedit.bench.kernel import KernelSettings, sweep
from pathlib import Path
from typing import Annotated
import typer
from cadedit.bench.options import (
    BackendOpt,
    CorpusOpt,
    DeviceOpt,
    DtypeOpt,
    JsonOpt,
    KernelOpt,
    LimitOpt,
    ModelOpt,
    SpansOpt,
    ThreadsOpt,
    TrialsOpt,
    span_lengths,
)
from cadedit.cli.common import err, say
from cadedit.settings import DEFAULT_DTYPE
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora
from cadedit.bench.options import load_corpora, short_name
from cadedit.bench.ceiling import load_curve
from cadedit.bench.report import fmt_float, fmt_pct


@dataclass(frozen=True)
class OracleRow:
    """One case: the oracle program through the loop (cad) against regeneration (regen)."""

    id: str
    ceiling: CaseCeiling  # gold tokens T and the splice span lengths of the oracle program
    forward_passes: int
    tokens_sampled: int
    tokens_forced: int
    tokens_spliced: int
    cad_seconds: float  # decode after the prompt prefill
    regen_seconds: float

    @property
    def ratio(self) -> float:
        return self.regen_seconds / self.cad_seconds if self.cad_seconds else float("nan")

    def to_json(self, curve) -> dict:
        return {
            "id": self.id,
            "T": self.ceiling.total,
            "spans": list(self.ceiling.spans),
            **{k: v for k, v in asdict(self).items() if k not in ("id", "ceiling")},
            "ratio": self.ratio,
            "bound": bound([self], curve),
        }


def regenerate(loaded: LoadedModel, prompt_ids: Sequence[int], gold_ids: Sequence[int]) -> float:
    """Seconds to feed the gold one token per forward after the (untimed) prompt, with the argmax
    a greedy decoder takes each step; on a fresh cache, so the loop's cache is left as it was."""
    lm = CachedLM(loaded.model, new_cache(loaded))
    lm.feed(prompt_ids)
    start = time.perf_counter()
    for token in gold_ids:
        int(np.argmax(lm.feed([token])[-1]))  # [V] -> the pick
    return time.perf_counter() - start


def oracle_case(loaded: LoadedModel, case: Case, draft: bool = True, counter: TokenCounter | None = None) -> OracleRow:
    """The case's oracle program through the loop, then regeneration; see the module docstring."""
    document, after = document_for(case), Document.from_text(case.after)
    options = EditOptions(model=loaded.name, mode=Mode.PROGRAM, draft=draft)
    prepared = pipeline.prepare(loaded, document, case.instruction, options)
    target = format(to_display_program(oracle(document, after), document))
    pick = script_sampler(
        target, pipeline.grammar_for(loaded).vocab.tokens, lambda text: encode(loaded.tokenizer, text)
    )
    decoded = pipeline.run_decode(loaded, document, prepared, pick, draft=draft)
    if resolve(pipeline.answer_program(document, prepared, decoded), document) != case.after:
        raise CadeditError(f"{case.id}: the loop did not spell the oracle program (got {decoded.text[-60:]!r})")
    s = decoded.stats
    ceiling = case_ceiling(case, counter or TokenCounter(loaded.tokenizer, loaded.name), "splice", token_level=False)
    gold_ids = encode(loaded.tokenizer, after.display_text(1, after.n_lines)) if after.lines else []
    regen = regenerate(loaded, prepared.prompt_ids, gold_ids)
    return OracleRow(
        case.id,
        ceiling,
        s.forward_passes,
        s.tokens_sampled,
        s.tokens_forced,
        s.tokens_spliced,
        s.seconds_total - s.seconds_prefill,
        regen,
    )


def bound(rows: Sequence[OracleRow], curve: SpeedupCurve) -> float:
    """bnd_exact of eq. (3) over the rows' spans pooled: T / (T_gen + sum N_k / s(N_k))."""
    return bounds(Ceiling("rows", tuple(r.ceiling for r in rows)), curve)["bnd_exact"]


def measured_curve(loaded: LoadedModel, prefix: int, trials: int, spans: Sequence[int]) -> SpeedupCurve:
    """s(N) on this machine after a `prefix`-token cache (bench/kernel.py's sweep, AR beyond 8 steps
    scaled per token)."""

    settings = KernelSettings(prefix=prefix, spans=tuple(spans), trials=trials, ar_max=8)
    points = sweep(loaded.model, torch.device(loaded.device), settings)
    return SpeedupCurve(tuple(p.n for p in points), tuple(p.speedup for p in points), f"measured, P={prefix}")


def summarize(rows: Sequence[OracleRow], curve: SpeedupCurve) -> dict:
    regen, cad = sum(r.regen_seconds for r in rows), sum(r.cad_seconds for r in rows)
    pooled = regen / cad if cad else None
    limit = bound(rows, curve) if rows else None
    return {
        "n": len(rows),
        "regen_seconds": regen,
        "cad_seconds": cad,
        "pooled_ratio": pooled,
        "pooled_bound": limit,
        "of_bound": pooled / limit if pooled and limit else None,
        "forward_passes": [min(r.forward_passes for r in rows), max(r.forward_passes for r in rows)] if rows else None,
    }


def decode(
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    kernel: KernelOpt = None,
    spans: SpansOpt = "1,2,4,8,16,32,64,128,256",
    trials: TrialsOpt = 3,
    no_draft: Annotated[
        bool, typer.Option("--no-draft", help="The paper's loop: one forward per decision, no drafted program tokens.")
    ] = False,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """The decode loop against eq. (3): each case's oracle program forced through the real loop
    (masks, forced literals, copy splices) vs the same model regenerating the gold one token per
    forward after the same prompt; per case and pooled, beside the bound from s(N).

    Example: cadedit bench decode -c humanevalfix_python.jsonl --model MODEL --limit 10 --threads 2 --dtype fp32 [--no-draft]
    """

    span_list = span_lengths(spans)
    corpora = load_corpora(corpus, limit)
    loaded, _ = _load_model(model, device, dtype, threads, backend)
    curve = _decode_curve(loaded, corpora, kernel, trials, span_list)
    say("s(N): " + ", ".join(f"{n}: {s:.2f}" for n, s in zip(curve.n, curve.s)))
    counter = TokenCounter(loaded.tokenizer, loaded.name)
    meta = {
        **_model_meta("decode", loaded, "device"),
        "draft": not no_draft,
        "kernel": curve.source,
        "curve": {"n": list(curve.n), "s": list(curve.s)},
    }

    def to_json(done: dict[str, list]) -> dict:
        return {
            **meta,
            "corpora": [
                {"name": name, "summary": summarize(rows, curve), "cases": [r.to_json(curve) for r in rows]}
                for name, rows in done.items()
            ],
        }

    def show(row) -> None:
        say(
            f"{row.id}: T={row.ceiling.total}, spans {list(row.ceiling.spans)}, {row.forward_passes} fwd, "
            f"loop {row.cad_seconds:.2f} s, regen {row.regen_seconds:.2f} s, {row.ratio:.2f}x, "
            f"bound {bound([row], curve):.2f}x"
        )

    done = run_corpora(
        corpora, "decode", lambda name, case: oracle_case(loaded, case, not no_draft, counter), to_json, json_path, show
    )
    _print_decode(done, curve, loaded.name, not no_draft)


def _decode_curve(loaded, corpora: dict[str, list], kernel: Path | None, trials: int, spans: tuple[int, ...]):
    """s(N) from --kernel, else measured on the loaded model after a prefix as long as the first case's prompt."""

    if kernel:
        return load_curve(kernel)
    first = next(iter(corpora.values()))[0]
    prefix = len(
        pipeline.prepare(
            loaded, document_for(first), first.instruction, EditOptions(model=loaded.name, mode=Mode.PROGRAM)
        ).prompt_ids
    )
    with err.status(f"measuring s(N) at P={prefix} ..."):
        return measured_curve(loaded, prefix, trials, spans)


def _print_decode(done: dict[str, list], curve, model: str, draft: bool) -> None:

    rows = []
    for name, cases in done.items():
        s = summarize(cases, curve)
        fwd = s["forward_passes"]
        rows.append(
            [
                name,
                str(s["n"]),
                fmt_float(s["regen_seconds"], 2),
                fmt_float(s["cad_seconds"], 2),
                fmt_float(s["pooled_ratio"], 2, "x"),
                fmt_float(s["pooled_bound"], 2, "x"),
                fmt_pct(s["of_bound"], 0),
                f"{fwd[0]}-{fwd[1]}" if fwd else "-",
            ]
        )
    out.table(
        f"Oracle programs through the loop ({'drafted program tokens' if draft else 'no drafts'}), {short_name(model)}, "
        f"vs regeneration; eq. (3) bound with s(N) {curve.source}",
        ["corpus", "n", "regen s", "loop s", "pooled speedup", "eq. (3) bound", "of bound", "fwd per case"],
        rows,
    )
