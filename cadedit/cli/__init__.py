"""The command lines (typer): root.py is the root app (oracle, apply, fix, recover) and its error
mapping; hook.py, serve.py the command groups; common.py the console and shared options (bench/
imports it too). Imports: everything below; nothing imports cli/ but entry.py."""
