"""The command lines (typer): root.py is the root app, its error mapping and each command's module by
name (imported when that command runs); program.py (oracle, apply), fix.py, recover.py the commands;
hook.py, serve.py the command groups; common.py the console, shared options and the lazy registry
(bench/ imports it too). Imports: everything below; only entry.py imports cli/, and bench/ its common.py."""
