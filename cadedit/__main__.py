"""`python -m cadedit`: the CLI. Python puts the working folder first on the import path for `-m`;
it is taken off before anything else is imported, so that the user's own files (a `logging.py` or
`json.py` being edited) never stand in for the standard library's modules."""

import os
import sys

if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == os.getcwd():
    del sys.path[0]

from cadedit.entry import main  # noqa: E402

main()
