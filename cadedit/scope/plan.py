"""Scope: the line regions of a file that an edit may change; the rest is copied by construction.

Contract: `resolve_scope(document, instruction, lines=..., names=...)` returns sorted, merged
regions (1-based, inclusive, counted as Document counts lines), or no regions = the whole file.
The first source that yields regions wins: (1) `--lines` and `--scope NAME` (a NAME this file
does not define is a ScopeError); (2) line references in the instruction (`line 95`, `lines 10-20`,
`L95`, `x.py:95:7`, traceback frames), a ScopeError when past the end; (3) definitions of this
file that the instruction names. Pure: no torch, no transformers.

Decisions: a line reference inside a function or method widens to the innermost one (decorators
and attached comments included); a line at top level or in a class body stays that line only.
When definitions are unknown (the file does not parse, no parser for its language, tree-sitter
missing: see outline.py),
instruction-derived scope is the whole file with a note saying why, since a line alone could be
too narrow to hold the fix; `--lines` still applies and `--scope NAME` is a ScopeError.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice

from cadedit.text.document import Document
from cadedit.errors import ScopeError
from cadedit.options import EditOptions, Mode
from cadedit.scope.insert import insertion
from cadedit.scope.outline import LANGUAGES, Definition, Outline, display_name, outline, parser_of
from cadedit.settings import READ_LATER


@dataclass(frozen=True)
class Region:
    start: int
    end: int
    reason: str  # "--lines 10-20", "line 95 in the instruction, in function parse_args", ...
    insert_after: int | None = None  # an insertion point's region: the new code goes after this line (0: the top)

    @property
    def span(self) -> str:
        return f"line {self.start}" if self.start == self.end else f"lines {self.start}-{self.end}"


@dataclass(frozen=True)
class Scope:
    regions: tuple[Region, ...] = ()  # sorted and merged; empty = the whole file
    note: str = ""  # why the scope is the whole file, for the caller to show
    # Wider scopes, each holding the one before: for a line reference inside a function, the
    # statement the line is on, the block around it, then the function. A try whose candidate did
    # not parse or failed the test retypes the next one (cadedit.tries.loop). Empty: nothing wider.
    wider: tuple[tuple[Region, ...], ...] = ()
    # The regions are definitions the instruction names and no line is named: with --where, find the
    # line first (cadedit.decode.where), then climb from it.
    locate: bool = False

    @property
    def whole_file(self) -> bool:
        return not self.regions

    def describe(self) -> str:
        """One line for stderr: "scope: lines 88-104 (function parse_args)"."""
        if self.whole_file:
            return "scope: whole file" + (f" ({self.note})" if self.note else "")
        return "scope: " + ", ".join(f"{r.span} ({r.reason})" for r in self.regions)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The regions as (start, end) pairs, as EditOptions.regions takes them."""
        return tuple((r.start, r.end) for r in self.regions)

    @property
    def wider_ranges(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The wider scopes as (start, end) pairs, as EditOptions.wider takes them."""
        return tuple(tuple((r.start, r.end) for r in regions) for regions in self.wider)

    def as_json(self) -> list[dict]:
        return [
            {"start": r.start, "end": r.end, "reason": r.reason}
            | ({"insert_after": r.insert_after} if r.insert_after is not None else {})
            for r in self.regions
        ]


def resolve_scope(
    document: Document,
    instruction: str,
    *,
    lines: Sequence[str] = (),
    names: Sequence[str] = (),
    language: str | None = None,
) -> Scope:
    """The regions an edit of `document` may change, from the CLI options or the instruction."""
    if language is not None and language not in LANGUAGES:
        raise ScopeError(f"language {language!r}: expected one of {', '.join(LANGUAGES)}")
    language = language or parser_of(document.path)
    # 1. Explicit options: --lines is taken as given, --scope must name a definition here.
    if lines or names:
        regions = [_option_region(spec, document) for spec in lines]
        if names:
            found = outline(document, language)
            regions += [r for name in names for r in _name_regions(name, found, document)]
        return Scope(merge_regions(regions))
    # 2. Line references in the instruction: the lines themselves, then the statements they are on,
    #    then the functions around them (a traceback frame: the function from the start).
    refs = find_line_refs(instruction, document.path)
    for ref in refs:
        _check_in_file(ref.start, ref.end, f"{ref.label} in the instruction", document)
    found = outline(document, language)
    if refs:
        if not found.known:
            return Scope(note=found.problem)
        ladders = [_ladder(ref, found) for ref in refs]
        levels = [merge_regions(ladder[k] for ladder in ladders) for k in range(len(ladders[0]))]
        distinct = [regions for k, regions in enumerate(levels) if k == 0 or _spans(regions) != _spans(levels[k - 1])]
        return Scope(distinct[0], wider=tuple(distinct[1:]))
    # 3. An instruction that adds code: the lines where it goes (scope/insert.py), with the definitions
    #    it names besides the place; else 4. the definitions of this file that the instruction names.
    if not found.known:
        return Scope(note=found.problem)
    point = None if _about_whole_file(instruction, found) else insertion(document, instruction, found, language)
    if point is not None:
        place = Region(point.start, point.end, point.reason, point.after)
        named = [Region(d.start, d.end, d.describe()) for d in mentioned_definitions(point.rest, found)]
        return Scope(merge_regions([place, *named]))
    regions = [Region(d.start, d.end, d.describe()) for d in mentioned_definitions(instruction, found)]
    if not regions:
        return Scope(note="the instruction names no line or definition of this file")
    merged = merge_regions(regions)
    return Scope(merged, locate=True)


def referenced_lines(instruction: str, path: str = "<text>", most: int = 20) -> tuple[int, ...]:
    """The lines of this file the instruction names by number (the prompt quotes them), at most `most`."""
    return tuple(islice((k for ref in find_line_refs(instruction, path) for k in range(ref.start, ref.end + 1)), most))


def parse_line_ranges(spec: str) -> tuple[int, int]:
    """One `--lines` value, "A-B" or "A", as (start, end); a ScopeError for anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[-\u2013:]\s*(\d+)\s*)?", spec)
    if not m:
        raise ScopeError(f"--lines {spec}: not a line range", hint="give --lines A-B or --lines A, e.g. --lines 10-20")
    start, end = _number(m.group(1)), _number(m.group(2) or m.group(1))
    if start < 1:
        raise ScopeError(f"--lines {spec}: lines are numbered from 1")
    if start > end:
        raise ScopeError(f"--lines {spec}: start after end", hint=f"did you mean --lines {end}-{start}?")
    return start, end


