"""Long-file tasks: one planted one-line bug in a real 200-1,000-line module no one here wrote.

Contract: `build_tasks(roots, n, seed)` picks up to n .py files under package roots (seeded, one
task per file) and swaps one operator or constant inside one function body (`<`/`<=`, `>`/`>=`,
`==`/`!=`, `is`/`is not`, `in`/`not in`, `+`/`-`, `+=`/`-=`, `and`/`or`, `True`/`False`, int n -> n+1).
Candidates come from `ast`; only the token itself changes, and a swap is kept only when the text
parses to exactly the expected mutated AST. Records are generic corpus records (corpus.py reads
them): `before` = buggy text, `after` = original, `instruction` = the explicit instruction, plus
`path`, `function`, `function_start`/`function_end` (the span outline.py gives), `bug_line`, `kind`,
`correct`/`bug` (the token as it was / as planted), `instruction_vague`. `score()` gives exact match
and lines changed outside/inside the function. Pure: no torch, no transformers.
"""

from __future__ import annotations

import ast
import difflib
import json
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from cadedit.text.document import Document
from cadedit.scope.outline import PYTHON, outline
from cadedit.settings import DEFAULT_WHERE_BY
from cadedit.tries import loop as tries_module
from cadedit.errors import CadeditError
from cadedit.options import EditOptions, Mode
from cadedit.scope.plan import plan_edit
from cadedit.tries.loop import Attempts, CheckPlan
from cadedit.decode.pipeline import LocalEditor
from typing import Annotated
import typer
from cadedit.bench.options import (
    PACKAGES,
    BackendOpt,
    DtypeOpt,
    JsonOpt,
    ModelOpt,
    PackagesOpt,
    ScopeContextOpt,
    TaskSeedOpt,
    TasksOpt,
    ThreadsOpt,
    longfile_roots,
)
from cadedit.cli.common import Scripted, context_lines, say, scripted
from cadedit.settings import CONTEXT_LINES, DEFAULT_DTYPE
from cadedit.settings import DEFAULT_TRIES, WHERE_BY
from cadedit.bench.running import _load_model, _model_meta, out, run_corpora
from cadedit.bench.options import choice


# Each operator and the one it becomes; the text is how it is written between its operands.
_SWAPS: dict[type, tuple[type, str, str]] = {
    ast.Lt: (ast.LtE, "<", "<="), ast.LtE: (ast.Lt, "<=", "<"),
    ast.Gt: (ast.GtE, ">", ">="), ast.GtE: (ast.Gt, ">=", ">"),
    ast.Eq: (ast.NotEq, "==", "!="), ast.NotEq: (ast.Eq, "!=", "=="),
    ast.Is: (ast.IsNot, "is", "is not"), ast.IsNot: (ast.Is, "is not", "is"),
    ast.In: (ast.NotIn, "in", "not in"), ast.NotIn: (ast.In, "not in", "in"),
    ast.Add: (ast.Sub, "+", "-"), ast.Sub: (ast.Add, "-", "+"),
    ast.And: (ast.Or, "and", "or"), ast.Or: (ast.And, "or", "and"),
}  # fmt: skip


@dataclass(frozen=True)
class Swap:
    """Replace `old` by `new` at character `col` of line `line` (1-based), in function `function`."""

    line: int
    col: int
    old: str
    new: str
    function: str
    node: ast.AST  # the node that changes, so the mutated AST can be checked
    field: str  # "ops" (index in `index`), "op" or "value"
    index: int = 0

    @property
    def kind(self) -> str:
        """compare | arithmetic | augmented | boolean | bool-constant | int-constant."""
        if isinstance(self.node, ast.Constant):
            return "bool-constant" if isinstance(self.node.value, bool) else "int-constant"
        kinds = {ast.Compare: "compare", ast.BinOp: "arithmetic", ast.AugAssign: "augmented"}
        return kinds.get(type(self.node), "boolean")


