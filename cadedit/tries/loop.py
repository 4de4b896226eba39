"""Verified edits: every candidate is checked; a failed try feeds back what failed and tries again.

Contract: edit_verified(document, instruction, options, plan, Attempts(tries), editor=...) runs up to
`tries` edits of one document through pipeline.edit_file and checks each candidate (cadedit.tries.checks: that a
scoped answer could be placed exactly, the edited file's syntax, that it changed at all, and the
user's test command with the candidate in place, the user's bytes restored afterwards). It stops
at the first candidate that passes. Try 1 is the options' own sampling (greedy by default); try 2
is greedy with the failure in the prompt; later tries sample (TRY_TEMPERATURE, seeded by the try
number) with the latest failure in the prompt. With candidates > 1 every try makes up to that many
(how many when not asked: candidates_for): candidate 1 as the try would be alone, and by default
(settings.CANDIDATES_BY, "branch") only once it failed its checks the others, each branching from
it where the model hesitated most (pipeline.edit_branches), or ("sample") all side by side from the
start, the others sampled (pipeline.edit_candidates); checked in the order of the model's
log-probability of each, a copy of a candidate an earlier try checked taking that one's checks.
The feedback goes last in the prompt, so every try shares the prompt prefix whose KV cache the
model keeps (model.CachedLM.reuse). A scoped edit with wider scopes (options.wider: a
line reference's statement, block, function) climbs one after a candidate that did not parse or
failed the test, and drops the region's quote after one that changed nothing. A scoped edit of a
long definition whose instruction names no line (options.locate) first asks the model where
(cadedit.decode.where, a few tokens) and climbs from the line it names: the statement there, the function,
the definition; there a candidate that changed nothing widens too (the line named was not the one).
Where a test decides, a try at the statements of the next most surprising lines comes before the
function (_ladder). Without the where-step first, such a definition where a test decides is read the same
way once try 1 failed (options.read_later, _read_later): the later tries keep their scopes and add a
branch at each of the reading's first surprising tokens (settings.READ_BRANCHES) to their hesitations.
Nothing is written here.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from typing import Any

from cadedit.tries.checks import (
    Candidate,
    Check,
    Edited,
    change_check,
    feedback,
    placement_check,
    run_test,
    syntax_check,
)
from cadedit.tries.code_checks import CHECK_NAMES as CODE_CHECKS, code_checks
from cadedit.text.document import Document
from cadedit.errors import BudgetError
from cadedit.options import EditOptions, Mode, Sampling, TryState
from cadedit.text.oracle import oracle
from cadedit.prompt.messages import unquoted
from cadedit.tries.repair import repaired
from cadedit.text.resolve import resolve
from cadedit.results import Editor, EditResult
from cadedit.settings import CANDIDATES_BY, DEFAULT_TRIES, READ_BRANCHES, REJOIN_TRIES, TEST_TIMEOUT, default_candidates
from cadedit.decode.loop import sampler_for
from cadedit.errors import CadeditError
from cadedit.decode.where import locate


TRY_TEMPERATURE = 0.7
# A failed check that more room may cure: the candidate did not parse (a statement cut short) or
# failed the test (the fix is elsewhere). After one, the next try retypes the next wider scope
# (options.wider); after "no change" or an answer out of budget it stays where it was.
WIDEN_AFTER = ("syntax", "test")
# A scoped prompt that quotes the region right before the instruction (prompt.LAYOUTS "quoted", "auto")
# keeps a small model in its place, but invites a verbatim copy: after a candidate that changed
# nothing, the next try is asked without the quote (docs/measurements/scoped-edits.md).
UNQUOTED_AFTER = "change"


@dataclass(frozen=True)
class CheckPlan:
    """Which checks a candidate must pass."""

    allow_no_change: bool = False  # `--allow-no-change`, and `--check`, where no change is the point
    test: str | None = None  # a shell command run with the candidate in place; exit 0 passes
    test_timeout: float = TEST_TIMEOUT
    cwd: Path | None = None
    # The file on disk must still hold the document's bytes when a test starts (`cadedit fix`); the
    # hook edits the staged content, so the working-tree file may differ (it is restored all the same).
    expect_document_on_disk: bool = True
    # The file a test puts candidates into, when the document's path only names it (the hook names a
    # file with undecodable bytes as text for the prompt); None: the document's path.
    target: Path | None = None


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
    engine: dict | None = None  # what a shared engine reported for a try that failed there (out of budget)
    candidate: int = 0  # which of the candidates decoded side by side (1 ..), 0: the try's only one
    of: int = 0  # how many candidates the try decoded (0: one)
    logprob: float | None = None  # the model's summed log-probability of the candidate's picked tokens
    branch: int = 0  # the point a branched candidate branched at (pipeline.branch_key); 0: not a branch

    @property
    def passed(self) -> bool:
        return self.result is not None and self.error is None and all(c.passed or c.skipped for c in self.checks)

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not (c.passed or c.skipped))

    def summary(self) -> str:
        """One line: what this try's checks said."""
        if self.error:  # with a result: a candidate not checked (a duplicate, or one after the winner)
            return self.error if self.result is not None else f"failed: {self.error}"
        unchanged = self.result is not None and not self.result.changed
        # an allowed no-change passes "change", but "passed: change" would read as a change made
        passed = [c.name for c in self.checks if c.passed and not c.skipped and not (unchanged and c.name == "change")]
        failed = [f"{c.name} ({c.detail})" if c.detail else c.name for c in self.failed_checks]
        skipped = [
            f"{c.name} skipped ({c.detail})" if c.detail else f"{c.name} skipped" for c in self.checks if c.skipped
        ]
        text = ("failed: " + ", ".join(failed)) if failed else ("passed: " + (", ".join(passed) or "no checks"))
        return text + ("; " + "; ".join(skipped) if skipped else "")

    def to_json(self) -> dict:
        stats = self.result.stats if self.result else None
        return {
            "try": self.number,
            "candidate": self.candidate,
            "logprob": self.logprob,
            "temperature": self.temperature,
            "passed": self.passed,
            "error": self.error,
            "regions": [list(r) for r in self.regions],
            "changed": self.result.changed if self.result else None,
            "seconds": self.seconds,
            "checks": [
                {
                    "name": c.name,
                    "passed": c.passed,
                    "skipped": c.skipped,
                    "detail": c.detail,
                    "output_tail": c.output_tail,
                    "seconds": c.seconds,
                }
                for c in self.checks
            ],
            "tokens_new": stats.tokens_new if stats else None,
            "tokens_copied": stats.tokens_copied if stats else None,
            "tokens_prompt_fed": stats.tokens_prompt if stats else None,
            "tokens_prompt_reused": stats.tokens_reused if stats else None,
            **({"engine": engine} if (engine := self.result.engine if self.result else self.engine) else {}),
        }


