"""The deterministic merge of a sketch (cadedit.text.sketch) into its file: no model, milliseconds.

Contract: merge(lines, sketch) is the Merged file, or UnplacedError naming the sketch's lines that match
no place of the file or more than one equally well; nothing is ever guessed. How each part is placed:

- a SEARCH/REPLACE block or a diff hunk: its old lines as one run of the file's lines, exactly, else
  equal but for whitespace, else fuzzy within a bound (the same number of lines, each at least
  FUZZY_LINE alike and on average FUZZY_MEAN, the best clearly ahead of the next: FUZZY_MARGIN). Two
  exact places and a hunk whose header names one of them: that one (as `patch` does). Parts must not
  overlap.
- a stretch of a lazy sketch (the lines between two markers): its first and last runs of lines that are
  lines of the file (whitespace aside) anchor it; of the places those anchors allow, after the stretch
  before it, the one that takes the fewest lines out and in wins, and a tie is refused. The stretch
  replaces the file's lines from its first anchor to its last; a marker keeps the file's lines between
  two stretches. A stretch that anchors nowhere goes at the file's start or end when no marker stands
  on that side, and is refused otherwise. A stretch's lines that are file lines are written as the file
  has them; the others move by the indentation the stretch drifted by (its lines' most common shift
  against the file's), so a method shown unindented lands in its class.
- a whole sketch (no markers): when it holds at least half of the file's lines it is the new file;
  else it is one stretch (a snippet), placed as above, the rest of the file kept.

fidelity(lines, sketch, result) is "" or why the result is not the file and the sketch merged: a line the
sketch wrote that is missing, or a line from neither. Pure: no torch.
"""

from __future__ import annotations

import difflib
from collections import Counter
import re
from dataclasses import dataclass

from cadedit.errors import UnplacedError
from cadedit.text.document import line_body, line_terminator
from cadedit.text.sketch import Replacement, Sketch, Stretch

FUZZY_LINE = 0.6
FUZZY_MEAN = 0.85
FUZZY_MARGIN = 0.05
WHOLE_SHARE = 0.5  # of the file's non-blank lines a marker-free sketch must hold to be the whole file
EDGE_ALIKE = 0.85  # a sketch line this alike the file's line beside its stretch's anchors replaces it
_MAX_PAIRS = 400  # anchor pairs a stretch may leave open; more is a stretch too common to place
# A line that starts a definition in Python or JavaScript: new code may go in before it.
_DEFINITION = re.compile(
    r"^\s*(?:@|(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function)\b|"
    r"(?:export\s+)?(?:const|let|var)\s+[\w$]+\s*=\s*(?:async\s*)?(?:\(|function\b|[\w$]+\s*=>))"
)


@dataclass(frozen=True)
class Placed:
    """Where one part of the sketch went: its sketch lines, the file's lines it replaced, and how."""

    sketch_lines: tuple[int, int]  # 1-based, inclusive
    start: int  # 0-based index of the first file line replaced
    end: int  # one past the last (start == end: an insertion)
    new: tuple[str, ...]  # the lines put there, terminators included
    how: str  # "exact", "whitespace", "fuzzy", "header", "start", "end", "whole"

    def to_json(self) -> dict:
        return {
            "sketch_lines": list(self.sketch_lines),
            "file_lines": [self.start + 1, self.end],
            "how": self.how,
        }


@dataclass(frozen=True)
class Merged:
    text: str
    form: str
    placed: tuple[Placed, ...]