def build_tasks(
    roots: Sequence[str | Path], n: int, seed: int, min_lines: int = 200, max_lines: int = 1000
) -> list[dict]:
    """Up to n tasks from .py files of min_lines..max_lines lines under the package roots."""
    rng = random.Random(seed)
    files = _candidate_files(roots, min_lines, max_lines)
    rng.shuffle(files)
    tasks: list[dict] = []
    for relative, path in files:
        if len(tasks) >= n:
            break
        task = _task_for_file(relative, path, rng)
        if task is not None:
            tasks.append(task)
    return tasks


def build_file_tasks(
    roots: Sequence[str | Path], n: int, seed: int, min_lines: int = 200, max_lines: int = 1000
) -> list[dict]:
    """n tasks in one file, each its own planted bug and instruction (a team editing one module): the
    first file, in build_tasks' shuffled order, that has n such bugs; [] if none has."""
    rng = random.Random(seed)
    files = _candidate_files(roots, min_lines, max_lines)
    rng.shuffle(files)
    for relative, path in files:
        tasks: dict[str, dict] = {}
        for _ in range(8 * n):
            task = _task_for_file(relative, path, rng)
            if task is None:
                break
            tasks.setdefault(task["id"], task)
            if len(tasks) == n:
                return list(tasks.values())
    return []


