"""End to end on a corpus (`cadedit bench e2e`): decoding modes of `cadedit fix` side by side on the
same cases with the same loaded model, and llama.cpp beside them (bench/peers.py).

Contract: run_case(loaded, case, settings, chosen) edits case.before with each chosen method in
turn (a mode through pipeline.edit_file, exactly as `cadedit fix` does); the first is measured
against the second (default: verify against rewrite). Each method gives an Attempt: wall clock
(model already loaded and warmed up), forward passes, new and spliced tokens, exact match against
the gold (byte-exact and after .strip()), whether its edited file equals the first method's
(same_as_first) and, where the case has a test, whether the edited code passes it
(bench/harness.py). A method that fails (budget, a program that does not resolve) is an Attempt
with its error, never an exception. long_cases() builds 300+-line files with one one-line bug
from a corpus. summarize() gives the per-method totals and the realised speedups, which the CLI
prints beside bnd_exact (eq. 3 over the corpus's oracle spans, bench/ceiling.py).
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cadedit.decode import pipeline
from cadedit.bench.corpus import Case
from cadedit.bench.peers import PEERS
from cadedit.bench.harness import Verdict, has_test, run_test
from cadedit.bench.report import median
from cadedit.text.document import Document
from cadedit.errors import CadeditError
from cadedit.backends.model import LoadedModel
from cadedit.options import DEFAULT_MODE, EditOptions, Mode
from cadedit.settings import BENCH_TEST_TIMEOUT
from cadedit.scope.plan import plan_edit
from cadedit.bench.corpus import Edited, document_for
from pathlib import Path
from typing import Annotated
import typer
from cadedit.bench.options import (
    BackendOpt,
    CaseContextOpt,
    CorpusOpt,
    CountingOpt,
    DeviceOpt,
    DtypeOpt,
    JsonOpt,
    KernelOpt,
    LimitOpt,
    MaxNewOpt,
    ModelOpt,
    TestTimeoutOpt,
    ThreadsOpt,
)
from cadedit.cli.common import err, say, scripted
from cadedit.settings import DEFAULT_DTYPE
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora
from cadedit.bench.options import load_corpora, short_name
from cadedit.bench import peers as pe
from cadedit.bench.ceiling import Ceiling, bounds, case_ceiling
from cadedit.bench.ceiling import load_curve
from cadedit.bench.peers import require_llama
from cadedit.bench.report import fmt_float, fmt_int
from cadedit.bench.tokens import TokenCounter

MODES = tuple(m.value for m in Mode)
FIX = "fix"  # `cadedit fix`'s own edit: the scope from the instruction, then the default mode (one try)
METHODS = (FIX,) + MODES + PEERS
DEFAULT_METHODS = (DEFAULT_MODE.value, Mode.REWRITE.value)


Method = Callable[[LoadedModel, Document, str, "int | None"], Edited]


@dataclass(frozen=True)
class Attempt:
    method: str
    seconds: float
    edited: Edited | None
    exact: bool = False
    trimmed: bool = False
    error: str | None = None
    test: Verdict = field(default_factory=lambda: Verdict(None, "no test"))
    same_as_first: bool | None = None  # its edited file equals the first method's; None: first, or no edit to compare

    def to_json(self) -> dict:
        e = self.edited
        return {
            "method": self.method,
            "seconds": self.seconds,
            "exact": self.exact,
            "trimmed": self.trimmed,
            "error": self.error,
            "test": self.test.to_json(),
            "same_as_first": self.same_as_first,
            "forward_passes": e.forward_passes if e else None,
            "tokens_new": e.tokens_new if e else None,
            "tokens_spliced": e.tokens_spliced if e else None,
            "seconds_prefill": e.seconds_prefill if e else None,
            "tokens_prompt": e.tokens_prompt if e else None,
            "tokens_stepped": e.tokens_stepped if e else None,
            "text": e.text if e else None,
            "output": e.output if e else None,
        }


@dataclass(frozen=True)
class CaseResult:
    id: str
    language: str
    attempts: tuple[Attempt, ...]

    def to_json(self) -> dict:
        return {"id": self.id, "language": self.language, **{a.method: a.to_json() for a in self.attempts}}


@dataclass(frozen=True)
class E2ESettings:
    methods: tuple[str, ...] = DEFAULT_METHODS
    max_new_tokens: int | None = None
    test_timeout: float = BENCH_TEST_TIMEOUT
    run_tests: bool = True


# -- the methods: decoding modes of `cadedit fix` ------------------------------------------------


def mode_method(mode: Mode, scoped: bool = False, make_sampler: pipeline.SamplerFactory | None = None) -> Method:
    """One decoding mode, through exactly the code path of `cadedit fix`; scoped: the scope from the
    instruction first, as `cadedit fix` resolves it (no scope found: the whole file). make_sampler:
    the decode's sampler from the prepared request (None: greedy; tests script answers with it)."""

    def edit(loaded: LoadedModel, document: Document, instruction: str, max_new_tokens: int | None) -> Edited:
        options = EditOptions(model=loaded.name, max_new_tokens=max_new_tokens, mode=mode)
        options, _ = plan_edit(document, instruction, options, scoping=scoped)
        result = pipeline.edit_file(document, instruction, options, loaded=loaded, make_sampler=make_sampler)
        s = result.stats
        return Edited(
            result.new_text,
            result.program_text,
            s.forward_passes,
            s.tokens_new,
            s.tokens_copied,
            s.seconds_prefill,
            s.tokens_prompt,
            s.tokens_new - s.drafts_kept,
        )

    return edit


