"""What every command line of cadedit shares (cli/*.py, bench/): the stderr console and its one-line
messages, the model options, --context of scoped edits, the warm server lookup, and LazyGroup, the
registry that imports a command's module only when it runs. A leaf: it imports no command module."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from types import MappingProxyType
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from typer._click.exceptions import UsageError  # typer's own copy of click, whose errors its commands raise

from cadedit.settings import BACKENDS, DEFAULT_MODEL, DTYPES, ENGINE_TIMEOUT
from cadedit.settings import choose_engine, choose_engine_timeout
from cadedit.text.visible import visible


class _Shown(Console):
    """rich's Console, whose print shows every str it is given through text.visible first: a message,
    hint, warning or failing diff on stderr holds repository, model and engine text, and none of it may
    move the terminal's cursor or erase what was printed (docs/trust.md). rich's own colours come after."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(visible(o, lines=True) if isinstance(o, str) else o for o in objects), **kwargs)


# emoji=False: rich would turn `:x:` in a diff or `ollama:m:latest` in a message into emoji (d[:x:] -> d[❌]);
# user text is printed without markup (say, markup=False) or escaped (report_error, warn, status).
err = _Shown(stderr=True, soft_wrap=True, highlight=False, emoji=False)


def _flag_type_shown(option: typer.core.TyperOption, ctx) -> str | None:
    """The type column of --help: none for a flag (--write takes no value, so `<bool>` beside it reads as
    if it wanted one), typer's label for every option that takes a value."""
    return None if option.is_flag and option.metavar is None else _typer_type_shown(option, ctx)


# typer labels every option with its type, flags included; this is the one place that changes it.
_typer_type_shown = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type_shown


@dataclass(frozen=True)
class Scripted:
    """Answers scripted for the model, given to the app as its context object (`app(obj=Scripted(...))`,
    CliRunner().invoke(app, args, obj=...)): tests spell known answers through the real decode loop.
    Nothing a user types sets it; without it the model answers."""

    picks: Callable[[int], Any] | None = None  # tries.edit_verified's picks (fix, the hook, bench tries)
    # `cadedit bench e2e`'s sampler factory for its mode methods (bench.e2e.methods' make_sampler,
    # a pipeline.SamplerFactory); None: the model samples
    make_sampler: Callable[..., Any] | None = None
    # where branches start, in place of decode.pipeline.branch_points (pipeline.LocalEditor's choose_points,
    # every command that edits with the model here); None: branch_points
    choose_points: Callable[..., list] | None = None


def scripted(ctx: typer.Context) -> Scripted:
    """What a caller scripted on the app's context (Scripted), else an empty one: the model answers."""
    return ctx.find_object(Scripted) or Scripted()


def sub_app(name: str, help: str, cls: type[typer.core.TyperGroup] | None = None) -> typer.Typer:
    """A command group (`cadedit serve`, `cadedit bench`) as cli/root.py mounts it: no completion, no
    pretty tracebacks (cli/root.py's _Group turns errors into one line); cls: a LazyGroup with its registry."""
    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        **({"cls": cls} if cls is not None else {}),
    )


@dataclass(frozen=True)
class Lazy:
    """A command a LazyGroup lists without importing it: the module that defines it, the name there (a
    command function, or a typer.Typer for a command group) and the first paragraph of its help."""

    module: str
    attribute: str
    help: str


class LazyGroup(typer.core.TyperGroup):
    """A command group that knows each command's name, one-line help and module (`commands_by_name`),
    and imports that module only when the command runs or its own --help is asked (click's lazy
    loading of subcommands): `cadedit --help` and `cadedit bench --help` list every command without
    importing numpy or torch, and each command's module imports what it needs at module level.
    typer makes the group from its class with typer's own arguments, so each subclass passes its
    registry on: `super().__init__(*args, commands_by_name=COMMANDS, **kwargs)` (kept read-only)."""

    def __init__(self, *args: Any, commands_by_name: Mapping[str, Lazy], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.commands_by_name: Mapping[str, Lazy] = MappingProxyType(dict(commands_by_name))
        self._listing = False  # while this group's own --help lists its commands: stand-ins, nothing imported

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*self.commands_by_name, *(name for name in self.commands if name not in self.commands_by_name)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> typer.core.TyperCommand | typer.core.TyperGroup | None:
        lazy = self.commands_by_name.get(cmd_name)
        if lazy is None or cmd_name in self.commands:
            return self.commands.get(cmd_name)
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=lazy.help)
        self.commands[cmd_name] = command_of(getattr(importlib.import_module(lazy.module), lazy.attribute), cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx: typer.Context, formatter) -> None:
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        """As typer's, with the suggestions for a mistyped name drawn from every command, loaded or not."""
        try:
            return self._click_resolve_command(ctx, args)
        except UsageError as exc:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise


def command_of(target: Callable[..., Any] | typer.Typer, name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """The click command typer makes of a command function (as `@app.command(name)` would) or of a Typer."""
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)  # a group even when all its commands are lazy (bench/cli.py)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


