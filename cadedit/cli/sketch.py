"""`cadedit fix [FILE...] --sketch SKETCH`: another model's answer (a lazy sketch with "existing code"
markers, SEARCH/REPLACE blocks, a diff that no longer applies, a whole file, or a chat answer with a
fenced block per file) merged into the files without a model (cadedit.text.merge), checked as every
candidate is (syntax, the code checks, a change, --test) and as a merge (every line the sketch wrote is
in the result, every other line is the file's), then shown, written or refused as `cadedit fix` does.

A sketch part that fits no place of the file, or several, is refused (exit 3, nothing written, its
sketch lines named): the model-assisted placement of such parts is not built yet (docs/apply.md).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer

from cadedit.cli.common import say
from cadedit.cli.program import check_patch_path, display_path, reread, write_stdout
from cadedit.errors import CheckFailedError, DocumentError
from cadedit.git.repo import printable, work_tree_root
from cadedit.text.diff import count_changes, show
from cadedit.text.document import Document
from cadedit.text.languages import language_of
from cadedit.text.sketch import Block, blocks_for, read_answer, same_file
from cadedit.tries.loop import CheckPlan
from cadedit.tries.merged import Merged, merge_checked


@dataclass(frozen=True)
class Shown:
    """What becomes of the merged files: a patch on stdout (default), written, only checked, or JSON."""

    write: bool = False
    check: bool = False
    json: bool = False
    quiet: bool = False
    verbose: bool = False


def fix_sketch(
    files: list[str],
    sketch: str,
    plan: CheckPlan,
    shown: Shown,
    hands: tuple[Callable[[list, bool], None], Callable[[list, CheckPlan, bool], None]],
    given: list[str] = (),
) -> None:
    """Merge the sketch into FILE (or, with no FILE, each file its fenced blocks name), check, then show,
    write or refuse; hands are `cadedit fix`'s own write_all and test_together (every file or none);
    given, the options of an instruction's edit that were given (a usage error here)."""
    started = time.monotonic()
    write_all, test_together = hands
    _refuse_options(files, given)
    if files == ["-"] and (shown.write or plan.test):
        raise typer.BadParameter("needs a file, not stdin", param_hint="--write" if shown.write else "--test")
    if sketch == "-" and files == ["-"]:
        raise typer.BadParameter("the file and the sketch cannot both come from stdin", param_hint="--sketch")
    for file in files if not shown.write and files != ["-"] else ():
        check_patch_path(file)
    text = _read_sketch(sketch)
    targets = _targets(files, text, sketch)
    one = len(targets) == 1
    merged = [
        merge_checked(document, blocks, plan if one else _untested(plan), _diff_name(document))
        for document, blocks in targets
    ]
    seconds = time.monotonic() - started
    if shown.json:
        data = {"model_free": True, "seconds": round(seconds, 4), "files": [m.to_json() for m in merged]}
        data["passed"] = all(m.passed for m in merged)
        write_stdout(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    _refuse_failed(merged)
    if plan.test and not one:
        test_together([(m.document, m.new_text, m.diff) for m in merged], plan, shown.quiet)
    _deliver(merged, files == ["-"], plan, shown, write_all, seconds)


def _refuse_options(files: list[str], given: list[str]) -> None:
    """The sketch is the change: an instruction, or options that scope a model's edit, are usage errors."""
    if given:
        raise typer.BadParameter(f"the sketch is the change; drop {', '.join(given)}", param_hint="--sketch")
    words = next((f for f in files if f != "-" and not Path(f).exists() and " " in f.strip()), None)
    if words is not None:
        raise typer.BadParameter(
            f"{words!r} is not a file; the sketch is the change, so give no instruction", param_hint="--sketch"
        )
    names = next((f for f in files if printable(f) != f), None)
    if names is not None:
        raise DocumentError(f"{printable(names)}: the file name is not UTF-8", hint="rename it (e.g. with convmv)")


def _diff_name(document: Document) -> str:
    return "-" if document.path == "<stdin>" else display_path(Path(document.path))


def _untested(plan: CheckPlan) -> CheckPlan:
    return CheckPlan(plan.allow_no_change, None, plan.test_timeout, plan.cwd)


def _read_sketch(sketch: str) -> str:
    if sketch == "-":
        return Document.read_stream(sys.stdin.buffer, "<sketch>").text
    return Document.read(sketch).text


def _targets(files: list[str], text: str, sketch: str) -> list[tuple[Document, list[Block]]]:
    """Each file to edit with the blocks of the sketch that are its: FILE with the blocks naming it (or the
    unnamed ones when none does); with no FILE, each file a block names. DocumentError for a block that
    names no file when no FILE is given, or a file that is not there."""
    if len(files) == 1:
        document = _document(files[0])
        if language_of(document.path) is not None and language_of(document.path).name == "markdown":
            return [(document, [Block(None, tuple(text.splitlines()), 1)])]
        blocks = read_answer(text)
        chosen = blocks_for(blocks, files[0])
        if not chosen:
            named = ", ".join(sorted({b.path for b in blocks if b.path}))
            raise DocumentError(
                f"{sketch}: no block of the sketch is for {files[0]} (its blocks name {named})",
                hint="give the file a block names, or no FILE to edit every file the answer names",
            )
        return [(document, chosen)]
    blocks = read_answer(text)
    unnamed = next((b for b in blocks if b.path is None), None)
    if unnamed is not None:
        raise DocumentError(
            f"{sketch}: the block at line {unnamed.first} names no file",
            hint="give FILE, or put the file's path on the line before each fence",
        )
    by_file: dict[str, list[Block]] = {}
    for block in blocks:
        if files and not any(same_file(block.path, f) for f in files):
            continue
        by_file.setdefault(_resolve(block.path, sketch, block.first), []).append(block)
    if not by_file:
        raise DocumentError(f"{sketch}: no block of the sketch names {', '.join(files)}")
    for path in by_file if not files else ():
        check_patch_path(path)
    return [(Document.read(path), found) for path, found in by_file.items()]


def _document(file: str) -> Document:
    if file == "-":
        return Document.read_stream(sys.stdin.buffer)
    return Document.read(file)


def _resolve(named: str, sketch: str, line: int) -> str:
    """A path a block names, as a file here: from the working directory, else from the work tree's root."""
    if Path(named).is_file():
        return named
    root = work_tree_root(Path.cwd())
    if root is not None and (root / named).is_file():
        return str(root / named)
    raise DocumentError(
        f"{sketch}: the block at line {line} names {named}, which is not a file here",
        hint="run from the folder the answer's paths start at, or give FILE",
    )


def _refuse_failed(merged: list[Merged]) -> None:
    for m in merged:
        failed = [c for c in m.checks if not (c.passed or c.skipped)]
        if failed:
            raise CheckFailedError(
                f"{m.document.path}: the merged sketch fails its checks ("
                + "; ".join(f"{c.name}: {c.detail}" for c in failed)
                + "); nothing was written",
                hint="ask the other model again, or give it the current file",
            )


def _deliver(merged: list[Merged], stdin: bool, plan: CheckPlan, shown: Shown, write_all, seconds: float) -> None:
    """The summary lines, then the patch (or the text for stdin) on stdout, or the files written."""
    for m in merged if not shown.quiet else ():
        added, removed = count_changes(m.diff)
        say(
            f"{m.document.path}: "
            + (f"+{added} -{removed} lines" if m.diff else "no change")
            + f" ({', '.join(dict.fromkeys(m.forms))} sketch, {len(m.placed)} "
            + ("part" if len(m.placed) == 1 else "parts")
            + f" placed, no model, {seconds:.2f} s)"
            + ("" if plan.test else "; behaviour not tested (no --test)")
        )
    patch = "".join(m.diff for m in merged)
    if shown.json:
        pass
    elif stdin:
        write_stdout(merged[0].new_text)
    elif patch and not shown.write:
        show(patch)
    if shown.write:
        changed = [(reread(m.document) if plan.test else m.document, m.new_text) for m in merged if m.diff]
        write_all(changed, shown.quiet)
    if shown.check and patch:
        raise typer.Exit(1)