def _norm(line: str) -> str:
    return " ".join(line.split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def merge(lines: tuple[str, ...], sketch: Sketch) -> Merged:
    """The file (its lines with terminators) with the sketch merged in (module docstring)."""
    newline = next((line_terminator(x) for x in lines if line_terminator(x)), "\n")
    bodies = tuple(line_body(x) for x in lines)
    if not sketch.stretches and not sketch.replacements:
        raise UnplacedError(
            "the sketch holds no code, only markers or nothing: it does not say what changes; nothing was written",
            hint="give the changed lines with a line of the file around them",
        )
    if sketch.form == "whole" and _is_whole(bodies, sketch.stretches[0]):
        stretch = sketch.stretches[0]
        placed = (Placed(_span(stretch), 0, len(lines), tuple(x + newline for x in stretch.lines), "whole"),)
    elif sketch.stretches:
        placed = _place_stretches(bodies, sketch.stretches, newline)
    else:
        placed = tuple(sorted((_place_replacement(bodies, r, newline) for r in sketch.replacements), key=_order))
        for a, b in zip(placed, placed[1:]):
            if b.start < a.end:
                raise UnplacedError(
                    f"sketch lines {_lines_text(a.sketch_lines)} and {_lines_text(b.sketch_lines)} change the same "
                    f"lines of the file ({b.start + 1}-{a.end}); nothing was written",
                    hint="give one block for those lines",
                )
    return Merged(_joined(lines, placed, newline), sketch.form, placed)


def _order(p: Placed) -> tuple[int, int]:
    return (p.start, p.end)


def _joined(lines: tuple[str, ...], placed: tuple[Placed, ...], newline: str) -> str:
    out: list[str] = []
    k = 0
    for p in placed:
        out.extend(lines[k : p.start])
        out.extend(p.new)
        k = max(k, p.end)
    out.extend(lines[k:])
    if out and lines and not line_terminator(lines[-1]) and line_terminator(out[-1]):
        out[-1] = line_body(out[-1])  # the file ended without a newline: so does the result
    elif out and not line_terminator(out[-1]):
        out[-1] += newline if len(out) > 1 or lines else ""
    return "".join(out)


def _span(stretch: Stretch) -> tuple[int, int]:
    return (stretch.first, stretch.first + max(len(stretch.lines), 1) - 1)


def _lines_text(span: tuple[int, int]) -> str:
    return str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"


def _is_whole(bodies: tuple[str, ...], stretch: Stretch) -> bool:
    kept = Counter(_norm(x) for x in stretch.lines if x.strip())
    mine = Counter(_norm(x) for x in bodies if x.strip())
    return not mine or sum((kept & mine).values()) >= WHOLE_SHARE * sum(mine.values())


# -- SEARCH/REPLACE blocks and diff hunks ------------------------------------------------------------


def _place_replacement(bodies: tuple[str, ...], r: Replacement, newline: str) -> Placed:
    span = (r.first, r.last)
    what = "SEARCH text" if r.at is None else "hunk"
    if not any(x.strip() for x in r.old):
        if not any(x.strip() for x in bodies):
            return Placed(span, 0, len(bodies), tuple(x + newline for x in r.new), "whole")
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: the {what} is empty, so it says nothing about where it goes; "
            "nothing was written",
            hint="give the lines to replace (or a marker sketch of the file)",
        )
    for how, key in (("exact", str), ("whitespace", _norm)):
        starts = _runs(bodies, r.old, key)
        if len(starts) > 1 and how == "exact" and r.at is not None and r.at - 1 in starts:
            starts, how = [r.at - 1], "header"
        if len(starts) > 1:
            raise UnplacedError(
                f"sketch lines {_lines_text(span)}: the {what} matches the file at {len(starts)} places (lines "
                + ", ".join(str(s + 1) for s in starts[:5])
                + "); nothing was written",
                hint="give more lines around the change, so that it matches one place",
            )
        if starts:
            return _replaced(bodies, r, starts[0], how, span, newline)
    start = _fuzzy(bodies, r.old, span, what)
    return _replaced(bodies, r, start, "fuzzy", span, newline)


def _runs(bodies: tuple[str, ...], run: tuple[str, ...], key) -> list[int]:
    """Every start where `run` is a run of the file's lines, compared by key."""
    want = [key(x) for x in run]
    firsts = [k for k, x in enumerate(bodies[: len(bodies) - len(run) + 1]) if key(x) == want[0]]
    return [k for k in firsts if all(key(bodies[k + i]) == want[i] for i in range(1, len(run)))]