def merge_regions(regions: Iterable[Region]) -> tuple[Region, ...]:
    """Sort regions and merge the ones that overlap or touch, keeping every reason once."""
    # Each merged region's reasons are kept apart until the end: joining and splitting the text at
    # each merge was quadratic in an instruction naming thousands of lines.
    merged: list[tuple[int, int, dict[str, None], int | None]] = []
    for r in sorted(regions, key=lambda r: (r.start, r.end)):
        if merged and r.start <= merged[-1][1] + 1:
            start, end, reasons, after = merged[-1]
            reasons.update(dict.fromkeys(r.reason.split("; ")))
            merged[-1] = (start, max(end, r.end), reasons, after if after is not None else r.insert_after)
        else:
            merged.append((r.start, r.end, dict.fromkeys(r.reason.split("; ")), r.insert_after))
    return tuple(Region(start, end, "; ".join(reasons), after) for start, end, reasons, after in merged)


def span_text(a: int, b: int) -> str:
    """Lines a..b as people write them: "line 57" or "lines 57-63"."""
    return f"line {a}" if a == b else f"lines {a}-{b}"


def merge_spans(spans: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """(start, end) line spans sorted, the ones that overlap or touch merged (as merge_regions)."""
    return tuple((r.start, r.end) for r in merge_regions(Region(a, b, "") for a, b in spans))


def _option_region(spec: str, document: Document) -> Region:
    start, end = parse_line_ranges(spec)
    label = f"--lines {start}" if start == end else f"--lines {start}-{end}"
    _check_in_file(start, end, label, document)
    return Region(start, end, label)


def _name_regions(name: str, found: Outline, document: Document) -> list[Region]:
    if not found.known:
        raise ScopeError(f"--scope {name}: {found.problem}", hint="give the lines instead, e.g. --lines 10-20")
    matches = _definitions_named(_split_name(name), found, strict=True)
    if not matches:
        defined = ", ".join(d.qualname for d in found.definitions[:8]) or "none"
        more = ", ..." if len(found.definitions) > 8 else ""
        raise ScopeError(
            f"--scope {name}: {display_name(document)} defines no function, method or class named {name}",
            hint=f"defined there: {defined}{more}",
        )
    return [Region(d.start, d.end, d.describe()) for d in matches]


def _check_in_file(start: int, end: int, label: str, document: Document) -> None:
    if start < 1:
        raise ScopeError(f"{label}: lines are numbered from 1")
    if end > document.n_lines:
        n = document.n_lines
        raise ScopeError(
            f"{label}: {display_name(document)} has {n} line{'s' if n != 1 else ''}",
            hint="check the line number, or give the lines with --lines A-B",
        )


# -- line references in the instruction ----------------------------------------------------------


@dataclass(frozen=True)
class LineRef:
    start: int
    end: int
    label: str  # how the instruction wrote it, normalised: "line 95", "L10-L20", "app.py:95"

    @property
    def traceback(self) -> bool:
        """A frame of a traceback: where the error surfaced, not necessarily where the fix goes."""
        return self.label.startswith('File "')


# "10-20", "10 to 20", "10 through line 20": a range separator, optionally "line" again.
_SEP = r"\s*(?:-|\u2013|\u2014|\.\.|to|through|until)\s*(?:lines?\s+)?"
_NUM = rf"\d+(?:{_SEP}\d+)?"
_TRACEBACK = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<a>\d+)')
_PATH = re.compile(r"(?<![^\s\"'`(\[{<,;=])(?P<path>(?:[A-Za-z]:)?[^\s:\"'`()\[\]{}<>,;=]+):(?P<a>\d+)(?::\d+)?(?!\d)")
_WORDS = re.compile(rf"\blines?\s+(?:no\.?\s*)?(?P<list>{_NUM}(?:\s*(?:,\s*(?:and\s+)?|and\s+|&\s*){_NUM})*)", re.I)
# "L2 norm" and "L1 cache" are not lines; GitHub-style L95 / L10-L20 are.
_L_FORM = re.compile(
    r"(?<![\w$])L(?P<a>\d+)(?:\s*-\s*L?(?P<b>\d+))?(?![\w$])"
    r"(?!\s*-?\s*(?:norm|loss|cache|distance|penalty|regulari[sz]ation|error)s?\b)"
)
_RANGE_SPLIT = re.compile(_SEP, re.I)
_LIST_SPLIT = re.compile(r"\s*(?:,\s*(?:and\s+)?|and\s+|&\s*)", re.I)


