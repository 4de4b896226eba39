"""Candidates side by side against one candidate (`cadedit bench candidates`), on the same edit in the same run.

Contract: measure_case(loaded, case, k) edits the case's input twice in verify mode (scoped as `cadedit
fix` scopes it, unless scoped=False) from an empty KV
cache (no prompt reused; the caller turns the prefix store off): once as `cadedit fix` does today (one greedy candidate,
pipeline.edit_file) and once as `--candidates k` does on try 1 (pipeline.edit_candidates: candidate
1 greedy, the others sampled as cadedit.tries.loop.candidate_sampling seeds them; measure_case's factories
may give other samplers), in alternating order from case to case. It reports both walls (prompt
included) and their decode steps alone (the prompt's prefill taken out), whether candidate 1 wrote
what the single decode wrote, how many distinct answers the k rows gave, and, when the case has a
test (bench/harness.py), which of them pass it (pass@1 against pass@k).
"""

from __future__ import annotations

import os
import time

from cadedit.decode import pipeline
from cadedit.bench.corpus import Case
from cadedit.bench.e2e import document_for
from cadedit.bench.harness import has_test, run_test, runner_for
from cadedit.bench.report import median
from cadedit.errors import BudgetError
from cadedit.backends.model import LoadedModel, language_model
from cadedit.options import EditOptions, Mode, Sampling
from cadedit.settings import BENCH_TEST_TIMEOUT
from cadedit.tries.loop import candidate_factories
from cadedit.scope.plan import plan_edit
from typing import Annotated
import typer
from cadedit.bench.options import (
    BackendOpt,
    CaseContextOpt,
    CorpusOpt,
    DtypeOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    ThreadsOpt,
)
from cadedit.cli.common import say
from cadedit.settings import DEFAULT_DTYPE
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora
from cadedit.bench.options import choice, load_corpora, short_name


def _single(loaded: LoadedModel, case: Case, options: EditOptions, make_sampler: pipeline.SamplerFactory) -> dict:
    language_model(loaded).reset()
    start = time.perf_counter()
    try:
        result = pipeline.edit_file(
            document_for(case), case.instruction, options, loaded=loaded, make_sampler=make_sampler
        )
    except BudgetError:
        return {"seconds": time.perf_counter() - start, "prefill": None, "text": None, "forwards": None}
    return {
        "seconds": time.perf_counter() - start,
        "prefill": result.stats.seconds_prefill,
        "text": result.new_text,
        "forwards": result.stats.forward_passes,
    }


def _batched(loaded: LoadedModel, case: Case, options: EditOptions, factories: list[pipeline.SamplerFactory]) -> dict:
    language_model(loaded).reset()
    start = time.perf_counter()
    found = pipeline.edit_candidates(document_for(case), case.instruction, options, factories, loaded=loaded)
    seconds = time.perf_counter() - start
    stats = [c.result.stats for c in found if c.result is not None]
    return {
        "seconds": seconds,
        "prefill": stats[0].seconds_prefill if stats else None,
        "texts": [c.result.new_text if c.result else None for c in found],
        "logprobs": [c.logprob for c in found],
        "forwards": max((s.forward_passes for s in stats), default=None),
    }


def measure_case(
    loaded: LoadedModel,
    case: Case,
    k: int,
    order: int = 0,
    test_timeout: float = BENCH_TEST_TIMEOUT,
    factories: list[pipeline.SamplerFactory] | None = None,
    scoped: bool = True,
) -> dict:
    """One case: the single decode and the k-row decode (which first: `order` even, the single one).
    factories: the k rows' sampler factories (None: candidate_factories, as `--candidates k`); the single
    decode takes the first (greedy). scoped: the scope from the instruction first, as `cadedit fix`
    resolves it (else the whole file)."""

    options = EditOptions(model=loaded.name, mode=Mode.VERIFY)
    options, _ = plan_edit(document_for(case), case.instruction, options, scoping=scoped)
    factories = factories or candidate_factories(k, Sampling())
    if order % 2 == 0:
        one, many = _single(loaded, case, options, factories[0]), _batched(loaded, case, options, factories)
    else:
        many, one = _batched(loaded, case, options, factories), _single(loaded, case, options, factories[0])
    row = {
        "id": case.id,
        "k": k,
        "regions": [list(r) for r in options.regions],
        "one_seconds": one["seconds"],
        "k_seconds": many["seconds"],
        "ratio": many["seconds"] / one["seconds"],
        "one_forwards": one["forwards"],
        "k_forwards": many["forwards"],
        "greedy_same": one["text"] is not None and many["texts"][0] == one["text"],
        "distinct": len({t for t in many["texts"] if t is not None}),
        "logprobs": many["logprobs"],
    }
    if one["prefill"] is not None and many["prefill"] is not None:
        steps_one, steps_k = one["seconds"] - one["prefill"], many["seconds"] - many["prefill"]
        row.update(one_steps=steps_one, k_steps=steps_k, steps_ratio=steps_k / steps_one if steps_one > 0 else None)
    if has_test(case) and runner_for(case.language):
        judged = [bool(t is not None and run_test(case, t, test_timeout).passed) for t in many["texts"]]
        best = max(range(k), key=lambda i: many["logprobs"][i] if many["texts"][i] is not None else float("-inf"))
        row.update(passed=judged, pass_one=judged[0], pass_k=any(judged), pass_likeliest=judged[best])
    return row


