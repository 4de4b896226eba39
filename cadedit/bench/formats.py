"""Edit formats head to head (paper §4.4, Table 3): output tokens and round-trip exact match.

Four formats, each driven by the oracle edit of a case: full regeneration (the gold itself),
Aider-style search/replace blocks, a unified diff (cadedit.text.diff with 3 lines of context, without
the git line), and the copy/gen program. Each is written as text, counted in tokens, parsed back
and applied to `before`; RT-EM means the result equals the gold byte for byte.
Search/replace anchors are minimal, as derived from the line alignment: SEARCH is exactly the
replaced (or deleted) lines; a pure insertion is anchored on the line before it (the first line
when it inserts at the top). The applier is Aider's exact path (editblock_coder.perfect_replace):
the FIRST occurrence of the SEARCH lines is replaced, so an anchor that also occurs earlier in the
file produces a wrong edit -- the anchor-ambiguity failure the paper counts. (Aider's fuzzy
fallbacks only run when there is no exact match, which never happens for oracle anchors.)
The paper's Table 3 used an unnamed 33-case subset per corpus; run on a whole corpus, numbers differ.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from cadedit.bench.corpus import Case
from cadedit.bench.tokens import TokenCounter
from cadedit.text.diff import NO_NEWLINE, diff_lines, unified_diff
from cadedit.errors import ApplyError, CadeditError
from cadedit.text.oracle import oracle
from cadedit.text.program import format as format_program
from cadedit.text.program import parse
from cadedit.text.resolve import resolve
import math
from cadedit.bench.options import CorpusOpt, JsonOpt, LimitOpt, ModelOpt, TokenizerOpt
from cadedit.bench.running import out, run_corpora
from cadedit.bench.options import load_corpora
from cadedit.bench.report import fmt_float, fmt_int
from cadedit.bench.report import median, percentile
from cadedit.bench.tokens import load_tokenizer, tokenizer_spec

FORMATS = ("full", "search_replace", "unified_diff", "program")
LABELS = {
    "full": "full regeneration",
    "search_replace": "search/replace",
    "unified_diff": "unified diff",
    "program": "copy/gen program",
}
SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH\n", "=======\n", ">>>>>>> REPLACE\n"
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Block:
    search: str
    replace: str


# -- search/replace ------------------------------------------------------------------------------


def sr_blocks(before: str, after: str) -> list[Block]:
    """Search/replace blocks with minimal anchors (see the module docstring)."""
    a, b = diff_lines(before), diff_lines(after)
    blocks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        new = "".join(b[j1:j2])
        if tag in ("replace", "delete"):
            blocks.append(Block("".join(a[i1:i2]), new))
        elif tag == "insert" and i1 > 0:
            blocks.append(Block(a[i1 - 1], a[i1 - 1] + new))
        elif tag == "insert" and a:
            blocks.append(Block(a[0], new + a[0]))
        elif tag == "insert":
            blocks.append(Block("", new))
    return blocks


def _section(text: str) -> str:
    # A section without a final newline (the file's unterminated last line) gets one, as in Aider.
    return text if not text or text.endswith("\n") else text + "\n"


def format_sr(blocks: list[Block]) -> str:
    return "".join(SEARCH + _section(b.search) + DIVIDER + _section(b.replace) + REPLACE for b in blocks)


def parse_sr(text: str) -> list[Block]:
    """Blocks from search/replace text; ApplyError on a malformed block."""
    blocks, state, parts = [], "out", {"search": [], "replace": []}
    for number, line in enumerate(diff_lines(text), 1):
        if state == "out" and line == SEARCH:
            state, parts = "search", {"search": [], "replace": []}
        elif state == "search" and line == DIVIDER:
            state = "replace"
        elif state == "replace" and line == REPLACE:
            blocks.append(Block("".join(parts["search"]), "".join(parts["replace"])))
            state = "out"
        elif state in parts:
            parts[state].append(line)
        elif line.strip():
            raise ApplyError(f"search/replace line {number}: expected {SEARCH.strip()!r}, found {line!r}")
    if state != "out":
        raise ApplyError("search/replace: last block not closed")
    return blocks


def apply_sr(text: str, blocks: list[Block]) -> str:
    """Apply blocks in order, each to the FIRST exact occurrence of its SEARCH lines (Aider)."""
    for number, block in enumerate(blocks, 1):
        if not block.search:
            text += block.replace
            continue
        whole, part = diff_lines(text), diff_lines(block.search)
        at = next((i for i in range(len(whole) - len(part) + 1) if whole[i : i + len(part)] == part), None)
        if at is None:
            raise ApplyError(f"search/replace block {number}: SEARCH text not found")
        text = "".join(whole[:at]) + block.replace + "".join(whole[at + len(part) :])
    return text


def ambiguous_anchors(before: str, blocks: list[Block]) -> int:
    """How many blocks' SEARCH lines occur more than once in the original text."""
    whole = diff_lines(before)
    count = 0
    for block in blocks:
        part = diff_lines(block.search)
        hits = sum(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1)) if part else 0
        count += hits > 1
    return count


# -- unified diff ------------------------------------------------------------------------------


def format_ud(before: str, after: str) -> str:
    """A unified diff (3 lines of context) with ---/+++ headers and no `diff --git` line."""
    text = unified_diff(before, after, "file")
    return text.split("\n", 1)[1] if text.startswith("diff --git") else text


