"""The options that several `cadedit bench` commands take, each declared once as a Typer Annotated alias
(a command writes only its default), and the parsers of their values.

A leaf: it imports typer, cadedit.cli.common, cadedit.settings and bench/corpus.py only, so every bench
module can use it without importing another command. An option only one command takes is declared
beside that command, in the measurement's own module.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from cadedit.bench.corpus import CONTEXTS, load_corpus

# The model options and --context of scoped edits are `cadedit fix`'s own (re-exported for the bench commands).
from cadedit.cli.common import BackendOpt, DtypeOpt, MaxNewOpt, ModelOpt, ScopeContextOpt, ThreadsOpt  # noqa: F401

# -- what to measure on --------------------------------------------------------------------------

CorpusOpt = Annotated[
    list[Path],
    typer.Option(
        "--corpus",
        "-c",
        metavar="FILE",
        help="A JSONL corpus: id, language, before, after, instruction[, test] per line; HumanEvalPack records "
        "work as they are. Repeat for several corpora (a pooled row is added).",
        show_default=False,
    ),
]
LimitOpt = Annotated[int | None, typer.Option("--limit", "-n", min=1, help="Only the first N cases of each corpus.")]
CaseContextOpt = Annotated[
    str,
    typer.Option(
        "--context",
        help="HumanEvalPack records: docs (the whole file with its docstring, as users hand it over), "
        "nodocs, or body (the buggy body alone, the declaration as the test's prefix: the paper's counting).",
    ),
]
TestTimeoutOpt = Annotated[
    float, typer.Option("--test-timeout", min=0.1, help="Seconds each run of a case's test may take (python3 / node).")
]
JsonOpt = Annotated[Path | None, typer.Option("--json", metavar="PATH", help="Write the results as JSON here.")]

# -- the model and how it runs (the same options as `cadedit fix`) --------------------------------

DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu or cuda[:k].")]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json, a model folder, a .gguf file or a hub id (default: the model's, see --model).",
    ),
]

# -- the kernel speedup s(N) and the bounds of eq. (3) ------------------------------------------


COUNTINGS = ("paper", "splice")  # how the ceiling counts copied spans (bench/ceiling.py)


def _counting(value: str) -> str:
    if value not in COUNTINGS:
        raise typer.BadParameter(f"use one of {', '.join(COUNTINGS)}", param_hint="--counting")
    return value


KernelOpt = Annotated[
    Path | None,
    typer.Option(
        "--kernel",
        metavar="K.json",
        help="s(N) from `cadedit bench kernel --json`, for the speedup bounds of eq. (3). Without it ceiling and e2e "
        "leave the bounds out, and decode measures s(N) first, at the first case's prompt length.",
    ),
]
CountingOpt = Annotated[
    str,
    typer.Option(
        "--counting",
        callback=_counting,
        help="How copied spans are counted (the ceiling, e2e's bnd_exact): paper (Table 2's exact counting) or splice "
        "(cadedit's own oracle programs and splices).",
    ),
]
SpansOpt = Annotated[str, typer.Option("--spans", help="Span lengths N of the measured s(N), comma-separated.")]
TrialsOpt = Annotated[
    int, typer.Option("--trials", min=1, help="Timed trials per N of the measured s(N) (median reported).")
]

# -- the long-file tasks (bench longfile, bench engine) -------------------------------------------

PackagesOpt = Annotated[
    str, typer.Option("--packages", help="Installed packages whose modules are the long files (comma-separated).")
]
TasksOpt = Annotated[int, typer.Option("--tasks", "-n", min=1, help="How many long-file tasks (one per file).")]
TaskSeedOpt = Annotated[int, typer.Option("--seed", help="Which files and which swaps.")]
PACKAGES = "rich,click,typer,pygments"


def int_list(text: str, name: str) -> tuple[int, ...]:
    """A comma-separated list of non-negative integers; a usage error naming the option otherwise."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"expected integers separated by commas, got {text!r}", param_hint=name) from None
    if not values or min(values) < 0:
        raise typer.BadParameter(f"expected non-negative integers, got {text!r}", param_hint=name)
    return values


def span_lengths(text: str) -> tuple[int, ...]:
    """--spans: span lengths of at least 1."""
    spans = int_list(text, "--spans")
    if min(spans) < 1:
        raise typer.BadParameter("span lengths must be at least 1", param_hint="--spans")
    return spans


def longfile_roots(packages: str) -> list[str]:
    """The folders of the installed packages (comma-separated names) whose modules are the long files."""
    roots = []
    for name in (p.strip() for p in packages.split(",") if p.strip()):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise typer.BadParameter(f"{name} is not an installed package", param_hint="--packages")
        roots.append(list(spec.submodule_search_locations)[0])
    return roots


T = TypeVar("T")


def load_corpora(paths: list[Path], limit: int | None, context: str = "body") -> dict[str, list]:
    """--corpus's files, each by its name (its path where two share one), the first --limit cases of each."""
    if context not in CONTEXTS:
        raise typer.BadParameter(f"use one of {', '.join(CONTEXTS)}", param_hint="--context")
    corpora: dict[str, list] = {}
    for path in paths:
        name = path.stem if path.stem not in corpora else str(path)
        corpora[name] = load_corpus(path, limit, context)
    return corpora


def choice(value: str, option: str, choices: dict[str, T]) -> T:
    if value not in choices:
        raise typer.BadParameter(f"{value!r}: expected one of {', '.join(choices)}", param_hint=option)
    return choices[value]


def short_name(model: str) -> str:
    """A model as tables name it: a file or folder by its last part, a hub id as it is."""
    return Path(model).name or model
