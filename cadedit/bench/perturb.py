"""Span-selection sensitivity (paper §5, Table 8): exact match under copy-endpoint noise.

For each eps and each trial, every copy endpoint of each case's oracle program moves by an
integer drawn uniformly from [-eps, eps], clamped to the document (perturb(), which
also puts reversed endpoints back in order); the program is resolved in clipped mode and compared
with the gold after .strip() (trimmed EM; byte EM is kept too). A trial's EM is its rate over the
cases; a cell is the median over trials and their mean. The paper's Table 8 cells are the MEAN
(multiples of 1/(5n)), and its resolver differs: "paper" semantics split texts with split("\n"),
clamp each endpoint on its own, emit nothing for a reversed range (a Python slice) and join lines
with "\n" -- this reproduces Table 8 within trial noise. Each (seed, eps, trial) has its own RNG.
Pure: no torch, no transformers.
"""

from __future__ import annotations

import difflib
import random
from dataclasses import dataclass

from cadedit.bench.corpus import Case
from cadedit.bench.report import median
from cadedit.text.oracle import oracle
from cadedit.text.program import Copy, Op, Program
from cadedit.text.resolve import Bounds, resolve
from typing import Annotated
import typer
from cadedit.bench.options import CorpusOpt, JsonOpt, LimitOpt, int_list
from cadedit.bench.running import out, run_corpora
from cadedit.bench.options import load_corpora
from cadedit.bench.report import fmt_pct

EPSILONS = (0, 1, 2, 3, 5)
SEMANTICS = ("cadedit", "paper")


@dataclass(frozen=True)
class Trial:
    eps: int
    trial: int
    trimmed: int
    exact: int
    n: int


def trial_rng(seed: int, eps: int, trial: int) -> random.Random:
    return random.Random(f"{seed}/{eps}/{trial}")


def run_trial(cases: list[Case], programs: list[Program], eps: int, trial: int, seed: int) -> Trial:
    """One trial at one noise level over all cases."""
    rng = trial_rng(seed, eps, trial)
    trimmed = exact = 0
    for case, program in zip(cases, programs):
        before = case.before_doc
        text = resolve(perturb(program, before.n_lines, eps, rng), before, Bounds.CLIPPED)
        exact += text == case.after
        trimmed += text.strip() == case.after.strip()
    return Trial(eps, trial, trimmed, exact, len(cases))


def oracle_programs(cases: list[Case]) -> list[Program]:
    return [oracle(case.before_doc, case.after_doc) for case in cases]