def find_line_refs(instruction: str, path: str = "<text>") -> tuple[LineRef, ...]:
    """Line references in an instruction, in the order written; frames of other files are skipped."""
    refs: list[tuple[int, LineRef]] = []
    # Spans already read (sorted, never overlapping), so `line 95` of a traceback counts once; a
    # bisection per match keeps an instruction of thousands of references linear-ish, not quadratic.
    starts: list[int] = []
    ends: list[int] = []

    def fresh(m: re.Match) -> bool:
        at = bisect_left(starts, m.end())
        if at and ends[at - 1] > m.start():
            return False
        starts.insert(at, m.start())
        ends.insert(at, m.end())
        return True

    for m in _TRACEBACK.finditer(instruction):
        if fresh(m) and _same_file(m.group("path"), path, strict=False):
            a = _number(m.group("a"))
            refs.append((m.start(), LineRef(a, a, f'File "{m.group("path")}", line {a}')))
    for m in _PATH.finditer(instruction):
        if _same_file(m.group("path"), path, strict=True) and fresh(m):
            a = _number(m.group("a"))
            refs.append((m.start(), LineRef(a, a, f"{m.group('path')}:{a}")))
    for m in _WORDS.finditer(instruction):
        if fresh(m) and _same_file(_prose_file(instruction, m) or path, path, strict=False):
            refs += [(m.start(), ref) for ref in _word_refs(m.group("list"))]
    for m in _L_FORM.finditer(instruction):
        if fresh(m):
            a, b = _number(m.group("a")), _number(m.group("b") or m.group("a"))
            refs.append((m.start(), _ordered(a, b, f"L{a}" if a == b else f"L{a}-L{b}")))
    return tuple(ref for _, ref in sorted(refs, key=lambda pair: pair[0]))