@dataclass(frozen=True)
class Verified:
    tries: tuple[Try, ...]
    where: Any = None  # the where-step's cadedit.decode.where.Where, when one ran

    @property
    def answer(self) -> Try | None:
        """The try that passed, if any."""
        return next((t for t in self.tries if t.passed), None)

    @property
    def made(self) -> int:
        """How many tries were made (a batched try is one try of several candidates)."""
        return len({t.number for t in self.tries})

    @property
    def best(self) -> Try | None:
        """The passing try, else the failing candidate that got furthest: the most checks passed in
        their order (syntax, change, test: one that does not parse never reaches the test), the
        earliest among equals (the greedy ones)."""
        if self.answer is not None:
            return self.answer
        made = [t for t in self.tries if t.result is not None and t.error is None]
        return max(made, key=_progress, default=None)

    @property
    def closest(self) -> Try | None:
        """The passing try, else the failing candidate that broke nothing (its only failed check is the
        test) and changed the fewest lines, the earliest among equals; None when every one broke something
        (a destructive candidate is never offered as the one to start from)."""
        if self.answer is not None:
            return self.answer
        clean = [
            t
            for t in self.tries
            if t.result is not None
            and t.error is None
            and t.result.changed
            and {c.name for c in t.failed_checks} == {"test"}
        ]
        return min(clean, key=lambda t: changed_lines(t.result.document.text, t.result.new_text), default=None)

    @property
    def hint(self) -> str:
        """What to do when no try passed."""
        return self.hint_for("")

    def hint_for(self, instruction: str) -> str:
        """What to do when no try passed, by what the candidates failed and what the instruction asks:
        --allow-no-change only where the candidates changed nothing and the instruction may be met
        already (not for a bug fix, which must change something)."""
        if self.tries and all(t.error for t in self.tries) and any(t.hint for t in self.tries):
            return next(t.hint for t in self.tries if t.hint)
        failed = {c.name for t in self.tries for c in t.failed_checks}
        if failed <= {"change"} and failed:
            if _FIX.search(instruction):
                return "the model found nothing to change: name the function or line to fix, or raise --tries"
            return "raise --tries, or --allow-no-change if the file already does what the instruction asks"
        if "test" in failed and self.closest is not None:
            return "the test still fails: raise --tries or --candidates, or name the function or line to fix"
        if failed & set(CODE_CHECKS):
            return "the candidates broke the code (see the failed checks): narrow the instruction or raise --tries"
        return "raise --tries, or narrow the instruction"


