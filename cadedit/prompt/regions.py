"""Scoped answers: the region texts a model retypes, and the whole file they make back.

Contract: scoped_source(document, fence, regions, headers) is what an answer that changes nothing
prints (each region without the indentation it shares, its closing fence, the next region's
forced header); scoped_text(document, regions, headers, fence, answer) is the new file in display
form: the lines outside the regions as they are, each region as the answer says after the repairs a
small model needs — lines it retyped past either end dropped, its shared indentation put back,
lines it skipped at either end filled in, a missing final newline kept — and, when a repair cannot
place an answer exactly (it has only some of the lines it seems to skip, or retypes the line before
its region in other indentation), what went wrong: the try fails on it rather than nest or
duplicate code. Pure: no torch.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass

from cadedit.text.document import Document, line_terminator
from cadedit.prompt.fence import output_text
from cadedit.prompt.messages import region_header


def common_indent(text: str) -> str:
    """The whitespace every non-blank line of text starts with."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return ""
    prefix = os.path.commonprefix(lines)
    return prefix[: len(prefix) - len(prefix.lstrip(" \t"))]


def dedent(text: str, indent: str) -> str:
    """text without `indent` at the start of its non-blank lines that have it (blank lines become
    empty; a line indented less stays as it is)."""
    return "\n".join(
        (line[len(indent) :] if line.startswith(indent) else line) if line.strip() else line.strip(" \t")
        for line in text.split("\n")
    )


def _leading(text: str) -> str:
    first = next((line for line in text.split("\n") if line.strip()), "")
    return first[: len(first) - len(first.lstrip(" \t"))]


# A scoped prompt shows the file's first lines (its imports) beside the lines around each region;
# pieces closer than this many lines apart are shown as one.
CONTEXT_HEAD = 20
_CONTEXT_JOIN = 8


def context_spans(n_lines: int, regions, around: int | None) -> tuple[tuple[int, int], ...]:
    """The line ranges a scoped prompt shows for context: the whole file when `around` is None or
    the window would cover it, else the first CONTEXT_HEAD lines and `around` lines on each side of
    every region, merged."""
    if around is None or n_lines == 0:
        return ((1, n_lines),) if n_lines else ()
    spans = sorted(
        [(1, min(n_lines, CONTEXT_HEAD))] + [(max(1, a - around), min(n_lines, b + around)) for a, b in regions]
    )
    merged = [spans[0]]
    for a, b in spans[1:]:
        if a <= merged[-1][1] + _CONTEXT_JOIN:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    if merged[0][0] <= 1 + _CONTEXT_JOIN and merged[-1][1] >= n_lines - _CONTEXT_JOIN and len(merged) == 1:
        return ((1, n_lines),)
    return tuple(merged)


def region_indents(document: Document, regions) -> tuple[str, ...]:
    return tuple(common_indent(document.display_text(a, b)) for a, b in regions)


def scoped_source(document: Document, fence: str, regions, headers, indents: tuple[str, ...] | None = None) -> str:
    """What an answer that changes nothing prints: each region's lines (without the indentation the
    whole region shares: `indents`, else region_indents) and closing fence, headers between."""
    parts = []
    for k, ((a, b), indent) in enumerate(zip(regions, indents or region_indents(document, regions))):
        body = dedent(document.display_text(a, b), indent)
        parts.append(body + ("\n" if body and not body.endswith("\n") else "") + fence + "\n")
        if k + 1 < len(regions):
            parts.append(headers[k])
    return "".join(parts)


TAIL_LINES = 40  # of the file after a scoped region, offered as drafts to a model that runs past it


@dataclass(frozen=True)
class ScopedLayout:
    """A scoped answer before the model writes it: the header that opens it (forced), the headers
    between regions, the answer that changes nothing, and the file after the last region."""

    opening: str
    headers: tuple[str, ...]
    source: str
    tail: str
    # The same answer and tail in the file's own indentation ("" where no region is indented as a
    # whole): a small model asked for a method without its class's indentation often keeps it.
    indented_source: str = ""
    indented_tail: str = ""


