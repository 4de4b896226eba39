"""`cadedit oracle` and `cadedit apply`: edit programs (docs/program.md) made from two files and resolved
against a file, no model. Also what every command that prints or writes an edit shares (cli/fix.py
too): the file, program and --write arguments, data on stdout, diff paths that `patch -p1` applies."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from cadedit.cli.common import err, warn
from cadedit.errors import ApplyError, DocumentError
from cadedit.git.repo import diff_path
from cadedit.text.diff import count_changes, show, unified_diff, write_atomic, write_bytes
from cadedit.text.document import Document
from cadedit.text import oracle as oracles  # a module: tests put a crash in oracles.oracle
from cadedit.text.program import format as format_program
from cadedit.text.program import parse
from cadedit.text import resolve  # a module: tests change the file while resolve.resolve_ops runs

# Shared parameter aliases: later commands reuse these so that the same option reads the same everywhere.
# readable=False: an unreadable file is Document.read's one-line error (exit 1), not click's usage box (exit 2).
FileArg = Annotated[
    Path, typer.Argument(metavar="FILE", help="The source file to edit.", show_default=False, readable=False)
]
ProgramArg = Annotated[
    str,
    typer.Argument(
        metavar="PROGRAM", help="An edit program file (docs/program.md), or - for stdin.", show_default=False
    ),
]
WriteOpt = Annotated[
    bool, typer.Option("--write", "-w", help="Write the edited file (atomically) instead of printing a diff.")
]
ClipOpt = Annotated[
    bool, typer.Option("--clip", help="Clip out-of-range copy lines to the file (with a warning) instead of failing.")
]


def write_stdout(text: str) -> None:
    """Data on stdout, byte for byte (CR and CRLF inside programs survive); a closed or full stdout
    is a one-line error, a closed pipe raises BrokenPipeError (typer exits 1)."""
    write_bytes(sys.stdout, text.encode("utf-8"))


def display_path(path: Path) -> str:
    """The path for diff headers: relative to the repository root inside a git work tree (as `git diff`
    writes it; `git apply` takes it from any subdirectory), else to the working directory (`patch -p1`)."""
    return diff_path(path)


def check_patch_path(path: str | Path) -> None:
    """Refuse to print a diff whose header patch cannot apply: outside a git work tree, a file
    outside the working directory would be named a/../f, and `patch -p1` refuses `..` names."""

    name = display_path(Path(path))
    if name == ".." or name.startswith("../"):
        raise DocumentError(
            f"{path}: outside the working directory, so a diff cannot name it for patch -p1",
            hint="run cadedit from a folder that contains the file, or write the edit with --write",
        )


def read_program(source: str):
    """Parse a program from a file, or from stdin for "-" (same checks as any document)."""
    document = Document.read_stream(sys.stdin.buffer) if source == "-" else Document.read(source)
    return parse(document.text)


def oracle(
    before: Annotated[
        Path, typer.Argument(metavar="BEFORE", help="The file before the edit.", show_default=False, readable=False)
    ],
    after: Annotated[
        Path, typer.Argument(metavar="AFTER", help="The file after the edit.", show_default=False, readable=False)
    ],
) -> None:
    """Print the oracle edit program that turns BEFORE into AFTER (copies of kept lines, gens of new text).

    Example: cadedit oracle a.py b.py > edit.program
    """
    write_stdout(format_program(oracles.oracle(Document.read(before), Document.read(after))))


def apply(
    file: FileArg,
    program: ProgramArg,
    write: WriteOpt = False,
    clip: ClipOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="With --write: replace a read-only file too (as vim's :w! does).")
    ] = False,
) -> None:
    """Resolve an edit PROGRAM against FILE; print the unified diff, or write the result with --write.

    Example: cadedit oracle a.py b.py > p && cadedit apply a.py p | patch -p1
    """
    document = Document.read(file)
    if not write:
        check_patch_path(file)
    resolution = resolve.resolve_ops(
        read_program(program), document, resolve.Bounds.CLIPPED if clip else resolve.Bounds.STRICT
    )
    for message in resolution.warnings:
        warn(message)
    diff_text = unified_diff(document.text, resolution.text, display_path(file))
    if not diff_text:
        err.print(f"{file}: no change", highlight=False, markup=False)
        return
    if not write:
        show(diff_text)
        return
    write_atomic(document, resolution.text, force)
    added, removed = count_changes(diff_text)
    err.print(f"wrote {file} (+{added} -{removed})", highlight=False, markup=False)


def reread(document: Document) -> Document:
    """The file again after a test ran with a candidate in place: checks.py put the user's bytes back
    (a new inode and mtime); anything else means the file changed under cadedit (an ApplyError)."""
    current = Document.read(document.path)
    if current.lines != document.lines:
        raise ApplyError(
            f"{document.path}: changed on disk while the tests ran; nothing was written",
            hint="run cadedit again on the current file",
        )
    return current