_FILE_NAME = r"[\w./\\-]*\w\.[A-Za-z]\w{0,5}"
_FILE_AFTER = re.compile(rf"\s*(?:of|in)\s+(?:the\s+file\s+)?[`'\"]?(?P<file>{_FILE_NAME})\b")
_FILE_BEFORE = re.compile(rf"(?P<file>{_FILE_NAME})[`'\"]?(?:\s*,)?\s*(?:at\s+|on\s+)?$")


def _prose_file(instruction: str, m: re.Match) -> str | None:
    """The file a prose line reference names right next to it: "line 4 of test_m.py", "test_m.py line 4"."""
    after = _FILE_AFTER.match(instruction, m.end())
    if after:
        return after.group("file")
    before = _FILE_BEFORE.search(instruction[max(0, m.start() - 80) : m.start()])
    return before.group("file") if before else None


def _word_refs(spec: str) -> list[LineRef]:
    out = []
    for item in _LIST_SPLIT.split(spec):
        bounds = [_number(n) for n in _RANGE_SPLIT.split(item.strip())]
        a, b = bounds[0], bounds[-1]
        out.append(_ordered(a, b, span_text(a, b)))
    return out


# More digits than any file's line count has; Python refuses int() of more than 4,300 digits anyway.
MAX_LINE_DIGITS = 12


def _number(digits: str) -> int:
    """A line number as written; a one-line ScopeError for one longer than any file could reach."""
    digits = digits.strip()
    if len(digits) > MAX_LINE_DIGITS:
        raise ScopeError(
            f"line number {digits[:MAX_LINE_DIGITS]}... ({len(digits):,} digits): more lines than any file has",
            hint="name the line by its number in the file, or give the lines with --lines A-B",
        )
    return int(digits)


def _ordered(a: int, b: int, label: str) -> LineRef:
    if a > b:
        raise ScopeError(f"{label} in the instruction: start after end")
    return LineRef(a, b, label)


def _same_file(ref_path: str, path: str, *, strict: bool) -> bool:
    """Whether a path in the instruction is this document (any file when its path is unknown)."""
    base = re.split(r"[\\/]", ref_path)[-1]
    if not path.startswith("<"):
        return base == os.path.basename(path)
    # No path known: a traceback frame always counts; `word:12` must look like a file (`app.py:12`).
    return not strict or re.fullmatch(r"[\w.-]*\w\.[A-Za-z]\w*", base) is not None


def _widen(ref: LineRef, found: Outline) -> Region:
    """A reference grown to the innermost function or method around each of its ends."""
    around = [d for d in (_innermost(ref.start, found), _innermost(ref.end, found)) if d is not None]
    reason = f"{ref.label} in the instruction"
    if not around:
        return Region(ref.start, ref.end, reason)
    names = " and ".join(dict.fromkeys(d.describe() for d in around))
    start = min([ref.start] + [d.start for d in around])
    end = max([ref.end] + [d.end for d in around])
    return Region(start, end, f"{reason}, in {names}")


# A statement longer than this (a table, a long literal) is not retyped whole for a line of it.
MAX_STATEMENT_LINES = 20


def _spans(regions: Sequence[Region]) -> list[tuple[int, int]]:
    return [(r.start, r.end) for r in regions]