def methods(
    names: Sequence[str], peers: dict[str, Method] | None = None, make_sampler: pipeline.SamplerFactory | None = None
) -> dict[str, Method]:
    """The methods to run per case, in order: the first is measured, the second is its baseline.
    A peer (llama-rewrite, llama-lookup) comes built from `peers` (bench/peers.py loads them);
    make_sampler goes to every mode's decodes (mode_method)."""
    chosen: dict[str, Method] = {}
    for name in names:
        if name in PEERS:
            if not peers or name not in peers:
                raise CadeditError(f"method {name} needs llama.cpp and a GGUF", hint="pass --gguf PATH")
            chosen[name] = peers[name]
            continue
        if name == FIX:  # one try: later tries' wider scopes do not come into it
            chosen[name] = mode_method(DEFAULT_MODE, scoped=True, make_sampler=make_sampler)
            continue
        try:
            chosen[name] = mode_method(Mode(name), make_sampler=make_sampler)
        except ValueError:
            raise CadeditError(f"unknown method {name!r}", hint=f"use some of {', '.join(METHODS)}") from None
    if not chosen:
        raise CadeditError("no method given", hint=f"use some of {', '.join(METHODS)}")
    return chosen


# -- one case ------------------------------------------------------------------------------------


def attempt(name: str, method: Method, loaded: LoadedModel, case: Case, settings: E2ESettings) -> Attempt:
    """Run one method on one case; a CadeditError becomes the attempt's error (its test then fails)."""
    start = time.perf_counter()
    try:
        edited = method(loaded, document_for(case), case.instruction, settings.max_new_tokens)
    except CadeditError as exc:
        seconds = time.perf_counter() - start
        test = Verdict(False if has_test(case) and settings.run_tests else None, "no edit")
        return Attempt(name, seconds, None, error=f"{type(exc).__name__}: {exc.message}", test=test)
    seconds = time.perf_counter() - start
    test = run_test(case, edited.text, settings.test_timeout) if settings.run_tests else Verdict(None, "not run")
    return Attempt(
        name, seconds, edited, edited.text == case.after, edited.text.strip() == case.after.strip(), test=test
    )


def run_case(loaded: LoadedModel, case: Case, settings: E2ESettings, chosen: dict[str, Method]) -> CaseResult:
    attempts = [attempt(name, method, loaded, case, settings) for name, method in chosen.items()]
    return CaseResult(case.id, case.language, compare_outputs(attempts))


def compare_outputs(attempts: Sequence[Attempt]) -> tuple[Attempt, ...]:
    """Each attempt after the first marked with whether its edited file equals the first's (the
    file, not the raw answer: a program and a rewrite of the same file are the same output)."""
    first = attempts[0].edited if attempts else None
    marked = list(attempts[:1])
    for a in attempts[1:]:
        same = first.text == a.edited.text if first and a.edited else None
        marked.append(replace(a, same_as_first=same))
    return tuple(marked)


