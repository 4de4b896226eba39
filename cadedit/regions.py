"""Scoped answers: the region texts a model retypes, and the whole file they make back.

Contract: scoped_source(document, fence, regions, headers) is what an answer that changes nothing
prints (each region without the indentation it shares, its closing fence, the next region's
forced header); scoped_text(document, regions, headers, fence, answer) is the new file in display
form: the lines outside the regions as they are, each region as the answer says after four
repairs a small model needs — its shared indentation put back, lines it skipped at either end
filled in, lines it retyped past either end dropped, a missing final newline kept. Pure: no torch.
"""

from __future__ import annotations

import os

from cadedit.document import Document, line_terminator
from cadedit.fence import output_text


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
    return "\n".join((line[len(indent) :] if line.startswith(indent) else line) if line.strip() else line.strip(" \t")
                     for line in text.split("\n"))


def _leading(text: str) -> str:
    first = next((line for line in text.split("\n") if line.strip()), "")
    return first[: len(first) - len(first.lstrip(" \t"))]


def reindent(answer: str, region: str) -> str:
    """A region's answer with the region's own indentation back: when the answer's first line lacks
    some of the indentation the region's first line has (the model wrote the region dedented, as
    it was shown), that part goes in front of each of its non-blank lines; an answer that kept the
    indentation is left as it is."""
    have, want = _leading(answer), _leading(region)
    missing = want[len(have) :] if want.startswith(have) else ""
    if not missing or len(missing) > len(common_indent(region)):
        return answer
    return "\n".join(missing + line if line.strip() else line for line in answer.split("\n"))


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
    spans = sorted([(1, min(n_lines, CONTEXT_HEAD))]
                   + [(max(1, a - around), min(n_lines, b + around)) for a, b in regions])
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


def scoped_source(document: Document, fence: str, regions, headers) -> str:
    """What an answer that changes nothing prints: each region's lines (without the indentation the
    whole region shares) and closing fence, headers between."""
    parts = []
    for k, ((a, b), indent) in enumerate(zip(regions, region_indents(document, regions))):
        body = dedent(document.display_text(a, b), indent)
        parts.append(body + ("\n" if body and not body.endswith("\n") else "") + fence + "\n")
        if k + 1 < len(regions):
            parts.append(headers[k])
    return "".join(parts)


TAIL_LINES = 40  # of the file after a scoped region, offered as drafts to a model that runs past it


def scoped_tail(document: Document, region: tuple[int, int], indent: str) -> str:
    """The file's lines after the last region, dedented as the region is shown: what a model that runs
    past its region retypes (the verify drafter proposes them; scoped_text trims the run past)."""
    end = region[1]
    if end >= document.n_lines:
        return ""
    return dedent(document.display_text(end + 1, min(document.n_lines, end + TAIL_LINES)), indent)


def scoped_text(document: Document, regions, headers, fence: str, answer: str) -> str:
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
    out, at = [], 1
    for k, (a, b) in enumerate(regions):
        out.append(document.display_text(at, a - 1))
        region = document.display_text(a, b)
        if k < len(segments):
            text = output_text(segments[k], fence, unterminated=b == document.n_lines and last_unterminated)
            text = reindent(text, region)
            if b < document.n_lines and text and not text.endswith("\n"):
                text += "\n"  # a region inside the file ends its last line before the copied lines go on
            out.append(_trim_overlap(_fill_skipped(text, region), document, a, b))
        else:
            out.append(region)
        at = b + 1
    out.append(document.display_text(at, document.n_lines))
    return "".join(out)


def _fill_skipped(answer: str, region: str) -> str:
    """A region's answer that starts (or ends) at one of the region's own lines further in gets the
    lines it skipped back: a model told about one line often retypes from that line on, and the
    lines before it would otherwise be deleted. The answer is placed in the region by its first
    (last) line that equals exactly one region line, within its first (last) three lines."""
    new, old = answer.splitlines(keepends=True), region.splitlines(keepends=True)
    got, had = [line.strip() for line in new], [line.strip() for line in old]
    if not any(got) or not any(had):
        return answer
    first_text = next(i for i, t in enumerate(had) if t)
    last_text = max(i for i, t in enumerate(had) if t)
    start = _anchor(got, had, range(min(3, len(got))))
    if start is not None and start > first_text:
        new, got = old[:start] + new, had[:start] + got
    end = _anchor(got[::-1], had[::-1], range(min(3, len(got))))
    if end is not None:
        end = len(had) - 1 - end  # the region line the answer's last line stands for
        if end < last_text:
            if new and not new[-1].endswith("\n"):
                new[-1] += "\n"
            new += old[end + 1 :]
    return "".join(new)


def _anchor(got: list[str], had: list[str], positions) -> int | None:
    """Where line 0 of `got` stands in `had`: from the first of `positions` whose text occurs in
    `had` exactly once."""
    for j in positions:
        if got[j]:
            found = [k for k, t in enumerate(had) if t == got[j]]
            if len(found) == 1:
                return found[0] - j if found[0] >= j else None
    return None


def _trim_overlap(text: str, document: Document, a: int, b: int) -> str:
    """A region's new text without the lines a model retyped past either end of it.

    Its last lines that equal the file's next lines after the region (blank lines aside) are
    copied from the file anyway, so they are dropped, with the blank lines before them when the
    region itself did not end in one; the same for its first lines and the lines before it."""
    new = text.splitlines(keepends=True)
    bodies = document.display_lines()  # once: display_text() recomputes them on every call
    after = _ends(bodies[b : b + len(new) + 8])
    cut = _overlap(_ends(new), after)
    if cut is not None:
        new = new[:cut]
        if bodies[b - 1].strip():
            while new and not new[-1].strip():
                new.pop()
    before = _ends(bodies[max(0, a - 1 - len(new) - 8) : a - 1])
    cut = _overlap(_ends(new)[::-1], before[::-1])
    if cut is not None:
        new = new[len(new) - cut :]
        if bodies[a - 1].strip():
            while new and not new[0].strip():
                new.pop(0)
    return "".join(new)


def _overlap(new: list[str], following: list[str]) -> int | None:
    """Where `new` starts running into `following`: the index in new of the first of its last k
    non-blank lines, for the largest k with those lines equal to following's first k non-blank ones."""
    at = [i for i, line in enumerate(new) if line.strip()]
    nonblank = [line for line in following if line.strip()]
    for k in range(min(len(at), len(nonblank)), 0, -1):
        if [new[i] for i in at[-k:]] == nonblank[:k]:
            return at[-k]
    return None


def _ends(lines: list[str]) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in lines]
