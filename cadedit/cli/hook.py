"""`cadedit hook`: the git pre-commit hook (install, uninstall, run), on the staged files the rules of
.cadedit.toml match. Wiring only: the staging, rules and writes are cadedit.git.repo's, the edits
cadedit.tries.loop' as `cadedit fix` makes them; cli/root.py registers `app` as the `hook` sub-command and
formats the CadeditErrors raised here. cli/root.py imports this module only when `cadedit hook` runs;
the model side only once a staged file matches a rule.
"""

from __future__ import annotations

import stat as stat_module
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from cadedit.git import repo as R  # a module: tests put a crash in R.open_repo
from cadedit.scope.plan import plan_edit
from cadedit.text.diff import count_changes, show

from cadedit.cli.common import DtypeOpt, engine_for, EngineOpt, EngineTimeoutOpt, files_text, MaxNewOpt, ModelOpt
from cadedit.cli.common import err, escape_markup, say, Scripted, scripted, server_for, ThreadsOpt
from cadedit.errors import CadeditError
from cadedit.options import DEFAULT_MODE, Mode
from cadedit.text.document import Document
from cadedit.text.visible import visible
from cadedit.errors import ApplyError, CheckFailedError, ModelError
from cadedit.options import EditOptions
from cadedit.settings import choose_model, DEFAULT_TRIES
from cadedit.tries.found_tests import AUTO, edited_names, find_tests

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="The git pre-commit hook: the \\[\\[rules]] of .cadedit.toml (or pyproject.toml \\[tool.cadedit]) "
    "on staged files.",
)
_HookFiles = Annotated[
    Optional[list[Path]],
    typer.Argument(
        metavar="FILES",
        show_default=False,
        readable=False,  # the index is read, not these files
        help="Files to check (their staged content; pre-commit passes these). Default: every staged change.",
    ),
]
_HookFix = Annotated[
    bool,
    typer.Option(
        "--fix", help="Write the edits to the working tree (exit 1 so you review and re-stage); default: check only."
    ),
]


@app.command("install")
def hook_install(
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a pre-commit hook cadedit did not write (kept as pre-commit.cadedit-backup).",
        ),
    ] = False,
) -> None:
    """Write .git/hooks/pre-commit so that every `git commit` runs `cadedit hook run` first."""

    hook, backup = R.install_hook(R.open_repo(), force)
    if backup is not None:
        say(f"moved the previous hook to {backup}")
    say(
        f"installed {hook}; rules come from .cadedit.toml once you approve it with `cadedit trust` "
        "(see `cadedit hook run --help`)"
    )


@app.command("uninstall")
def hook_uninstall() -> None:
    """Remove the pre-commit hook that `cadedit hook install` wrote (never another one)."""

    hook, restored = R.uninstall_hook(R.open_repo())
    say(f"removed {hook}" + (f"; restored the previous hook from {restored.name}" if restored else ""))


@app.command("run")
def hook_run(
    ctx: typer.Context,
    files: _HookFiles = None,
    fix: _HookFix = False,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    dtype: DtypeOpt = "auto",
    max_new_tokens: MaxNewOpt = None,
    engine: EngineOpt = None,
    engine_timeout: EngineTimeoutOpt = None,
) -> None:
    """Apply each rule's instruction to the staged files it matches; print the diffs, exit 1 if any would change.

    --fix writes the edits to the working tree instead. The model loads once, only if a staged file matches a rule.

    Settings: .cadedit.toml at the repository root (or pyproject.toml \\[tool.cadedit]), used once you approve
    them with `cadedit trust` (a rule's test is a command run on your machine), for example:

    model = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    \\[\\[rules]]
    files = "*.py"
    instruction = "Add a docstring to every public function that lacks one."
    test = "python -m pytest -q"

    model and test are optional. Every key: docs/hook.md#the-rules.
    """

    start = time.perf_counter()
    try:
        repository = R.open_repo()
        root = Path(repository.working_tree_dir)
        settings = R.load_settings(root)
        targets = R.plan(repository, settings, [R.repo_relative(root, str(f)) for f in files] if files else None)
        if not targets:
            say("cadedit hook: no staged file matches a rule; nothing to do")
            return
        remote = engine_for(engine, engine_timeout, model, root)
        edit = _hook_editor(
            model,
            root,
            len(targets),
            threads,
            dtype,
            max_new_tokens,
            settings,
            remote,
            scripted(ctx),
        )
        counts = _hook_report(R.run(repository, targets, edit, fix))
    except CadeditError as exc:
        exc.hint = (exc.hint + "\n" if exc.hint else "") + "to commit once without the hook: git commit --no-verify"
        raise
    summary = ", ".join(f"{n} {status.value}" for status, n in counts.items() if n)
    say(f"cadedit hook: {files_text(len(targets))}: {summary} ({time.perf_counter() - start:.1f} s in all)")
    if counts[R.Status.WOULD_CHANGE]:
        say("to write these changes: cadedit hook run --fix")
    if counts[R.Status.FIXED]:
        say("review the changes, `git add` them and commit again")
    if any(n for status, n in counts.items() if status is not R.Status.UNCHANGED):
        raise typer.Exit(1)