def plan_edit(
    document: Document,
    instruction: str,
    options: EditOptions,
    lines: Sequence[str] = (),
    names: Sequence[str] = (),
    scoping: bool = True,
    where: bool = False,
    read: bool = READ_LATER,
) -> tuple[EditOptions, Scope | None]:
    """What every edit does first (`cadedit fix`, the hook, the server's clients, the benchmarks): the
    scope from --lines/--scope or the instruction, then the options for it. No scope (None) when
    scoping is off (--no-scope) or the mode writes an edit program, which always sees the whole file.
    where: find the line first (cadedit.decode.where) when the scope is a definition and no line is named
    (`cadedit fix --where`; off by default: docs/measurements/where-step.md); read: else, read the
    definition for the later tries' branches (options.read_later; settings.READ_LATER by default)."""
    if not scoping or options.mode == Mode.PROGRAM:
        return options, None
    scope = resolve_scope(document, instruction, lines=lines, names=names)
    scoped = scoped_options(options, scope, instruction, document.path)
    return replace(scoped, locate=scoped.locate and where, read_later=scoped.locate and not where and read), scope


def scoped_options(options: EditOptions, scope: Scope, instruction: str, path: str) -> EditOptions:
    """`options` for an edit in `scope`, as `cadedit fix` and the benchmarks make it: the regions, the
    wider scopes of later tries and the lines the instruction names (the whole file: unchanged)."""
    if scope.whole_file:
        return options
    return replace(
        options,
        regions=scope.ranges,
        wider=scope.wider_ranges,
        referenced=referenced_lines(instruction, path),
        locate=scope.locate,
    )


