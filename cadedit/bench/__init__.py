"""The paper's measurements (kernel speedup, copy ceiling, round trip, perturbation, edit formats).

Each module holds one measurement as plain functions over a corpus (bench/corpus.py) and its own
`cadedit bench` command; cli.py names the commands, and a module is imported only when its command
runs (or its --help is asked). kernel.py and decode.py import torch.
"""
