"""`cadedit bench`: the paper's measurements as commands (ceiling, roundtrip, perturb, formats, kernel, e2e,
decode), and cadedit's own as users get them (candidates, tries, longfile, backends, everyday, checks).

Wiring only: options (those several commands take are declared once, in bench/options.py), loops
with a progress bar, tables on stdout, results with --json PATH (rewritten atomically while a
command runs, so Ctrl-C leaves readable partial results marked "partial": true). Work lives in the sibling modules; errors are CadeditErrors that the main
cli.py formats. Importing this module imports neither torch nor transformers: `kernel` and `e2e`
import them inside their commands.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from cadedit.bench.options import (PACKAGES, BackendOpt, CaseContextOpt, CorpusOpt, CountingOpt, DeviceOpt, DtypeOpt,
                                   JsonOpt, KernelOpt, LimitOpt, MaxNewOpt, ModelOpt, PackagesOpt, ScopeContextOpt,
                                   SpansOpt, TaskSeedOpt, TasksOpt, TestTimeoutOpt, ThreadsOpt, TokenizerOpt, TrialsOpt,
                                   int_list, longfile_roots, span_lengths)
from cadedit.cli.common import EngineOpt, EngineTimeoutOpt, context_lines, err, say, scripted_picks, sub_app
from cadedit.errors import CadeditError
from cadedit.settings import BENCH_TEST_TIMEOUT, CANDIDATE_WAYS, CANDIDATES_BY, CONTEXT_LINES, DEFAULT_DTYPE, DEFAULT_MODE
from cadedit.settings import DEFAULT_TRIES, DEFAULT_WHERE_BY, READ_LATER, WHERE_BY
from cadedit.options import EditOptions, Mode
from cadedit.settings import choose_model, ENGINE_TIMEOUT
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora

T = TypeVar("T")


app = sub_app("bench", "Reproduce the paper's measurements on any corpus, tokenizer, model and machine.")


def load_corpora(paths: list[Path], limit: int | None, context: str = "body") -> dict[str, list]:
    from cadedit.bench.corpus import CONTEXTS, load_corpus  # lazy: keeps `cadedit --help` light

    if context not in CONTEXTS:
        raise typer.BadParameter(f"use one of {', '.join(CONTEXTS)}", param_hint="--context")
    corpora: dict[str, list] = {}
    for path in paths:
        name = path.stem if path.stem not in corpora else str(path)
        corpora[name] = load_corpus(path, limit, context)
    return corpora


# -- ceiling -------------------------------------------------------------------------------------


@app.command()
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
    from cadedit.bench import ceiling as ce  # lazy: keeps `cadedit --help` light
    from cadedit.bench.tokens import load_tokenizer, tokenizer_spec  # lazy: keeps `cadedit --help` light

    corpora = load_corpora(corpus, limit)
    curve = ce.load_curve(kernel) if kernel else None
    tokens = load_tokenizer(tokenizer_spec(tokenizer, model))
    done = run_corpora(corpora, "ceiling", lambda name, case: ce.case_ceiling(case, tokens, counting),
                       lambda done: _ceiling_json(done, tokens.name, counting, curve), json_path)
    _print_ceiling(_ceilings(done), curve, tokens.name, counting)


def _ceilings(done: dict[str, list]) -> list:
    from cadedit.bench.ceiling import Ceiling  # lazy: keeps `cadedit --help` light

    rows = [Ceiling(name, tuple(cases)) for name, cases in done.items()]
    if len(rows) > 1:
        rows.append(Ceiling("pooled", tuple(c for row in rows for c in row.cases)))
    return rows


def _ceiling_json(done: dict[str, list], tokenizer: str, counting: str, curve) -> dict:
    from cadedit.bench.ceiling import bounds, greedy_bounds  # lazy: keeps `cadedit --help` light

    corpora = []
    for row in _ceilings(done):
        entry = row.summary()
        if curve and row.total:
            entry["bounds"] = bounds(row, curve)
            entry["greedy_bounds"] = greedy_bounds(row, curve)
        if row.name != "pooled":
            entry["cases"] = [{"id": c.id, "T": c.total, "spans": list(c.spans),
                               "greedy": {str(m): v for m, v in c.greedy.items()}} for c in row.cases]
        corpora.append(entry)
    return {"command": "ceiling", "tokenizer": tokenizer, "counting": counting,
            "kernel": curve.source if curve else None, "corpora": corpora}


def _print_ceiling(rows: list, curve, tokenizer: str, counting: str) -> None:
    from cadedit.bench.ceiling import MIN_SPANS, bounds, greedy_bounds  # lazy: keeps `cadedit --help` light
    from cadedit.bench.report import fmt_float, fmt_int, fmt_pct  # lazy: keeps `cadedit --help` light

    line = []
    for row in rows:
        s = row.summary()
        line.append([row.name, str(row.n), fmt_int(row.total), fmt_int(row.copied), fmt_int(row.generated),
                     fmt_pct(row.fraction), str(s["K"]), fmt_float(s["span_mean"]), fmt_float(s["span_p50"], 0),
                     fmt_float(s["span_p95"], 0)])
    out.table(f"Line-level copy ceiling ({counting} counting, tokenizer {tokenizer}); span tokens: mean, p50, p95",
              ["corpus", "n", "T", "T_copy", "T_gen", "f", "K", "mean", "p50", "p95"], line)
    greedy = [[row.name, *(fmt_pct(row.greedy_fraction(m)) for m in MIN_SPANS)] for row in rows]
    out.table("Token-level greedy cover (aspirational), fraction of gold tokens",
              ["corpus", *(f"m={m}" for m in MIN_SPANS)], greedy)
    if curve is None:
        err.print("no --kernel: speedup bounds skipped (make one with `cadedit bench kernel --json K.json`)")
        return
    bnd = []
    for row in rows:
        b, g = bounds(row, curve), greedy_bounds(row, curve)
        bnd.append([row.name, fmt_float(b["s_m8"], 2, "x"), fmt_float(b["bnd_m8"], 2, "x"),
                    fmt_float(b["bnd_mean"], 2, "x"), fmt_float(b["bnd_exact"], 2, "x"), fmt_float(g.get("8"), 2, "x")])
    out.table(f"Speedup bounds, eq. (3), s(N) from {curve.source}",
              ["corpus", "s(8)", "bnd_m8", "bnd_mean", "bnd_exact", "token m=8"], bnd)


# -- roundtrip ---------------------------------------------------------------------------------


@app.command()
def roundtrip(corpus: CorpusOpt, json_path: JsonOpt = None, limit: LimitOpt = None) -> None:
    """Oracle round trip, strict and clipped (Table 4), and the reserved-literal audit (§4.3).

    Each oracle program goes through format, parse and the resolver; exits 1 if any case is not
    byte-exact.

    Example: cadedit bench roundtrip -c humanevalfix_python.jsonl
    """
    from cadedit.bench import roundtrip as rt  # lazy: keeps `cadedit --help` light

    corpora = load_corpora(corpus, limit)
    done = run_corpora(corpora, "roundtrip", lambda name, case: rt.roundtrip_case(case),
                       lambda done: {"command": "roundtrip", "corpora": {n: rt.summarize(r) for n, r in done.items()}},
                       json_path)
    rows, failed = [], []
    for name, cases in done.items():
        s = rt.summarize(cases)
        for mode, m in s["modes"].items():
            rows.append([name, mode, str(s["n"]), f"{m['exact']}/{s['n']}", f"{m['trimmed']}/{s['n']}",
                         f"{m['out_of_range']}/{s['n']}", f"{s['program_text_roundtrip']}/{s['n']}",
                         f"{len(s['reserved_literal_golds'])}/{s['n']}"])
            failed += [f"{name}:{f['id']} ({mode})" for f in m["failures"]]
    out.table("Oracle round trip (byte-exact and trimmed EM)",
              ["corpus", "mode", "cases", "byte-exact", "trimmed", "out of range", "parse(format)", "reserved in gold"],
              rows)
    if failed:
        raise CadeditError(f"roundtrip: {len(failed)} case(s) not byte-exact: {', '.join(failed[:5])}"
                           + (" ..." if len(failed) > 5 else ""))


# -- checks on gold fixes ------------------------------------------------------------------------


@app.command("checks")
def gold_checks(
    corpus: CorpusOpt,
    context: CaseContextOpt = "docs",
    reverse: Annotated[bool, typer.Option(
        "--reverse", help="Check each case's buggy side as an edit of its gold: the bugs the checks catch "
                          "without a test (exits 0).")] = False,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """False alarms: every check a candidate gets without --test (syntax, the code checks, change) run on
    each case's gold fix, with the case's instruction; a check that fails a correct fix would turn a pass
    into exit 3. Prints the failures per check; exits 1 if any gold fix failed one.

    Example: cadedit bench checks -c humanevalfix_js.jsonl --context docs
    """
    from cadedit.bench import gold  # lazy: keeps `cadedit --help` light

    corpora = load_corpora(corpus, limit, context)
    done = run_corpora(corpora, "checks", lambda name, case: gold.check_gold(case, reverse),
                       lambda done: {"command": "checks", "context": context, "reverse": reverse,
                                     "corpora": {n: gold.summarize(r) for n, r in done.items()}}, json_path)
    rows, failures = [], []
    for name, found in done.items():
        s = gold.summarize(found)
        rows += [[name, check, str(c["ran"]), str(c["failed"])] for check, c in s["checks"].items()]
        failures += [f"{name}:{f['id']}: {check}: {f['detail']}" for check, c in s["checks"].items()
                     for f in c["failures"]]
    title = "Checks on the buggy side (failed = a bug caught)" if reverse else \
        "Checks on gold fixes (failed = a correct fix refused)"
    out.table(title, ["corpus", "check", "ran on", "failed"], rows)
    for line in failures:
        out.print(line)
    if failures and not reverse:
        raise CadeditError(f"checks: {len(failures)} gold fix(es) failed a check")


# -- perturb -----------------------------------------------------------------------------------


@app.command()
def perturb(
    corpus: CorpusOpt,
    eps: Annotated[str, typer.Option(help="Noise radii: each copy endpoint moves by U[-eps, eps] lines.")] = "0,1,2,3,5",
    trials: Annotated[int, typer.Option(min=1, help="Trials per radius (each over every case).")] = 5,
    seed: Annotated[int, typer.Option(help="Seed; each (seed, eps, trial) has its own RNG.")] = 0,
    semantics: Annotated[str, typer.Option(
        help="cadedit: its oracle and clipped resolver; paper: the paper's line split and resolver (Table 8).")] = "cadedit",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Trimmed exact match of oracle programs under copy-endpoint noise (Table 8).

    Example: cadedit bench perturb -c humanevalfix_python.jsonl --eps 0,1,2 --trials 5 --seed 0
    """
    from cadedit.bench import perturb as pt  # lazy: keeps `cadedit --help` light

    radii = int_list(eps, "--eps")
    if semantics not in pt.SEMANTICS:
        raise typer.BadParameter(f"use one of {', '.join(pt.SEMANTICS)}", param_hint="--semantics")
    corpora = load_corpora(corpus, limit)
    paper = semantics == "paper"
    programs = {name: [pt.paper_program(c) for c in cases] if paper else pt.oracle_programs(cases)
                for name, cases in corpora.items()}
    run_trial = pt.run_paper_trial if paper else pt.run_trial

    def to_json(done: dict[str, list]) -> dict:
        return {"command": "perturb", "semantics": semantics, "seed": seed, "trials": trials,
                "corpora": {name: pt.summarize(rows) for name, rows in done.items() if rows}}

    work = [(name, (e, t)) for name in corpora for e in radii for t in range(trials)]
    done = run_corpora(corpora, "perturb", lambda name, et: run_trial(corpora[name], programs[name], *et, seed), to_json,
                       json_path, work=work)
    _print_perturb(done, radii, semantics)