_FIX = re.compile(r"\b(?:fix\w*|bugs?|broken|wrong|incorrect|error|fails?|failing)\b", re.I)


def changed_lines(before: str, after: str) -> int:
    """Lines removed plus lines added from before to after."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


CHECK_ORDER = ("placement", "syntax", *CODE_CHECKS, "change", "test")


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


def candidate_sampling(k: int, first: Sampling) -> Sampling:
    """Candidate 1 of a batched try: the try's own sampling (greedy by default); the others sampled
    (TRY_TEMPERATURE at least), each seeded by its number."""
    if k == 1:
        return first
    return Sampling(max(first.temperature, TRY_TEMPERATURE), first.top_p, (first.seed or 0) * 1000 + 500 + k)


def check_candidate(
    document: Document,
    new_text: str,
    plan: CheckPlan,
    on_test: Callable[[], None] | None = None,
    instruction: str = "",
    placement: str = "",
) -> tuple[Check, ...]:
    """Placement (a scoped answer that could not be placed exactly: `placement` says why), syntax, the
    code checks (cadedit.tries.code_checks: names, kept, body, public) and change first; the test command
    only when all pass (it is the slow one)."""
    syntax = syntax_check(document.path, document.text, new_text)
    # The code checks read the candidate's code: not one that does not parse.
    code = (
        ()
        if not (syntax.passed or syntax.skipped)
        else code_checks(document.path, document.text, new_text, instruction)
    )
    checks = (syntax, *code, change_check(document.text, new_text, plan.allow_no_change, instruction))
    if placement:
        checks = (placement_check(placement), *checks)
    if plan.test and all(c.passed or c.skipped for c in checks):
        if on_test is not None:
            on_test()
        expected = document.to_bytes() if plan.expect_document_on_disk else None
        candidate = Candidate.read(plan.target or document.path, new_text.encode("utf-8"), expected=expected)
        checks += (run_test(candidate, plan.test, plan.test_timeout, plan.cwd),)
    return checks


def repaired_result(document: Document, result: EditResult | None, instruction: str) -> EditResult | None:
    """The result with the imports its new names need and `__all__` after an asked-for deletion
    (cadedit.tries.repair: lines outside a scoped answer's region), its program recomputed to match."""
    if result is None:
        return None
    text = repaired(document.path, document.text, result.new_text, instruction)
    if text == result.new_text:
        return result
    program = oracle(document, Document.from_text(text, document.path))
    if resolve(program, document) != text:  # not expressible in the file's own lines: left as answered
        return result
    return replace(result, new_text=text, program=program)


@dataclass(frozen=True)
class Attempts:
    """How many tries an edit makes, and how each try makes its candidates."""

    tries: int = DEFAULT_TRIES
    candidates: int | None = None  # every try decodes this many (None: candidates_for's default)
    candidates_by: str | None = None  # settings.CANDIDATE_WAYS (None: settings.CANDIDATES_BY; _batched_try)


@dataclass(frozen=True)
class Reporters:
    """Who hears of the tries as they go (the CLI's progress lines): each try's candidates in order, the
    decode's steps, a test starting (with the try's number), the where-step's answer."""

    on_try: Callable[[Try], None] | None = None
    on_step: Callable | None = None
    on_test: Callable[[int], None] | None = None
    on_where: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class _Edit:
    """What every try of one edit shares."""

    editor: Editor
    document: Document
    instruction: str
    plan: CheckPlan
    on_step: Callable | None = None


@dataclass(frozen=True)
class _TryPlan:
    """One try as it is asked: its number, its options (sampling, scope, layout and TryState), its sampler
    factory (picks(number): one, a batched try's list of them, or None) and its test's reporter."""

    number: int
    options: EditOptions
    pick: Any = None
    on_test: Callable[[], None] | None = None


def edit_verified(
    document: Document,
    instruction: str,
    options: EditOptions,
    plan: CheckPlan,
    attempts: Attempts = Attempts(),
    *,
    editor: Editor,
    picks: Callable[[int], Any] | None = None,
    report: Reporters = Reporters(),
) -> Verified:
    """Up to attempts.tries tries until a candidate passes its checks; see the module docstring.
    editor: what decodes (results.Editor: pipeline.LocalEditor, the warm server's client or a shared
    engine's; no where-step but with a local model). attempts.candidates: every try decodes
    this many (None: candidates_for's default), made as attempts.candidates_by says. picks(k) may give
    try k's sampler factory (pipeline.SamplerFactory: the sampler from the prepared request; None: the try's
    sampling) or a batched try's list of `candidates` factories (one factory there: every candidate's),
    picks(0) the where-step's (loaded -> sampler, as where.where_sampler); tests script answers with it
    (local models only)."""
    candidates_by = attempts.candidates_by or CANDIDATES_BY
    edit = _Edit(editor, document, instruction, plan, report.on_step)
    where = _reported(_where(document, instruction, options, editor, picks(0) if picks else None), report.on_where)
    done: list[Try] = []
    last: Try | None = None  # what the next try learns from: the previous try, or its best candidate
    told = ""
    levels, expected = _ladder(document, options, plan, where)
    widen_after = set(WIDEN_AFTER) | ({UNQUOTED_AFTER} if where is not None else set())
    level, layout = 0, options.layout
    checked: dict[str, Try] = {}  # every candidate text checked so far: a later try's copy is not checked again
    branched: set[int] = set()  # every branch point taken so far: a later try branches elsewhere
    read = ()  # once try 1 failed (options.read_later): the points the later tries also branch at
    branches = attempts.candidates != 1 and candidates_by == "branch"  # the reading's points become branches
    for number in range(1, attempts.tries + 1):
        failed = {c.name for c in last.failed_checks} if last else set()
        widened = bool(failed & widen_after) and level < len(levels) - 1
        level += widened
        if UNQUOTED_AFTER in failed and not widened:  # copied where it was: ask without the quote
            layout = unquoted(layout)
        if (
            number == 2
            and where is None
            and (where := _reported(_read_later(document, options, plan, editor, picks, branches), report.on_where))
        ):
            read = where.spread[:READ_BRANCHES]
        located = where is not None and not where.later and level == 0  # this try retypes the line named
        current = replace(
            options,
            sampling=sampling_for(number, options.sampling),
            regions=levels[level],
            wider=(),
            layout=layout,
            locate=False,
            attempt=TryState(told, expected=expected[level] or read, branched=tuple(sorted(branched))),
        )
        on_test = report.on_test
        this = _TryPlan(
            number, current, picks(number) if picks else None, None if on_test is None else (lambda: on_test(number))
        )
        k = candidates_for(attempts.candidates, plan, editor, number, located)
        k += len(read) if k > 1 else 0  # the reading's branches beside the hesitations
        made = _batched_try(edit, this, k, checked, candidates_by) if k > 1 else [_one_try(edit, this)]
        done += made
        branched |= {attempt.branch for attempt in made if attempt.branch}
        for attempt in sorted(made, key=lambda t: t.candidate) if report.on_try else ():  # in order, not as checked
            report.on_try(attempt)
        last = Verified(tuple(made)).best or made[-1]
        told = _told(document, plan, last)
        if any(attempt.passed for attempt in made):
            break
    return Verified(tuple(done), where)


def _ladder(document: Document, options: EditOptions, plan: CheckPlan, where: Any) -> tuple[tuple, tuple]:
    """The tries' scopes, narrowest first, and the tokens each one's branches put in first: without the
    where-step the options' regions, then options.wider, none; after it where.Where.ladder's."""
    if where is None:
        levels = (options.regions, *options.wider)
        return levels, ((),) * len(levels)
    return where.ladder(document, bool(plan.test))


def candidates_for(asked: int | None, plan: CheckPlan, editor: Editor, number: int = 1, located: bool = False) -> int:
    """The candidates try `number` decodes: as asked, else settings.default_candidates by whether a
    test decides, whether the editor is a shared engine's (engine.EngineClient), the try's number and
    whether the where-step named its line."""
    if asked is not None:
        return asked
    return default_candidates(bool(plan.test), editor.shared_engine, number, located)


def _told(document: Document, plan: CheckPlan, last: Try) -> str:
    """What the next try is told of the last one: its failed checks, the test's frame in the edited
    file mapped to the retyped lines (checks.feedback), or that it ran out of budget."""
    if last.result is None:
        return "Your previous answer was too long and did not finish: reply with the edited code only."
    cwd = str(plan.cwd) if plan.cwd is not None else None
    return feedback(last.checks, Edited(document.path, document.text, last.result.new_text, last.regions, cwd))


def _where(document: Document, instruction: str, options: EditOptions, editor: Editor, make_sampler) -> Any:
    """The where-step's answer, or None when it does not apply (a remote editor, or the model could not
    answer); make_sampler(loaded) gives its sampler (None: where.where_sampler)."""
    loaded = editor.loaded
    if not (options.locate and options.regions) or loaded is None:
        return None

    pick = make_sampler(loaded) if make_sampler is not None else None
    try:
        where = locate(loaded, document, instruction, options.regions, pick, options.where_by, options.context)
    except CadeditError:  # e.g. out of its few tokens: the tries retype the definitions, as without it
        return None
    return where if where.lines else None


def _reported(where: Any, on_where: Callable[[Any], None] | None) -> Any:
    """`where` (a where.Where or None), told to on_where when there is one."""
    if where is not None and on_where is not None:
        on_where(where)
    return where


def _read_later(
    document: Document, options: EditOptions, plan: CheckPlan, editor: Editor, picks, branches: bool
) -> Any:
    """The definition read by surprise once try 1 failed its test (options.read_later; a local model; the
    tries branch: `branches`, not --candidates 1 nor --candidates-by sample), as a where.Where with
    later=True; None where it does not apply or found no surprising token."""
    if not (options.read_later and plan.test and branches):
        return None
    asked = replace(options, locate=True, where_by="surprise")
    where = _where(document, "", asked, editor, picks(0) if picks else None)
    return replace(where, later=True) if where is not None and where.spread else None


def candidate_factories(k: int, first: Sampling) -> list:
    """The sampler factories of `--candidates k` (pipeline.SamplerFactory, candidate_sampling each)."""
    return [_sampling_for(candidate_sampling(i, first)) for i in range(1, k + 1)]


def branch_factories(k: int, sampling: Sampling) -> list:
    """The sampler factories of k branched candidates: each goes on with the try's own sampling."""
    return [_sampling_for(sampling)] * k


def _sampling_for(sampling: Sampling):
    """A sampler factory: the sampling sampler."""

    def make_sampler(loaded, document, prepared):
        return sampler_for(sampling)

    return make_sampler


def _one_try(edit: _Edit, this: _TryPlan) -> Try:
    """One candidate and its checks."""
    start = time.perf_counter()
    current, document = this.options, edit.document
    sampling = current.sampling
    try:
        result = edit.editor.edit(document, edit.instruction, current, on_step=edit.on_step, make_sampler=this.pick)
    except BudgetError as exc:
        return Try(
            this.number,
            sampling.temperature,
            None,
            (),
            time.perf_counter() - start,
            exc.message,
            exc.hint,
            current.regions,
            getattr(exc, "engine", None),
        )
    result = repaired_result(document, result, edit.instruction)
    checks = check_candidate(document, result.new_text, edit.plan, this.on_test, edit.instruction, result.placement)
    return Try(this.number, sampling.temperature, result, checks, time.perf_counter() - start, regions=current.regions)


def _batched_try(edit: _Edit, this: _TryPlan, k: int, checked: dict[str, Try], by: str = CANDIDATES_BY) -> list[Try]:
    """Try `this.number` as k candidates, checked until one passes: with --test the first that passes its test,
    without it the highest-scoring that passes syntax and change; duplicates are checked once, and a copy
    of a candidate an earlier try checked (`checked`, by text; updated here) takes its checks, not run again.
    Returns every candidate as a Try, in the order checked (the ones after the winner unchecked).
    by "sample": all k decoded side by side, candidate 1 the try's own sampling and the others sampled,
    checked in the order of the model's log-probability of each (the greedy one first among equals).
    by "branch" (a local model, a fenced mode): candidate 1 is decoded and checked first; only if it
    fails are the others decoded, each branching from it where it hesitated (pipeline.edit_branches; in
    the first REJOIN_TRIES tries taking its rest once they write it again), then checked by log-probability."""
    current, number = this.options, this.number
    # A program's copies splice spans between its ids, which a branch cannot replay (fenced modes only).
    branched = by == "branch" and Mode(current.mode) is not Mode.PROGRAM
    samplings = [current.sampling if branched else candidate_sampling(i, current.sampling) for i in range(1, k + 1)]
    start = time.perf_counter()
    picks = this.pick
    scripted = list(picks) if isinstance(picks, (list, tuple)) else [picks] * k if picks is not None else None
    checker = _Checker(edit, this, k, tuple(samplings), checked)
    editor, document, instruction = edit.editor, edit.document, edit.instruction
    if branched:
        rejoined = replace(current, attempt=replace(current.attempt, rejoin=number <= REJOIN_TRIES))
        found = editor.edit_branches(
            document,
            instruction,
            rejoined,
            k,
            lambda first: checker.check(0, first, time.perf_counter() - start),
            on_step=edit.on_step,
            factories=scripted or branch_factories(k, current.sampling),
        )
        rest = range(1, len(found))
    else:
        found = editor.edit_candidates(
            document,
            instruction,
            current,
            k,
            on_step=edit.on_step,
            factories=scripted or candidate_factories(k, current.sampling),
        )
        rest = range(k)
    decode_seconds = time.perf_counter() - start - checker.seconds  # candidate 1's checks are its own
    for i in sorted(rest, key=lambda i: -found[i].logprob):
        checker.check(i, found[i], decode_seconds)
    return checker.made


class _Checker:
    """A batched try's candidates checked one by one (_batched_try): each as a Try into `made`, the texts
    seen in this try and the seconds spent in checks so far (not decode time)."""

    def __init__(self, edit: _Edit, this: _TryPlan, k: int, samplings: tuple[Sampling, ...], checked: dict[str, Try]):
        self.edit, self.this, self.k, self.samplings, self.checked = edit, this, k, samplings, checked
        self.made: list[Try] = []
        self.seen: dict[str, int] = {}
        self.seconds = 0.0

    def check(self, i: int, c, decode_seconds: float) -> bool:
        """Candidate i+1's Try into `made`; whether it passed."""
        edit, made, seen, number = self.edit, self.made, self.seen, self.this.number
        t, candidate = self.samplings[i].temperature, i + 1
        common = dict(
            regions=self.this.options.regions, candidate=candidate, of=self.k, logprob=c.logprob, branch=c.branch
        )
        winner = next((m.candidate for m in made if m.passed), 0)
        c = replace(c, result=repaired_result(edit.document, c.result, edit.instruction))
        if c.result is None:
            error = getattr(c.error, "message", str(c.error))
            made.append(Try(number, t, None, (), decode_seconds, error, getattr(c.error, "hint", None), **common))
        elif winner or c.result.new_text in seen:
            why = (
                f"the same as candidate {seen[c.result.new_text]}"
                if c.result.new_text in seen
                else f"not checked: candidate {winner} passed first"
            )
            made.append(Try(number, t, c.result, (), decode_seconds, why, **common))
        elif (earlier := self.checked.get(c.result.new_text)) is not None:  # failed in an earlier try: its checks stand
            seen[c.result.new_text] = candidate
            which = f"try {earlier.number}" + (f"'s candidate {earlier.candidate}" if earlier.candidate else "")
            carried = tuple(replace(check, seconds=0.0) for check in earlier.checks)  # not run this time
            made.append(Try(number, t, c.result, carried, decode_seconds, f"the same as {which}", **common))
        else:
            seen[c.result.new_text] = candidate
            began = time.perf_counter()
            checks = check_candidate(
                edit.document, c.result.new_text, edit.plan, self.this.on_test, edit.instruction, c.result.placement
            )
            self.seconds += time.perf_counter() - began
            made.append(Try(number, t, c.result, checks, decode_seconds + time.perf_counter() - began, **common))
            self.checked[c.result.new_text] = made[-1]
        return made[-1].passed
