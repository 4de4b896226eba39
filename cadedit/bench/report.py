"""Reporting for the benchmarks: JSON results written atomically as they grow, progress, tables.

Contract: ResultsFile.write(obj) replaces the JSON file through a temporary file and os.replace,
so a reader (or a Ctrl-C) never sees a half-written file; `partial: true` marks results from an
interrupted or still-running command. progress() is a rich progress bar with an ETA on stderr.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from cadedit.text.atomic import replace_file
from cadedit.cli.common import err
from cadedit.errors import CadeditError

T = TypeVar("T")


class ResultsFile:
    """A JSON results file rewritten atomically; a no-op when path is None."""

    def __init__(self, path: str | Path | None, min_interval_s: float = 0.5):
        self.path = Path(path) if path else None
        self.min_interval_s = min_interval_s
        self._last = 0.0

    def write(self, obj: dict, *, partial: bool = False, force: bool = True) -> None:
        """Write obj (with "partial" set); when force is False, skip if written less than min_interval_s ago."""
        if self.path is None or (not force and time.monotonic() - self._last < self.min_interval_s):
            return
        data = json.dumps({**obj, "partial": partial}, indent=2, ensure_ascii=False) + "\n"
        try:
            replace_file(self.path, data.encode("utf-8"), make_parent=True)
        except OSError as exc:
            raise CadeditError(f"{self.path}: cannot write results ({exc.strerror or exc})") from None
        self._last = time.monotonic()


class ProgressBar:
    """A rich progress bar (done/total, elapsed, ETA) on stderr that vanishes when closed.

    Shown on a terminal only: piped or captured stderr gets no control sequences or blank lines.
    """

    def __init__(self, total: float, description: str, console: Console | None = None):
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        console = console or err
        self.console = console
        self._bar = Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
        self._task = self._bar.add_task(description, total=total)

    def __enter__(self) -> ProgressBar:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def advance(self, amount: float = 1, description: str | None = None) -> None:
        self._bar.update(self._task, advance=amount, **({"description": description} if description else {}))


def progress(items: Iterable[T], total: int, description: str, console: Console | None = None) -> Iterator[T]:
    """Yield items while a ProgressBar advances by one per item."""
    with ProgressBar(total, description, console) as bar:
        for item in items:
            yield item
            bar.advance()


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def fmt_int(value: float) -> str:
    return f"{value:,.0f}" if value == value else "-"


def fmt_float(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def fmt_pct(value: float | None, digits: int = 1) -> str:
    return fmt_float(None if value is None else 100 * value, digits, "%")


def table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Table:
    """A rich table with right-aligned numeric columns (every column but the first)."""
    t = Table()
    for k, name in enumerate(columns):
        t.add_column(name, justify="left" if k == 0 else "right", no_wrap=k == 0)
    for row in rows:
        t.add_row(*row)
    return t
