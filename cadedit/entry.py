"""The `cadedit` console script: Ctrl-C before the CLI's own handling is in place (while its modules
are imported and typer builds the app, a few hundred ms) exits 130 quietly, as it does later."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from cadedit.cli.root import main as run  # lazy: Ctrl-C while the CLI imports exits 130 quietly

        run()
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted.\n")
        raise SystemExit(130) from None
