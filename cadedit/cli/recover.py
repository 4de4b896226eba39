"""`cadedit recover`, and what every `cadedit fix` does first: give back the originals that killed runs
left behind (a candidate still in a file while its test ran), from tries/sandbox.py's journal. No
model code: `cadedit recover` starts as fast as `cadedit --help`."""

from __future__ import annotations

import typer

from cadedit.cli.common import say
from cadedit.errors import ApplyError
from cadedit.tries.sandbox import FAILED, SKIPPED, held_by, recover_all, recover_file


def recover_files(files) -> None:
    """A file a killed cadedit run left with its untested candidate gets its original back first; a file
    another run is testing a candidate in is refused (it does not hold the user's text now)."""
    for file in files:
        if file == "-":
            continue
        holder = held_by(file)
        if holder is not None:
            raise ApplyError(
                f"{file}: another cadedit run ({holder}) has a candidate in this file; nothing was done",
                hint="wait for it to finish, then run cadedit again",
            )
        done = recover_file(file)
        if done is not None and done.kind == FAILED:  # the file may still hold a killed run's candidate
            raise ApplyError(f"{done.said}; nothing was done", hint="fix the cause, then run `cadedit recover`")
        if done is not None and done.kind == SKIPPED:
            say(f"cadedit: {done.said}")
        elif done is not None:
            say(f"cadedit: {done.said} (left by a cadedit run that was killed during its test)")


def recover() -> None:
    """Give back the originals that killed cadedit runs left behind (a candidate still in a file while its
    test ran); each cadedit run does this for its own files. Prints one line per journal entry; exit 0,
    or 1 when an entry could not be given back (it stays for the next `cadedit recover`).

    Example: cadedit recover
    """
    done = recover_all()
    for each in done:
        say(f"cadedit: {each.said}")
    if not done:
        say("cadedit: nothing to recover")
    if any(each.kind == FAILED for each in done):
        raise typer.Exit(1)
