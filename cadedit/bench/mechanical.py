"""Renames and named deletions without a model (`cadedit bench mechanical`): each case of
corpus/mechanical/cases.json run as a user runs it, `cadedit fix FILE INSTRUCTION --write --json`, in a
subprocess (the package on `code`'s path) with a --model that does not exist, so that an edit made
with a model fails instead of loading one.

Per case: "exact" (exit 0, made without a model, the file equals expected/<id>.py), "fallback"
(cadedit said why it could not be exact and handed the edit to the model, file untouched) or
"wrong" (anything else: a different file, or an edit made where the case expects a fallback); the
wall of the whole command and the seconds of the edit and its checks inside it. No torch here."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer

from cadedit.bench.options import JsonOpt, LimitOpt
from cadedit.cli.common import say

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "mechanical"
NO_MODEL = "/nonexistent/cadedit-bench-mechanical-model"  # a model edit fails here instead of loading one
PARTS = ("tune", "heldout", "all")


@dataclass(frozen=True)
class Case:
    id: str
    part: str
    file: str
    instruction: str
    expect: str  # "exact" (expected/<id>.py) or "fallback"


@dataclass(frozen=True)
class Outcome:
    id: str
    part: str
    expect: str
    verdict: str  # exact, fallback, wrong
    exit_code: int
    wall: float  # the whole command, start to exit
    edit_seconds: float | None  # the edit and its checks (the --json try's seconds); None without one
    said: str  # the last line on stderr


def load_cases(folder: Path = CORPUS, part: str = "all") -> list[Case]:
    data = json.loads((folder / "cases.json").read_text())
    cases = [Case(c["id"], c["part"], c["file"], c["instruction"], c["expect"]) for c in data["cases"]]
    return [c for c in cases if part in ("all", c.part)]


def run_case(case: Case, code: Path, folder: Path = CORPUS, timeout: float = 120.0) -> Outcome:
    """The case through `cadedit fix --write --json` in a subprocess, judged against its expected file."""
    source = folder / case.file
    before = source.read_text()
    with tempfile.TemporaryDirectory(prefix="cadedit-mechanical-") as work:
        target = Path(work) / source.name
        shutil.copyfile(source, target)
        command = [sys.executable, "-m", "cadedit", "fix", target.name, case.instruction, "--write", "--json"]
        command += ["--model", NO_MODEL]
        start = time.monotonic()
        done = subprocess.run(
            command,
            cwd=work,
            env={**os.environ, "PYTHONPATH": str(code)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        wall = time.monotonic() - start
        after = target.read_text()
    mechanical = "without a model:" in done.stderr
    fell_back = "not done without a model" in done.stderr and after == before
    expected = (folder / "expected" / f"{case.id}.py").read_text() if case.expect == "exact" else None
    if done.returncode == 0 and mechanical and after == expected:
        verdict = "exact"
    elif fell_back and not mechanical:
        verdict = "fallback"
    else:
        verdict = "wrong"
    seconds = None
    if done.returncode == 0 and done.stdout.strip():
        seconds = json.loads(done.stdout)["tries"][0]["seconds"]
    said = done.stderr.strip().splitlines()[0] if done.stderr.strip() else ""
    return Outcome(case.id, case.part, case.expect, verdict, done.returncode, wall, seconds, said[-300:])


def summary(outcomes: list[Outcome]) -> dict:
    """Per part: exact, fallback (and of those where the case expects one), wrong, walls."""
    parts = {}
    for part in PARTS:
        rows = [o for o in outcomes if part == "all" or o.part == part]
        if not rows:
            continue
        edits = [o.edit_seconds for o in rows if o.edit_seconds is not None]
        parts[part] = {
            "cases": len(rows),
            "expect_exact": sum(o.expect == "exact" for o in rows),
            "exact": sum(o.verdict == "exact" for o in rows),
            "fallback": sum(o.verdict == "fallback" for o in rows),
            "fallback_expected": sum(o.verdict == "fallback" and o.expect == "fallback" for o in rows),
            "wrong": sum(o.verdict == "wrong" for o in rows),
            "wall_median": statistics.median(o.wall for o in rows),
            "wall_max": max(o.wall for o in rows),
            "edit_seconds_median": statistics.median(edits) if edits else None,
            "edit_seconds_max": max(edits) if edits else None,
        }
    return parts


def mechanical(
    part: Annotated[
        str, typer.Option("--part", help="tune (read while the edits were built), heldout, or all.")
    ] = "all",
    code: Annotated[
        Path | None,
        typer.Option(
            "--code", help="The checkout whose cadedit package runs the edits; default: this one.", show_default=False
        ),
    ] = None,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Renames and named deletions of Python without a model (corpus/mechanical: standard-library
    modules), each run as `cadedit fix FILE INSTRUCTION --write` with no model to load: exact, fallback
    (cadedit said why and handed the edit to the model) or wrong, and the wall of each command.

    Example: cadedit bench mechanical --part heldout --json mechanical.json
    """
    if part not in PARTS:
        raise typer.BadParameter(f"{part!r} is not one of {', '.join(PARTS)}", param_hint="--part")
    root = code or Path(__file__).resolve().parents[2]
    outcomes = []
    for case in load_cases(part=part)[:limit]:
        outcome = run_case(case, root)
        outcomes.append(outcome)
        edit = f", edit {outcome.edit_seconds:.2f} s" if outcome.edit_seconds is not None else ""
        say(
            f"{case.id}: {case.instruction!r}: {outcome.verdict} (exit {outcome.exit_code}, {outcome.wall:.2f} s{edit})"
        )
        if outcome.verdict == "wrong" or outcome.verdict != outcome.expect:
            say(f"  {outcome.said}")
    results = summary(outcomes)
    if json_path is not None:
        cases = [asdict(o) for o in outcomes]
        json_path.write_text(json.dumps({"code": str(root), "summary": results, "cases": cases}, indent=2) + "\n")
    for name, n in results.items():
        say(
            f"{name}: {n['cases']} cases: {n['exact']} exact of {n['expect_exact']}, {n['fallback']} fallback "
            f"({n['fallback_expected']} expected), {n['wrong']} wrong; wall median {n['wall_median']:.2f} s, "
            f"max {n['wall_max']:.2f} s"
        )
