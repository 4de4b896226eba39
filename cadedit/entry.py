"""The `cadedit` console script: Ctrl-C while the CLI's modules are still being imported exits 130
quietly, as it does once the CLI runs (importing typer, rich and cadedit takes a few hundred ms)."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from cadedit.cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted.\n")
        raise SystemExit(130) from None
    run()
