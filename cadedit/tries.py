"""Verified edits: every candidate is checked; a failed try feeds back what failed and tries again.

Contract: edit_verified(document, instruction, options, plan, tries, loaded=...) runs up to `tries`
edits of one document through pipeline.edit_file and checks each candidate (cadedit.checks: the
edited file's syntax, that it changed at all, and the user's test command with the candidate in
place, the user's bytes restored afterwards). It stops at the first candidate that passes. Try 1
is the options' own sampling (greedy by default); try 2 is greedy with the failure in the prompt;
later tries sample (TRY_TEMPERATURE, seeded by the try number) with the latest failure in the
prompt. The feedback goes last in the prompt, so every try shares the prompt prefix whose KV cache
the model keeps (model.CachedLM.reuse). A scoped edit with wider scopes (options.wider: a
line reference's statement, block, function) climbs one after a candidate that did not parse or
failed the test, and drops the region's quote after one that changed nothing. A scoped edit of a
long definition whose instruction names no line (options.locate) first asks the model where
(cadedit.where, a few tokens) and climbs from the line it names: the statement there, the function,
the definition; there a candidate that changed nothing widens too (the line named was not the one).
Nothing is written here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from typing import TYPE_CHECKING, Any

from cadedit.checks import Candidate, Check, Edited, change_check, feedback, run_test, syntax_check
from cadedit.document import Document
from cadedit.errors import BudgetError
from cadedit.options import EditOptions, Sampling
from cadedit.prompt import unquoted
from cadedit.results import EditResult

if TYPE_CHECKING:  # the model code imports torch; a client of the warm server never needs it
    from cadedit.decode import Picker

DEFAULT_TRIES = 3
TRY_TEMPERATURE = 0.7
# A failed check that more room may cure: the candidate did not parse (a statement cut short) or
# failed the test (the fix is elsewhere). After one, the next try retypes the next wider scope
# (options.wider); after "no change" or an answer out of budget it stays where it was.
WIDEN_AFTER = ("syntax", "test")
# A scoped prompt that quotes the region right before the instruction (prompt.LAYOUTS "quoted", "auto")
# keeps a small model in its place, but invites a verbatim copy: after a candidate that changed
# nothing, the next try is asked without the quote (README, "Scoped edits, measured").
UNQUOTED_AFTER = "change"


@dataclass(frozen=True)
class CheckPlan:
    """Which checks a candidate must pass."""

    allow_no_change: bool = False  # `--allow-no-change`, and `--check`, where no change is the point
    test: str | None = None  # a shell command run with the candidate in place; exit 0 passes
    test_timeout: float = 120.0
    cwd: Path | None = None
    # The file on disk must still hold the document's bytes when a test starts (`cadedit fix`); the
    # hook edits the staged content, so the working-tree file may differ (it is restored all the same).
    expect_document_on_disk: bool = True


@dataclass(frozen=True)
class Try:
    """One candidate and what its checks said (error: the decode failed, e.g. out of budget)."""

    number: int
    temperature: float
    result: EditResult | None
    checks: tuple[Check, ...]
    seconds: float
    error: str | None = None
    hint: str | None = None  # the decode error's hint (e.g. raise --max-new-tokens)
    regions: tuple[tuple[int, int], ...] = ()  # the line ranges this try retyped (empty: the whole file)

    @property
    def passed(self) -> bool:
        return self.result is not None and all(c.passed or c.skipped for c in self.checks)

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not (c.passed or c.skipped))

    def summary(self) -> str:
        """One line: what this try's checks said."""
        if self.error:
            return f"failed: {self.error}"
        passed = [c.name for c in self.checks if c.passed and not c.skipped]
        failed = [f"{c.name} ({c.detail})" if c.detail else c.name for c in self.failed_checks]
        skipped = [f"{c.name} skipped ({c.detail})" if c.detail else f"{c.name} skipped" for c in self.checks if c.skipped]
        text = ("failed: " + ", ".join(failed)) if failed else ("passed: " + (", ".join(passed) or "no checks"))
        return text + ("; " + "; ".join(skipped) if skipped else "")

    def to_json(self) -> dict:
        stats = self.result.stats if self.result else None
        return {
            "try": self.number, "temperature": self.temperature, "passed": self.passed, "error": self.error,
            "regions": [list(r) for r in self.regions],
            "changed": self.result.changed if self.result else None, "seconds": self.seconds,
            "checks": [{"name": c.name, "passed": c.passed, "skipped": c.skipped, "detail": c.detail,
                        "output_tail": c.output_tail, "seconds": c.seconds} for c in self.checks],
            "tokens_new": stats.tokens_new if stats else None,
            "tokens_copied": stats.tokens_copied if stats else None,
            "tokens_prompt_fed": stats.tokens_prompt if stats else None,
            "tokens_prompt_reused": stats.tokens_reused if stats else None,
        }


@dataclass(frozen=True)
class Verified:
    tries: tuple[Try, ...]
    where: Any = None  # the where-step's cadedit.where.Where, when one ran

    @property
    def answer(self) -> Try | None:
        """The try that passed, if any."""
        return next((t for t in self.tries if t.passed), None)

    @property
    def best(self) -> Try | None:
        """The passing try, else the failing candidate that got furthest: the most checks passed in
        their order (syntax, change, test: one that does not parse never reaches the test), the
        earliest among equals (the greedy ones)."""
        if self.answer is not None:
            return self.answer
        made = [t for t in self.tries if t.result is not None]
        return max(made, key=_progress, default=None)

    @property
    def hint(self) -> str:
        """What to do when no try passed."""
        if self.tries and all(t.error for t in self.tries) and any(t.hint for t in self.tries):
            return next(t.hint for t in self.tries if t.hint)
        return "raise --tries, narrow the instruction, or --allow-no-change if no change is right"