def _fuzzy(
    bodies: tuple[str, ...],
    old: tuple[str, ...],
    span: tuple[int, int],
    what: str,
    mean: float = FUZZY_MEAN,
    none_ok: bool = False,
) -> int | None:
    """The one start where old's lines are alike the file's within the bound, or UnplacedError (None where
    none is alike and none_ok)."""
    where: dict[str, list[int]] = {}
    for k, x in enumerate(bodies):
        where.setdefault(_norm(x), []).append(k)
    votes = Counter(k - i for i, x in enumerate(old) for k in where.get(_norm(x), ()) if x.strip())
    starts = set(votes) or _alike_starts(bodies, old)
    scored = []
    for start in {s for s in starts if 0 <= s <= len(bodies) - len(old)}:
        ratios = [
            difflib.SequenceMatcher(None, _norm(a), _norm(b), autojunk=False).ratio()
            for a, b in zip(old, bodies[start : start + len(old)])
        ]
        if min(ratios) >= FUZZY_LINE:
            scored.append((sum(ratios) / len(ratios), start))
    scored.sort(reverse=True)
    if (not scored or scored[0][0] < mean) and none_ok:
        return None
    if not scored or scored[0][0] < mean:
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: the {what} matches no lines of the file"
            + (f" (the closest, at line {scored[0][1] + 1}, is {scored[0][0]:.0%} alike)" if scored else "")
            + "; nothing was written",
            hint="the file may have changed since the sketch was written: ask again with the current file",
        )
    if len(scored) > 1 and scored[0][0] - scored[1][0] < FUZZY_MARGIN:
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: the {what} is about as alike lines {scored[0][1] + 1} and "
            f"{scored[1][1] + 1} of the file; nothing was written",
            hint="give more lines around the change, so that it matches one place",
        )
    return scored[0][1]


def _alike_starts(bodies: tuple[str, ...], old: tuple[str, ...]) -> set[int]:
    """Starts where old's first non-blank line is at least FUZZY_LINE alike the file's (no line matched)."""
    i = next((k for k, x in enumerate(old) if x.strip()), 0)
    want = _norm(old[i])
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(want)
    out = set()
    for k, x in enumerate(bodies):
        matcher.set_seq1(_norm(x))
        if (
            matcher.real_quick_ratio() >= FUZZY_LINE
            and matcher.quick_ratio() >= FUZZY_LINE
            and matcher.ratio() >= FUZZY_LINE
        ):
            out.add(k - i)
    return out


def _replaced(
    bodies: tuple[str, ...], r: Replacement, start: int, how: str, span: tuple[int, int], newline: str
) -> Placed:
    """The new lines for old found at start: a new line that is one of old's kept lines (context) is written
    as the file has it there (so stale context stays the file's); the others move by the indentation the old
    lines drifted by."""
    found = bodies[start : start + len(r.old)]
    drift = _drift(list(zip(r.old, found)))
    new = [_shift(x, drift, found) for x in r.new]
    matcher = difflib.SequenceMatcher(None, r.old, r.new, autojunk=False)
    for m in matcher.get_matching_blocks():
        for i in range(m.size):
            new[m.b + i] = found[m.a + i]
    return Placed(span, start, start + len(r.old), tuple(x + newline for x in new), how)


def _drift(pairs: list[tuple[str, str]]) -> int:
    """The most common indentation shift of sketch lines against the file lines they match (sketch - file);
    of shifts as common, the smallest."""
    shifts = Counter(_indent(s) - _indent(f) for s, f in pairs if s.strip() and _norm(s) == _norm(f))
    return max(shifts.items(), key=lambda kv: (kv[1], -abs(kv[0])))[0] if shifts else 0


def _shift(line: str, drift: int, found) -> str:
    if not drift or not line.strip():
        return line if line.strip() else ""
    if drift > 0:
        return line[min(drift, _indent(line)) :]
    unit = "\t" if any(x.startswith("\t") for x in found) else " "
    return unit * -drift + line


# -- stretches of a lazy sketch --------------------------------------------------------------------