def scoped_layout(document: Document, fence: str, regions) -> ScopedLayout:
    """The layout of a scoped answer over `regions` (each shown without the indentation it shares)."""
    indents = region_indents(document, regions)
    headers = tuple(region_header(a, b, fence, document.path, indent) for (a, b), indent in zip(regions, indents))
    source = scoped_source(document, fence, regions, headers[1:], indents)
    tail = scoped_tail(document, regions[-1], indents[-1])
    if not any(indents):
        return ScopedLayout(headers[0], headers[1:], source, tail)
    unindented = ("",) * len(regions)
    return ScopedLayout(
        headers[0],
        headers[1:],
        source,
        tail,
        scoped_source(document, fence, regions, headers[1:], unindented),
        scoped_tail(document, regions[-1], ""),
    )


def scoped_tail(document: Document, region: tuple[int, int], indent: str) -> str:
    """The file's lines after the last region, dedented as the region is shown: what a model that runs
    past its region retypes (the verify drafter proposes them; scoped_text trims the run past)."""
    end = region[1]
    if end >= document.n_lines:
        return ""
    return dedent(document.display_text(end + 1, min(document.n_lines, end + TAIL_LINES)), indent)


@dataclass(frozen=True)
class Placed:
    """A scoped answer placed in the file: the whole new file in display form, and why an answer could
    not be placed exactly ("" when it was; else text places it without the repair that could not)."""

    text: str
    problem: str = ""


def scoped_text(document: Document, regions, headers, fence: str, answer: str) -> Placed:
    """The whole new file in display form: the lines outside the regions as they are, each region as
    its segment of the answer says (a segment the answer never reached stays as it was)."""
    segments, rest = [], answer
    for header in headers:
        cut = rest.find(header)
        if cut < 0:
            break
        segments.append(rest[:cut])
        rest = rest[cut + len(header) :]
    segments.append(rest)
    last_unterminated = bool(document.lines) and not line_terminator(document.lines[-1])
    bodies = document.display_lines()  # once: display_text() recomputes them on every call
    out, at, problems = [], 1, []
    for k, ((a, b), indent) in enumerate(zip(regions, region_indents(document, regions))):
        out.append(document.display_text(at, a - 1))
        region = document.display_text(a, b)
        if k < len(segments):
            text = output_text(segments[k], fence, unterminated=b == document.n_lines and last_unterminated)
            if b < document.n_lines and text and not text.endswith("\n"):
                text += "\n"  # a region inside the file ends its last line before the copied lines go on
            text, problem = _place(text, region, bodies, (a, b), indent)
            out.append(text)
            problems += [problem] if problem else []
        else:
            out.append(region)
        at = b + 1
    out.append(document.display_text(at, document.n_lines))
    return Placed("".join(out), "; ".join(problems))


def _place(text: str, region: str, bodies: list[str], span: tuple[int, int], indent: str) -> tuple[str, str]:
    """One region's answer as the region's new text, after the repairs a small model needs, in this
    order: lines it retyped past either end dropped (as the file has them, or as they are shown:
    without the region's indentation); the region's indentation put back when the answer is written
    as shown; lines it skipped at either end filled in. Returns the text and what could not be placed
    exactly ("" when all could)."""
    a, b = span
    old, new = _split(region), _split(text)
    new = _trim_after(new, old, bodies[b : b + len(new) + 8], indent, bodies[b - 1])
    new = _trim_before(new, old, bodies[max(0, a - 1 - len(new) - 8) : a - 1], indent, bodies[a - 1])
    shift, problem = _shift(new, old, indent, span)
    new = [shift + line if line.strip() else line for line in new]
    new, unfilled = _fill_skipped(new, old, a)
    return "".join(new), problem or unfilled or _retyped_before(new, old, bodies, span)


