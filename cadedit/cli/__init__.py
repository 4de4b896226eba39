"""The command lines (typer): root.py is the root app (oracle, apply, fix, recover) and its error
mapping; hook.py, serve.py the command groups; common.py the console and shared options (bench/
imports it too). Imports: everything below; only entry.py imports cli/, and bench/ its common.py."""