def _place_stretches(bodies: tuple[str, ...], stretches: tuple[Stretch, ...], newline: str) -> tuple[Placed, ...]:
    where: dict[str, list[int]] = {}
    for k, x in enumerate(bodies):
        where.setdefault(_norm(x), []).append(k)
    placed: list[Placed] = []
    lo = 0
    for n, stretch in enumerate(stretches):
        p = _place_stretch(bodies, where, stretch, lo, newline, first=n == 0, last=n == len(stretches) - 1)
        placed.append(p)
        lo = p.end
    return tuple(placed)


def _place_stretch(
    bodies: tuple[str, ...], where: dict, stretch: Stretch, lo: int, newline: str, first: bool, last: bool
) -> Placed:
    span = _span(stretch)
    full = tuple(line for line in stretch.lines)
    a = next(k for k, x in enumerate(full) if x.strip())
    b = max(k for k, x in enumerate(full) if x.strip())
    lines = full[a : b + 1]
    head = _anchor(lines, where, lo, range(len(lines)))
    if head is None:
        return _unanchored(bodies, stretch, full, lines, lo, newline, first, last)
    tail = _anchor(lines, where, lo, range(len(lines) - 1, -1, -1))
    (h_from, h_to, h_starts), (t_from, t_to, t_starts) = head, tail
    pairs = [
        (hs, ts + (t_to - t_from))
        for hs in h_starts
        for ts in t_starts
        if (t_from > h_from and ts >= hs + (h_to - h_from)) or (t_from == h_from and ts == hs)
    ]
    if len(pairs) > _MAX_PAIRS:
        raise _ambiguous(span, sorted({hs for hs, _ in pairs}))
    if not pairs:
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: this stretch's first and last lines of the file stand in the other "
            "order in the file; nothing was written",
            hint="give the stretch as the file has it, or more lines around the change",
        )
    start, end = _cheapest(bodies, lines[h_from : t_to + 1], pairs, span)
    drift = _indent(lines[h_from]) - _indent(bodies[start])
    anchored = {i for i in (*range(h_from, h_to + 1), *range(t_from, t_to + 1)) if lines[i].strip()}
    if len(anchored) == 1 and drift and len(lines) > 1 and not _defined(lines[min(anchored)]):
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: the one line of this stretch that is a line of the file (and no "
            "definition) stands at another depth there, so it may not be that line; nothing was written",
            hint="give more lines of the file around the change",
        )
    start = _leading(bodies, lines[:h_from], start, lo, drift, (span[0] + a, span[0] + a + h_from - 1), a > 0)
    closed = b < len(full) - 1
    end, pad = _trailing(bodies, lines[t_to + 1 :], end, drift, (span[0] + a + t_to + 1, span[0] + b), closed)
    new = _written(lines, bodies[start : end + 1]) + ([""] if pad else [])
    return Placed(span, start, end + 1, tuple(x + newline for x in new), "anchors")


def _unanchored(bodies, stretch: Stretch, full, lines, lo: int, newline: str, first: bool, last: bool) -> Placed:
    """A stretch none of whose lines is a line of the file: in place of the one run of file lines it is alike
    (a changed line shown without context); else at the file's start or end when no marker stands on that
    side; else UnplacedError."""
    span = _span(stretch)
    start = _fuzzy(bodies, lines, span, "stretch", EDGE_ALIKE, none_ok=True)
    if start is None:
        if not stretch.marker_before and first:
            return Placed(span, lo, lo, tuple(x + newline for x in full[: len(full) - _blank_tail(full)]), "start")
        if not stretch.marker_after and last:
            return Placed(span, len(bodies), len(bodies), tuple(x + newline for x in full), "end")
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: no line of this stretch is a line of the file, and markers on both "
            "sides leave open where it goes; nothing was written",
            hint="give a line of the file before or after the new code",
        )
    found = bodies[start : start + len(lines)]
    shifts = Counter(_indent(x) - _indent(f) for x, f in zip(lines, found) if x.strip())
    drift = shifts.most_common(1)[0][0]
    if len(shifts) > 1 or (drift and len(lines) == 1):
        raise UnplacedError(
            f"sketch lines {_lines_text(span)}: no line of this stretch is a line of the file, and the lines it is "
            f"alike (from line {start + 1}) stand at another depth; nothing was written",
            hint="give a line of the file before or after the new code",
        )
    new = tuple(_shift(x, drift, found) for x in lines)
    return Placed(span, start, start + len(lines), tuple(x + newline for x in new), "fuzzy")


