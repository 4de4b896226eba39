"""Verified tries and what happens on --test: the loop of tries with feedback and the scope ladder
(loop.py), the checks (checks.py, code_checks.py), repairs, and the sandbox and guard that hold
a candidate in the user's file while a test runs. Imports: decode and below."""