def _hook_editor(
    model: str | None,
    root: Path,
    n_files: int,
    threads,
    dtype: str,
    max_new_tokens,
    settings=None,
    remote=None,
    script: Scripted = Scripted(),
):
    """Load the model once (or use the shared engine `remote`); an edit(document, rule) -> new text that
    reuses it for every file (script: the answers and branch points a test scripted, cli.common.Scripted).

    Each candidate is checked as `cadedit fix` checks it (syntax, the rule's `test` with the
    candidate in the working tree, restored afterwards); no change is a valid answer here."""
    # Imported here, not at the top: they import numpy, and a commit whose staged files match no rule (most
    # commits) never gets here; `cadedit hook run` then exits as fast as `cadedit --help`.
    from cadedit.backends import hardware, model as backend_model  # lazy: numpy, see above
    from cadedit.decode.pipeline import LocalEditor  # lazy: numpy, see above
    from cadedit.tries.loop import Attempts, CheckPlan, edit_verified  # lazy: numpy, see above

    mode = Mode(settings.mode) if settings is not None and settings.mode else DEFAULT_MODE
    tries = settings.tries if settings is not None and settings.tries else DEFAULT_TRIES
    asked = settings.candidates if settings is not None and settings.candidates else None
    options = EditOptions(
        model=choose_model(model, root), threads=threads, dtype=dtype, max_new_tokens=max_new_tokens, mode=mode
    )
    editor = remote or server_for(options, lambda message: say(f"cadedit hook: {message}"))
    if remote is not None:
        say(f"cadedit hook: {remote.name}: using the engine")
    elif editor is not None:
        say(f"cadedit hook: {editor.name}: using the cadedit server (pid {editor.pid})")
    else:
        hardware.progress = say  # the first run's probes and conversion say what they do
        try:
            with err.status(escape_markup(f"cadedit hook: loading {options.model} ...")):
                loaded = backend_model.load_model(
                    options.model, options.device, options.dtype, options.threads, options.backend
                )
        except ModelError as exc:
            exc.hint = (exc.hint or "") + ', or set model = "..." in .cadedit.toml'
            raise
        say(f"cadedit hook: {loaded.name} loaded in {loaded.load_seconds:.1f} s (once for {files_text(n_files)})")
        editor = LocalEditor(loaded, script.choose_points)

    def edit(document, rule, path: str) -> str:
        on_disk = Document(document.lines, str(root / document.path))  # named as the prompt shows it
        target = root / path  # the working-tree file the test puts candidates into: its exact name
        scoped, scope = plan_edit(on_disk, rule.instruction, options)  # as `cadedit fix` scopes an edit
        test = _rule_test(rule.test, on_disk, scope, target, root, R.shown(path))
        if test:
            _testable(root, target, R.shown(path))
        plan = CheckPlan(allow_no_change=True, test=test, cwd=root, expect_document_on_disk=False, target=target)
        verified = edit_verified(
            on_disk, rule.instruction, scoped, plan, Attempts(tries, asked), editor=editor, picks=script.picks
        )
        if verified.answer is None:
            best = verified.best
            raise CheckFailedError(
                f"no try of {verified.made} passed its checks" + (f" ({best.summary()})" if best else "")
            )
        return verified.answer.result.new_text

    return edit


def _rule_test(test: str | None, document, scope, target: Path, root: Path, shown: str) -> str | None:
    """A rule's test command; `auto`: the found tests of the edited definition (tries.found_tests), run
    because the rules themselves are approved, or none when the repository has none for it."""
    if test != AUTO:
        return test
    names = edited_names(document, scope.ranges if scope is not None else ())
    found = find_tests(target, document.text, names, root)
    say(f"cadedit hook: {shown}: test auto: " + (visible(found.command) if found else "none found"))
    return found.command if found else None


def _testable(root: Path, target: Path, shown: str) -> None:
    """A rule's test puts candidates into the working-tree file: only a regular file inside the work
    tree, never through a link and never a FIFO (opening one would block the hook)."""

    try:
        mode = target.lstat().st_mode
    except OSError as exc:
        raise ApplyError(f"{shown}: cannot test it in the working tree ({exc.strerror or exc})") from None
    why = R._outside_work_tree(root, target)
    if why is None and not stat_module.S_ISREG(mode):
        why = "is not a regular file in the working tree"
    if why is not None:
        raise ApplyError(f"{shown}: {why}; its rule's test was not run", hint="restore the file in the working tree")


def _hook_report(outcomes) -> dict:
    """Print each file's outcome as it comes (diffs on stdout); count them by status."""

    counts = {status: 0 for status in R.Status}
    for outcome in outcomes:
        counts[outcome.status] += 1
        if outcome.diff and outcome.status is not R.Status.FIXED:
            show(outcome.diff)
        added, removed = count_changes(outcome.diff)
        change = f" (+{added} -{removed})" if outcome.diff else ""
        note = f": {outcome.message}" if outcome.message else ""
        say(f"cadedit hook: {R.shown(outcome.path)}: {outcome.status.value}{change}{note}")
    return counts