def paper_program(case: Case) -> list[tuple[int, int] | list[str]]:
    """The paper's oracle over split("\n") lines: (start, end) copies and lists of gen lines."""
    before, after = case.before.split("\n"), case.after.split("\n")
    ops: list[tuple[int, int] | list[str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            ops.append((i1 + 1, i2))
        elif tag in ("replace", "insert"):
            ops.append(after[j1:j2])
    return ops


def paper_resolve(ops: list, before: list[str], eps: int, rng: random.Random) -> str:
    """The paper's resolver under endpoint noise: each endpoint clamped alone, reversed ranges empty."""
    out: list[str] = []
    for op in ops:
        if isinstance(op, list):
            out += op
            continue
        start, end = (min(max(k + rng.randint(-eps, eps), 1), len(before)) for k in op)
        out += before[start - 1 : end]
    return "\n".join(out)


def run_paper_trial(cases: list[Case], programs: list[list], eps: int, trial: int, seed: int) -> Trial:
    """One trial with the paper's line convention and resolver (see the module docstring)."""
    rng = trial_rng(seed, eps, trial)
    trimmed = exact = 0
    for case, ops in zip(cases, programs):
        text = paper_resolve(ops, case.before.split("\n"), eps, rng)
        exact += text == case.after
        trimmed += text.strip() == case.after.strip()
    return Trial(eps, trial, trimmed, exact, len(cases))


def summarize(trials: list[Trial]) -> list[dict]:
    """One row per eps: trimmed and byte EM, median and mean over the trials done so far."""
    rows = []
    for eps in sorted({t.eps for t in trials}):
        done = [t for t in trials if t.eps == eps]
        trimmed = [t.trimmed / t.n for t in done]
        exact = [t.exact / t.n for t in done]
        rows.append(
            {
                "eps": eps,
                "trials": len(done),
                "n": done[0].n,
                "trimmed_median": median(trimmed),
                "trimmed_mean": sum(trimmed) / len(trimmed),
                "exact_median": median(exact),
                "exact_mean": sum(exact) / len(exact),
                "per_trial_trimmed": trimmed,
            }
        )
    return rows


def perturb(program: Program, n_lines: int, eps: int, rng: random.Random) -> Program:
    """Each copy endpoint moved by an integer drawn uniformly from [-eps, eps], clamped to [1, n_lines]."""

    def move(k: int) -> int:
        return min(max(k + rng.randint(-eps, eps), 1), max(n_lines, 1))

    ops: list[Op] = []
    for op in program.ops:
        if isinstance(op, Copy):
            start, end = sorted((move(op.start), move(op.end)))
            op = Copy(start, end)
        ops.append(op)
    return Program(tuple(ops))


def perturb_command(
    corpus: CorpusOpt,
    eps: Annotated[
        str, typer.Option(help="Noise radii: each copy endpoint moves by U[-eps, eps] lines.")
    ] = "0,1,2,3,5",
    trials: Annotated[int, typer.Option(min=1, help="Trials per radius (each over every case).")] = 5,
    seed: Annotated[int, typer.Option(help="Seed; each (seed, eps, trial) has its own RNG.")] = 0,
    semantics: Annotated[
        str,
        typer.Option(
            help="cadedit: its oracle and clipped resolver; paper: the paper's line split and resolver (Table 8)."
        ),
    ] = "cadedit",
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Trimmed exact match of oracle programs under copy-endpoint noise (Table 8).

    Example: cadedit bench perturb -c humanevalfix_python.jsonl --eps 0,1,2 --trials 5 --seed 0
    """

    radii = int_list(eps, "--eps")
    if semantics not in SEMANTICS:
        raise typer.BadParameter(f"use one of {', '.join(SEMANTICS)}", param_hint="--semantics")
    corpora = load_corpora(corpus, limit)
    paper = semantics == "paper"
    programs = {
        name: [paper_program(c) for c in cases] if paper else oracle_programs(cases) for name, cases in corpora.items()
    }
    trial_of = run_paper_trial if paper else run_trial

    def to_json(done: dict[str, list]) -> dict:
        return {
            "command": "perturb",
            "semantics": semantics,
            "seed": seed,
            "trials": trials,
            "corpora": {name: summarize(rows) for name, rows in done.items() if rows},
        }

    work = [(name, (e, t)) for name in corpora for e in radii for t in range(trials)]
    done = run_corpora(
        corpora,
        "perturb",
        lambda name, et: trial_of(corpora[name], programs[name], *et, seed),
        to_json,
        json_path,
        work=work,
    )
    _print_perturb(done, radii, semantics)


def _print_perturb(done: dict[str, list], radii: tuple[int, ...], semantics: str) -> None:

    rows = []
    for name, trials_ in done.items():
        cells = {r["eps"]: r for r in summarize(trials_)}
        rows.append(
            [
                f"{name} ({cells[radii[0]]['n']})",
                *(f"{fmt_pct(cells[e]['trimmed_median'])} ({fmt_pct(cells[e]['trimmed_mean'])})" for e in radii),
            ]
        )
    out.table(
        f"Trimmed EM under endpoint noise, median (mean) over trials, {semantics} semantics",
        ["corpus (n)", *(f"eps={e}" for e in radii)],
        rows,
        caption="The paper's Table 8 cells are means over trials x cases.",
    )