def read_tasks(path: str | Path) -> list[dict]:
    """Tasks written by write_tasks (`bench longfile --save-tasks`), in order."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def run_task(
    loaded,
    task: dict,
    kind: str,
    scoped: bool,
    located: bool,
    around: int | None,
    tries: int,
    where_by: str = DEFAULT_WHERE_BY,
    tested: bool = False,
    script: Scripted = Scripted(),
) -> dict:
    """One task edited as `cadedit fix` edits it (scope from the instruction unless not `scoped`, the
    where-step (naming the line by `where_by`) when `located`, verify mode, tries with syntax/no-change
    checks, and when `tested` a test that passes the original file only, as `--test`): its row. script:
    the answers and branch points a test scripted (cli.common.Scripted)."""
    instruction = task["instruction"] if kind == "explicit" else task["instruction_vague"]
    document = Document.from_text(task["before"], task["path"])
    options = EditOptions(model=loaded.name, mode=Mode.VERIFY, context=around)
    options, _ = plan_edit(document, instruction, options, scoping=scoped, where=located)
    options = replace(options, where_by=where_by)
    row = {
        "id": task["id"],
        "path": task["path"],
        "lines": len(task["before"].splitlines()),
        "kind": kind,
        "scoped": scoped,
        "located": located,
        "tested": tested,
        "regions": options.regions,
        "bug_line": task["bug_line"],
    }
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="cadedit-longfile-") if tested else nullcontext() as folder:
            plan = oracle_plan(Path(folder), document, task["after"]) if tested else CheckPlan()
            verified = tries_module.edit_verified(
                document,
                instruction,
                options,
                plan,
                Attempts(tries),
                editor=LocalEditor(loaded, script.choose_points),
                picks=script.picks,
            )
    except CadeditError as exc:  # e.g. a file too large for the model: that task fails, the rest go on
        return {
            **row,
            "seconds": time.perf_counter() - start,
            "tries": 0,
            "first_seconds": 0.0,
            "answered": False,
            "first": None,
            "verified": None,
            "error": exc.message,
            "forward_passes": 0,
        }
    first, answer, asked = verified.tries[0], verified.answer, verified.where
    return {
        **row,
        "seconds": time.perf_counter() - start,
        "tries": len(verified.tries),
        "where": asked.to_json() if asked is not None else None,
        "where_named_bug_line": task["bug_line"] in asked.lines if asked is not None else None,
        "tries_regions": [list(map(list, t.regions)) for t in verified.tries],
        "first_seconds": first.seconds,
        "answered": answer is not None,
        "first": score(task, first.result.new_text) if first.result else None,
        "verified": score(task, answer.result.new_text) if answer else None,
        "forward_passes": sum(t.result.stats.forward_passes for t in verified.tries if t.result),
    }


def oracle_plan(folder: Path, document: Document, fixed: str):
    """Checks with a test that passes exactly the fixed file (byte for byte): the buggy file and the
    fixed one are written into `folder`, and candidates go into the former as `cadedit fix --test` puts them."""
    target, original = folder / Path(document.path).name, folder / "fixed"
    target.write_bytes(document.to_bytes())
    original.write_bytes(fixed.encode("utf-8"))
    same = "import sys; a, b = sys.argv[1:]; sys.exit(open(a, 'rb').read() != open(b, 'rb').read())"
    return CheckPlan(
        test=shlex.join([sys.executable, "-c", same, str(target), str(original)]), cwd=folder, target=target
    )


def write_tasks(tasks: Sequence[dict], path: str | Path) -> None:
    """One JSON record a line; bench/corpus.py load_corpus() reads the file back as cases."""
    with Path(path).open("w", encoding="utf-8") as out:
        for task in tasks:
            out.write(json.dumps(task, ensure_ascii=False) + "\n")


def score(task: dict, new_text: str) -> dict:
    """Exact match with the original, and lines changed (vs the buggy text) outside/inside the function."""
    before = task["before"].splitlines(keepends=True)
    after = new_text.splitlines(keepends=True)
    start, end = task["function_start"], task["function_end"]
    outside = inside = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        old_lines = range(i1 + 1, i2 + 1)  # 1-based lines of the buggy text this block removes
        out = sum(1 for k in old_lines if not start <= k <= end)
        # New lines beyond those removed sit outside when nothing of the block is inside the
        # function; a pure insertion is inside only strictly between two of its lines.
        surplus = max(0, (j2 - j1) - (i2 - i1))
        anchored_inside = (start <= i1 < end) if not old_lines else out < len(old_lines)
        outside += out + (0 if anchored_inside else surplus)
        inside += (len(old_lines) - out) + (surplus if anchored_inside else 0)
    return {
        "exact": new_text == task["after"],
        "lines_changed_outside": outside,
        "lines_changed_inside": inside,
    }


# -- files --------------------------------------------------------------------------------------


def _candidate_files(roots: Sequence[str | Path], min_lines: int, max_lines: int) -> list[tuple[str, Path]]:
    """(path relative to the root's parent, e.g. "rich/table.py", absolute path), sorted."""
    found: dict[str, Path] = {}
    for root in map(Path, roots):
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            if "__pycache__" in path.parts:
                continue
            try:
                n_lines = path.read_bytes().count(b"\n")
            except OSError:
                continue
            if min_lines <= n_lines <= max_lines:
                found.setdefault(path.relative_to(root.parent).as_posix(), path)
    return sorted(found.items())


def _task_for_file(relative: str, path: Path, rng: random.Random) -> dict | None:
    try:
        document = Document.from_bytes(path.read_bytes(), relative)
    except Exception:  # noqa: BLE001 - unreadable or not UTF-8: not a candidate, whatever the reason
        return None
    source = "\n".join(document.display_lines())
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    # A kind first, then a swap of that kind: rich has 10x more `1`->`2` than `<`->`<=` swaps.
    by_kind: dict[str, list[Swap]] = {}
    for swap in candidate_swaps(tree, document.display_lines()):
        by_kind.setdefault(swap.kind, []).append(swap)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    for swap in (s for kind in kinds for s in rng.sample(by_kind[kind], len(by_kind[kind]))):
        buggy = apply_swap(document, swap)
        if _is_exact_mutation(tree, swap, buggy):
            return _record(relative, document, buggy, swap)
    return None


# -- candidates ---------------------------------------------------------------------------------


def candidate_swaps(tree: ast.AST, bodies: Sequence[str]) -> Iterator[Swap]:
    """Every one-line swap inside a function body; `bodies` are the lines without terminators."""
    yield from _walk(tree, (), None, bodies)


def _walk(node: ast.AST, prefix: tuple[str, ...], function: str | None, bodies: Sequence[str]) -> Iterator[Swap]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        inner = prefix + (node.name,)
        # Decorators, defaults and annotations run outside the body: only the body counts.
        scope = ".".join(inner) if not isinstance(node, ast.ClassDef) else function
        for stmt in node.body:
            yield from _walk(stmt, inner, scope, bodies)
        return
    if isinstance(node, ast.JoinedStr):
        return  # f-string parts have unreliable positions before Python 3.12
    if function is not None:
        yield from _swaps_at(node, function, bodies)
    for child in ast.iter_child_nodes(node):
        yield from _walk(child, prefix, function, bodies)


def _swaps_at(node: ast.AST, function: str, bodies: Sequence[str]) -> Iterator[Swap]:
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            left = node.left if i == 0 else node.comparators[i - 1]
            yield from _between(left, node.comparators[i], op, function, bodies, node, "ops", i)
    elif isinstance(node, ast.BinOp):
        yield from _between(node.left, node.right, node.op, function, bodies, node, "op")
    elif isinstance(node, ast.AugAssign):
        yield from _between(node.target, node.value, node.op, function, bodies, node, "op", aug=True)
    elif isinstance(node, ast.BoolOp):
        # `a and b and c` has one op for all its values: swapping the first keeps the AST check exact.
        if len(node.values) == 2:
            yield from _between(node.values[0], node.values[1], node.op, function, bodies, node, "op")
    elif isinstance(node, ast.Constant) and node.lineno == node.end_lineno:
        text = _segment(bodies, node.lineno, node.col_offset, node.end_col_offset)
        col = _chars(bodies[node.lineno - 1], node.col_offset)
        if node.value is True or node.value is False:
            yield Swap(node.lineno, col, text, str(not node.value), function, node, "value")
        elif type(node.value) is int and text.isascii() and text.isdigit():
            yield Swap(node.lineno, col, text, str(node.value + 1), function, node, "value")


def _between(left, right, op, function, bodies, node, field, index=0, *, aug=False) -> Iterator[Swap]:
    """The swap of `op`, written on one line between the end of `left` and the start of `right`."""
    if type(op) not in _SWAPS or left.end_lineno != right.lineno:
        return
    _, old, new = _SWAPS[type(op)]
    if aug:
        old, new = old + "=", new + "="
    body = bodies[right.lineno - 1]
    a, b = _chars(body, left.end_col_offset), _chars(body, right.col_offset)
    gap = body[a:b]
    # Only parentheses and spaces may sit around the operator; anything else (a comment, a
    # backslash continuation) and the candidate is dropped rather than guessed at.
    written = gap.strip(" \t()")
    if " ".join(written.split()) != old:
        return
    col = a + len(gap) - len(gap.lstrip(" \t()"))
    yield Swap(right.lineno, col, written, new, function, node, field, index)


def _chars(body: str, byte_offset: int) -> int:
    """ast columns are UTF-8 byte offsets; strings index characters."""
    return len(body.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def _segment(bodies: Sequence[str], line: int, start: int, end: int) -> str:
    return bodies[line - 1].encode("utf-8")[start:end].decode("utf-8", errors="ignore")


# -- applying and checking ----------------------------------------------------------------------


def apply_swap(document: Document, swap: Swap) -> str:
    """The document's text with the swap made; every other byte is kept."""
    lines = list(document.lines)
    line = lines[swap.line - 1]
    bom = "\ufeff" if swap.line == 1 and line.startswith("\ufeff") else ""
    col = swap.col + len(bom)
    assert line[col : col + len(swap.old)] == swap.old, (line, swap)
    lines[swap.line - 1] = line[:col] + swap.new + line[col + len(swap.old) :]
    return "".join(lines)


def _is_exact_mutation(tree: ast.AST, swap: Swap, buggy: str) -> bool:
    """Whether the buggy text parses to the original tree with exactly this one change."""
    try:
        new_tree = ast.parse("\n".join(Document.from_text(buggy).display_lines()))
    except (SyntaxError, ValueError, RecursionError):
        return False
    before = ast.dump(tree)
    saved = getattr(swap.node, swap.field)
    if swap.field == "ops":
        ops = list(saved)
        ops[swap.index] = _SWAPS[type(ops[swap.index])][0]()
        setattr(swap.node, "ops", ops)
    elif swap.field == "op":
        setattr(swap.node, "op", _SWAPS[type(saved)][0]())
    else:
        setattr(swap.node, "value", (not saved) if isinstance(saved, bool) else saved + 1)
    try:
        expected = ast.dump(tree)
    finally:
        setattr(swap.node, swap.field, saved)
    return expected != before and ast.dump(new_tree) == expected


def _record(relative: str, document: Document, buggy: str, swap: Swap) -> dict:
    definitions = outline(document, PYTHON).definitions
    span = next(d for d in definitions if d.qualname == swap.function and d.start <= swap.line <= d.end)
    original_line = document.display_lines()[swap.line - 1].strip()
    buggy_line = Document.from_text(buggy).display_lines()[swap.line - 1].strip()
    if len(buggy_line) <= 120:
        change = f"change `{buggy_line}` to `{original_line}`"
    else:
        change = f"change `{swap.new}` back to `{swap.old}`"
    return {
        "id": f"longfile/{relative}:{swap.line}",
        "language": "python",
        "path": relative,
        "before": buggy,
        "after": document.text,
        "instruction": f"In function `{swap.function}` (line {swap.line}), {change}.",
        "instruction_vague": f"There is a bug in function `{swap.function}`. Fix it.",
        "function": swap.function,
        "function_start": span.start,
        "function_end": span.end,
        "bug_line": swap.line,
        "kind": swap.kind,
        "correct": swap.old,
        "bug": swap.new,
    }


ScopingOpt = Annotated[str, typer.Option("--scoping", help="on, off or both (scoped vs whole-file verify edits).")]


WhereOpt = Annotated[
    str,
    typer.Option(
        "--where",
        help="Vague instructions, scoped: on (ask the model which line first), off (retype the whole "
        "function) or both.",
    ),
]


WhereByOpt = Annotated[
    str,
    typer.Option(
        "--where-by",
        help="How the where-step finds the line: surprise (the line the model least expected), "
        "number or quote (the model names it, or quotes its text).",
    ),
]


def longfile(
    ctx: typer.Context,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    packages: PackagesOpt = PACKAGES,
    n: TasksOpt = 10,
    seed: TaskSeedOpt = 0,
    min_lines: Annotated[int, typer.Option(help="Shortest file.")] = 200,
    max_lines: Annotated[int, typer.Option(help="Longest file.")] = 1000,
    instructions: Annotated[str, typer.Option(help="explicit, vague or both.")] = "both",
    scoping: ScopingOpt = "on",
    where: WhereOpt = "on",
    where_by: WhereByOpt = DEFAULT_WHERE_BY,
    max_tries: Annotated[
        int, typer.Option("--tries", min=1, help="Tries with syntax/no-change checks.")
    ] = DEFAULT_TRIES,
    tested: Annotated[
        bool,
        typer.Option(
            "--oracle-test",
            help="Also check each edit with a test that passes the "
            "original file only, as `fix --test` would with a test that finds the bug.",
        ),
    ] = False,
    dtype: DtypeOpt = DEFAULT_DTYPE,
    threads: ThreadsOpt = None,
    save_tasks: Annotated[Path | None, typer.Option("--save-tasks", help="Also write the tasks as JSONL.")] = None,
    tasks_path: Annotated[
        Path | None, typer.Option("--tasks-file", help="Read the tasks from this JSONL instead.")
    ] = None,
    context: ScopeContextOpt = str(CONTEXT_LINES),
    first: Annotated[int, typer.Option(min=0, help="Skip this many tasks (a held-out split).")] = 0,
    json_path: JsonOpt = None,
) -> None:
    """Real long files with one planted one-line bug each (bench/longfile.py), edited as `cadedit fix`
    edits them: scope from the instruction, verify mode, tries with syntax/no-change checks. Per task:
    exact match with the original, lines changed outside the named function, wall seconds, and the
    first try's result beside the verified one.

    Example: cadedit bench longfile --model MODEL -n 30 --scoping both --json longfile.json
    """

    around = context_lines(context)
    if tasks_path is not None:
        tasks = read_tasks(tasks_path)[first : first + n]
    else:
        tasks = build_tasks(longfile_roots(packages), first + n, seed, min_lines, max_lines)[first:]
    if save_tasks:
        write_tasks(tasks, save_tasks)
    work = _longfile_work(tasks, instructions, scoping, where, where_by)
    loaded, _ = _load_model(model, "auto", dtype, threads, backend, warm_up=False)
    meta = {
        **_model_meta("longfile", loaded),
        "packages": packages,
        "seed": seed,
        "tries": max_tries,
        "n": len(tasks),
        "first": first,
        "context": context,
        "where": where,
        "where_by": where_by,
        "oracle_test": tested,
    }
    done = run_corpora(
        {"tasks": tasks},
        "longfile",
        lambda _, item: run_task(loaded, *item, around, max_tries, where_by, tested, scripted(ctx)),
        lambda done: {**meta, "summary": _longfile_summary(done["tasks"]), "rows": done["tasks"]},
        json_path,
        lambda row: say(_longfile_line(row)),
        work,
    )
    for key, summary in _longfile_summary(done["tasks"]).items():
        out.print(f"{key}: {summary}")


def _longfile_work(tasks: list, instructions: str, scoping: str, where: str, where_by: str) -> list[tuple[str, tuple]]:
    """Each task under each asked kind of instruction and scoping; the where-step applies to scoped vague
    instructions only (the rest run once, with it on)."""
    on_off = {"on": (True,), "off": (False,), "both": (True, False)}
    kinds = choice(
        instructions, "--instructions", {"explicit": ("explicit",), "vague": ("vague",), "both": ("explicit", "vague")}
    )
    scopes = choice(scoping, "--scoping", on_off)
    wheres = choice(where, "--where", on_off)
    choice(where_by, "--where-by", dict.fromkeys(WHERE_BY, 0))
    return [
        ("tasks", (task, kind, scoped, located))
        for task in tasks
        for kind in kinds
        for scoped in scopes
        for located in (wheres if kind == "vague" and scoped else (True,))
    ]


def _longfile_line(row: dict) -> str:
    """One task on stderr: its error, or exact, lines changed outside, seconds, forward passes, tries and
    the line the where-step named."""
    if row.get("error"):
        return f"{row['path']}: {row['error']}"
    v, said = row["verified"] or {}, ""
    if row.get("where"):
        said = f", where {','.join(map(str, row['where']['lines']))} (bug {row['bug_line']})"
    return (
        f"{row['path']} ({row['lines']} lines) {_longfile_key(row)}: exact {bool(v.get('exact'))}, "
        f"outside {v.get('lines_changed_outside', '-')}, {row['seconds']:.1f} s, {row['forward_passes']} fwd, "
        f"{row['tries']} tries{said}"
    )


def _longfile_key(row: dict) -> str:
    """explicit/scoped, vague/scoped (with the where-step), vague/scoped/no-where, .../whole."""
    return f"{row['kind']}/{'scoped' if row['scoped'] else 'whole'}" + ("" if row.get("located", True) else "/no-where")


def _longfile_summary(rows: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(_longfile_key(row), []).append(row)
    summary = {}
    for key, group in sorted(groups.items()):
        verified = [r["verified"] for r in group]
        firsts = [r["first"] for r in group]
        summary[key] = {
            "n": len(group),
            "exact_verified": sum(bool(v and v["exact"]) for v in verified),
            "exact_first_try": sum(bool(f and f["exact"]) for f in firsts),
            "runs_changing_outside": sum(bool(v and v["lines_changed_outside"]) for v in verified),
            "seconds_total": round(sum(r["seconds"] for r in group), 1),
            "first_try_seconds_total": round(sum(r["first_seconds"] for r in group), 1),
            "forward_passes_total": sum(r.get("forward_passes", 0) for r in group),
            "where_named_bug_line": sum(bool(r.get("where_named_bug_line")) for r in group),
            "where_asked": sum(r.get("where") is not None for r in group),
        }
    return summary
