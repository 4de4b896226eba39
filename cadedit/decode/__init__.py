"""Decoding: the decode loop (loop.py), the program grammar's token automaton (fsm.py, from
grammars/program.lark), the drafters (verify.py, draft.py), edit_file() (pipeline.py) and the
where-step. Imports: backends, scope, prompt, text."""
