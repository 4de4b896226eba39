"""Verified edits on a corpus (`cadedit bench tries`): tries and checks measured the way users get them.

Contract: run_case(editor, case, settings, picks=None) writes the case's input as a file in a fresh
folder and runs cadedit.tries.loop.edit_verified on it twice (with `picks`, its seam for scripted
answers): with the corpus's own test as the `--test` command (up to settings.tries tries), and
with the syntax and no-change checks only (settings.check_tries tries). Every candidate of both
runs is also judged by the corpus's test (bench/harness.py), so one run gives every row of the
table: tries = 1 (the first candidate: today's single shot), checks only, and `--test` with 3 and
5 tries (a K-try run is the first K tries of a longer one: each try's prompt and seed depend only
on the tries before it). Wall seconds per row are the seconds of the tries that row made, model
already loaded.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadedit.bench.corpus import Case
from cadedit.bench.harness import JS_MD5_SHIM, has_test, interpreter, run_test, runner_for, write_test_files
from cadedit.bench.report import median
from cadedit.text.document import Document
from cadedit.options import EditOptions
from cadedit.results import Editor
from cadedit.scope.plan import plan_edit
from cadedit.settings import BENCH_TEST_TIMEOUT, CANDIDATES_BY, DEFAULT_TRIES, READ_LATER, default_candidates
from cadedit.tries.loop import Attempts, CheckPlan, Verified, edit_verified
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
    TestTimeoutOpt,
    ThreadsOpt,
)
from cadedit.cli.common import EngineOpt, EngineTimeoutOpt, say, scripted
from cadedit.settings import CANDIDATE_WAYS, DEFAULT_DTYPE, DEFAULT_MODE
from cadedit.options import Mode
from cadedit.settings import ENGINE_TIMEOUT
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora
from cadedit.bench.options import choice, load_corpora, short_name
from cadedit.decode.pipeline import LocalEditor
from cadedit.server.engine import EngineClient

SUFFIX = {"python": ".py", "node": ".js"}


@dataclass(frozen=True)
class TriesSettings:
    tries: int = 5  # with --test
    check_tries: int = DEFAULT_TRIES  # syntax + no-change only
    test_timeout: float = BENCH_TEST_TIMEOUT
    options: EditOptions = EditOptions()
    scoped: bool = True  # the scope from the instruction first, as `cadedit fix` resolves it
    candidates: int | None = None  # each try decodes this many side by side; None: `cadedit fix`'s default
    candidates_by: str = CANDIDATES_BY  # how (settings.CANDIDATE_WAYS, `cadedit fix --candidates-by`)
    engine: bool = False  # the edits go through a shared engine (its defaults are fix --engine's)
    where: bool = False  # a definition named without a line: find the line first, as `cadedit fix --where`
    read: bool = READ_LATER  # else read it once try 1 failed, for the later tries' branches (options.read_later)

    @property
    def with_test(self) -> list[int]:
        """Candidates tries 1 and 2 (and later) with the test decode (cadedit fix --test's default unless given)."""
        return [self.candidates or default_candidates(True, self.engine, n) for n in (1, 2)]

    @property
    def checks_only(self) -> int:
        """Candidates a try with the checks alone decodes (cadedit fix's default without a test unless given)."""
        return self.candidates or default_candidates(False, self.engine)


def _test_command(folder: Path, case: Case, runner: str, name: str) -> str:
    """A shell command that runs prefix + the file on disk + the test, or the case's test files beside
    the file on disk, as harness.run_test does."""
    if not case.test:
        args = write_test_files(case, folder)
        return f"cd {shlex.quote(str(folder))} && {shlex.join([interpreter(runner) or runner, *args])}"
    (folder / "prefix.txt").write_text(case.prefix, encoding="utf-8")
    (folder / "test.txt").write_text("\n" + (case.test or ""), encoding="utf-8")
    if runner == "node":
        shim = folder / "node_modules" / "js-md5" / "index.js"
        shim.parent.mkdir(parents=True, exist_ok=True)
        shim.write_text(JS_MD5_SHIM, encoding="utf-8")
    program = "program" + SUFFIX[runner]
    run = f"{shlex.quote(interpreter(runner) or runner)} {program}"
    if runner == "node":  # console.assert only prints: anything on stderr fails
        run = f"{run} 2> err.txt; code=$?; [ $code -eq 0 ] && [ ! -s err.txt ] || {{ cat err.txt >&2; exit 1; }}"
    return f"cd {shlex.quote(str(folder))} && cat prefix.txt {shlex.quote(name)} test.txt > {program} && {run}"


def _judged(verified: Verified, case: Case, timeout: float) -> list[dict]:
    """Every candidate of every try, in the order they were checked, judged by the corpus's test."""
    rows = []
    for t in verified.tries:
        passed = bool(t.result is not None and run_test(case, t.result.new_text, timeout).passed)
        rows.append(
            {
                "try": t.number,
                "candidate": t.candidate,
                "seconds": t.seconds,
                "checks_seconds": sum(c.seconds for c in t.checks),
                "checks_passed": t.passed,
                "test_passed": passed,
                "summary": t.summary(),
                "changed": t.result.changed if t.result else None,
                "exact": bool(t.result and t.result.new_text == case.after),
                "tokens_reused": t.result.stats.tokens_reused if t.result else 0,
            }
        )
    return rows


def _row(judged: list[dict], upto: int) -> dict:
    """What a user with `upto` tries gets: the answer (the first candidate whose checks passed) or
    none; the seconds of the tries made (a batched try: its one decode and every candidate's checks)."""
    made = [r for r in judged if r["try"] <= upto]
    answer = next((r for r in made if r["checks_passed"]), None)
    stop = answer["try"] if answer else max((r["try"] for r in made), default=0)
    seconds = 0.0
    for number in range(1, stop + 1):
        group = [r for r in made if r["try"] == number]
        checks = sum(r["checks_seconds"] for r in group)
        seconds += max(r["seconds"] - r["checks_seconds"] for r in group) + checks
    return {
        "passed": bool(answer and answer["test_passed"]),
        "exact": bool(answer and answer["exact"]),
        "answered": answer is not None,
        "tries": stop,
        "seconds": seconds,
    }


def _single(judged: list[dict]) -> dict:
    """Try 1 as a single shot shows it: the candidate that passed its checks (with several side by
    side, the first that did), else the first checked, the likeliest, shown as failing."""
    row = _row(judged, 1)
    if not row["answered"]:
        first = judged[0]
        row.update(passed=first["test_passed"], exact=first["exact"])
    return {**row, "answered": True}


def run_case(editor: Editor, case: Case, settings: TriesSettings, picks: Callable[[int], Any] | None = None) -> dict:
    runner = runner_for(case.language)
    if runner is None or not has_test(case):
        return {"id": case.id, "skipped": "no test or no runner"}
    with tempfile.TemporaryDirectory(prefix="cadedit-tries-") as tmp:
        folder = Path(tmp)
        name = case.solution_file or "solution" + SUFFIX[runner]
        (folder / name).write_text(case.before, encoding="utf-8")
        document = Document.read(folder / name)
        options, _ = plan_edit(
            document,
            case.instruction,
            settings.options,
            scoping=settings.scoped,
            where=settings.where,
            read=settings.read,
        )
        with_test = CheckPlan(test=_test_command(folder, case, runner, name), test_timeout=settings.test_timeout)
        tested = edit_verified(
            document,
            case.instruction,
            options,
            with_test,
            Attempts(settings.tries, settings.candidates, settings.candidates_by),
            editor=editor,
            picks=picks,
        )
        tested_rows = _judged(tested, case, settings.test_timeout)
        checked_rows = []
        if settings.check_tries:
            checked = edit_verified(
                document,
                case.instruction,
                options,
                CheckPlan(),
                Attempts(settings.check_tries, settings.checks_only, settings.candidates_by),
                editor=editor,
                picks=picks,
            )
            checked_rows = _judged(checked, case, settings.test_timeout)
    single = _single(tested_rows)
    row = {
        "id": case.id,
        "language": case.language,
        "regions": [list(r) for r in options.regions],
        "single": single,
        "where": tested.where.to_json() if tested.where is not None else None,
        "tries_with_test": tested_rows,
        "tries_checks_only": checked_rows,
    }
    if checked_rows:
        row["checks"] = _row(checked_rows, settings.check_tries)
    for k in {min(3, settings.tries), settings.tries} - {1}:
        row[f"test{k}"] = _row(tested_rows, k)
    return row


ROWS = ("single", "checks", "test3", "test5")


def summarize(results: list[dict], rows=ROWS) -> dict:
    done = [r for r in results if "skipped" not in r]
    out = {"n": len(done)}
    for name in rows:
        cells = [r[name] for r in done if name in r]
        if not cells:
            continue
        out[name] = {
            "passed": sum(c["passed"] for c in cells),
            "exact": sum(c["exact"] for c in cells),
            "answered": sum(c["answered"] for c in cells),
            "seconds_median": median([c["seconds"] for c in cells]),
            "seconds_mean": sum(c["seconds"] for c in cells) / len(cells),
        }
    last = rows[-1]
    if "single" in out and last in out:
        ratios = [r[last]["seconds"] / r["single"]["seconds"] for r in done if r["single"]["seconds"]]
        out["test_cost_over_single_median"] = median(ratios) if ratios else None
    saved = [r for r in done if "checks" in r and not r["single"]["passed"] and r["checks"]["passed"]]
    out["checks_turned_fail_into_pass"] = len(saved)
    out.update(_against_greedy(done, last))
    return out


def _against_greedy(done: list[dict], last: str) -> dict:
    """Try 1's candidate 1 as one greedy try alone would be (its decode, its checks): how many it passed,
    the median case's wall of the loop (`last`) over it, and where try 1 made more candidates, the
    median of try 1's whole decode over candidate 1's decode (what the other candidates cost)."""
    firsts, loop, extra = [], [], []
    for r in done:
        tried = [t for t in r["tries_with_test"] if t["try"] == 1]
        first = next((t for t in tried if t["candidate"] in (0, 1)), None)
        if first is None or not first["seconds"]:
            continue
        firsts.append(first)
        if last in r:
            loop.append(r[last]["seconds"] / first["seconds"])
        own = first["seconds"] - first["checks_seconds"]
        if len(tried) > 1 and own > 0:
            extra.append(max(t["seconds"] - t["checks_seconds"] for t in tried) / own)
    if not firsts:
        return {}
    return {
        "greedy": {
            "passed": sum(t["checks_passed"] and t["test_passed"] for t in firsts),
            "seconds_median": median([t["seconds"] for t in firsts]),
        },
        "loop_over_greedy_median": median(loop) if loop else None,
        "try1_decode_over_first_median": median(extra) if extra else None,
        "try1_with_more": len(extra),
    }


_TriesWhere = Annotated[
    str,
    typer.Option(
        "--where",
        help="A definition named without a line: first (or on) reads it for the line first, as `cadedit fix "
        "--where`; later reads it once try 1 failed, for the later tries' branches (fix's default); "
        "off: neither.",
    ),
]


TRIES_WHERE = {"first": (True, False), "on": (True, False), "later": (False, True), "off": (False, False)}


def tries(
    ctx: typer.Context,
    corpus: CorpusOpt,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    max_tries: Annotated[int, typer.Option("--tries", min=1, help="Tries with the corpus's test as --test.")] = 5,
    check_tries: Annotated[
        int, typer.Option("--check-tries", min=0, help="Tries with syntax/no-change checks only (0: skip that run).")
    ] = DEFAULT_TRIES,
    test_timeout: TestTimeoutOpt = BENCH_TEST_TIMEOUT,
    mode: Annotated[str, typer.Option(help="Decoding mode: program, rewrite, lookup or verify.")] = DEFAULT_MODE.value,
    layout: Annotated[str | None, typer.Option(help="Prompt layout (prompt.LAYOUTS); default: EditOptions'.")] = None,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    skip: Annotated[int, typer.Option(min=0, help="Skip the first N cases of each corpus.")] = 0,
    context: CaseContextOpt = "docs",
    scoping: Annotated[
        str,
        typer.Option(
            "--scoping",
            help="on (the scope from the instruction, as `cadedit fix` resolves it) or off (whole-file edits).",
        ),
    ] = "on",
    k: Annotated[
        int | None,
        typer.Option(
            "--candidates",
            "-k",
            min=1,
            max=8,
            show_default=False,
            help="Each try decodes this many candidates side by side, as `cadedit fix -k` (default: fix's, 4 with "
            "the test, 1 with the checks alone).",
        ),
    ] = None,
    candidates_by: Annotated[
        str,
        typer.Option(
            "--candidates-by",
            help="How a try's candidates after the first are made, as `cadedit fix --candidates-by`: branch or sample.",
        ),
    ] = CANDIDATES_BY,
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

    corpora = {name: cases[skip:] for name, cases in load_corpora(corpus, (limit or 10**9) + skip, context).items()}
    editor = _tries_model(model, dtype, threads, backend, engine, engine_timeout, scripted(ctx).choose_points)
    scoped = choice(scoping, "--scoping", {"on": True, "off": False})
    by = choice(candidates_by, "--candidates-by", {way: way for way in CANDIDATE_WAYS})
    options = _tries_options(None if engine else editor.name, mode, layout)
    located, read = choice(where, "--where", TRIES_WHERE)
    settings = TriesSettings(
        max_tries, check_tries, test_timeout, options, scoped, k, by, engine is not None, located, read
    )
    meta = {
        **_model_meta("tries", editor.loaded or editor),
        "mode": mode,
        "layout": settings.options.layout,
        "context": context,
        "tries": max_tries,
        "check_tries": check_tries,
        "skip": skip,
        "scoped": scoped,
        "where": where,
        "candidates": settings.with_test,
        "candidates_checks_only": settings.checks_only,
        "candidates_by": by,
    }
    rows = _tries_rows(max_tries, check_tries)

    def to_json(done: dict[str, list]) -> dict:
        return {
            **meta,
            "corpora": [
                {"name": name, "summary": summarize(cases, rows), "cases": cases} for name, cases in done.items()
            ],
        }

    done = run_corpora(
        corpora,
        "tries",
        lambda name, case: run_case(editor, case, settings, scripted(ctx).picks),
        to_json,
        json_path,
        lambda row: say(_tries_line(row, rows)),
    )
    for name, cases in done.items():
        _print_tries(name, summarize(cases, rows), rows, editor.name)


def _tries_model(
    model: str | None,
    dtype: str,
    threads: int | None,
    backend: str | None,
    engine: str | None,
    engine_timeout: float | None,
    choose_points=None,
):
    """The editor the tries run with (results.Editor): the engine's client where --engine is given, else
    the local model (choose_points: pipeline.LocalEditor's, where a test scripted branches to start)."""
    if engine is None:
        return LocalEditor(_load_model(model, "auto", dtype, threads, backend, warm_up=False)[0], choose_points)

    return EngineClient(engine, engine_timeout or ENGINE_TIMEOUT, model)


def _tries_options(model: str | None, mode: str, layout: str | None):
    """The EditOptions of every try: the loaded model, --mode and (when given) --layout."""
    from dataclasses import replace

    options = EditOptions(model=model, mode=Mode(mode))
    return replace(options, layout=layout) if layout else options


def _tries_rows(max_tries: int, check_tries: int) -> tuple[str, ...]:
    """The runs of each case: one try, the checks alone (with --check-tries), the test with 3 and --tries tries."""
    return (
        ("single",)
        + (("checks",) if check_tries else ())
        + tuple(dict.fromkeys(f"test{k}" for k in (min(3, max_tries), max_tries) if max_tries > 1))
    )


def _tries_line(row: dict, rows: tuple[str, ...]) -> str:
    """One case on stderr: each run's test verdict, seconds and tries, or why the case was skipped."""
    if "skipped" in row:
        return f"{row['id']}: skipped ({row['skipped']})"
    return f"{row['id']}: " + ", ".join(
        f"{k} {'pass' if row[k]['passed'] else 'fail'} {row[k]['seconds']:.1f}s/{row[k]['tries']}" for k in rows
    )


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _print_tries(name: str, summary: dict, rows: tuple[str, ...], model: str) -> None:
    out.print(f"{name}: {summary['n']} cases, {short_name(model)}")
    for k in rows:
        if k in summary:
            s = summary[k]
            out.print(
                f"  {k:8s} tests passed {s['passed']}/{summary['n']}, exact {s['exact']}, answered {s['answered']}, "
                f"median {s['seconds_median']:.1f} s, mean {s['seconds_mean']:.1f} s"
            )
    out.print(f"  checks alone turned {summary['checks_turned_fail_into_pass']} failed single tries into passes")
    if "greedy" in summary:
        g = summary["greedy"]
        out.print(
            f"  candidate 1 of try 1 alone (a greedy try): tests passed {g['passed']}/{summary['n']}, "
            f"median {g['seconds_median']:.1f} s; the loop over it, median case "
            f"{_times(summary['loop_over_greedy_median'])}"
        )
    if summary.get("try1_with_more"):
        out.print(
            f"  try 1 made more candidates in {summary['try1_with_more']} cases: its decode over candidate 1's, "
            f"median {_times(summary['try1_decode_over_first_median'])}"
        )
