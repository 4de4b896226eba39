"""The guard of a test run (cadedit.tries.guard JOURNAL, started through cadedit.spawn: the user's folder
is on no import path of it): started by cadedit.tries.sandbox before a candidate goes into the user's
file, it reads its parent's pipe. "pgid N" names the test's process group; "done" means cadedit put
the original back itself. At end of file without "done" (cadedit was killed), it ends the test's
process group and gives the original back from the journal, saying so on cadedit's stderr. Its own
session: Ctrl-C and a group kill of cadedit's job do not reach it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from cadedit.tries.sandbox import end_group, recover


def main(journal: Path) -> int:
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    groups: list[int] = []
    for line in sys.stdin.buffer:
        word, _, value = line.decode("ascii", "replace").strip().partition(" ")
        if word == "done":
            return 0
        if word == "pgid" and value.isdigit():
            groups.append(int(value))
    for pgid in groups:
        end_group(pgid)
    done = recover(journal, wait=10.0)
    if done is not None:
        with open(2, "w", closefd=False) as err:
            err.write(f"cadedit (guard): {done.said}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