# -- long cases: one one-line bug in a 300+-line file --------------------------------------------

LONG_LINES = 300
_LONG_AT = (0.5, 0.2, 0.8)  # where in the file the bug sits, case by case


def one_line_bug(case: Case) -> bool:
    """Whether before and after differ in exactly one line replaced by one line."""
    a, b = case.before.splitlines(keepends=True), case.after.splitlines(keepends=True)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    return len(ops) == 1 and ops[0][0] == "replace" and ops[0][2] - ops[0][1] == 1 and ops[0][4] - ops[0][3] == 1


def long_cases(cases: Sequence[Case], count: int, lines: int = LONG_LINES) -> list[Case]:
    """`count` long files from a corpus: the gold files (prefix + after) of consecutive cases,
    starting at case 17 + 53k (mod n), joined by newlines until they have `lines` lines, with the
    one-line bug nearest 50%, 20% or 80% of the way in (case by case) left in: that case's
    prefix + before. The instruction and test are that case's; the test runs against the whole
    edited file (no prefix). Deterministic."""
    out = []
    for k in range(count if cases else 0):
        first = (17 + 53 * k) % len(cases)
        window: list[Case] = []
        while sum((c.prefix + c.after).count("\n") + 1 for c in window) < lines and len(window) < len(cases):
            window.append(cases[(first + len(window)) % len(cases)])
        buggy = _bug_index(window, _LONG_AT[k % len(_LONG_AT)])
        golds = [c.prefix + c.after for c in window]
        befores = [c.prefix + c.before if i == buggy else g for i, (c, g) in enumerate(zip(window, golds))]
        target = window[buggy]
        out.append(
            Case(
                f"long/{target.id}@{buggy + 1}of{len(window)}",
                target.language,
                "\n".join(befores),
                "\n".join(golds),
                target.instruction,
                target.test,
            )
        )
    return out


def _bug_index(window: Sequence[Case], where: float) -> int:
    """The case with a one-line bug nearest the wanted position in the window."""
    wanted = int(where * (len(window) - 1))
    usable = [i for i, c in enumerate(window) if one_line_bug(c)] or [wanted]
    return min(usable, key=lambda i: (abs(i - wanted), i))