def _blank_tail(lines) -> int:
    return next((k for k, x in enumerate(reversed(lines)) if x.strip()), len(lines))


def _alike(sketch_line: str, file_line: str, drift: int) -> bool:
    """A changed line of the file (the sketch's line alike it, at the same indentation): it is replaced."""
    if not sketch_line.strip() or not file_line.strip():
        return not sketch_line.strip() and not file_line.strip()
    if _defined(sketch_line) != _defined(file_line):
        return False  # a definition is alike only the same definition (`def get` is not `def set`)
    ratio = difflib.SequenceMatcher(None, _norm(sketch_line), _norm(file_line), autojunk=False).ratio()
    return ratio >= EDGE_ALIKE and _indent(sketch_line) - drift == _indent(file_line)


def _defined(line: str) -> str | None:
    """The name a definition line defines, None for other lines."""
    m = _DEFINITION.match(line)
    if m is None:
        return None
    names = re.findall(r"[A-Za-z_$][\w$]*", line[m.end() :] if not m.group(0).strip().endswith("(") else line)
    return names[0] if names else ""


def _trailing(bodies, trail, end: int, drift: int, span: tuple[int, int], closed: bool) -> tuple[int, bool]:
    """The stretch's last file line once the lines after its last anchor are placed: those alike the file's
    next lines replace them; the rest go in after them where the file's code there ends a block or starts a
    definition (and whether a blank line then parts them from it, as one parted them before); or, where the
    sketch closes them with a blank line (`closed`) and as many file lines run up to the file's next blank
    line, replace those; else UnplacedError (they may replace the file's lines or go before them)."""
    k = 0
    while k < len(trail) and end + 1 + k < len(bodies) and _alike(trail[k], bodies[end + 1 + k], drift):
        k += 1
    if k == len(trail):
        return end + k, False
    after = next((q for q in range(end + 1 + k, len(bodies)) if bodies[q].strip()), None)
    if after is None or _boundary(bodies[after], _indent(trail[k]) - drift):
        return end + k, after is not None and after == end + k + 1 and not bodies[end + k].strip()
    blank = next((q for q in range(end + 1 + k, len(bodies)) if not bodies[q].strip()), len(bodies))
    if closed and blank - (end + 1 + k) == len(trail) - k:
        return blank - 1, False
    raise _open_edge((span[0] + k, span[1]), after, "after")


def _leading(bodies, lead, start: int, lo: int, drift: int, span: tuple[int, int], opened: bool) -> int:
    """The stretch's first file line once the lines before its first anchor are placed (as _trailing, mirrored:
    the rest go in before them where the file's line before opens a block or a blank line ends one, or
    replace as many file lines back to a blank line where the sketch opens them with one)."""
    k = 0
    while k < len(lead) and start - 1 - k >= lo and _alike(lead[-1 - k], bodies[start - 1 - k], drift):
        k += 1
    if k == len(lead):
        return start - k
    before = start - k - 1
    if before < lo or not bodies[before].strip() or bodies[before].rstrip().endswith((":", "{", "(", "[")):
        return start - k
    blank = next((q for q in range(start - k - 1, lo - 1, -1) if not bodies[q].strip()), lo - 1)
    if opened and (start - k - 1) - blank == len(lead) - k:
        return blank + 1
    raise _open_edge((span[0], span[1] - k), before, "before")


def _boundary(line: str, indent: int) -> bool:
    """Whether new code at `indent` may go right before this line: it is shallower (a block ends) or a
    definition at the same depth."""
    return _indent(line) < indent or (_indent(line) == indent and bool(_DEFINITION.match(line)))


def _open_edge(span: tuple[int, int], at: int, side: str) -> UnplacedError:
    return UnplacedError(
        f"sketch lines {_lines_text(span)}: whether these lines replace the file's line {at + 1} or go {side} it, "
        "the sketch does not show; nothing was written",
        hint=f"give the line of the file that comes {side} them in the sketch",
    )


