"""What every model benchmark does: load the model and warm it up, run each case of each corpus under a
progress bar with its results kept on disk as they come, and print tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from rich.console import Console

from cadedit.backends import model as backend_model  # a module: tests count the loads of backend_model.load_model
from cadedit.backends.model import CachedLM, LoadedModel, encode, new_cache
from cadedit.decode import pipeline

from cadedit.bench.report import ResultsFile, progress, table
from cadedit.cli.common import err

T = TypeVar("T")


class _Out:
    """Tables on stdout: terminal width on a terminal, wide enough for no truncation when piped."""

    def print(self, renderable) -> None:
        console = Console(markup=False, highlight=False, emoji=False)
        if not console.is_terminal:
            console = Console(width=200, markup=False, highlight=False, emoji=False)
        console.print(renderable)

    def table(self, title: str, columns: list[str], rows: list[list[str]], caption: str | None = None) -> None:
        """A title line, the table, and a caption line (lines, so they never wrap to the table's width)."""

        self.print(title)
        self.print(table(columns, rows))
        if caption:
            self.print(caption)


out = _Out()


def run_cases(
    items: Iterable[T], total: int, description: str, step: Callable[[T], None], save: Callable[[bool, bool], None]
) -> None:
    """step() each item under a progress bar; save(partial, force) after each (throttled) and on Ctrl-C."""

    try:
        for item in progress(items, total, description, err):
            step(item)
            save(True, False)
    except KeyboardInterrupt:
        save(True, True)
        err.print("interrupted: partial results kept", highlight=False)
        raise


def run_corpora(
    corpora: dict[str, list],
    description: str,
    run_one: Callable[[str, object], T],
    to_json: Callable[[dict[str, list[T]]], dict],
    json_path: Path | None,
    show: Callable[[T], None] | None = None,
    work: list[tuple[str, object]] | None = None,
) -> dict[str, list[T]]:
    """What every corpus benchmark does: run_one(corpus name, case) for each case of each corpus (or each
    (name, item) of `work`) under a progress bar, the rows kept per corpus, to_json(rows) rewritten to
    json_path as they come (partial, and kept on Ctrl-C) and once at the end; show(row) prints a line."""

    done: dict[str, list[T]] = {name: [] for name in corpora}
    results = ResultsFile(json_path)

    def save(partial: bool, force: bool = True) -> None:
        results.write(to_json(done), partial=partial, force=force)

    def step(item: tuple[str, object]) -> None:
        row = run_one(*item)
        done[item[0]].append(row)
        if show is not None:
            show(row)

    items = work if work is not None else [(name, case) for name, cases in corpora.items() for case in cases]
    run_cases(items, len(items), description, step, save)
    save(False)
    return done


def _load_model(
    model: str | None, device: str, dtype: str, threads: int | None, backend: str | None, warm_up: bool = True
) -> tuple:
    """The model loaded under a status line and, with warm_up, warmed up (warm, so the first
    case's clock holds no one-off costs): (the loaded model, the warm-up seconds)."""
    with err.status("loading the model ..."):
        loaded = backend_model.load_model(model, device, dtype, threads, backend)
        return (loaded, warm(loaded)) if warm_up else (loaded, 0.0)


def warm(loaded: LoadedModel) -> float:
    """Compile the grammar and run one forward, so the first case's clock holds no one-off costs."""
    start = time.perf_counter()
    pipeline.grammar_for(loaded)
    CachedLM(loaded.model, new_cache(loaded)).feed(encode(loaded.tokenizer, "def f(x):\n    return x + 1\n" * 4))
    return time.perf_counter() - start


def _model_meta(command: str, loaded, *fields: str) -> dict:
    """The head of a model benchmark's --json: the command, the model, the loaded model's `fields`
    (device, backend), its dtype and threads."""
    return {
        "command": command,
        "model": loaded.name,
        **{f: getattr(loaded, f) for f in fields},
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "threads": loaded.threads,
    }