def _split(text: str) -> list[str]:
    """Lines ending in "\\n" (the last one may not): "\\n" only ends a line here, as in the answer."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def _body(line: str) -> str:
    return line.removesuffix("\n")


def _fits(line: str, file_line: str, indent: str) -> bool:
    """An answer line is this file line as the file has it, or as a scoped answer shows it (without
    the region's indentation; a line indented less is shown as it is)."""
    line, file_line = _body(line), _body(file_line)
    return line == file_line or (bool(indent) and file_line.startswith(indent) and line == file_line[len(indent) :])


def _trim_after(new: list[str], old: list[str], after: list[str], indent: str, region_last: str) -> list[str]:
    """new without the lines a model retyped past the region's end: its last non-blank lines that are
    the file's next ones (blank lines aside) go, with the blank lines before them when the region
    itself did not end in one (so do blank lines it ends with when the file's next line is blank).
    Lines that may also be the region's own last ones stay, unless what is left still ends as the
    region does (a file whose next lines repeat the region's last ones)."""
    cut = _overlap(new, after, indent)
    if cut is not None:
        ran, kept = [x for x in new[cut:] if x.strip()], [x for x in new[:cut] if x.strip()]
        own = [x for x in old if x.strip()]
        may_be_own = _all_fit(ran, own[len(own) - len(ran) :], indent)
        if may_be_own and not (kept and own and _fits(kept[-1], own[-1], indent)):
            return new
        new = new[:cut]
    if region_last.strip() and (cut is not None or (after and not after[0].strip())):
        while new and not new[-1].strip():
            new.pop()
    return new


def _trim_before(new: list[str], old: list[str], before: list[str], indent: str, region_first: str) -> list[str]:
    """new without the lines a model retyped before the region's start (_trim_after, mirrored)."""
    flipped = _trim_after(new[::-1], old[::-1], before[::-1], indent, region_first)
    return flipped[::-1]


def _all_fit(lines: list[str], file_lines: list[str], indent: str) -> bool:
    return len(lines) == len(file_lines) and all(_fits(x, y, indent) for x, y in zip(lines, file_lines))


def _overlap(new: list[str], following: list[str], indent: str) -> int | None:
    """Where `new` starts running into `following`: the index in new of the first of its last k
    non-blank lines, for the largest k with those lines fitting following's first k non-blank ones."""
    at = [i for i, line in enumerate(new) if line.strip()]
    nonblank = [line for line in following if line.strip()]
    for k in range(min(len(at), len(nonblank)), 0, -1):
        if _all_fit([new[i] for i in at[-k:]], nonblank[:k], indent):
            return at[-k]
    return None


def _shift(new: list[str], old: list[str], indent: str, span: tuple[int, int]) -> tuple[str, str]:
    """What goes in front of each answer line, and a problem when no reading of its indentation fits.

    The answer is written with the file's indentation or as the region is shown (without its shared
    indentation). Its first line says which when it is a region line (text found once in the region)
    as the file has it or as shown. Else an answer whose first line is indented less than the
    region's first line and that has a line out of the region's block (were it the file's) is written
    as shown; else its region lines say which when they agree, and an answer they do not place that
    fits both readings (or neither) cannot be placed exactly."""
    if not indent or not any(line.strip() for line in new):
        return "", ""  # a region as the file has it, or an answer without a line to indent (the region deleted)
    once = {text: line for text, line in ((line.strip(), line) for line in old) if text}
    counts = Counter(line.strip() for line in old)
    said = {}  # per answer line that is a region line: "kept", "shown" or "" (neither)
    for k, line in enumerate(new):
        if line.strip() and counts[line.strip()] == 1:
            own = _body(once[line.strip()])
            said[k] = "kept" if _body(line) == own else "shown" if _body(line) == own[len(indent) :] else ""
    first = next((k for k, line in enumerate(new) if line.strip()), None)
    if said.get(first):
        return (indent if said[first] == "shown" else ""), ""
    have, want = _leading("".join(new)), _leading("".join(old))
    missing = want[len(have) :] if want.startswith(have) else ""
    inside = all(line.startswith(indent) for line in new if line.strip())
    if missing and not inside:
        return indent, ""
    votes = set(said.values()) - {""}
    if votes == {"shown"}:
        return indent, ""
    if votes == {"kept"} or (inside and not missing):
        return "", ""
    return "", (
        f"lines {span[0]}-{span[1]}: the answer's indentation fits both the file's and the region's as "
        "shown, or neither, so it cannot be placed in them exactly"
    )


def _fill_skipped(new: list[str], old: list[str], a: int) -> tuple[list[str], str]:
    """A region's answer that starts (or ends) at one of the region's own lines further in gets the
    lines it skipped back: a model told about one line often retypes from that line on, and the
    lines before it would otherwise be deleted. The answer is placed in the region by its first
    (last) line that equals exactly one region line, within its first (last) three lines. An answer
    that has all the skipped lines elsewhere moved them (it is placed as it is); one that has some
    of them cannot be placed exactly (the problem says so)."""
    got, had = [line.strip() for line in new], [line.strip() for line in old]
    if not any(got) or not any(had):
        return new, ""
    first_text = next(i for i, t in enumerate(had) if t)
    last_text = max(i for i, t in enumerate(had) if t)
    start = _anchor(got, had, range(min(3, len(got))))
    if start is not None and start > first_text:
        found = _found(had[:start], got)
        if found is None:
            return new, (
                f"lines {a}-{a + len(old) - 1}: the answer starts with line {a + start} yet has only "
                f"some of lines {a}-{a + start - 1}, so it cannot be placed in them exactly"
            )
        if not found:
            new, got = old[:start] + new, had[:start] + got
    end = _anchor(got[::-1], had[::-1], range(min(3, len(got))))
    if end is not None and len(had) - 1 - end < last_text:
        end = len(had) - 1 - end  # the region line the answer's last line stands for
        found = _found(had[end + 1 :], got)
        if found is None:
            return new, (
                f"lines {a}-{a + len(old) - 1}: the answer ends with line {a + end} yet has only some "
                f"of lines {a + end + 1}-{a + len(old) - 1}, so it cannot be placed in them exactly"
            )
        if not found:
            if new and not new[-1].endswith("\n"):
                new = new[:-1] + [new[-1] + "\n"]
            new = new + old[end + 1 :]
    return new, ""


def _found(skipped: list[str], got: list[str]) -> bool | None:
    """Whether the answer has the skipped lines' texts: all of them (True), none (False), some (None)."""
    have = set(got)
    present = [t in have for t in skipped if t]
    return True if all(present) else False if not any(present) else None


def _anchor(got: list[str], had: list[str], positions) -> int | None:
    """Where line 0 of `got` stands in `had`: from the first of `positions` whose text occurs in
    `had` exactly once."""
    for j in positions:
        if got[j]:
            found = [k for k, t in enumerate(had) if t == got[j]]
            if len(found) == 1:
                return found[0] - j if found[0] >= j else None
    return None


def _retyped_before(new: list[str], old: list[str], bodies: list[str], span: tuple[int, int]) -> str:
    """A problem when the placed text starts with the file's line before the region in other
    indentation (a model that retyped the enclosing line, which the trim could not recognise, would
    nest it inside itself); "" otherwise. Lines without a letter or digit (a brace) are not judged."""
    a, b = span
    first = next((line.strip() for line in new if line.strip()), "")
    own = next((line.strip() for line in old if line.strip()), "")
    prior = next((k for k in range(a - 2, -1, -1) if bodies[k].strip()), None)
    if prior is None or not re.search(r"\w", first) or first != bodies[prior].strip() or first == own:
        return ""
    return (
        f"lines {a}-{b}: the answer retypes line {prior + 1} ({first}), which is outside them, in other "
        "indentation, so it cannot be placed in them exactly"
    )
