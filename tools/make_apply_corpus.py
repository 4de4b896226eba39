"""Build corpus/apply (`cadedit bench apply`): sketches of real edits in every form another model writes.

The edits are HumanEvalFix's (HumanEvalPack, MIT licence): each task's buggy program and its fix, in
Python and JavaScript. A case's file is the buggy program among other tasks' fixed programs (files of
about 100 to 2,500 lines, no name defined twice); its expected file is the same with the fix. Each is
sketched in every form and several styles (the `STYLES` table), the way chat models write them. A
quarter of the tasks (by a hash of the task id) are held out. Trailing whitespace is stripped from
the programs (chat answers lose it; a sketch cannot carry such an edit). A whole-file sketch is the expected file
itself, so its case stores no sketch (`"sketch": null`).

    python tools/make_apply_corpus.py --data ../shared/data/humanevalfix --out corpus/apply

Deterministic: the same data and --seed give the same corpus byte for byte.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import random
import re
import textwrap
from pathlib import Path

SIZES = (100, 300, 1000, 2500)  # the lines a case's file is built to, in turn
MARKERS = {
    "py": ["# ... existing code ...", "# ...", "# ... rest of the file ...", "...", "# (unchanged)"],
    "js": ["// ... existing code ...", "// ...", "/* ... */", "// ... rest of the file ...", "..."],
}
STYLES = (
    ("lazy", "context-0"),
    ("lazy", "context-1"),
    ("lazy", "context-2"),
    ("lazy", "context-3"),
    ("lazy", "drifting-indent"),
    ("lazy", "whole-function"),
    ("search-replace", "exact"),
    ("search-replace", "whitespace"),
    ("search-replace", "stale-line"),
    ("diff", "shifted"),
    ("diff", "stale-context"),
    ("diff", "one-line-context"),
    ("whole", "file"),
    ("answer", "path-line"),
    ("answer", "info-string"),
    ("answer", "aider"),
)
_NAME = {
    "py": re.compile(r"^(?:def|class)\s+(\w+)|^(?:from\s+\S+\s+)?import\s+([\w, ]+)", re.M),
    "js": re.compile(r"^(?:const|function|let|var|class)\s+(\w+)", re.M),
}


def _names(program: str, lang: str) -> set[str]:
    """The names a program defines or imports at its top level (a name imported twice is a redefinition)."""
    found = set()
    for m in _NAME[lang].finditer(program):
        for group in m.groups():
            found |= {word.split()[-1] for word in (group or "").split(",") if word.strip()}
    return found


def programs(data: Path) -> dict[str, dict]:
    """task id -> {lang, buggy, fixed} for every task whose fix changes its program."""
    out = {}
    for name, lang in (("humanevalfix_python.jsonl", "py"), ("humanevalfix_js.jsonl", "js")):
        for line in (data / name).read_text().splitlines():
            row = json.loads(line)
            buggy, fixed = (_rstripped(row[key]) for key in ("input_code_docs", "gold_code_docs"))
            if buggy != fixed:
                out[row["task_id"]] = {"lang": lang, "buggy": buggy, "fixed": fixed}
    return out


def _rstripped(program: str) -> str:
    """The program without trailing whitespace on its lines: chat answers lose it, and the merge keeps the
    file's, so an edit of trailing whitespace alone is no edit a sketch can carry."""
    return "\n".join(line.rstrip() for line in program.strip("\n").split("\n")) + "\n"


def host(task: str, table: dict[str, dict], size: int, rng: random.Random) -> list[str]:
    """The task ids of a case's file, in order: the task among others of its language, no name twice."""
    lang = table[task]["lang"]
    names = _names(table[task]["fixed"], lang) | _names(table[task]["buggy"], lang)
    others = [t for t in sorted(table) if table[t]["lang"] == lang and t != task]
    rng.shuffle(others)
    chosen, lines = [], table[task]["buggy"].count("\n")
    for other in others:
        if lines >= size:
            break
        theirs = _names(table[other]["fixed"], lang)
        if theirs & names:
            continue
        names |= theirs
        chosen.append(other)
        lines += table[other]["fixed"].count("\n") + 2
    chosen.insert(rng.randrange(len(chosen) + 1), task)
    return chosen


def file_text(ids: list[str], table: dict[str, dict], target: str, fixed: bool) -> str:
    """The file of a case (bench/apply.py builds it the same way): programs parted by two blank lines."""
    return "\n\n".join(table[t]["fixed" if (t != target or fixed) else "buggy"] for t in ids)


def _groups(a: list[str], b: list[str], context: int):
    return list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context))