# -- the compute floor ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    """What an edit's model work costs at least on this machine, from the kernel measured in the same
    run: every prompt token and every copied output token fed at the best prefill rate (T_PP(N) / N
    at the longest N), every token the model writes itself one step (T_AR(1)), nothing else."""

    prefill_ms: float  # per token
    step_ms: float
    prefix: int
    span: int

    def seconds(self, edited: Edited | None) -> float | None:
        if edited is None or edited.tokens_prompt is None or edited.tokens_stepped is None:
            return None
        output = edited.tokens_new + edited.tokens_spliced
        fed = edited.tokens_prompt + output - edited.tokens_stepped
        return (fed * self.prefill_ms + edited.tokens_stepped * self.step_ms) / 1000

    def to_json(self) -> dict:
        return {
            "prefill_ms_per_token": self.prefill_ms,
            "step_ms": self.step_ms,
            "prefix": self.prefix,
            "span": self.span,
        }


def measure_floor(loaded: LoadedModel, prefix: int = 1024, span: int = 512, trials: int = 3) -> Floor:
    """T_PP(span) / span and T_AR(1) after a `prefix`-token prompt, medians of `trials` (bench kernel)."""
    import torch

    from cadedit.bench import kernel as kn  # lazy: imports torch, which only --floor needs (as this function does)

    points = kn.sweep(loaded.model, torch.device(loaded.device), kn.KernelSettings(prefix, (1, span), trials))
    one, long = points
    return Floor(long.pp_ms / span, one.ar_ms, prefix, span)


# -- summaries -----------------------------------------------------------------------------------


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def method_summary(attempts: Sequence[Attempt], floor: Floor | None = None) -> dict:
    seconds = [a.seconds for a in attempts]
    floors = [(a.seconds, floor.seconds(a.edited)) for a in attempts] if floor else []
    floors = [(wall, least) for wall, least in floors if least]
    done = [a.edited for a in attempts if a.edited]
    tested = [a.test.passed for a in attempts if a.test.passed is not None]
    passes = [e.forward_passes for e in done if e.forward_passes is not None]
    compared = [a.same_as_first for a in attempts if a.same_as_first is not None]
    return {
        "n": len(attempts),
        "errors": len(attempts) - len(done),
        "exact": sum(a.exact for a in attempts),
        "trimmed": sum(a.trimmed for a in attempts),
        "tested": len(tested),
        "passed": sum(tested),
        "seconds_total": sum(seconds),
        "seconds_mean": sum(seconds) / len(seconds) if seconds else None,
        "seconds_median": median(seconds) if seconds else None,
        "forward_passes_total": sum(passes) if done and len(passes) == len(done) else None,
        "tokens_new_total": sum(e.tokens_new for e in done),
        "tokens_spliced_total": sum(e.tokens_spliced for e in done),
        "compared": len(compared),
        "same_as_first": sum(compared),
        "floor_n": len(floors),
        "floor_seconds_total": sum(least for _, least in floors) if floors else None,
        "over_floor": _ratio(sum(wall for wall, _ in floors), sum(least for _, least in floors)) if floors else None,
    }


def _decode_seconds(a: Attempt) -> float:
    return a.seconds - (a.edited.seconds_prefill if a.edited else 0.0)


def speedups(results: Sequence[CaseResult], baseline: str) -> dict:
    """Baseline cost over program cost, summed over cases: wall clock (every case; the cases where
    both are exact), decode only (prompt prefill left out, since the two prompts differ; over cases
    where both made an edit) and forward passes (where both count them)."""
    pairs = [
        (r.attempts[0], r.attempts[1]) for r in results if len(r.attempts) > 1 and r.attempts[1].method == baseline
    ]
    both = [(p, b) for p, b in pairs if p.exact and b.exact]
    timed = [(p, b) for p, b in pairs if p.edited and b.edited]
    counted = [
        (p.edited.forward_passes, b.edited.forward_passes)
        for p, b in timed
        if p.edited.forward_passes and b.edited.forward_passes
    ]
    return {
        "n": len(pairs),
        "wall": _ratio(sum(b.seconds for _, b in pairs), sum(p.seconds for p, _ in pairs)),
        "n_both_exact": len(both),
        "wall_both_exact": _ratio(sum(b.seconds for _, b in both), sum(p.seconds for p, _ in both)),
        "n_both_edited": len(timed),
        "decode": _ratio(sum(_decode_seconds(b) for _, b in timed), sum(_decode_seconds(p) for p, _ in timed)),
        "forward_passes": _ratio(sum(b for _, b in counted), sum(p for p, _ in counted)),
    }


def summarize(results: Sequence[CaseResult], baseline: str | None = None, floor: Floor | None = None) -> dict:
    names = [a.method for a in results[0].attempts] if results else []
    if baseline is None:
        baseline = names[1] if len(names) > 1 else ""
    by_method = {
        name: method_summary([a for r in results for a in r.attempts if a.method == name], floor) for name in names
    }
    for m in by_method.values():  # every method ran every case: its wall clock over the first's, pooled
        m["first_speedup"] = _ratio(m["seconds_total"], by_method[names[0]]["seconds_total"])
    return {"methods": by_method, "speedup": speedups(results, baseline) if baseline in names else None}


MethodsOpt = Annotated[
    str,
    typer.Option(
        "--methods",
        help="Methods to run per case, comma-separated: fix (`cadedit fix`'s own edit: the scope from the "
        "instruction, then the default mode), the modes program, rewrite, lookup, verify, and llama.cpp's "
        "llama-rewrite, llama-lookup (with --gguf). The first is measured against the second; every method's "
        "edited file is compared with the first's.",
    ),
]


LongOpt = Annotated[
    int,
    typer.Option(
        "--long",
        min=0,
        help="Also N long cases per corpus: consecutive gold files joined to 300+ lines, one of "
        "them left with its one-line bug; its test runs against the whole edited file.",
    ),
]


GgufOpt = Annotated[
    Path | None, typer.Option("--gguf", metavar="PATH", help="The same model as a .gguf file, for the llama-* methods.")
]


LlamaCtxOpt = Annotated[
    int | None,
    typer.Option("--llama-ctx", min=256, help="llama.cpp's n_ctx (default: the largest prompt + budget of the run)."),
]


FloorOpt = Annotated[
    bool,
    typer.Option(
        "--floor",
        help="Measure the kernel first (T_PP(512)/512 and T_AR(1) after 1,024 tokens) and put each "
        "method's wall clock over its compute floor: prompt and copied tokens at that prefill rate, "
        "written tokens one step each.",
    ),
]


NoTestsOpt = Annotated[bool, typer.Option("--no-tests", help="Do not run the corpus's tests.")]


def e2e(
    ctx: typer.Context,
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

    imports = time.perf_counter() - start
    names, peer_names = _e2e_methods(methods, gguf)
    corpora = _e2e_corpora(corpus, limit, context, long)
    curve = load_curve(kernel) if kernel else None
    loaded, warm, least = _e2e_load(model, device, dtype, threads, backend, floor)
    peers_meta, chosen = _e2e_peers(
        loaded, peer_names, gguf, llama_ctx, corpora, max_new_tokens, names, scripted(ctx).make_sampler
    )
    say(
        f"{short_name(loaded.name)}: imports {imports:.1f} s, load {loaded.load_seconds:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in loaded.phases)
        + f"), warm-up {warm:.1f} s"
    )
    meta = {
        **_model_meta("e2e", loaded, "device"),
        "methods": list(names),
        "baseline": names[1] if len(names) > 1 else "",
        "counting": counting,
        "kernel": str(kernel) if kernel else None,
        "test_timeout": test_timeout,
        "max_new_tokens": max_new_tokens,
        "long": long,
        "imports_seconds": imports,
        "load_seconds": loaded.load_seconds,
        "load_phases": dict(loaded.phases),
        "warm_up_seconds": warm,
        "floor": least.to_json() if least else None,
        **peers_meta,
    }
    bounds = _e2e_bounds(corpora, loaded, counting, curve)
    settings = E2ESettings(names, max_new_tokens, test_timeout, not no_tests)
    done = run_corpora(
        corpora,
        "e2e",
        lambda name, case: run_case(loaded, case, settings, chosen),
        _e2e_json(meta, bounds, least),
        json_path,
        show=lambda row: say(_e2e_line(row)),
    )
    _print_e2e(done, bounds, meta["baseline"], loaded.name, least)


def _e2e_corpora(paths: list[Path], limit: int | None, context: str, long: int) -> dict[str, list]:
    """The corpora's cases, and with --long N, N long cases of each (from all its cases) as a corpus of its own."""

    corpora = load_corpora(paths, limit, context)
    if long:
        full = load_corpora(paths, None)
        for name in list(corpora):
            corpora[f"{name} long"] = long_cases(full[name], long)
    return corpora


