"""The cadedit command line: the root app, its commands by name, and errors to exit codes; nothing else.

Data (programs, diffs) goes to stdout; messages go to a rich Console on stderr. CadeditError
becomes a one-line "error: ..." (plus "hint: ...") and its exit code in one place,
_Group.invoke; usage errors exit 2, Ctrl-C 130, and a traceback is shown only with --debug
or CADEDIT_DEBUG=1. Each command lives in its own module (cli/program.py, cli/fix.py, cli/recover.py,
cli/hook.py, cli/serve.py, bench/cli.py), imported only when that command runs or its --help is asked
(common.LazyGroup), so `cadedit --help` imports neither numpy nor torch and starts fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType
from typing import Annotated

import typer

from cadedit import __version__
from cadedit.cli.common import Lazy, LazyGroup, err, report_error, say
from cadedit.errors import CadeditError
from cadedit.text.visible import visible
from cadedit.settings import FILE_KEYS, USER_ONLY_KEYS, SettingsFile, approve, forget, outside_repository, shown_key


def _debug(ctx: typer.Context) -> bool:
    return (
        bool(ctx.params.get("debug"))
        or ctx.meta.get("cadedit.debug", False)
        or os.environ.get("CADEDIT_DEBUG", "") not in ("", "0")
    )


# Each command's module and the first paragraph of its help (tests/test_cli.py checks it against the
# command's own): `cadedit --help` lists them in this order without importing the modules.
COMMANDS = MappingProxyType(
    {
        "oracle": Lazy(
            "cadedit.cli.program",
            "oracle",
            "Print the oracle edit program that turns BEFORE into AFTER (copies of kept lines, gens of new text).",
        ),
        "apply": Lazy(
            "cadedit.cli.program",
            "apply",
            "Resolve an edit PROGRAM against FILE; print the unified diff, or write the result with --write.",
        ),
        "fix": Lazy(
            "cadedit.cli.fix",
            "fix",
            "Edit FILE as INSTRUCTION says with a local model; print the unified diff, or write it with --write.",
        ),
        "recover": Lazy(
            "cadedit.cli.recover",
            "recover",
            "Give back the originals that killed cadedit runs left behind "
            "(a candidate still in a file while its\ntest ran); each cadedit run does this for its own "
            "files. Prints one line per journal entry; exit 0,\nor 1 when an entry could not be given "
            "back (it stays for the next `cadedit recover`).",
        ),
        "trust": Lazy(
            "cadedit.cli.root",
            "trust",
            "Approve a repository's cadedit settings (.cadedit.toml, "
            "pyproject.toml \\[tool.cadedit]) as they read now.",
        ),
        "hook": Lazy(
            "cadedit.cli.hook",
            "app",
            "The git pre-commit hook: the \\[\\[rules]] of .cadedit.toml (or "
            "pyproject.toml \\[tool.cadedit]) on staged files.",
        ),
        "serve": Lazy(
            "cadedit.cli.serve",
            "app",
            "A local server that keeps the model loaded (and its last prompt cached) between edits.",
        ),
        "bench": Lazy(
            "cadedit.bench.cli",
            "app",
            "Reproduce the paper's measurements on any corpus, tokenizer, model and machine.",
        ),
    }
)


class _Group(LazyGroup):
    """Runs the chosen command; the single place where exceptions become messages and exit codes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, commands_by_name=COMMANDS, **kwargs)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        """--debug is accepted anywhere before `--` (`cadedit fix ... --debug`), as the hint says."""
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            ctx.meta["cadedit.debug"] = True
            args = [a for a in args[:end] if a != "--debug"] + args[end:]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: typer.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort, KeyboardInterrupt, BrokenPipeError):
            raise  # usage errors (exit 2), explicit exits, Ctrl-C (130), a closed stdout: typer reports these
        except Exception as exc:
            if _debug(ctx):
                err.print_exception()
            if isinstance(exc, CadeditError):
                report_error(exc.message, exc.hint)
                raise typer.Exit(exc.exit_code) from None
            report_error(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback")
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    name="cadedit",
    help="Edit code with a local model without re-typing what the edit keeps (Copy-as-Decode).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cadedit {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks (also CADEDIT_DEBUG=1).")] = False,
) -> None:
    """Edit code with a local model without re-typing what the edit keeps (Copy-as-Decode).

    Exit codes: 0 success (also "no change"), 1 a cadedit error, 2 usage error, 130 interrupted.
    """


def trust(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="FOLDER",
            show_default=False,
            help="The repository (or folder) whose settings to approve; default: here.",
        ),
    ] = Path("."),
    remove: Annotated[bool, typer.Option("--remove", help="Withdraw the approval instead.")] = False,
) -> None:
    """Approve a repository's cadedit settings (.cadedit.toml, pyproject.toml \\[tool.cadedit]) as they read now.

    A repository's settings are ignored until you approve them once: they choose the model and the hook's rules, and a rule's `test` is a command run on your machine. An edit to them needs a new approval.

    A repository never chooses the engine (where your code and API key go): that comes from --engine, CADEDIT_ENGINE or your own ~/.config/cadedit/config.toml (docs/trust.md).

    Example: cadedit trust   (in a repository whose .cadedit.toml you have read)
    """
    if remove:
        gone = forget(folder)
        for path in gone:
            say(f"cadedit: {visible(str(path))}: approval withdrawn")
        if not gone:
            say(f"cadedit: nothing approved in {visible(str(folder.resolve()))}")
        return
    for found in approve(folder):
        say(f"cadedit: approved {visible(str(found.path))} ({found.source}), which sets:")
        for key, value in found.table.items():
            items = value if key == "rules" and isinstance(value, list) else [value]
            for item in items:
                shown = json.dumps(item, ensure_ascii=False, default=str)
                say(f"    {shown_key(key)} = {shown}{_note(found, key, item)}")


def _note(found: SettingsFile, key: str, value: object) -> str:
    """What `cadedit trust` says beside a setting it lists: that cadedit ignores it, or that a model
    lies outside the repository (its path resolved, links included, against the repository root)."""
    if key in USER_ONLY_KEYS:
        return "  (ignored: only you choose the engine)"
    if key not in FILE_KEYS:
        return "  (not a cadedit setting)"
    if key == "model" and isinstance(value, str) and outside_repository(found.path.parent, value):
        return "  (a model outside this repository: check that it is one of yours)"
    return ""


def main() -> None:
    """Console-script entry point (`cadedit`, `python -m cadedit`)."""
    app(prog_name="cadedit")
