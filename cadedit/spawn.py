"""The child Pythons cadedit starts (the `--test` guard, the warm server's daemon) and the import path
they get: one the user's working folder cannot shadow.

`python -m cadedit.x` puts the working folder first on sys.path, so a repository's own `cadedit/`
package, or a `json.py` or `dataclasses.py` beside the user's files, would be imported and run by a
`--test true` that runs no code of the repository. The child starts with `-I` instead (no working
folder, no PYTHON* variables, no user site on its path) and then takes this process's own sys.path
without the working folder: it imports the very cadedit and standard library this process did.
"""

from __future__ import annotations

import os
import sys


def child_path() -> list[str]:
    """This process's sys.path without the working folder ('' and '.' included): unless cadedit itself
    was imported from there (a checkout run with `python -m cadedit`), which this process has run
    already. Folders made absolute; other entries stay as written (a path hook's key is no folder)."""
    try:
        here = os.getcwd()
    except OSError:  # a working folder that is gone: nothing can be imported from it
        here = None
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kept = []
    for entry in sys.path:
        if here is None and not os.path.isabs(entry):
            continue
        full = os.path.normpath(os.path.join(here or os.sep, entry))  # '' is the working folder
        if full == here and full != ours:
            continue
        entry = full if os.path.isdir(full) else entry  # a child started elsewhere (cwd="/") finds it too
        if entry not in kept:
            kept.append(entry)
    return kept


def python_code(code: str, *args: str) -> list[str]:
    """The argv of a child Python that runs `code` (sys.argv[1:] = args) with child_path()."""
    return [sys.executable, "-I", "-c", f"import sys; sys.path[:] = {child_path()!r}\n{code}", *args]


def python_module(module: str, *args: str) -> list[str]:
    """The argv of a child Python that runs `module` as __main__ (as `python -m module args` would)."""
    return python_code(f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)", *args)
