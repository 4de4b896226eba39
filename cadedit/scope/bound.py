"""The retype bound: how much a plan makes the model retype, estimated before the model loads, and
the refusal past the bound (no silent whole-file edits).

Contract: `retype_of(document, scope)` is what a plan retypes (None or no regions: the whole file),
in lines and tokens estimated from its bytes (settings.RETYPE_BYTES_PER_TOKEN; the tokenizer is not
loaded yet). `check_retype(document, scope, bound, allowed_by)` returns "" within the bound, a note to
show when over it but allowed (the user named the scope: --no-scope, --lines, --scope), and raises
a RetypeBoundError otherwise, whose hint says what it would retype and the --max-retype that allows it.
A bound of N lines allows N × MAX_RETYPE_TOKENS / MAX_RETYPE_LINES tokens; None: no bound. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cadedit.errors import RetypeBoundError
from cadedit.options import EditOptions, Mode
from cadedit.scope.outline import display_name
from cadedit.scope.plan import Scope, plan_edit, span_text
from cadedit.settings import MAX_RETYPE_LINES, MAX_RETYPE_TOKENS, RETYPE_BYTES_PER_TOKEN
from cadedit.text.document import Document


@dataclass(frozen=True)
class Retype:
    what: str  # "the whole file", "lines 10-400"
    lines: int
    tokens: int  # estimated from the bytes

    @property
    def whole_file(self) -> bool:
        return self.what == "the whole file"

    def text(self) -> str:
        return f"{self.what} ({self.lines:,} line{'s' if self.lines != 1 else ''}, about {self.tokens:,} tokens)"

    def least_bound(self) -> int:
        """The smallest --max-retype that allows this retype."""
        return max(self.lines, math.ceil(self.tokens * MAX_RETYPE_LINES / MAX_RETYPE_TOKENS), 1)

    def over(self, bound: int | None) -> bool:
        return bound is not None and self.least_bound() > bound

    def to_json(self) -> dict:
        return {"what": self.what, "lines": self.lines, "tokens_estimate": self.tokens}


def retype_of(document: Document, scope: Scope | None) -> Retype:
    if scope is None or scope.whole_file:
        spans, what = [(1, document.n_lines)] if document.n_lines else [], "the whole file"
    else:
        spans = list(scope.ranges)
        what = ", ".join(span_text(a, b) for a, b in spans)
        if len(spans) > 3:  # a pasted list of lines: not every span in a one-line message
            what = f"{len(spans):,} regions in {span_text(spans[0][0], spans[-1][1])}"
    size = sum(len(document.display_text(a, b).encode("utf-8", "surrogatepass")) for a, b in spans)
    return Retype(what, sum(b - a + 1 for a, b in spans), math.ceil(size / RETYPE_BYTES_PER_TOKEN))


def bound_text(bound: int) -> str:
    return f"{bound:,} lines or {bound * MAX_RETYPE_TOKENS // MAX_RETYPE_LINES:,} tokens"


def check_retype(document: Document, scope: Scope | None, bound: int | None, allowed_by: str = "") -> str:
    """ "" within the bound; over it, a note when `allowed_by` (the option that named the scope) allows
    it, else a RetypeBoundError saying what the plan would retype and how to allow it."""
    retype = retype_of(document, scope)
    if not retype.over(bound):
        return ""
    over = f"retypes {retype.text()}, over the bound of {bound_text(bound)}"
    if allowed_by:
        return f"{display_name(document)}: {over}; allowed by {allowed_by}"
    why = f" ({scope.note})" if scope is not None and scope.whole_file and scope.note else ""
    narrower = (
        "say where the change goes: a line, a definition, --lines A-B or --scope NAME"
        if retype.whole_file
        else "name fewer lines or definitions"
    )
    raise RetypeBoundError(
        f"{document.path}: the plan {over}{why}; nothing was edited",
        hint=f"allow it with --max-retype {retype.least_bound()} (or --max-retype all), or {narrower}",
    )


@dataclass(frozen=True)
class Planned:
    """An edit's plan checked against the retype bound, before the model loads (`cadedit fix`)."""

    options: EditOptions
    scope: Scope | None
    retype: Retype
    note: str = ""  # over the bound, allowed by the option that named the scope

    @property
    def one_try(self) -> bool:
        """A whole-file retype past the default bound: a failed try is not rerun as it was."""
        return self.options.mode != Mode.PROGRAM and self.retype.whole_file and self.retype.over(MAX_RETYPE_LINES)

    def tries(self, asked: int, given: bool) -> int:
        """The tries to make: one for a whole-file retype past the default bound unless --tries was given."""
        return 1 if self.one_try and not given else asked


def plan_bounded(
    document: Document,
    instruction: str,
    options: EditOptions,
    bound: int | None,
    lines: Sequence[str] = (),
    names: Sequence[str] = (),
    scoping: bool = True,
    where: bool = False,
) -> Planned:
    """plan_edit's plan, refused (RetypeBoundError) past `bound` unless the user named the scope; an edit
    program (program mode) copies the file by construction and retypes none of it."""
    options, scope = plan_edit(document, instruction, options, lines, names, scoping, where)
    retype = retype_of(document, scope)
    if options.mode == Mode.PROGRAM:
        return Planned(options, scope, retype)
    allowed_by = "--no-scope" if not scoping else "--lines/--scope" if lines or names else ""
    return Planned(options, scope, retype, check_retype(document, scope, bound, allowed_by))