def _e2e_json(meta: dict, bounds: dict[str, dict], least) -> Callable[[dict[str, list]], dict]:
    """The --json of e2e: meta, then per corpus its summary, its bounds and its cases."""

    def to_json(done: dict[str, list]) -> dict:
        return {
            **meta,
            "corpora": [
                {
                    "name": name,
                    "n": len(rows),
                    "summary": summarize(rows, meta["baseline"], least),
                    "bounds": bounds.get(name),
                    "cases": [r.to_json() for r in rows],
                }
                for name, rows in done.items()
            ],
        }

    return to_json


def _e2e_methods(methods: str, gguf: Path | None) -> tuple[tuple[str, ...], list[str]]:
    """--methods checked: the names in order, and those that are llama.cpp peers (they need --gguf)."""

    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not names or any(m not in METHODS for m in names) or len(set(names)) < len(names):
        raise typer.BadParameter(f"use some of {', '.join(METHODS)}, each once", param_hint="--methods")
    peer_names = [m for m in names if m in PEERS]
    if peer_names and gguf is None:
        raise typer.BadParameter(f"{', '.join(peer_names)} need(s) the model as a .gguf file", param_hint="--gguf")
    if peer_names:
        require_llama()
    return names, peer_names


def _e2e_load(model, device: str, dtype: str, threads, backend, floor: bool):
    """The model loaded and warmed up, and (with --floor) the kernel measured for the compute floor."""

    loaded, warm = _load_model(model, device, dtype, threads, backend)
    least = None
    if floor:
        with err.status("measuring the kernel for the compute floor ..."):
            least = measure_floor(loaded)
        say(f"compute floor: prefill {least.prefill_ms:.2f} ms/token, step {least.step_ms:.1f} ms")
    return loaded, warm, least