def report_error(message: str, hint: str | None = None) -> None:
    """The one-line error (and hint) every failure ends as."""
    err.print(f"[bold red]error:[/] {escape_markup(message)}", soft_wrap=True, highlight=False)
    if hint:
        err.print(f"[yellow]hint:[/] {escape_markup(hint)}", soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape_markup(message)}", soft_wrap=True, highlight=False)


def say(message: str) -> None:
    """A plain progress or summary line on stderr (no markup, no wrapping)."""
    err.print(message, highlight=False, markup=False, soft_wrap=True)


def files_text(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def escape_markup(text: str) -> str:
    """Text to put into a markup string: made visible first (so that a `^[` shown for ESC cannot open a
    `[tag]` of rich's), then its brackets escaped."""
    from rich.markup import escape

    return escape(visible(text, lines=True))


def _one_of(value: str | None, choices: tuple[str, ...], name: str) -> str | None:
    """An option's value checked at the command line (a usage error, exit 2), not deep in the model code."""
    if value is not None and value not in choices:
        raise typer.BadParameter(f"unknown value {value!r}; use {', '.join(choices)}", param_hint=name)
    return value


ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        show_default=False,
        help="Hub id, model folder or .gguf file (default: CADEDIT_MODEL, then `model` in .cadedit.toml or "
        "pyproject.toml \\[tool.cadedit] once approved with `cadedit trust`, then in ~/.config/cadedit/config.toml, "
        f"then {DEFAULT_MODEL}).",
    ),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--threads", min=1, show_default=False, help="CPU threads (default: physical cores not busy with other work)."
    ),
]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype",
        callback=lambda v: _one_of(v, DTYPES, "--dtype"),
        help="auto, fp32, bf16, fp16, bf16-int8 (one-token steps through int8 weights) or bf16-int4 (through a GGUF's "
        "own 4-bit weights, int8 where it has none). auto: bf16 on CUDA; "
        "on CPU what a probe measured faster on this machine (once, cached).",
    ),
]
BackendOpt = Annotated[
    Optional[str],
    typer.Option(
        "--backend",
        show_default=False,
        callback=lambda v: _one_of(v, BACKENDS, "--backend"),
        help="auto, torch or llama (a GGUF through llama.cpp at its own size). Default: CADEDIT_BACKEND, then `backend` "
        "in .cadedit.toml, then auto: a GGUF runs on whichever backend measured faster on this CPU (once, cached).",
    ),
]
MaxNewOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-new-tokens",
        min=1,
        show_default=False,
        help="Budget of new tokens (default: twice the file's + 256; a scoped edit: 1.5x its regions' + 128).",
    ),
]

ScopeContextOpt = Annotated[
    str,
    typer.Option(
        "--context",
        metavar="N|all",
        help="Scoped edits: lines shown to the model on each side of the lines it retypes (with the file's first "
        "lines), or all for the whole file.",
    ),
]


def context_lines(value: str) -> int | None:
    """--context's value: a line count, or None for the whole file."""
    if value.strip().lower() == "all":
        return None
    if not value.strip().isdigit():
        raise typer.BadParameter(f"{value!r}: expected a number of lines or all", param_hint="--context")
    return int(value)


EngineOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        metavar="URL",
        show_default=False,
        help="A shared OpenAI-compatible inference engine (vLLM, SGLang, llama-server, Ollama) that does the model "
        "work, e.g. http://gpu-box:8000/v1; cadedit keeps the prompt, checks and diffs. Default: CADEDIT_ENGINE, "
        "then `engine` in your own ~/.config/cadedit/config.toml (never a repository's); none: the local model. The API key comes from CADEDIT_ENGINE_KEY or "
        "OPENAI_API_KEY. With --engine, --model names the engine's model (default: the first it serves).",
    ),
]
EngineTimeoutOpt = Annotated[
    Optional[float],
    typer.Option(
        "--engine-timeout",
        min=0.1,
        show_default=False,
        help=f"Seconds one engine request may take (default: `engine_timeout` in the settings, else {ENGINE_TIMEOUT:g}).",
    ),
]


def engine_for(engine: str | None, timeout: float | None, model: str | None, cwd=None):
    """The shared engine's client when --engine, CADEDIT_ENGINE or the settings name one, else None."""

    url = choose_engine(engine, cwd)
    if url is None:
        return None
    from cadedit.server.engine import EngineClient  # lazy: imports numpy; every command imports this module

    return EngineClient(url, choose_engine_timeout(timeout, cwd), model)


def server_for(options, tell=None):
    """The warm server (`cadedit serve start`) when one runs with this model and dtype and is free (or
    frees up within SERVER_BUSY_WAIT; tell(message) says it is busy), else None."""
    if os.environ.get("CADEDIT_SERVER", "1") == "0":
        return None
    from cadedit.server.warm import connect  # lazy: `cadedit --help` imports this module, and no server code

    client = connect(options.model, on_busy=tell)
    if client is None:
        return None
    wanted = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(options.dtype, options.dtype)
    if options.dtype != "auto" and wanted not in str(client.dtype):
        return None  # asked for another dtype than the server holds: load locally
    return client