def apply_ud(before: str, diff_text: str) -> str:
    """Apply a unified diff by its line numbers, checking every context and removed line."""
    source, out, pos = diff_lines(before), [], 0
    lines = diff_lines(diff_text)
    k = 0
    while k < len(lines):
        m = _HUNK.match(lines[k])
        k += 1
        if not m:
            continue
        start, count = int(m.group(1)), int(m.group(2) or 1)
        at = start - 1 if count else start
        if at < pos:
            raise ApplyError(f"unified diff: hunk at line {start} overlaps the previous one")
        out += source[pos:at]
        pos = at
        while k < len(lines) and lines[k][:1] in (" ", "-", "+", "\\"):
            line, k = lines[k], k + 1
            if k < len(lines) and lines[k] == NO_NEWLINE:
                line, k = line[:-1], k + 1
            if line[0] == "+":
                out.append(line[1:])
                continue
            if pos >= len(source) or source[pos] != line[1:]:
                raise ApplyError(f"unified diff: line {pos + 1} does not match the hunk at line {start}")
            if line[0] == " ":
                out.append(source[pos])
            pos += 1
    return "".join(out + source[pos:])


# -- all formats -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatResult:
    tokens: int
    exact: bool
    error: str | None = None
    ambiguous: int = 0


def _roundtrip(
    text: str, apply: Callable[[str], str], gold: str, tokens: TokenCounter, ambiguous: int = 0
) -> FormatResult:
    try:
        result = apply(text)
    except CadeditError as exc:
        return FormatResult(tokens.count(text), False, exc.message, ambiguous)
    return FormatResult(tokens.count(text), result == gold, None if result == gold else "wrong result", ambiguous)


def case_formats(case: Case, tokens: TokenCounter) -> dict[str, FormatResult]:
    """Each format's output tokens and round trip for one case."""
    before, after = case.before, case.after
    blocks = sr_blocks(before, after)
    program_text = format_program(oracle(case.before_doc, case.after_doc))
    return {
        "full": _roundtrip(after, lambda t: t, after, tokens),
        "search_replace": _roundtrip(
            format_sr(blocks), lambda t: apply_sr(before, parse_sr(t)), after, tokens, ambiguous_anchors(before, blocks)
        ),
        "unified_diff": _roundtrip(format_ud(before, after), lambda t: apply_ud(before, t), after, tokens),
        "program": _roundtrip(program_text, lambda t: resolve(parse(t), case.before_doc), after, tokens),
    }


def formats(
    corpus: CorpusOpt,
    tokenizer: TokenizerOpt = None,
    model: ModelOpt = None,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Edit formats head to head: output tokens and round-trip EM (Table 3).

    Full regeneration vs search/replace vs unified diff vs copy/gen program, each made from the
    oracle edit, parsed back and applied. Search/replace applies at the first match, as Aider does.

    Example: cadedit bench formats -c humanevalfix_js.jsonl --tokenizer model.gguf
    """

    corpora = load_corpora(corpus, limit)
    tokens = load_tokenizer(tokenizer_spec(tokenizer, model))

    def to_json(done: dict[str, list]) -> dict:
        summary = {name: _formats_summary(rows) for name, rows in done.items() if rows}
        return {"command": "formats", "tokenizer": tokens.name, "corpora": summary}

    done = run_corpora(corpora, "formats", lambda name, case: (case.id, case_formats(case, tokens)), to_json, json_path)
    _print_formats(done, tokens.name)


def _formats_summary(rows: list) -> dict:

    summary = {}
    base = sum(r["program"].tokens for _, r in rows)
    for f in FORMATS:
        toks = [r[f].tokens for _, r in rows]
        summary[f] = {
            "n": len(rows),
            "mean": sum(toks) / len(toks),
            "median": median(toks),
            "p95": percentile(toks, 95),
            "total": sum(toks),
            "rt_em": sum(r[f].exact for _, r in rows),
            "ambiguous_anchors": sum(r[f].ambiguous for _, r in rows),
            "tokens_vs_program": sum(toks) / base - 1 if base else math.nan,
            "failures": [{"id": i, "error": r[f].error} for i, r in rows if not r[f].exact],
        }
    return summary


def _print_formats(done: dict[str, list], tokenizer: str) -> None:

    for name, rows in done.items():
        s = _formats_summary(rows)
        n, em_base = len(rows), s["program"]["rt_em"]
        body = [
            [
                LABELS[f],
                fmt_float(s[f]["mean"]),
                fmt_float(s[f]["median"], 0),
                fmt_float(s[f]["p95"], 0),
                fmt_int(s[f]["total"]),
                f"{s[f]['rt_em'] / n:.2f}",
                f"{n - s[f]['rt_em']}/{n}",
                "-"
                if f == "program"
                else f"{100 * s[f]['tokens_vs_program']:+.1f}% tok, {s[f]['rt_em'] - em_base:+d} EM",
            ]
            for f in FORMATS
        ]
        amb = s["search_replace"]["ambiguous_anchors"]
        out.table(
            f"Edit formats on {name} (n={n}, tokenizer {tokenizer})",
            ["format", "mean tok", "median", "p95", "total", "RT-EM", "fails", "vs program"],
            body,
            caption=f"search/replace anchors found more than once in the input: {amb}",
        )
