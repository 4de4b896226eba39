"""Applying other models' answers (`cadedit bench apply`): every sketch form, judged against the real edit.

Contract: apply_bench(...) runs each case of corpus/apply (cases.jsonl and programs.jsonl; built by
tools/make_apply_corpus.py from HumanEvalFix's buggy and fixed programs, its README says how) as `cadedit
fix FILE --sketch SKETCH --write` merges it -- the blocks for FILE, the merge, its checks
(tries/merged.py) -- and judges the file it would write against the case's expected file: exact,
wrong-but-exit-0 (a result that is not the expected file, accepted), refused (exit 3: a part that fits no
place or several, or a failed check; the file untouched), or an error (exit 1). Per form and per style,
for the tune and held-out parts: those counts, the model-free share (placed and passed with no model) and
the median seconds of merge and checks. With --processes N, N cases spread over the forms also run as
the whole `cadedit fix` process (start to exit), their median beside.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from cadedit.bench.options import JsonOpt, LimitOpt
from cadedit.cli.common import say
from cadedit.errors import CadeditError
from cadedit.text.document import Document
from cadedit.text.sketch import blocks_for, read_answer
from cadedit.tries.loop import CheckPlan
from cadedit.tries.merged import merge_checked

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "apply"
VERDICTS = ("exact", "wrong", "refused", "error")


@dataclass(frozen=True)
class Case:
    id: str
    split: str
    lang: str
    form: str
    style: str
    before: str
    after: str
    sketch: str


@dataclass(frozen=True)
class Outcome:
    case: Case
    verdict: str
    seconds: float
    why: str = ""

    def to_json(self) -> dict:
        c = self.case
        return {"id": c.id, "split": c.split, "form": c.form, "style": c.style, "verdict": self.verdict,
                "seconds": round(self.seconds, 4), "lines": c.before.count("\n"), "why": self.why}  # fmt: skip


def load_cases(folder: Path = CORPUS, split: str = "all") -> list[Case]:
    """The cases of a corpus folder, their files built from programs.jsonl as the tool built them."""
    programs = {}
    for line in (folder / "programs.jsonl").read_text().splitlines():
        row = json.loads(line)
        programs[row["task"]] = row
    cases = []
    for line in (folder / "cases.jsonl").read_text().splitlines():
        row = json.loads(line)
        if split not in ("all", row["split"]):
            continue
        before, after = (
            "\n\n".join(programs[t]["fixed" if (t != row["target"] or fixed) else "buggy"] for t in row["host"])
            for fixed in (False, True)
        )
        sketch = after if row["sketch"] is None else row["sketch"]
        cases.append(Case(row["id"], row["split"], row["lang"], row["form"], row["style"], before, after, sketch))
    return cases


def run_case(case: Case, folder: Path) -> Outcome:
    """The case as `cadedit fix host.EXT --sketch SKETCH --write` merges and checks it, in-process."""
    path = folder / f"host.{case.lang}"
    path.write_text(case.before)
    started = time.monotonic()
    try:
        document = Document.read(path)
        blocks = blocks_for(read_answer(case.sketch), path.name)
        merged = merge_checked(document, blocks, CheckPlan(), path.name)
    except CadeditError as exc:
        return Outcome(case, "refused" if exc.exit_code == 3 else "error", time.monotonic() - started, exc.message)
    seconds = time.monotonic() - started
    if not merged.passed:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in merged.checks if not (c.passed or c.skipped))
        return Outcome(case, "refused", seconds, failed)
    return Outcome(case, "exact" if merged.new_text == case.after else "wrong", seconds)


def run_process(case: Case, folder: Path) -> float:
    """Seconds the whole `cadedit fix FILE --sketch SKETCH --write -q` process takes on the case."""
    (folder / f"host.{case.lang}").write_text(case.before)
    (folder / "sketch.txt").write_text(case.sketch)
    command = [sys.executable, "-m", "cadedit", "fix", f"host.{case.lang}", "--sketch", "sketch.txt", "--write", "-q"]
    started = time.monotonic()
    subprocess.run(command, cwd=folder, capture_output=True, check=False)
    return time.monotonic() - started


def summary(outcomes: list[Outcome], key) -> dict[str, dict]:
    """Per group (key of a case): cases, each verdict, the model-free share and the median seconds."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(key(o.case), []).append(o)
    out = {}
    for name, rows in groups.items():
        counts = {v: sum(o.verdict == v for o in rows) for v in VERDICTS}
        out[name] = {"cases": len(rows), **counts, "model_free_share": (counts["exact"] + counts["wrong"]) / len(rows),
                     "median_seconds": statistics.median(o.seconds for o in rows)}  # fmt: skip
    return out


def _table(title: str, rows: dict[str, dict]) -> None:
    say(f"\n{title}")
    say(
        f"{'':28} {'cases':>5} {'exact':>6} {'wrong':>6} {'refused':>7} {'error':>5} {'model-free':>10} {'median s':>8}"
    )
    for name, r in rows.items():
        say(
            f"{name:28} {r['cases']:5d} {r['exact'] / r['cases']:6.0%} {r['wrong']:6d} {r['refused']:7d} "
            f"{r['error']:5d} {r['model_free_share']:10.0%} {r['median_seconds']:8.3f}"
        )


def apply_bench(
    corpus: Annotated[Path, typer.Option("--corpus", help="The corpus folder (cases.jsonl, programs.jsonl).")] = CORPUS,
    split: Annotated[str, typer.Option("--split", help="tune, heldout or all.")] = "all",
    processes: Annotated[
        int, typer.Option("--processes", min=0, help="Cases (spread over the forms) also run as the whole process.")
    ] = 0,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Other models' answers applied (`cadedit fix --sketch`) on corpus/apply: lazy sketches, SEARCH/REPLACE,
    stale diffs, whole files and chat answers built from real edits; per form and style: exact,
    wrong-but-exit-0, refused, the model-free share and the median seconds, tune and held-out apart.

    Example: cadedit bench apply --split heldout --processes 32 --json apply.json
    """
    if split not in ("tune", "heldout", "all"):
        raise typer.BadParameter(f"{split!r} is not one of tune, heldout, all", param_hint="--split")
    cases = load_cases(corpus, split)[:limit]
    with tempfile.TemporaryDirectory(prefix="cadedit-apply-") as tmp:
        outcomes = [run_case(case, Path(tmp)) for case in cases]
        step = max(1, len(cases) // processes) if processes else 0
        walls = [run_process(case, Path(tmp)) for case in cases[::step][:processes]] if processes else []
    parts = {}
    for part in ("tune", "heldout") if split == "all" else (split,):
        mine = [o for o in outcomes if o.case.split == part]
        if mine:
            parts[part] = {
                "forms": summary(mine, lambda c: c.form),
                "styles": summary(mine, lambda c: f"{c.form}/{c.style}"),
            }
            _table(f"{part}: per form", parts[part]["forms"])
            _table(f"{part}: per style", parts[part]["styles"])
    if walls:
        say(
            f"\nwhole process (`cadedit fix --sketch --write`), {len(walls)} cases: median {statistics.median(walls):.2f} s"
        )
    for o in outcomes:
        if o.verdict == "wrong":
            say(f"WRONG (exit 0): {o.case.id}")
    if json_path is not None:
        data = {"parts": parts, "process_seconds": walls, "cases": [o.to_json() for o in outcomes]}
        json_path.write_text(json.dumps(data, indent=2) + "\n")