def lazy(a: list[str], b: list[str], lang: str, context: int, rng: random.Random, drift=False, whole_def=False) -> str:
    marker = rng.choice(MARKERS[lang])
    out: list[str] = []
    for group in _groups(a, b, context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        if whole_def:
            j1, j2 = _definition(b, j1, j2)
            i1 = i1 - (group[0][3] - j1)
            i2 = i2 + (j2 - group[-1][4])
        stretch = b[j1:j2]
        if drift:
            stretch = textwrap.dedent("\n".join(stretch)).split("\n")
        if i1 > 0 and (not out or out[-1].strip() != marker.strip()):
            out.append(" " * rng.choice((0, 2, 4)) * drift + marker)
        out.extend(stretch)
        if i2 < len(a):
            out.append(" " * rng.choice((0, 2, 4)) * drift + marker)
    return "\n".join(out) + "\n"


def _definition(b: list[str], j1: int, j2: int) -> tuple[int, int]:
    """Widen b[j1:j2] to the top-level definition(s) around it (from its first line to its last)."""
    start = j1
    while start > 0 and not re.match(r"(?:def|class|async def|const|function|let|var)\b", b[start]):
        start -= 1
    end = j2
    while end < len(b) and not (b[end][:1].strip() and b[end].strip() not in ("}", "};") and end > start):
        end += 1
    while end > j2 and not b[end - 1].strip():
        end -= 1
    return start, max(end, j2)


def _stale(line: str, rng: random.Random) -> str:
    """A context line as a model misremembers it: one character dropped (not its indentation)."""
    body = line.lstrip()
    if len(body) < 4:
        return line
    k = rng.randrange(1, len(body))
    return line[: len(line) - len(body)] + body[:k] + body[k + 1 :]


def search_replace(a: list[str], b: list[str], style: str, rng: random.Random) -> str:
    out = []
    for group in _groups(a, b, rng.choice((1, 2, 3))):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        search = a[i1:i2]
        context = [k for k, x in enumerate(search) if x.strip() and x in b[j1:j2]]
        if context and style == "whitespace":
            k = rng.choice(context)
            search = [*search[:k], search[k].strip(), *search[k + 1 :]]
        if context and style == "stale-line":
            k = rng.choice(context)
            search = [*search[:k], _stale(search[k], rng), *search[k + 1 :]]
        out += ["<<<<<<< SEARCH", *search, "=======", *b[j1:j2], ">>>>>>> REPLACE", ""]
    return "\n".join(out)


def diff(a: list[str], b: list[str], name: str, style: str, rng: random.Random) -> str:
    lines = list(
        difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", n=1 if style == "one-line-context" else 3, lineterm="")
    )
    shift = rng.choice((-1, 1)) * rng.randrange(5, 40)
    out = []
    for line in lines:
        m = re.match(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@(.*)$", line)
        if m and style != "one-line-context":
            old, new = max(1, int(m.group(1)) + shift), max(1, int(m.group(3)) + shift)
            line = f"@@ -{old}{m.group(2) or ''} +{new}{m.group(4) or ''} @@{m.group(5)}"
        out.append(line)
    if style == "stale-context":
        context = [k for k, x in enumerate(out) if x.startswith(" ") and len(x.strip()) > 3]
        if context:
            k = rng.choice(context)
            out[k] = " " + _stale(out[k][1:], rng)
    return "\n".join(out) + "\n"


def answer(a: list[str], b: list[str], lang: str, name: str, style: str, rng: random.Random) -> str:
    fence = "python" if lang == "py" else "javascript"
    body = search_replace(a, b, "exact", rng) if style == "aider" else lazy(a, b, lang, 2, rng)
    opening = f"```{fence} {name}" if style == "info-string" else f"```{fence}"
    named = "" if style == "info-string" else rng.choice((f"`{name}`", f"**{name}**", name, f"### {name}")) + "\n"
    return f"Here is the fix; the rest of the file stays as it is.\n\n{named}{opening}\n{body.rstrip()}\n```\n\nThat should do it.\n"


def sketch(form: str, style: str, before: str, after: str, lang: str, rng: random.Random) -> str:
    a, b, name = before.split("\n")[:-1], after.split("\n")[:-1], f"host.{lang}"
    if form == "lazy" and style.startswith("context-"):
        return lazy(a, b, lang, int(style[-1]), rng)
    if form == "lazy":
        return lazy(a, b, lang, 2, rng, drift=style == "drifting-indent", whole_def=style == "whole-function")
    if form == "search-replace":
        return search_replace(a, b, style, rng)
    if form == "diff":
        return diff(a, b, name, style, rng)
    if form == "whole":
        return after
    return answer(a, b, lang, name, style, rng)


def build(data: Path, out: Path, seed: int, per_language: int) -> int:
    table = programs(data)
    rng = random.Random(seed)
    tasks: list[str] = []
    for lang in ("py", "js"):
        mine = sorted((t for t in table if table[t]["lang"] == lang), key=lambda t: int(t.split("/")[1]))
        tasks += sorted(rng.sample(mine, min(per_language, len(mine))), key=lambda t: int(t.split("/")[1]))
    cases, used = [], set()
    for n, task in enumerate(tasks):
        ids = host(task, table, SIZES[n % len(SIZES)], rng)
        used |= set(ids)
        before, after = file_text(ids, table, task, False), file_text(ids, table, task, True)
        split = "heldout" if int(hashlib.sha256(task.encode()).hexdigest(), 16) % 4 == 0 else "tune"
        for form, style in STYLES:
            text = sketch(form, style, before, after, table[task]["lang"], rng)
            text = None if form == "whole" else text  # the expected file itself: bench/apply.py builds it
            cases.append({"id": f"{task}:{form}:{style}", "split": split, "lang": table[task]["lang"], "form": form,
                          "style": style, "host": ids, "target": task, "sketch": text})  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "programs.jsonl", "w") as f:
        for task in sorted(used, key=lambda t: (t.split("/")[0], int(t.split("/")[1]))):
            f.write(json.dumps({"task": task, **table[task]}) + "\n")
    with open(out / "cases.jsonl", "w") as f:
        for case in cases:
            f.write(json.dumps(case) + "\n")
    return len(cases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the folder of humanevalfix_{python,js}.jsonl")
    parser.add_argument("--out", type=Path, default=Path("corpus/apply"))
    parser.add_argument("--seed", type=int, default=65)
    parser.add_argument("--per-language", type=int, default=24, help="tasks of each language")
    args = parser.parse_args()
    print(f"{build(args.data, args.out, args.seed, args.per_language)} cases in {args.out}")


if __name__ == "__main__":
    main()
