"""Mechanical edits: a named deletion or a rename of Python code, made without a model
(cadedit.scope.mechanical reads the instruction, cadedit.text.refactor makes the edit) and checked as a
model's candidate is (syntax, the code checks, change, --test), so that the diff, --write, --check and
the exit codes are those of any edit.

mechanical_edit(document, instruction, plan) is None where the instruction is no mechanical edit or the
file is not Python; else a Mechanical: its Verified (one try, no model), or `why` it could not be done
exactly, and then the model makes the edit."""

from __future__ import annotations

import time
from dataclasses import dataclass

from cadedit.errors import NotMechanicalError
from cadedit.options import Mode
from cadedit.results import DecodeStats, EditResult
from cadedit.scope.mechanical import DELETE, Intent, read_intent
from cadedit.text.document import Document
from cadedit.text.languages import language_of
from cadedit.text.oracle import oracle
from cadedit.text.refactor import delete, rename
from cadedit.tries.checks import Check
from cadedit.tries.loop import CheckPlan, Try, Verified, check_candidate


@dataclass(frozen=True)
class Mechanical:
    """A mechanical edit: `verified` holds its one try, or it is None and `why` says why the model edits."""

    intent: Intent
    verified: Verified | None = None
    why: str = ""
    note: str = ""  # what was done: "renamed f to g (7 places)"


def mechanical_edit(document: Document, instruction: str, plan: CheckPlan) -> Mechanical | None:
    """The instruction done without a model, checked; None where it is not a mechanical edit of Python."""
    language = language_of(document.path)
    intent = read_intent(instruction)
    if intent is None or language is None or language.parser != "python":
        return None
    start = time.perf_counter()
    try:
        if intent.kind == DELETE:
            done = delete(document.text, intent.targets, intent.helpers)
        else:
            done = rename(document.text, intent.old, intent.new, intent.what, intent.within)
    except NotMechanicalError as exc:
        return Mechanical(intent, why=exc.message)
    result = EditResult(
        document,
        Mode.PROGRAM,
        oracle(document, Document.from_text(done.text, document.path)),
        "",
        done.text,
        DecodeStats(seconds_total=time.perf_counter() - start),
        "",
        0,
        mechanical=intent.kind,
    )
    checks = check_candidate(document, done.text, plan, instruction=instruction)
    attempt = Try(1, 0.0, result, checks, time.perf_counter() - start)
    code_failed = [c for c in attempt.failed_checks if c.name != "test"]
    if code_failed:  # the edit broke what the checks guard: the model, with its tries, may do better
        return Mechanical(intent, why="the edit without a model failed its checks: " + _failed(code_failed))
    return Mechanical(intent, Verified((attempt,)), note=done.note)


def _failed(checks: list[Check]) -> str:
    return ", ".join(f"{c.name} ({c.detail})" if c.detail else c.name for c in checks)
