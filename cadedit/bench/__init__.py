"""The paper's measurements (kernel speedup, copy ceiling, round trip, perturbation, edit formats).

Each module holds one measurement as plain functions over a corpus (bench/corpus.py); cli.py
wires them into `cadedit bench`. Only kernel.py imports torch, and only when its command runs.
"""