CHECK_ORDER = ("syntax", "change", "test")


def _progress(attempt: Try) -> int:
    """How far a candidate got along CHECK_ORDER: the position of its first failed check."""
    failed = [CHECK_ORDER.index(c.name) for c in attempt.failed_checks if c.name in CHECK_ORDER]
    return min(failed, default=len(CHECK_ORDER))


def sampling_for(number: int, first: Sampling) -> Sampling:
    """Try 1: the user's sampling; try 2: greedy (the feedback changes the prompt); later: sampled."""
    if number == 1:
        return first
    if number == 2:
        return Sampling(0.0, 1.0, None) if first.temperature <= 0 else first
    seed = (first.seed or 0) * 1000 + number
    return Sampling(max(first.temperature, TRY_TEMPERATURE), first.top_p, seed)


def check_candidate(document: Document, new_text: str, plan: CheckPlan, on_test: Callable[[], None] | None = None,
                    instruction: str = "") -> tuple[Check, ...]:
    """Syntax and change first; the test command only when both pass (it is the slow one)."""
    checks = (syntax_check(document.path, document.text, new_text),
              change_check(document.text, new_text, plan.allow_no_change, instruction))
    if plan.test and all(c.passed or c.skipped for c in checks):
        if on_test is not None:
            on_test()
        expected = document.to_bytes() if plan.expect_document_on_disk else None
        candidate = Candidate.read(document.path, new_text.encode("utf-8"), expected=expected)
        checks += (run_test(candidate, plan.test, plan.test_timeout, plan.cwd),)
    return checks


def edit_verified(document: Document, instruction: str, options: EditOptions, plan: CheckPlan,
                  tries: int = DEFAULT_TRIES, *, loaded: Any, picks: Callable[[int], Picker | None] | None = None,
                  on_try: Callable[[Try], None] | None = None, on_step=None,
                  on_test: Callable[[int], None] | None = None, on_where: Callable[[Any], None] | None = None) -> Verified:
    """Up to `tries` candidates until one passes its checks; see the module docstring.
    loaded: a model.LoadedModel, or a server.ServerClient (its edit() runs edit_file in the warm
    server; no where-step then). picks(k) may give try k's picker, picks(0) the where-step's (tests
    script candidates with it; local models only)."""
    if hasattr(loaded, "edit"):
        def edit(document, instruction, options, on_step, pick):
            return loaded.edit(document, instruction, options, on_step=on_step)
    else:
        from cadedit.pipeline import edit_file

        def edit(document, instruction, options, on_step, pick):
            return edit_file(document, instruction, options, loaded=loaded, on_step=on_step, pick=pick)
    where = _where(document, instruction, options, loaded, picks(0) if picks else None)
    if where is not None and on_where is not None:
        on_where(where)
    done: list[Try] = []
    told = ""
    levels = where.levels if where is not None else (options.regions, *options.wider)
    widen_after = set(WIDEN_AFTER) | ({UNQUOTED_AFTER} if where is not None else set())
    level = 0
    layout = options.layout
    for number in range(1, tries + 1):
        sampling = sampling_for(number, options.sampling)
        failed = {c.name for c in done[-1].failed_checks} if done else set()
        widened = bool(failed & widen_after) and level < len(levels) - 1
        level += widened
        if UNQUOTED_AFTER in failed and not widened:  # copied where it was: ask without the quote
            layout = unquoted(layout)
        regions = levels[level]
        current = replace(options, sampling=sampling, feedback=told, regions=regions, wider=(), layout=layout,
                          locate=False)
        attempt, told = _one_try(document, instruction, current, plan, number, edit, on_step,
                                 picks(number) if picks else None, on_test)
        done.append(attempt)
        if on_try is not None:
            on_try(attempt)
        if attempt.passed:
            break
    return Verified(tuple(done), where)


def _where(document: Document, instruction: str, options: EditOptions, loaded: Any, pick) -> Any:
    """The where-step's answer, or None when it does not apply (or the model could not answer)."""
    if not (options.locate and options.regions) or hasattr(loaded, "edit"):
        return None
    from cadedit.errors import CadeditError
    from cadedit.where import locate

    try:
        where = locate(loaded, document, instruction, options.regions, pick, options.where_by)
    except CadeditError:  # e.g. out of its few tokens: the tries retype the definitions, as without it
        return None
    return where if where.lines else None


def _one_try(document: Document, instruction: str, current: EditOptions, plan: CheckPlan, number: int, edit,
             on_step, pick, on_test) -> tuple[Try, str]:
    """One candidate and its checks, and what the next try is told."""
    sampling, regions = current.sampling, current.regions
    start = time.perf_counter()
    try:
        result = edit(document, instruction, current, on_step, pick)
    except BudgetError as exc:
        attempt = Try(number, sampling.temperature, None, (), time.perf_counter() - start, exc.message, exc.hint,
                      regions)
        return attempt, "Your previous answer was too long and did not finish: reply with the edited code only."
    checks = check_candidate(document, result.new_text, plan,
                             None if on_test is None else lambda: on_test(number), instruction)
    attempt = Try(number, sampling.temperature, result, checks, time.perf_counter() - start, regions=regions)
    cwd = str(plan.cwd) if plan.cwd is not None else None
    return attempt, feedback(checks, Edited(document.path, document.text, result.new_text, regions, cwd))
