"""`cadedit fix` (one file, stdin, or several files in one patch): the tries that check each candidate
before it is shown or written, with the model loaded here or reached through the warm server or a
shared engine."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from cadedit.backends import hardware
from cadedit.backends import model as backend_model  # a module: tests count the loads of backend_model.load_model
from cadedit.cli import auto_test
from cadedit.cli.common import BackendOpt, DtypeOpt, MaxNewOpt, ModelOpt, ThreadsOpt, files_text, server_for
from cadedit.cli.common import EngineOpt, EngineTimeoutOpt, ScopeContextOpt, context_lines, engine_for, scripted
from cadedit.cli.common import Scripted, err, escape_markup, say
from cadedit.cli.program import WriteOpt, check_patch_path, display_path, reread, write_stdout
from cadedit.cli.recover import recover_files
from cadedit.cli.sketch import Shown as SketchShown
from cadedit.cli.sketch import fix_sketch
from cadedit.decode.pipeline import LocalEditor
from cadedit.errors import CadeditError, CheckFailedError, ConfigError, DocumentError, RetypeBoundError
from cadedit.git.repo import printable
from cadedit.options import EditOptions, Sampling
from cadedit.results import result_json
from cadedit.scope.bound import plan_bounded
from cadedit.scope.plan import span_text
from cadedit.settings import CANDIDATE_WAYS, CANDIDATES_BY, CONTEXT_LINES, DEFAULT_MODE, DEFAULT_TRIES, DEFAULT_WHERE_BY
from cadedit.settings import MECHANICAL, TEST_TIMEOUT, WHERE_BY, Mode, choose_max_retype, max_retype_value
from cadedit.text.diff import check_unchanged, check_writable, count_changes, raise_for_signal, show
from cadedit.text.diff import signals_deferred, unified_diff, write_atomic
from cadedit.text.document import Document
from cadedit.text.languages import guess_suffix, language_of
from cadedit.text.program import format as format_program
from cadedit.tries.checks import Candidate, candidate_in_place, run_command
from cadedit.tries.found_tests import AUTO
from cadedit.tries.loop import Attempts, CheckPlan, Reporters, edit_verified
from cadedit.tries.mechanical import mechanical_edit

_FixArgs = Annotated[
    list[str],
    typer.Argument(
        metavar="FILE INSTRUCTION | FILE... -i INSTRUCTION | [FILE...] --sketch SKETCH",
        show_default=False,
        help="The file to edit (- reads stdin and prints the edited file) and what to change, in words; "
        "with --instruction every argument is a file; with --sketch the files to merge it into (none: "
        "each file the sketch's blocks name).",
    ),
]
_InstructionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--instruction",
        "-i",
        show_default=False,
        help="What to change, for several files in one call: the model loads once and the diffs form one patch.",
    ),
]
_Sketch = Annotated[
    Optional[str],
    typer.Option(
        "--sketch",
        metavar="SKETCH",
        show_default=False,
        help="Apply another model's answer instead of an instruction (- reads it from stdin): a sketch with "
        "'# ... existing code ...' markers, SEARCH/REPLACE blocks, a diff that no longer applies, a whole file, or "
        "a chat answer with a fenced block per file. Merged without a model and checked; a part that fits no "
        "place or several is refused (exit 3). See docs/apply.md.",
    ),
]
_Check = Annotated[bool, typer.Option("--check", help="Exit 1 if the model would change the file (writes nothing).")]
_ShowProgram = Annotated[bool, typer.Option("--show-program", help="Print the edit program instead of the diff.")]
_Json = Annotated[bool, typer.Option("--json", help="Print program, diff and statistics as JSON.")]
_Temperature = Annotated[float, typer.Option("--temperature", min=0.0, help="Sampling temperature; 0 is greedy.")]
_TopP = Annotated[float, typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling (with --temperature > 0).")]
_Seed = Annotated[Optional[int], typer.Option("--seed", help="Seed for sampling.", show_default=False)]
_Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress or summary on stderr.")]


_Mode = Annotated[
    Mode,
    typer.Option(
        "--mode",
        help="program: the model writes an edit program of line copies and new text (Copy-as-Decode); "
        "rewrite: it retypes the whole file, one token per forward; lookup: the same with prompt lookup decoding; "
        "verify (default): rewrite's exact output, the file's own lines drafted and checked many tokens per forward. "
        "verify is the default because it measured fastest and loses nothing with off-the-shelf models "
        "(docs/measurements/modes.md).",
    ),
]


_Tries = Annotated[
    int,
    typer.Option(
        "--tries",
        min=1,
        help="Candidates to try until one passes its checks (syntax, a change, --test); try 1 is "
        "greedy, try 2 greedy with the failure in the prompt, later ones sampled.",
    ),
]
_Candidates = Annotated[
    Optional[int],
    typer.Option(
        "--candidates",
        "-k",
        min=1,
        max=8,
        metavar="K",
        show_default=False,
        help="Each try decodes K candidates side by side in one batched decode (the prompt read once): candidate 1 "
        "as the try would be alone, the others sampled. They are checked in the order of the model's own "
        "log-probability of each, and the first that passes wins (without --test: the most likely that parses "
        "and changes the file); the next try gets the feedback. Default: with --test on a local model 4 in "
        "try 1 and 8 in later tries (measured: docs/measurements/candidates.md), else 1. See --candidates-by.",
    ),
]
_CandidatesBy = Annotated[
    str,
    typer.Option(
        "--candidates-by",
        metavar="WAY",
        help="How a try's candidates after the first are made: branch (default; a fenced mode; an engine that "
        "gives log-probabilities): "
        "only when candidate 1 fails its checks, each from candidate 1 where the model hesitated most, "
        "taking its next choice there; sample: all K side by side from the start, sampled.",
    ),
]
_Test = Annotated[
    Optional[str],
    typer.Option(
        "--test",
        metavar="CMD",
        show_default=False,
        help="A shell command run with each candidate in place (tests, a linter, a type checker); exit 0 passes. "
        "Your file is put back afterwards, whatever happens. `auto`: the repository's own tests of the edited "
        "definition (test files named for the module, its doctests), in an approved repository only.",
    ),
]
_TestTimeout = Annotated[float, typer.Option("--test-timeout", min=0.1, help="Seconds --test may run per try.")]
_AllowNoChange = Annotated[
    bool,
    typer.Option("--allow-no-change", help="Accept a candidate that changes nothing (by default it is a failed try)."),
]
_Lines = Annotated[
    Optional[list[str]],
    typer.Option(
        "--lines",
        metavar="A-B",
        show_default=False,
        help="Only these lines may change (repeatable); the model retypes only them, the rest is copied as it is.",
    ),
]
_Scope = Annotated[
    Optional[list[str]],
    typer.Option(
        "--scope",
        metavar="NAME",
        show_default=False,
        help="Only this function, method or class may change (repeatable; Class.method works).",
    ),
]
_NoScope = Annotated[
    bool,
    typer.Option(
        "--no-scope", help="Let the model retype the whole file even when the instruction names lines or definitions."
    ),
]
_Where = Annotated[
    bool,
    typer.Option(
        "--where",
        help="A bug report that names a definition but no line: find the line first (--where-by) and "
        "retype from there up, wider after a failed try (off by default: measured: docs/measurements/where-step.md). Without it, "
        "where --test decides and try 1 failed, the definition is read so and the later tries also branch there.",
    ),
]
_WhereBy = Annotated[
    str,
    typer.Option(
        "--where-by",
        help="How --where finds the line: surprise (where the model, reading the code, least expected "
        "what is written), number or quote (the model names the line, or quotes it).",
    ),
]
_StdinFilename = Annotated[
    Optional[str],
    typer.Option(
        "--stdin-filename",
        metavar="NAME",
        show_default=False,
        help="With FILE -: the name piped text is edited under, so that its language, checks and scope are "
        "known (as black and ruff take it). Without it the language is read from the content (Python, JSON), "
        "and a whole-file edit of text whose language is unknown is refused.",
    ),
]
_Mechanical = Annotated[
    bool,
    typer.Option(
        "--mechanical/--no-mechanical",
        help="Make a named deletion or a rename of Python (\"Delete the function X\", \"Rename f to g\") without "
        "a model, exactly (on by default); --no-mechanical leaves it to the model.",
    ),
]
_MaxRetype = Annotated[
    Optional[str],
    typer.Option(
        "--max-retype",
        metavar="N",
        show_default=False,
        help="The most lines (and N × 13 tokens) a plan may make the model retype; past it cadedit refuses before the "
        "model loads and says what it would retype (default 150, or `max_retype` in settings; all: no bound). "
        "--no-scope, --lines and --scope allow their own scope. A whole-file retype past 150 lines gets one "
        "try unless --tries is given.",
    ),
]
_Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Per-phase timings and every check's output on stderr.")
]


def fix(
    ctx: typer.Context,
    args: _FixArgs = None,
    instruction_opt: _InstructionOpt = None,
    sketch: _Sketch = None,
    write: WriteOpt = False,
    check: _Check = False,
    show_program: _ShowProgram = False,
    as_json: _Json = False,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    dtype: DtypeOpt = "auto",
    temperature: _Temperature = 0.0,
    top_p: _TopP = 1.0,
    seed: _Seed = None,
    max_new_tokens: MaxNewOpt = None,
    quiet: _Quiet = False,
    mode: _Mode = DEFAULT_MODE,
    tries: _Tries = DEFAULT_TRIES,
    test: _Test = None,
    test_timeout: _TestTimeout = TEST_TIMEOUT,
    allow_no_change: _AllowNoChange = False,
    lines: _Lines = None,
    scope: _Scope = None,
    no_scope: _NoScope = False,
    verbose: _Verbose = False,
    context: ScopeContextOpt = str(CONTEXT_LINES),
    backend: BackendOpt = None,
    engine: EngineOpt = None,
    engine_timeout: EngineTimeoutOpt = None,
    candidates: _Candidates = None,
    candidates_by: _CandidatesBy = CANDIDATES_BY,
    where: _Where = False,
    where_by: _WhereBy = DEFAULT_WHERE_BY,
    stdin_filename: _StdinFilename = None,
    mechanical: _Mechanical = MECHANICAL,
    max_retype: _MaxRetype = None,
) -> None:
    """Edit FILE as INSTRUCTION says with a local model; print the unified diff, or write it with --write.

    Every candidate is checked before it is shown or written: the edited file must parse, must differ
    from the original (unless --allow-no-change or --check), and must pass --test CMD if given. A failed
    try feeds back what failed and tries again (--tries). When an instruction names lines ("line 95") or a
    definition of the file ("in parse_args"), only that region is retyped (see --lines, --scope, --no-scope).

    Diff paths are relative to the repository root inside git (`git apply` works from any folder;
    `patch -p1` from the root), else to the working directory.

    Exit codes: 0 an edit that passed its checks (or nothing to change with --check/--allow-no-change),
    1 an error (or --check found a change), 2 usage, 3 no try passed its checks (nothing written), 130 interrupted.

    Examples: cadedit fix app.py "Fix the off-by-one in paginate" | patch -p1

              cadedit fix app.py "Fix line 95" --test "pytest -q tests/test_app.py" --write

              cadedit fix app.py "Fix the bug in paginate" --test auto   (the repository's tests of it)

              cadedit fix a.py b.py -i "Use pathlib" | git apply    (one model load, one patch)

              cadedit fix app.py "Fix line 95" --engine http://gpu-box:8000/v1   (a shared engine decodes)
    """
    _refuse_clashes(check, write, no_scope, lines, scope, mode)
    plan = CheckPlan(allow_no_change=allow_no_change or check, test=test, test_timeout=test_timeout)
    if sketch is not None:  # another model's answer, merged without a model (cli/sketch.py)
        given = [f for f, on in (("-i", instruction_opt), ("--lines", lines), ("--scope", scope)) if on]
        given += ["--show-program"] if show_program else []
        if test == AUTO:  # found tests are looked up for an instruction's edited names, which a sketch has none of
            raise typer.BadParameter("not with --sketch; give the test command itself", param_hint="--test auto")
        shown_sketch = SketchShown(write, check, as_json, quiet, verbose)
        return fix_sketch(args or [], sketch, plan, shown_sketch, (_write_all, _test_together), given)
    files, instruction = _fix_arguments(args, instruction_opt, write)
    recover_files(files)
    options = EditOptions(
        model=model,
        threads=threads,
        dtype=dtype,
        sampling=Sampling(temperature, top_p, seed),
        max_new_tokens=max_new_tokens,
        mode=mode,
        context=context_lines(context),
        backend=backend,
        where_by=where_by,
    )
    for value, ways, hint in ((candidates_by, CANDIDATE_WAYS, "--candidates-by"), (where_by, WHERE_BY, "--where-by")):
        if value not in ways:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(ways)}", param_hint=hint)
    run = _Run(
        tries,
        _Scoping(tuple(lines or ()), tuple(scope or ()), not no_scope, where),
        candidates,
        engine,
        engine_timeout,
        quiet,
        verbose,
        candidates_by,
        stdin_filename,
        scripted(ctx),
        mechanical,
        _max_retype(max_retype),
        getattr(ctx.get_parameter_source("tries"), "name", "DEFAULT") != "DEFAULT",  # typer's own click enum
    )
    shown = _Shown(write, check, show_program, as_json)
    if len(files) > 1 and (as_json or show_program or test == AUTO):
        raise typer.BadParameter(
            "takes one file", param_hint="--test auto" if test == AUTO else "--json" if as_json else "--show-program"
        )
    try:
        if len(files) > 1:
            return _fix_many(files, instruction, options, plan, run, shown)
        _fix_one(files[0], instruction, options, plan, run, shown)
    except KeyboardInterrupt:
        # Writes defer Ctrl-C until their rename is done or undone (text.diff.signals_deferred), so an
        # interrupt that reaches here left the user's files as they were.
        say("interrupted; nothing written")
        raise


def _max_retype(value: str | None) -> str | None:
    """--max-retype checked as a usage error (settings.max_retype_value), the setting left to the plan."""
    try:
        max_retype_value(value, "--max-retype") if value is not None else None
    except ConfigError as exc:
        raise typer.BadParameter(f"{value!r} is not a number of lines >= 1 or all", param_hint="--max-retype") from exc
    return value


def _refuse_clashes(check: bool, write: bool, no_scope: bool, lines, scope, mode) -> None:
    """Options that contradict each other: usage errors before anything is read."""
    if check and write:
        raise typer.BadParameter("--check writes nothing; drop --write", param_hint="--check")
    if no_scope and (lines or scope):
        raise typer.BadParameter("--no-scope turns scoping off; drop --lines/--scope", param_hint="--no-scope")
    if mode == Mode.PROGRAM and (lines or scope):
        raise typer.BadParameter(
            "scoped edits retype a region; use --mode verify, rewrite or lookup", param_hint="--lines/--scope"
        )


@dataclass(frozen=True)
class _Shown:
    """What `cadedit fix` does with the answer: print the diff (default), write it, only check, print
    the program, or print JSON."""

    write: bool = False
    check: bool = False
    program: bool = False
    json: bool = False


def _fix_one(file: str, instruction: str, options, plan, run: _Run, shown: _Shown) -> None:
    """One file (or stdin): its tries, then the answer shown, written or reported as failed."""
    stdin = file == "-"
    if stdin and shown.write:
        raise typer.BadParameter("--write needs a file, not stdin", param_hint="--write")
    if stdin and plan.test:
        raise typer.BadParameter("--test runs against a file; give a file, not stdin", param_hint="--test")
    document = _stdin_document(run) if stdin else Document.read(file)
    planned, refused = _plan_or_refusal(document, instruction, options, run)  # before the load
    tested = auto_test.resolve(document, planned.scope if planned else None, plan, run.quiet or shown.json)
    plan = tested.plan
    outcome = _mechanical(document, instruction, plan, run)
    if outcome is None:
        if refused is not None:
            raise refused
        run = replace(run, tries=planned.tries(run.tries, run.tries_given))
        outcome = _edit_checked(document, instruction, planned, plan, run, _load(options, run))
    best = outcome.shown
    diff_text = (
        unified_diff(document.text, best.result.new_text, "-" if stdin else display_path(Path(file)))
        if (best is not None)
        else ""
    )
    if shown.json:
        data = {**outcome.to_json(diff_text), "found_test": tested.to_json()}
        write_stdout(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    if outcome.verified.answer is None:
        _no_passing_try(outcome, diff_text, run.quiet or shown.json)
    _show_answer(document, file, outcome.verified.answer, diff_text, plan, run, shown, tested.note)


def _stdin_document(run: _Run):
    """Piped text as a document named as --stdin-filename says (its language, checks and scope), else by
    the language its content shows (said on stderr); DocumentError for a whole-file edit of text whose
    language is unknown (no syntax or code check could catch a rewrite that deletes half of it)."""
    if run.stdin_name:
        return Document.read_stream(sys.stdin.buffer, run.stdin_name)
    document = Document.read_stream(sys.stdin.buffer)
    suffix = guess_suffix(document.text)
    if suffix:
        document = replace(document, path=document.path + suffix)
        if not run.quiet:
            say(
                f"{document.path}: piped text read as {language_of(document.path).title} by its content "
                "(--stdin-filename NAME names it)"
            )
    elif not run.scoping.lines:
        raise DocumentError(
            "<stdin>: the language of piped text is unknown, so a whole-file edit of it cannot be checked",
            hint="name it with --stdin-filename NAME (e.g. --stdin-filename app.js), or limit the edit with --lines",
        )
    return document


def _show_answer(document, file: str, answer, diff_text: str, plan, run: _Run, shown: _Shown, note: str) -> None:
    """The passing answer: a summary line, then the diff, program or text on stdout, or the file written."""
    result = answer.result
    if not run.quiet:
        added, removed = count_changes(diff_text)
        say(
            f"{document.path}: "
            + (f"+{added} -{removed} lines" if diff_text else "no change")
            + f" ({answer.summary()}, try {answer.number} of {run.tries})"
            + note
        )
    if shown.json:
        pass
    elif shown.program:
        write_stdout(format_program(result.program))
    elif file == "-":
        write_stdout(result.new_text)
    elif diff_text and not shown.write:
        show(diff_text)
    if shown.write and diff_text:
        write_atomic(reread(document) if plan.test else document, result.new_text)
        if not run.quiet:
            err.print(f"wrote {file}", highlight=False, markup=False)
    if shown.check and diff_text:
        raise typer.Exit(1)


@dataclass(frozen=True)
class _Scoping:
    lines: tuple[str, ...]
    names: tuple[str, ...]
    on: bool
    where: bool = False  # --where: the where-step for long definitions named without a line


@dataclass(frozen=True)
class _Run:
    """How `cadedit fix` makes its tries, the same for every file of one command."""

    tries: int
    scoping: _Scoping
    candidates: int | None = None  # None: tries.candidates_for's default (by whether a test decides)
    engine: str | None = None  # --engine: a shared engine's URL (None: the warm server or the model here)
    engine_timeout: float | None = None  # --engine-timeout
    quiet: bool = False
    verbose: bool = False
    candidates_by: str = CANDIDATES_BY  # --candidates-by (settings.CANDIDATE_WAYS)
    stdin_name: str | None = None  # --stdin-filename: the name piped text is edited under
    scripted: Scripted = Scripted()  # answers and branch points a test scripted; empty: the model's
    mechanical: bool = MECHANICAL  # --mechanical/--no-mechanical: renames and deletions without a model
    max_retype: str | None = None  # --max-retype as given (settings.choose_max_retype resolves it when planning)
    tries_given: bool = False  # --tries given: a whole-file retype past the bound keeps its tries


@dataclass(frozen=True)
class _Outcome:
    """One file's tries, the scope they were made in, and the load/prompt figures for --json."""

    document: object
    verified: object
    scope: object
    model: str
    load_seconds: float
    phases: tuple = ()
    dtype: str = ""
    first_forward: float | None = None  # seconds from process start to the first forward (None: a server's)
    backend: str = ""
    instruction: str = ""
    tested: bool = False  # a --test decided
    retype: dict | None = None  # what the plan retypes (scope.bound.Retype.to_json)

    @property
    def shown(self):
        """The try whose diff is shown: the answer; else with a test the candidate that broke nothing but
        the test and changed least (None when every one broke something), without one the furthest."""
        return self.verified.closest if self.tested else self.verified.answer or self.verified.best

    def to_json(self, diff_text: str) -> dict:

        shown = self.shown
        data = (
            result_json(shown.result, diff_text)
            if shown is not None
            else {"file": self.document.path, "model": self.model, "changed": False, "diff": ""}
        )
        data["passed"] = self.verified.answer is not None
        data["answer_try"] = self.verified.answer.number if self.verified.answer is not None else None
        data["answer_candidate"] = self.verified.answer.candidate if self.verified.answer is not None else None
        data["best_try"] = (
            shown.number if shown is not None else None
        )  # the diff shown: the answer, or the best failing
        data["scope"] = self.scope.as_json() if self.scope is not None else []
        data["retype"] = self.retype
        data["load_seconds"] = self.load_seconds
        data["load_phases"] = dict(self.phases)
        data["seconds_to_first_forward"] = self.first_forward
        data["dtype"] = self.dtype
        data["backend"] = self.backend
        data["where"] = self.verified.where.to_json() if self.verified.where is not None else None
        data["tries"] = [t.to_json() for t in self.verified.tries]
        return data


def _load(options, run: _Run, once_for: int = 1):
    """The editor (results.Editor): a shared engine's when one is named, the warm server's when one serves
    it, else the model loaded here (with its timings)."""
    quiet, verbose = run.quiet, run.verbose
    remote = engine_for(run.engine, run.engine_timeout, options.model)
    if remote is not None:
        if not quiet:
            say(f"{remote.name}: using the engine")
        return remote
    client = server_for(options, None if quiet else say)
    if client is not None:
        if not quiet:
            say(f"{client.name}: using the cadedit server (pid {client.pid}; `cadedit serve stop` to stop it)")
        return client

    hardware.progress = None if quiet else say  # the first run's probes and conversion say what they do
    if quiet:
        return LocalEditor(
            backend_model.load_model(options.model, options.device, options.dtype, options.threads, options.backend),
            run.scripted.choose_points,
        )
    with err.status("loading the model ..."):
        loaded = backend_model.load_model(
            options.model, options.device, options.dtype, options.threads, options.backend
        )
    say(
        f"{loaded.name} loaded in {loaded.load_seconds:.1f} s ({loaded.backend}, "
        f"{str(loaded.dtype).removeprefix('torch.')}, {loaded.threads} threads)"
        + (f" (once for {files_text(once_for)})" if once_for > 1 else "")
    )
    if verbose:
        say(f"  backend: {loaded.backend}, {loaded.backend_reason}")
        say(f"  dtype: {loaded.dtype_reason}")
        say("  load: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in loaded.phases))
    return LocalEditor(loaded, run.scripted.choose_points)


def _plan(document, instruction: str, options, run: _Run):
    """The scope and its options (scope.bound.Planned), refused past the retype bound (a ScopeError)."""
    scoping, bound = run.scoping, choose_max_retype(run.max_retype)
    planned = plan_bounded(
        document, instruction, options, bound, scoping.lines, scoping.names, scoping.on, scoping.where
    )
    if planned.note and not run.quiet:
        capped = planned.tries(run.tries, run.tries_given) < run.tries
        say(planned.note + ("; one try (a failed whole-file try is not rerun as it was; --tries N reruns it)" * capped))
    return planned


def _plan_or_refusal(document, instruction: str, options, run: _Run):
    """(the plan, None), or (None, the refusal) of a plan past the retype bound: kept until a rename or
    deletion made without a model has had its chance, as it retypes nothing."""
    try:
        return _plan(document, instruction, options, run), None
    except RetypeBoundError as exc:
        return None, exc


def _edit_checked(document, instruction: str, planned, plan, run: _Run, editor) -> _Outcome:
    """Try in the planned scope until a candidate passes its checks; one line per try on stderr."""
    quiet, options, scope = run.quiet, planned.options, planned.scope
    if scope is not None and not quiet:
        say(f"{document.path}: {scope.describe()}")
    progress = _Progress(document.path, quiet)
    on_try, on_where = _reporters(document, options, run, progress)

    def on_test(number: int) -> None:
        progress.update_text(f"{document.path}: try {number}: running the test ...")

    with progress:
        if options.locate:
            progress.update_text(f"{document.path}: asking the model which line to change ...")
        verified = edit_verified(
            document,
            instruction,
            options,
            plan,
            Attempts(run.tries, run.candidates, run.candidates_by),
            editor=editor,
            picks=run.scripted.picks,
            report=Reporters(on_try, progress.update, on_test, on_where),
        )
    loaded = editor.loaded or editor  # the local model's own figures (phases, dtype, first forward), else the client's
    first = getattr(loaded, "first_forward", lambda: None)()
    if run.verbose and first is not None:
        say(f"  first forward {first:.2f} s after the process started")
    return _Outcome(
        document,
        verified,
        scope,
        loaded.name,
        loaded.load_seconds,
        getattr(loaded, "phases", ()),
        str(getattr(loaded, "dtype", "")).removeprefix("torch."),
        first,
        getattr(loaded, "backend", ""),
        instruction,
        bool(plan.test),
        planned.retype.to_json(),
    )


def _mechanical(document, instruction: str, plan, run: _Run) -> _Outcome | None:
    """A named deletion or rename made without a model (cadedit.tries.mechanical), its one try reported as
    a model's is; None where the model edits (not such an edit, --no-mechanical, or not safely: said why)."""
    made = mechanical_edit(document, instruction, plan) if run.mechanical else None
    if made is None or made.verified is None:
        if made is not None and not run.quiet:
            say(f"{document.path}: not done without a model ({made.why}); the model edits instead")
        return None
    attempt = made.verified.tries[0]
    if not run.quiet:
        say(f"{document.path}: {made.note}, without a model: {attempt.summary()}")
    return _Outcome(document, made.verified, None, "", 0.0, instruction=instruction, tested=bool(plan.test))


def _reporters(document, options, run: _Run, progress):
    """on_try and on_where: one line on stderr per try (and for the where-step), more with --verbose."""
    quiet, verbose, tries = run.quiet, run.verbose, run.tries
    previous: dict = {}

    def on_try(attempt) -> None:
        progress.stop()
        if quiet:
            return
        stats = attempt.result.stats if attempt.result else None
        numbers = f" ({progress.summary(stats)})" if stats else ""
        widened = ""
        if attempt.regions != previous.get("regions", options.regions):  # the levels only grow
            widened = " [scope widened to " + ", ".join(span_text(a, b) for a, b in attempt.regions) + "]"
        previous["regions"] = attempt.regions
        which = f", candidate {attempt.candidate} of {attempt.of}" if attempt.candidate else ""
        say(f"{document.path}: try {attempt.number} of {tries}{which}{widened}: {attempt.summary()}{numbers}")
        if verbose and stats:
            say(
                f"  decode: prompt {stats.tokens_prompt} tokens fed ({stats.tokens_reused} reused) in "
                f"{stats.seconds_prefill:.2f} s, steps {stats.seconds_steps:.2f} s, pick {stats.seconds_pick:.2f} s, "
                + (f"{stats.forward_passes} forwards in " if stats.forward_passes else "total ")
                + f"{stats.seconds_total:.2f} s"
            )
        if verbose:
            for c in attempt.checks:
                if c.output_tail:
                    say(f"  {c.name} output:\n{c.output_tail}")

    def on_where(where) -> None:
        if not where.later:  # try 1 retypes the line named; a later reading keeps the tries' scopes
            previous["regions"] = where.levels[0]
        progress.stop()
        if not quiet:
            say(f"{document.path}: {where.describe()}")
            if verbose and not where.later:
                say(
                    f"  where: prompt {where.tokens_prompt} tokens fed, answer {where.answer!r}; the tries' scopes: "
                    + "; ".join(", ".join(f"{a}-{b}" for a, b in level) for level in where.levels)
                )

    return on_try, on_where


def _no_passing_try(outcome: _Outcome, diff_text: str, quiet: bool) -> None:
    """No candidate passed: nothing is written; the best one's diff goes to stderr, marked as failing."""
    shown, best = outcome.shown, outcome.verified.best
    n = outcome.verified.made
    if shown is not None and diff_text and not quiet:
        which = (
            "the candidate that changed least and broke nothing but the test"
            if outcome.tested
            else "the best candidate"
        )
        say(f"{which} (try {shown.number} of {n}) FAILED its checks; its diff, not applied:")
        err.print(diff_text, highlight=False, markup=False, soft_wrap=True, end="")
    elif outcome.tested and best is not None and not quiet:
        say("every candidate broke something besides the test; none is shown")
    why = best.summary() if best is not None else outcome.verified.tries[-1].summary()
    raise CheckFailedError(
        f"{outcome.document.path}: no try of {n} passed its checks ({why}); nothing was written",
        hint=outcome.verified.hint_for(outcome.instruction),
    )


def _fix_arguments(args: list[str], instruction: str | None, write: bool) -> tuple[list[str], str]:
    """`FILE INSTRUCTION`, or `FILE... --instruction INSTRUCTION`: (files, instruction); without
    --write, files a printed diff could not name are refused here, before any model work."""
    files, instruction = _split_fix_arguments(args, instruction)
    if not instruction.strip():
        raise typer.BadParameter("the instruction is empty: say what to change", param_hint="INSTRUCTION")
    _text_instruction(instruction)
    if not write:
        for file in files if files != ["-"] else ():
            check_patch_path(file)
    return files, instruction


def _split_fix_arguments(args: list[str] | None, instruction: str | None) -> tuple[list[str], str]:
    args = args or []
    if instruction is None:
        if len(args) != 2:
            raise typer.BadParameter(
                'give FILE "INSTRUCTION", or several files with -i "INSTRUCTION"', param_hint="FILE INSTRUCTION"
            )
        # `cadedit fix a.py b.py` without -i: surely two files. os.path: no OSError on a 300-byte instruction
        if os.path.isfile(args[1]):
            raise typer.BadParameter(
                f'{args[1]} is a file; for several files give the instruction with -i "..."', param_hint="INSTRUCTION"
            )
        _text_names(args[:1])
        return args[:1], args[1]
    if not args:
        raise typer.BadParameter("no FILE given", param_hint="FILE")
    _text_names(args)
    if "-" in args and len(args) > 1:
        raise typer.BadParameter("- (stdin) edits one input; give files or -, not both", param_hint="FILE")
    return args, instruction


def _text_instruction(instruction: str) -> None:
    """An instruction with bytes that are not UTF-8 (the shell passed them through; Python keeps them as
    lone surrogates) cannot be put in the prompt: a one-line error saying where the first one is."""
    bad = next((k for k, ch in enumerate(instruction) if 0xD800 <= ord(ch) <= 0xDFFF), None)
    if bad is not None:
        ch = ord(instruction[bad])
        what = f"the byte 0x{ch - 0xDC00:02x}" if 0xDC80 <= ch <= 0xDCFF else f"U+{ch:04X}"
        raise DocumentError(
            f"INSTRUCTION: not UTF-8 text ({what} at character {bad + 1})",
            hint="give the instruction as UTF-8 text (check the terminal's encoding)",
        )


def _text_names(files: list[str]) -> None:
    """The prompt names the file: a name that is not UTF-8 cannot be put in front of the model."""
    for name in files:
        if printable(name) != name:
            raise DocumentError(
                f"{printable(name)}: the file name is not UTF-8; the model's prompt must name the file",
                hint="rename it (e.g. with convmv), or use `cadedit fix - ...` with the file on stdin",
            )


def _fix_many(files: list[str], instruction: str, options, plan, run: _Run, shown: _Shown) -> None:
    """Several files: every file read first, the model loaded once, one patch; written only if all edits pass.

    Each file's candidates are checked on their own for syntax and change; --test then runs once
    with every file's answer in place together (what --write would write), since an edit across
    files may pass only as a whole."""
    quiet, write, check = run.quiet, shown.write, shown.check
    documents = [Document.read(f) for f in dict.fromkeys(files)]
    plans = {d.path: _plan_or_refusal(d, instruction, options, run) for d in documents}  # each file on its own
    done = {d.path: _mechanical(d, instruction, replace(plan, test=None), run) for d in documents}
    for document in documents:
        refused = plans[document.path][1]
        if done[document.path] is None and refused is not None:
            raise refused
    left = [d for d in documents if done[d.path] is None]
    editor = _load(options, replace(run, verbose=False), once_for=len(left)) if left else None
    edited, failed = [], []
    for document in documents:
        planned = plans[document.path][0]
        outcome = done[document.path] or _edit_checked(
            document,
            instruction,
            planned,
            replace(plan, test=None),
            replace(run, verbose=False, tries=planned.tries(run.tries, run.tries_given)),
            editor,
        )
        answer = outcome.verified.answer
        if answer is None:
            failed.append(document.path)
            continue
        diff_text = unified_diff(document.text, answer.result.new_text, display_path(Path(document.path)))
        if not quiet:
            added, removed = count_changes(diff_text)
            say(f"{document.path}: " + (f"+{added} -{removed} lines" if diff_text else "no change"))
        edited.append((document, answer.result.new_text, diff_text))
    if failed:
        raise CheckFailedError(
            f"no try passed its checks for {', '.join(failed)}; nothing was written",
            hint="raise --tries, or edit those files one at a time",
        )
    if plan.test:
        _test_together(edited, plan, quiet)
    patch = "".join(diff_text for _, _, diff_text in edited)
    if patch and not write:
        show(patch)
    if write:
        _write_all(
            [
                (reread(document) if plan.test else document, new_text)
                for document, new_text, diff_text in edited
                if diff_text
            ],
            quiet,
        )
    if check and patch:
        raise typer.Exit(1)


def _test_together(edited: list, plan, quiet: bool) -> None:
    """Run --test once with every changed file's answer in place (all restored afterwards)."""
    with contextlib.ExitStack() as stack:
        placements = []
        for document, new_text, diff_text in edited:
            if diff_text:
                candidate = Candidate.read(document.path, new_text.encode("utf-8"), expected=document.to_bytes())
                placements.append(stack.enter_context(candidate_in_place(candidate)))
        check = run_command(
            plan.test,
            plan.test_timeout,
            plan.cwd,
            on_start=lambda pgid: [placement.watch(pgid) for placement in placements],
        )
    if not quiet:
        say(f"--test with every file's answer in place: {'passed' if check.passed else 'failed: ' + check.detail}")
    if not check.passed:
        raise CheckFailedError(
            f"the edits of {len(edited)} files fail --test together ({check.detail}); nothing was written",
            hint="run with --verbose for the test output, or edit one file at a time",
        )


def _write_all(changes: list, quiet: bool) -> None:
    """Write every (document, new text) or none: each file is checked before the first write, and
    if a write still fails the files already written get their old bytes back."""
    for document, _ in changes:
        check_unchanged(document)
        check_writable(document)
    written: list = []
    with signals_deferred() as pending:  # Ctrl-C between two files rolls back too, never leaves half
        try:
            for document, new_text in changes:
                if pending:
                    raise_for_signal(pending[0])
                write_atomic(document, new_text)
                written.append(document)
        except BaseException as exc:
            pending.clear()  # the signal that stopped the writes must not stop the rollback too
            _roll_back(written, exc)
            raise
    for document, _ in changes if not quiet else ():
        say(f"wrote {document.path}")


def _roll_back(written: list, exc: BaseException) -> None:
    """Give the files already written their old bytes back; say in the error's hint how that went."""
    failed = []
    for document in reversed(written):
        try:
            write_atomic(Document.read(document.path), document.text)
        except CadeditError:
            failed.append(document.path)
    if isinstance(exc, CadeditError):
        undone = f"left edited: {', '.join(failed)}" if failed else "no file was changed"
        exc.hint = (exc.hint + "\n" if exc.hint else "") + undone


class _Progress:
    """A rich status line on stderr while the model works (nothing when quiet or not a terminal)."""

    def __init__(self, path: str, quiet: bool):
        self.path, self.quiet, self.status = path, quiet, None

    def __enter__(self):
        if not self.quiet:
            self.status = err.status(escape_markup(f"{self.path}: loading the model ..."))
            self.status.__enter__()
        return self

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.__exit__(*exc)

    def loaded(self, loaded) -> None:
        self.update_text(f"{self.path}: {loaded.name} loaded in {loaded.load_seconds:.1f} s; reading the file ...")

    def update_text(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)

    def stop(self) -> None:
        """Clear the status line (a try's summary line follows); the next update shows it again."""
        if self.status is not None:
            self.status.stop()

    def update(self, stats, step) -> None:
        if self.status is not None:
            self.status.start()
            self.status.update(f"{self.path}: {self.summary(stats)}")

    @staticmethod
    def summary(stats) -> str:
        """The decode's figures; an engine counts no forwards here (its own are its business)."""
        forwards = f"{stats.forward_passes} forward passes, " if stats.forward_passes else ""
        return (
            f"{stats.tokens_copied} tokens copied, {stats.tokens_sampled - stats.drafts_kept} generated, "
            f"{forwards}{stats.seconds_total or stats.seconds_forwards:.1f} s"
        )