def summarize(rows: list[dict]) -> dict:
    if not rows:
        return {"n": 0}
    steps = [r["steps_ratio"] for r in rows if r.get("steps_ratio") is not None]
    tested = [r for r in rows if "passed" in r]
    return {
        "n": len(rows),
        "one_seconds_median": median([r["one_seconds"] for r in rows]),
        "k_seconds_median": median([r["k_seconds"] for r in rows]),
        "ratio_median": median([r["ratio"] for r in rows]),
        "ratio_pooled": sum(r["k_seconds"] for r in rows) / sum(r["one_seconds"] for r in rows),
        "steps_ratio_median": median(steps) if steps else None,
        "greedy_same": sum(r["greedy_same"] for r in rows),
        "distinct_mean": sum(r["distinct"] for r in rows) / len(rows),
        "tested": len(tested),
        "pass_one": sum(r["pass_one"] for r in tested),
        "pass_k": sum(r["pass_k"] for r in tested),
        "pass_likeliest": sum(r["pass_likeliest"] for r in tested),
    }


def candidates(
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    k: Annotated[int, typer.Option("--candidates", "-k", min=2, max=8, help="Candidates decoded side by side.")] = 4,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    context: CaseContextOpt = "docs",
    scoping: Annotated[
        str,
        typer.Option(
            "--scoping",
            help="on (the scope from the instruction, as `cadedit fix` resolves it) or off (whole-file verify edits).",
        ),
    ] = "on",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """K candidates decoded side by side (a try of `cadedit fix --candidates K`) against one candidate's decode,
    the same edit in the same run, both from an empty cache: walls, their ratio, the decode steps alone,
    and with the corpus's tests pass@1 against pass@K.

    Example: cadedit bench candidates -c humanevalfix_python.jsonl --model MODEL --limit 10 -k 4 --json cand.json
    """
    os.environ["CADEDIT_PREFIX_CACHE"] = "0"  # every decode feeds its whole prompt
    scoped = choice(scoping, "--scoping", {"on": True, "off": False})
    corpora = load_corpora(corpus, limit, context)
    loaded, _ = _load_model(model, "auto", dtype, threads, backend)
    meta = {**_model_meta("candidates", loaded, "backend"), "k": k, "context": context, "scoped": scoped}
    # Which of the two decodes goes first alternates from case to case (measure_case's `order`).
    cases = [(name, case) for name, cases in corpora.items() for case in cases]
    work = [(name, (order, case)) for order, (name, case) in enumerate(cases)]
    done = run_corpora(
        corpora,
        "candidates",
        lambda name, item: measure_case(loaded, item[1], k, order=item[0], scoped=scoped),
        lambda done: {
            **meta,
            "corpora": [{"name": name, "summary": summarize(rows), "cases": rows} for name, rows in done.items()],
        },
        json_path,
        lambda row: say(_candidates_line(row, k)),
        work,
    )
    for name, rows in done.items():
        summary = summarize(rows)
        if summary["n"]:
            out.print(
                f"{name}: {summary['n']} cases, {short_name(loaded.name)} ({loaded.backend}, {loaded.threads} threads): "
                + _candidates_summary(summary, k)
            )


def _candidates_line(row: dict, k: int) -> str:
    """One case on stderr: both walls, their ratio, how many distinct candidates, the tests."""
    return (
        f"{row['id']}: one {row['one_seconds']:.2f} s, {k} candidates {row['k_seconds']:.2f} s "
        f"({row['ratio']:.2f}x), {row['distinct']} distinct, greedy same {row['greedy_same']}"
        + (f", tests {sum(row['passed'])}/{k} (greedy {row['pass_one']})" if "passed" in row else "")
    )


def _candidates_summary(s: dict, k: int) -> str:
    """A corpus's medians and ratios, and with tests pass@1, the likeliest candidate's and pass@K."""
    return (
        f"one candidate median {s['one_seconds_median']:.2f} s, {k} side by side {s['k_seconds_median']:.2f} s; "
        f"ratio median {s['ratio_median']:.2f}x, pooled {s['ratio_pooled']:.2f}x"
        + (f", steps alone {s['steps_ratio_median']:.2f}x" if s["steps_ratio_median"] is not None else "")
        + f"; greedy row = single decode in {s['greedy_same']}/{s['n']}, {s['distinct_mean']:.1f} distinct"
        + (
            f"; tests: greedy {s['pass_one']}/{s['tested']}, likeliest {s['pass_likeliest']}/{s['tested']}, "
            f"any of {k} {s['pass_k']}/{s['tested']}"
            if s["tested"]
            else ""
        )
    )