def _print_perturb(done: dict[str, list], radii: tuple[int, ...], semantics: str) -> None:
    from cadedit.bench import perturb as pt  # lazy: keeps `cadedit --help` light
    from cadedit.bench.report import fmt_pct  # lazy: keeps `cadedit --help` light

    rows = []
    for name, trials_ in done.items():
        cells = {r["eps"]: r for r in pt.summarize(trials_)}
        rows.append([f"{name} ({cells[radii[0]]['n']})",
                     *(f"{fmt_pct(cells[e]['trimmed_median'])} ({fmt_pct(cells[e]['trimmed_mean'])})" for e in radii)])
    out.table(f"Trimmed EM under endpoint noise, median (mean) over trials, {semantics} semantics",
              ["corpus (n)", *(f"eps={e}" for e in radii)], rows,
              caption="The paper's Table 8 cells are means over trials x cases.")


# -- formats -----------------------------------------------------------------------------------


@app.command()
def formats(
    corpus: CorpusOpt,
    tokenizer: TokenizerOpt = None,
    model: ModelOpt = None,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Edit formats head to head: output tokens and round-trip EM (Table 3).

    Full regeneration vs search/replace vs unified diff vs copy/gen program, each made from the
    oracle edit, parsed back and applied. Search/replace applies at the first match, as Aider does.

    Example: cadedit bench formats -c humanevalfix_js.jsonl --tokenizer model.gguf
    """
    from cadedit.bench import formats as fm  # lazy: keeps `cadedit --help` light
    from cadedit.bench.tokens import load_tokenizer, tokenizer_spec  # lazy: keeps `cadedit --help` light

    corpora = load_corpora(corpus, limit)
    tokens = load_tokenizer(tokenizer_spec(tokenizer, model))

    def to_json(done: dict[str, list]) -> dict:
        summary = {name: _formats_summary(rows) for name, rows in done.items() if rows}
        return {"command": "formats", "tokenizer": tokens.name, "corpora": summary}

    done = run_corpora(corpora, "formats", lambda name, case: (case.id, fm.case_formats(case, tokens)), to_json, json_path)
    _print_formats(done, tokens.name)


def _formats_summary(rows: list) -> dict:
    from cadedit.bench.formats import FORMATS  # lazy: keeps `cadedit --help` light
    from cadedit.bench.report import median, percentile  # lazy: keeps `cadedit --help` light

    summary = {}
    base = sum(r["program"].tokens for _, r in rows)
    for f in FORMATS:
        toks = [r[f].tokens for _, r in rows]
        summary[f] = {
            "n": len(rows), "mean": sum(toks) / len(toks), "median": median(toks), "p95": percentile(toks, 95),
            "total": sum(toks), "rt_em": sum(r[f].exact for _, r in rows),
            "ambiguous_anchors": sum(r[f].ambiguous for _, r in rows),
            "tokens_vs_program": sum(toks) / base - 1 if base else math.nan,
            "failures": [{"id": i, "error": r[f].error} for i, r in rows if not r[f].exact],
        }
    return summary


def _print_formats(done: dict[str, list], tokenizer: str) -> None:
    from cadedit.bench.formats import FORMATS, LABELS  # lazy: keeps `cadedit --help` light
    from cadedit.bench.report import fmt_float, fmt_int  # lazy: keeps `cadedit --help` light

    for name, rows in done.items():
        s = _formats_summary(rows)
        n, em_base = len(rows), s["program"]["rt_em"]
        body = [[LABELS[f], fmt_float(s[f]["mean"]), fmt_float(s[f]["median"], 0), fmt_float(s[f]["p95"], 0),
                 fmt_int(s[f]["total"]), f"{s[f]['rt_em'] / n:.2f}", f"{n - s[f]['rt_em']}/{n}",
                 "-" if f == "program" else f"{100 * s[f]['tokens_vs_program']:+.1f}% tok, {s[f]['rt_em'] - em_base:+d} EM"]
                for f in FORMATS]
        amb = s["search_replace"]["ambiguous_anchors"]
        out.table(f"Edit formats on {name} (n={n}, tokenizer {tokenizer})",
                  ["format", "mean tok", "median", "p95", "total", "RT-EM", "fails", "vs program"], body,
                  caption=f"search/replace anchors found more than once in the input: {amb}")


# -- kernel ------------------------------------------------------------------------------------


def _print_reference(points, reference: list[dict], weights: str) -> None:
    from cadedit.bench.report import fmt_float, table  # lazy: keeps `cadedit --help` light

    rows = [[str(p.n), fmt_float(p.ar_ms, 2), fmt_float(own["ar_ms"], 2), fmt_float(p.ar_ms / own["ar_ms"], 2, "x"),
             fmt_float(p.pp_ms, 2), fmt_float(own["pp_ms"], 2), fmt_float(p.pp_ms / own["pp_ms"], 2, "x")]
            for p, own in zip(points, reference)]
    out.print(f"The llama backend against llama-cpp-python's own Llama.eval, same GGUF and threads, its weights "
              f"{weights} (median ms):")
    out.print(table(["N", "AR backend", "AR own", "ratio", "PP backend", "PP own", "ratio"], rows))


@app.command()
def kernel(
    model: ModelOpt = None,
    prefix: Annotated[int, typer.Option(min=1, help="Random-context prefix length P (tokens).")] = 1024,
    spans: SpansOpt = "1,2,4,8,16,32,64,128,256,512",
    trials: TrialsOpt = 5,
    ar_max: Annotated[int, typer.Option(
        help="Time at most this many AR steps per trial and scale per token beyond it (0: time them all).")] = 0,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    attn: Annotated[str, typer.Option(
        help="Attention: eager (written out, as the paper measured) or sdpa (torch's fused kernel, what fix uses).")] = "eager",
    all_logits: Annotated[bool, typer.Option(
        "--all-logits", help="Compute logits for every splice position (a plain forward) instead of the last.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the random prefix and span tokens.")] = 0,
    json_path: JsonOpt = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", metavar="PNG", help="Write the Figure 3 plot here.")] = None,
    backend: BackendOpt = None,
    reference: Annotated[bool, typer.Option(
        "--reference", help="llama backend: also time llama-cpp-python's own Llama.eval on the same GGUF and threads.")] = False,
    reference_weights: Annotated[str, typer.Option(
        metavar="same|defaults", help="The reference's weights: repacked or not as the backend's are (same: "
                                      "the backend's own overhead), or as Llama's defaults leave them.")] = "same",
) -> None:
    """Per-span kernel speedup s(N) = T_AR(N) / T_PP(N) (§3, Figure 3).

    One N-token forward (a copy splice) against N single-token forwards, after a random P-token
    prefix; the cache is cropped back to P between measurements.

    Example: cadedit bench kernel --model model.gguf --prefix 1024 --trials 5 --json kernel.json --plot kernel.png
    """
    from cadedit.bench import kernel as kn  # lazy: imports torch; `cadedit bench --help` must not

    if reference_weights not in ("same", "defaults"):
        raise typer.BadParameter(f"{reference_weights!r} is not same or defaults", param_hint="--reference-weights")
    settings = kn.KernelSettings(prefix, span_lengths(spans), trials, ar_max, seed, all_logits)
    loaded = kn.load(model, device, dtype, threads, attn, backend)
    meta = {"command": "kernel", "model": loaded.name,
            **kn.environment(kn.torch.device(loaded.device), loaded.dtype, loaded),
            "attn": attn if loaded.backend == "torch" else "llama.cpp", "prefix": prefix, "trials": trials,
            "ar_max": ar_max, "seed": seed, "logits": "all" if all_logits else "last"}
    if reference and loaded.backend != "llama":
        raise typer.BadParameter("the reference is llama.cpp's own: use it with --backend llama", param_hint="--reference")
    points = _kernel_sweeps(loaded, settings, meta, reference_weights if reference else None, json_path)
    _print_kernel(points, meta)
    if reference:
        _print_reference(points, meta["reference"], meta["reference_weights"])
    title = f"{_short(loaded.name)}, {meta['device_name']}, {meta['dtype']}, {meta['threads']} threads, P={prefix}"
    if plot_path and not kn.plot(points, plot_path, title):
        err.print("matplotlib not installed: no plot (pip install 'cadedit[plot]')")


def _kernel_sweeps(loaded, settings, meta: dict, reference: str | None, json_path: Path | None) -> list:
    """The sweep over span lengths (and with `reference`, "same" or "defaults" as its weights,
    llama.cpp's own Llama.eval on the same ids, taking turns with the backend trial by trial, into
    meta["reference"]); results rewritten to json_path after each point, kept on Ctrl-C."""
    from cadedit.bench import kernel as kn  # lazy: imports torch; `cadedit bench --help` must not
    from cadedit.bench.report import ProgressBar, ResultsFile  # lazy: keeps `cadedit --help` light

    points: list = []
    results = ResultsFile(json_path)

    def save(partial: bool) -> None:
        results.write({**meta, "results": [p.to_json() for p in points]}, partial=partial)

    own_points: list = []

    def on_point(k: int, point) -> None:
        (points if k == 0 else own_points).append(point)
        if reference:
            meta["reference"] = [p.to_json() for p in own_points]
        save(True)
        err.print(f"{'llama.cpp own ' if k else ''}N={point.n}: AR {point.ar_ms:.2f} ms"
                  f"{' (extrapolated)' if point.extrapolated else ''}, PP {point.pp_ms:.2f} ms, "
                  f"s(N) = {point.speedup:.2f}", highlight=False)

    try:
        models = [loaded.model]
        if reference:  # both on the same ids, taking turns trial by trial
            repack = {"same": loaded.model.repack, "defaults": None}[reference]
            meta["reference_weights"] = {None: "Llama's defaults", True: "repacked", False: "as stored"}[repack]
            models.append(kn.LlamaReference(str(loaded.model.folder), loaded.threads, loaded.model.n_ctx, repack))
        with ProgressBar(kn.work_units(settings, len(models)), "kernel", err) as bar:
            kn.sweep_turns(models, kn.torch.device(loaded.device), settings, on_point=on_point, advance=bar.advance)
    except KeyboardInterrupt:
        save(True)
        err.print("interrupted: partial results kept", highlight=False)
        raise
    save(False)
    return points


def _print_kernel(points: list, meta: dict) -> None:
    from cadedit.bench.report import fmt_float, table  # lazy: keeps `cadedit --help` light

    rows = [[str(p.n), fmt_float(p.ar_ms, 2) + (" *" if p.extrapolated else ""), fmt_float(p.pp_ms, 2),
             fmt_float(p.speedup, 2, "x")] for p in points]
    caption = "* AR extrapolated per token from the first %d steps." % meta["ar_max"] if any(
        p.extrapolated for p in points) else None
    out.print(f"Kernel speedup s(N) = T_AR / T_PP: {_short(meta['model'])} on {meta['device_name']} ({meta['dtype']}, "
              f"{meta['threads']} threads, {meta['attn']} attention, {meta['logits']} logits; CPU flags: "
              f"{meta.get('cpu_flags') or 'unknown'}), P={meta['prefix']}, "
              f"median of {meta['trials']}")
    out.print(table(["N", "AR ms", "PP ms", "s(N)"], rows))
    if caption:
        out.print(caption)


def _short(model: str) -> str:
    return Path(model).name or model


# -- e2e ---------------------------------------------------------------------------------------


MethodsOpt = Annotated[str, typer.Option(
    "--methods", help="Methods to run per case, comma-separated: fix (`cadedit fix`'s own edit: the scope from the "
         "instruction, then the default mode), the modes program, rewrite, lookup, verify, and llama.cpp's "
         "llama-rewrite, llama-lookup (with --gguf). The first is measured against the second; every method's "
         "edited file is compared with the first's.")]
LongOpt = Annotated[int, typer.Option(
    "--long", min=0, help="Also N long cases per corpus: consecutive gold files joined to 300+ lines, one of "
         "them left with its one-line bug; its test runs against the whole edited file.")]
GgufOpt = Annotated[Path | None, typer.Option(
    "--gguf", metavar="PATH", help="The same model as a .gguf file, for the llama-* methods.")]
LlamaCtxOpt = Annotated[int | None, typer.Option(
    "--llama-ctx", min=256, help="llama.cpp's n_ctx (default: the largest prompt + budget of the run).")]
FloorOpt = Annotated[bool, typer.Option(
    "--floor", help="Measure the kernel first (T_PP(512)/512 and T_AR(1) after 1,024 tokens) and put each "
         "method's wall clock over its compute floor: prompt and copied tokens at that prefill rate, "
         "written tokens one step each.")]
NoTestsOpt = Annotated[bool, typer.Option("--no-tests", help="Do not run the corpus's tests.")]


@app.command()
def e2e(
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    methods: MethodsOpt = "verify,rewrite",
    long: LongOpt = 0,
    gguf: GgufOpt = None,
    llama_ctx: LlamaCtxOpt = None,
    kernel: KernelOpt = None,
    counting: CountingOpt = "paper",
    floor: FloorOpt = False,
    test_timeout: TestTimeoutOpt = BENCH_TEST_TIMEOUT,
    no_tests: NoTestsOpt = False,
    max_new_tokens: MaxNewOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    context: CaseContextOpt = "body",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Decoding methods end to end on the same cases with the same model: cadedit's modes (its
    own program with grammar and copy splices, verify, lookup, rewrite) and llama.cpp's greedy and
    prompt-lookup rewrites; per case: wall clock, forward passes, exact match, the corpus's tests,
    and whether each method's edited file equals the first method's.

    The model is loaded once (import and load times go into --json) and warmed up; each case is
    edited by every method in turn. Tests run as prefix + edited text + newline + test, with
    python3 or node (for node, anything on stderr fails). The summary puts the realised speedup of
    the first method over the second beside bnd_exact (eq. 3).

    Examples: cadedit bench e2e -c humanevalfix_python.jsonl --model model.gguf --kernel kernel.json --json e2e.json --limit 20
              cadedit bench e2e -c humanevalfix_python.jsonl --methods verify,rewrite,lookup,program --long 2 --limit 20
              cadedit bench e2e -c humanevalfix_python.jsonl --model MODEL --gguf model.gguf --methods verify,llama-rewrite,llama-lookup
              cadedit bench e2e -c long.jsonl --model MODEL --gguf model.gguf --methods fix,llama-lookup --floor --no-tests
    """
    start = time.perf_counter()
    from cadedit.bench import e2e as ee  # torch and the pipeline: timed for the meta
    from cadedit.bench.ceiling import load_curve  # lazy: keeps `cadedit --help` light

    imports = time.perf_counter() - start
    names, peer_names = _e2e_methods(methods, gguf)
    corpora = _e2e_corpora(corpus, limit, context, long)
    curve = load_curve(kernel) if kernel else None
    loaded, warm, least = _e2e_load(model, device, dtype, threads, backend, floor)
    peers_meta, chosen = _e2e_peers(loaded, peer_names, gguf, llama_ctx, corpora, max_new_tokens, names)
    say(f"{_short(loaded.name)}: imports {imports:.1f} s, load {loaded.load_seconds:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in loaded.phases) + f"), warm-up {warm:.1f} s")
    meta = {**_model_meta("e2e", loaded, "device"), "methods": list(names), "baseline": names[1] if len(names) > 1 else "",
            "counting": counting, "kernel": str(kernel) if kernel else None, "test_timeout": test_timeout,
            "max_new_tokens": max_new_tokens, "long": long, "imports_seconds": imports,
            "load_seconds": loaded.load_seconds, "load_phases": dict(loaded.phases), "warm_up_seconds": warm,
            "floor": least.to_json() if least else None, **peers_meta}
    bounds = _e2e_bounds(corpora, loaded, counting, curve)
    settings = ee.E2ESettings(names, max_new_tokens, test_timeout, not no_tests)
    done = run_corpora(corpora, "e2e", lambda name, case: ee.run_case(loaded, case, settings, chosen),
                       _e2e_json(meta, bounds, least), json_path, show=lambda row: say(_e2e_line(row)))
    _print_e2e(done, bounds, meta["baseline"], loaded.name, least)


def _e2e_corpora(paths: list[Path], limit: int | None, context: str, long: int) -> dict[str, list]:
    """The corpora's cases, and with --long N, N long cases of each (from all its cases) as a corpus of its own."""
    from cadedit.bench import e2e as ee  # lazy: keeps `cadedit --help` light

    corpora = load_corpora(paths, limit, context)
    if long:
        full = load_corpora(paths, None)
        for name in list(corpora):
            corpora[f"{name} long"] = ee.long_cases(full[name], long)
    return corpora


def _e2e_json(meta: dict, bounds: dict[str, dict], least) -> Callable[[dict[str, list]], dict]:
    """The --json of e2e: meta, then per corpus its summary, its bounds and its cases."""
    from cadedit.bench import e2e as ee  # lazy: keeps `cadedit --help` light

    def to_json(done: dict[str, list]) -> dict:
        return {**meta, "corpora": [{"name": name, "n": len(rows), "summary": ee.summarize(rows, meta["baseline"], least),
                                     "bounds": bounds.get(name), "cases": [r.to_json() for r in rows]}
                                    for name, rows in done.items()]}

    return to_json


def _e2e_methods(methods: str, gguf: Path | None) -> tuple[tuple[str, ...], list[str]]:
    """--methods checked: the names in order, and those that are llama.cpp peers (they need --gguf)."""
    from cadedit.bench import e2e as ee  # lazy: keeps `cadedit --help` light
    from cadedit.bench.peers import PEERS, require_llama  # lazy: keeps `cadedit --help` light

    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not names or any(m not in ee.METHODS for m in names) or len(set(names)) < len(names):
        raise typer.BadParameter(f"use some of {', '.join(ee.METHODS)}, each once", param_hint="--methods")
    peer_names = [m for m in names if m in PEERS]
    if peer_names and gguf is None:
        raise typer.BadParameter(f"{', '.join(peer_names)} need(s) the model as a .gguf file", param_hint="--gguf")
    if peer_names:
        require_llama()
    return names, peer_names


def _e2e_load(model, device: str, dtype: str, threads, backend, floor: bool):
    """The model loaded and warmed up, and (with --floor) the kernel measured for the compute floor."""
    from cadedit.bench import e2e as ee  # lazy: keeps `cadedit --help` light

    loaded, warm = _load_model(model, device, dtype, threads, backend)
    least = None
    if floor:
        with err.status("measuring the kernel for the compute floor ..."):
            least = ee.measure_floor(loaded)
        say(f"compute floor: prefill {least.prefill_ms:.2f} ms/token, step {least.step_ms:.1f} ms")
    return loaded, warm, least


def _e2e_peers(loaded, peer_names: list[str], gguf: Path | None, llama_ctx: int | None, corpora: dict[str, list],
               max_new_tokens: int | None, names: tuple[str, ...]) -> tuple[dict, dict]:
    """llama.cpp loaded for the llama-* methods (n_ctx fitted to the run), and the methods in order."""
    from cadedit.bench import e2e as ee  # lazy: keeps `cadedit --help` light
    from cadedit.bench import peers as pe  # lazy: keeps `cadedit --help` light

    if not peer_names:
        return {}, ee.methods(names)
    cases = [case for cases in corpora.values() for case in cases]
    with err.status("loading the peers ..."):
        n_ctx = llama_ctx or pe.context_for(loaded, cases, max_new_tokens)
        start = time.perf_counter()
        loaded_peers = pe.load_peers(peer_names, str(gguf), loaded.threads, n_ctx)
    meta = {"gguf": str(gguf), "llama_ctx": n_ctx, "llama_cpp": pe.version(),
            "llama_load_seconds": time.perf_counter() - start}
    return meta, ee.methods(names, loaded_peers)


def _e2e_bounds(corpora: dict[str, list], loaded, counting: str, curve) -> dict[str, dict]:
    """bnd_exact and friends per corpus, over its oracle spans in the model's own tokens."""
    from cadedit.bench.ceiling import Ceiling, bounds, case_ceiling  # lazy: keeps `cadedit --help` light
    from cadedit.bench.tokens import TokenCounter  # lazy: keeps `cadedit --help` light

    if curve is None:
        return {}
    tokens = TokenCounter(loaded.tokenizer, loaded.name)
    return {name: bounds(Ceiling(name, tuple(case_ceiling(c, tokens, counting, token_level=False) for c in cases)),
                         curve) for name, cases in corpora.items()}


def _e2e_line(row) -> str:
    """One case on stderr: each method's outcome, time and forward passes."""
    parts = []
    for a in row.attempts:
        outcome = _clip(a.error, 100) if a.error else "exact" if a.exact else "trimmed" if a.trimmed else "differs"
        test = "" if a.test.passed is None else ", test passed" if a.test.passed else ", test failed"
        passes = a.edited.forward_passes if a.edited and a.edited.forward_passes is not None else "-"
        same = {True: ", same", False: ", other output"}.get(a.same_as_first, "")
        parts.append(f"{a.method}: {outcome}{test}, {a.seconds:.2f} s, {passes} fwd{same}")
    return f"{row.id}: " + "; ".join(parts)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _print_e2e(done: dict[str, list], bounds: dict[str, dict], baseline: str, model: str, floor=None) -> None:
    from cadedit.bench import e2e as ee  # lazy: keeps `cadedit --help` light
    from cadedit.bench.report import fmt_float, fmt_int  # lazy: keeps `cadedit --help` light

    rows, speed, first = [], [], ""
    for name, results in done.items():
        summary = ee.summarize(results, baseline, floor)
        first = first or next(iter(summary["methods"]), "")
        for method, m in summary["methods"].items():
            n = m["n"]
            rows.append([name, method, str(n), f"{m['exact']}/{n}", f"{m['trimmed']}/{n}",
                         f"{m['passed']}/{m['tested']}" if m["tested"] else "-", str(m["errors"]),
                         fmt_float(m["seconds_mean"], 2), fmt_float(m["seconds_median"], 2),
                         "-" if m["forward_passes_total"] is None else fmt_int(m["forward_passes_total"]),
                         fmt_float(m["first_speedup"], 2, "x") if method != first else "-",
                         f"{m['same_as_first']}/{m['compared']}" if m["compared"] else "-"]
                        + ([fmt_float(m["over_floor"], 2, "x")] if floor else []))
        s, b = summary["speedup"], bounds.get(name) or {}
        if s:
            speed.append([name, str(s["n"]), fmt_float(s["wall"], 2, "x"),
                          f"{fmt_float(s['wall_both_exact'], 2, 'x')} ({s['n_both_exact']})",
                          fmt_float(s["decode"], 2, "x"), fmt_float(s["forward_passes"], 2, "x"),
                          fmt_float(b.get("bnd_exact"), 2, "x")])
    out.table(f"End to end, {_short(model)}: {first} vs {baseline or 'nothing'}",
              ["corpus", "method", "n", "byte-exact", "trimmed", "tests", "errors", "mean s", "median s", "fwd passes",
               f"{first} faster by", f"same output as {first}"] + (["wall / floor"] if floor else []), rows,
              caption=(f"floor: prompt and copied tokens at {floor.prefill_ms:.2f} ms each, written tokens "
                       f"{floor.step_ms:.1f} ms each (kernel measured in this run)") if floor else None)
    if speed:
        out.table(f"Realised speedup of {first} over {baseline} ({baseline} cost / {first} cost)",
                  ["corpus", "n", "wall", "wall, both exact (n)", "decode only", "fwd passes", "bnd_exact"], speed,
                  caption=None if bounds else "no --kernel: bnd_exact skipped (make one with `cadedit bench kernel --json K.json`)")


# -- decode ------------------------------------------------------------------------------------


@app.command()
def decode(
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    kernel: KernelOpt = None,
    spans: SpansOpt = "1,2,4,8,16,32,64,128,256",
    trials: TrialsOpt = 3,
    no_draft: Annotated[bool, typer.Option(
        "--no-draft", help="The paper's loop: one forward per decision, no drafted program tokens.")] = False,
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
    from cadedit.bench import decode as dc  # lazy: imports torch; `cadedit bench --help` must not
    from cadedit.bench.tokens import TokenCounter  # lazy: keeps `cadedit --help` light

    span_list = span_lengths(spans)
    corpora = load_corpora(corpus, limit)
    loaded, _ = _load_model(model, device, dtype, threads, backend)
    curve = _decode_curve(loaded, corpora, kernel, trials, span_list)
    say("s(N): " + ", ".join(f"{n}: {s:.2f}" for n, s in zip(curve.n, curve.s)))
    counter = TokenCounter(loaded.tokenizer, loaded.name)
    meta = {**_model_meta("decode", loaded, "device"), "draft": not no_draft, "kernel": curve.source,
            "curve": {"n": list(curve.n), "s": list(curve.s)}}

    def to_json(done: dict[str, list]) -> dict:
        return {**meta, "corpora": [{"name": name, "summary": dc.summarize(rows, curve),
                                     "cases": [r.to_json(curve) for r in rows]} for name, rows in done.items()]}

    def show(row) -> None:
        say(f"{row.id}: T={row.ceiling.total}, spans {list(row.ceiling.spans)}, {row.forward_passes} fwd, "
            f"loop {row.cad_seconds:.2f} s, regen {row.regen_seconds:.2f} s, {row.ratio:.2f}x, "
            f"bound {dc.bound([row], curve):.2f}x")

    done = run_corpora(corpora, "decode", lambda name, case: dc.oracle_case(loaded, case, not no_draft, counter), to_json,
                       json_path, show)
    _print_decode(done, curve, loaded.name, not no_draft)


def _decode_curve(loaded, corpora: dict[str, list], kernel: Path | None, trials: int, spans: tuple[int, ...]):
    """s(N) from --kernel, else measured on the loaded model after a prefix as long as the first case's prompt."""
    from cadedit.decode import pipeline  # lazy: keeps `cadedit --help` light
    from cadedit.bench import decode as dc  # lazy: imports torch; `cadedit bench --help` must not
    from cadedit.bench.ceiling import load_curve  # lazy: keeps `cadedit --help` light
    from cadedit.bench.e2e import document_for  # lazy: keeps `cadedit --help` light

    if kernel:
        return load_curve(kernel)
    first = next(iter(corpora.values()))[0]
    prefix = len(pipeline.prepare(loaded, document_for(first), first.instruction,
                                  EditOptions(model=loaded.name, mode=Mode.PROGRAM)).prompt_ids)
    with err.status(f"measuring s(N) at P={prefix} ..."):
        return dc.measured_curve(loaded, prefix, trials, spans)


def _print_decode(done: dict[str, list], curve, model: str, draft: bool) -> None:
    from cadedit.bench import decode as dc  # lazy: imports torch; `cadedit bench --help` must not
    from cadedit.bench.report import fmt_float, fmt_pct  # lazy: keeps `cadedit --help` light

    rows = []
    for name, cases in done.items():
        s = dc.summarize(cases, curve)
        fwd = s["forward_passes"]
        rows.append([name, str(s["n"]), fmt_float(s["regen_seconds"], 2), fmt_float(s["cad_seconds"], 2),
                     fmt_float(s["pooled_ratio"], 2, "x"), fmt_float(s["pooled_bound"], 2, "x"), fmt_pct(s["of_bound"], 0),
                     f"{fwd[0]}-{fwd[1]}" if fwd else "-"])
    out.table(f"Oracle programs through the loop ({'drafted program tokens' if draft else 'no drafts'}), {_short(model)}, "
              f"vs regeneration; eq. (3) bound with s(N) {curve.source}",
              ["corpus", "n", "regen s", "loop s", "pooled speedup", "eq. (3) bound", "of bound", "fwd per case"], rows)


# -- candidates --------------------------------------------------------------------------------


@app.command()
def candidates(
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    k: Annotated[int, typer.Option("--candidates", "-k", min=2, max=8, help="Candidates decoded side by side.")] = 4,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    context: CaseContextOpt = "docs",
    scoping: Annotated[str, typer.Option("--scoping", help="on (the scope from the instruction, as `cadedit fix` "
                                         "resolves it) or off (whole-file verify edits).")] = "on",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """K candidates decoded side by side (a try of `cadedit fix --candidates K`) against one candidate's decode,
    the same edit in the same run, both from an empty cache: walls, their ratio, the decode steps alone,
    and with the corpus's tests pass@1 against pass@K.

    Example: cadedit bench candidates -c humanevalfix_python.jsonl --model MODEL --limit 10 -k 4 --json cand.json
    """
    import os

    from cadedit.bench import candidates as bc  # lazy: keeps `cadedit --help` light

    os.environ["CADEDIT_PREFIX_CACHE"] = "0"  # every decode feeds its whole prompt
    scoped = _choice(scoping, "--scoping", {"on": True, "off": False})
    corpora = load_corpora(corpus, limit, context)
    loaded, _ = _load_model(model, "auto", dtype, threads, backend)
    meta = {**_model_meta("candidates", loaded, "backend"), "k": k, "context": context, "scoped": scoped}
    # Which of the two decodes goes first alternates from case to case (measure_case's `order`).
    cases = [(name, case) for name, cases in corpora.items() for case in cases]
    work = [(name, (order, case)) for order, (name, case) in enumerate(cases)]
    done = run_corpora(corpora, "candidates", lambda name, item: bc.measure_case(loaded, item[1], k, order=item[0], scoped=scoped),
                       lambda done: {**meta, "corpora": [{"name": name, "summary": bc.summarize(rows), "cases": rows}
                                                         for name, rows in done.items()]},
                       json_path, lambda row: say(_candidates_line(row, k)), work)
    for name, rows in done.items():
        summary = bc.summarize(rows)
        if summary["n"]:
            out.print(f"{name}: {summary['n']} cases, {_short(loaded.name)} ({loaded.backend}, {loaded.threads} threads): "
                      + _candidates_summary(summary, k))


def _candidates_line(row: dict, k: int) -> str:
    """One case on stderr: both walls, their ratio, how many distinct candidates, the tests."""
    return (f"{row['id']}: one {row['one_seconds']:.2f} s, {k} candidates {row['k_seconds']:.2f} s "
            f"({row['ratio']:.2f}x), {row['distinct']} distinct, greedy same {row['greedy_same']}"
            + (f", tests {sum(row['passed'])}/{k} (greedy {row['pass_one']})" if "passed" in row else ""))


def _candidates_summary(s: dict, k: int) -> str:
    """A corpus's medians and ratios, and with tests pass@1, the likeliest candidate's and pass@K."""
    return (f"one candidate median {s['one_seconds_median']:.2f} s, {k} side by side {s['k_seconds_median']:.2f} s; "
            f"ratio median {s['ratio_median']:.2f}x, pooled {s['ratio_pooled']:.2f}x"
            + (f", steps alone {s['steps_ratio_median']:.2f}x" if s["steps_ratio_median"] is not None else "")
            + f"; greedy row = single decode in {s['greedy_same']}/{s['n']}, {s['distinct_mean']:.1f} distinct"
            + (f"; tests: greedy {s['pass_one']}/{s['tested']}, likeliest {s['pass_likeliest']}/{s['tested']}, "
               f"any of {k} {s['pass_k']}/{s['tested']}" if s["tested"] else ""))


# -- tries -------------------------------------------------------------------------------------


_TriesWhere = Annotated[str, typer.Option(
    "--where", help="A definition named without a line: first (or on) reads it for the line first, as `cadedit fix "
                    "--where`; later reads it once try 1 failed, for the later tries' branches (fix's default); "
                    "off: neither.")]
# --where's choices: (find the line first, read for the later tries) each
TRIES_WHERE = {"first": (True, False), "on": (True, False), "later": (False, True), "off": (False, False)}


@app.command()
def tries(
    ctx: typer.Context,
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    max_tries: Annotated[int, typer.Option("--tries", min=1, help="Tries with the corpus's test as --test.")] = 5,
    check_tries: Annotated[int, typer.Option(
        "--check-tries", min=0, help="Tries with syntax/no-change checks only (0: skip that run).")] = DEFAULT_TRIES,
    test_timeout: TestTimeoutOpt = BENCH_TEST_TIMEOUT,
    mode: Annotated[str, typer.Option(help="Decoding mode: program, rewrite, lookup or verify.")] = DEFAULT_MODE.value,
    layout: Annotated[str | None, typer.Option(help="Prompt layout (prompt.LAYOUTS); default: EditOptions'.")] = None,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    skip: Annotated[int, typer.Option(min=0, help="Skip the first N cases of each corpus.")] = 0,
    context: CaseContextOpt = "docs",
    scoping: Annotated[str, typer.Option("--scoping", help="on (the scope from the instruction, as `cadedit fix` "
                                         "resolves it) or off (whole-file edits).")] = "on",
    k: Annotated[int | None, typer.Option(
        "--candidates", "-k", min=1, max=8, show_default=False,
        help="Each try decodes this many candidates side by side, as `cadedit fix -k` (default: fix's, 4 with "
             "the test, 1 with the checks alone).")] = None,
    candidates_by: Annotated[str, typer.Option(
        "--candidates-by", help="How a try's candidates after the first are made, as `cadedit fix --candidates-by`: "
                                "branch or sample.")] = CANDIDATES_BY,
    engine: EngineOpt = None,
    engine_timeout: EngineTimeoutOpt = None,
    where: _TriesWhere = "later" if READ_LATER else "off",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Verified edits measured as users get them: per case, tests passed and wall seconds for one try,
    syntax/no-change checks with --check-tries, and the corpus's test as --test with 3 and --tries tries.
    With --engine the edits go through that engine as `cadedit fix --engine` sends them (only when given).

    Example: cadedit bench tries -c humanevalfix_python.jsonl --model MODEL --limit 60 --json tries.json
    """
    from cadedit.bench import tries as bt  # lazy: keeps `cadedit --help` light

    corpora = {name: cases[skip:] for name, cases in load_corpora(corpus, (limit or 10**9) + skip, context).items()}
    editor = _tries_model(model, dtype, threads, backend, engine, engine_timeout)
    scoped = _choice(scoping, "--scoping", {"on": True, "off": False})
    by = _choice(candidates_by, "--candidates-by", {way: way for way in CANDIDATE_WAYS})
    options = _tries_options(None if engine else editor.name, mode, layout)
    located, read = _choice(where, "--where", TRIES_WHERE)
    settings = bt.TriesSettings(max_tries, check_tries, test_timeout, options, scoped, k, by, engine is not None,
                                located, read)
    meta = {**_model_meta("tries", editor.loaded or editor), "mode": mode, "layout": settings.options.layout, "context": context,
            "tries": max_tries, "check_tries": check_tries, "skip": skip, "scoped": scoped, "where": where,
            "candidates": settings.with_test, "candidates_checks_only": settings.checks_only, "candidates_by": by}
    rows = _tries_rows(max_tries, check_tries)

    def to_json(done: dict[str, list]) -> dict:
        return {**meta, "corpora": [{"name": name, "summary": bt.summarize(cases, rows), "cases": cases}
                                    for name, cases in done.items()]}

    done = run_corpora(corpora, "tries", lambda name, case: bt.run_case(editor, case, settings, scripted_picks(ctx)), to_json, json_path,
                       lambda row: say(_tries_line(row, rows)))
    for name, cases in done.items():
        _print_tries(name, bt.summarize(cases, rows), rows, editor.name)


def _tries_model(model: str | None, dtype: str, threads: int | None, backend: str | None, engine: str | None,
                 engine_timeout: float | None):
    """The editor the tries run with (results.Editor): the engine's client where --engine is given, else
    the local model."""
    if engine is None:
        from cadedit.decode.pipeline import LocalEditor  # lazy: keeps `cadedit --help` light

        return LocalEditor(_load_model(model, "auto", dtype, threads, backend, warm_up=False)[0])
    from cadedit.server.engine import EngineClient  # lazy: keeps `cadedit --help` light

    return EngineClient(engine, engine_timeout or ENGINE_TIMEOUT, model)


def _tries_options(model: str | None, mode: str, layout: str | None):
    """The EditOptions of every try: the loaded model, --mode and (when given) --layout."""
    from dataclasses import replace


    options = EditOptions(model=model, mode=Mode(mode))
    return replace(options, layout=layout) if layout else options


def _tries_rows(max_tries: int, check_tries: int) -> tuple[str, ...]:
    """The runs of each case: one try, the checks alone (with --check-tries), the test with 3 and --tries tries."""
    return ("single",) + (("checks",) if check_tries else ()) + tuple(dict.fromkeys(
        f"test{k}" for k in (min(3, max_tries), max_tries) if max_tries > 1))


def _tries_line(row: dict, rows: tuple[str, ...]) -> str:
    """One case on stderr: each run's test verdict, seconds and tries, or why the case was skipped."""
    if "skipped" in row:
        return f"{row['id']}: skipped ({row['skipped']})"
    return f"{row['id']}: " + ", ".join(f"{k} {'pass' if row[k]['passed'] else 'fail'} "
                                        f"{row[k]['seconds']:.1f}s/{row[k]['tries']}" for k in rows)


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _print_tries(name: str, summary: dict, rows: tuple[str, ...], model: str) -> None:
    out.print(f"{name}: {summary['n']} cases, {_short(model)}")
    for k in rows:
        if k in summary:
            s = summary[k]
            out.print(f"  {k:8s} tests passed {s['passed']}/{summary['n']}, exact {s['exact']}, answered {s['answered']}, "
                      f"median {s['seconds_median']:.1f} s, mean {s['seconds_mean']:.1f} s")
    out.print(f"  checks alone turned {summary['checks_turned_fail_into_pass']} failed single tries into passes")
    if "greedy" in summary:
        g = summary["greedy"]
        out.print(f"  candidate 1 of try 1 alone (a greedy try): tests passed {g['passed']}/{summary['n']}, "
                  f"median {g['seconds_median']:.1f} s; the loop over it, median case "
                  f"{_times(summary['loop_over_greedy_median'])}")
    if summary.get("try1_with_more"):
        out.print(f"  try 1 made more candidates in {summary['try1_with_more']} cases: its decode over candidate 1's, "
                  f"median {_times(summary['try1_decode_over_first_median'])}")


# -- long files --------------------------------------------------------------------------------


ScopingOpt = Annotated[str, typer.Option("--scoping", help="on, off or both (scoped vs whole-file verify edits).")]
WhereOpt = Annotated[str, typer.Option(
    "--where", help="Vague instructions, scoped: on (ask the model which line first), off (retype the whole "
                    "function) or both.")]
WhereByOpt = Annotated[str, typer.Option(
    "--where-by", help="How the where-step finds the line: surprise (the line the model least expected), "
                       "number or quote (the model names it, or quotes its text).")]


@app.command()
def longfile(
    ctx: typer.Context,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    packages: PackagesOpt = PACKAGES,
    n: TasksOpt = 10,
    seed: TaskSeedOpt = 0,
    min_lines: Annotated[int, typer.Option(help="Shortest file.")] = 200,
    max_lines: Annotated[int, typer.Option(help="Longest file.")] = 1000,
    instructions: Annotated[str, typer.Option(help="explicit, vague or both.")] = "both",
    scoping: ScopingOpt = "on",
    where: WhereOpt = "on",
    where_by: WhereByOpt = DEFAULT_WHERE_BY,
    max_tries: Annotated[int, typer.Option("--tries", min=1, help="Tries with syntax/no-change checks.")] = DEFAULT_TRIES,
    tested: Annotated[bool, typer.Option("--oracle-test", help="Also check each edit with a test that passes the "
                                         "original file only, as `fix --test` would with a test that finds the bug.")] = False,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    save_tasks: Annotated[Path | None, typer.Option("--save-tasks", help="Also write the tasks as JSONL.")] = None,
    tasks_path: Annotated[Path | None, typer.Option("--tasks-file", help="Read the tasks from this JSONL instead.")] = None,
    context: ScopeContextOpt = str(CONTEXT_LINES),
    first: Annotated[int, typer.Option(min=0, help="Skip this many tasks (a held-out split).")] = 0,
    json_path: JsonOpt = None,
) -> None:
    """Real long files with one planted one-line bug each (bench/longfile.py), edited as `cadedit fix`
    edits them: scope from the instruction, verify mode, tries with syntax/no-change checks. Per task:
    exact match with the original, lines changed outside the named function, wall seconds, and the
    first try's result beside the verified one.

    Example: cadedit bench longfile --model MODEL -n 30 --scoping both --json longfile.json
    """
    from cadedit.bench import longfile as lf  # lazy: keeps `cadedit --help` light

    around = context_lines(context)
    if tasks_path is not None:
        tasks = lf.read_tasks(tasks_path)[first : first + n]
    else:
        tasks = lf.build_tasks(longfile_roots(packages), first + n, seed, min_lines, max_lines)[first:]
    if save_tasks:
        lf.write_tasks(tasks, save_tasks)
    work = _longfile_work(tasks, instructions, scoping, where, where_by)
    loaded, _ = _load_model(model, "auto", dtype, threads, backend, warm_up=False)
    meta = {**_model_meta("longfile", loaded), "packages": packages, "seed": seed, "tries": max_tries, "n": len(tasks),
            "first": first, "context": context, "where": where, "where_by": where_by, "oracle_test": tested}
    done = run_corpora({"tasks": tasks}, "longfile",
                       lambda _, item: lf.run_task(loaded, *item, around, max_tries, where_by, tested,
                                                   scripted_picks(ctx)),
                       lambda done: {**meta, "summary": _longfile_summary(done["tasks"]), "rows": done["tasks"]},
                       json_path, lambda row: say(_longfile_line(row)), work)
    for key, summary in _longfile_summary(done["tasks"]).items():
        out.print(f"{key}: {summary}")


def _longfile_work(tasks: list, instructions: str, scoping: str, where: str, where_by: str) -> list[tuple[str, tuple]]:
    """Each task under each asked kind of instruction and scoping; the where-step applies to scoped vague
    instructions only (the rest run once, with it on)."""
    on_off = {"on": (True,), "off": (False,), "both": (True, False)}
    kinds = _choice(instructions, "--instructions", {"explicit": ("explicit",), "vague": ("vague",),
                                                     "both": ("explicit", "vague")})
    scopes = _choice(scoping, "--scoping", on_off)
    wheres = _choice(where, "--where", on_off)
    _choice(where_by, "--where-by", dict.fromkeys(WHERE_BY, 0))
    return [("tasks", (task, kind, scoped, located)) for task in tasks for kind in kinds for scoped in scopes
            for located in (wheres if kind == "vague" and scoped else (True,))]


def _longfile_line(row: dict) -> str:
    """One task on stderr: its error, or exact, lines changed outside, seconds, forward passes, tries and
    the line the where-step named."""
    if row.get("error"):
        return f"{row['path']}: {row['error']}"
    v, said = row["verified"] or {}, ""
    if row.get("where"):
        said = f", where {','.join(map(str, row['where']['lines']))} (bug {row['bug_line']})"
    return (f"{row['path']} ({row['lines']} lines) {_longfile_key(row)}: exact {bool(v.get('exact'))}, "
            f"outside {v.get('lines_changed_outside', '-')}, {row['seconds']:.1f} s, {row['forward_passes']} fwd, "
            f"{row['tries']} tries{said}")


def _choice(value: str, option: str, choices: dict[str, T]) -> T:
    if value not in choices:
        raise typer.BadParameter(f"{value!r}: expected one of {', '.join(choices)}", param_hint=option)
    return choices[value]


def _longfile_key(row: dict) -> str:
    """explicit/scoped, vague/scoped (with the where-step), vague/scoped/no-where, .../whole."""
    return f"{row['kind']}/{'scoped' if row['scoped'] else 'whole'}" + ("" if row.get("located", True) else "/no-where")


def _longfile_summary(rows: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(_longfile_key(row), []).append(row)
    summary = {}
    for key, group in sorted(groups.items()):
        verified = [r["verified"] for r in group]
        firsts = [r["first"] for r in group]
        summary[key] = {
            "n": len(group),
            "exact_verified": sum(bool(v and v["exact"]) for v in verified),
            "exact_first_try": sum(bool(f and f["exact"]) for f in firsts),
            "runs_changing_outside": sum(bool(v and v["lines_changed_outside"]) for v in verified),
            "seconds_total": round(sum(r["seconds"] for r in group), 1),
            "first_try_seconds_total": round(sum(r["first_seconds"] for r in group), 1),
            "forward_passes_total": sum(r.get("forward_passes", 0) for r in group),
            "where_named_bug_line": sum(bool(r.get("where_named_bug_line")) for r in group),
            "where_asked": sum(r.get("where") is not None for r in group),
        }
    return summary


from cadedit.bench.overhead import overhead as _overhead  # noqa: E402 - its own module; imports no torch

app.command("overhead")(_overhead)

from cadedit.bench.engine import engine as _engine  # noqa: E402 - its own module; imports no torch

app.command("engine")(_engine)

from cadedit.bench.backends import backends as _backends  # noqa: E402 - its own module; imports torch when it runs

app.command("backends")(_backends)


@app.command()
def everyday(
    model: ModelOpt = None,
    backend: BackendOpt = None,
    threads: ThreadsOpt = None,
    part: Annotated[str, typer.Option("--part", help="dev (read while the checks were built), heldout, or all.")] = "all",
    code: Annotated[Path | None, typer.Option(
        "--code", help="The checkout whose cadedit package runs the edits (an earlier commit gives the before "
                       "figures); default: this one.", show_default=False)] = None,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Everyday edits on real standard-library modules (corpus/everyday), each run as `cadedit fix FILE
    INSTRUCTION --write` without --test and judged by running the module: right, honest (no try passed,
    file untouched), wrong-but-passed, and destructive-and-written.

    Example: cadedit bench everyday --model M.gguf --backend llama --part heldout --json everyday.json
    """
    import json as json_module

    from cadedit.bench import everyday as ev  # lazy: keeps `cadedit --help` light

    if part not in ("dev", "heldout", "all"):
        raise typer.BadParameter(f"{part!r} is not one of dev, heldout, all", param_hint="--part")
    cases = ev.load_cases(part=part)[:limit]
    chosen, root = choose_model(model, Path.cwd()), code or Path(ev.__file__).resolve().parents[2]
    outcomes = []
    for case in cases:
        outcome = ev.run_case(case, chosen, backend, threads, root)
        outcomes.append(outcome)
        mark = " DESTRUCTIVE" if outcome.destructive and outcome.exit_code == 0 else ""
        say(f"{case.file}: {case.instruction!r}: {outcome.verdict}{mark} (exit {outcome.exit_code}, "
            f"{outcome.seconds:.0f} s){': ' + outcome.why if outcome.why else ''}")
        if json_path is not None:
            json_path.write_text(json_module.dumps({"model": chosen, "backend": backend, "code": str(root),
                                                    "summary": ev.summary(outcomes),
                                                    "cases": [o.to_json() for o in outcomes]}, indent=2))
    for name, counts in ev.summary(outcomes).items():
        say(f"{name}: {counts['cases']} cases: {counts['right']} right, {counts['honest']} honest, {counts['wrong']} "
            f"wrong but passed, {counts['destructive_written']} destructive and written")


from cadedit.bench.multiline import multiline as _multiline  # noqa: E402 - its own module; imports torch when it runs

app.command("multiline")(_multiline)