def located_levels(
    document: Document,
    lines: Sequence[int],
    regions: Sequence[tuple[int, int]],
    language: str | None = None,
    found: Outline | None = None,
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The tries' scopes after the where-step named `lines` inside `regions` (cadedit.decode.where), narrowest
    first: the statements those lines are on, the functions around them, then `regions` themselves;
    each level holds the one before, and a level equal to the one before drops out. The block level
    of a line reference's ladder is left out: a wrong line costs one try before the function."""
    whole = tuple((a, b) for a, b in regions)
    found = found if found is not None else outline(document, language or parser_of(document.path))
    inside = [k for k in lines if any(a <= k <= b for a, b in whole)]
    if not found.known or not inside:
        return (whole,)
    ladders = [_ladder(LineRef(k, k, f"line {k}"), found) for k in inside]
    levels: list[tuple[tuple[int, int], ...]] = []
    for candidates in (
        [ladder[1] for ladder in ladders],
        [ladder[3] for ladder in ladders],
        [Region(a, b, "") for a, b in whole],
    ):
        level = merge_spans([*((r.start, r.end) for r in candidates), *(levels[-1] if levels else ())])
        if not levels or level != levels[-1]:
            levels.append(level)
    return tuple(levels)


def _ladder(ref: LineRef, found: Outline) -> tuple[Region, Region, Region, Region]:
    """A line reference's scopes, narrowest first: the lines it names; the statements they are on (a
    compound statement's header only, `if x:`; the line itself where no statement starts or runs:
    `else:`, a comment); the innermost compound statement around those of at most MAX_BLOCK_LINES
    (none: the statements again, so the level drops out); the function (_widen). A traceback frame,
    a definition's own header line and a line outside functions are _widen at every step."""
    wide = _widen(ref, found)
    ends = [_statement_lines(line, found) for line in (ref.start, ref.end)]
    if ref.traceback or any(span is None for span in ends):
        return wide, wide, wide, wide
    function = _innermost(ref.start, found)  # not None: both ends are inside a function
    where = f", in {function.describe()}"
    line = Region(ref.start, ref.end, f"{ref.label} in the instruction{where}")
    many = "s" if ends[0] != ends[1] else ""
    narrow = Region(
        min(ref.start, ends[0][0]),
        max(ref.end, ends[1][1]),
        f"{ref.label} in the instruction, the statement{many} there{where}",
    )
    # A block shorter than MAX_BLOCK_LINES that holds `narrow` starts at most that many lines above it.
    around = [
        t
        for t in found.statements_starting(narrow.start - MAX_BLOCK_LINES, narrow.start)
        if narrow.end <= t.end
        and t.head_end < t.end
        and t.start > function.start
        and (t.start, t.end) != (narrow.start, narrow.end)
        and t.end - t.start < MAX_BLOCK_LINES
    ]
    best = min(around, key=lambda t: t.end - t.start, default=None)
    block = (
        narrow
        if best is None
        else Region(best.start, best.end, f"{ref.label} in the instruction, the block there{where}")
    )
    return line, narrow, block, wide


# The block level of the ladder: the innermost compound statement (if, for, while, with, try)
# around the statement, when it is at most this long; a longer one is skipped for the function.
MAX_BLOCK_LINES = 40


def _statement_lines(line: int, found: Outline) -> tuple[int, int] | None:
    """The lines of the statement `line` is on, inside a function; None outside functions or on a
    definition's header (its lines before the body: widen to the definition)."""
    function = _innermost(line, found)
    if function is None:
        return None
    # The shortest statement on the line is inside the function if any statement there is: a longer
    # one that starts before the function holds it whole.
    best = found.innermost_statement(line)
    best = best if best is not None and best.start > function.start else None
    first = found.first_statement_after(function.start)
    if best is None and line <= (line if first is None else first):
        return None  # the def line, its decorators, its docstring-free header
    if best is None:
        return line, line
    span = (best.start, best.head_end) if line <= best.head_end else (line, line)
    return span if span[1] - span[0] < MAX_STATEMENT_LINES else (line, line)


def _innermost(line: int, found: Outline) -> Definition | None:
    return found.innermost_function(line)


# -- names in the instruction --------------------------------------------------------------------

_IDENT = r"#?[^\W\d][\w$]*|\$[\w$]*"
_CHAIN = re.compile(rf"(?<![\w$.#])(?:{_IDENT})(?:(?:\.|::)(?:{_IDENT}))*")


# An instruction about the whole file, or one whose change must reach every use of a name, is not
# narrowed to the definitions it names: "add docstrings to every public function", "rename sub
# everywhere", "update the callers". "every read method" still names the methods called read.
_WHOLE_FILE = re.compile(r"\b(?:everywhere|throughout|whole\s+file|entire\s+file|callers?|call\s+sites?)\b", re.I)
_EVERY_KIND = re.compile(
    r"\b(?:every|each|all|any)\s+(?:the\s+)?(?P<words>(?:[\w$]+\s+){0,2}?)(?:functions?|methods?|class(?:es)?|definitions?)\b",
    re.I,
)


def _about_whole_file(instruction: str, found: Outline) -> bool:
    if _WHOLE_FILE.search(instruction):
        return True
    names = {d.name for d in found.definitions}
    return any(not set(m.group("words").split()) & names for m in _EVERY_KIND.finditer(instruction))


def mentioned_definitions(instruction: str, found: Outline) -> list[Definition]:
    """Definitions the instruction names as whole identifiers: `Class.method`, `method`, `Class`.

    Every match counts, plain words too: in "load_settings should close the file" a method
    `close` adds its region. A scope larger than needed only copies less by construction; one
    that misses the function to change makes the edit impossible, so no match is dropped. For
    the same reason none counts when the instruction speaks of every function, all uses, or a
    rename (its callers change too): that edit is the whole file's.
    """
    if _about_whole_file(instruction, found):
        return []
    out: dict[Definition, None] = {}
    for chain in dict.fromkeys(m.group(0) for m in _CHAIN.finditer(instruction)):  # each name once
        for d in _definitions_named(_split_name(chain), found):
            out[d] = None
    return list(out)


def _split_name(name: str) -> tuple[str, ...]:
    return tuple(part for part in re.split(r"\.|::", name.strip()) if part)


def _definitions_named(parts: tuple[str, ...], found: Outline, strict: bool = False) -> list[Definition]:
    """A qualified name matches the tail of qualnames; failing that (unless strict: --scope names exactly
    one thing, and `Parser.parse` is never `Lexer.parse`), each part is a bare name (an instruction's
    mention: a scope too wide copies less, one that misses the function makes the edit impossible)."""
    if len(parts) > 1:
        qualified = [d for d in found.named(parts[-1]) if d.parts[-len(parts) :] == parts]
        if qualified or strict:
            return qualified
    named = {d for part in set(parts) for d in found.named(part)}
    return sorted(named, key=lambda d: (d.start, -d.end, d.qualname))  # the outline's order