def _e2e_peers(
    loaded,
    peer_names: list[str],
    gguf: Path | None,
    llama_ctx: int | None,
    corpora: dict[str, list],
    max_new_tokens: int | None,
    names: tuple[str, ...],
    make_sampler: pipeline.SamplerFactory | None = None,
) -> tuple[dict, dict]:
    """llama.cpp loaded for the llama-* methods (n_ctx fitted to the run), and the methods in order;
    make_sampler: the modes' sampler factory (a test's script, cli.common.Scripted), None: the model's."""

    if not peer_names:
        return {}, methods(names, make_sampler=make_sampler)
    cases = [case for cases in corpora.values() for case in cases]
    with err.status("loading the peers ..."):
        n_ctx = llama_ctx or pe.context_for(loaded, cases, max_new_tokens)
        start = time.perf_counter()
        loaded_peers = pe.load_peers(peer_names, str(gguf), loaded.threads, n_ctx)
    meta = {
        "gguf": str(gguf),
        "llama_ctx": n_ctx,
        "llama_cpp": pe.version(),
        "llama_load_seconds": time.perf_counter() - start,
    }
    return meta, methods(names, loaded_peers, make_sampler=make_sampler)


def _e2e_bounds(corpora: dict[str, list], loaded, counting: str, curve) -> dict[str, dict]:
    """bnd_exact and friends per corpus, over its oracle spans in the model's own tokens."""

    if curve is None:
        return {}
    tokens = TokenCounter(loaded.tokenizer, loaded.name)
    return {
        name: bounds(Ceiling(name, tuple(case_ceiling(c, tokens, counting, token_level=False) for c in cases)), curve)
        for name, cases in corpora.items()
    }


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

    rows, speed, first = [], [], ""
    for name, results in done.items():
        summary = summarize(results, baseline, floor)
        first = first or next(iter(summary["methods"]), "")
        for method, m in summary["methods"].items():
            n = m["n"]
            rows.append(
                [
                    name,
                    method,
                    str(n),
                    f"{m['exact']}/{n}",
                    f"{m['trimmed']}/{n}",
                    f"{m['passed']}/{m['tested']}" if m["tested"] else "-",
                    str(m["errors"]),
                    fmt_float(m["seconds_mean"], 2),
                    fmt_float(m["seconds_median"], 2),
                    "-" if m["forward_passes_total"] is None else fmt_int(m["forward_passes_total"]),
                    fmt_float(m["first_speedup"], 2, "x") if method != first else "-",
                    f"{m['same_as_first']}/{m['compared']}" if m["compared"] else "-",
                ]
                + ([fmt_float(m["over_floor"], 2, "x")] if floor else [])
            )
        s, b = summary["speedup"], bounds.get(name) or {}
        if s:
            speed.append(
                [
                    name,
                    str(s["n"]),
                    fmt_float(s["wall"], 2, "x"),
                    f"{fmt_float(s['wall_both_exact'], 2, 'x')} ({s['n_both_exact']})",
                    fmt_float(s["decode"], 2, "x"),
                    fmt_float(s["forward_passes"], 2, "x"),
                    fmt_float(b.get("bnd_exact"), 2, "x"),
                ]
            )
    out.table(
        f"End to end, {short_name(model)}: {first} vs {baseline or 'nothing'}",
        [
            "corpus",
            "method",
            "n",
            "byte-exact",
            "trimmed",
            "tests",
            "errors",
            "mean s",
            "median s",
            "fwd passes",
            f"{first} faster by",
            f"same output as {first}",
        ]
        + (["wall / floor"] if floor else []),
        rows,
        caption=(
            f"floor: prompt and copied tokens at {floor.prefill_ms:.2f} ms each, written tokens "
            f"{floor.step_ms:.1f} ms each (kernel measured in this run)"
        )
        if floor
        else None,
    )
    if speed:
        out.table(
            f"Realised speedup of {first} over {baseline} ({baseline} cost / {first} cost)",
            ["corpus", "n", "wall", "wall, both exact (n)", "decode only", "fwd passes", "bnd_exact"],
            speed,
            caption=None
            if bounds
            else "no --kernel: bnd_exact skipped (make one with `cadedit bench kernel --json K.json`)",
        )