def _anchor(lines: tuple[str, ...], where: dict, lo: int, order: range):
    """The first run of the stretch's lines (in `order`) that are consecutive lines of the file at or after
    lo: (its first index, its last index, the file starts of its first line), or None. A run starts at a
    non-blank line and grows while some place keeps matching."""
    step = order.step
    for i in order:
        if not lines[i].strip():
            continue
        starts = [k for k in where.get(_norm(lines[i]), ()) if k >= lo]
        if not starts:
            continue
        j = i
        while 0 <= j + step < len(lines):
            nxt = [k for k in starts if _at(where, lines[j + step], k + (j + step - i))]
            if not nxt:
                break
            starts, j = nxt, j + step
        a, b = (i, j) if step > 0 else (j, i)
        return a, b, sorted(k - (i - a) for k in starts)
    return None


def _at(where: dict, line: str, k: int) -> bool:
    return k in where.get(_norm(line), ())


def _cheapest(bodies: tuple[str, ...], anchored: tuple[str, ...], pairs: list, span: tuple[int, int]):
    """The (start, end) of the pair whose file lines differ least from the stretch's (lines out plus in);
    UnplacedError when two tie."""
    want = [_norm(x) for x in anchored]
    best: list[tuple[int, int, int]] = []
    for start, end in sorted(pairs, key=lambda p: abs((p[1] - p[0] + 1) - len(anchored))):
        bound = abs((end - start + 1) - len(anchored))
        if best and bound > best[0][0]:
            break
        got = [_norm(x) for x in bodies[start : end + 1]]
        same = sum(m.size for m in difflib.SequenceMatcher(None, want, got, autojunk=False).get_matching_blocks())
        cost = len(want) + len(got) - 2 * same
        if not best or cost < best[0][0]:
            best = [(cost, start, end)]
        elif cost == best[0][0]:
            best.append((cost, start, end))
    if len(best) > 1:
        raise _ambiguous(span, [s for _, s, _ in best])
    return best[0][1], best[0][2]


def _ambiguous(span: tuple[int, int], starts: list[int]) -> UnplacedError:
    return UnplacedError(
        f"sketch lines {_lines_text(span)}: this stretch fits the file at {len(starts)} places (from lines "
        + ", ".join(str(s + 1) for s in starts[:5])
        + "); nothing was written",
        hint="give more lines of the file around the change, so that it fits one place",
    )


def _written(lines: tuple[str, ...], found: tuple[str, ...]) -> list[str]:
    """The stretch's lines as written into the file: a line the found lines hold (whitespace aside) with
    the same drift as the stretch as a whole is written as the file has it; the rest moves by the drift."""
    matcher = difflib.SequenceMatcher(None, [_norm(x) for x in lines], [_norm(x) for x in found], autojunk=False)
    pairs = {}
    for m in matcher.get_matching_blocks():
        for i in range(m.size):
            pairs[m.a + i] = found[m.b + i]
    drift = _drift([(lines[i], f) for i, f in pairs.items()])
    out = []
    for i, line in enumerate(lines):
        f = pairs.get(i)
        if f is not None and (not line.strip() or _indent(line) - _indent(f) == drift):
            out.append(f)
        else:
            out.append(_shift(line, drift, found))
    return out


# -- the merge's own check ---------------------------------------------------------------------------


def fidelity(lines: tuple[str, ...], sketch: Sketch, result: str) -> str:
    """ "" when every line the sketch wrote is in the result and every line of the result is a line of the
    file or of the sketch (whitespace aside); else the first line that breaks this, said in one line."""
    got = Counter(_norm(x) for x in result.splitlines() if x.strip())
    wrote = Counter(_norm(x) for x in sketch.written() if x.strip())
    missing = wrote - got
    if missing:
        return f"the result lacks a line the sketch wrote: {next(iter(missing))!r}"
    known = {_norm(line_body(x)) for x in lines} | set(wrote)
    stray = next((x for x in got if x not in known), None)
    return f"the result holds a line from neither the file nor the sketch: {stray!r}" if stray else ""
