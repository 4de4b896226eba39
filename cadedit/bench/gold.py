"""The checks on gold fixes (`cadedit bench checks`): which check would fail a correct edit.

For each case the gold `after` goes through what every try's candidate goes through without a test:
the repairs outside the retyped lines (cadedit.tries.repair), then syntax, the code checks and change
(tries.check_candidate), with the case's instruction. A gold fix is right by construction, so every
check it fails is a false alarm that would turn a passing edit into exit 3. The file is named by the
case's language (or its solution_file), which decides the checks. Reversed, the case's `before` is
the candidate for its gold file: the checks that fail it catch a bug without a test. Pure: no torch,
no transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

from cadedit.bench.corpus import Case
from cadedit.tries.checks import Check
from cadedit.tries.code_checks import CHECK_NAMES
from cadedit.text.document import Document
from cadedit.tries.repair import repaired
from cadedit.tries.loop import CheckPlan, check_candidate
from typing import Annotated
import typer
from cadedit.bench.options import CaseContextOpt, CorpusOpt, JsonOpt, LimitOpt
from cadedit.errors import CadeditError
from cadedit.bench.running import out, run_corpora
from cadedit.bench.options import load_corpora


CHECKS = ("syntax", *CHECK_NAMES, "change")
_SUFFIXES = {"python": ".py", "javascript": ".js", "js": ".js", "typescript": ".ts"}


@dataclass(frozen=True)
class GoldRow:
    """One case: each check that ran on its gold fix, by name."""

    id: str
    path: str
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not (c.passed or c.skipped))


def gold_path(case: Case) -> str:
    """The file name the case's text is checked as: its solution file, or its id with its language's suffix."""
    if case.solution_file:
        return case.solution_file
    return case.id.replace("/", "_") + _SUFFIXES.get(case.language.lower(), "")


def check_gold(case: Case, reverse: bool = False) -> GoldRow:
    """The checks on the case's gold fix (reverse: on its `before` as an edit of the gold)."""
    path = gold_path(case)
    before, after = (case.after, case.before) if reverse else (case.before, case.after)
    text = repaired(path, before, after, case.instruction)
    checks = check_candidate(Document.from_text(before, path), text, CheckPlan(), instruction=case.instruction)
    return GoldRow(case.id, path, checks)


def summarize(rows: list[GoldRow]) -> dict:
    """Per check: the cases it ran on (not skipped) and the gold fixes it failed, with their reasons."""
    checks = {}
    for name in CHECKS:
        ran = [(r, c) for r in rows for c in r.checks if c.name == name and not c.skipped]
        failed = [{"id": r.id, "detail": c.detail} for r, c in ran if not c.passed]
        checks[name] = {"ran": len(ran), "failed": len(failed), "failures": failed}
    return {"cases": len(rows), "cases_failed": sum(bool(r.failed) for r in rows), "checks": checks}


def gold_checks(
    corpus: CorpusOpt,
    context: CaseContextOpt = "docs",
    reverse: Annotated[
        bool,
        typer.Option(
            "--reverse",
            help="Check each case's buggy side as an edit of its gold: the bugs the checks catch "
            "without a test (exits 0).",
        ),
    ] = False,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """False alarms: every check a candidate gets without --test (syntax, the code checks, change) run on
    each case's gold fix, with the case's instruction; a check that fails a correct fix would turn a pass
    into exit 3. Prints the failures per check; exits 1 if any gold fix failed one.

    Example: cadedit bench checks -c humanevalfix_js.jsonl --context docs
    """

    corpora = load_corpora(corpus, limit, context)
    done = run_corpora(
        corpora,
        "checks",
        lambda name, case: check_gold(case, reverse),
        lambda done: {
            "command": "checks",
            "context": context,
            "reverse": reverse,
            "corpora": {n: summarize(r) for n, r in done.items()},
        },
        json_path,
    )
    rows, failures = [], []
    for name, found in done.items():
        s = summarize(found)
        rows += [[name, check, str(c["ran"]), str(c["failed"])] for check, c in s["checks"].items()]
        failures += [
            f"{name}:{f['id']}: {check}: {f['detail']}" for check, c in s["checks"].items() for f in c["failures"]
        ]
    title = (
        "Checks on the buggy side (failed = a bug caught)"
        if reverse
        else "Checks on gold fixes (failed = a correct fix refused)"
    )
    out.table(title, ["corpus", "check", "ran on", "failed"], rows)
    for line in failures:
        out.print(line)
    if failures and not reverse:
        raise CadeditError(f"checks: {len(failures)} gold fix(es) failed a check")
